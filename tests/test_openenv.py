"""The OpenEnv server (``fleet_marl.openenv``) over FastAPI's TestClient: both views for whole
episodes on the WebSocket, RemoteParallelEnv against PettingZoo's API test and against the
local env, session isolation and the session limit, and the documented handling of bad input."""

import json
import sys

import numpy as np
import pytest

pytest.importorskip("openenv")
from fastapi.testclient import TestClient
from pettingzoo.test import parallel_api_test
from starlette.websockets import WebSocketDisconnect

import fleet_marl
from fleet_marl import policies
from fleet_marl.environment import ActionError, scheme_rewards
from fleet_marl.evaluation import run_episode
from fleet_marl.openenv import FleetEgoAction, RemoteParallelEnv, WebSocketSession, make_app
from fleet_marl.openenv.base import task_names
from fleet_marl.openenv.text_action import GROUP_KEYS

GOOD = {
    "request_gpus": 4,
    "bid": "high",
    "batch": 8,
    "precision": {"embed": "bf16", "attn": "bf16", "mlp": "fp8", "norm": "bf16", "head": "bf16"},
}


@pytest.fixture(scope="module")
def multi():
    with TestClient(make_app(mode="multi", max_sessions=3, task="tiny")) as client:
        yield client


@pytest.fixture(scope="module")
def ego():
    with TestClient(make_app(mode="ego", max_sessions=3, task="tiny", max_invalid_streak=3)) as client:
        yield client


def call(ws, type_, data=None):
    ws.send_json({"type": type_, **({"data": data} if data is not None else {})})
    return ws.receive_json()


# --- multi-agent view -----------------------------------------------------------------------------


def test_multi_full_episode_over_the_websocket(multi):
    local = fleet_marl.parallel_env(task="tiny", compute_all=True)
    with multi.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"seed": 5})
        assert r["type"] == "observation"
        o = r["data"]["observation"]
        assert o["config"]["max_cycles"] == 25 and o["round"] == 0 and r["data"]["reward"] == 0.0
        lobs, linfos = local.reset(seed=5)
        assert o["observations"]["tenant_0"] == np.asarray(lobs["tenant_0"], np.float64).tolist()
        assert len(o["action_masks"]["tenant_0"]) == 8
        rounds = 0
        while True:
            acts = {a: local.action_space(a).sample(linfos[a]["action_mask"]) for a in local.agents}
            r = call(ws, "step", {"actions": {a: v.tolist() for a, v in acts.items()}})
            lobs, lrew, lterm, ltrunc, linfos = local.step(acts)
            rounds += 1
            d = r["data"]
            o = d["observation"]
            welfare = next(iter(linfos.values()))["welfare"]
            assert d["reward"] == welfare  # the scalar reward is the global welfare
            assert o["rewards"] == lrew
            assert o["terminations"] == lterm and o["truncations"] == ltrunc
            assert set(o["reward_schemes"]["tenant_0"]) == {"local", "global", "mixed", "difference", "difference_default", "shapley"}
            assert o["reward_schemes"]["tenant_1"] == scheme_rewards(linfos["tenant_1"])
            assert o["state"] == np.asarray(local.state(), np.float64).tolist()
            assert d["done"] == (not local.agents)
            if d["done"]:
                break
        assert rounds == o["round"] == local.round
        assert "episode" in o["infos"]["tenant_0"]
        s = call(ws, "state")["data"]
        assert s["round"] == local.round and s["agents"] == [] and len(s["config_digest"]) == 16
        summary = local.fairness
        assert s["fairness"]["welfare"] == pytest.approx(summary.welfare) and s["fairness"]["jain"] == pytest.approx(summary.jain)
        assert set(s["fairness"]["agents"]) == {"tenant_0", "tenant_1"}


def _remote(client, task="tiny", obs_mode="flat", config=None):
    ws = client.websocket_connect("/ws")
    ws.__enter__()
    return RemoteParallelEnv(WebSocketSession(ws), task=task, obs_mode=obs_mode, config=config), ws


def test_remote_parallel_env_passes_the_pettingzoo_api_test(multi):
    for obs_mode in ("flat", "dict"):
        env, ws = _remote(multi, obs_mode=obs_mode)
        try:
            parallel_api_test(env, num_cycles=30)
        finally:
            env.close()
            ws.__exit__(None, None, None)


@pytest.mark.parametrize("task, policy, obs_mode", [("tiny", "precision_expert", "flat"), ("easy", "bidder", "dict")])
def test_reference_policy_runs_unchanged_remotely_with_the_local_welfare(multi, task, policy, obs_mode):
    env, ws = _remote(multi, task=task, obs_mode=obs_mode, config={"max_cycles": 30})
    try:
        remote = run_episode(env, policies.make(policy, env), seed=11)
    finally:
        env.close()
        ws.__exit__(None, None, None)
    local_env = fleet_marl.parallel_env(task=task, obs_mode=obs_mode, max_cycles=30, compute_all=True)
    local = run_episode(local_env, policies.make(policy, local_env), seed=11)
    assert remote.welfare == local.welfare  # bit for bit across the wire
    assert remote.rounds == local.rounds and remote.agents == local.agents


def test_planner_reads_state_and_masks_remotely(multi):
    env, ws = _remote(multi, config={"max_cycles": 4})
    try:
        remote = run_episode(env, policies.make("planner", env), seed=2)
    finally:
        env.close()
        ws.__exit__(None, None, None)
    local_env = fleet_marl.parallel_env(task="tiny", max_cycles=4, compute_all=True)
    assert remote.welfare == run_episode(local_env, policies.make("planner", local_env), seed=2).welfare


def test_remote_env_wraps_a_client_and_is_not_a_fleet_env(multi):
    from pettingzoo import ParallelEnv

    from fleet_marl.environment import FleetParallelEnv
    from fleet_marl.policies.base import ENV_ATTRIBUTES, fleet_env

    assert not issubclass(RemoteParallelEnv, FleetParallelEnv) and issubclass(RemoteParallelEnv, ParallelEnv)
    env, ws = _remote(multi, task="easy", config={"max_cycles": 5})
    local = fleet_marl.parallel_env(task="easy", max_cycles=5, compute_all=True)
    try:
        assert not isinstance(env, FleetParallelEnv) and isinstance(env.scenario, FleetParallelEnv)
        assert all(hasattr(env, n) for n in ENV_ATTRIBUTES)
        policy = policies.make("bidder", env)
        assert fleet_env(env) is env and policy.env is env  # a policy plays the remote env itself
        # the static parts are the local scenario's, equal to a local env's
        assert env.config == local.config and env.possible_agents == local.possible_agents
        assert np.array_equal(env.bid_levels, local.bid_levels) and np.array_equal(env.nvec, local.nvec)
        assert np.array_equal(env.default_action_index, local.default_action_index)
        assert env.kernel_static.T == local.kernel_static.T and env.last_outcome is None
        obs, infos = env.reset(seed=4)
        lobs, linfos = local.reset(seed=4)
        policy.reset(4)
        lpolicy = policies.make("bidder", local)
        lpolicy.reset(4)
        while env.agents:
            # the remote state vector reads back into the same round as the local one
            seen, lseen = env.observed_round(), local.observed_round()
            assert np.array_equal(seen.live, lseen.live) and np.array_equal(seen.arrivals, lseen.arrivals)
            for f in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left"):
                assert np.array_equal(getattr(seen.state, f), getattr(lseen.state, f)), f
            acts = policy.act(obs, infos)
            for a, x in lpolicy.act(lobs, linfos).items():
                assert np.array_equal(acts[a], x)
            obs, rew, term, trunc, infos = env.step(acts)
            lobs, lrew, lterm, ltrunc, linfos = local.step(acts)
            assert rew == lrew and term == lterm and trunc == ltrunc
        assert env.fairness_report()["welfare"] == pytest.approx(local.fairness.welfare)
        with pytest.raises(NotImplementedError):
            env.render()
    finally:
        env.close()
        ws.__exit__(None, None, None)


@pytest.mark.parametrize(
    "actions, message",
    [
        (
            {"tenant_0": [1, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3], "tenant_9": [0] * 8},
            "tenant_9: agent = 'tenant_9': expected a live agent",
        ),
        ({"tenant_0": [1, 2, 1], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]}, "tenant_0: action.shape = (3,): expected (8,)"),
        (
            {"tenant_0": [1, 2, 1, 1, 1, 1, 1, 30], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]},
            "tenant_0: action[7] (batch_level) = 30: expected an integer in [0, 8]",
        ),
        ({"tenant_0": [1, 2, 1, 1, 1, 1, 1, 3]}, "tenant_1: action = None: expected an action for every live agent; missing tenant_1"),
        (
            {"tenant_0": [1, "a", 1, 1, 1, 1, 1, 3], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]},
            "tenant_0: action = [1, 'a', 1, 1, 1, 1, 1, 3]: expected a list of 8 integers (gpus, bid_level, precision.embedding",
        ),
    ],
)
def test_rejected_multi_step_changes_nothing_and_the_session_survives(multi, actions, message):
    good = {"tenant_0": [3, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [2, 2, 1, 1, 1, 1, 1, 3]}
    with multi.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 9})
        first = call(ws, "step", {"actions": good})["data"]
        err = call(ws, "step", {"actions": actions})
        assert err["type"] == "error" and err["data"]["code"] == "EXECUTION_ERROR"
        assert message in err["data"]["message"]
        assert call(ws, "state")["data"]["round"] == 1
        after = call(ws, "step", {"actions": good})["data"]
    with multi.websocket_connect("/ws") as ws:  # the same two steps without the rejected one in between
        call(ws, "reset", {"seed": 9})
        assert call(ws, "step", {"actions": good})["data"] == first
        assert call(ws, "step", {"actions": good})["data"] == after


def test_remote_env_checks_actions_locally_like_the_env(multi):
    env, ws = _remote(multi)
    try:
        env.reset(seed=0)
        with pytest.raises(ActionError, match="tenant_0: action.shape"):
            env.step({"tenant_0": np.zeros(3, np.int64), "tenant_1": np.zeros(8, np.int64)})
        with pytest.raises(ActionError, match="missing tenant_1"):
            env.step({"tenant_0": np.zeros(8, np.int64)})
        assert env.round == 0
        env.step({a: np.zeros(8, np.int64) for a in env.agents})
        assert env.round == 1 and env.fairness_report()["agents"]["tenant_0"]["service"] >= 0
    finally:
        env.close()
        ws.__exit__(None, None, None)


def test_two_concurrent_sessions_stay_isolated(multi):
    good = {"tenant_0": [3, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [2, 2, 1, 1, 1, 1, 1, 3]}
    with multi.websocket_connect("/ws") as a, multi.websocket_connect("/ws") as b:
        call(a, "reset", {"seed": 1, "config": {"reward_scheme": "global"}})
        call(b, "reset", {"seed": 1})
        for _ in range(3):
            ra = call(a, "step", {"actions": good})["data"]
        rb = call(b, "step", {"actions": good})["data"]
        assert call(a, "state")["data"]["round"] == 3 and call(b, "state")["data"]["round"] == 1
        assert rb["observation"]["round"] == 1 and ra["observation"]["round"] == 3
        assert rb["observation"]["rewards"]["tenant_0"] == rb["observation"]["reward_schemes"]["tenant_0"]["difference"]
        assert ra["observation"]["rewards"]["tenant_0"] == ra["observation"]["reward_schemes"]["tenant_0"]["global"]
        assert call(a, "state")["data"]["config_digest"] != call(b, "state")["data"]["config_digest"]
    with multi.websocket_connect("/ws") as c:  # b's first step, alone
        call(c, "reset", {"seed": 1})
        assert call(c, "step", {"actions": good})["data"] == rb


def test_a_session_beyond_the_limit_is_refused_cleanly():
    with TestClient(make_app(mode="multi", max_sessions=1, task="tiny")) as client:
        with client.websocket_connect("/ws") as first:
            assert call(first, "reset", {"seed": 0})["type"] == "observation"
            with client.websocket_connect("/ws") as second:
                refused = second.receive_json()
                assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED"
                assert refused["data"]["max_sessions"] == 1
                with pytest.raises(WebSocketDisconnect):
                    second.receive_json()
            assert call(first, "state")["data"]["round"] == 0  # the first session is untouched
        with client.websocket_connect("/ws") as third:  # the slot is free again
            assert call(third, "reset", {"seed": 0})["type"] == "observation"


def test_reset_options_task_api_and_bad_reset(multi):
    r = multi.get("/fleet_marl/splits")
    assert r.status_code == 200 and r.json() == [{"name": "train", "type": "train"}]
    tasks = multi.post("/fleet_marl/tasks", json={"split": "train"}).json()["tasks"]
    assert [t["id"] for t in tasks] == list(task_names())
    assert multi.post("/fleet_marl/num_tasks", json={"split": "train"}).json() == {"num_tasks": len(task_names())}
    assert multi.post("/fleet_marl/task", json={"split": "train", "index": 1}).json()["task"]["id"] == "easy"
    assert multi.post("/fleet_marl/task", json={"split": "train", "index": 99}).status_code == 400
    with multi.websocket_connect("/ws") as ws:
        o = call(ws, "reset", {"seed": 0, "split": "train", "index": 1})["data"]["observation"]
        assert o["task"] == "easy" and len(o["possible_agents"]) == 4
        err = call(ws, "reset", {"seed": 0, "config": {"rack_cap": 1}})
        assert err["type"] == "error" and "rack_cap" in err["data"]["message"]
        err = call(ws, "reset", {"task": "huge"})
        assert err["type"] == "error" and "task = 'huge': expected one of tiny, easy" in err["data"]["message"]
        o = call(ws, "reset", {"seed": 0, "config": {"max_cycles": 7}})["data"]["observation"]
        assert o["config"]["max_cycles"] == 7 and o["task"] == "tiny"


def test_http_endpoints_and_schema(multi):
    assert multi.get("/health").json()["status"] == "healthy"
    schema = multi.get("/schema").json()
    assert "actions" in schema["action"]["properties"] and "reward_schemes" in schema["observation"]["properties"]
    r = multi.post("/reset", json={"seed": 0})
    assert r.status_code == 200 and r.json()["observation"]["round"] == 0


# --- single-tenant (ego) view -----------------------------------------------------------------------


def _ego_step(ws, text):
    r = call(ws, "step", {"text": text})
    assert r["type"] == "observation", r
    return r["data"]


def test_ego_full_episode_with_a_scripted_llm(ego):
    with ego.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"seed": 3, "ego": "tenant_1", "opponents": "fair_share"})["data"]
        o = r["observation"]
        assert o["ego"] == "tenant_1" and o["round"] == 0 and r["done"] is False
        assert "You are tenant_1" in o["prompt"] and '"additionalProperties": false' in o["prompt"]
        assert o["action_schema"]["required"] == ["request_gpus", "bid", "batch", "precision"]
        assert o["tenant"]["budget_left_usd"] == 23.0 and f"${o['tenant']['budget_left_usd']:.2f} left" in o["prompt"]
        rounds, total = 0, 0.0
        while not r["done"]:
            text = "Here is my plan:\n```json\n" + json.dumps({**GOOD, "request_gpus": 4}) + "\n```"
            r = _ego_step(ws, text)
            o = r["observation"]
            rounds += 1
            total += r["reward"]
            assert o["last_action_error"] is None and o["invalid_actions"] == 0
            assert r["reward"] == o["metadata"]["rewards"][o["metadata"]["scheme"]]
            assert o["last_action"] == GOOD
        assert rounds == o["round"]
        assert o["metadata"]["terminated"] or o["metadata"]["truncated"]
        assert "episode" in o["metadata"]
        s = call(ws, "state")["data"]
        assert s["ego"] == "tenant_1" and s["mode"] == "ego" and s["invalid_actions"] == 0
        err = call(ws, "step", {"text": json.dumps(GOOD)})
        assert err["type"] == "error" and "the episode is over" in err["data"]["message"]


def test_ego_prompt_is_deterministic_and_the_opponents_follow_config(ego):
    prompts = []
    for _ in range(2):
        with ego.websocket_connect("/ws") as ws:
            call(ws, "reset", {"seed": 4})
            prompts.append(_ego_step(ws, json.dumps(GOOD))["observation"]["prompt"])
    assert prompts[0] == prompts[1] and "Last round: asked 4" in prompts[0]
    # the opponents are the named reference policy: tenant_1 plays greedy's action, as locally
    env = fleet_marl.parallel_env(task="tiny", compute_all=True)
    obs, infos = env.reset(seed=4)
    pol = policies.make("greedy", env)
    pol.reset(4)
    want = pol.act(obs, infos)["tenant_1"]
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 4, "opponents": "greedy"})
        o = _ego_step(ws, json.dumps(GOOD))["observation"]
    infos = env.step({"tenant_0": np.array([4, 3, 1, 1, 2, 1, 1, 3]), "tenant_1": want})[4]  # GOOD as indices
    assert o["metadata"]["welfare"] == infos["tenant_0"]["welfare"]
    assert o["metadata"]["rewards"] == scheme_rewards(infos["tenant_0"])
    granted = {r["agent"]: r["granted_gpus"] for r in o["cluster"]["others"]}
    assert granted == {"tenant_1": infos["tenant_1"]["alloc"]}


BAD = [
    ("malformed JSON", '{"request_gpus": 4, "bid": ', "input: invalid JSON at line 1 column 28: Expecting value"),
    (
        "unknown field",
        json.dumps({**GOOD, "priority": "max"}),
        "priority: unknown field; expected only request_gpus, bid, batch, precision",
    ),
    ("out of range", json.dumps({**GOOD, "request_gpus": 12}), "request_gpus = 12: expected an integer in [0, 8]"),
    (
        "masked choice",
        json.dumps({**GOOD, "precision": {**GOOD["precision"], "mlp": "int4"}}),
        "precision.mlp = 'int4': expected one of fp32, bf16, fp8 (masked: the tenant's GPU or job kind forbids it)",
    ),
    ("oversized", json.dumps(GOOD) + "x" * 70_000, f"input: {len(json.dumps(GOOD)) + 70_000} characters; expected at most 65536"),
]


@pytest.mark.parametrize("name, text, error", BAD, ids=[b[0] for b in BAD])
def test_ego_invalid_answer_gets_fallback_penalty_and_error_and_the_session_survives(ego, name, text, error):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 2, "fallback": "default", "invalid_penalty": 0.25})
        r = _ego_step(ws, text)
        o = r["observation"]
        assert o["last_action_error"] == error
        assert o["invalid_actions"] == 1 and o["invalid_streak"] == 1 and r["done"] is False
        assert r["reward"] == pytest.approx(o["metadata"]["rewards"][o["metadata"]["scheme"]] - 0.25)
        assert o["metadata"]["penalty"] == 0.25
        assert "Your last answer was rejected (" + error + ")" in o["prompt"]
        env = fleet_marl.parallel_env(task="tiny", compute_all=True)
        default = env.default_action_index[0]
        assert o["last_action"]["request_gpus"] == int(default[0])  # the env's default action ran
        assert o["last_action"]["precision"] == dict.fromkeys(GROUP_KEYS, "bf16")
        r = _ego_step(ws, json.dumps(GOOD))  # still alive; a valid answer clears the streak
        assert r["observation"]["last_action_error"] is None and r["observation"]["invalid_streak"] == 0
        assert r["observation"]["invalid_actions"] == 1 and r["observation"]["round"] == 2


def test_ego_truncates_after_k_invalid_answers_in_a_row(ego):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0, "max_invalid_streak": 2, "fallback": "idle"})
        r = _ego_step(ws, "I would rather not answer.")
        assert not r["done"] and r["observation"]["last_action"]["request_gpus"] == 0  # idle: no GPU
        r = _ego_step(ws, "still no")
        assert r["done"] and r["observation"]["metadata"]["truncated_by_invalid"]
        assert r["observation"]["invalid_actions"] == 2
        assert call(ws, "reset", {"seed": 0})["type"] == "observation"  # a new episode after truncation


def test_ego_reward_follows_the_configured_scheme_and_random_ego(ego):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 1, "config": {"reward_scheme": "global"}})
        r = _ego_step(ws, json.dumps(GOOD))
        assert r["observation"]["metadata"]["scheme"] == "global"
        assert r["reward"] == r["observation"]["metadata"]["rewards"]["global"] == r["observation"]["metadata"]["welfare"]
        egos = {call(ws, "reset", {"seed": s, "ego": "random"})["data"]["observation"]["ego"] for s in range(8)}
        assert egos == {"tenant_0", "tenant_1"}
        for bad, msg in [
            ({"ego": "tenant_7"}, "ego = 'tenant_7'"),
            ({"opponents": "oracle"}, "opponents = 'oracle'"),
            ({"invalid_penalty": -1}, "invalid_penalty = -1"),
            ({"colour": 1}, "unknown argument 'colour'"),
        ]:
            err = call(ws, "reset", {"seed": 1, **bad})
            assert err["type"] == "error" and msg in err["data"]["message"]
        assert call(ws, "reset", {"seed": 1})["type"] == "observation"


def test_ego_session_with_the_python_session_object(ego):
    with ego.websocket_connect("/ws") as ws:
        s = WebSocketSession(ws, mode="ego")
        first = s.reset(seed=0, task="easy")
        assert first.observation.tenant["kind"] == "train" and first.observation.cluster["tenants"] == 4
        step = s.step(FleetEgoAction(text=json.dumps(GOOD)))
        assert step.observation.round == 1 and step.reward == step.observation.reward
        assert s.state().task == "easy"
        with pytest.raises(RuntimeError, match="code: VALIDATION_ERROR"):
            s.step({"text": "x", "temperature": 1})  # the action model forbids unknown fields
        assert s.state().round == 1


def test_llm_agent_example_runs_a_grpo_group(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "llm_agent.py"
    spec = importlib.util.spec_from_file_location("llm_agent", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("llm_agent", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    assert mod.main(["--prompts", "1", "--group", "3", "--rounds", "4"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.strip().splitlines()[1:]]
    assert len(rows) == 3 and all(r[3] == "4" for r in rows)  # 3 samples of 4 turns
    adv = [float(r[6]) for r in rows]
    assert abs(sum(adv)) < 1e-3  # group-relative advantages sum to zero
    assert mod.advantages([1.0, 3.0]) == pytest.approx([-1.0, 1.0], abs=1e-5)


@pytest.mark.slow
def test_space_app_and_manifest():
    import subprocess
    from pathlib import Path

    from fleet_marl.openenv.space import app_from_env

    with TestClient(app_from_env({"FLEET_MARL_MODE": "multi", "FLEET_MARL_TASK": "tiny"})) as c, c.websocket_connect("/ws") as ws:
        assert call(ws, "reset", {"seed": 0})["data"]["observation"]["task"] == "tiny"
    with TestClient(app_from_env({"FLEET_MARL_MODE": "ego", "FLEET_MARL_OPPONENTS": "bidder"})) as c, c.websocket_connect("/ws") as ws:
        assert "You are tenant_0" in call(ws, "reset", {"seed": 0})["data"]["observation"]["prompt"]
    root = Path(__file__).resolve().parents[1]
    cli = Path(sys.executable).parent / "openenv"
    r = subprocess.run([str(cli), "validate", str(root), "--level", "static", "--skip-build"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "PASS  static.manifest" in r.stdout, r.stdout + r.stderr
    manifest = (root / "openenv.yaml").read_text()
    assert "fleet_marl.openenv.space:app" in manifest
    from importlib.metadata import version

    from fleet_marl.tasks import TASKS

    assert f"version: {version('fleet-marl')}\n" in manifest  # the manifest follows pyproject.toml
    assert f"train: {len(TASKS)}\n" in manifest  # declared_task_count: the task API lists the registry


def test_ego_switching_tasks_rebinds_the_opponents(ego):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0, "task": "tiny"})
        _ego_step(ws, json.dumps(GOOD))
        o = call(ws, "reset", {"seed": 0, "task": "easy"})["data"]["observation"]
        assert o["cluster"]["tenants"] == 4
        o = _ego_step(ws, json.dumps(GOOD))["observation"]
        assert [r["agent"] for r in o["cluster"]["others"]] == ["tenant_1", "tenant_2", "tenant_3"]
        assert sum(r["granted_gpus"] for r in o["cluster"]["others"]) > 0  # the opponents played
        assert o["tenant"]["workload"]["job_tokens_left"] <= o["tenant"]["workload"]["job_tokens"]


def test_ego_under_the_sequential_protocol_sees_the_claims_before_its_turn(ego):
    """config protocol='sequential': the opponents before the ego claim first and the prompt
    lists their claims; the round clears after the last claim, with the simultaneous round's
    rewards for the same joint action. The multi view (a ParallelEnv) refuses the protocol."""
    seq_config = {"protocol": "sequential", "turn_order": "fixed"}
    env = fleet_marl.parallel_env(task="tiny", compute_all=True)
    obs, infos = env.reset(seed=4)
    pol = policies.make("greedy", env)
    pol.reset(4)
    greedy0 = pol.act(obs, infos)["tenant_0"]
    with ego.websocket_connect("/ws") as ws:
        o = call(ws, "reset", {"seed": 4, "ego": "tenant_1", "opponents": "greedy", "config": seq_config})["data"]["observation"]
        assert o["cluster"]["turn"]["position"] == 2 and o["cluster"]["turn"]["after"] == []
        assert o["cluster"]["turn"]["claims_before"] == [
            {"agent": "tenant_0", "gpu_type": "h100-sxm", "gpus": int(greedy0[0]), "bid": float(env.bid_levels[greedy0[1]])}
        ]
        assert f"- tenant_0 asked for {int(greedy0[0])} h100-sxm GPU(s) at x{env.bid_levels[greedy0[1]]:g} list price." in o["prompt"]
        assert "you claim 2 of 2" in o["prompt"] and "Still to claim after you: nobody." in o["prompt"]
        r = _ego_step(ws, json.dumps(GOOD))
        infos = env.step({"tenant_0": greedy0, "tenant_1": np.array([4, 3, 1, 1, 2, 1, 1, 3])})[4]  # GOOD as indices
        assert r["observation"]["metadata"]["rewards"] == scheme_rewards(infos["tenant_1"])
        assert r["observation"]["round"] == 1 and "## This round's claims so far" in r["observation"]["prompt"]
        first = call(ws, "reset", {"seed": 4, "ego": "tenant_0", "config": seq_config})["data"]["observation"]
        assert "Nobody has claimed yet: you are first." in first["prompt"] and first["cluster"]["turn"]["after"] == ["tenant_1"]
        plain = call(ws, "reset", {"seed": 4, "ego": "tenant_0"})["data"]["observation"]
        assert "turn" not in plain["cluster"] and "claims so far" not in plain["prompt"]
    with TestClient(make_app(mode="multi", max_sessions=1, task="tiny")) as client, client.websocket_connect("/ws") as ws:
        err = call(ws, "reset", {"seed": 0, "config": seq_config})
        assert (
            err["type"] == "error" and "protocol = 'sequential'" in err["data"]["message"] and "fleet_marl.env(" in err["data"]["message"]
        )


@pytest.mark.parametrize("mechanism", ["proportional", "auction"])
def test_the_ego_prompt_reads_the_arbiters_rules_from_the_mechanism_registry(mechanism):
    """The prompt says how the arbiter clears and what a GPU costs at each bid from the
    registered mechanism (fleet_marl.config.mechanisms), not from a name the prompt knows."""
    from fleet_marl.config.mechanisms import REGISTRY
    from fleet_marl.openenv.prompt import describe, render_prompt

    env = fleet_marl.parallel_env(task="tiny", arbiter={"mechanism": mechanism, "reserve_price": 0.75}, compute_all=True)
    obs, infos = env.reset(seed=1)
    tenant, cluster, legal = describe(env, "tenant_0", obs["tenant_0"], infos["tenant_0"])
    text = render_prompt(tenant, cluster, legal, {}, None, None)
    m = REGISTRY[mechanism]
    assert f"- Arbiter: {m.summary(0.75)}" in text
    assert cluster["pays"] == m.pays
    assert legal["most_paid_multipliers"] == [m.price_at_most(b) for b in env.bid_levels]
    if mechanism == "auction":  # a reserve: the lowest winning bid is named, the levels below it win nothing
        assert cluster["reserve_price"] == 0.75 and f"bids below {legal['lowest_winning_bid']} get nothing" in text
    else:  # pay-your-bid: no reserve, a GPU costs at most the bid
        assert cluster["reserve_price"] is None and "get nothing" not in text
        assert legal["most_paid_multipliers"] == [float(b) for b in env.bid_levels]

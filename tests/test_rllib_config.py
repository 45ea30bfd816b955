"""The RLlib layer without Ray running: the env wrapper, configs, YAML files, checkpoints'
sidecars and the CLI's errors (all raised before Ray starts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from fleet_marl.rllib.config import TrainConfig, TrainConfigError, check_signature
from fleet_marl.rllib.env import FleetRLlibEnv
from fleet_marl.rllib.sharing import KindMapping, mapping_for, module_ids

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


# --- the env wrapper -----------------------------------------------------------------------------


def test_wrapper_spaces_and_flat_mask_layout():
    env = FleetRLlibEnv({"task": "easy"})
    obs, infos = env.reset(seed=3)
    assert env.agents == env.possible_agents == [f"tenant_{i}" for i in range(4)]
    pe = env.par_env
    for a in env.agents:
        assert env.observation_spaces[a].contains(obs[a])
        want = np.concatenate([np.asarray(m, np.float32) for m in pe.action_mask(a)])
        np.testing.assert_array_equal(obs[a]["action_mask"], want)  # nvec is uniform on easy: no padding
        np.testing.assert_array_equal(obs[a]["observations"], pe._obs_matrix()[pe.agent_index[a]].astype(np.float32))
        assert "action_mask" not in infos[a]


def test_wrapper_pads_heterogeneous_nvec():
    # tenant 0 may ask for 16 GPUs, the others for 8: one common space, padded choices masked
    import dataclasses

    from fleet_marl.tasks import make_config

    cfg, _ = make_config("easy")
    tenants = list(cfg.tenants)
    tenants[0] = dataclasses.replace(tenants[0], max_gpus=16)
    env = FleetRLlibEnv({"config": dataclasses.replace(cfg, tenants=tuple(tenants))})
    obs, _ = env.reset(seed=0)
    assert env.nvec_max[0] == 17 and len({str(s) for s in env.action_spaces.values()}) == 1
    m1 = obs["tenant_1"]["action_mask"][:17]
    assert m1[9:].sum() == 0 and m1[:9].sum() > 0
    # an out-of-range choice (unmasked play) is clipped to the agent's own range
    act = {a: env.action_spaces[a].sample() for a in env.agents}
    act["tenant_1"][0] = 16
    env.step(act)
    assert env.par_env.last_outcome.requested[1] <= 8


def test_wrapper_full_episode_with_masked_sampling_is_legal_and_ends_with_all():
    env = FleetRLlibEnv({"task": "easy", "max_cycles": 30})
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        acts = {}
        for a in env.agents:
            m = obs[a]["action_mask"]
            acts[a] = np.array([rng.choice(np.flatnonzero(m[o : o + n])) for o, n in zip(env._offsets[:-1], env.nvec_max, strict=False)])
        obs, _rew, term, trunc, infos = env.step(acts)
        steps += 1
        assert all(not i["illegal"] for i in infos.values())
        if term["__all__"] or trunc["__all__"]:
            break
        assert env.agents
    assert steps == 30 and not env.agents and trunc["__all__"] and not term["__all__"]


def test_wrapper_mixed_terminated_and_truncated_ending_sets_all():
    """RLlib's ParallelPettingZooEnv leaves __all__ False here and then steps an empty env."""
    env = FleetRLlibEnv({"task": "tiny"})
    env.reset(seed=0)
    o = np.zeros(34, np.float32)
    mask = tuple(np.ones(n, np.int8) for n in env.nvec_max)

    class Ending:  # the last two agents end together, one broke (terminated), one at the horizon
        agents: ClassVar[list] = []

        def step(self, actions):
            return (
                dict.fromkeys(actions, o),
                dict.fromkeys(actions, 0.0),
                {"tenant_0": True, "tenant_1": False},
                {"tenant_0": False, "tenant_1": True},
                {a: {"action_mask": mask} for a in actions},
            )

    env.par_env = Ending()
    _, _, term, trunc, _ = env.step({"tenant_0": np.zeros(8, int), "tenant_1": np.zeros(8, int)})
    assert term["__all__"] or trunc["__all__"]


def test_episode_metrics_come_from_the_fairness_summary():
    """FleetCallbacks.on_episode_end, without Ray running: what it logs is the env's fairness
    summary (and the masked choices of the episode's infos), reduced over the tenants."""
    from types import SimpleNamespace

    from fleet_marl.rllib.callbacks import EPISODE_METRICS, FleetCallbacks

    env = FleetRLlibEnv({"task": "easy", "max_cycles": 12})
    env.reset(seed=4)
    pe = env.par_env
    rng = np.random.default_rng(0)
    while env.agents:  # random legal play, so some events happen
        env.step({a: np.array([rng.choice(np.flatnonzero(m)) for m in pe.action_mask(a)]) for a in env.agents})
    logged = {}
    logger = SimpleNamespace(log_value=lambda key, value, reduce: logged.__setitem__(key, (value, reduce)))
    infos = [{"illegal": True}, {"illegal": False}, {}]
    episode = SimpleNamespace(agent_episodes={"tenant_0": SimpleNamespace(get_infos=lambda: infos)})
    FleetCallbacks().on_episode_end(episode=episode, metrics_logger=logger, env=SimpleNamespace(envs=[env]), env_index=0)
    s = pe.fairness
    assert set(logged) == {f"fleet/{m}" for m in EPISODE_METRICS}
    assert logged["fleet/welfare"] == (s.welfare, "mean") and logged["fleet/jain"] == (s.jain, "mean")
    assert logged["fleet/max_starvation_streak"] == (int(s.max_streak.max()), "max")
    assert logged["fleet/starvation_events"] == (int(s.starvation_events.sum()), "mean")
    for k in ("oom", "veto", "throttle", "degenerate"):
        assert logged[f"fleet/{k}"] == (int(s.counts[k].sum()), "mean")
    assert logged["fleet/illegal"] == (1, "mean")


def test_wrapper_render_works():
    env = FleetRLlibEnv({"task": "tiny", "render_mode": "ansi"})
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "tenant_0" in text


def test_wrapper_state_and_flat_modes():
    env = FleetRLlibEnv({"task": "easy", "with_state": True})
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["tenant_2"]["state"], env.par_env.state())
    flat = FleetRLlibEnv({"task": "easy"}, obs_mode="flat")
    obs, _ = flat.reset(seed=0)
    assert obs["tenant_0"].shape == (34,) and flat.observation_spaces["tenant_0"].contains(obs["tenant_0"])
    with pytest.raises(ValueError, match="with_state = True needs obs_mode = 'dict'"):
        FleetRLlibEnv({"task": "easy", "with_state": True}, obs_mode="flat")
    with pytest.raises(ValueError, match="obs_mode = 'box'"):
        FleetRLlibEnv({"task": "easy", "obs_mode": "box"})


def test_wrapper_seeding_mixes_the_worker_index():
    class Ctx(dict):
        worker_index = 0

    def first_obs(worker, seed):
        c = Ctx(task="easy")
        c.worker_index = worker
        env = FleetRLlibEnv(c)
        env.reset(seed=seed)
        out = []
        for _ in range(5):  # the arrivals differ by seed; compare a few rounds of the state
            _o, *_ = env.step({a: env.par_env.default_action_index[i] for i, a in enumerate(env.agents)})
            out.append(env.par_env.state())
        return np.concatenate(out)

    np.testing.assert_array_equal(first_obs(1, 5), first_obs(1, 5))
    # RLlib seeds runner w, sub-env i with seed + w + i: (w=1, i=1) and (w=2, i=0) both get 7
    assert not np.array_equal(first_obs(1, 7), first_obs(2, 7))


# --- sharing and configs --------------------------------------------------------------------------


def test_sharing_module_ids_and_mappings():
    agents = ["tenant_0", "tenant_1", "tenant_2"]
    kinds = {"tenant_0": "train", "tenant_1": "serve", "tenant_2": "train"}
    assert module_ids("shared", agents, kinds) == ["shared"] == module_ids("mappo", agents, kinds)
    assert module_ids("per_tenant", agents, kinds) == agents
    assert module_ids("per_kind", agents, kinds) == ["train", "serve"]
    assert module_ids("per_kind", agents[:1], {"tenant_0": "train"}) == ["train"]  # tiny: trainers only
    assert mapping_for("per_kind", agents, kinds)("tenant_1", None, worker=None) == "serve"
    assert mapping_for("per_tenant", agents, kinds)("tenant_2") == "tenant_2"
    assert mapping_for("shared", agents, kinds)("tenant_2", object()) == "shared"
    import pickle

    assert pickle.loads(pickle.dumps(KindMapping(kinds))) == KindMapping(kinds)


def test_every_shipped_config_loads_and_matches_its_generator():
    files = sorted((ROOT / "experiments" / "configs").glob("*.yaml"))
    grid = [f for f in files if not f.stem.endswith("_15min")]
    assert len(grid) == 3 * 4 * 6
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "make_configs.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    seen = set()
    for f in grid:
        tc = TrainConfig.from_yaml(f)
        assert f.stem == f"{tc.task}_{tc.sharing}_{tc.reward_scheme}"
        seen.add((tc.task, tc.sharing, tc.reward_scheme))
    assert len(seen) == 72
    # the 15-minute runs of RLlib's learned rows: one per task that has one, stopped by max_minutes at 15
    timed = {f.stem: TrainConfig.from_yaml(f) for f in files if f.stem.endswith("_15min")}
    assert sorted(timed) == ["easy_15min", "medium_15min"]
    for stem, tc in timed.items():
        assert tc.task == stem.removesuffix("_15min") and tc.max_minutes == 15.0 and tc.sharing == "shared"
        assert tc.iterations * tc.train_batch_size >= 4_000_000  # iterations is only an upper bound: the cap stops the run


@pytest.mark.parametrize(
    "data, match",
    [
        ({"tsk": "easy"}, r"unknown key 'tsk'; valid keys: task, reward_scheme"),
        ({"reward_scheme": "selfish"}, r"reward_scheme = 'selfish': expected one of local, global, mixed"),
        ({"sharing": "everyone"}, r"sharing = 'everyone': expected one of shared, per_tenant, per_kind, mappo"),
        ({"task": "huge"}, r"task = 'huge': expected one of tiny, easy"),
        ({"sharing": "mappo", "obs_mode": "flat"}, r"obs_mode = 'flat': expected 'dict' with sharing 'mappo'"),
        ({"iterations": 0}, r"iterations = 0: expected an integer >= 1"),
        ({"minibatch_size": 5000}, r"minibatch_size = 5000: expected at most train_batch_size"),
        ({"lr": -1}, r"lr = -1: expected a number"),
        ({"max_minutes": -1}, r"max_minutes = -1: expected a number in \[0.0, 1000000.0\]"),
        ({"hidden": []}, r"hidden = \[\]: expected a non-empty list"),
        ({"env": {"arbiter": {"mechanism": "lottery"}}}, r"env = .*lottery"),
        ({"env": {"task": "hard"}}, r"env.task is set by the top-level key"),
    ],
)
def test_bad_configs_name_the_field(data, match):
    with pytest.raises(TrainConfigError, match=match):
        TrainConfig.from_dict(data, source="my.yaml")


def test_yaml_errors(tmp_path):
    with pytest.raises(TrainConfigError, match=r"--config '.*nope.yaml': no such file; the configs that ship are in experiments/configs/"):
        TrainConfig.from_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: [easy\n")
    with pytest.raises(TrainConfigError, match="not valid YAML"):
        TrainConfig.from_yaml(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text("task: tiny\nlambda: 0.9\nenv: {max_cycles: 10}\n")
    tc = TrainConfig.from_yaml(ok)
    assert tc.task == "tiny" and tc.lambda_ == 0.9 and tc.probe().max_cycles == 10


def _fake_checkpoint(tmp_path: Path, tc: TrainConfig, iteration: int = 2) -> Path:
    ck = tmp_path / "run" / "checkpoint"
    ck.mkdir(parents=True)
    (ck / "fleet_marl.json").write_text(json.dumps({"signature": tc.signature(), "train_config": tc.to_dict(), "iteration": iteration}))
    return ck


def test_checkpoint_from_another_env_is_refused(tmp_path):
    ck = _fake_checkpoint(tmp_path, TrainConfig(task="tiny"))
    meta = json.loads((ck / "fleet_marl.json").read_text())
    check_signature(meta, TrainConfig(task="tiny", reward_scheme="global"), str(ck))  # the reward may change
    with pytest.raises(TrainConfigError, match=r"possible_agents = \['tenant_0', 'tenant_1'\] \(trained on task 'tiny'\).*task 'easy'"):
        check_signature(meta, TrainConfig(task="easy"), str(ck))
    with pytest.raises(TrainConfigError, match=r"sharing = 'shared'.*'per_tenant'"):
        check_signature(meta, TrainConfig(task="tiny", sharing="per_tenant"), str(ck))


def _cli(args, monkeypatch, capsys):
    """Run ``fleet-marl train`` in-process through its command module (the train entry of the
    CLI's table, on a parser of its own); starting Ray is an error here (the checks come first)."""
    import argparse

    from fleet_marl.rllib import command
    from fleet_marl.rllib import train as train_mod

    def no_ray(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(train_mod, "init_ray", no_ray)
    assert args[0] == "train"
    parser = argparse.ArgumentParser(prog="fleet-marl train", epilog=command.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_arguments(parser)
    code = command.run(parser.parse_args(args[1:]))
    return code, capsys.readouterr().err


def test_cli_errors_come_before_ray(tmp_path, monkeypatch, capsys):
    code, err = _cli(["train", "--config", str(tmp_path / "missing.yaml")], monkeypatch, capsys)
    assert code == 2 and "no such file" in err and "fleet-marl train --help" in err
    y = tmp_path / "x.yaml"
    y.write_text("task: easy\nbatch: 3\n")
    code, err = _cli(["train", "--config", str(y)], monkeypatch, capsys)
    assert code == 2 and "unknown key 'batch'" in err
    code, err = _cli(["train", "--reward-scheme", "selfish"], monkeypatch, capsys)
    assert code == 2 and "reward_scheme = 'selfish'" in err
    code, err = _cli(["train", "--sharing", "all"], monkeypatch, capsys)
    assert code == 2 and "sharing = 'all'" in err
    ck = _fake_checkpoint(tmp_path, TrainConfig(task="tiny", iterations=2))
    code, err = _cli(["train", "--resume", str(ck.parent), "--task", "easy", "--iterations", "5"], monkeypatch, capsys)
    assert code == 2 and "trained on task 'tiny'" in err
    code, err = _cli(["train", "--resume", str(ck.parent)], monkeypatch, capsys)
    assert code == 2 and "already trained 2 iterations" in err
    code, err = _cli(["train", "--resume", str(tmp_path)], monkeypatch, capsys)
    assert code == 2 and "no fleet_marl.json" in err
    code, err = _cli(["train", "--num-env-runners", "64", "--out", str(tmp_path)], monkeypatch, capsys)
    assert code == 2 and "--num-env-runners 64: this machine has" in err


def test_config_by_name_resolves_in_the_checkout():
    from fleet_marl.rllib.command import config_path

    assert config_path("medium_per_kind_difference") == ROOT / "experiments" / "configs" / "medium_per_kind_difference.yaml"


def test_cli_parser_does_not_import_ray():
    code = "import sys; from fleet_marl.cli import build_parser; build_parser(); print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_train_help_has_examples():
    out = subprocess.run([sys.executable, "-m", "fleet_marl.cli", "train", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--config", "--address", "--num-env-runners", "--resume", "--iterations", "--task", "--reward-scheme", "--sharing"):
        assert flag in out
    assert "examples:" in out and "ray start --head" in out and "fleet-marl train --engine rllib --address auto" in out


def test_register_names_both_obs_modes():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from fleet_marl.rllib.env import ENV_NAMES, register

    register()
    d = _global_registry.get(ENV_CREATOR, ENV_NAMES["dict"])({"task": "tiny"})
    f = _global_registry.get(ENV_CREATOR, ENV_NAMES["flat"])({"task": "tiny"})
    assert (d.obs_mode, f.obs_mode) == ("dict", "flat")
    assert set(d.observation_spaces["tenant_0"].spaces) == {"observations", "action_mask"}
    assert f.observation_spaces["tenant_0"].shape == (34,)


def test_flatten_keeps_finite_numbers_and_averages_the_learners():
    from fleet_marl.rllib.train import COLUMNS, flatten, row_of

    nan = float("nan")
    result = {
        "training_iteration": 3,
        "num_env_steps_sampled_lifetime": 6000.0,
        "config": {"lr": 1.0},
        "env_runners": {"fleet/welfare": 12.5, "fleet/jain": nan, "episode_return_mean": np.float32(2.0)},
        "learners": {
            "train": {"vf_loss": 1.0, "entropy": nan},
            "serve": {"vf_loss": 3.0, "entropy": 4.0},
            "__all_modules__": {"vf_loss": 99.0},
        },
    }
    flat = flatten(result)
    assert all(np.isfinite(v) for v in flat.values())
    assert flat["learners/__mean__/vf_loss"] == 2.0 and flat["learners/__mean__/entropy"] == 4.0
    assert "env_runners/fleet/jain" not in flat and "config/lr" not in flat
    row = row_of(flat)
    assert list(row) == [c for c, _ in COLUMNS]
    assert row["iteration"] == 3 and row["env_steps"] == 6000 and row["welfare"] == 12.5 and row["jain"] == "" and row["vf_loss"] == 2.0


def test_a_checkpoint_is_graded_only_on_the_scenario_it_learned(tmp_path):
    import fleet_marl
    from fleet_marl.evaluation import PolicyError, load_policy

    ck = _fake_checkpoint(tmp_path, TrainConfig(task="tiny", env={"max_cycles": 10}))
    with pytest.raises(PolicyError, match=r"env overrides \{'max_cycles': 10\}.*overrides=\{'max_cycles': 10\}"):
        load_policy(str(ck.parent), fleet_marl.parallel_env(task="tiny"))
    with pytest.raises(PolicyError, match="trained on task 'tiny'"):
        load_policy(str(ck.parent), fleet_marl.parallel_env(task="easy"))


def test_cli_refuses_resume_with_overwrite(tmp_path, monkeypatch, capsys):
    ck = _fake_checkpoint(tmp_path, TrainConfig(task="tiny", iterations=2))
    code, err = _cli(["train", "--resume", str(ck.parent), "--overwrite", "--iterations", "4"], monkeypatch, capsys)
    assert code == 2 and "pick one" in err
    code, err = _cli(["train", "--task", "tiny", "--out", str(tmp_path), "--name", "run"], monkeypatch, capsys)
    assert code == 2 and "already holds a run" in err and "--overwrite" in err


# --- the sequential protocol: RLlib's turn-based MultiAgentEnv -----------------------------------


def _broke_easy(**kw) -> dict:
    """easy with budgets so small that tenants go broke (terminated) at different rounds."""
    from fleet_marl.tasks import task_dict

    d = task_dict("easy")
    for i, t in enumerate(d["tenants"]):
        t["budget"] *= 0.01 * (i + 1)
    return dict(task="easy", tenants=d["tenants"], protocol="sequential", compute_all=False, **kw)


@pytest.mark.parametrize("turn_order, seed", [("rotating", 0), ("random", 5), ("priority", 2)])
def test_sequential_wrapper_is_turn_based_and_credits_the_aec_rewards(turn_order, seed):
    """Against the AEC env played with the same seed and actions: reset() and every step()
    return the observation of the tenant whose turn it is and nobody else's (plus one last
    observation, with its flag, for each tenant that finished); each reward handed out is what
    the AEC env's last() gives that tenant on that turn, so per tenant they sum to its
    cumulative AEC reward; no data after a tenant finished; __all__ on the last step only."""
    import fleet_marl

    kw = _broke_easy(turn_order=turn_order)
    env = FleetRLlibEnv(dict(kw))
    ref = fleet_marl.env(**kw)  # flat observations: the 40 features
    obs, infos = env.reset(seed=seed)
    ref.reset(seed=int(np.random.SeedSequence([seed, 0]).generate_state(1)[0]))  # the wrapper's seed (worker index 0)
    credited = dict.fromkeys(env.possible_agents, 0.0)
    expected = dict.fromkeys(env.possible_agents, 0.0)
    finished: dict[str, str] = {}

    def advance():
        """Step the AEC env's finished tenants out; (their (agent, reward, term, trunc), the next turn's (agent, reward) or None)."""
        dead = []
        while ref.agents:
            a = ref.agent_selection
            _, r, term, trunc, _ = ref.last()
            expected[a] += r
            if not (term or trunc):
                return dead, (a, r)
            dead.append((a, r, term, trunc))
            ref.step(None)
        return dead, None

    dead, turn = advance()
    assert not dead and list(obs) == [turn[0]] and list(infos) == [turn[0]]
    assert env.observation_spaces[turn[0]]["observations"].shape == (40,)
    rng = np.random.default_rng(seed)
    steps = 0
    while True:
        a = turn[0]
        np.testing.assert_array_equal(obs[a]["observations"], ref.observe(a))  # its claim features: the claims before its turn
        mask = ref.unwrapped.action_mask(a)
        np.testing.assert_array_equal(obs[a]["action_mask"], env.flat_mask(mask))
        act = np.array([8, 0, 1, 1, 1, 1, 1, 0]) if mask[0][-1] else np.array([rng.choice(np.flatnonzero(m)) for m in mask])
        obs, rew, term, trunc, infos = env.step({a: act})
        ref.step(act)
        steps += 1
        dead, turn = advance()
        want = [d[0] for d in dead] + ([turn[0]] if turn else [])
        assert sorted(obs) == sorted(rew) == sorted(infos) == sorted(want)  # the acting tenant only, plus the finishing ones
        assert not set(obs) & set(finished)  # nothing for a tenant after it finished
        for d, r, t, tr in dead:
            assert rew[d] == pytest.approx(r) and term[d] == t and trunc[d] == tr
            finished[d] = "terminated" if t else "truncated"
        if turn:
            assert rew[turn[0]] == pytest.approx(turn[1]) and not term.get(turn[0]) and not trunc.get(turn[0])
        for k, v in rew.items():
            credited[k] += v
        if turn is None:
            assert term["__all__"] or trunc["__all__"]
            break
        assert not term["__all__"] and not trunc["__all__"]
    assert not env.agents and set(finished) == set(env.possible_agents)
    assert "terminated" in finished.values()  # tenants went broke: the termination path was taken
    assert steps == sum(r["rounds"] for r in env.par_env.episode_reports.values())  # one env step per claim
    for a in env.possible_agents:
        assert credited[a] == pytest.approx(expected[a]) and expected[a] != 0.0
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step({"tenant_0": act})


def test_sequential_wrapper_sums_to_the_round_rewards_and_truncates_together():
    """A whole episode to the horizon (no one goes broke): on each turn a tenant is credited
    the reward of the last round that cleared (the round engine's reward of the info
    handed out with it), once; the credits sum to its rewards over every round; the last step
    hands every tenant its last observation and truncates them all."""
    env = FleetRLlibEnv({"task": "tiny", "protocol": "sequential", "turn_order": "rotating", "max_cycles": 6, "obs_mode": "flat"})
    key = f"reward_{env.par_env.config.reward.scheme}"  # the trained scheme's reward in the round's infos
    obs, infos = env.reset(seed=4)
    credited = dict.fromkeys(env.possible_agents, 0.0)
    per_round: dict[str, list] = {a: [] for a in env.possible_agents}
    seen = []
    while True:
        (a,) = list(obs)  # one tenant at a time until the end
        assert obs[a].shape == (40,) and env.observation_spaces[a].contains(obs[a])
        seen.append((env.par_env.round, a))
        obs, rew, term, trunc, infos = env.step({a: env.action_spaces[a].sample()})
        for k, v in rew.items():
            assert v == pytest.approx(infos[k][key])  # the reward of the round whose info comes with it
            if env.par_env.round == 0:
                assert v == 0.0  # a turn in round 0: nothing cleared yet
            else:
                per_round[k].append((env.par_env.round, v))  # its turn in round r (or its end): round r - 1's reward
            credited[k] += v
        if trunc["__all__"]:
            assert sorted(obs) == sorted(env.possible_agents) and all(trunc[t] and not term[t] for t in env.possible_agents)
            assert not term["__all__"]
            break
        assert not trunc["__all__"] and not term["__all__"]
    # rotating: round r starts at tenant_{r mod 2}
    assert [a for _, a in seen] == ["tenant_0", "tenant_1", "tenant_1", "tenant_0"] * 3
    for t in env.possible_agents:
        assert [r for r, _ in per_round[t]] == [1, 2, 3, 4, 5, 6]  # every round's reward, once
        assert credited[t] == pytest.approx(sum(v for _, v in per_round[t])) and credited[t] != 0.0
        assert env.par_env.episode_reports[t]["rounds"] == 6


def test_sequential_wrapper_refuses_another_tenants_action_and_bad_options():
    env = FleetRLlibEnv({"task": "tiny", "protocol": "sequential"})
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["tenant_0"]  # fixed order
    act = env.action_spaces["tenant_0"].sample()
    with pytest.raises(ValueError, match=r"takes one action, for 'tenant_0'"):
        env.step({"tenant_1": act})
    with pytest.raises(ValueError, match=r"takes one action, for 'tenant_0'"):
        env.step({"tenant_0": act, "tenant_1": act})
    obs, *_ = env.step({"tenant_0": act})
    assert list(obs) == ["tenant_1"]
    from fleet_marl.config import ConfigError

    with pytest.raises(ConfigError, match="turn_order = 'random'"):
        FleetRLlibEnv({"task": "tiny", "turn_order": "random"})  # a turn order needs the sequential protocol
    with pytest.raises(ConfigError, match="turn_order = 'sideways'"):
        FleetRLlibEnv({"task": "tiny", "protocol": "sequential", "turn_order": "sideways"})


def test_sequential_wrapper_spaces_state_and_views():
    import fleet_marl
    from fleet_marl.rllib.env import fleet_envs

    env = FleetRLlibEnv({"task": "easy", "protocol": "sequential", "with_state": True})
    aec = fleet_marl.env(task="easy", protocol="sequential").unwrapped
    space = env.observation_spaces["tenant_0"]
    assert space["observations"].shape == (40,) and space["state"].shape == aec.state_space.shape != env.par_env.state_space.shape
    obs, _ = env.reset(seed=1)
    (a,) = list(obs)
    assert space.contains(obs[a])
    np.testing.assert_array_equal(obs[a]["state"], env.seq_env.state())
    assert fleet_envs(env) == [env.par_env] and env.par_env is env.seq_env.env  # the callbacks read the round engine
    tc = TrainConfig(task="easy", env={"protocol": "sequential", "turn_order": "priority"})
    sig = tc.signature()
    assert sig["obs_dim"] == 40 and sig["state_dim"] == aec.state_space.shape[0]
    assert tc.env_config()["protocol"] == "sequential" and FleetRLlibEnv(tc.env_config()).seq_env.turn_order == "priority"
    with pytest.raises(TrainConfigError, match="protocol = 'turns'"):
        TrainConfig(task="easy", env={"protocol": "turns"}).check()


def test_a_checkpoint_is_graded_only_under_the_protocol_it_learned(tmp_path):
    """A run trained under one protocol is refused, by name, on an env of the other (its
    observations have another shape); a different turn order is allowed (the same shapes)."""
    import fleet_marl
    from fleet_marl.evaluation import PolicyError, load_policy
    from fleet_marl.training import check_trained_on

    seq = _fake_checkpoint(tmp_path / "seq", TrainConfig(task="tiny", env={"protocol": "sequential", "turn_order": "rotating"}))
    with pytest.raises(
        PolicyError,
        match=r"trained with protocol = 'sequential' and this environment plays protocol = 'simultaneous'.*--protocol sequential",
    ):
        load_policy(str(seq.parent), fleet_marl.parallel_env(task="tiny"))
    sim = _fake_checkpoint(tmp_path / "sim", TrainConfig(task="tiny"))
    with pytest.raises(PolicyError, match=r"trained with protocol = 'simultaneous' and this environment plays protocol = 'sequential'"):
        load_policy(str(sim.parent), fleet_marl.env(task="tiny", protocol="sequential"))
    meta = json.loads((seq / "fleet_marl.json").read_text())
    check_trained_on(str(seq), meta, fleet_marl.env(task="tiny", protocol="sequential", turn_order="priority"))  # no error


# --- RLlib's learned rows beside TorchRL's --------------------------------------------------------


def _graded_run(folder: Path, engine: str | None, trained: list[float]) -> Path:
    """A run folder as fleet-marl train leaves it (results.json, metrics.csv), on easy, with made-up welfare on seeds 0..2."""

    def ev(policy: str, w: list[float]) -> dict:
        return {"policy": policy, "seeds": [0, 1, 2], "welfare": w, "welfare_mean": sum(w) / 3, "welfare_std": 0.5, "score": 1.0}

    tc = {"task": "easy", "reward_scheme": "local", **({"engine": engine} if engine else {})}  # an RLlib config has no engine key
    evals = [ev("PPO", trained), ev("greedy", [1.0] * 3), ev("planner", [5.0, 6.0, 7.0]), ev("hindsight", [9.0] * 3)]
    for e in evals:
        e.update(gap_to_hindsight=0.1, jain_mean=0.8)
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"train_config": tc, "env_steps": 4000, "seconds": 60.0, "evaluations": evals}))
    (folder / "metrics.csv").write_text("iteration,env_steps\n1,4000\n")
    return folder


def test_an_rllib_run_is_published_beside_the_torchrl_run_of_its_task(tmp_path):
    from fleet_marl.studies import learned

    root = tmp_path / "checkout"
    torch_run = _graded_run(tmp_path / "t", "torchrl", [6.0, 7.0, 8.0])
    rllib_run = _graded_run(tmp_path / "r", None, [7.0, 8.0, 9.0])
    learned.save([str(rllib_run), str(torch_run)], root, echo=lambda *_: None)
    assert sorted(p.name for p in (root / learned.DATA).iterdir()) == ["easy.json", "easy.rllib.json"]
    (text,) = {t for _doc, _s, _e, t in learned.blocks(root)}
    rows = [line for line in text.splitlines() if line.startswith("| easy (")]
    assert len(rows) == 2 and rows[0].endswith("| TorchRL |") and rows[1].endswith("| RLlib |")  # TorchRL's first
    assert "| 7.0 ± 0.5 |" in rows[0] and "| 8.0 ± 0.5 |" in rows[1]
    assert "+2.0 ± 0.0 (3/3)" in rows[1] and "+1.0 ± 0.0 (3/3)" in rows[0]  # each paired with the planner on its seeds
    assert text.count(learned.NOT_TRAINED) == len(fleet_marl_tasks()) - 1  # the other tasks, one row each
    # a later RLlib run of the task replaces RLlib's row only
    again = _graded_run(tmp_path / "r2", None, [8.0, 9.0, 10.0])
    learned.save([str(again)], root, echo=lambda *_: None)
    (text,) = {t for _doc, _s, _e, t in learned.blocks(root)}
    assert "| 9.0 ± 0.5 |" in text and "| 7.0 ± 0.5 |" in text and "| 8.0 ± 0.5 |" not in text


def fleet_marl_tasks() -> list[str]:
    from fleet_marl.tasks import TASKS

    return list(TASKS)

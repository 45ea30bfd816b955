"""What a tenant sees of its neighbours (docs/environment.md, "Coupling features" and "Infos"):
the observation gains ``COUPLING_FIELDS`` if and only if a coupling switch is on (the spaces of
the uncoupled tasks stay as they were), their values are the kernel Outcome's, normalized as
documented (a contended trainer's slowdown, its links' load, its rack's headroom, a restart's
lost seconds, a server's tail over its SLO), the infos carry the raw values with the switches on
or off, and the grader counts every safety intervention per tenant-round (``evaluate --json``,
the baseline table)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from fleet_marl import cli
from fleet_marl.config import CouplingSpec
from fleet_marl.environment import (
    CLAIM_FIELDS,
    COUPLING_FIELDS,
    COUPLING_INDEX,
    N_CLAIM,
    N_COUPLING,
    N_OBS,
    OBS_FIELDS,
    SEQUENTIAL_OBS_INDEX,
    FleetParallelEnv,
    FleetSequentialEnv,
    FleetVectorEnv,
    coupled,
    has_claims,
    obs_fields,
)
from fleet_marl.environment.infos import COUPLING_KEYS, INFO_KEYS
from fleet_marl.evaluation import baselines
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.evaluation.runner import INTERVENTIONS, intervention_rates, make_env, run_episode
from fleet_marl.policies.base import BasePolicy
from fleet_marl.tasks import TASKS, make_config
from tests.test_contention import _two_trainers
from tests.test_queueing import server_config

SWITCHES = tuple(f.name for f in dataclasses.fields(CouplingSpec))
COL = {name: N_OBS + i for i, (name, _) in enumerate(COUPLING_FIELDS)}  # a coupled simultaneous observation's columns


def _rich(cfg, budget=1e9):
    """``cfg`` with budgets no round can exhaust (the contention scenarios' tenants ask for 20 GPUs)."""
    return dataclasses.replace(cfg, tenants=tuple(dataclasses.replace(t, budget=budget) for t in cfg.tenants))


def _trainers(cap=None):
    cfg = _rich(_two_trainers())
    if cap is not None:
        cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, rack_power_cap_w=cap))
    return cfg


def _act(gpus, batch=0):
    return np.array([gpus, 2, 1, 1, 1, 1, 1, batch])


# --- the layout: the new fields iff a switch is on -------------------------------------------------


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_tasks_observation_has_the_coupling_fields_iff_a_switch_is_on(task):
    """Every switch off (today's tasks): 34 features (40 sequential), ``state()`` T·34 + K + R,
    as before; a coupled task 5 more per tenant."""
    extra = N_COUPLING if coupled(make_config(task)[0]) else 0
    assert extra == 0 or task not in ("tiny", "easy", "medium")  # these stay uncoupled: their spaces are today's
    env = FleetParallelEnv(task)
    st = env.kernel_static
    assert env.observation_space("tenant_0").shape == (N_OBS + extra,) and len(env.obs_fields) == N_OBS + extra
    assert env.state_space.shape == (st.T * (N_OBS + extra) + st.K + st.n_racks,)
    obs, _ = env.reset(seed=0)
    assert obs["tenant_0"].shape == (N_OBS + extra,)
    seq = FleetSequentialEnv(task)
    assert seq.observation_space("tenant_0").shape == (N_OBS + N_CLAIM + extra,)
    assert seq.obs_fields[: N_OBS + N_CLAIM] == OBS_FIELDS + CLAIM_FIELDS
    assert FleetVectorEnv(2, task).single_observation_space.shape == (st.T, N_OBS + extra)


@pytest.mark.parametrize("switch", SWITCHES)
def test_any_switch_adds_the_coupling_fields_last(switch):
    cfg = dataclasses.replace(make_config("tiny")[0], coupling=CouplingSpec(**{switch: True}))
    assert coupled(cfg) and not coupled(make_config("tiny")[0])
    env = FleetParallelEnv(config=cfg, obs_mode="dict")
    st = env.kernel_static
    n = N_OBS + N_COUPLING
    assert env.observation_space("tenant_0")["observation"].shape == (n,)
    assert [k for k, _ in env.obs_fields] == [k for k, _ in OBS_FIELDS + COUPLING_FIELDS]
    assert env.state_space.shape == (st.T * n + st.K + st.n_racks,)
    obs, _ = env.reset(seed=0)
    row = obs["tenant_0"]["observation"]
    assert row.shape == (n,) and row.dtype == np.float32
    # before the first round: no slowdown, no load, a whole rack of headroom, no restart, no tail
    assert row[N_OBS:].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    seq = FleetSequentialEnv(config=cfg)
    assert seq.observation_space("tenant_0").shape == (n + N_CLAIM,)
    assert [k for k, _ in seq.obs_fields] == [k for k, _ in OBS_FIELDS + CLAIM_FIELDS + COUPLING_FIELDS]
    assert FleetVectorEnv(2, config=cfg).single_observation_space.shape == (st.T, n)
    assert [has_claims(k) for k in (N_OBS, n, N_OBS + N_CLAIM, n + N_CLAIM)] == [False, False, True, True]
    assert obs_fields(True, True)[SEQUENTIAL_OBS_INDEX["position"]][0] == "position"  # the claims keep their columns


def test_infos_carry_the_coupling_keys_with_every_switch_off():
    env = FleetParallelEnv("easy")
    _, infos = env.reset(seed=0)
    assert all(k in INFO_KEYS for k in COUPLING_KEYS)
    assert [infos["tenant_0"][k] for k in COUPLING_KEYS] == [0.0] * len(COUPLING_KEYS)
    _, _, _, _, infos = env.step({a: _act(4, 3) for a in env.agents})
    o, st = env.last_outcome, env.kernel_static
    for a, i in env.agent_index.items():
        info = infos[a]
        assert info["slowdown"] == 1.0 and info["link_load"] == 0.0  # no contention without the switch
        assert info["restart_s"] == o.restart_s[i] > 0  # the first grant is a restart
        assert info["ttft_p99_over_slo"] == pytest.approx(0.0 if st.is_train[i] else o.ttft_p99_s[i] / st.slo_ttft_s[i], rel=1e-12)


# --- the values: the Outcome's, as documented ------------------------------------------------------


def _racks_of(o, st, i):
    """The racks tenant ``i`` ran on, read node by node."""
    return sorted({int(st.node_rack[k]) for k in range(st.K) if o.gpus_on_node[i, k] > 0})


def test_a_contended_trainer_sees_its_slowdown_link_load_restart_and_headroom():
    """The two multi-leaf trainers of tests/test_contention.py slow each other on the leaf uplink
    they share: slowdown > 1 shows in the observation as 1 - 1/s, the load as x/(x+1); the first
    grant's restart as its share of the round; each rack's headroom of the tightest rack it ran on."""
    cap = 40_000.0
    env = FleetParallelEnv(config=_trainers(cap))
    st = env.kernel_static
    env.reset(seed=0)
    acts = {a: _act(20) for a in env.agents}
    obs, _, _, _, infos = env.step(acts)
    o = env.last_outcome
    assert _racks_of(o, st, 0) == [0, 1] and _racks_of(o, st, 1) == [1, 2]  # nodes 0-2 and 3-5, two a rack
    for a, i in env.agent_index.items():
        row, info = obs[a], infos[a]
        assert o.slowdown[i] > 1.0 and o.link_load[i] > 0.0 and o.restarted[i]
        assert info["slowdown"] == o.slowdown[i] and info["link_load"] == o.link_load[i] and info["restart_s"] == o.restart_s[i]
        assert row[COL["slowdown"]] == np.float32(1.0 - 1.0 / o.slowdown[i]) > 0
        assert row[COL["link_load"]] == np.float32(o.link_load[i] / (o.link_load[i] + 1.0))
        assert row[COL["restart_lost"]] == np.float32(o.restart_s[i] / st.round_seconds) > 0
        headroom = min((cap - o.rack_power_w[r]) / cap for r in _racks_of(o, st, i))
        assert info["power_headroom"] == pytest.approx(headroom, rel=1e-12) and 0 < headroom < 1
        assert row[COL["power_headroom"]] == np.float32(headroom)
        assert row[COL["ttft_tail"]] == 0.0 and info["ttft_p99_over_slo"] == 0.0  # trainers
    # the same GPUs again: no restart, the neighbours still there
    obs, _, _, _, infos = env.step(acts)
    o = env.last_outcome
    assert not o.restarted.any() and o.restart_s.tolist() == [0.0, 0.0]
    assert obs["tenant_0"][COL["restart_lost"]] == 0.0 and obs["tenant_0"][COL["slowdown"]] == np.float32(1.0 - 1.0 / o.slowdown[0]) > 0


def test_alone_a_trainer_is_slowed_less_and_an_idle_one_reads_its_pools_racks():
    """tenant_1 asks for nothing: tenant_0 has the uplinks to itself (its own traffic still
    overloads the 4:1 uplink, but less than with its neighbour), and tenant_1, on no node,
    reads the tightest rack of its pool (every rack here)."""
    cap = 40_000.0
    env = FleetParallelEnv(config=_trainers(cap))
    env.reset(seed=0)
    together, _, _, _, _ = env.step({a: _act(20) for a in env.agents})
    env.reset(seed=0)
    obs, _, _, _, infos = env.step({"tenant_0": _act(20), "tenant_1": _act(0)})
    o = env.last_outcome
    assert 0 < obs["tenant_0"][COL["slowdown"]] < together["tenant_0"][COL["slowdown"]]
    assert 0 < obs["tenant_0"][COL["link_load"]] < together["tenant_0"][COL["link_load"]]
    assert o.alloc[1] == 0 and infos["tenant_1"]["power_headroom"] == pytest.approx(float(np.min((cap - o.rack_power_w) / cap)), rel=1e-12)
    assert obs["tenant_1"][COL["slowdown"]] == 0.0 and obs["tenant_1"][COL["link_load"]] == 0.0  # on no link


def test_contention_off_the_same_scenario_reads_no_slowdown_in_the_infos_and_no_coupling_columns():
    cfg = _rich(_two_trainers(contention=False))
    env = FleetParallelEnv(config=cfg)
    env.reset(seed=0)
    obs, _, _, _, infos = env.step({a: _act(20) for a in env.agents})
    assert obs["tenant_0"].shape == (N_OBS,)
    assert infos["tenant_0"]["slowdown"] == 1.0 and infos["tenant_0"]["link_load"] == 0.0


def test_a_queued_servers_tail_over_its_slo():
    """With the queue on, a server's observation shows its TTFT p99 over its SLO as x/(x+1)."""
    slo = 0.05
    env = FleetParallelEnv(config=_rich(server_config(slo_ttft=slo)))
    env.reset(seed=0)
    obs, _, _, _, infos = env.step({"tenant_0": _act(1, 8)})
    o = env.last_outcome
    x = o.ttft_p99_s[0] / slo
    assert o.ttft_p99_s[0] > 0 and infos["tenant_0"]["ttft_p99_over_slo"] == pytest.approx(x, rel=1e-12)
    assert obs["tenant_0"][COL["ttft_tail"]] == np.float32(x / (x + 1.0))


def test_the_vector_env_the_aec_env_and_state_hold_the_same_coupling_features():
    cfg = _trainers(40_000.0)
    env = FleetParallelEnv(config=cfg)
    venv = FleetVectorEnv(1, config=cfg)
    seq = FleetSequentialEnv(config=cfg)
    env.reset(seed=3)
    venv.reset(seed=3)
    seq.reset(seed=3)
    acts = {a: _act(20) for a in env.agents}
    obs, _, _, _, infos = env.step(acts)
    vobs, _, _, _, vinfos = venv.step(np.stack([acts[a] for a in env.possible_agents])[None])
    for _ in range(len(seq.agents)):
        seq.step(acts[seq.agent_selection])
    T = len(env.possible_agents)
    for a, i in env.agent_index.items():
        np.testing.assert_array_equal(vobs[0, i], obs[a])
        assert all(vinfos[k][0, i] == infos[a][k] for k in COUPLING_KEYS)
        s_obs = seq.observe(a)
        assert s_obs.shape == (N_OBS + N_CLAIM + N_COUPLING,)
        np.testing.assert_array_equal(s_obs[:N_OBS], obs[a][:N_OBS])
        np.testing.assert_array_equal(s_obs[-N_COUPLING:], obs[a][N_OBS:])
    s = env.state()
    st = env.kernel_static
    head = T * N_OBS + st.K + st.n_racks
    assert s.shape == (head + T * N_COUPLING,)
    np.testing.assert_array_equal(s[: T * N_OBS], np.stack([obs[a][:N_OBS] for a in env.possible_agents]).ravel())
    np.testing.assert_array_equal(s[head:], np.stack([obs[a][N_OBS:] for a in env.possible_agents]).ravel())
    # a policy reads no claims in a coupled simultaneous observation, and the claims in a sequential one
    pol = BasePolicy(env)
    assert pol.claims_so_far(obs["tenant_0"], 0) is None
    seq.reset(seed=3)
    assert pol.claims_so_far(seq.observe(seq.agent_selection), 0) is not None


def test_reference_policies_play_a_coupled_scenario_under_both_protocols():
    cfg = _trainers(40_000.0)
    for protocol in ("simultaneous", "sequential"):
        env = FleetSequentialEnv(config=cfg) if protocol == "sequential" else FleetParallelEnv(config=cfg)
        for name in ("planner", "bidder", "fair_share"):
            ep = run_episode(env, load_policy(name, env), 0, name)
            assert ep.rounds > 0 and set(ep.interventions) == set(env.possible_agents)


def test_the_learning_adapters_take_the_coupled_observation():
    """TorchRL's batched env (its specs checked by TorchRL), SB3's VecEnv and RLlib's vector env
    read the width from the vector env: 39 features, the mask as before."""
    from torchrl.envs.utils import check_env_specs  # the [torchrl] extra (make install), imported here to keep the module light

    from fleet_marl.clients.sb3 import FleetSB3VecEnv
    from fleet_marl.rllib.vector import FleetVectorMultiAgentEnv
    from fleet_marl.torchrl.env import FleetTorchEnv

    cfg = _trainers(40_000.0)
    n = N_OBS + N_COUPLING
    tenv = FleetTorchEnv(2, config=cfg, seed=0)
    check_env_specs(tenv)
    assert tenv.rollout(2)["agents", "observation"].shape == (2, 2, 2, n)
    sb3 = FleetSB3VecEnv(2, config=cfg, seed=0)
    assert sb3.reset().shape == (4, n)
    rl = FleetVectorMultiAgentEnv({"config": cfg, "with_state": True}, num_envs=2)
    space = rl.single_observation_spaces["tenant_0"]
    assert space["observations"].shape == (n,) and space["state"].shape == (2 * n + 6 + 3,)


def test_coupling_fields_are_documented():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "environment.md").read_text()
    for name, _ in COUPLING_FIELDS:
        assert f"| {N_OBS + COUPLING_INDEX[name]} | `{name}` |" in doc, name
    for key in COUPLING_KEYS:
        assert f"| `{key}` |" in doc, key


# --- safety interventions per tenant-round ---------------------------------------------------------


def _manual_counts(task, policy, seed, **overrides):
    """The same episode as ``run_episode`` plays, counted here from each step's Outcome and infos."""
    env = make_env(task, **overrides)
    pol = load_policy(policy, env)
    obs, infos = env.reset(seed=seed)
    for k, a in enumerate(env.possible_agents):
        env.action_space(a).seed(seed * 1_000_003 + k)
    pol.reset(seed)
    counts = {a: dict.fromkeys(INTERVENTIONS, 0) for a in env.possible_agents}
    rounds = dict.fromkeys(env.possible_agents, 0)
    while env.agents:
        live = list(env.agents)
        obs, _, _, _, infos = env.step(pol.act(obs, infos))
        o = env.last_outcome
        for a in live:
            i = env.agent_index[a]
            rounds[a] += 1
            # the infos' flags, and the two throttles (one flag in the infos) from the Outcome
            for kind, key in (("oom", "oom"), ("veto", "vetoed"), ("projection", "projected"), ("trip", "tripped")):
                counts[a][kind] += int(infos[a][key])
            counts[a]["power_throttle"] += int(o.power_throttled[i])
            counts[a]["thermal_throttle"] += int(o.thermal_throttled[i])
            assert bool(infos[a]["throttled"]) == bool(o.power_throttled[i] or o.thermal_throttled[i])
    return counts, rounds


@pytest.mark.parametrize(
    ("task", "policy", "overrides", "kinds"),
    [
        ("tiny", "random", {}, ("oom", "veto")),
        ("hard", "random", {"max_cycles": 30}, ("projection", "power_throttle")),
    ],
)
def test_interventions_are_the_outcomes_flags_summed_over_the_episode(task, policy, overrides, kinds):
    env = make_env(task, **overrides)
    ep = run_episode(env, load_policy(policy, env), 1, policy)
    counts, rounds = _manual_counts(task, policy, 1, **overrides)
    assert ep.interventions == counts and ep.tenant_rounds == rounds
    assert all(sum(c[k] for c in counts.values()) > 0 for k in kinds)  # the scenario does intervene
    # the fairness report's own counts agree where they count the same thing
    for a, r in ep.agents.items():
        assert r["oom"] == counts[a]["oom"] and r["veto"] == counts[a]["veto"] and r["rounds"] == rounds[a]
    rates = intervention_rates([ep])
    n = sum(rounds.values())
    assert rates["total"] == pytest.approx(sum(sum(c.values()) for c in counts.values()) / n)
    assert all(rates[k] == pytest.approx(sum(c[k] for c in counts.values()) / n) for k in INTERVENTIONS)


def test_the_aec_loop_counts_each_round_once_for_the_tenants_that_played_it():
    """Under the sequential protocol the round clears after the last claim: its Outcome counts
    once, for the tenants live at its start (the fairness report's rounds, OOMs and vetoes)."""
    env = make_env("tiny", protocol="sequential", turn_order="rotating")
    ep = run_episode(env, load_policy("random", env), 2, "random")
    assert sum(c["oom"] + c["veto"] for c in ep.interventions.values()) > 0
    for a, r in ep.agents.items():
        assert (ep.tenant_rounds[a], ep.interventions[a]["oom"], ep.interventions[a]["veto"]) == (r["rounds"], r["oom"], r["veto"])


def test_evaluate_json_and_text_report_the_intervention_rate(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_MARL_CACHE", str(tmp_path))
    assert cli.main(["evaluate", "--task", "tiny", "--policy", "random", "--episodes", "2", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    env = make_env("tiny")
    eps = [run_episode(env, load_policy("random", env), k, "random") for k in (0, 1)]
    total = {k: sum(c[k] for e in eps for c in e.interventions.values()) for k in INTERVENTIONS}
    n = sum(sum(e.tenant_rounds.values()) for e in eps)
    assert s["interventions"] == total and s["tenant_rounds"] == n and total["oom"] > 0
    assert s["intervention_rate"]["total"] == pytest.approx(sum(total.values()) / n)
    assert s["intervention_rate"]["oom"] == pytest.approx(total["oom"] / n)
    for a, r in s["agents"].items():
        assert r["intervention_rate"] == pytest.approx(intervention_rates(eps, a)["total"])
    assert cli.main(["evaluate", "--task", "tiny", "--policy", "random", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"safety    {s['intervention_rate']['total']:.3f} interventions per tenant-round" in out
    doc = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    assert "| `intervention_rate` |" in doc and "| `interventions`, `tenant_rounds` |" in doc


def test_the_baseline_table_shows_the_rate_or_says_it_was_not_measured():
    row = {
        "task": "tiny",
        "policy": "random",
        "welfare_mean": 1.0,
        "welfare_std": 0.5,
        "score": 0.0,
        "gap_to_hindsight": 1.0,
        "jain_mean": 0.9,
        "starvation_events": 0,
        "degenerate": 0,
    }
    measured = dict(row, intervention_rate={"total": 0.25})
    lines = baselines.table([row, measured]).splitlines()
    assert "interventions / tenant-round" in lines[0]
    assert lines[2].endswith(f"| {baselines.NOT_MEASURED} |") and lines[3].endswith("| 0.250 |")
    assert "intervention_rate" in baselines.ROW_FIELDS
    data = {"episodes": 1, "seed": 0, "extra_args": "", "python": "3.11"}
    assert baselines.NOT_MEASURED in baselines.block(dict(data, rows=[row, measured]))
    assert baselines.NOT_MEASURED not in baselines.block(dict(data, rows=[measured]))

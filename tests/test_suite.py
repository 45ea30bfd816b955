"""The credit-assignment suite (fleet_marl.suite) and its command (fleet-marl suite)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fleet_marl
from fleet_marl import suite
from fleet_marl.config import ConfigError
from fleet_marl.studies import suite_command
from fleet_marl.traces import resolve_trace, trace_stats

SMALL = [name for name, t in suite.SUITE.items() if t.n <= 8]


def _env(name, seed, split):
    env = fleet_marl.parallel_env(config=suite.scenario(name, seed, split))
    env.reset(seed=suite.env_seed(seed, split))
    return env


def test_the_suite_sweeps_every_family_and_team_size():
    assert set(suite.FAMILIES) == {"aligned", "proportional", "scarce", "storm", "power", "fabric", "trace_window"}
    for fam in suite.FAMILIES.values():
        for n in fam.ns:
            assert f"{fam.name}_n{n}" in suite.SUITE
    assert {t.n for t in suite.SUITE.values()} >= set(suite.NS)


@pytest.mark.parametrize("name", SMALL)
def test_every_scenario_builds_and_steps(name):
    for split in suite.SPLITS:
        env = _env(name, 1, split)
        assert len(env.agents) == suite.SUITE[name].n
        _, rewards, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
        assert all(np.isfinite(r) for r in rewards.values())


@pytest.mark.parametrize("name", ["scarce_n8", "power_n8", "trace_window_n6", "aligned_n128", "fabric_n64"])
def test_a_tasks_scenarios_share_their_spaces(name):
    """A task's scenarios differ, but every one has the same spaces: one policy plays them all."""
    spaces, configs = set(), []
    for split in suite.SPLITS:
        for s in range(3):
            cfg = suite.scenario(name, s, split)
            configs.append(json.dumps(cfg, sort_keys=True))
            env = fleet_marl.parallel_env(config=cfg)
            a = env.possible_agents
            spaces.add((tuple(a), tuple(env.observation_space(a[0]).shape), tuple(map(tuple, env.nvec)), env.state_space.shape))
    assert len(spaces) == 1
    assert len(set(configs)) == len(configs)  # every seed and split draws its own scenario


def test_scenarios_are_reproducible_and_splits_disjoint():
    assert suite.scenario("storm_n16", 5, "heldout") == suite.scenario("storm_n16", 5, "heldout")
    assert suite.scenario("storm_n16", 5, "train") != suite.scenario("storm_n16", 5, "heldout")
    seeds = {split: {suite.env_seed(s, split) for s in range(1000)} for split in suite.SPLITS}
    assert not (seeds["train"] & seeds["heldout"]) and not (seeds["heldout"] & seeds["shift"]) and not (seeds["train"] & seeds["shift"])


def test_the_draws_follow_their_stated_distributions():
    budgets, rates, prio, models = [], [], [], set()
    for s in range(200):
        for t in suite.scenario("scarce_n8", s)["tenants"]:
            if t["kind"] == "serve":
                rates.append(t["workload"]["rate"] / 18.0)
                models.add(t["model"])
            budgets.append(t["budget"] / 172.0)
            prio.append(t["priority"] == 2.0)
    assert min(budgets) >= 0.7 - 1e-6 and max(budgets) <= 1.4 + 1e-6
    assert min(rates) >= 0.5 - 1e-3 and max(rates) <= 2.0 + 1e-3
    assert np.median(np.log(rates)) == pytest.approx(0.0, abs=0.1)  # log-uniform around the family's rate
    assert np.mean(prio) == pytest.approx(0.25, abs=0.05)
    assert models == set(suite.SERVE_MODELS)


def test_the_shift_changes_what_its_family_says():
    train, shift = suite.scenario("proportional_n8", 0, "train"), suite.scenario("proportional_n8", 0, "shift")
    assert all(t["workload"].get("pattern", "poisson") == "poisson" for t in train["tenants"])
    assert all(t["workload"]["pattern"] == "bursty" and t["workload"]["burst_shared"] for t in shift["tenants"])
    assert all(t["workload"]["pattern"] == "bursty" for t in suite.scenario("storm_n8", 0)["tenants"])
    assert all(t["workload"]["pattern"] == "diurnal" for t in suite.scenario("storm_n8", 0, "shift")["tenants"])
    seen = {t["workload"]["trace"] for s in range(30) for t in suite.scenario("trace_window_n6", s)["tenants"]}
    seen |= {t["workload"]["trace"] for s in range(30) for t in suite.scenario("trace_window_n6", s, "heldout")["tenants"]}
    shifted = {t["workload"]["trace"] for t in suite.scenario("trace_window_n6", 0, "shift")["tenants"]}
    assert seen == set(suite.TRAIN_JOB_TRACES) | {"azure_llm_inference_conv_2023.csv"}
    assert shifted == {suite.SHIFT_JOB_TRACE, "azure_llm_inference_code_2023_first30min.csv"} and not shifted & seen


def test_a_trace_window_varies_by_seed_and_stays_in_its_trace():
    offsets = set()
    for s in range(20):
        for t in suite.scenario("trace_window_n6", s)["tenants"]:
            w = t["workload"]
            cover = suite.EPISODE_S * w["trace_speedup"]
            assert 0.0 <= w["trace_offset_s"] <= max(0.0, suite.TRACE_SPAN_S[w["trace"]] - cover)
            offsets.add(w["trace_offset_s"])
    assert len(offsets) >= 30
    # two seeds replay different arrivals: the memorised episode of the trace task is gone
    a, b = _env("trace_window_n6", 0, "train"), _env("trace_window_n6", 1, "train")
    arrivals = []
    for env in (a, b):
        seen = []
        for _ in range(5):
            seen.append(np.asarray(env.round_draws().arrivals))
            env.step({x: env.action_space(x).sample() * 0 for x in env.agents})
        arrivals.append(np.concatenate(seen))
    assert not np.array_equal(*arrivals)


def test_the_trace_spans_are_the_traces():
    for name, span in suite.TRACE_SPAN_S.items():
        assert trace_stats(resolve_trace(name))["duration_s"] == pytest.approx(span)


def test_bad_arguments_name_the_field():
    with pytest.raises(ConfigError, match="suite task"):
        suite.scenario("scarce_n7", 0)
    with pytest.raises(ConfigError, match="split"):
        suite.scenario("scarce_n8", 0, "test")
    with pytest.raises(ConfigError, match="seed"):
        suite.scenario("scarce_n8", -1)
    with pytest.raises(ConfigError, match="seed"):
        suite.env_seed(1_000_000, "train")


def test_coupling_separates_the_control_from_the_coupled_families():
    """The control is aligned and power is misaligned on good play: the roles are measured, not named."""
    rows = suite_command.coupling_rows(["aligned_n8", "power_n8"], ["planner"], scenarios=1, states=4, progress=False)
    by = {r["task"]: r for r in rows}
    assert by["aligned_n8"]["share"] < 1e-9 and by["aligned_n8"]["ratio"] == pytest.approx(1.0)
    assert by["power_n8"]["share"] >= 0.2 and by["power_n8"]["ratio"] <= 0.8
    assert suite_command.verdict({"planner": by["aligned_n8"]}) == "aligned"
    assert suite_command.verdict({"planner": by["power_n8"]}) == "misaligned"


def test_the_command_lists_and_shows(capsys):
    from fleet_marl.cli import main

    assert main(["suite", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["task"] for r in rows] == list(suite.SUITE)
    assert main(["suite", "show", "power_n8", "--seed", "2", "--split", "heldout"]) == 0
    assert json.loads(capsys.readouterr().out) == suite.scenario("power_n8", 2, "heldout")
    assert main(["suite", "show", "power_n9"]) == 2
    assert "suite task" in capsys.readouterr().err


def test_the_committed_coupling_covers_the_suite_and_backs_the_docs():
    """docs/suite.md's sentences read these rows: the control aligned at every n, power misaligned from n = 8."""
    got = suite_command.measured()
    assert set(suite.SUITE) <= set(got)
    for n in suite.NS:
        assert suite_command.verdict(got[f"aligned_n{n}"]) == "aligned"
    for n in suite.NS[1:]:
        assert suite_command.verdict(got[f"power_n{n}"]) == "misaligned"
    lg = [got[f"proportional_n{n}"]["planner"]["learnability"]["global"] for n in suite.NS]
    assert lg == sorted(lg, reverse=True)  # global's signal fades with n

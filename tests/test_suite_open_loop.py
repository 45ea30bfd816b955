"""The ``open_loop`` baseline on a suite task: one table per task, searched on its train scenarios
only (never on a graded scenario's config), played on every graded scenario; and the suite
study's baseline rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet_marl import suite
from fleet_marl.evaluation import evaluate, make_env, run_episode
from fleet_marl.evaluation import reference as reference_module
from fleet_marl.evaluation import suite_open_loop as sol
from fleet_marl.policies.open_loop import OpenLoopPolicy, search_scenarios
from fleet_marl.studies.credit.suite_baselines import open_loop_row, scenario_terms
from fleet_marl.tasks import make_config

TASK, OV, K = "power_n4", {"max_cycles": 8}, 2


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_MARL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sol, "SCENARIOS", K)
    monkeypatch.setattr(sol, "_TABLES", {})
    return tmp_path / "cache"


def _config(split: str, s: int) -> dict:
    return make_config(sol.SUITE_BASE, **{**suite.scenario(TASK, s, split), **OV})[0].to_dict()


def test_the_table_is_searched_once_per_task_on_train_scenarios_only(monkeypatch):
    searched = []

    def spy(configs, seeds, **kw):
        searched.append(([c.to_dict() for c in configs], list(seeds)))
        return search_scenarios(configs, seeds, **kw)

    def per_scenario(*a, **kw):
        raise AssertionError("the per-config search (a table fit on the graded scenario) ran on a suite task")

    monkeypatch.setattr(sol, "search_scenarios", spy)
    monkeypatch.setattr(reference_module, "search", per_scenario)
    for split in ("heldout", "shift", "train"):
        evaluate(TASK, "open_loop", 2, 0, {**OV, "split": split}, progress=False, hindsight=False)
    assert len(searched) == 1  # one search for the task, whatever the split
    configs, seeds = searched[0]
    assert configs == [_config("train", s) for s in range(K)] and seeds == [suite.env_seed(s, "train") for s in range(K)]
    graded = [_config(split, s) for split in ("heldout", "shift") for s in range(2)]
    assert all(g not in configs for g in graded) and graded[0] != configs[0]  # the scenarios differ, and none graded was searched on


def test_one_table_plays_every_graded_scenario_and_the_grader_plays_it(monkeypatch):
    tables = []

    class Spy(OpenLoopPolicy):
        def __init__(self, env, table):
            super().__init__(env, table)
            tables.append(self.table)

    monkeypatch.setattr(sol, "OpenLoopPolicy", Spy)
    table = sol.suite_open_loop_table(TASK, OV)
    evs = {
        split: evaluate(TASK, "open_loop", 2, 0, {**OV, "split": split}, progress=False, hindsight=False) for split in ("heldout", "train")
    }
    assert len(tables) == 4 and all(np.array_equal(t, table) for t in tables)
    assert evs["heldout"].policy == "open_loop"
    for split, ev in evs.items():
        for s, w in zip(range(2), ev.welfare, strict=True):
            env = make_env(sol.SUITE_BASE, **{**suite.scenario(TASK, s, split), **OV})
            assert run_episode(env, OpenLoopPolicy(env, table), suite.env_seed(s, split)).welfare == w


def test_the_suite_search_is_deterministic_improves_and_scores_what_the_parallel_env_plays(cache):
    entry = sol.suite_open_loop_entry(TASK, OV)
    again = sol.suite_open_loop_entry(TASK, OV, cache=False)
    assert again["table"] == entry["table"] and again["welfare"] == entry["welfare"] and any(cache.rglob("*.json"))
    assert np.mean(entry["welfare"]) > entry["start_welfare"]  # the ascent moved off its best start
    table = np.asarray(entry["table"])
    assert table.shape == (OV["max_cycles"], 4, 8)
    for s, w in zip(range(K), entry["welfare"], strict=True):  # the batched scenarios' episodes are the ParallelEnv's
        env = make_env(sol.SUITE_BASE, **{**suite.scenario(TASK, s, "train"), **OV})
        assert run_episode(env, OpenLoopPolicy(env, table), suite.env_seed(s, "train")).welfare == w
    assert sol.suite_open_loop_table(TASK, {"max_cycles": 6}).shape[0] == 6  # keyed by the grader's overrides


def test_a_scenario_search_needs_a_seed_per_scenario():
    configs = sol.train_configs(TASK, OV, 2)
    with pytest.raises(ValueError, match="2 scenario configs and 1 seeds"):
        search_scenarios(configs, [0])


def test_the_open_loop_row_is_the_graded_baseline():
    row = open_loop_row(TASK, episodes=2, overrides=OV)
    assert (row["policy"], row["family"], row["n"], row["seeds"], row["split"]) == ("open_loop", "power", 4, 2, "heldout")
    held = evaluate(TASK, "open_loop", 2, 0, {**OV, "split": "heldout"}, progress=False, hindsight=False)
    train = evaluate(TASK, "open_loop", 2, 0, {**OV, "split": "train"}, progress=False, hindsight=False)
    assert row["score"] == held.score and row["train_score"] == train.score
    assert all(math.isfinite(row[k]) for k in ("score", "score_h", "train_score"))
    terms = scenario_terms(held)
    assert max(float(terms.mean()), 0.0) == pytest.approx(row["score"]) and row["score_h"] > 0
    assert math.isnan(open_loop_row(TASK, episodes=1, overrides=OV)["score_h"])  # one scenario: no interval

"""The ``open_loop`` baseline on a suite task: one table, searched on the task's train scenarios.

On a registered task the baseline's table is searched on ``OPEN_LOOP_SEEDS`` of the task's one
config (:func:`~fleet_marl.evaluation.reference.open_loop_table`). A suite task
(:mod:`fleet_marl.suite`) has a config per scenario, and searching on the graded scenario's own
config would let the baseline see the held-out scenario (its tenant mix, models, budgets) that
a learner never sees. So on a suite task the table is fit where a learner is: searched once per
task, on its train scenarios ``0 .. SCENARIOS - 1`` (each reset with
:func:`fleet_marl.suite.env_seed` of the train split), maximizing the mean welfare over them
(:func:`fleet_marl.policies.open_loop.search_scenarios`, the baseline's levels, passes and
budget), from the starts :func:`scenario_starts` gives; that one table is then played on every
graded scenario, held-out, shifted or train.

The grader knows the task, the env it hands a policy does not (a scenario's config is a plain
``FleetConfig``), so the grader passes it: :func:`~fleet_marl.evaluation.evaluate` on a suite
task plays the spec ``open_loop`` as :class:`SuiteOpenLoop` ``(task, overrides)``, a factory
``env -> OpenLoopPolicy`` named ``open_loop``. The table is cached on disk like the other
references, keyed by the task's train configs (the task and the grader's config overrides, such
as a shorter ``max_cycles``), the search's settings and the code version: the same entry for
every split. The search's ``budget`` in tenant-rounds is the grader's (``OPEN_LOOP_BUDGET``)
unless a caller passes a smaller one (the quick suite study's pipeline check,
:class:`~fleet_marl.studies.credit.suite_design.SuiteStudy` ``open_loop_budget``: a
:class:`SuiteOpenLoop` given to :func:`~fleet_marl.evaluation.evaluate` as the policy); the
budget keys the cache entry.
"""

from __future__ import annotations

import json

import numpy as np

from fleet_marl import suite
from fleet_marl.environment import parallel_env
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.evaluation.reference import (
    OPEN_LOOP,
    OPEN_LOOP_BUDGET,
    OPEN_LOOP_LEVELS,
    OPEN_LOOP_STARTS,
    OPEN_LOOP_SWEEPS,
    _cache_dir,
    _cache_key,
    _write,
    code_version,
    data_version,
)
from fleet_marl.evaluation.runner import run_episode
from fleet_marl.policies.open_loop import OpenLoopPolicy, Recorder, modal, search_scenarios
from fleet_marl.tasks import ENV_OPTIONS, make_config

#: The task a suite scenario's config overrides (each scenario sets every field ``easy`` sets).
SUITE_BASE = "easy"
#: Train scenarios the suite baseline's table is searched on: scenarios 0 .. SCENARIOS - 1 of the
#: train split, as many as the registered tasks' baseline has seeds (``OPEN_LOOP_SEEDS``), so its
#: search costs the same per candidate table (docs/policies.md gives the CPU seconds).
SCENARIOS = 10


def train_configs(task: str, overrides: dict | None = None, scenarios: int | None = None) -> list:
    """The ``FleetConfig`` of suite task ``task``'s train scenarios ``0 .. scenarios - 1`` (default
    :data:`SCENARIOS`) as the grader builds a scenario's env: ``SUITE_BASE`` with the scenario's
    config and ``overrides`` (env options such as ``protocol`` aside: they change no config)."""
    k = SCENARIOS if scenarios is None else int(scenarios)
    if k < 1:
        raise ValueError(f"scenarios = {scenarios!r}: expected a number of train scenarios >= 1")
    extra = {key: v for key, v in (overrides or {}).items() if key not in ENV_OPTIONS and key not in ("split", "compute_all")}
    return [make_config(SUITE_BASE, **{**suite.scenario(task, s, "train"), **extra})[0] for s in range(k)]


def scenario_starts(configs: list, seeds: list[int]) -> list[np.ndarray]:
    """The suite search's starts, as :func:`~fleet_marl.evaluation.reference.open_loop_starts`
    gives a registered task's: each tenant's default action every round, and for each of
    ``OPEN_LOOP_STARTS`` its episodes' tables on the scenarios (``configs[k]`` from ``seeds[k]``)
    reduced to each tenant's most frequent action per round and over the episodes."""
    tables: dict[str, list[np.ndarray]] = {name: [] for name in OPEN_LOOP_STARTS}
    starts: list[np.ndarray] = []
    for config, s in zip(configs, seeds, strict=True):
        env = parallel_env(config=config, compute_all=False)
        if not starts:
            starts.append(np.broadcast_to(env.default_action_index, (env.max_cycles, *env.nvec.shape)))
        for name in OPEN_LOOP_STARTS:
            rec = Recorder(env, load_policy(name, env))
            run_episode(env, rec, s, name)
            tables[name].append(rec.table)
    for name in OPEN_LOOP_STARTS:
        starts += [modal(np.asarray(tables[name]), per_round=True), modal(np.asarray(tables[name]))]
    return starts


_TABLES: dict[str, dict] = {}


def suite_open_loop_entry(
    task: str, overrides: dict | None = None, cache: bool = True, scenarios: int | None = None, budget: int | None = None
) -> dict:
    """The suite baseline's search (see the module docstring) for ``task`` with the grader's
    ``overrides`` and ``budget`` (tenant-rounds; None: ``OPEN_LOOP_BUDGET``): ``{"table",
    "welfare" (one per train scenario), "seeds" (their env seeds), "start_welfare" (the best
    start's mean), "episodes", "exhausted"}``, from the disk cache or this process's memory when they have it."""
    budget = OPEN_LOOP_BUDGET if budget is None else budget
    configs = train_configs(task, overrides, scenarios)
    seeds = [suite.env_seed(s, "train") for s in range(len(configs))]
    version = code_version() + "".join(data_version(c) for c in configs) if cache else ""
    blob = {
        "suite_task": task,
        "configs": [c.to_dict() for c in configs],
        "seeds": seeds,
        "levels": OPEN_LOOP_LEVELS,
        "sweeps": OPEN_LOOP_SWEEPS,
        "budget": budget,
        "starts": OPEN_LOOP_STARTS,
    }
    key = _cache_key(task, blob, OPEN_LOOP, -1, version)
    path = _cache_dir() / f"{key}.json"
    entry = _TABLES.get(key) if cache else None
    if entry is None and cache and path.is_file():
        try:
            entry = json.loads(path.read_text())
            np.asarray(entry["table"], np.int64)
        except (OSError, ValueError, TypeError, KeyError):
            entry = None  # a damaged entry is recomputed
    if entry is None:
        found = search_scenarios(
            configs,
            seeds,
            starts=scenario_starts(configs, seeds),
            levels=OPEN_LOOP_LEVELS,
            sweeps=OPEN_LOOP_SWEEPS,
            budget=budget,
        )
        entry = {
            "table": found.table.tolist(),
            "welfare": found.welfare.tolist(),
            "seeds": seeds,
            "start_welfare": found.start_welfare,
            "episodes": found.episodes,
            "exhausted": found.exhausted,
        }
    if cache:
        _TABLES[key] = entry
        if not path.is_file():
            _write(path, entry)
    return entry


def suite_open_loop_table(
    task: str, overrides: dict | None = None, cache: bool = True, scenarios: int | None = None, budget: int | None = None
) -> np.ndarray:
    """The ``open_loop`` baseline's ``(R, T, 8)`` table on suite task ``task`` (:func:`suite_open_loop_entry`)."""
    return np.asarray(suite_open_loop_entry(task, overrides, cache, scenarios, budget)["table"], np.int64)


class SuiteOpenLoop:
    """The ``open_loop`` spec on suite task ``task``, graded with ``overrides``: a factory
    ``env -> OpenLoopPolicy`` playing :func:`suite_open_loop_table` (searched with ``budget``
    tenant-rounds; None: the grader's) on any scenario of the task."""

    name = OPEN_LOOP

    def __init__(self, task: str, overrides: dict | None = None, cache: bool = True, budget: int | None = None):
        self.task, self.overrides, self.cache = suite.suite_task(task).name, dict(overrides or {}), cache
        self.budget = budget
        self.table: np.ndarray | None = None  # searched (or read) at the first scenario, played on every one

    def __call__(self, env) -> OpenLoopPolicy:
        if self.table is None:
            self.table = suite_open_loop_table(self.task, self.overrides, self.cache, budget=self.budget)
        return OpenLoopPolicy(env, self.table)

    def __repr__(self) -> str:
        extra = "" if self.budget is None else f", budget={self.budget!r}"
        return f"SuiteOpenLoop({self.task!r}, {self.overrides!r}{extra})"


__all__ = [
    "SCENARIOS",
    "SUITE_BASE",
    "SuiteOpenLoop",
    "scenario_starts",
    "suite_open_loop_entry",
    "suite_open_loop_table",
    "train_configs",
]

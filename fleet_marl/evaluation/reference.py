"""The reference episodes (``random``, ``planner`` and ``hindsight``) of the grader, cached on disk.

The ``hindsight`` reference of a seed is the best of its searches on that seed: the
:class:`~fleet_marl.policies.planner.HindsightPolicy` episode of each horizon in
``HINDSIGHT_HORIZONS``, and an open-loop search (:func:`fleet_marl.policies.open_loop.search`,
levels ``HINDSIGHT_LEVELS``, ``HINDSIGHT_SWEEPS`` pass, at most ``HINDSIGHT_BUDGET``
tenant-rounds) on that seed from the best of three
tables: the best hindsight episode's actions round by round, each tenant's most frequent action
of it every round, and, on a registered task without scenario overrides (env options such as
``protocol`` aside), the ``open_loop`` baseline's table (:func:`open_loop_table`). So it is at
least as good on every seed as the hindsight policy, and there as the open-loop baseline too
(docs/policies.md, "The hindsight reference"). With scenario overrides (a scaled team, a suite
scenario) the baseline's table is not searched for: it would cost a search on ten seeds per
scenario.

Every evaluation plays the references on the same seeds as the policy under test. They are
deterministic for a (task, overrides, seed, policy, code version, trace contents), so each
episode is cached as JSON under ``$FLEET_MARL_CACHE`` (default ``~/.cache/fleet_marl``)
``/grader/``, keyed by a digest of all of those: repeated evaluations only run the policy under
test. ``code_version()`` digests the package's code and data, leaving out the layers that
never change a reference episode (``NOT_EPISODE``: the commands, the studies, the trainers), once
per process, when this module is imported: the code a process runs is the code it imported,
so a file edited while a study runs neither keys its workers' gradings apart from the
references they cached before the runs (each worker would play them again) nor files the
episodes of the code they run under the edited code's key. ``data_version(env)`` digests the
trace files the env replays. A damaged entry is recomputed; a read-only home means no cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

import fleet_marl
from fleet_marl.config import FleetConfig
from fleet_marl.environment import FleetParallelEnv, parallel_env
from fleet_marl.evaluation.loading import PolicyError, load_policy
from fleet_marl.evaluation.runner import Episode, make_env, run_episode
from fleet_marl.policies import fleet_env
from fleet_marl.policies.open_loop import LEVELS, SWEEPS, OpenLoopPolicy, Recorder, modal, search
from fleet_marl.policies.planner import HindsightPolicy
from fleet_marl.tasks import ENV_OPTIONS, TASKS
from fleet_marl.workloads import resolve_trace

#: The two reference policies of the score: 0 is ``random``, 1 is ``planner``.
RANDOM, REFERENCE = "random", "planner"
#: The upper reference of ``gap_to_hindsight``: per seed, the best episode of the ``hindsight``
#: policy (the planner with the episode's future in hand) over these search horizons. A
#: longer horizon holds the joint action longer, which helps where queues and heat carry over
#: and hurts where jobs end mid-horizon, so each seed keeps its best (docs/policies.md).
HINDSIGHT, HINDSIGHT_HORIZONS = "hindsight", (1, 2, 3)
#: The open-loop search of the hindsight reference on its seed: its levels (the whole episode,
#: then quarters), passes per level and budget in tenant-rounds, bounded so it costs about what
#: the horizons cost (docs/policies.md gives the cost per seed).
HINDSIGHT_LEVELS, HINDSIGHT_SWEEPS, HINDSIGHT_BUDGET = (1, 4), 1, 4_000_000
#: The ``open_loop`` baseline: the table :func:`fleet_marl.policies.open_loop.search` finds on
#: these seeds (none of them a grader's seed: the baseline is scored out of sample), levels,
#: passes and budget in tenant-rounds; cached like the reference episodes.
OPEN_LOOP, OPEN_LOOP_SEEDS = "open_loop", tuple(range(1000, 1010))
OPEN_LOOP_LEVELS, OPEN_LOOP_SWEEPS, OPEN_LOOP_BUDGET = LEVELS, SWEEPS, 30_000_000
#: The policies whose episodes on ``OPEN_LOOP_SEEDS`` give the baseline's search its starts
#: (each tenant's most frequent action, per round and over the episode), with the default action.
OPEN_LOOP_STARTS = ("precision_expert", "planner")
#: How many seeds the grader plays on a task when not told (``fleet-marl evaluate``, the baseline
#: table): ``EPISODES``, or the task's entry of ``TASK_EPISODES``. ``tiny`` gets 100: its planner,
#: hindsight and open-loop rows are a welfare point or two apart, with a spread of 7 across seeds.
EPISODES, TASK_EPISODES = 10, {"tiny": 100}
#: Top-level folders of fleet_marl whose code never changes a reference episode: no module of
#: theirs is imported to play one (tests/test_grader_cache.py checks it).
NOT_EPISODE = frozenset({"rllib", "openenv", "studies", "cli", "tools", "torchrl", "clients", "training", "validation"})


def graded_episodes(task: str) -> int:
    """The seeds the grader plays on ``task`` by default (``EPISODES``, ``TASK_EPISODES``)."""
    return TASK_EPISODES.get(task, EPISODES)


def code_version() -> str:
    """A digest of the code and data that decide an episode: every ``.py`` and ``.yaml`` of
    fleet_marl outside ``NOT_EPISODE``, as this process imported it (:func:`package_digest`
    once, on import; not the files on disk now)."""
    return _CODE_VERSION


def package_digest(root: Path) -> str:
    """The digest of :func:`code_version` of the package folder ``root``, read now."""
    h = hashlib.blake2b(digest_size=12)
    for p in sorted(root.rglob("*")):
        # the layers above the episode never change a reference episode
        if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts and not NOT_EPISODE & set(p.relative_to(root).parts[:1]):
            h.update(p.relative_to(root.parent).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


_CODE_VERSION = package_digest(Path(fleet_marl.__file__).parent)


def _cache_dir() -> Path:
    return Path(os.environ.get("FLEET_MARL_CACHE", Path.home() / ".cache" / "fleet_marl")) / "grader"


_TRACE_DIGESTS: dict[tuple, str] = {}


def data_version(env: FleetParallelEnv | FleetConfig) -> str:
    """A digest of the trace files the env (or the scenario) replays (empty when it replays none)."""
    h = hashlib.blake2b(digest_size=12)
    for t in getattr(env, "config", env).tenants:
        if t.workload.pattern != "trace" or t.workload.trace is None:  # a trace workload names its file (the config checks it)
            continue
        p = resolve_trace(t.workload.trace).resolve()
        stat = p.stat()
        key = (str(p), stat.st_size, stat.st_mtime_ns)
        if key not in _TRACE_DIGESTS:
            _TRACE_DIGESTS[key] = hashlib.blake2b(p.read_bytes(), digest_size=12).hexdigest()
        h.update(_TRACE_DIGESTS[key].encode())
    return h.hexdigest()


def _cache_key(task: str, overrides: dict, policy: str, seed: int, version: str) -> str:
    blob = json.dumps(
        {"task": task, "overrides": overrides, "policy": policy, "seed": seed, "version": version}, sort_keys=True, default=str
    )
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def reference_episodes(task: str, name: str, seeds, overrides: dict | None = None, progress=None, cache: bool = True) -> list[Episode]:
    """Episodes of the reference ``name`` (random, planner or hindsight), from the cache when it
    has them."""
    overrides = dict(overrides or {})
    env, pol = make_env(task, **overrides), None
    version = code_version() + data_version(env) if cache else ""
    out = []
    baseline = None
    d = _cache_dir()
    for s in seeds:
        path = d / f"{_cache_key(task, overrides, name, int(s), version)}.json"
        if cache and path.is_file():
            try:
                out.append(Episode(**json.loads(path.read_text())))
                if progress is not None:
                    progress.update(1)
                continue
            except (OSError, ValueError, TypeError):
                pass  # a damaged entry is recomputed
        if name == HINDSIGHT:  # the best of its searches: the horizons, and an open-loop search on the seed
            if baseline is None and task in TASKS and not set(overrides) - set(ENV_OPTIONS):
                baseline = open_loop_table(fleet_env(env).config, cache)
            ep = hindsight_episode(env, int(s), baseline)
        else:
            if pol is None:
                pol = load_policy(name, env)
            ep = run_episode(env, pol, int(s), name)
        out.append(ep)
        if cache:
            _write(path, asdict(ep))
        if progress is not None:
            progress.update(1)
    return out


def hindsight_episode(env, seed: int, baseline=None, report: dict | None = None) -> Episode:
    """The hindsight reference's episode of ``seed``: the best of the hindsight policy's episodes
    over ``HINDSIGHT_HORIZONS`` and of the open-loop search on ``seed`` from the best of its
    tables (the best episode's actions, each tenant's most frequent one, ``baseline``).
    ``report``, a dict, gets each part's welfare and CPU seconds (for the docs' cost figures)."""
    t0 = time.process_time()
    best: Episode | None = None
    table: np.ndarray | None = None
    for h in HINDSIGHT_HORIZONS:
        rec = Recorder(env, HindsightPolicy(env, horizon=h))
        ep = run_episode(env, rec, seed, HINDSIGHT)
        if best is None or ep.welfare > best.welfare:
            best, table = ep, rec.table.copy()
    assert best is not None and table is not None  # HINDSIGHT_HORIZONS is not empty
    t1 = time.process_time()
    starts = [table, modal(table)] + ([] if baseline is None else [baseline])
    found = search(fleet_env(env).config, [seed], starts=starts, levels=HINDSIGHT_LEVELS, sweeps=HINDSIGHT_SWEEPS, budget=HINDSIGHT_BUDGET)
    try:
        searched = run_episode(env, OpenLoopPolicy(env, found.table), seed, HINDSIGHT)
    except PolicyError:  # an env with illegal_action="raise" refuses a GPU count a budget cannot afford
        searched = best
    if report is not None:
        report.update(
            horizons=best.welfare,
            searched=searched.welfare,
            horizons_seconds=t1 - t0,
            search_seconds=time.process_time() - t1,
            search_episodes=found.episodes,
            exhausted=found.exhausted,
        )
    return searched if searched.welfare > best.welfare else best


_TABLES: dict[str, dict] = {}


def open_loop_table(config, cache: bool = True):
    """The ``open_loop`` baseline's table for the scenario ``config`` (a ``FleetConfig``): the
    search on ``OPEN_LOOP_SEEDS`` from :func:`open_loop_starts`, from the disk cache when it has
    it (keyed by the config, the search's settings, ``code_version()`` and the traces' digest)
    or from this process's memory of it (a table is a function of that key)."""
    version = code_version() + data_version(config) if cache else ""
    blob = {
        "config": config.to_dict(),
        "seeds": OPEN_LOOP_SEEDS,
        "levels": OPEN_LOOP_LEVELS,
        "sweeps": OPEN_LOOP_SWEEPS,
        "budget": OPEN_LOOP_BUDGET,
        "starts": OPEN_LOOP_STARTS,
    }
    key = _cache_key("", blob, OPEN_LOOP, -1, version)
    path = _cache_dir() / f"{key}.json"
    entry = _TABLES.get(key) if cache else None  # this process searched it already (whatever the cache folder)
    if entry is None and cache and path.is_file():
        try:
            entry = json.loads(path.read_text())
            np.asarray(entry["table"], np.int64)
        except (OSError, ValueError, TypeError, KeyError):
            entry = None  # a damaged entry is recomputed
    if entry is None:
        found = search(
            config,
            OPEN_LOOP_SEEDS,
            starts=open_loop_starts(config),
            levels=OPEN_LOOP_LEVELS,
            sweeps=OPEN_LOOP_SWEEPS,
            budget=OPEN_LOOP_BUDGET,
        )
        entry = {"table": found.table.tolist(), "welfare": found.welfare.tolist(), "episodes": found.episodes, "exhausted": found.exhausted}
    if cache:
        _TABLES[key] = entry
        if not path.is_file():
            _write(path, entry)
    return np.asarray(entry["table"], np.int64)


def open_loop_starts(config) -> list[np.ndarray]:
    """The baseline search's starts: each tenant's default action every round, and for each of
    ``OPEN_LOOP_STARTS`` its episodes' tables on ``OPEN_LOOP_SEEDS`` reduced to each tenant's most
    frequent action per round and over the episodes (:func:`fleet_marl.policies.open_loop.modal`)."""
    env = parallel_env(config=config, compute_all=False)
    starts = [np.broadcast_to(env.default_action_index, (env.max_cycles, *env.nvec.shape))]
    for name in OPEN_LOOP_STARTS:
        tables = []
        for s in OPEN_LOOP_SEEDS:
            rec = Recorder(env, load_policy(name, env))
            run_episode(env, rec, s, name)
            tables.append(rec.table)
        starts += [modal(np.asarray(tables), per_round=True), modal(np.asarray(tables))]
    return starts


def _write(path: Path, d: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(d))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: no cache


__all__ = [
    "EPISODES",
    "HINDSIGHT",
    "HINDSIGHT_BUDGET",
    "HINDSIGHT_HORIZONS",
    "HINDSIGHT_LEVELS",
    "HINDSIGHT_SWEEPS",
    "NOT_EPISODE",
    "OPEN_LOOP",
    "OPEN_LOOP_BUDGET",
    "OPEN_LOOP_LEVELS",
    "OPEN_LOOP_SEEDS",
    "OPEN_LOOP_STARTS",
    "OPEN_LOOP_SWEEPS",
    "RANDOM",
    "REFERENCE",
    "TASK_EPISODES",
    "code_version",
    "data_version",
    "graded_episodes",
    "hindsight_episode",
    "open_loop_starts",
    "open_loop_table",
    "package_digest",
    "reference_episodes",
]

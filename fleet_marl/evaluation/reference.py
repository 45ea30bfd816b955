"""The reference episodes (``random``, ``planner`` and ``hindsight``) of the grader, cached on disk.

Every evaluation plays the references on the same seeds as the policy under test. They are
deterministic for a (task, overrides, seed, policy, code version, trace contents), so each
episode is cached as JSON under ``$FLEET_MARL_CACHE`` (default ``~/.cache/fleet_marl``)
``/grader/``, keyed by a digest of all of those: repeated evaluations only run the policy under
test. ``code_version()`` digests the package's code and data, leaving out the layers that
never change a reference episode (``NOT_EPISODE``); ``data_version(env)`` digests the trace
files the env replays. A damaged entry is recomputed; a read-only home means no cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import fleet_marl
from fleet_marl.environment import FleetParallelEnv
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.evaluation.runner import Episode, make_env, run_episode
from fleet_marl.policies.planner import HindsightPolicy
from fleet_marl.workloads import resolve_trace

#: The two reference policies of the score: 0 is ``random``, 1 is ``planner``.
RANDOM, REFERENCE = "random", "planner"
#: The upper reference of ``gap_to_hindsight``: per seed, the best episode of the ``hindsight``
#: policy (the planner with the episode's future in hand) over these search horizons. A
#: longer horizon holds the joint action longer, which helps where queues and heat carry over
#: and hurts where jobs end mid-horizon, so each seed keeps its best (docs/policies.md).
HINDSIGHT, HINDSIGHT_HORIZONS = "hindsight", (1, 2, 3)
#: Top-level folders of fleet_marl whose code never changes a reference episode.
NOT_EPISODE = frozenset({"rllib", "openenv", "studies", "cli", "tools"})


def code_version() -> str:
    """A digest of the code and data that decide an episode: every ``.py`` and ``.yaml`` of
    fleet_marl outside ``NOT_EPISODE``."""
    root = Path(fleet_marl.__file__).parent
    h = hashlib.blake2b(digest_size=12)
    for p in sorted(root.rglob("*")):
        # the layers above the episode never change a reference episode
        if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts and not NOT_EPISODE & set(p.relative_to(root).parts[:1]):
            h.update(p.relative_to(root.parent).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _cache_dir() -> Path:
    return Path(os.environ.get("FLEET_MARL_CACHE", Path.home() / ".cache" / "fleet_marl")) / "grader"


_TRACE_DIGESTS: dict[tuple, str] = {}


def data_version(env: FleetParallelEnv) -> str:
    """A digest of the trace files the env replays (empty when it replays none)."""
    h = hashlib.blake2b(digest_size=12)
    for t in env.config.tenants:
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
        if name == HINDSIGHT:  # the best of the hindsight policy's episodes over its horizons
            ep = max((run_episode(env, HindsightPolicy(env, horizon=h), int(s), name) for h in HINDSIGHT_HORIZONS), key=lambda e: e.welfare)
        else:
            if pol is None:
                pol = load_policy(name, env)
            ep = run_episode(env, pol, int(s), name)
        out.append(ep)
        if cache:
            try:
                d.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(asdict(ep)))
                tmp.replace(path)
            except OSError:
                pass  # a read-only home: no cache
        if progress is not None:
            progress.update(1)
    return out


__all__ = ["HINDSIGHT", "HINDSIGHT_HORIZONS", "NOT_EPISODE", "RANDOM", "REFERENCE", "code_version", "data_version", "reference_episodes"]

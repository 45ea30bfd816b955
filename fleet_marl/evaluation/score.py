"""The grader's score and :func:`evaluate`, the entry point of ``fleet-marl evaluate``.

::

    score = clip((W_policy - W_random) / (W_planner - W_random), 0, 1)

with ``W`` the mean episode welfare (``sum_t G_t``, the sum of every tenant's utility over the
episode) over the same seeds: 0 is no better than the ``random`` policy, 1 is as good as the
centralized ``planner`` or better. The episode with seed ``s`` resets the environment and the
policy with ``s``, so an evaluation is deterministic for its list of seeds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from fleet_marl.evaluation.loading import load_policy, source_name
from fleet_marl.evaluation.reference import RANDOM, REFERENCE, reference_episodes
from fleet_marl.evaluation.runner import EVENTS, Episode, make_env, run_episode
from fleet_marl.tasks import TASKS


class GraderError(ValueError):
    """The score is undefined (the reference does not beat random on these seeds)."""


@dataclass
class Evaluation:
    """A policy's evaluation on one task: its episodes, the references' and the score."""

    task: str
    policy: str
    seeds: list[int]
    episodes: list[Episode]
    random_welfare: list[float]
    reference_welfare: list[float]
    overrides: dict = field(default_factory=dict)

    @property
    def welfare(self) -> np.ndarray:
        return np.array([e.welfare for e in self.episodes])

    @property
    def score(self) -> float:
        return score(float(self.welfare.mean()), float(np.mean(self.random_welfare)), float(np.mean(self.reference_welfare)))

    def summary(self) -> dict:
        """The JSON report (``fleet-marl evaluate --json``)."""
        eps = self.episodes
        rho = [r["rho"] for e in eps for r in e.agents.values() if r.get("rho") is not None]
        waits = [r["p99_wait_s"] for e in eps for r in e.agents.values() if r.get("p99_wait_s") is not None]
        return {
            "task": self.task,
            "policy": self.policy,
            "episodes": len(eps),
            "protocol": self.overrides.get("protocol", "simultaneous"),
            "turn_order": self.overrides.get("turn_order") if self.overrides.get("protocol") == "sequential" else None,
            "seeds": list(self.seeds),
            "welfare_mean": float(self.welfare.mean()),
            "welfare_std": float(self.welfare.std()),
            "welfare": self.welfare.tolist(),
            "score": self.score,
            "random_welfare_mean": float(np.mean(self.random_welfare)),
            "reference_welfare_mean": float(np.mean(self.reference_welfare)),
            "jain_mean": float(np.mean([e.jain for e in eps])),
            "starvation_events": int(sum(e.starvation_events for e in eps)),
            "max_starvation_streak": int(max(e.max_starvation_streak for e in eps)),
            "rho_mean": float(np.mean(rho)) if rho else None,
            "p99_wait_s_max": float(np.max(waits)) if waits else None,
            "rounds_mean": float(np.mean([e.rounds for e in eps])),
            "illegal": int(sum(e.illegal for e in eps)),
            **{k: int(sum(e.events[k] for e in eps)) for k in EVENTS},
            "agents": _agent_table(eps),
        }


def _agent_table(eps: list[Episode]) -> dict[str, dict]:
    agents = list(eps[0].agents)
    out = {}
    for a in agents:
        rs = [e.agents[a] for e in eps if a in e.agents]
        out[a] = {
            "return_mean": float(np.mean([r["return"] for r in rs])),
            "utility_mean": float(np.mean([r["utility"] for r in rs])),
            "service_mean": float(np.mean([r["service"] for r in rs])),
            "jobs_done": int(sum(r["jobs_done"] for r in rs)),
            "starvation_events": int(sum(r["starvation_events"] for r in rs)),
            "degenerate": int(sum(r["degenerate"] for r in rs)),
        }
    return out


def score(welfare: float, random_welfare: float, reference_welfare: float) -> float:
    """``clip((W - W_random) / (W_reference - W_random), 0, 1)``."""
    span = reference_welfare - random_welfare
    if not span > 0:
        raise GraderError(
            f"the score is undefined: reference welfare {reference_welfare:.3f} does not exceed random welfare {random_welfare:.3f} on these seeds; use more episodes or another task"
        )
    return float(np.clip((welfare - random_welfare) / span, 0.0, 1.0))


def evaluate(
    task: str,
    policy: str | Callable | Any,
    episodes: int = 10,
    seed: int = 0,
    overrides: dict | None = None,
    progress: bool = True,
    cache: bool = True,
) -> Evaluation:
    """Evaluate ``policy`` on ``task`` for seeds ``seed .. seed + episodes - 1``, with the
    random and planner references on the same seeds."""
    if task not in TASKS:
        raise ValueError(f"task = {task!r}: expected one of {', '.join(TASKS)}")
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes = {episodes!r}: expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed = {seed!r}: expected a non-negative integer")
    overrides = dict(overrides or {})
    seeds = list(range(int(seed), int(seed) + int(episodes)))
    env = make_env(task, **overrides)
    source = source_name(policy)
    pol = load_policy(policy, env)
    bar = None
    if progress:
        own = 0 if isinstance(policy, str) and policy in (RANDOM, REFERENCE) else len(seeds)
        bar = tqdm(total=2 * len(seeds) + own, desc=f"evaluate {task}", unit="episode", file=sys.stderr, leave=False)
    try:
        rand = reference_episodes(task, RANDOM, seeds, overrides, bar, cache)
        ref = reference_episodes(task, REFERENCE, seeds, overrides, bar, cache)
        if isinstance(policy, str) and policy in (RANDOM, REFERENCE):
            eps = rand if policy == RANDOM else ref  # the same episodes: play them once
        else:
            eps = []
            for s in seeds:
                eps.append(run_episode(env, pol, s, str(source)))
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return Evaluation(
        task=task,
        policy=str(source),
        seeds=seeds,
        episodes=eps,
        random_welfare=[e.welfare for e in rand],
        reference_welfare=[e.welfare for e in ref],
        overrides=overrides,
    )


__all__ = ["Evaluation", "GraderError", "evaluate", "score"]

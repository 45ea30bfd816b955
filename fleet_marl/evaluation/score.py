"""The grader's score and :func:`evaluate`, the entry point of ``fleet-marl evaluate``.

::

    score = max((W_policy - W_random) / (W_planner - W_random), 0)
    gap_to_hindsight = (W_hindsight - W_policy) / (W_hindsight - W_random)

with ``W`` the mean episode welfare (``sum_t G_t``, the sum of every tenant's utility over the
episode) over the same seeds: 0 is no better than the ``random`` policy, 1 is as good as the
centralized ``planner``, above 1 better than it (the score is not capped: a policy that beats
the planner shows by how much). The gap measures the way left to ``hindsight``, the best of
the grader's searches with the episode's future in hand (1 for random, 0 at the hindsight
reference, below 0 for a policy that beats it; docs/policies.md). The episode with
seed ``s`` resets the environment and the policy with ``s``, so an evaluation is deterministic
for its list of seeds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from fleet_marl import suite
from fleet_marl.checks import is_integer, is_seed
from fleet_marl.evaluation.loading import load_policy, source_name
from fleet_marl.evaluation.reference import HINDSIGHT, OPEN_LOOP, RANDOM, REFERENCE, reference_episodes
from fleet_marl.evaluation.runner import EVENTS, INTERVENTIONS, Episode, episode_means, intervention_rates, make_env, run_episode
from fleet_marl.evaluation.suite_open_loop import SUITE_BASE, SuiteOpenLoop
from fleet_marl.suite import SUITE
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
    #: the hindsight reference's welfare on the same seeds (None: not evaluated; see :func:`evaluate`)
    hindsight_welfare: list[float] | None = None

    @property
    def welfare(self) -> np.ndarray:
        return np.array([e.welfare for e in self.episodes])

    @property
    def score(self) -> float:
        return score(float(self.welfare.mean()), float(np.mean(self.random_welfare)), float(np.mean(self.reference_welfare)))

    @property
    def gap_to_hindsight(self) -> float | None:
        """``(W_hindsight - W) / (W_hindsight - W_random)`` (None without the hindsight episodes)."""
        if self.hindsight_welfare is None:
            return None
        return gap(float(self.welfare.mean()), float(np.mean(self.random_welfare)), float(np.mean(self.hindsight_welfare)))

    def summary(self) -> dict:
        """The JSON report (``fleet-marl evaluate --json``)."""
        eps = self.episodes
        means = episode_means(eps)
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
            # safety interventions per tenant-round (each kind, and all of them), and their counts
            "intervention_rate": intervention_rates(eps),
            "interventions": {k: int(sum(c[k] for e in eps for c in e.interventions.values())) for k in INTERVENTIONS},
            "tenant_rounds": int(sum(sum(e.tenant_rounds.values()) for e in eps)),
            "score": self.score,
            "random_welfare_mean": float(np.mean(self.random_welfare)),
            "reference_welfare_mean": float(np.mean(self.reference_welfare)),
            "hindsight_welfare_mean": None if self.hindsight_welfare is None else float(np.mean(self.hindsight_welfare)),
            "gap_to_hindsight": self.gap_to_hindsight,
            "jain_mean": means["jain"],
            "starvation_events": int(sum(e.starvation_events for e in eps)),
            "max_starvation_streak": int(max(e.max_starvation_streak for e in eps)),
            "rho_mean": float(np.mean(rho)) if rho else None,
            "p99_wait_s_max": float(np.max(waits)) if waits else None,
            "rounds_mean": means["rounds"],
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
            "intervention_rate": intervention_rates(eps, a)["total"],
        }
    return out


def score(welfare: float, random_welfare: float, reference_welfare: float) -> float:
    """``max((W - W_random) / (W_reference - W_random), 0)``: floored at random, not capped at the
    reference (above 1 beats it)."""
    span = reference_welfare - random_welfare
    if not span > 0:
        raise GraderError(
            f"the score is undefined: reference welfare {reference_welfare:.3f} does not exceed random welfare {random_welfare:.3f} on these seeds; use more episodes or another task"
        )
    return float(max((welfare - random_welfare) / span, 0.0))


def gap(welfare: float, random_welfare: float, hindsight_welfare: float) -> float | None:
    """``(W_hindsight - W) / (W_hindsight - W_random)``, unclipped; None where the hindsight
    reference does not beat random on these seeds."""
    span = hindsight_welfare - random_welfare
    return float((hindsight_welfare - welfare) / span) if span > 0 else None


def evaluate(
    task: str,
    policy: str | Callable | Any,
    episodes: int = 10,
    seed: int = 0,
    overrides: dict | None = None,
    progress: bool = True,
    cache: bool = True,
    hindsight: bool = True,
) -> Evaluation:
    """Evaluate ``policy`` on ``task`` for seeds ``seed .. seed + episodes - 1``, with the
    random and planner references on the same seeds, and (``hindsight``, the default; the
    simultaneous protocol only) the hindsight reference for ``gap_to_hindsight``.

    A suite task (:mod:`fleet_marl.suite`) plays its scenarios ``seed .. seed + episodes - 1`` of
    the split ``overrides["split"]`` (default ``"heldout"``), each its own config reset with
    :func:`fleet_marl.suite.env_seed`, the references on the same ones. There the ``open_loop``
    baseline plays the one table searched on the task's train scenarios
    (:class:`~fleet_marl.evaluation.suite_open_loop.SuiteOpenLoop`), not a table per scenario."""
    if task not in TASKS and task not in SUITE:
        raise ValueError(f"task = {task!r}: expected one of {', '.join(TASKS)}, or a suite task (fleet-marl suite list)")
    if not is_integer(episodes) or episodes < 1:
        raise ValueError(f"episodes = {episodes!r}: expected an integer >= 1")
    if not is_seed(seed):
        raise ValueError(f"seed = {seed!r}: expected a non-negative integer")
    overrides = dict(overrides or {})
    if task in SUITE:
        return _evaluate_scenarios(task, policy, episodes, seed, overrides, progress, cache, hindsight)
    seeds = list(range(int(seed), int(seed) + int(episodes)))
    env = make_env(task, **overrides)
    source = source_name(policy)
    pol = load_policy(policy, env)
    refs = (RANDOM, REFERENCE, HINDSIGHT)
    hindsight = (hindsight and overrides.get("protocol", "simultaneous") == "simultaneous") or policy == HINDSIGHT
    bar = None
    if progress:
        own = 0 if isinstance(policy, str) and policy in refs else len(seeds)
        bar = tqdm(total=(2 + hindsight) * len(seeds) + own, desc=f"evaluate {task}", unit="episode", file=sys.stderr, leave=False)
    try:
        rand = reference_episodes(task, RANDOM, seeds, overrides, bar, cache)
        ref = reference_episodes(task, REFERENCE, seeds, overrides, bar, cache)
        hind = reference_episodes(task, HINDSIGHT, seeds, overrides, bar, cache) if hindsight else None
        if isinstance(policy, str) and policy in refs:
            eps = {RANDOM: rand, REFERENCE: ref, HINDSIGHT: hind or []}[policy]  # the same episodes: play them once
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
        hindsight_welfare=None if hind is None else [e.welfare for e in hind],
    )


def _evaluate_scenarios(task: str, policy, episodes: int, seed: int, overrides: dict, progress, cache, hindsight) -> Evaluation:
    """:func:`evaluate` on suite task ``task``: each scenario of the split played once, pooled."""
    split = suite.check_split(overrides.pop("split", "heldout"))
    if isinstance(policy, str) and policy == OPEN_LOOP:  # the baseline is fit on the train scenarios, never on the graded one
        policy = SuiteOpenLoop(task, overrides, cache)
    parts = []
    bar = tqdm(total=episodes, desc=f"evaluate {task} {split}", unit="scenario", file=sys.stderr, leave=False, disable=not progress)
    try:
        for env_seed, cfg in suite.scenarios(task, range(seed, seed + episodes), split):
            # every scenario sets each field the base task sets, so its config is the scenario's own
            parts.append(evaluate(SUITE_BASE, policy, 1, env_seed, {**cfg, **overrides}, False, cache, hindsight))
            bar.update(1)
    finally:
        bar.close()
    hind = [p.hindsight_welfare for p in parts]
    return Evaluation(
        task=task,
        policy=parts[0].policy,
        seeds=[s for p in parts for s in p.seeds],
        episodes=[e for p in parts for e in p.episodes],
        random_welfare=[w for p in parts for w in p.random_welfare],
        reference_welfare=[w for p in parts for w in p.reference_welfare],
        overrides={**overrides, "split": split},
        hindsight_welfare=None if any(h is None for h in hind) else [w for h in hind if h is not None for w in h],
    )


__all__ = ["Evaluation", "GraderError", "evaluate", "gap", "score"]

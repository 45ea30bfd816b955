"""One run of the credit-assignment study on the TorchRL engine (``fleet-marl compare``).

:func:`run_one` trains one :class:`~fleet_marl.torchrl.train.TorchRLTrainConfig` with the
trainer's own loop (:class:`~fleet_marl.torchrl.train.Loop`, the sync collector, one torch
thread) and grades the greedy policy with the grader (:func:`fleet_marl.evaluation.evaluate`)
at the iterations ``eval_at``: the learning curve in graded welfare, whose last point is the
run's result. It writes nothing: the study (:mod:`fleet_marl.studies.credit_study`) stores
what it returns. Timing: ``train_seconds`` (collection and learning), ``eval_seconds`` (the
grader), ``credit_seconds`` (the env's credit engine: the one kernel call per step and the
scheme's arithmetic, part of ``train_seconds``).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fleet_marl.torchrl.train import Learner, Loop, TorchRLTrainConfig, grade


def run_one(tc: TorchRLTrainConfig, eval_at: list[int], episodes: int) -> tuple[dict, list[dict]]:
    """Train ``tc`` (sync collector, its iterations; no files) and grade at the iterations
    ``eval_at`` (the last must be ``tc.iterations``) on grader seeds 0 .. episodes - 1.
    Returns (the run's measures, one curve row per graded iteration)."""
    if not eval_at or eval_at[-1] != tc.iterations:
        raise ValueError(f"eval_at = {eval_at!r}: expected iterations ending with the last, {tc.iterations}")
    torch.set_num_threads(max(tc.threads, 1))
    t0 = time.perf_counter()
    learner = Learner(tc, tc.signature())
    loop = Loop(tc, learner)
    curve: list[dict] = []
    eval_seconds = 0.0
    welfare_since: list[float] = []
    ev = None
    try:
        for row in loop:
            if row["welfare"] != "":
                welfare_since.append(float(row["welfare"]))
            if row["iteration"] in eval_at:
                te = time.perf_counter()
                ev = grade(learner, tc, episodes)
                eval_seconds += time.perf_counter() - te
                eps = ev.episodes
                curve.append(
                    {
                        "iteration": row["iteration"],
                        "env_steps": row["env_steps"],
                        "agent_steps": row["agent_steps"],
                        "train_welfare": float(np.mean(welfare_since)) if welfare_since else "",
                        "eval_welfare": float(ev.welfare.mean()),
                        "score": float(ev.score),
                        "jain": float(np.mean([e.jain for e in eps])),
                        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
                        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
                welfare_since = []
        env_steps = loop.frames * tc.iterations
        credit_seconds = loop.env.venv.credit_seconds if loop.env is not None else float("nan")
    finally:
        loop.close()
    seconds = time.perf_counter() - t0
    eps = ev.episodes
    result = {
        "iterations": tc.iterations,
        "env_steps": env_steps,
        "agent_steps": env_steps * len(learner.sig["possible_agents"]),
        "eval_welfare": float(ev.welfare.mean()),
        "score": float(ev.score),
        "jain": float(np.mean([e.jain for e in eps])),
        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
        "illegal": float(np.mean([e.illegal for e in eps])),
        "random_welfare": float(np.mean(ev.random_welfare)),
        "planner_welfare": float(np.mean(ev.reference_welfare)),
        "run_seconds": round(seconds, 2),
        "train_seconds": round(seconds - eval_seconds, 2),
        "eval_seconds": round(eval_seconds, 2),
        "credit_seconds": round(credit_seconds, 3),
        "credit_ms_per_step": round(1e3 * credit_seconds / max(env_steps, 1), 4),
    }
    return result, curve


__all__ = ["run_one"]

"""The rows a run of the credit-assignment study writes, whatever engine trained it.

Every engine's runs module (:data:`~fleet_marl.studies.credit.runs.RUNNERS`) trains a run and
grades it with the grader (:func:`fleet_marl.evaluation.evaluate`) at the iterations
``study.eval_at(part)``; these functions turn what it measured into the study's columns
(:data:`~fleet_marl.studies.credit.torchrl_design.RESULT_COLUMNS`, ``CURVE_COLUMNS``), so the
CSVs mean the same on every engine:

:func:`point`      one row of ``curves.csv``: a graded iteration
:func:`result`     the engine's part of a ``results.csv`` row: budget, the last grading, timing
:func:`hindsight`  the gap to the hindsight reference of a grading that played it (a design's column)
:func:`study_row`  the study's part: the run's key, its arm, convergence and steps to 90% of
                   the final score; returns the run's ``(row, curve rows)``
:func:`caught`     a run in a worker: its ``(key, (row, curve))``, or ``(key, message)``
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fleet_marl.evaluation import episode_means
from fleet_marl.studies.credit.torchrl_design import KEY, Study, converged


def graded(ev: Any) -> dict:
    """The grader's figures of one evaluation ``ev`` that a curve point and a result share."""
    means = episode_means(ev.episodes)
    return {
        "eval_welfare": float(ev.welfare.mean()),
        "score": float(ev.score),
        **{k: means[k] for k in ("jain", "starvation_events", "degenerate")},
    }


def point(iteration: int, env_steps: int, agent_steps: int, train_welfare: list[float], ev: Any, seconds: float) -> dict:
    """The curve row of a graded iteration: ``train_welfare`` the training welfare the engine
    reported since the last graded point (their mean; empty for none), ``ev`` the grader's
    evaluation, ``seconds`` since the run started."""
    return {
        "iteration": iteration,
        "env_steps": env_steps,
        "agent_steps": agent_steps,
        "train_welfare": float(np.mean(train_welfare)) if train_welfare else "",
        **graded(ev),
        "seconds": round(seconds, 2),
    }


def result(iterations: int, env_steps: int, agent_steps: int, ev: Any, seconds: float, eval_seconds: float, credit_seconds: float) -> dict:
    """A run's measures: its budget, the grader's last evaluation ``ev`` (and its references),
    and its timing (``seconds`` in all, ``eval_seconds`` of them grading, ``credit_seconds`` in
    the env's credit engine, also per env step)."""
    return {
        "iterations": iterations,
        "env_steps": env_steps,
        "agent_steps": agent_steps,
        **graded(ev),
        "illegal": episode_means(ev.episodes)["illegal"],
        "random_welfare": float(np.mean(ev.random_welfare)),
        "planner_welfare": float(np.mean(ev.reference_welfare)),
        "run_seconds": round(seconds, 2),
        "train_seconds": round(seconds - eval_seconds, 2),
        "eval_seconds": round(eval_seconds, 2),
        "credit_seconds": round(credit_seconds, 3),
        "credit_ms_per_step": round(1e3 * credit_seconds / max(env_steps, 1), 4),
    }


def hindsight(ev: Any) -> dict:
    """The gap of an evaluation ``ev`` that played the hindsight reference
    (:attr:`~fleet_marl.evaluation.score.Evaluation.gap_to_hindsight`, empty where the reference
    does not beat random) and the reference's mean welfare."""
    gap = ev.gap_to_hindsight
    return {
        "gap": "" if gap is None else float(gap),
        "hindsight_welfare": "" if ev.hindsight_welfare is None else float(np.mean(ev.hindsight_welfare)),
    }


def study_row(study: Study, key: tuple, res: dict, curve: list[dict]) -> tuple[dict, list[dict]]:
    """The results row and curve rows of the run ``key``, from what its engine measured
    (``res``: :func:`result`; ``curve``: a :func:`point` per graded iteration, the 80% point
    among them). Converged: the graded welfare moved by less than ``study.converge_tol`` over
    the last 20% of the budget, up or down (:func:`~fleet_marl.studies.credit.torchrl_design.converged`).
    The row holds the design's columns (``study.RESULT_COLUMNS``)
    of what was measured."""
    ids = dict(zip(KEY, key, strict=True))
    scheme, sharing = study.arm(key)
    at80 = next(c for c in curve if c["iteration"] == max(1, round(0.8 * res["iterations"])))
    w80, final = at80["eval_welfare"], res["eval_welfare"]
    improvement = (final - w80) / max(abs(w80), 1e-9)
    reached = next((c for c in curve if res["score"] > 0 and c["score"] >= 0.9 * res["score"]), None)
    row = {
        **ids,
        "scheme": scheme,
        "sharing": sharing,
        **res,
        "welfare_at_80": w80,
        "improvement_last_20": improvement,
        "converged": int(converged(improvement, study.converge_tol)),
        "env_steps_to_90": reached["env_steps"] if reached else "",
        "agent_steps_to_90": reached["agent_steps"] if reached else "",
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    row = {k: v for k, v in row.items() if k in study.RESULT_COLUMNS}  # the design's columns (an engine may measure more)
    return row, [{**ids, **c} for c in curve]


def caught(run_one: Callable[[Study, tuple], tuple[dict, list[dict]]], study: Study, key: tuple) -> tuple[tuple, tuple | str]:
    """``run_one(study, key)`` in a worker (a process of a pool, or a Ray task): ``(key, (row,
    curve))``, or ``(key, message)`` when the run failed."""
    try:
        return key, run_one(study, key)
    except Exception as exc:  # noqa: BLE001 -- the parent names the run and keeps the others going
        text = str(exc).strip()
        return key, text.splitlines()[-1] if text else type(exc).__name__


__all__ = ["caught", "graded", "hindsight", "point", "result", "study_row"]

"""The suite study's baseline rows (issue 48, item 3): policies the study does not train, graded
like a learned run, in the form :func:`~fleet_marl.studies.credit.suite_report.baseline_table` takes.

:func:`open_loop_rows` grades the ``open_loop`` baseline -- the one table per suite task searched
on its train scenarios (:mod:`fleet_marl.evaluation.suite_open_loop`), seeing only the round
index -- as :class:`~fleet_marl.studies.credit.suite_design.SuiteStudy` grades a run: on scenarios
``0 .. episodes - 1`` of ``split`` (``score``) and of the train split (``train_score``), the
grader's pooled score (mean welfare against the references' means), with the same overrides, so
it reads the references the study cached. The baseline is deterministic (no training seed), so
its interval is across scenarios: ``score_h`` is the 95% half-width of the per-scenario terms
``(W_k - W_random,k) / (W_planner - W_random)`` (means over the scenarios in the denominator),
whose mean is the pooled score before its floor at 0; NaN on one scenario. ``seeds`` is the
number of scenarios graded.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fleet_marl import suite
from fleet_marl.evaluation import OPEN_LOOP, Evaluation, evaluate
from fleet_marl.studies.credit.stats import mean_ci


def scenario_terms(ev: Evaluation) -> np.ndarray:
    """Per scenario ``(W_k - W_random,k) / (W_planner - W_random)`` (means in the denominator): their mean is the unfloored pooled score."""
    rand, ref = np.asarray(ev.random_welfare), np.asarray(ev.reference_welfare)
    return (ev.welfare - rand) / (ref.mean() - rand.mean())


def open_loop_row(task: str, split: str = "heldout", episodes: int = 10, overrides: dict | None = None, cache: bool = True) -> dict:
    """The ``open_loop`` baseline's row on suite task ``task`` (see the module docstring):
    ``{"policy", "family", "n", "score", "score_h", "train_score", "seeds", "task", "split"}``."""
    t = suite.suite_task(task)
    base = dict(overrides or {})
    held = evaluate(t.name, OPEN_LOOP, episodes, 0, {**base, "split": split}, progress=False, cache=cache, hindsight=False)
    train = evaluate(t.name, OPEN_LOOP, episodes, 0, {**base, "split": "train"}, progress=False, cache=cache, hindsight=False)
    _, h = mean_ci(scenario_terms(held).tolist())
    return {
        "policy": OPEN_LOOP,
        "family": t.family.name,
        "n": t.n,
        "score": held.score,
        "score_h": h,
        "train_score": train.score,
        "seeds": episodes,
        "task": t.name,
        "split": split,
    }


def open_loop_rows(
    tasks: Iterable[str], split: str = "heldout", episodes: int = 10, overrides: dict | None = None, cache: bool = True
) -> list[dict]:
    """:func:`open_loop_row` of each suite task of ``tasks`` (names such as ``"scarce_n8"``)."""
    return [open_loop_row(task, split, episodes, overrides, cache) for task in tasks]


__all__ = ["open_loop_row", "open_loop_rows", "scenario_terms"]

"""The suite study's baseline rows (issue 48, item 3): policies the study does not train, graded
like a learned run, in the form :func:`~fleet_marl.studies.credit.suite_report.baseline_table` takes,
computed once per study before its runs and stored in its folder (``baselines.csv``).

:func:`open_loop_row` grades the ``open_loop`` baseline -- the one table per suite task searched
on its train scenarios (:mod:`fleet_marl.evaluation.suite_open_loop`), seeing only the round
index -- as :class:`~fleet_marl.studies.credit.suite_design.SuiteStudy` grades a run: on scenarios
``0 .. episodes - 1`` of ``split`` (``score``) and of the train split (``train_score``), the
grader's pooled score (mean welfare against the references' means), with the same overrides, so
it reads the references the study cached and fills the ones its runs read. The baseline is
deterministic (no training seed), so its interval is across scenarios: ``score_h`` is the 95%
half-width of the per-scenario terms ``(W_k - W_random,k) / (W_planner - W_random)`` (means over
the scenarios in the denominator), whose mean is the pooled score before its floor at 0; NaN on
one scenario. ``seeds`` is the number of scenarios graded. ``budget``: the search's budget in
tenant-rounds (None: the grader's, ``OPEN_LOOP_BUDGET``).

**The store.** :func:`compute` grades the baseline on each task of a study that ``baselines.csv``
in its folder does not hold yet (:meth:`SuiteStudy.baseline_jobs`, :meth:`SuiteStudy.baseline`),
in worker processes, and appends each row as it arrives: ``fleet-marl compare --suite`` runs it
before the study's runs (:func:`fleet_marl.studies.credit.runs.run`), so a stopped study keeps
the rows it has and a resumed one computes only the missing ones; a row is written once.
:func:`stored` reads them back, and that is all the report does with them
(:func:`~fleet_marl.studies.credit.suite_report.report` never searches nor plays an episode).
"""

from __future__ import annotations

import math
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fleet_marl import suite
from fleet_marl.evaluation import OPEN_LOOP, Evaluation, evaluate
from fleet_marl.evaluation.reference import OPEN_LOOP_BUDGET
from fleet_marl.evaluation.suite_open_loop import SuiteOpenLoop, suite_open_loop_entry
from fleet_marl.studies import store
from fleet_marl.studies.credit.stats import mean_ci

#: The study folder's file of baseline rows.
BASELINES = "baselines.csv"
#: Its columns: the row :func:`open_loop_row` gives, the search's cost, ``finished`` last (a row
#: a kill cut short lacks it and is dropped).
BASELINE_COLUMNS = (
    "policy",
    "family",
    "n",
    "task",
    "split",
    "score",
    "score_h",
    "train_score",
    "seeds",
    "search_budget",
    "search_episodes",
    "exhausted",
    "cpu_seconds",
    "finished",
)


def scenario_terms(ev: Evaluation) -> np.ndarray:
    """Per scenario ``(W_k - W_random,k) / (W_planner - W_random)`` (means in the denominator): their mean is the unfloored pooled score."""
    rand, ref = np.asarray(ev.random_welfare), np.asarray(ev.reference_welfare)
    return (ev.welfare - rand) / (ref.mean() - rand.mean())


def open_loop_row(
    task: str,
    split: str = "heldout",
    episodes: int = 10,
    overrides: dict | None = None,
    cache: bool = True,
    budget: int | None = None,
) -> dict:
    """The ``open_loop`` baseline's row on suite task ``task`` (see the module docstring):
    ``{"policy", "family", "n", "score", "score_h", "train_score", "seeds", "task", "split",
    "search_budget", "search_episodes", "exhausted", "cpu_seconds"}`` (``cpu_seconds``: this
    process's CPU time for the row, the search included unless it was cached)."""
    t = suite.suite_task(task)
    base = dict(overrides or {})
    cpu = time.process_time()
    policy = SuiteOpenLoop(t.name, base, cache, budget)  # the grader's spec open_loop, with this search budget
    held = evaluate(t.name, policy, episodes, 0, {**base, "split": split}, progress=False, cache=cache, hindsight=False)
    train = evaluate(t.name, policy, episodes, 0, {**base, "split": "train"}, progress=False, cache=cache, hindsight=False)
    entry = suite_open_loop_entry(t.name, base, cache, budget=budget)  # the search's cost (this process has it in memory)
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
        "search_budget": OPEN_LOOP_BUDGET if budget is None else budget,
        "search_episodes": entry["episodes"],
        "exhausted": int(bool(entry["exhausted"])),
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }


def open_loop_rows(
    tasks: Iterable[str],
    split: str = "heldout",
    episodes: int = 10,
    overrides: dict | None = None,
    cache: bool = True,
    budget: int | None = None,
) -> list[dict]:
    """:func:`open_loop_row` of each suite task of ``tasks`` (names such as ``"scarce_n8"``)."""
    return [open_loop_row(task, split, episodes, overrides, cache, budget) for task in tasks]


# --- the store --------------------------------------------------------------------------------------


def _complete(row: dict) -> bool:
    try:
        int(row["n"])
        float(row["score"])
    except (KeyError, TypeError, ValueError):
        return False
    return all(row.get(c) not in (None, "") for c in ("policy", "family", "finished"))


def stored(out: str | Path) -> list[dict]:
    """The baseline rows in ``out/baselines.csv`` (none when it is missing), numbers as numbers;
    a row a kill cut short is left out."""
    rows = []
    for r in store.read_rows(Path(out) / BASELINES):
        if not _complete(r):
            continue
        row: dict[str, Any] = dict(r)
        row["n"], row["seeds"] = int(r["n"]), int(r["seeds"]) if r.get("seeds") else 0
        for c in ("score", "score_h", "train_score", "cpu_seconds"):
            row[c] = float(r[c]) if r.get(c) not in (None, "") else math.nan
        rows.append(row)
    return rows


def _job(args: tuple) -> tuple[tuple, dict | str]:
    """One baseline job in a worker: ``(job, row)``, or ``(job, message)`` when it failed."""
    study, job = args
    try:
        return job, study.baseline(job)
    except Exception as exc:  # noqa: BLE001 -- the parent names the task and keeps the others going
        text = str(exc).strip()
        return job, text.splitlines()[-1] if text else type(exc).__name__


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it terminates the pool


def compute(study: Any, out: Path, jobs: int = 2, progress: bool = True, echo: Callable[..., Any] = print) -> list[str]:
    """The baseline rows of ``study`` (a :class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`)
    that ``out/baselines.csv`` lacks, ``jobs`` worker processes at a time (in this process for
    one), each appended as it finishes; returns the failures' messages (the stored rows stay)."""
    path = out / BASELINES
    have = stored(out)
    if path.is_file():
        store.rewrite(path, BASELINE_COLUMNS, [r for r in store.read_rows(path) if _complete(r)])  # drop a half-written row
    todo = study.baseline_jobs({(r["family"], r["n"]) for r in have})
    if not todo:
        return []
    budget = "the grader's" if study.open_loop_budget is None else f"{study.open_loop_budget:,} tenant-rounds"
    echo(f"open_loop baseline: {len(todo)} of {len(todo) + len(have)} task(s) to search and grade (search budget {budget})")
    failed: list[str] = []

    def add(job: tuple, result: dict | str) -> None:
        if isinstance(result, str):
            failed.append(f"open_loop on {study.task(*job)}: {result}")
        else:
            store.append(path, BASELINE_COLUMNS, [{**result, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}])

    bar = tqdm(total=len(todo), desc="baselines", unit="task", disable=not progress, leave=False)
    try:
        if jobs <= 1 or len(todo) == 1:
            for job in todo:
                add(*_job((study, job)))
                bar.update(1)
        else:
            pool = multiprocessing.get_context("spawn").Pool(min(jobs, len(todo)), initializer=_init_worker)
            try:
                for job, result in pool.imap_unordered(_job, [(study, j) for j in todo]):
                    add(job, result)
                    bar.update(1)
                pool.close()
            finally:
                pool.terminate()
                pool.join()
    finally:
        bar.close()
    return failed


__all__ = [
    "BASELINES",
    "BASELINE_COLUMNS",
    "compute",
    "open_loop_row",
    "open_loop_rows",
    "scenario_terms",
    "stored",
]

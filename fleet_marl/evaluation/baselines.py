"""The baseline table: every reference policy on every task (``make baselines``).

For each task and policy (:data:`POLICIES`: the reference policies and the ``open_loop``
baseline): the mean and standard deviation of the episode welfare over the seeds (the grader's
count per task, ``evaluation.reference.graded_episodes``: 100 on ``tiny``, 10 elsewhere), the
grader's score, the gap to the hindsight reference and the mean Jain index. :func:`derived`
recomputes every row's score and gap from its task's ``random``, ``planner`` and ``hindsight``
rows (the same seeds), so rows that keep their episodes get the references' new figures.
:func:`run_all` plays them, :func:`data` is the table's data (``docs/data/baselines.json``,
:data:`DATA`) and :func:`block` the table with the command that reproduces it, which
:func:`blocks` renders from the committed data into ``docs/results.md`` and the README, between
the markers ``<!-- baselines:start -->`` and ``<!-- baselines:end -->`` (for ``fleet-marl docs``,
:mod:`fleet_marl.studies.publish`). The ``baselines`` command is :mod:`fleet_marl.studies.baselines`.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

from tqdm import tqdm

from fleet_marl.evaluation.reference import EPISODES, OPEN_LOOP, graded_episodes
from fleet_marl.evaluation.score import Evaluation, evaluate, gap, score
from fleet_marl.policies import POLICIES as REFERENCE_POLICIES

START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
#: Where a written table's data goes, relative to the folder of the results file (docs/): the
#: test that ties the docs to their data re-renders the README's and results.md's block from it.
DATA = "data/baselines.json"
#: The files the table goes into, relative to the checkout.
DOCS = ("README.md", "docs/results.md")
#: The table's policies, in its order: ``random``, the ``open_loop`` baseline, the other reference policies.
POLICIES = ("random", OPEN_LOOP, *(p for p in REFERENCE_POLICIES if p != "random"))


def run_all(
    tasks, policies, episodes: int | None = None, seed: int = 0, progress: bool = True, overrides: dict | None = None
) -> list[Evaluation]:
    """Evaluate every policy on every task (the references come from the grader's cache) on
    ``episodes`` seeds (None: the grader's count per task, :func:`graded_episodes`);
    ``overrides`` are the env's (``protocol``, ``turn_order``)."""
    out = []
    bar = None
    if progress:
        bar = tqdm(total=len(tasks) * len(policies), desc="baselines", unit="eval", file=sys.stderr)
    for task in tasks:
        for name in policies:
            if bar is not None:
                bar.set_postfix_str(f"{task}/{name}")
            n = graded_episodes(task) if episodes is None else episodes
            out.append(evaluate(task, name, episodes=n, seed=seed, progress=False, overrides=dict(overrides or {})))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return out


#: The fields of a row of the table's data (:func:`rows`), from ``Evaluation.summary()``;
#: ``intervention_rate`` (safety interventions per tenant-round, by kind and ``total``) is
#: absent from data written before the grader counted them, and the table says "not measured".
ROW_FIELDS = (
    "task",
    "policy",
    "welfare_mean",
    "welfare_std",
    "score",
    "gap_to_hindsight",
    "jain_mean",
    "starvation_events",
    "degenerate",
    "intervention_rate",
)
#: How the table shows a figure its data lack (a row written before the figure was measured).
NOT_MEASURED = "not measured"


def rows(evals: list[Evaluation]) -> list[dict]:
    """The table's data: one dict of :data:`ROW_FIELDS` per evaluation."""
    return [{k: s[k] for k in ROW_FIELDS} for s in (ev.summary() for ev in evals)]


def table(evals: list[Evaluation] | list[dict]) -> str:
    """The markdown table, of evaluations or of their :func:`rows`."""
    lines = [
        "| task | policy | welfare (mean ± std) | score | gap to hindsight | Jain | starvation events | degenerate | interventions / tenant-round |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in [r if isinstance(r, dict) else rows([r])[0] for r in evals]:
        g = "–" if s["gap_to_hindsight"] is None else f"{s['gap_to_hindsight']:.2f}"
        rate = (s.get("intervention_rate") or {}).get("total")
        safety = NOT_MEASURED if rate is None else f"{rate:.3f}"
        lines.append(
            f"| {s['task']} | {s['policy']} | {s['welfare_mean']:.1f} ± {s['welfare_std']:.1f} | {s['score']:.2f} | {g} | {s['jain_mean']:.2f} "
            f"| {s['starvation_events']} | {s['degenerate']} | {safety} |"
        )
    return "\n".join(lines)


def data(evals: list[Evaluation], episodes: int | None, seed: int, extra_args: str = "") -> dict:
    """What :func:`block` renders, as the JSON ``fleet-marl baselines`` writes beside the docs
    (:data:`DATA`): the rows, the seeds (``episodes`` per task, and ``task_episodes`` for the
    tasks that have another count; ``episodes`` None: the grader's counts), the command's extra
    arguments and the Python version."""
    counts = {ev.task: len(ev.seeds) for ev in evals}
    default = EPISODES if episodes is None else episodes
    return {
        "episodes": default,
        "task_episodes": {t: n for t, n in counts.items() if n != default},
        "seed": seed,
        "extra_args": extra_args,
        "python": platform.python_version(),
        "rows": rows(evals),
    }


def derived(rows_: list[dict]) -> list[dict]:
    """``rows_`` with each row's score and gap recomputed from its task's ``random``, ``planner``
    and ``hindsight`` rows (mean welfare over the same seeds: what :class:`Evaluation` computes);
    a task without those rows keeps its figures."""
    mean = {(r["task"], r["policy"]): r["welfare_mean"] for r in rows_}
    out = []
    for r in rows_:
        r = dict(r)
        w_r, w_p, w_h = (mean.get((r["task"], p)) for p in ("random", "planner", "hindsight"))
        if w_r is not None and w_p is not None and w_p > w_r:
            r["score"] = score(r["welfare_mean"], w_r, w_p)
        if w_r is not None and w_h is not None:
            r["gap_to_hindsight"] = gap(r["welfare_mean"], w_r, w_h)
        out.append(r)
    return out


def block(evals: list[Evaluation] | dict, episodes: int = 0, seed: int = 0, extra_args: str = "") -> str:
    """The table with the command and the seeds that reproduce it, from evaluations (and
    ``episodes``, ``seed``, ``extra_args``) or from their :func:`data`."""
    d = evals if isinstance(evals, dict) else data(evals, episodes, seed, extra_args)
    episodes, seed, extra_args = d["episodes"], d["seed"], d["extra_args"]
    seeds = f"{seed}..{seed + episodes - 1}"
    others = "".join(f"; {t}: seeds {seed}..{seed + n - 1}, {n} episodes" for t, n in d.get("task_episodes", {}).items())
    lacking = any((r.get("intervention_rate") or {}).get("total") is None for r in d["rows"])
    unmeasured = f" ({NOT_MEASURED}: rows written before the grader counted them)" if lacking else ""
    counts = {r["task"]: d.get("task_episodes", {}).get(r["task"], episodes) for r in d["rows"]}
    graded = all(n == graded_episodes(t) for t, n in counts.items())  # the grader's counts: no --episodes
    cmd = f"fleet-marl baselines{'' if graded else f' --episodes {episodes}'} --seed {seed}{extra_args}"
    how = f"`make baselines` (`{cmd}`)" if graded and not extra_args else f"`{cmd}`"
    return (
        f"{START}\n"
        f"Episode welfare over seeds {seeds} ({episodes} episodes per cell{others}; ± is the standard deviation over episodes), "
        f"score = (W − W_random) / (W_planner − W_random) floored at 0 and not capped (above 1 beats the planner), "
        f"gap to hindsight = (W_hindsight − W) / "
        f"(W_hindsight − W_random) (0 at the hindsight reference, the best of the grader's searches with the episode's future in hand; "
        f"open_loop plays one joint action per round, searched on other seeds; docs/policies.md), "
        f"Jain's index of normalized service (mean over "
        f"episodes); starvation events and degenerate tenant-rounds are summed over tenants and episodes; interventions / "
        f"tenant-round are the safety interventions (OOM, veto, projection, power or thermal throttle, trip) per round a tenant "
        f"played{unmeasured}. "
        f"Reproduce with {how}; Python {d['python']}.\n\n"
        f"{table(derived(d['rows']))}\n{END}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The table's block of each of :data:`DOCS` under the checkout ``root``, from its data
    (:data:`DATA`), for the publisher (:mod:`fleet_marl.studies.publish`)."""
    path = Path(root) / "docs" / DATA
    if not path.is_file():
        return []
    text = block(json.loads(path.read_text()))
    return [(doc, START, END, text) for doc in DOCS]


__all__ = [
    "DATA",
    "DOCS",
    "END",
    "NOT_MEASURED",
    "POLICIES",
    "ROW_FIELDS",
    "START",
    "block",
    "blocks",
    "data",
    "derived",
    "rows",
    "run_all",
    "table",
]

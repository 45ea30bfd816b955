"""The baseline table: every reference policy on every task (``make baselines``).

For each task and policy: the mean and standard deviation of the episode welfare over the
seeds, the grader's score, the gap to the hindsight reference and the mean Jain index.
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

from fleet_marl.evaluation.score import Evaluation, evaluate

START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
#: Where a written table's data goes, relative to the folder of the results file (docs/): the
#: test that ties the docs to their data re-renders the README's and results.md's block from it.
DATA = "data/baselines.json"
#: The files the table goes into, relative to the checkout.
DOCS = ("README.md", "docs/results.md")


def run_all(tasks, policies, episodes: int = 10, seed: int = 0, progress: bool = True, overrides: dict | None = None) -> list[Evaluation]:
    """Evaluate every policy on every task (the references come from the grader's cache);
    ``overrides`` are the env's (``protocol``, ``turn_order``)."""
    out = []
    bar = None
    if progress:
        bar = tqdm(total=len(tasks) * len(policies), desc="baselines", unit="eval", file=sys.stderr)
    for task in tasks:
        for name in policies:
            if bar is not None:
                bar.set_postfix_str(f"{task}/{name}")
            out.append(evaluate(task, name, episodes=episodes, seed=seed, progress=False, overrides=dict(overrides or {})))
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


def data(evals: list[Evaluation], episodes: int, seed: int, extra_args: str = "") -> dict:
    """What :func:`block` renders, as the JSON ``fleet-marl baselines`` writes beside the docs
    (:data:`DATA`): the rows, the seeds, the command's extra arguments and the Python version."""
    return {"episodes": episodes, "seed": seed, "extra_args": extra_args, "python": platform.python_version(), "rows": rows(evals)}


def block(evals: list[Evaluation] | dict, episodes: int = 0, seed: int = 0, extra_args: str = "") -> str:
    """The table with the command and the seeds that reproduce it, from evaluations (and
    ``episodes``, ``seed``, ``extra_args``) or from their :func:`data`."""
    d = evals if isinstance(evals, dict) else data(evals, episodes, seed, extra_args)
    episodes, seed, extra_args = d["episodes"], d["seed"], d["extra_args"]
    seeds = f"{seed}..{seed + episodes - 1}"
    lacking = any((r.get("intervention_rate") or {}).get("total") is None for r in d["rows"])
    unmeasured = f" ({NOT_MEASURED}: rows written before the grader counted them)" if lacking else ""
    cmd = f"fleet-marl baselines --episodes {episodes} --seed {seed}{extra_args}"
    how = f"`{cmd}`" if extra_args else f"`make baselines` (`{cmd}`)"
    return (
        f"{START}\n"
        f"Episode welfare over seeds {seeds} ({episodes} episodes per cell; ± is the standard deviation over episodes), "
        f"score = (W − W_random) / (W_planner − W_random) clipped to [0, 1], gap to hindsight = (W_hindsight − W) / "
        f"(W_hindsight − W_random) (0 at the hindsight reference, which plans with the episode's future in hand; docs/policies.md), "
        f"Jain's index of normalized service (mean over "
        f"episodes); starvation events and degenerate tenant-rounds are summed over tenants and episodes; interventions / "
        f"tenant-round are the safety interventions (OOM, veto, projection, power or thermal throttle, trip) per round a tenant "
        f"played{unmeasured}. "
        f"Reproduce with {how}; Python {d['python']}.\n\n"
        f"{table(d['rows'])}\n{END}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The table's block of each of :data:`DOCS` under the checkout ``root``, from its data
    (:data:`DATA`), for the publisher (:mod:`fleet_marl.studies.publish`)."""
    path = Path(root) / "docs" / DATA
    if not path.is_file():
        return []
    text = block(json.loads(path.read_text()))
    return [(doc, START, END, text) for doc in DOCS]


__all__ = ["DATA", "DOCS", "END", "NOT_MEASURED", "ROW_FIELDS", "START", "block", "blocks", "data", "rows", "run_all", "table"]

"""The report of the credit-assignment study on the suite (``fleet-marl compare --suite``,
:class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`): ``summary.md`` in the study folder
and the same text printed, from its ``results.csv`` alone.

=========================  ====================================================================
:func:`summary_table`      per (family, n, arm): mean ± 95% interval across seeds of the
                           held-out score, the train score, their difference, the gap to the
                           hindsight reference, starvation events per episode on each split,
                           Jain; converged runs, CPU time and the reward's cost
:func:`paired_table`       each arm minus ``difference``, paired by seed
:func:`verdicts`           the three predictions, per family, by the study's decision rules
:func:`baseline_table`     the baselines that should lose: policies the study does not train
                           (``baselines``: the ``open_loop`` rows of ``baselines.csv``) and
                           the ``local`` arm (IPPO), each beside the best learned arm of its
                           task; a baseline within that arm's interval is flagged
:func:`text`, :func:`report`  the whole report
=========================  ====================================================================

**The verdicts** are :mod:`~fleet_marl.studies.credit.torchrl_tables`' rules, unchanged (margin
``m`` = :data:`~fleet_marl.studies.credit.torchrl_tables.MARGIN` = 0.05 of the grader's score,
95% Student-t intervals across seeds paired by seed, runs at n >= 8), applied to each family's
runs on the held-out ``score``:

* *global's gap to difference widens with N*: ``verdict_global`` (the gap at the largest n and
  its slope against log2 n both below 0: held; the gap at the largest n above ``-m``: did not hold);
* *local starves others under scarcity*: ``verdict_local`` (local's starvation events per
  episode minus difference's, mean over n, above 0: held; below 1: did not hold). It is decided on
  every family; the scarcity families (``scarce``, ``storm``) are where it predicts "held", the
  control (``aligned``) where it predicts "did not hold";
* *Shapley ≈ difference at a higher cost*: ``verdict_shapley`` (the score gap inside ``[-m, m]``
  at every n and Shapley's reward slower per env step: held; outside at some n, or not slower:
  did not hold).

**Baselines** (issue 48, item 3) are rows of policies graded on the same scenarios that the study
does not train: the ``open_loop`` policy that sees only the round index, graded on each task before
the runs and stored in the study folder's ``baselines.csv``
(:mod:`~fleet_marl.studies.credit.suite_baselines`). :func:`report` reads them from there (or
takes ``baselines``: dicts with ``policy``, ``family``, ``n``, ``score`` and optionally
``score_h``, its 95% half-width, ``train_score`` and ``seeds``) and never searches nor plays an
episode. A baseline whose held-out score is within the best learned arm's 95% interval, or above
it, is **flagged**: the task does not test what it claims. The ``local`` arm, independent PPO on
the local reward, is the study's own baseline: the table shows it beside the same best arm
(learned, so not flagged; it is expected to lose where local is not aligned).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleet_marl.evaluation.reference import OPEN_LOOP, OPEN_LOOP_BUDGET
from fleet_marl.evaluation.suite_open_loop import SCENARIOS
from fleet_marl.studies.credit import suite_baselines
from fleet_marl.studies.credit import torchrl_tables as tt
from fleet_marl.studies.credit.report import load
from fleet_marl.studies.credit.stats import fmt, mean_ci
from fleet_marl.studies.credit.suite_baselines import BASELINES
from fleet_marl.studies.credit.suite_design import PART, SuiteStudy
from fleet_marl.studies.credit.torchrl_tables import arms_of, paired, select, settings_of, value
from fleet_marl.suite import TRAIN_SCENARIOS

#: The three predictions as the suite study decides them, each by the rule of the same place in
#: :data:`~fleet_marl.studies.credit.torchrl_tables.PREDICTIONS`.
PREDICTIONS = (
    "global's gap to difference widens with N",
    "local starves others under scarcity",
    "Shapley ≈ difference at a higher cost",
)
#: What the report says of the ``local`` arm.
IPPO = (
    "The `local` arm is independent PPO on the local reward (IPPO, de Witt et al. 2020: each tenant learns from its own "
    'reward alone, one actor and critic shared by all tenants): the "independent PPO on `local`" baseline, which should '
    "lose where the local reward is not aligned with the team's."
)


def _ci(rows: list[dict], column: str) -> tuple[float, float]:
    vals = [value(r, column) for r in rows]
    vals = [v for v in vals if not math.isnan(v)]
    return mean_ci(vals) if vals else (float("nan"), float("nan"))


def _cells(rows: list[dict]) -> list[tuple[str, int, str, list[dict]]]:
    """(family, n, arm, its rows) of the suite part, in the study's order."""
    out = []
    for f in settings_of(rows, PART):
        for n in sorted({int(r["n"]) for r in select(rows, PART, f)}):
            for arm in arms_of(PART, rows):
                rs = select(rows, PART, f, n, arm)
                if rs:
                    out.append((f, n, arm, rs))
    return out


def summary_table(rows: list[dict]) -> str:
    """Per (family, n, arm): mean ± 95% interval across seeds (see the module docstring)."""
    head = [
        "family",
        "N",
        "arm",
        "seeds",
        "held-out score",
        "train score",
        "train − held-out",
        "held-out gap to hindsight",
        "starvation / ep, held-out",
        "starvation / ep, train",
        "Jain, held-out",
        "converged",
        "CPU s / run",
        "reward ms / env step",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f, n, arm, rs in _cells(rows):
        spread = [value(r, "train_score") - value(r, "score") for r in rs]
        spread = [d for d in spread if not math.isnan(d)]
        cells = [
            f,
            str(n),
            f"`{arm}`",
            str(len(rs)),
            fmt(*_ci(rs, "score"), "{:.3f}"),
            fmt(*_ci(rs, "train_score"), "{:.3f}"),
            fmt(*(mean_ci(spread) if spread else (float("nan"), float("nan"))), "{:+.3f}"),
            fmt(*_ci(rs, "gap"), "{:.3f}"),
            fmt(*_ci(rs, "starvation_events"), "{:.1f}"),
            fmt(*_ci(rs, "train_starvation_events"), "{:.1f}"),
            fmt(*_ci(rs, "jain"), "{:.3f}"),
            f"{sum(int(r['converged']) for r in rs)}/{len(rs)}",
            f"{np.nanmean([value(r, 'cpu_seconds') for r in rs]):.0f}",
            f"{np.mean([value(r, 'credit_ms_per_step') for r in rs]):.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(rows: list[dict]) -> str:
    """Each arm minus ``difference``, paired by seed: held-out and train score, gap, starvation."""
    cols = (
        ("score", "Δ held-out score", "{:+.3f}"),
        ("train_score", "Δ train score", "{:+.3f}"),
        ("gap", "Δ held-out gap", "{:+.3f}"),
        ("starvation_events", "Δ starvation / ep, held-out", "{:+.1f}"),
    )
    head = ["family", "N", "arm − `difference`", *(h for _, h, _ in cols), "seeds better (held-out score)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f, n, arm, _ in _cells(rows):
        if arm == "difference":
            continue
        stats = [paired(rows, PART, f, n, arm, "difference", c) for c, _, _ in cols]
        if not stats[0][3]:
            continue
        cells = [f, str(n), f"`{arm}`"] + [fmt(s[0], s[1], fm) for s, (_, _, fm) in zip(stats, cols, strict=True)]
        cells.append(f"{stats[0][2]}/{stats[0][3]}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> list[dict]:
    """One row per (prediction, family): ``prediction``, ``setting`` (the family), ``verdict``, ``why``."""
    rules = (tt.verdict_global, tt.verdict_local, tt.verdict_shapley)
    return [
        {"prediction": name, "setting": f, **rule(rows, f, part=PART)}
        for name, rule in zip(PREDICTIONS, rules, strict=True)
        for f in settings_of(rows, PART)
    ]


#: The report's section of the baselines (issue 48, item 3).
BASELINES_HEADING = "### Baselines that should lose: the open-loop policy and independent PPO on `local`"
#: What the baseline table says of a baseline within the best learned arm's held-out interval, or above it.
FLAG = "**flagged**: within the best learned arm's interval on held-out seeds, or above it: not testing what it claims"


def _best(rows: list[dict], f: str, n: int) -> tuple[str, float, float] | None:
    """(arm, mean, 95% half-width) of the learned arm with the best mean held-out score on (f, n)."""
    best = None
    for arm in arms_of(PART, rows):
        rs = select(rows, PART, f, n, arm)
        if rs:
            m, h = _ci(rs, "score")
            if best is None or m > best[1]:
                best = (arm, m, h)
    return best


def baseline_table(rows: list[dict], baselines: Sequence[dict]) -> str:
    """The baselines that should lose, per (family, n) of the runs and of ``baselines``: each
    baseline row (see the module docstring) and the ``local`` arm (independent PPO on the local
    reward), beside the best learned arm of the task by mean held-out score. A baseline is
    **flagged** (:data:`FLAG`) where its score is within that arm's 95% interval or above it (the
    task does not test what it claims: issue 48, item 3); ``local``, a learned arm, is said to be
    the best arm, within its interval or below it."""
    head = ["family", "N", "baseline", "held-out score", "train score", "best learned arm, held-out", "flag"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    tasks = list(dict.fromkeys([(f, n) for f, n, _, _ in _cells(rows)] + [(str(b["family"]), int(b["n"])) for b in baselines]))
    for f, n in tasks:
        best = _best(rows, f, n)
        best_text = "no runs" if best is None else f"`{best[0]}` {fmt(best[1], best[2], '{:.3f}')}"
        floor = float("nan") if best is None else best[1] - (0.0 if math.isnan(best[2]) else best[2])
        for b in baselines:
            if (str(b["family"]), int(b["n"])) != (f, n):
                continue
            score, h = float(b["score"]), float(b.get("score_h", float("nan")))
            train = float(b.get("train_score", float("nan")))
            flag = "–" if best is None else FLAG if score >= floor else "below"
            seeds = f" ({b['seeds']} scenario{'' if int(b['seeds']) == 1 else 's'})" if b.get("seeds") else ""  # its interval's sample
            lines.append(
                f"| {f} | {n} | `{b['policy']}`{seeds} | {fmt(score, h, '{:.3f}')} | {fmt(train, float('nan'), '{:.3f}')} | {best_text} | {flag} |"
            )
        local = select(rows, PART, f, n, "local")
        if local and best is not None:
            m, h = _ci(local, "score")
            said = "learned: the best arm" if best[0] == "local" else "learned: within its interval" if m >= floor else "learned: below"
            lines.append(
                f"| {f} | {n} | `local`, independent PPO on local ({len(local)} seeds) | {fmt(m, h, '{:.3f}')} | "
                f"{fmt(*_ci(local, 'train_score'), '{:.3f}')} | {best_text} | {said} |"
            )
    return "\n".join(lines)


def baselines_text(study: SuiteStudy, rows: list[dict], baselines: Sequence[dict]) -> str:
    """The baselines' section: what they are, :func:`baseline_table`, and the tasks of the runs
    that have no ``open_loop`` row (not computed yet)."""
    budget = f"{OPEN_LOOP_BUDGET:,}" if study.open_loop_budget is None else f"{study.open_loop_budget:,} (`open_loop_budget`)"
    have = {(str(b["family"]), int(b["n"])) for b in baselines if b.get("policy") == OPEN_LOOP}
    missing = [(f, n) for f, n in dict.fromkeys((f, n) for f, n, _, _ in _cells(rows)) if (f, n) not in have]
    out = [
        f"`{OPEN_LOOP}` plays one joint action per round whatever the state (it sees only the round index): one table per task, "
        f"searched on the task's first {SCENARIOS} train scenarios with at most {budget} tenant-rounds, graded before the runs on "
        f"the runs' scenarios (`{study.split}` and `train`, 0..{study.episodes - 1}; its interval is across those scenarios) and "
        f"stored in `{BASELINES}`. `local` is independent PPO on the local reward, one of the study's arms. A baseline within the "
        "best learned arm's 95% interval on held-out seeds, or above it, is flagged: the task does not test what it claims.\n",
        baseline_table(rows, baselines),
    ]
    if missing:
        out.append(
            f"\nNo `{OPEN_LOOP}` row yet for {', '.join(f'{f} N={n}' for f, n in missing)}: `fleet-marl compare --suite` with the "
            f"study's options computes it before its runs (into `{BASELINES}`); the report does not."
        )
    return "\n".join(out)


def study_of(settings: dict) -> SuiteStudy:
    """The suite study that ``settings`` (its ``study.json``) describe."""
    fields = SuiteStudy.__dataclass_fields__
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in fields}
    return SuiteStudy(**kwargs)


def text(data: dict, baselines: Sequence[dict] = ()) -> str:
    """The suite study's whole report (Markdown), of :func:`~fleet_marl.studies.credit.report.load`'s ``data``."""
    sessions = data["sessions"]
    study = study_of(data["settings"])
    rows = tt.with_convergence(data["rows"], study.converge_tol)  # the rule is the report's, whatever the CSV holds
    expected = len(study.runs())
    wall = sum(value(s, "wall_seconds") for s in sessions)
    cpu = float(np.nansum([value(r, "cpu_seconds") for r in rows]))
    budgets = ", ".join(f"N={n}: {study.env_steps(PART, n):,}" for n in sorted(study.ns))
    parts = [
        f"{len(rows)} of {expected} runs finished"
        + ("" if len(rows) >= expected else " (the study is not complete: every number below is from the runs so far)")
        + f". {cpu / 3600:.2f} CPU-hours of runs; {wall / 3600:.2f} hours of wall time over {len(sessions)} session(s) of "
        f"`fleet-marl compare --suite` with {', '.join(sorted({s['jobs'] for s in sessions})) or '?'} job(s). "
        f"Code: {sessions[-1]['version'] if sessions else '?'}.",
        f"\nFamilies {', '.join(study.families)}; arms {', '.join(f'`{a}`' for a in study.arms)}; {study.seeds} seeds. Each run "
        f"trains on its suite task's first {TRAIN_SCENARIOS} train scenarios (its clusters spread over them; fewer where it has "
        f"fewer clusters) with the same env-step budget for every arm at an N ({budgets}; "
        f"{study.iterations * study.agents_per_step * study.rollout:,} agent steps); it is graded on scenarios "
        f"0..{study.episodes - 1} of the `{study.split}` split (the score, its curve at "
        f"{', '.join(f'{f:.0%}' for f in study.eval_fractions)} of the budget"
        + (", the gap to the hindsight reference at the end" if study.hindsight else "")
        + ") and of the `train` split at the end (the train score"
        + (", and its gap" if study.train_hindsight else "")
        + ").",
        "\n" + IPPO,
    ]
    skipped = study.skipped()
    if skipped:
        parts.append(f"\nNot run: `shapley` at N = {', '.join(sorted({str(s[2]) for s in skipped}, key=int))} (`shapley_max_n`).")
    parts += [
        f"\n### Verdicts, per family (held-out score; margin {tt.MARGIN}, 95% paired intervals, N ≥ {tt.DECIDE_FROM})\n",
        tt.verdict_table(verdicts(rows), label="family"),
        "\n### Summary (mean ± 95% interval across seeds)\n",
        summary_table(rows),
        "\n### Each arm against `difference`, paired by seed\n",
        paired_table(rows),
    ]
    parts += [f"\n{BASELINES_HEADING}\n", baselines_text(study, rows, baselines)]
    parts += [
        "\n### What the reward costs (the env's credit engine, ms per env step, mean over runs)\n",
        tt.cost_table(rows, skipped, part=PART),
        "\n### Convergence\n",
        tt.unconverged_table(rows, study.converge_tol),
    ]
    return "\n".join(parts) + "\n"


def is_suite(out: str | Path) -> bool:
    """Whether the study folder ``out`` holds a study on the suite (its ``study.json`` names families)."""
    meta = Path(out) / "study.json"
    try:
        return meta.is_file() and "families" in json.loads(meta.read_text())
    except ValueError:
        return False


def report(out: str | Path, echo: Callable[..., Any] = print, baselines: Sequence[dict] | None = None) -> dict:
    """``summary.md`` of the suite study in ``out``, into the study folder, and the text echoed;
    ``baselines``: rows of policies the study does not train (the module docstring; None: the
    rows stored in ``out/baselines.csv``). It reads files only: no search, no episode."""
    data = load(out)
    body = text(data, suite_baselines.stored(data["out"]) if baselines is None else baselines)
    path = data["out"] / "summary.md"
    path.write_text(f"# Credit-assignment study on the suite: {data['out']}\n\n{body}")
    echo(body + f"\nwrote {path}")
    return {"summary": path, "text": body, "verdicts": verdicts(data["rows"])}


__all__ = [
    "BASELINES_HEADING",
    "FLAG",
    "IPPO",
    "PREDICTIONS",
    "baseline_table",
    "baselines_text",
    "is_suite",
    "paired_table",
    "report",
    "study_of",
    "summary_table",
    "text",
    "verdicts",
]

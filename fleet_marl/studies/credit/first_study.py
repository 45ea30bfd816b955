"""The first credit-assignment study (on RLlib: six reward schemes, N = 2..16), as data: its runs
are its committed CSVs (``docs/data/credit_assignment*/``: ``results.csv``, ``curves.csv``,
``study.json``) and this module renders its blocks of ``docs/credit_assignment.md`` from them
(its plots are committed in ``docs/img/``). Its design and runs are retired; the study that runs
is :mod:`fleet_marl.studies.credit` (``fleet-marl compare``).

=========================  ====================================================================
:func:`summary_table`      one row per (N, scheme): mean ± 95% interval across seeds of every
                           :data:`SUMMARY` column
:func:`paired`             per-N differences of two schemes paired by seed
:func:`prediction_table`   the prediction's comparisons (:data:`COMPARISONS`) and the growth of
                           the difference gap
:func:`command`            the ``fleet-marl compare --engine rllib`` line it ran as
:func:`block`              a committed study's block (where: :func:`targets`)
:func:`blocks`             every committed study's block, for ``fleet-marl docs``
=========================  ====================================================================
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fleet_marl.config import REWARD_SCHEMES
from fleet_marl.studies import store
from fleet_marl.studies.credit.stats import fmt_pm, mean_ci

#: The committed studies: ``docs/data/<PREFIX>*/``.
PREFIX = "credit_assignment"
#: The design's settings when it ran with no options (its ``study.json`` keys), against which
#: :func:`command` names the options a committed study ran with.
DEFAULTS: dict = {
    "schemes": list(REWARD_SCHEMES),
    "ns": [2, 4, 8, 16],
    "seeds": 3,
    "budgets": {"2": 24000, "4": 24000, "8": 16000, "16": 16000},
    "train_batch_size": 2000,
    "minibatch_size": 1000,
    "num_epochs": 6,
    "lr": 0.0003,
    "episodes": 5,
    "mechanism": "proportional",
    "sharing": "shared",
    "shapley_samples": 64,
    "max_cycles": 100,
}
#: The folder the design wrote to when given no ``--out``.
DEFAULT_OUT = "runs/credit_assignment"

#: Summary columns: (column of results.csv, header, format)
SUMMARY = (
    ("eval_welfare", "welfare", "{:.1f}"),
    ("score", "score", "{:.3f}"),
    ("jain", "Jain", "{:.3f}"),
    ("starvation_events", "starvation events", "{:.1f}"),
    ("degenerate", "degenerate events", "{:.1f}"),
    ("run_seconds", "wall s / run", "{:.0f}"),
    ("credit_seconds", "of which reward s", "{:.1f}"),
)


def summary_table(rows: list[dict]) -> str:
    """Markdown: per N and scheme, the mean ± 95% half-width across seeds of every SUMMARY column."""
    schemes = [s for s in REWARD_SCHEMES if any(r["scheme"] == s for r in rows)]
    head = ["N", "scheme", "seeds", *(h for _, h, _ in SUMMARY), "reward ms / step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sorted({int(r["n"]) for r in rows}):
        for s in schemes:
            rs = [r for r in rows if int(r["n"]) == n and r["scheme"] == s]
            if not rs:
                continue
            cells = [str(n), f"`{s}`", str(len(rs))]
            cells += [fmt_pm(*mean_ci([r[c] for r in rs]), f) for c, _, f in SUMMARY]
            cells.append(f"{np.mean([float(r['credit_ms_per_step']) for r in rs]):.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


OTHERS = "others"  # in a comparison: the mean, per seed, of every other scheme


def _by_seed(rows: list[dict], n: int, scheme: str, column: str) -> dict[int, float]:
    if scheme != OTHERS:
        return {int(r["seed"]): float(r[column]) for r in rows if int(r["n"]) == n and r["scheme"] == scheme}
    acc: dict[int, list[float]] = {}
    for r in rows:
        if int(r["n"]) == n and r["scheme"] != "local":
            acc.setdefault(int(r["seed"]), []).append(float(r[column]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def paired(rows: list[dict], a: str, b: str, column: str = "eval_welfare") -> dict[int, tuple[float, float, int, int]]:
    """Per N: (mean of a - b paired by seed, 95% half-width, seeds where a > b, seeds). ``b``
    may be ``OTHERS``: the mean of every scheme but ``local`` on the same seed."""
    out = {}
    for n in sorted({int(r["n"]) for r in rows}):
        va, vb = _by_seed(rows, n, a, column), _by_seed(rows, n, b, column)
        common = sorted(set(va) & set(vb))
        if common:
            d = [va[s] - vb[s] for s in common]
            m, h = mean_ci(d)
            out[n] = (m, h, sum(x > 0 for x in d), len(common))
    return out


#: The prediction's comparisons: (a, b, column, label); a - b paired by seed.
COMPARISONS = (
    ("difference", "global", "eval_welfare", "welfare"),
    ("difference_default", "global", "eval_welfare", "welfare"),
    ("shapley", "global", "eval_welfare", "welfare"),
    ("mixed", "global", "eval_welfare", "welfare"),
    ("local", "global", "eval_welfare", "welfare"),
    ("difference", "local", "eval_welfare", "welfare"),
    ("local", OTHERS, "starvation_events", "starvation events"),
    ("local", OTHERS, "jain", "Jain"),
)


def prediction_table(rows: list[dict]) -> str:
    """Markdown: the prediction's comparisons per N, paired by seed, and whether the
    difference-global gap grows with N (its change from the smallest N; independent runs, so
    the half-widths add in quadrature)."""
    ns = sorted({int(r["n"]) for r in rows})
    lines = ["| comparison (paired by seed) | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]

    def cell(m, h, f, wins=None, k=None):
        return fmt_pm(m, h, f).replace("± +", "± ").replace("± -", "± ") + (f" ({wins}/{k})" if k else "")

    for a, b, col, label in COMPARISONS:
        p = paired(rows, a, b, col)
        if not p:
            continue
        f = "{:+.3f}" if col == "jain" else "{:+.1f}"
        other = "the mean of the other schemes" if b == OTHERS else f"`{b}`"
        lines.append(f"| {label}: `{a}` − {other} | " + " | ".join(cell(*p[n][:2], f, *p[n][2:]) if n in p else "" for n in ns) + " |")
    gap = paired(rows, "difference", "global")
    if len(gap) > 1:
        n0 = min(gap)
        cells = []
        for n in ns:
            if n not in gap or n == n0:
                cells.append("" if n != n0 else "(reference)")
                continue
            h = math.hypot(gap[n][1], gap[n0][1]) if not (math.isnan(gap[n][1]) or math.isnan(gap[n0][1])) else float("nan")
            cells.append(cell(gap[n][0] - gap[n0][0], h, "{:+.1f}"))
        lines.append(f"| growth of the welfare gap `difference` − `global` since N={n0} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: ``fleet-marl compare --engine rllib``'s options: study.json key -> (flag, how to write it).
FLAGS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "ns": ("--n", lambda v: ",".join(map(str, v))),
    "schemes": ("--schemes", ",".join),
    "seeds": ("--seeds", str),
    "budgets": ("--budget", lambda v: ",".join(f"{k}={b}" for k, b in v.items())),
    "episodes": ("--episodes", str),
    "mechanism": ("--mechanism", str),
}


def command(settings: dict, out: str | None = None) -> str:
    """The ``fleet-marl compare --engine rllib`` line the study of ``settings`` ran as (``out``: its folder, when not the default)."""
    parts = ["fleet-marl compare --engine rllib"]
    for key, (flag, fmt) in FLAGS.items():
        if key in settings and settings[key] != DEFAULTS[key]:
            parts.append(f"{flag} {fmt(settings[key])}")
    rest = sorted(k for k in DEFAULTS if k not in FLAGS and settings.get(k) != DEFAULTS[k])
    if out is not None:
        parts.append(f"--out {out}")
    text = " ".join(parts)
    return text + (f" (and, from Python, RLlibStudy({', '.join(f'{k}={settings.get(k)!r}' for k in rest)}))" if rest else "")


def wall_hours(rows: list[dict]) -> float:
    """Hours from the first run's start to the last run's end (includes any pause before a resume)."""
    ends = [dt.datetime.fromisoformat(r["finished"]) for r in rows]
    starts = [e - dt.timedelta(seconds=float(r["run_seconds"])) for e, r in zip(ends, rows, strict=True)]
    return (max(ends) - min(starts)).total_seconds() / 3600


def targets(settings: dict) -> dict:
    """Where a committed study's block goes: under its own arbiter (proportional) the main block
    of its section, under another arbiter a block of its own (markers
    ``credit-assignment-<mechanism>``); its data folder and its plots' prefix."""
    mechanism = settings.get("mechanism", DEFAULTS["mechanism"])
    if mechanism == DEFAULTS["mechanism"]:
        return {
            "start": "<!-- credit-assignment:start -->",
            "end": "<!-- credit-assignment:end -->",
            "data": f"docs/data/{PREFIX}",
            "prefix": "credit_",
        }
    return {
        "start": f"<!-- credit-assignment-{mechanism}:start -->",
        "end": f"<!-- credit-assignment-{mechanism}:end -->",
        "data": f"docs/data/{PREFIX}_{mechanism}",
        "prefix": f"credit_{mechanism}_",
    }


def block(data: Path) -> str:
    """The block of the committed study in ``data`` (its CSVs, ``study.json`` and
    ``published.json``: the folder it ran in), naming its committed plots."""
    settings = json.loads((data / "study.json").read_text())
    where = targets(settings)
    out = json.loads((data / "published.json").read_text())["out"] if (data / "published.json").is_file() else DEFAULT_OUT
    out_arg = "" if out == DEFAULT_OUT else f" --out {out}"
    rows, curves = store.read_rows(data / "results.csv"), store.read_rows(data / "curves.csv")
    ns = sorted({int(r["n"]) for r in rows})
    imgs = "\n\n".join(
        f"![N = {n}](img/{where['prefix']}curves_n{n}.png)"
        for n in ns
        if any(int(c["n"]) == n and c["welfare"] not in ("", None) for c in curves)
    )
    budgets = ", ".join(f"N={n}: {b:,}" for n, b in settings["budgets"].items() if int(n) in settings["ns"])
    total = sum(float(r["run_seconds"]) for r in rows)
    return (
        f"{where['start']}\n<!-- written by `fleet-marl docs` from {where['data']}/; edit the text around it, not this block -->\n\n"
        f"Ran as `{command(settings, out if out_arg else None)}` (fleet_marl 0.3.0; the first study's design and runs are retired, "
        f"its data stays). {len(rows)} runs; env-step budget per run {budgets}; "
        f"{settings['seeds']} seeds; {settings['episodes']} grader episodes per run; arbiter `{settings['mechanism']}`; "
        f"sharing `{settings['sharing']}`. The runs took {total / 3600:.2f} CPU-hours, {wall_hours(rows):.2f} hours of "
        f"wall time from the first start to the last finish. The data: "
        f"[`{where['data']}/`]({where['data'].removeprefix('docs/')}/).\n\n"
        f"#### Summary (mean ± 95% interval across seeds)\n\n{summary_table(rows)}\n\n"
        f"#### The prediction, paired by seed\n\nMean difference ± 95% interval; in brackets, the seeds where the first "
        f"scheme is larger.\n\n{prediction_table(rows)}\n\n#### Learning curves\n\n{imgs}\n\n"
        f"#### Score against N\n\n![score against N](img/{where['prefix']}scaling.png)\n{where['end']}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """Every committed study's block of ``docs/credit_assignment.md`` (for ``fleet-marl docs``)."""
    out = []
    for d in sorted(p.parent for p in (Path(root) / "docs" / "data").glob(f"{PREFIX}*/study.json")):
        where = targets(json.loads((d / "study.json").read_text()))
        out.append(("docs/credit_assignment.md", where["start"], where["end"], block(d)))
    return out


__all__ = [
    "COMPARISONS",
    "DEFAULTS",
    "OTHERS",
    "SUMMARY",
    "block",
    "blocks",
    "command",
    "paired",
    "prediction_table",
    "summary_table",
    "targets",
    "wall_hours",
]

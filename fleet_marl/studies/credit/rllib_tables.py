"""The first study's tables (:class:`~fleet_marl.studies.credit.rllib_design.RLlibStudy`, on
RLlib), from the rows of its ``results.csv``; they reproduce ``docs/credit_assignment.md``'s
blocks from the committed data in ``docs/data/credit_assignment*/``.

=========================  ====================================================================
:func:`summary_table`      one row per (N, scheme): mean ± 95% interval across seeds of every
                           :data:`SUMMARY` column
:func:`paired`             per-N differences of two schemes paired by seed
:func:`prediction_table`   the prediction's comparisons (:data:`COMPARISONS`) and the growth of
                           the difference gap
=========================  ====================================================================
"""

from __future__ import annotations

import math

import numpy as np

from fleet_marl.config import REWARD_SCHEMES
from fleet_marl.studies.credit.stats import fmt_pm, mean_ci

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


__all__ = ["COMPARISONS", "OTHERS", "SUMMARY", "paired", "prediction_table", "summary_table"]

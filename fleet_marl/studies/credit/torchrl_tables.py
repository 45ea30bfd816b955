"""The TorchRL study's tables and verdicts (:class:`~fleet_marl.studies.credit.torchrl_design.Study`),
from the rows of its ``results.csv``.

=========================  ====================================================================
:func:`summary_table`      per (setting, N, arm): mean ± 95% interval across seeds of the graded
                           welfare, score, Jain, starvation and degenerate events; converged
                           runs; agent steps to 90% of the final score; wall and reward time
:func:`paired_table`       each arm minus the baseline arm (``difference``; ``shared`` in the
                           sharing part), paired by seed
:func:`verdicts`           one verdict per prediction and arbiter (:data:`PREDICTIONS`): held,
                           did not hold or undecided, with the numbers that decide it
:func:`verdict_changes`    a study's verdicts next to an earlier study's, whole and at the same N
:func:`with_convergence`   the rows with ``converged`` re-derived by the rule (:func:`~fleet_marl.studies.credit.torchrl_design.converged`)
:func:`unconverged_table`  every run that did not converge (none is dropped)
:func:`cost_table`         the reward computation's cost per env step by N: where Shapley stops
                           being worth it
=========================  ====================================================================

The verdicts take the part they read (``part``: ``scaling``, or the suite study's ``suite``,
:mod:`~fleet_marl.studies.credit.suite_report`, which applies the same rules per family).

**Decision rules** (95% Student-t intervals across seeds, paired by seed; a margin ``m`` of
:data:`MARGIN` of the grader's score, the random-to-planner range):

* *global reward stalls as N grows*: per seed, the score gap ``global - difference`` at each N
  and its least-squares slope against log2 N. **Held** when the gap at the largest N and the
  slope are both below 0; **did not hold** when the gap at the largest N is above ``-m``
  (global within m of difference, or better); else undecided.
* *local reward starves under the auction*: under the ``auction`` arbiter at N >= 8, per seed
  the mean over N of local's starvation events per episode minus difference's. **Held** when
  above 0; **did not hold** when below :data:`STARVATION_MARGIN` (fewer than one more event an
  episode, or none at all); else undecided.
* *Shapley ≈ difference at higher cost*: at each N >= 8 where Shapley ran, the score gap
  ``shapley - difference``. **Held** when the interval lies inside ``[-m, m]`` at every such N and
  Shapley's reward took longer per env step; **did not hold** when the interval lies outside
  ``[-m, m]`` at some N (a clear difference) or Shapley was not slower; else undecided.
"""

from __future__ import annotations

import math

import numpy as np

from fleet_marl.studies.credit.benchmarl_runs import VALUE_ARMS
from fleet_marl.studies.credit.stats import fmt, mean_ci
from fleet_marl.studies.credit.torchrl_design import ARMS, SHARING_ARMS, converged

#: Equivalence margin of the verdicts, in grader score (0 = random, 1 = planner).
MARGIN = 0.05
#: Below this many more starvation events per episode than difference, local does not starve.
STARVATION_MARGIN = 1.0
#: The N from which the verdicts are decided: they read the runs at N >= DECIDE_FROM only.
DECIDE_FROM = 8
PREDICTIONS = ("global reward stalls as N grows", "local reward starves under the auction", "Shapley ≈ difference at higher cost")

SUMMARY = (
    ("eval_welfare", "welfare", "{:.1f}"),
    ("score", "score", "{:.3f}"),
    ("jain", "Jain", "{:.3f}"),
    ("starvation_events", "starvation / ep", "{:.1f}"),
    ("degenerate", "degenerate / ep", "{:.1f}"),
)


def value(row: dict, col: str) -> float:
    """A number of a study CSV's row (nan where it is empty)."""
    v = row.get(col, "")
    return float(v) if v not in ("", None) else float("nan")


def arms_of(part: str, rows: list[dict]) -> list[str]:
    """The arms of ``part`` that ``rows`` hold, in the study's order."""
    order = list(SHARING_ARMS) if part == "sharing" else [*ARMS, *VALUE_ARMS]
    return [a for a in order if any(r["arm"] == a for r in rows)]


def select(rows: list[dict], part: str, setting: str | None = None, n: int | None = None, arm: str | None = None) -> list[dict]:
    return [
        r
        for r in rows
        if r["part"] == part
        and (setting is None or r["setting"] == setting)
        and (n is None or int(r["n"]) == n)
        and (arm is None or r["arm"] == arm)
    ]


def settings_of(rows: list[dict], part: str) -> list[str]:
    """The settings (arbiters, tasks) of ``part`` that ``rows`` hold, in their order."""
    seen: list[str] = []
    for r in rows:
        if r["part"] == part and r["setting"] not in seen:
            seen.append(r["setting"])
    return seen


def by_seed(rows: list[dict], part: str, setting: str, n: int, arm: str, column: str) -> dict[int, float]:
    return {int(r["seed"]): value(r, column) for r in select(rows, part, setting, n, arm)}


def paired(
    rows: list[dict], part: str, setting: str, n: int, a: str, b: str, column: str = "score"
) -> tuple[float, float, int, int, list[float]]:
    """(mean of a - b paired by seed, 95% half-width, seeds where a > b, seeds, the differences)."""
    va, vb = by_seed(rows, part, setting, n, a, column), by_seed(rows, part, setting, n, b, column)
    common = sorted(set(va) & set(vb))
    d = [va[s] - vb[s] for s in common]
    m, h = mean_ci(d) if d else (float("nan"), float("nan"))
    return m, h, sum(x > 0 for x in d), len(common), d


# --- tables --------------------------------------------------------------------------------------


def summary_table(rows: list[dict], part: str) -> str:
    head = [
        "setting",
        "N",
        "arm",
        "seeds",
        *(h for _, h, _ in SUMMARY),
        "converged",
        "agent steps to 90%",
        "wall s / run",
        "reward s / run",
        "reward ms / env step",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting in settings_of(rows, part):
        for n in sorted({int(r["n"]) for r in select(rows, part, setting)}):
            for arm in arms_of(part, rows):
                rs = select(rows, part, setting, n, arm)
                if not rs:
                    continue
                reach = [value(r, "agent_steps_to_90") for r in rs if r["agent_steps_to_90"] not in ("", None)]
                m90, h90 = mean_ci(reach) if reach else (float("nan"), float("nan"))
                cells = [setting, str(n), f"`{arm}`", str(len(rs))]
                cells += [fmt(*mean_ci([value(r, c) for r in rs]), f) for c, _, f in SUMMARY]
                cells += [
                    f"{sum(int(r['converged']) for r in rs)}/{len(rs)}",
                    (fmt(m90 / 1e3, h90 / 1e3, "{:.0f}") + "k") if reach else "–",
                    f"{np.mean([value(r, 'run_seconds') for r in rs]):.0f}",
                    f"{np.mean([value(r, 'credit_seconds') for r in rs]):.1f}",
                    f"{np.mean([value(r, 'credit_ms_per_step') for r in rs]):.3f}",
                ]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(rows: list[dict], part: str) -> str:
    """Each arm minus the baseline (``difference``; ``shared`` for sharing), paired by seed:
    score, welfare, Jain and starvation events."""
    base = "shared" if part == "sharing" else "difference"
    cols = (
        ("score", "Δ score", "{:+.3f}"),
        ("eval_welfare", "Δ welfare", "{:+.1f}"),
        ("jain", "Δ Jain", "{:+.3f}"),
        ("starvation_events", "Δ starvation / ep", "{:+.1f}"),
    )
    head = ["setting", "N", f"arm − `{base}`", *(h for _, h, _ in cols), "seeds better"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting in settings_of(rows, part):
        for n in sorted({int(r["n"]) for r in select(rows, part, setting)}):
            for arm in arms_of(part, rows):
                if arm == base:
                    continue
                stats = [paired(rows, part, setting, n, arm, base, c) for c, _, _ in cols]
                if not stats[0][3]:
                    continue
                cells = [setting, str(n), f"`{arm}`"] + [fmt(s[0], s[1], f) for s, (_, _, f) in zip(stats, cols, strict=True)]
                cells.append(f"{stats[0][2]}/{stats[0][3]}")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def with_convergence(rows: list[dict], tol: float) -> list[dict]:
    """``rows`` with ``converged`` re-derived from ``improvement_last_20`` by the study's rule
    (:func:`~fleet_marl.studies.credit.torchrl_design.converged`, tolerance ``tol``): the rule is
    the report's, so a study stored under an older rule (a rise only) is reported under today's.
    A row without the improvement keeps its stored value."""
    out = []
    for r in rows:
        imp = value(r, "improvement_last_20")
        out.append(r if math.isnan(imp) else {**r, "converged": int(converged(imp, tol))})
    return out


def unconverged_table(rows: list[dict], tol: float) -> str:
    """Every run that did not converge (``converged`` as the rows hold it: :func:`with_convergence`
    re-derives it), with its welfare at 80% and at the end of its budget and the change between."""
    bad = [r for r in rows if not int(r["converged"])]
    rule = f"graded welfare rose or fell by {tol:.0%} or more over the last 20% of the budget"
    if not bad:
        return f"Every run converged (its graded welfare moved by less than {tol:.0%}, up or down, over the last 20% of its budget)."
    rose = sum(value(r, "improvement_last_20") > 0 for r in bad)
    fell = sum(value(r, "improvement_last_20") < 0 for r in bad)
    lines = [
        f"{len(bad)} of {len(rows)} runs did not converge ({rule}: {rose} rose, {fell} fell); they are in every table above.",
        "",
        "| part | setting | N | arm | seed | welfare at 80% | final welfare | change | final score |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(bad, key=lambda r: (r["part"], r["setting"], int(r["n"]), r["arm"], int(r["seed"]))):
        lines.append(
            f"| {r['part']} | {r['setting']} | {r['n']} | `{r['arm']}` | {r['seed']} | {value(r, 'welfare_at_80'):.1f} | "
            f"{value(r, 'eval_welfare'):.1f} | {value(r, 'improvement_last_20'):+.1%} | {value(r, 'score'):.3f} |"
        )
    return "\n".join(lines)


def cost_table(rows: list[dict], skipped: list, part: str = "scaling") -> str:
    """Reward computation per env step (the env's credit engine, ms) of each scheme by N,
    across the settings of ``part`` (both arbiters; the suite's families), and Shapley's cost
    over difference's."""
    rs = select(rows, part)
    ns = sorted({int(r["n"]) for r in rs})
    arms = [a for a in arms_of(part, rows) if a != "mappo"]
    head = ["N", *(f"`{a}`" for a in arms), "shapley / difference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in ns:
        cells = [str(n)]
        vals = {}
        for a in arms:
            v = [value(r, "credit_ms_per_step") for r in rs if int(r["n"]) == n and r["arm"] == a]
            vals[a] = float(np.mean(v)) if v else float("nan")
            cells.append("not run" if not v and any(s[2] == n and s[3] == a for s in skipped) else ("–" if not v else f"{vals[a]:.3f}"))
        ratio = vals.get("shapley", float("nan")) / vals.get("difference", float("nan")) if vals.get("difference") else float("nan")
        cells.append("–" if math.isnan(ratio) else f"{ratio:.1f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- the verdicts --------------------------------------------------------------------------------


def _slope(ns: list[int], gaps: list[float]) -> float:
    x = np.log2(np.asarray(ns, float))
    y = np.asarray(gaps, float)
    return float(np.polyfit(x, y, 1)[0])


def verdict_global(rows: list[dict], setting: str, part: str = "scaling") -> dict:
    ns = sorted(
        {int(r["n"]) for r in select(rows, part, setting, arm="global")}
        & {int(r["n"]) for r in select(rows, part, setting, arm="difference")}
    )
    if len(ns) < 2:
        return {"verdict": "undecided", "why": "fewer than two N with both arms"}
    per_n = {n: paired(rows, part, setting, n, "global", "difference") for n in ns}
    seeds = set.intersection(
        *(set(by_seed(rows, part, setting, n, "global", "score")) & set(by_seed(rows, part, setting, n, "difference", "score")) for n in ns)
    )
    slopes = []
    for s in sorted(seeds):
        gaps = [
            by_seed(rows, part, setting, n, "global", "score")[s] - by_seed(rows, part, setting, n, "difference", "score")[s] for n in ns
        ]
        slopes.append(_slope(ns, gaps))
    sm, sh = mean_ci(slopes) if slopes else (float("nan"), float("nan"))
    top = ns[-1]
    gm, gh = per_n[top][0], per_n[top][1]
    if gm + gh < 0 and sm + sh < 0:
        v = "held"
    elif gm - gh > -MARGIN:
        v = "did not hold"
    else:
        v = "undecided"
    gaps_text = ", ".join(f"N={n}: {fmt(per_n[n][0], per_n[n][1], '{:+.3f}')}" for n in ns if n >= DECIDE_FROM)
    why = (
        f"score gap global − difference at N = {top}: {fmt(gm, gh, '{:+.3f}')}; slope of the gap per doubling of N: "
        f"{fmt(sm, sh, '{:+.3f}')} ({len(slopes)} seeds); gaps at N ≥ {DECIDE_FROM}: {gaps_text}"
    )
    return {"verdict": v, "why": why}


def verdict_local(rows: list[dict], setting: str = "auction", part: str = "scaling") -> dict:
    ns = sorted(n for n in {int(r["n"]) for r in select(rows, part, setting, arm="local")} if n >= DECIDE_FROM)
    if not ns:
        return {"verdict": "undecided", "why": f"no runs of local under {setting} at N ≥ {DECIDE_FROM}"}
    per_seed: dict[int, list[float]] = {}
    for n in ns:
        a, b = (
            by_seed(rows, part, setting, n, "local", "starvation_events"),
            by_seed(rows, part, setting, n, "difference", "starvation_events"),
        )
        for s in set(a) & set(b):
            per_seed.setdefault(s, []).append(a[s] - b[s])
    d = [float(np.mean(v)) for v in per_seed.values() if len(v) == len(ns)]
    m, h = mean_ci(d) if d else (float("nan"), float("nan"))
    if math.isnan(h):  # fewer than two seeds: no interval
        v = "undecided"
    elif m - h > 0:
        v = "held"
    elif m + h < STARVATION_MARGIN:
        v = "did not hold"
    else:
        v = "undecided"
    raw = ", ".join(
        f"N={n}: local {fmt(*mean_ci(list(by_seed(rows, part, setting, n, 'local', 'starvation_events').values())), '{:.1f}')}"
        f" vs difference {fmt(*mean_ci(list(by_seed(rows, part, setting, n, 'difference', 'starvation_events').values())), '{:.1f}')}"
        for n in ns
    )
    why = (
        f"starvation events per episode, local − difference under `{setting}`, mean over N = {', '.join(map(str, ns))}: "
        f"{fmt(m, h, '{:+.2f}')} ({len(d)} seeds); {raw}"
    )
    return {"verdict": v, "why": why}


def verdict_shapley(rows: list[dict], setting: str, part: str = "scaling") -> dict:
    ns = sorted(n for n in {int(r["n"]) for r in select(rows, part, setting, arm="shapley")} if n >= DECIDE_FROM)
    if not ns:
        return {"verdict": "undecided", "why": f"no shapley runs at N ≥ {DECIDE_FROM} under {setting}"}
    parts, inside, outside = [], True, False
    for n in ns:
        m, h, _, k, _ = paired(rows, part, setting, n, "shapley", "difference")
        if math.isnan(h):  # fewer than two seeds: no interval decides anything
            inside = False
        else:
            inside &= (m - h >= -MARGIN) and (m + h <= MARGIN)
            outside |= (m - h > MARGIN) or (m + h < -MARGIN)
        cs = np.mean([value(r, "credit_ms_per_step") for r in select(rows, part, setting, n, "shapley")])
        cd = np.mean([value(r, "credit_ms_per_step") for r in select(rows, part, setting, n, "difference")])
        slower = cs > cd
        inside &= slower
        outside |= not slower
        parts.append(
            f"N={n}: score gap shapley − difference {fmt(m, h, '{:+.3f}')} ({k} seeds), reward {cs:.3f} vs {cd:.3f} ms per env step "
            f"({cs / cd:.1f}×)"
        )
    v = "held" if inside else ("did not hold" if outside else "undecided")
    return {"verdict": v, "why": "; ".join(parts)}


def verdicts(rows: list[dict]) -> list[dict]:
    """One row per (prediction, arbiter): ``prediction``, ``setting``, ``verdict``, ``why``."""
    out = []
    settings = settings_of(rows, "scaling")
    for s in settings:
        out.append({"prediction": PREDICTIONS[0], "setting": s, **verdict_global(rows, s)})
    if "auction" in settings:
        out.append({"prediction": PREDICTIONS[1], "setting": "auction", **verdict_local(rows, "auction")})
    for s in settings:
        out.append({"prediction": PREDICTIONS[2], "setting": s, **verdict_shapley(rows, s)})
    return out


def verdict_changes(rows: list[dict], before: list[dict]) -> str:
    """Each prediction's verdict on ``rows`` (a study at some N: the re-test) next to the verdict
    of the study ``before`` (the committed one) as it stands, and on ``before``'s runs at the same
    N only, so that a change of model and a change of N can be told apart."""
    ns = sorted({int(r["n"]) for r in select(rows, "scaling")})
    same_n = [r for r in before if r["part"] != "scaling" or int(r["n"]) in ns]
    old = {(v["prediction"], v["setting"]): v["verdict"] for v in verdicts(before)}
    old_n = {(v["prediction"], v["setting"]): v["verdict"] for v in verdicts(same_n)}
    n_text = ", ".join(map(str, ns))
    lines = [
        f"| prediction | arbiter | verdict here | before | before, at N = {n_text} only | changed |",
        "|---|---|---|---|---|---|",
    ]
    for v in verdicts(rows):
        k = (v["prediction"], v["setting"])
        was, was_n = old.get(k, "–"), old_n.get(k, "–")
        lines.append(f"| {k[0]} | {k[1]} | **{v['verdict']}** | {was} | {was_n} | {'yes' if v['verdict'] != was else 'no'} |")
    return "\n".join(lines)


def verdict_table(vs: list[dict], label: str = "arbiter") -> str:
    """The verdicts ``vs`` as a table; ``label`` heads the column of their settings."""
    lines = [f"| prediction | {label} | verdict | the numbers |", "|---|---|---|---|"]
    lines += [f"| {v['prediction']} | {v['setting']} | **{v['verdict']}** | {v['why']} |" for v in vs]
    return "\n".join(lines)


__all__ = [
    "DECIDE_FROM",
    "MARGIN",
    "PREDICTIONS",
    "STARVATION_MARGIN",
    "SUMMARY",
    "arms_of",
    "by_seed",
    "cost_table",
    "paired",
    "paired_table",
    "select",
    "settings_of",
    "summary_table",
    "unconverged_table",
    "value",
    "verdict_changes",
    "verdict_global",
    "verdict_local",
    "verdict_shapley",
    "verdict_table",
    "verdicts",
    "with_convergence",
]

"""The report of the TorchRL credit-assignment study (:mod:`fleet_marl.studies.credit_study`):
tables, the verdicts, the plots and the docs block. It reads only the study's CSVs.

=========================  ====================================================================
:func:`summary_table`      per (setting, N, arm): mean ± 95% interval across seeds of the graded
                           welfare, score, Jain, starvation and degenerate events; converged
                           runs; agent steps to 90% of the final score; wall and reward time
:func:`paired_table`       each arm minus the baseline arm (``difference``; ``shared`` in the
                           sharing part), paired by seed
:func:`verdicts`           one verdict per prediction and arbiter (:data:`PREDICTIONS`): held,
                           did not hold or undecided, with the numbers that decide it
:func:`unconverged_table`  every run that did not converge (none is dropped)
:func:`cost_table`         the reward computation's cost per env step by N: where Shapley stops
                           being worth it
:func:`plot_curves`,       learning curves (score against agent steps, per N), the score
:func:`plot_scaling`,      against N per arbiter, and the sharing schemes' scores
:func:`plot_sharing`
:func:`report`             ``summary.md`` and the plots in the study folder
:func:`write_docs`         all of it into ``docs/credit_assignment.md`` (``--docs``)
=========================  ====================================================================

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

import json
import math
import shutil
from pathlib import Path

import numpy as np

from fleet_marl.evaluation.baselines import checkout
from fleet_marl.studies import store
from fleet_marl.studies.credit_study import ARMS, SHARING_ARMS, Study, StudyError
from fleet_marl.studies.report import mean_ci

#: Equivalence margin of the verdicts, in grader score (0 = random, 1 = planner).
MARGIN = 0.05
#: Below this many more starvation events per episode than difference, local does not starve.
STARVATION_MARGIN = 1.0
#: The N from which the verdicts are decided (the issue's acceptance).
DECIDE_FROM = 8
PREDICTIONS = ("global reward stalls as N grows", "local reward starves under the auction", "Shapley ≈ difference at higher cost")

SUMMARY = (
    ("eval_welfare", "welfare", "{:.1f}"),
    ("score", "score", "{:.3f}"),
    ("jain", "Jain", "{:.3f}"),
    ("starvation_events", "starvation / ep", "{:.1f}"),
    ("degenerate", "degenerate / ep", "{:.1f}"),
)


def fmt(m: float, h: float, f: str) -> str:
    """``m ± h`` in format ``f`` (``m`` alone when ``h`` is nan)."""
    if math.isnan(m):
        return "–"
    return f.format(m) + ("" if math.isnan(h) else " ± " + f.replace("+", "").format(h))


def _f(row: dict, col: str) -> float:
    v = row.get(col, "")
    return float(v) if v not in ("", None) else float("nan")


def _arms(part: str, rows: list[dict]) -> list[str]:
    order = list(ARMS if part == "scaling" else SHARING_ARMS)
    return [a for a in order if any(r["arm"] == a for r in rows)]


def _select(rows: list[dict], part: str, setting: str | None = None, n: int | None = None, arm: str | None = None) -> list[dict]:
    return [
        r
        for r in rows
        if r["part"] == part
        and (setting is None or r["setting"] == setting)
        and (n is None or int(r["n"]) == n)
        and (arm is None or r["arm"] == arm)
    ]


def _settings(rows: list[dict], part: str) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r["part"] == part and r["setting"] not in seen:
            seen.append(r["setting"])
    return seen


def by_seed(rows: list[dict], part: str, setting: str, n: int, arm: str, column: str) -> dict[int, float]:
    return {int(r["seed"]): _f(r, column) for r in _select(rows, part, setting, n, arm)}


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
    for setting in _settings(rows, part):
        for n in sorted({int(r["n"]) for r in _select(rows, part, setting)}):
            for arm in _arms(part, rows):
                rs = _select(rows, part, setting, n, arm)
                if not rs:
                    continue
                reach = [_f(r, "agent_steps_to_90") for r in rs if r["agent_steps_to_90"] not in ("", None)]
                m90, h90 = mean_ci(reach) if reach else (float("nan"), float("nan"))
                cells = [setting, str(n), f"`{arm}`", str(len(rs))]
                cells += [fmt(*mean_ci([_f(r, c) for r in rs]), f) for c, _, f in SUMMARY]
                cells += [
                    f"{sum(int(r['converged']) for r in rs)}/{len(rs)}",
                    (fmt(m90 / 1e3, h90 / 1e3, "{:.0f}") + "k") if reach else "–",
                    f"{np.mean([_f(r, 'run_seconds') for r in rs]):.0f}",
                    f"{np.mean([_f(r, 'credit_seconds') for r in rs]):.1f}",
                    f"{np.mean([_f(r, 'credit_ms_per_step') for r in rs]):.3f}",
                ]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(rows: list[dict], part: str) -> str:
    """Each arm minus the baseline (``difference``; ``shared`` for sharing), paired by seed:
    score, welfare, Jain and starvation events."""
    base = "difference" if part == "scaling" else "shared"
    cols = (
        ("score", "Δ score", "{:+.3f}"),
        ("eval_welfare", "Δ welfare", "{:+.1f}"),
        ("jain", "Δ Jain", "{:+.3f}"),
        ("starvation_events", "Δ starvation / ep", "{:+.1f}"),
    )
    head = ["setting", "N", f"arm − `{base}`", *(h for _, h, _ in cols), "seeds better"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting in _settings(rows, part):
        for n in sorted({int(r["n"]) for r in _select(rows, part, setting)}):
            for arm in _arms(part, rows):
                if arm == base:
                    continue
                stats = [paired(rows, part, setting, n, arm, base, c) for c, _, _ in cols]
                if not stats[0][3]:
                    continue
                cells = [setting, str(n), f"`{arm}`"] + [fmt(s[0], s[1], f) for s, (_, _, f) in zip(stats, cols)]
                cells.append(f"{stats[0][2]}/{stats[0][3]}")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unconverged_table(rows: list[dict], tol: float) -> str:
    bad = [r for r in rows if not int(r["converged"])]
    if not bad:
        return f"Every run converged (its graded welfare rose by less than {tol:.0%} over the last 20% of its budget)."
    lines = [
        f"{len(bad)} of {len(rows)} runs did not converge (graded welfare rose by {tol:.0%} or more over the last 20% of the budget); "
        "they are in every table above.",
        "",
        "| part | setting | N | arm | seed | welfare at 80% | final welfare | rise | final score |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(bad, key=lambda r: (r["part"], r["setting"], int(r["n"]), r["arm"], int(r["seed"]))):
        lines.append(
            f"| {r['part']} | {r['setting']} | {r['n']} | `{r['arm']}` | {r['seed']} | {_f(r, 'welfare_at_80'):.1f} | "
            f"{_f(r, 'eval_welfare'):.1f} | {_f(r, 'improvement_last_20'):+.1%} | {_f(r, 'score'):.3f} |"
        )
    return "\n".join(lines)


def cost_table(rows: list[dict], skipped: list) -> str:
    """Reward computation per env step (the env's credit engine, ms) of each scheme by N,
    across both arbiters, and Shapley's cost over difference's."""
    rs = _select(rows, "scaling")
    ns = sorted({int(r["n"]) for r in rs})
    arms = [a for a in _arms("scaling", rows) if a != "mappo"]
    head = ["N", *(f"`{a}`" for a in arms), "shapley / difference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in ns:
        cells = [str(n)]
        vals = {}
        for a in arms:
            v = [_f(r, "credit_ms_per_step") for r in rs if int(r["n"]) == n and r["arm"] == a]
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


def verdict_global(rows: list[dict], setting: str) -> dict:
    ns = sorted(
        {int(r["n"]) for r in _select(rows, "scaling", setting, arm="global")}
        & {int(r["n"]) for r in _select(rows, "scaling", setting, arm="difference")}
    )
    if len(ns) < 2:
        return {"verdict": "undecided", "why": "fewer than two N with both arms"}
    per_n = {n: paired(rows, "scaling", setting, n, "global", "difference") for n in ns}
    seeds = set.intersection(
        *(
            set(by_seed(rows, "scaling", setting, n, "global", "score")) & set(by_seed(rows, "scaling", setting, n, "difference", "score"))
            for n in ns
        )
    )
    slopes = []
    for s in sorted(seeds):
        gaps = [
            by_seed(rows, "scaling", setting, n, "global", "score")[s] - by_seed(rows, "scaling", setting, n, "difference", "score")[s]
            for n in ns
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


def verdict_local(rows: list[dict], setting: str = "auction") -> dict:
    ns = sorted(n for n in {int(r["n"]) for r in _select(rows, "scaling", setting, arm="local")} if n >= DECIDE_FROM)
    if not ns:
        return {"verdict": "undecided", "why": f"no runs of local under {setting} at N ≥ {DECIDE_FROM}"}
    per_seed: dict[int, list[float]] = {}
    for n in ns:
        a, b = (
            by_seed(rows, "scaling", setting, n, "local", "starvation_events"),
            by_seed(rows, "scaling", setting, n, "difference", "starvation_events"),
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
        f"N={n}: local {fmt(*mean_ci(list(by_seed(rows, 'scaling', setting, n, 'local', 'starvation_events').values())), '{:.1f}')}"
        f" vs difference {fmt(*mean_ci(list(by_seed(rows, 'scaling', setting, n, 'difference', 'starvation_events').values())), '{:.1f}')}"
        for n in ns
    )
    why = (
        f"starvation events per episode, local − difference under `{setting}`, mean over N = {', '.join(map(str, ns))}: "
        f"{fmt(m, h, '{:+.2f}')} ({len(d)} seeds); {raw}"
    )
    return {"verdict": v, "why": why}


def verdict_shapley(rows: list[dict], setting: str) -> dict:
    ns = sorted(n for n in {int(r["n"]) for r in _select(rows, "scaling", setting, arm="shapley")} if n >= DECIDE_FROM)
    if not ns:
        return {"verdict": "undecided", "why": f"no shapley runs at N ≥ {DECIDE_FROM} under {setting}"}
    parts, inside, outside = [], True, False
    for n in ns:
        m, h, _, k, _ = paired(rows, "scaling", setting, n, "shapley", "difference")
        if math.isnan(h):  # fewer than two seeds: no interval decides anything
            inside = False
        else:
            inside &= (m - h >= -MARGIN) and (m + h <= MARGIN)
            outside |= (m - h > MARGIN) or (m + h < -MARGIN)
        cs = np.mean([_f(r, "credit_ms_per_step") for r in _select(rows, "scaling", setting, n, "shapley")])
        cd = np.mean([_f(r, "credit_ms_per_step") for r in _select(rows, "scaling", setting, n, "difference")])
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
    settings = _settings(rows, "scaling")
    for s in settings:
        out.append({"prediction": PREDICTIONS[0], "setting": s, **verdict_global(rows, s)})
    if "auction" in settings:
        out.append({"prediction": PREDICTIONS[1], "setting": "auction", **verdict_local(rows, "auction")})
    for s in settings:
        out.append({"prediction": PREDICTIONS[2], "setting": s, **verdict_shapley(rows, s)})
    return out


def verdict_table(vs: list[dict]) -> str:
    lines = ["| prediction | arbiter | verdict | the numbers |", "|---|---|---|---|"]
    lines += [f"| {v['prediction']} | {v['setting']} | **{v['verdict']}** | {v['why']} |" for v in vs]
    return "\n".join(lines)


# --- plots ---------------------------------------------------------------------------------------


def _plt():
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    return plt


def _color(arm: str) -> str:
    """One colour per arm in every panel and plot (an arm missing from a panel moves no other)."""
    return f"C{list(ARMS).index(arm) if arm in ARMS else list(SHARING_ARMS).index(arm)}"


def _band(ax, xs, vals, label, **kw):
    ms, lo, hi = [], [], []
    for v in vals:
        m, h = mean_ci(v)
        h = 0.0 if math.isnan(h) else h
        ms.append(m)
        lo.append(max(m - h, 0.0))
        hi.append(min(m + h, 1.0))
    (line,) = ax.plot(xs, ms, marker="o", ms=3, label=label, **kw)
    ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())


def plot_curves(curves: list[dict], setting: str, path: Path) -> Path | None:
    """Score against agent steps, one panel per N, one line per arm (mean, 95% band)."""
    cs = [c for c in curves if c["part"] == "scaling" and c["setting"] == setting]
    if not cs:
        return None
    plt = _plt()
    ns = sorted({int(c["n"]) for c in cs})
    cols = min(3, len(ns))
    rows_ = math.ceil(len(ns) / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.2 * rows_), squeeze=False, sharey=True)
    for ax, n in zip(axes.flat, ns):
        for arm in _arms("scaling", cs):
            pts = [c for c in cs if int(c["n"]) == n and c["arm"] == arm]
            its = sorted({int(c["iteration"]) for c in pts})
            if not its:
                continue
            xs = [np.mean([_f(c, "agent_steps") for c in pts if int(c["iteration"]) == it]) / 1e3 for it in its]
            _band(ax, xs, [[_f(c, "score") for c in pts if int(c["iteration"]) == it] for it in its], arm, color=_color(arm))
        ax.set_title(f"N = {n}", fontsize=9)
        ax.set_xlabel("agent steps (thousands)", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(ns) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("grader score (0 random, 1 planner)", fontsize=8)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(
        f"Learning curves under the {setting} arbiter: the grader's score of the greedy policy, mean and 95% interval across seeds",
        fontsize=9,
    )
    return _save(fig, path)


def plot_scaling(rows: list[dict], setting: str, path: Path) -> Path | None:
    """Final score against N per arm (mean, 95% interval), one arbiter."""
    rs = _select(rows, "scaling", setting)
    if not rs:
        return None
    plt = _plt()
    ns = sorted({int(r["n"]) for r in rs})
    arms = _arms("scaling", rs)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for j, arm in enumerate(arms):
        xs, ms, lo, hi = [], [], [], []
        for i, n in enumerate(ns):
            v = [_f(r, "score") for r in rs if int(r["n"]) == n and r["arm"] == arm]
            if v:
                m, h = mean_ci(v)
                h = 0.0 if math.isnan(h) else h
                xs.append(i + (j - (len(arms) - 1) / 2) * 0.07)
                ms.append(m)
                lo.append(m - max(m - h, 0.0))
                hi.append(min(m + h, 1.0) - m)
        ax.errorbar(xs, ms, yerr=[lo, hi], marker="o", ms=4, capsize=3, label=arm, color=_color(arm))
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_xlabel("tenants N")
    ax.set_ylabel("grader score (0 = random, 1 = planner)")
    ax.set_title(
        f"{setting} arbiter: the greedy policy's score after the same budget per N\n(mean, 95% interval across seeds, clipped to [0, 1])",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def plot_sharing(rows: list[dict], path: Path) -> Path | None:
    rs = _select(rows, "sharing")
    if not rs:
        return None
    plt = _plt()
    tasks = _settings(rows, "sharing")
    arms = _arms("sharing", rs)
    fig, ax = plt.subplots(figsize=(7, 4))
    w = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        ms, hs = [], []
        for t in tasks:
            m, h = mean_ci([_f(r, "score") for r in rs if r["setting"] == t and r["arm"] == arm] or [float("nan")])
            ms.append(m)
            hs.append(0.0 if math.isnan(h) else h)
        ax.bar(np.arange(len(tasks)) + (j - (len(arms) - 1) / 2) * w, ms, w, yerr=hs, capsize=3, label=arm)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("grader score (0 = random, 1 = planner)")
    ax.set_title("Sharing schemes under the difference reward (mean, 95% interval across seeds)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    plt = _plt()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the report ----------------------------------------------------------------------------------


def load(out: str | Path) -> dict:
    """The study in ``out``: its settings, results, curves and sessions (refused when empty)."""
    out = Path(out)
    rows = store.read_rows(out / "results.csv")
    if not rows:
        raise StudyError(f"--out {str(out)!r}: no finished runs in results.csv yet; run the study first")
    settings = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
    return {
        "out": out,
        "settings": settings,
        "rows": rows,
        "curves": store.read_rows(out / "curves.csv"),
        "sessions": store.read_rows(out / "sessions.csv"),
    }


def _study(settings: dict) -> Study:
    fields = Study.__dataclass_fields__
    return Study(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in fields})


def text(data: dict, img: dict[str, Path], img_link=lambda p: p.name) -> str:
    """The whole report (Markdown); ``img`` maps a plot's name to its file."""
    rows, settings, sessions = data["rows"], data["settings"], data["sessions"]
    study = _study(settings)
    expected = len(study.runs())
    wall = sum(_f(s, "wall_seconds") for s in sessions)
    cpu = sum(_f(r, "run_seconds") for r in rows)
    budgets = ", ".join(f"N={n}: {study.env_steps('scaling', n):,}" for n in sorted(study.ns))
    sb = ", ".join(f"{t} (N={study.task_n(t)}): {study.env_steps('sharing', study.task_n(t)):,}" for t in study.sharing_tasks)
    skipped = study.skipped()
    parts = [
        f"{len(rows)} of {expected} runs finished"
        + ("" if len(rows) >= expected else " (the study is not complete: every number below is from the runs so far)")
        + f". {cpu / 3600:.2f} CPU-hours of runs; {wall / 3600:.2f} hours of wall time over {len(sessions)} session(s) of "
        f"`fleet-marl compare` with {', '.join(sorted({s['jobs'] for s in sessions}))} job(s). Code: {sessions[-1]['version'] if sessions else '?'}.",
        f"\nEnv-step budget per run (every arm the same at an N): scaling {budgets}; sharing {sb}. That is "
        f"{study.iterations * study.agents_per_step * study.rollout:,} agent steps per scaling run, "
        f"{study.sharing_iterations * study.agents_per_step * study.rollout:,} per sharing run. {study.seeds} seeds; "
        f"{study.episodes} grader episodes at {', '.join(f'{f:.0%}' for f in study.eval_fractions)} of each budget.",
    ]
    if skipped:
        parts.append(
            f"\nNot run: `shapley` at N = {', '.join(sorted({str(s[2]) for s in skipped}, key=int))} "
            f"(``shapley_max_n`` = {study.shapley_max_n}; the reward-cost table below says why)."
        )
    vs = verdicts(rows)
    parts += [
        "\n### Verdicts\n",
        verdict_table(vs),
        "\n### Scaling: summary (mean ± 95% interval across seeds)\n",
        summary_table(rows, "scaling"),
        "\n### Scaling: each arm against `difference`, paired by seed\n",
        paired_table(rows, "scaling"),
    ]
    for s in _settings(rows, "scaling"):
        if f"scaling_{s}" in img:
            parts.append(f"\n![score against N, {s}]({img_link(img[f'scaling_{s}'])})")
        if f"curves_{s}" in img:
            parts.append(f"\n![learning curves, {s}]({img_link(img[f'curves_{s}'])})")
    parts += ["\n### What the reward costs (the env's credit engine, ms per env step, mean over runs)\n", cost_table(rows, skipped)]
    if _select(rows, "sharing"):
        parts += [
            "\n### Sharing schemes under `difference` (mean ± 95% interval across seeds)\n",
            summary_table(rows, "sharing"),
            "\n### Sharing schemes against `shared`, paired by seed\n",
            paired_table(rows, "sharing"),
        ]
        if "sharing" in img:
            parts.append(f"\n![sharing schemes]({img_link(img['sharing'])})")
    parts += ["\n### Convergence\n", unconverged_table(rows, study.converge_tol)]
    return "\n".join(parts) + "\n"


def plots(data: dict, img_dir: Path, prefix: str = "") -> dict[str, Path]:
    rows, curves = data["rows"], data["curves"]
    out: dict[str, Path] = {}
    for s in _settings(rows, "scaling"):
        for name, fn, arg in ((f"scaling_{s}", plot_scaling, rows), (f"curves_{s}", plot_curves, curves)):
            p = fn(arg, s, img_dir / f"{prefix}{name}.png")
            if p:
                out[name] = p
    p = plot_sharing(rows, img_dir / f"{prefix}sharing.png")
    if p:
        out["sharing"] = p
    return out


def report(out: str | Path, echo=print) -> dict:
    """``summary.md`` and the plots in the study folder ``out``; returns what it wrote."""
    data = load(out)
    img = plots(data, data["out"])
    body = text(data, img)
    path = data["out"] / "summary.md"
    path.write_text(f"# Credit-assignment study (TorchRL): {data['out']}\n\n{body}")
    echo(body + f"\nwrote {path}" + "".join(f", {p}" for p in img.values()))
    return {"summary": path, "plots": img, "text": body, "verdicts": verdicts(data["rows"])}


DOC = "docs/credit_assignment.md"
START, END = "<!-- credit-study:start -->", "<!-- credit-study:end -->"
DATA = "docs/data/credit_study"
PREFIX = "credit_study_"


def command(settings: dict) -> str:
    """The ``fleet-marl compare`` command of a study with ``settings`` (study.json)."""
    if settings == Study().settings():
        return "fleet-marl compare"
    if settings == Study.quick().settings():
        return "fleet-marl compare --quick"
    diff = {k: v for k, v in settings.items() if Study().settings().get(k) != v}
    return "fleet-marl compare, with Study(" + ", ".join(f"{k}={v!r}" for k, v in diff.items()) + ") from Python"


def write_docs(out: str | Path, root: str | Path | None = None, echo=print, allow_quick: bool = False) -> Path:
    """Copy the study in ``out`` into the checkout's docs: its CSVs to ``docs/data/credit_study/``,
    the plots to ``docs/img/credit_study_*.png`` and the report, with the command that
    reproduces it, between the markers of ``docs/credit_assignment.md``. A ``--quick`` study
    is refused unless ``allow_quick``."""
    root = Path(root) if root else checkout()
    if root is None:
        raise StudyError("--docs: this fleet_marl is not a source checkout (no docs/ to write); drop --docs")
    data = load(out)
    cmd = command(data["settings"])
    if cmd.endswith("--quick") and not allow_quick:
        raise StudyError(
            f"--docs with the quick study in {str(out)!r}: its numbers mean nothing and would replace the full study's "
            "in docs/; drop --docs (the report is in the study folder)"
        )
    dest = root / DATA
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "curves.csv", "study.json", "sessions.csv"):
        if (data["out"] / name).is_file():
            shutil.copyfile(data["out"] / name, dest / name)
    img = plots(data, root / "docs" / "img", PREFIX)
    body = text(data, img, lambda p: f"img/{p.name}")
    block = (
        f"{START}\n<!-- written by `fleet-marl compare --report --docs`; edit the text around it, not this block -->\n\n"
        f"Reproduce: `{cmd}` (resumable: run it again after a stop), then `fleet-marl compare --report --docs`. "
        f"The data: [`{DATA}/`]({DATA.removeprefix('docs/')}/).\n\n{body}{END}"
    )
    path = root / DOC
    store.write_block(path, START, END, block)
    echo(f"wrote {path}, {dest}/ and docs/img/{PREFIX}*.png")
    return path


__all__ = [
    "DOC",
    "MARGIN",
    "PREDICTIONS",
    "STARVATION_MARGIN",
    "command",
    "cost_table",
    "load",
    "paired",
    "paired_table",
    "plot_curves",
    "plot_scaling",
    "plot_sharing",
    "plots",
    "report",
    "summary_table",
    "text",
    "unconverged_table",
    "verdicts",
    "write_docs",
]

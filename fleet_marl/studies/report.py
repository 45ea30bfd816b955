"""The credit-assignment study's report: statistics, tables, plots and the docs block.

Everything here reads the CSVs a study wrote (:mod:`fleet_marl.studies.credit_assignment`) and
needs no Ray:

=========================  ====================================================================
:func:`mean_ci`            mean and 95% Student-t half-width across seeds
:func:`paired`             per-N differences of two schemes paired by seed (:data:`COMPARISONS`)
:func:`summary_table`      the summary table (Markdown), one row per (N, scheme)
:func:`prediction_table`   the prediction's comparisons and the growth of the difference gap
:func:`plot_curves`,       learning curves per N and the grader's score against N (PNG;
:func:`plot_scaling`       matplotlib is imported only here)
:func:`report`             ``summary.md`` and the plots in the study folder
:func:`write_docs`         the study into ``docs/credit_assignment.md`` between its markers
                           (``fleet-marl compare --report --docs``)
=========================  ====================================================================
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from pathlib import Path

import numpy as np

from fleet_marl.config import REWARD_SCHEMES
from fleet_marl.evaluation.baselines import checkout
from fleet_marl.studies import store
from fleet_marl.studies.credit_assignment import Study, StudyError, read_rows

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

# --- statistics ----------------------------------------------------------------------------------

#: Two-sided 95% Student-t quantiles t(0.975, df) for df = 1 .. 30 (any statistics table;
#: e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def _t95(k: int) -> float:
    """Two-sided 95% Student-t quantile for k - 1 degrees of freedom (1.96 above 30)."""
    if k < 2:
        return float("nan")
    return _T975[k - 2] if k - 1 <= len(_T975) else 1.96


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval) of ``values`` across seeds (nan width for one)."""
    v = np.asarray([float(x) for x in values], np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan")
    return float(v.mean()), _t95(v.size) * float(v.std(ddof=1)) / math.sqrt(v.size)


# --- tables ------------------------------------------------------------------------------------


def _fmt(m: float, h: float, f: str) -> str:
    return f.format(m) + ("" if math.isnan(h) else " ± " + f.format(h))


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
            cells += [_fmt(*mean_ci([r[c] for r in rs]), f) for c, _, f in SUMMARY]
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
        return _fmt(m, h, f).replace("± +", "± ").replace("± -", "± ") + (f" ({wins}/{k})" if k else "")

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


# --- plots and the report ----------------------------------------------------------------------


def _save(fig, ax, path: Path) -> Path:
    """Grid, legend, and the PNG at ``path``; closes the figure."""
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(curves: list[dict], n: int, path: Path, label: str = "") -> Path | None:
    """Training welfare against env steps at one N: mean and 95% interval across seeds, per scheme."""
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    rows = [c for c in curves if int(c["n"]) == n and c["welfare"] not in ("", None)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s in REWARD_SCHEMES:
        rs = [c for c in rows if c["scheme"] == s]
        if not rs:
            continue
        its = sorted({int(c["iteration"]) for c in rs})
        x, m, lo, hi = [], [], [], []
        for it in its:
            pts = [c for c in rs if int(c["iteration"]) == it]
            mu, h = mean_ci([c["welfare"] for c in pts])
            h = 0.0 if math.isnan(h) else h
            x.append(np.mean([float(c["env_steps"]) for c in pts]))
            m.append(mu)
            lo.append(mu - h)
            hi.append(mu + h)
        (line,) = ax.plot(x, m, marker="o", ms=3, label=s)
        ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("env steps")
    ax.set_ylabel("training welfare per episode")
    ax.set_title(f"N = {n} tenants{label}\nPPO, shared policy: training welfare, mean and 95% interval across seeds", fontsize=9)
    return _save(fig, ax, path)


def plot_scaling(rows: list[dict], path: Path) -> Path | None:
    """The grader's score of each scheme against N (mean, 95% interval across seeds)."""
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    if not rows:
        return None
    ns = sorted({int(r["n"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4.2))
    schemes = [s for s in REWARD_SCHEMES if any(r["scheme"] == s for r in rows)]
    for j, s in enumerate(schemes):
        xs, ms, hs = [], [], []
        for n in ns:
            v = [r["score"] for r in rows if int(r["n"]) == n and r["scheme"] == s]
            if v:
                mu, h = mean_ci(v)
                xs.append(ns.index(n) + (j - (len(schemes) - 1) / 2) * 0.08)
                ms.append(mu)
                hs.append(0.0 if math.isnan(h) else h)
        lo = [m - max(m - h, 0.0) for m, h in zip(ms, hs)]  # the score lives in [0, 1]: so do its intervals
        hi = [min(m + h, 1.0) - m for m, h in zip(ms, hs)]
        ax.errorbar(xs, ms, yerr=[lo, hi], marker="o", ms=4, capsize=3, label=s)
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_xlabel("tenants N")
    ax.set_ylabel("grader score (0 = random, 1 = planner)")
    ax.set_title("Greedy policy after the same env-step budget (mean, 95% interval across seeds, clipped to [0, 1])", fontsize=9)
    return _save(fig, ax, path)


def report(out: str | Path, img_dir: str | Path | None = None, img_prefix: str = "", echo=print) -> dict:
    """Write ``summary.md`` and the plots for the study in ``out``; returns what it wrote."""
    out = Path(out)
    rows, curves = read_rows(out / "results.csv"), read_rows(out / "curves.csv")
    if not rows:
        raise StudyError(f"--out {str(out)!r}: no finished runs in results.csv yet; run the study first")
    settings = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
    img = Path(img_dir) if img_dir else out
    plots = {}
    for n in sorted({int(r["n"]) for r in rows}):
        b = settings.get("budgets", {}).get(str(n))
        label = (f", {settings['mechanism']} arbiter" if "mechanism" in settings else "") + (f", {b:,} env steps" if b else "")
        p = plot_curves(curves, n, img / f"{img_prefix}curves_n{n}.png", label)
        if p:
            plots[n] = p
    scaling = plot_scaling(rows, img / f"{img_prefix}scaling.png")
    table, pred = summary_table(rows), prediction_table(rows)
    total = sum(float(r["run_seconds"]) for r in rows)
    text = (
        f"# Credit-assignment study: {out}\n\n{len(rows)} runs, {total / 3600:.2f} CPU-hours of runs. Mean ± 95% interval "
        f"across seeds (Student t).\n\n## Summary\n\n{table}\n\n## The prediction, paired by seed\n\n"
        f"Mean difference ± 95% interval (seeds where the first is larger / seeds).\n\n{pred}\n"
    )
    (out / "summary.md").write_text(text)
    echo(f"\n{table}\n\n{pred}\n\nwrote {out / 'summary.md'}, " + ", ".join(str(p) for p in [*plots.values(), scaling] if p))
    return {"summary": out / "summary.md", "table": table, "prediction": pred, "curves": plots, "scaling": scaling, "rows": rows}


# --- the docs block -----------------------------------------------------------------------------

DOC = "docs/credit_assignment.md"
START, END = "<!-- credit-assignment:start -->", "<!-- credit-assignment:end -->"


def docs_targets(mechanism: str) -> dict:
    """Where ``--docs`` writes a study run under ``mechanism``: the study's own arbiter
    (proportional) has the main block; another arbiter gets its own block (markers
    ``credit-assignment-<mechanism>``), data folder and image prefix, so it never replaces
    the main study's numbers."""
    if mechanism == Study.mechanism:
        return {"start": START, "end": END, "data": "docs/data/credit_assignment", "prefix": "credit_"}
    return {
        "start": f"<!-- credit-assignment-{mechanism}:start -->",
        "end": f"<!-- credit-assignment-{mechanism}:end -->",
        "data": f"docs/data/credit_assignment_{mechanism}",
        "prefix": f"credit_{mechanism}_",
    }


def command(settings: dict, out: str | Path | None = None) -> str:
    """The ``fleet-marl compare --engine rllib`` command that runs the study of ``settings`` (study.json)."""
    quick = Study.quick().settings()
    is_quick = settings.get("train_batch_size") == quick["train_batch_size"] and settings.get("max_cycles") == quick["max_cycles"]
    base = quick if is_quick else Study().settings()
    parts = ["fleet-marl compare --engine rllib"] + (["--quick"] if is_quick else [])
    flags = {
        "ns": ("--n", lambda v: ",".join(map(str, v))),
        "schemes": ("--schemes", ",".join),
        "seeds": ("--seeds", str),
        "budgets": ("--budget", lambda v: ",".join(f"{k}={b}" for k, b in v.items())),
        "episodes": ("--episodes", str),
        "mechanism": ("--mechanism", str),
    }
    for key, (flag, fmt) in flags.items():
        if key in settings and settings[key] != base[key]:
            parts.append(f"{flag} {fmt(settings[key])}")
    rest = sorted(k for k in base if k not in flags and settings.get(k) != base[k])
    if out is not None:
        parts.append(f"--out {out}")
    text = " ".join(parts)
    return text + (f" (and, from Python, Study({', '.join(f'{k}={settings.get(k)!r}' for k in rest)}))" if rest else "")


def wall_hours(rows: list[dict]) -> float:
    """Hours from the first run's start to the last run's end (includes any pause before a resume)."""
    ends = [dt.datetime.fromisoformat(r["finished"]) for r in rows]
    starts = [e - dt.timedelta(seconds=float(r["run_seconds"])) for e, r in zip(ends, rows)]
    return (max(ends) - min(starts)).total_seconds() / 3600


def write_docs(out: str | Path, root: str | Path | None = None, echo=print, allow_quick: bool = False) -> Path:
    """Copy the study in ``out`` into the checkout's docs: the CSVs to
    ``docs/data/credit_assignment/``, the plots to ``docs/img/credit_*.png`` and the tables,
    with the command that reproduces them, between the markers of ``docs/credit_assignment.md``
    (a study under another arbiter than proportional goes to its own block: :func:`docs_targets`).
    A ``--quick`` study is refused (it would replace the full study's numbers) unless
    ``allow_quick``."""
    root = Path(root) if root else checkout()
    if root is None:
        raise StudyError("--docs: this fleet_marl is not a source checkout (no docs/ to write); drop --docs")
    out = Path(out)
    if not (out / "study.json").is_file():
        raise StudyError(f"--out {str(out)!r}: no study.json; --docs needs a study run by fleet-marl compare")
    settings = json.loads((out / "study.json").read_text())
    quick = "--quick" in command(settings).split()
    default_out = Study.quick().out if quick else Study.out
    out_arg = "" if out.resolve() == Path(default_out).resolve() else f" --out {out.as_posix()}"
    cmd = command(settings, out.as_posix() if out_arg else None)
    if quick and not allow_quick:
        raise StudyError(
            f"--docs with the quick study in {str(out)!r}: its numbers mean nothing and would replace the full study's "
            "in docs/; drop --docs (the report is in the study folder)"
        )
    where = docs_targets(settings.get("mechanism", Study.mechanism))
    start, end = where["start"], where["end"]
    data = root / where["data"]
    data.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "curves.csv", "study.json"):
        if (out / name).is_file():
            shutil.copyfile(out / name, data / name)
    rep = report(out, img_dir=root / "docs" / "img", img_prefix=where["prefix"], echo=lambda *_: None)
    imgs = "\n\n".join(f"![N = {n}](img/{p.name})" for n, p in sorted(rep["curves"].items()))
    budgets = ", ".join(f"N={n}: {b:,}" for n, b in settings["budgets"].items() if int(n) in settings["ns"])
    total = sum(float(r["run_seconds"]) for r in rep["rows"])
    block = (
        f"{start}\n<!-- written by `fleet-marl compare --report --docs`; edit the text around it, not this block -->\n\n"
        f"Reproduce: `{cmd}`, then `fleet-marl compare --engine rllib{out_arg} --report --docs`. {len(rep['rows'])} runs; env-step budget per run {budgets}; "
        f"{settings['seeds']} seeds; {settings['episodes']} grader episodes per run; arbiter `{settings['mechanism']}`; "
        f"sharing `{settings['sharing']}`. The runs took {total / 3600:.2f} CPU-hours, {wall_hours(rep['rows']):.2f} hours of "
        f"wall time from the first start to the last finish. The data: "
        f"[`{where['data']}/`]({where['data'].removeprefix('docs/')}/).\n\n"
        f"#### Summary (mean ± 95% interval across seeds)\n\n{rep['table']}\n\n"
        f"#### The prediction, paired by seed\n\nMean difference ± 95% interval; in brackets, the seeds where the first "
        f"scheme is larger.\n\n{rep['prediction']}\n\n#### Learning curves\n\n{imgs}\n\n"
        f"#### Score against N\n\n![score against N](img/{rep['scaling'].name})\n{end}"
    )
    path = root / DOC
    store.write_block(path, start, end, block)
    echo(f"wrote {path}, {data}/ and docs/img/{where['prefix']}*.png")
    return path


__all__ = [
    "COMPARISONS",
    "DOC",
    "END",
    "OTHERS",
    "START",
    "SUMMARY",
    "command",
    "docs_targets",
    "mean_ci",
    "paired",
    "plot_curves",
    "plot_scaling",
    "prediction_table",
    "report",
    "summary_table",
    "wall_hours",
    "write_docs",
]

"""The study's plots (PNG; matplotlib is imported only when plotting), of
:mod:`fleet_marl.studies.credit.torchrl_tables`' rows: :func:`plot_curves` (score against agent
steps, a panel per N, per arbiter), :func:`plot_scaling` (the final score against N, per
arbiter), :func:`plot_sharing` (the sharing schemes' scores). Every band and error bar is the
mean and 95% interval across seeds. (The first study's plots are committed in ``docs/img/``.)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fleet_marl.studies.credit.benchmarl_runs import VALUE_ARMS
from fleet_marl.studies.credit.stats import mean_ci
from fleet_marl.studies.credit.torchrl_design import ARMS, SHARING_ARMS
from fleet_marl.studies.credit.torchrl_tables import arms_of, select, settings_of, value


def _plt():
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    return plt


def _color(arm: str) -> str:
    """One colour per arm in every panel and plot (an arm missing from a panel moves no other)."""
    order = [*ARMS, *VALUE_ARMS]
    return f"C{order.index(arm) if arm in order else list(SHARING_ARMS).index(arm)}"


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
    for ax, n in zip(axes.flat, ns, strict=False):  # the grid may have more panels than N
        for arm in arms_of("scaling", cs):
            pts = [c for c in cs if int(c["n"]) == n and c["arm"] == arm]
            its = sorted({int(c["iteration"]) for c in pts})
            if not its:
                continue
            xs = [np.mean([value(c, "agent_steps") for c in pts if int(c["iteration"]) == it]) / 1e3 for it in its]
            _band(ax, xs, [[value(c, "score") for c in pts if int(c["iteration"]) == it] for it in its], arm, color=_color(arm))
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
    rs = select(rows, "scaling", setting)
    if not rs:
        return None
    plt = _plt()
    ns = sorted({int(r["n"]) for r in rs})
    arms = arms_of("scaling", rs)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for j, arm in enumerate(arms):
        xs, ms, lo, hi = [], [], [], []
        for i, n in enumerate(ns):
            v = [value(r, "score") for r in rs if int(r["n"]) == n and r["arm"] == arm]
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
    rs = select(rows, "sharing")
    if not rs:
        return None
    plt = _plt()
    tasks = settings_of(rows, "sharing")
    arms = arms_of("sharing", rs)
    fig, ax = plt.subplots(figsize=(7, 4))
    w = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        ms, hs = [], []
        for t in tasks:
            m, h = mean_ci([value(r, "score") for r in rs if r["setting"] == t and r["arm"] == arm] or [float("nan")])
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


__all__ = ["plot_curves", "plot_scaling", "plot_sharing"]

"""What a training run's folder shows, for every training engine (``fleet_marl.rllib.train`` and
``fleet_marl.torchrl.train``): the learning curve and the final table.

:func:`config_path` finds a run config (``--config NAME``); :func:`learning_curve` draws ``learning_curve.png`` from the rows of ``metrics.csv``;
:func:`final_evaluation` grades the trained policy and every reference policy on the same seeds.
No training framework is imported here; matplotlib only when a curve is drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from fleet_marl.evaluation.baselines import checkout, table
from fleet_marl.evaluation.score import Evaluation, evaluate
from fleet_marl.policies import POLICIES


def config_path(name: str) -> Path:
    """A training ``--config`` as given, or ``experiments/configs/<name>.yaml`` of the checkout."""
    p = Path(name)
    if p.is_file() or p.suffix in (".yaml", ".yml") or "/" in name:
        return p
    root = checkout()
    cand = (root / "experiments" / "configs" / f"{name}.yaml") if root else p
    return cand if cand.is_file() else p


def learning_curve(rows: list[dict], path: Path, title: str, references: dict[str, float] | None = None, x: str = "env_steps") -> Path:
    """Training welfare per iteration (``welfare``) and the grader's evaluations
    (``eval_welfare``) against ``x``, with the references' welfare as horizontal lines."""
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    def series(name):
        xs, ys = [], []
        for r in rows:
            if r.get(name) not in ("", None) and r.get(x) not in ("", None):
                xs.append(float(r[x]))
                ys.append(float(r[name]))
        return xs, ys

    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs, ys = series("welfare")
    ax.plot(xs, ys, color="tab:blue", label="PPO, training episodes (sampled actions)")
    xs, ys = series("eval_welfare")
    if xs:
        ax.plot(xs, ys, "o-", color="tab:orange", label="PPO, grader (greedy, seeds 0..)")
    colors = iter(["tab:gray", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"])
    for name, w in (references or {}).items():
        ax.axhline(w, ls="--", lw=1, color=next(colors, "k"), label=f"{name} ({w:.0f})")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel("episode welfare")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def final_evaluation(task: str, overrides: dict, policy: Callable[[Any], Any], label: str, episodes: int,
                     progress: bool = True) -> tuple[list[Evaluation], str]:
    """The trained ``policy`` (a factory ``env -> policy``) and every reference policy on
    ``task`` with ``overrides``, seeds ``0 .. episodes - 1``: (evaluations, markdown table)."""
    names = list(POLICIES)
    bar = tqdm(total=1 + len(names), desc="final evaluation", unit="policy", file=sys.stderr, leave=False) if progress else None
    ev = evaluate(task, policy, episodes=episodes, seed=0, overrides=overrides, progress=False)
    ev.policy = label
    evals = [ev]
    if bar is not None:
        bar.update(1)
    for name in names:
        evals.append(evaluate(task, name, episodes=episodes, seed=0, overrides=overrides, progress=False))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return evals, table(evals)


__all__ = ["config_path", "final_evaluation", "learning_curve"]

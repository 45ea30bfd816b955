"""The baseline table: every reference policy on every task (``make baselines``).

For each task and policy: the mean and standard deviation of the episode welfare over the
seeds, the grader's score and the mean Jain index. The table is written to
``docs/results.md`` and into the README, between the markers ``<!-- baselines:start -->``
and ``<!-- baselines:end -->``.
"""

from __future__ import annotations

import platform
import re
import sys
from pathlib import Path

from fleet_marl.grader import Evaluation, evaluate

START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"


def run(tasks, policies, episodes: int = 10, seed: int = 0, progress: bool = True) -> list[Evaluation]:
    """Evaluate every policy on every task (the references come from the grader's cache)."""
    out = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks) * len(policies), desc="baselines", unit="eval", file=sys.stderr)
    for task in tasks:
        for name in policies:
            if bar is not None:
                bar.set_postfix_str(f"{task}/{name}")
            out.append(evaluate(task, name, episodes=episodes, seed=seed, progress=False))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return out


def table(evals: list[Evaluation]) -> str:
    """The markdown table."""
    lines = [
        "| task | policy | welfare (mean ± std) | score | Jain | starvation events | degenerate |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for ev in evals:
        s = ev.summary()
        lines.append(
            f"| {ev.task} | {ev.policy} | {s['welfare_mean']:.1f} ± {s['welfare_std']:.1f} | {s['score']:.2f} | {s['jain_mean']:.2f} "
            f"| {s['starvation_events']} | {s['degenerate']} |"
        )
    return "\n".join(lines)


def block(evals: list[Evaluation], episodes: int, seed: int, extra_args: str = "") -> str:
    """The table with the command and the seeds that reproduce it."""
    seeds = f"{seed}..{seed + episodes - 1}"
    cmd = f"fleet-marl baselines --episodes {episodes} --seed {seed}{extra_args}"
    how = f"`{cmd}`" if extra_args else f"`make baselines` (`{cmd}`)"
    return (
        f"{START}\n"
        f"Episode welfare over seeds {seeds} ({episodes} episodes per cell; ± is the standard deviation over episodes), "
        f"score = (W − W_random) / (W_planner − W_random) clipped to [0, 1], Jain's index of normalized service (mean over "
        f"episodes); starvation events and degenerate tenant-rounds are summed over tenants and episodes. "
        f"Reproduce with {how}; Python {platform.python_version()}.\n\n"
        f"{table(evals)}\n{END}"
    )


def checkout() -> Path | None:
    """The fleet_marl source checkout this package runs from (None for an installed wheel)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "README.md").is_file() else None


def write(path: Path, text: str) -> bool:
    """Replace the marked block in ``path`` (or append it); True when the file changed."""
    old = path.read_text() if path.is_file() else ""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _: text, old) if pattern.search(old) else (old.rstrip() + "\n\n" + text + "\n" if old else text + "\n")
    if new != old:
        path.write_text(new)
        return True
    return False


__all__ = ["block", "run", "table", "write"]

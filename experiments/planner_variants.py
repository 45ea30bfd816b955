"""The planner's options compared, and what one plan costs (the tables in docs/policies.md).

    .venv/bin/python experiments/planner_variants.py                 # variants on tiny, easy, medium, trace, seeds 0-2
    .venv/bin/python experiments/planner_variants.py --cost          # ms and kernel rows per plan on easy and hard

Welfare is the episode welfare (mean over seeds) of ``policies.make("planner", env, **options)``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fleet_marl
from fleet_marl import policies
from fleet_marl.evaluation import run_episode

VARIANTS = {
    "default": {},
    "warm_start=True": {"warm_start": True},
    "horizon=3": {"horizon": 3},
    "horizon=2, passes=3": {"horizon": 2, "passes": 3},
}


def variants(tasks, seeds) -> None:
    print("| planner variant | " + " | ".join(tasks) + " |")
    print("|---|" + "---:|" * len(tasks))
    for name, opts in VARIANTS.items():
        row = []
        for task in tasks:
            env = fleet_marl.parallel_env(task=task, compute_all=False)
            pol = policies.make("planner", env, **opts)
            row.append(np.mean([run_episode(env, pol, s, "planner").welfare for s in seeds]))
        print(f"| {name} | " + " | ".join(f"{w:.1f}" for w in row) + " |", flush=True)


def cost(tasks, rounds: int = 20) -> None:
    for task in tasks:
        env = fleet_marl.parallel_env(task=task, compute_all=False)
        pl = policies.make("planner", env)
        obs, infos = env.reset(seed=0)
        pl.reset(0)
        ms, rows = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            acts = pl.act(obs, infos)
            ms.append((time.perf_counter() - t) * 1e3)
            rows.append(pl.rows)
            obs, _, _, _, infos = env.step(acts)
        print(
            f"{task}: {np.median(ms):.1f} ms per plan (median of {rounds} rounds), {int(np.median(rows))} kernel rows, {env.kernel_static.T} tenants"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="", help="comma-separated tasks (default: tiny,easy,medium,trace; easy,hard with --cost)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per cell (default 3)")
    p.add_argument("--cost", action="store_true", help="time one plan instead of comparing variants")
    a = p.parse_args()
    tasks = [t for t in a.tasks.split(",") if t] or (["easy", "hard"] if a.cost else ["tiny", "easy", "medium", "trace"])
    cost(tasks) if a.cost else variants(tasks, range(a.seeds))

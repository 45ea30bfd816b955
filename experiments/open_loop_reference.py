"""The open-loop baseline against the hindsight reference, seed by seed, and what each costs.

How to run:  taskset -c 0 .venv/bin/python experiments/open_loop_reference.py --tasks tiny,easy,trace,trace_code --seeds 0-9
             (``--tasks``, ``--seeds`` as ``fleet-marl open-loop`` takes them; tiny's 100 graded seeds:
             ``--tasks tiny --seeds 0-99``; nothing is read from or written to the grader's cache)
             taskset -c 0 .venv/bin/python experiments/open_loop_reference.py --tasks tiny,easy,trace --levels
             (the baseline's search at levels (1,), (1, 4) and (1, 4, 16) instead: its welfare on its own
             seeds and on the graded ones, and its CPU seconds)
What it prints: per task, the ``open_loop`` baseline's search on its seeds
(``evaluation.reference.OPEN_LOOP_SEEDS``, not the graded ones): its mean welfare there, the
episodes it played, whether its budget stopped it, and its CPU seconds. Then per graded seed:
the hindsight policy's best episode over horizons 1, 2, 3; the open-loop search on that seed
(from that episode's actions, each tenant's most frequent one, and the baseline's table); the
reference (the better of the two); the ``open_loop`` baseline's and the planner's welfare on the
seed; the CPU seconds of the horizons and of the search. Last, per task: the means, the
reference's paired difference to the planner and to the baseline, the horizons' and the
baseline's to the planner (mean and 95 % interval, 1.96 standard errors), the seeds on which the reference is below the baseline (there must be
none), and the mean CPU seconds per seed of each part.

Why: docs/policies.md, "The hindsight reference" and "The open-loop baseline" quote these
figures; the grader's reference is this per-seed best (``evaluation.reference.hindsight_episode``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fleet_marl.evaluation.open_loop import parse_seeds
from fleet_marl.evaluation.reference import (
    OPEN_LOOP_BUDGET,
    OPEN_LOOP_SEEDS,
    OPEN_LOOP_STARTS,
    OPEN_LOOP_SWEEPS,
    hindsight_episode,
    open_loop_starts,
    open_loop_table,
)
from fleet_marl.evaluation.runner import make_env, run_episode
from fleet_marl.policies import make
from fleet_marl.policies.open_loop import OpenLoopPolicy, search


def interval(x: np.ndarray) -> str:
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
    return f"{x.mean():+.2f} ± {half:.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="tiny,easy,trace,trace_code")
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--levels", action="store_true", help="compare the baseline's search at three sets of levels")
    a = p.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    if a.levels:
        return compare_levels(a.tasks.split(","), seeds)
    for task in a.tasks.split(","):
        env = make_env(task)
        t0 = time.process_time()
        table = open_loop_table(env.config, cache=False)
        base_s = time.process_time() - t0
        base_train = [run_episode(env, OpenLoopPolicy(env, table), s).welfare for s in OPEN_LOOP_SEEDS]
        print(
            f"{task}: open_loop baseline searched on seeds {OPEN_LOOP_SEEDS[0]}..{OPEN_LOOP_SEEDS[-1]}: welfare {np.mean(base_train):.2f} "
            f"there, {base_s:.1f} CPU s"
        )
        print(
            f"  {'seed':>5} {'horizons':>9} {'searched':>9} {'reference':>9} {'open_loop':>9} {'planner':>9} {'cpu h s':>8} {'cpu s s':>8}"
        )
        rows = []
        planner = make("planner", env)
        for s in seeds:
            rep: dict = {}
            ref = hindsight_episode(env, s, table, rep).welfare
            ol = run_episode(env, OpenLoopPolicy(env, table), s).welfare
            pl = run_episode(env, planner, s).welfare
            rows.append((rep["horizons"], rep["searched"], ref, ol, pl, rep["horizons_seconds"], rep["search_seconds"]))
            print(
                f"  {s:>5} {rep['horizons']:>9.2f} {rep['searched']:>9.2f} {ref:>9.2f} {ol:>9.2f} {pl:>9.2f} "
                f"{rep['horizons_seconds']:>8.2f} {rep['search_seconds']:>8.2f}" + ("  (budget hit)" if rep["exhausted"] else "")
            )
        r = np.array(rows)
        below = [s for s, row in zip(seeds, r, strict=True) if row[2] < row[3]]
        print(
            f"  {task} over {len(seeds)} seeds: horizons {r[:, 0].mean():.2f}, searched {r[:, 1].mean():.2f}, reference {r[:, 2].mean():.2f}, "
            f"open_loop {r[:, 3].mean():.2f}, planner {r[:, 4].mean():.2f}; reference - planner {interval(r[:, 2] - r[:, 4])}, "
            f"reference - open_loop {interval(r[:, 2] - r[:, 3])}, horizons - planner {interval(r[:, 0] - r[:, 4])}, "
            f"open_loop - planner {interval(r[:, 3] - r[:, 4])}; "
            f"seeds with the reference below open_loop: {below or 'none'}; CPU s per seed: horizons {r[:, 5].mean():.2f}, "
            f"search {r[:, 6].mean():.2f}"
        )
    return 0


def compare_levels(tasks: list[str], seeds: list[int]) -> int:
    for task in tasks:
        env = make_env(task)
        t0 = time.process_time()
        starts = open_loop_starts(env.config)
        print(
            f"{task}: the starts ({', '.join(OPEN_LOOP_STARTS)} on seeds {OPEN_LOOP_SEEDS[0]}..{OPEN_LOOP_SEEDS[-1]}): {time.process_time() - t0:.1f} CPU s"
        )
        for levels in ((1,), (1, 4), (1, 4, 16)):
            t0 = time.process_time()
            found = search(env.config, OPEN_LOOP_SEEDS, starts=starts, levels=levels, sweeps=OPEN_LOOP_SWEEPS, budget=OPEN_LOOP_BUDGET)
            cpu = time.process_time() - t0
            graded = np.mean([run_episode(env, OpenLoopPolicy(env, found.table), s).welfare for s in seeds])
            print(
                f"  levels {levels}: welfare on its seeds {found.start_welfare:.2f} -> {found.mean:.2f}, on seeds {seeds[0]}..{seeds[-1]} "
                f"{graded:.2f}; {found.episodes} episodes, {cpu:.1f} CPU s" + (" (budget hit)" if found.exhausted else "")
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``open_loop`` baseline on suite tasks: its search on the train scenarios, what it costs, and
its scores graded like a learned run.

How to run:  taskset -c 0 .venv/bin/python experiments/suite_open_loop.py --tasks power_n8,proportional_n8,scarce_n8 --save
             (``--episodes`` scenarios per split, default 10; ``--save`` writes docs/data/suite_open_loop.json;
             the grader's cache is used as the grader uses it, so run it on a fresh ``FLEET_MARL_CACHE`` to
             time the search)
What it prints: per task, the search (``fleet_marl.evaluation.suite_open_loop``: one table on train
scenarios 0..9, each from its train env seed) -- its CPU and wall seconds, episodes, whether the
budget stopped it, the mean welfare of its best start and of its table over those scenarios --
then the baseline's row (``fleet_marl.studies.credit.suite_baselines.open_loop_row``): its score
on held-out scenarios 0..episodes-1 with the 95% half-width across them, and on train scenarios
0..episodes-1, and the CPU seconds of that grading (the random and planner references included
when not cached).

Why: docs/policies.md ("The open-loop baseline") and docs/suite.md say what the baseline is
searched on for a suite task and what it costs; the suite study's baseline rows are these.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from fleet_marl.evaluation.suite_open_loop import SCENARIOS, suite_open_loop_entry
from fleet_marl.studies.credit.suite_baselines import open_loop_row

OUT = Path(__file__).resolve().parents[1] / "docs" / "data" / "suite_open_loop.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="power_n8,proportional_n8,scarce_n8")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--save", action="store_true", help=f"write {OUT.relative_to(OUT.parents[2])}")
    a = p.parse_args(argv)
    rows = []
    for task in a.tasks.split(","):
        t0, w0 = time.process_time(), time.perf_counter()
        entry = suite_open_loop_entry(task)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        print(
            f"{task}: searched on train scenarios 0..{SCENARIOS - 1}: {cpu:.1f} CPU s ({wall:.1f} s wall), {entry['episodes']} episodes, "
            f"exhausted {entry['exhausted']}; mean welfare {entry['start_welfare']:.2f} at the best start, {np.mean(entry['welfare']):.2f} after",
            flush=True,
        )
        t0 = time.process_time()
        row = open_loop_row(task, episodes=a.episodes)
        grade = time.process_time() - t0
        print(
            f"{task}: held-out score {row['score']:.3f} ± {row['score_h']:.3f} ({a.episodes} scenarios), train score {row['train_score']:.3f}; "
            f"grading {grade:.1f} CPU s",
            flush=True,
        )
        rows.append(
            {
                **row,
                "search_cpu_s": round(cpu, 1),
                "search_wall_s": round(wall, 1),
                "search_episodes": entry["episodes"],
                "exhausted": entry["exhausted"],
                "search_scenarios": SCENARIOS,
                "start_welfare": entry["start_welfare"],
                "train_welfare": float(np.mean(entry["welfare"])),
                "grading_cpu_s": round(grade, 1),
            }
        )
    if a.save:
        OUT.write_text(json.dumps({"command": "experiments/suite_open_loop.py --save", "rows": rows}, indent=1) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Write experiments/configs/<task>_<sharing>_<reward scheme>.yaml: every sharing scheme x every
reward scheme on each task of the registry (``fleet_marl.tasks.TASKS``) that has a training
length in :data:`ITERATIONS` -- easy, medium and hard (72 files) -- for
``fleet-marl train --config``; and experiments/configs/<task>_15min.yaml (:data:`TIMED`), the
RLlib runs of the learned rows (docs/results.md): 15 minutes of training each, the settings
that passed the planner there.

    python experiments/make_configs.py           # (re)write them
    python experiments/make_configs.py --check   # exit 1 if a file differs from what this writes

``tests/test_rllib_config.py`` checks that the files match this script and that each loads.
Only the number of iterations (of 2,000 env steps each) differs by task; the easy configs use
the default run's 36 iterations, so ``easy_shared_mixed`` is ``make train``'s run. A task
registered without an entry in ``ITERATIONS`` gets no configs (tiny and trace have none).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from fleet_marl.config import REWARD_SCHEMES
from fleet_marl.rllib.sharing import SHARING
from fleet_marl.tasks import TASKS

#: The training choice: iterations of 2,000 env steps per task (timings on this 2-core machine:
#: docs/training.md). Only these tasks get configs.
ITERATIONS = {"easy": 36, "medium": 60, "hard": 80}
HERE = Path(__file__).resolve().parent / "configs"
#: The tuned 15-minute runs (RLlib's learned rows), by task: TorchRL's recipe of its learned rows
#: carried over (a shared network of 64 x 64, lr 1e-3, its reward scheme, gamma and entropy),
#: with RLlib's batch of 4,000 env steps (40 clusters of 100 rounds) and 4 passes over it in
#: minibatches of ``minibatch_size`` tenant-steps (RLlib counts a module's rows): 1,000 on easy
#: (16 a pass), 4,000 on medium (8 a pass: 1,000 learned more slowly there in the same minutes,
#: docs/training.md); ``max_minutes`` stops them, ``iterations`` is only an upper bound.
TIMED = {
    "easy": {"reward_scheme": "local", "gamma": 0.95, "entropy_coeff": 0.01, "minibatch_size": 1000},
    "medium": {"reward_scheme": "difference", "gamma": 0.99, "entropy_coeff": 0.001, "minibatch_size": 4000},
}


def config(task: str, sharing: str, scheme: str) -> dict:
    return {"task": task, "sharing": sharing, "reward_scheme": scheme, "iterations": ITERATIONS[task], "seed": 0}


def text(task: str, sharing: str, scheme: str) -> str:
    head = (
        f"# PPO on {task}: sharing {sharing}, reward scheme {scheme}. Written by experiments/make_configs.py;\n"
        f"# run with: fleet-marl train --config experiments/configs/{task}_{sharing}_{scheme}.yaml\n"
        "# Any TrainConfig field can be added (docs/training.md); the rest keep their defaults.\n"
    )
    return head + yaml.safe_dump(config(task, sharing, scheme), sort_keys=False)


def timed(task: str) -> dict:
    """The 15-minute RLlib run of ``task`` (:data:`TIMED`)."""
    return {
        "task": task,
        "sharing": "shared",
        **TIMED[task],
        "hidden": [64, 64],
        "lr": 0.001,
        "lambda": 0.95,
        "train_batch_size": 4000,
        "num_epochs": 4,
        "iterations": 2000,
        "max_minutes": 15.0,
        "seed": 0,
        "eval_interval": 50,
        "checkpoint_interval": 50,
        "name": f"{task}-rllib-15min",
    }


def timed_text(task: str) -> str:
    head = (
        f"# RLlib's 15-minute PPO run on {task}, the learned row of docs/results.md. Written by experiments/make_configs.py;\n"
        f"# run with: fleet-marl train --config {task}_15min   (max_minutes stops it; iterations is only an upper bound)\n"
    )
    return head + yaml.safe_dump(timed(task), sort_keys=False)


def trained_tasks() -> list[str]:
    """The registry's tasks that have a training length, in registry order."""
    return [t for t in list(TASKS) if t in ITERATIONS]


def files() -> dict[Path, str]:
    grid = {HERE / f"{t}_{s}_{r}.yaml": text(t, s, r) for t in trained_tasks() for s in SHARING for r in REWARD_SCHEMES}
    return {**grid, **{HERE / f"{t}_15min.yaml": timed_text(t) for t in TIMED}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="only compare")
    args = p.parse_args(argv)
    stale = [f for f, t in files().items() if not f.is_file() or f.read_text() != t]
    if args.check:
        for f in stale:
            print(f"stale: {f}", file=sys.stderr)
        return 1 if stale else 0
    HERE.mkdir(exist_ok=True)
    for f, t in files().items():
        f.write_text(t)
    print(f"wrote {len(files())} configs to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

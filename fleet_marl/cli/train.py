"""``fleet-marl train``: PPO tenants on one of two engines (``--engine``).

``torchrl`` (:mod:`fleet_marl.torchrl.command`): IPPO/MAPPO on TorchRL's collector,
GAE and clipped PPO over the vector env, in this process. ``rllib``
(:mod:`fleet_marl.rllib.command`): RLlib's PPO, the route to a Ray cluster. Both write the same
run folder (checkpoint, ``metrics.csv``, TensorBoard, learning curve, the grader's table) and
both runs grade with ``fleet-marl evaluate --policy RUN``. The options are the RLlib engine's
(unchanged) plus ``--engine``, ``--max-minutes`` (a cap on wall time, either engine) and the torchrl
engine's own (``--num-envs``, ``--collector``, ``--collectors``, ``--device``); the Ray-only ones are
refused with torchrl, the torchrl-only ones with rllib. The engines are those
of the registry (:data:`fleet_marl.training.engines.ENGINES`: each one's command module, named
as a string); without ``--engine``, :func:`fleet_marl.training.engines.engine_of` picks one.
``--docs RUN`` saves finished runs as the learned rows' data and publishes the docs
(:mod:`fleet_marl.studies.publish`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from fleet_marl.errors import UsageError
from fleet_marl.studies import learned
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.studies.store import StudyError
from fleet_marl.training.engines import DEFAULT, ENGINES, engine_of

DESCRIPTION = (
    "Train PPO tenants. --engine torchrl (the default): IPPO/MAPPO on TorchRL over the vector env, in this process. "
    "--engine rllib: RLlib's PPO, the route to a Ray cluster (chosen by itself for an RLlib --config or run, "
    "--address or --num-env-runners). Both write the same run folder; grade it with 'fleet-marl evaluate --policy RUN'."
)

EXAMPLES = """examples:
  fleet-marl train                                   # the default run (make train): IPPO with TorchRL on easy, then its grading
  fleet-marl train --task tiny --iterations 3 --seed 3  # twice: the same metrics.csv and checkpoint, bit for bit (collector sync)
  fleet-marl train --collector async                 # faster on 2 cores, not reproducible
  fleet-marl train --collectors 4 --device cuda      # collect in 4 processes, learn on the GPU
  fleet-marl train --iterations 10 --final-episodes 3   # a quick look
  fleet-marl train --task medium --sharing mappo --reward-scheme difference
  fleet-marl train --config my_run.yaml                 # a YAML of TorchRLTrainConfig keys with 'engine: torchrl'
  fleet-marl train --resume runs/train/easy-shared-local-torchrl --iterations 2000   # on to 2000 in all, as if never stopped
  fleet-marl train --engine rllib                    # RLlib's PPO on easy
  fleet-marl train --config easy_15min --max-minutes 15   # RLlib's 15-minute run of the learned rows (the cap works for both engines)
  fleet-marl train --docs runs/train/trace-shared-difference-torchrl   # publish a graded run as the task's learned row
  fleet-marl train --config medium_per_kind_difference   # an RLlib config (experiments/configs/): the rllib engine
  fleet-marl train --config experiments/torchrl_configs/medium_seq_15min.yaml  # env: {protocol: sequential}: one policy call per turn
  fleet-marl train --engine rllib --config seq.yaml  # env: {protocol: sequential}: RLlib's turn-based episodes
  RAY_AUTH_MODE=disabled ray start --head && fleet-marl train --engine rllib --address auto --num-env-runners 2

Precedence: the defaults, then --config (or, with --resume, the run's own config), then the
flags. Outputs go to <out>/<name>/ (default runs/train/<task>-<sharing>-<reward scheme>[-torchrl]/):
checkpoint/, metrics.csv, tb/ (tensorboard --logdir runs/train), learning_curve.png and
results.md. See docs/training.md.
"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument(
        "--engine",
        default=None,
        choices=tuple(ENGINES),
        help="torchrl (fast, one process) or rllib (Ray; clusters). Default: the engine of --config or --resume "
        "(an RLlib config or run: rllib), rllib with --address or --num-env-runners, else torchrl",
    )
    t.add_argument(
        "--docs",
        nargs="+",
        default=None,
        metavar="RUN",
        help="train nothing: publish finished runs (their graded results.json) as the learned rows of README.md, "
        "docs/results.md and docs/training.md, with their data in docs/data/learned/<task>.json (fleet_marl.studies.learned)",
    )
    for name in reversed(ENGINES):  # each engine's own options (the default engine's last, as --help has always listed them)
        command(name).add_arguments(t)


def command(engine: str) -> ModuleType:
    """The command module of ``engine`` (from the registry; none imports its framework at import time)."""
    return importlib.import_module(ENGINES[engine].command)


def publish_runs(runs: list[str]) -> int:
    """``--docs RUN ...``: save the runs' graded results as the learned rows' data, then publish the docs."""
    try:
        root = checkout_root("--docs")
        learned.save(runs, root, echo=lambda m: print(m, file=sys.stderr))
        publish(root, echo=lambda m: print(m, file=sys.stderr))
    except (StudyError, UsageError, KeyError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl train --help' for the options", file=sys.stderr)
        return 2
    return 0


def run(args) -> int:
    if args.docs:
        return publish_runs(args.docs)
    args.engine = engine_of(args)
    if args.engine != DEFAULT:
        for flag in ENGINES[DEFAULT].only:
            if getattr(args, flag) is not None:
                print(
                    f"error: --{flag.replace('_', '-')} is an option of --engine {DEFAULT}; RLlib's batch and workers are set in its "
                    "--config (train_batch_size, num_envs_per_env_runner, num_env_runners) or with --num-env-runners and --address",
                    file=sys.stderr,
                )
                return 2
    return int(command(args.engine).run(args) or 0)


__all__ = ["DESCRIPTION", "EXAMPLES", "add_arguments", "command", "publish_runs", "run"]

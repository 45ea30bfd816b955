"""``fleet-marl train``: PPO tenants on one of two engines (``--engine``).

``torchrl`` (:mod:`fleet_marl.torchrl.command`): IPPO/MAPPO on TorchRL's collector,
GAE and clipped PPO over the vector env, in this process. ``rllib``
(:mod:`fleet_marl.rllib.command`): RLlib's PPO, the route to a Ray cluster. Both write the same
run folder (checkpoint, ``metrics.csv``, TensorBoard, learning curve, the grader's table) and
both runs grade with ``fleet-marl evaluate --policy RUN``. The options are the RLlib engine's
(unchanged) plus ``--engine`` and the torchrl engine's own (``--num-envs``, ``--max-minutes``,
``--collector``, ``--collectors``, ``--device``); the Ray-only ones are refused with torchrl. Without ``--engine``, :func:`engine_of` picks it.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from fleet_marl.evaluation.baselines import checkout
from fleet_marl.rllib import command as rllib_command
from fleet_marl.rllib.loader import checkpoint_folder as rllib_run
from fleet_marl.studies import learned
from fleet_marl.studies.store import StudyError
from fleet_marl.torchrl import command as torchrl_command  # imports no torch
from fleet_marl.torchrl.loader import checkpoint_folder as torchrl_run
from fleet_marl.training import config_path

DESCRIPTION = (
    "Train PPO tenants. --engine torchrl (the default): IPPO/MAPPO on TorchRL over the vector env, in this process. "
    "--engine rllib: RLlib's PPO, the route to a Ray cluster (chosen by itself for an RLlib --config or run, "
    "--address or --num-env-runners). Both write the same run folder; grade it with 'fleet-marl evaluate --policy RUN'."
)

#: The engines, the default first.
ENGINES = ("torchrl", "rllib")

EXAMPLES = """examples:
  fleet-marl train                                   # the default run (make train): IPPO with TorchRL on easy, about 6 min + grading
  fleet-marl train --task tiny --iterations 3 --seed 3  # twice: the same metrics.csv and checkpoint, bit for bit (collector sync)
  fleet-marl train --collector async                 # faster on 2 cores, not reproducible
  fleet-marl train --collectors 4 --device cuda      # collect in 4 processes, learn on the GPU
  fleet-marl train --iterations 10 --final-episodes 3   # a quick look
  fleet-marl train --task medium --sharing mappo --reward-scheme difference
  fleet-marl train --config my_run.yaml                 # a YAML of TorchRLTrainConfig keys with 'engine: torchrl'
  fleet-marl train --resume runs/train/easy-shared-local-torchrl --iterations 2000   # on to 2000 in all, as if never stopped
  fleet-marl train --engine rllib                    # RLlib's PPO on easy (about 13 min on 2 cores)
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
        choices=ENGINES,
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
    rllib_command.add_arguments(t)
    torchrl_command.add_arguments(t)


def engine_of(args) -> str:
    """The engine: ``--engine``, else the one of ``--config`` (its ``engine`` key; RLlib's
    configs have none) or of the run ``--resume`` names, else rllib when a Ray-only option is
    given, else torchrl."""
    if args.engine:
        return args.engine
    if args.address is not None or args.num_env_runners is not None:
        return "rllib"
    if args.config:
        p = config_path(args.config)
        try:
            data = yaml.safe_load(p.read_text()) if p.is_file() else None
        except yaml.YAMLError:
            data = None  # the engine's own parser reports it
        return data.get("engine", "rllib") if isinstance(data, dict) else ENGINES[0]
    if args.resume and torchrl_run(args.resume) is None and rllib_run(args.resume) is not None:
        return "rllib"
    return ENGINES[0]


def publish(runs: list[str]) -> int:
    """``--docs RUN ...``: the runs' graded results into the checkout's learned rows."""
    root = checkout()
    if root is None:
        print("error: --docs: this fleet_marl is not a source checkout (no README.md and docs/ to write)", file=sys.stderr)
        return 2
    try:
        learned.publish(runs, root, echo=lambda m: print(m, file=sys.stderr))
    except (StudyError, KeyError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl train --help' for the options", file=sys.stderr)
        return 2
    return 0


def run(args) -> int:
    if args.docs:
        return publish(args.docs)
    args.engine = engine_of(args)
    if args.engine == "torchrl":
        return torchrl_command.run(args)
    for flag in torchrl_command.TORCHRL_ONLY:
        if getattr(args, flag) is not None:
            print(
                f"error: --{flag.replace('_', '-')} is an option of --engine torchrl; RLlib's batch, budget and workers are set in its "
                "--config (train_batch_size, iterations, num_env_runners) or with --num-env-runners and --address",
                file=sys.stderr,
            )
            return 2
    return rllib_command.run(args)


__all__ = ["DESCRIPTION", "ENGINES", "EXAMPLES", "add_arguments", "publish", "run"]

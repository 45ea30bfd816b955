"""``fleet-marl train``: PPO tenants on one of two engines (``--engine``).

``torchrl`` (the default; :mod:`fleet_marl.torchrl.command`): IPPO/MAPPO on TorchRL's collector,
GAE and clipped PPO over the vector env, in this process. ``rllib``
(:mod:`fleet_marl.rllib.command`): RLlib's PPO, the route to a Ray cluster. Both write the same
run folder (checkpoint, ``metrics.csv``, TensorBoard, learning curve, the grader's table) and
both runs grade with ``fleet-marl evaluate --policy RUN``. The options are the RLlib engine's
(unchanged) plus ``--engine`` and ``--num-envs``; the Ray-only ones are refused with torchrl.
"""

from __future__ import annotations

import argparse
import sys

from fleet_marl.rllib import command as rllib_command

DESCRIPTION = ("Train PPO tenants. --engine torchrl (default): IPPO/MAPPO on TorchRL over the vector env, in this process. "
               "--engine rllib: RLlib's PPO, the route to a Ray cluster. Both write the same run folder; grade it with "
               "'fleet-marl evaluate --policy RUN'.")

#: The engines, the default first.
ENGINES = ("torchrl", "rllib")

EXAMPLES = """examples:
  fleet-marl train                                   # the default run (make train): IPPO with TorchRL on easy, about 6 min
  fleet-marl train --iterations 10 --final-episodes 3   # a quick look
  fleet-marl train --task medium --sharing mappo --reward-scheme difference
  fleet-marl train --engine torchrl --config experiments/configs/easy_torchrl.yaml
  fleet-marl train --resume runs/train/easy-shared-mixed-torchrl --iterations 400
  fleet-marl train --engine rllib                    # RLlib's PPO on easy (about 13 min on 2 cores)
  fleet-marl train --engine rllib --config medium_per_kind_difference
  RAY_AUTH_MODE=disabled ray start --head && fleet-marl train --engine rllib --address auto --num-env-runners 2

Precedence: the defaults, then --config (or, with --resume, the run's own config), then the
flags. Outputs go to <out>/<name>/ (default runs/train/<task>-<sharing>-<reward scheme>[-torchrl]/):
checkpoint/, metrics.csv, tb/ (tensorboard --logdir runs/train), learning_curve.png and
results.md. See docs/training.md.
"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("--engine", default=ENGINES[0], choices=ENGINES, help="torchrl (default: fast, one process) or rllib (Ray; clusters)")
    rllib_command.add_arguments(t)
    t.add_argument("--num-envs", type=int, default=None, metavar="B", help="torchrl: clusters stepped together by the vector env (default 256)")
    t.add_argument("--max-minutes", type=float, default=None, metavar="M", help="torchrl: stop after the iteration that passes M minutes of training")


def run(args) -> int:
    if args.engine == "torchrl":
        from fleet_marl.torchrl import command  # imports no torch

        return command.run(args)
    for flag in ("num_envs", "max_minutes"):
        if getattr(args, flag) is not None:
            print(f"error: --{flag.replace('_', '-')} is an option of --engine torchrl; RLlib's batch and budget are set in its --config "
                  "(train_batch_size, iterations)", file=sys.stderr)
            return 2
    return rllib_command.run(args)


__all__ = ["DESCRIPTION", "ENGINES", "EXAMPLES", "add_arguments", "run"]

"""``fleet-marl train --engine rllib``: the command-line front of :mod:`fleet_marl.rllib.train`.

The ``train`` entry of the CLI's command table: :data:`EXAMPLES` (the
epilog), :func:`add_arguments` and :func:`run`. Importing this module does not import Ray; the parser
is built without it, and every check of the arguments, the config file and the checkpoint runs
before Ray starts. Without the ``[rllib]`` extra (:data:`NEEDS`) the command says how to
install it and exits with code 2. :func:`config_path` resolves ``--config NAME`` to
``experiments/configs/NAME.yaml`` of the checkout; :func:`resolve` turns the arguments into
a :class:`~fleet_marl.rllib.config.TrainConfig`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fleet_marl.config import REWARD_SCHEMES
from fleet_marl.errors import require
from fleet_marl.rllib.config import TrainConfig, TrainConfigError
from fleet_marl.rllib.loader import ENGINE
from fleet_marl.rllib.sharing import SHARING
from fleet_marl.tasks import TASKS
from fleet_marl.training import config_path, from_command, print_result, usage_error

#: What training imports, all from the ``[rllib]`` extra: RLlib, torch, TensorBoard's writer
#: and matplotlib (the learning curve).
NEEDS = ("ray.rllib", "torch", "tensorboardX", "matplotlib")

EXAMPLES = """examples:
  fleet-marl train --engine rllib                    # the default run: PPO on easy
  fleet-marl train --engine rllib --iterations 5 --final-episodes 3   # a quick look
  fleet-marl train --config easy_15min               # RLlib's learned row of easy: 15 minutes (max_minutes), then graded
  fleet-marl train --engine rllib --max-minutes 5    # any run, capped at 5 minutes of wall time
  fleet-marl train --config experiments/configs/medium_per_kind_difference.yaml
  fleet-marl train --config medium_per_kind_difference   # the same, by name (an RLlib config: the rllib engine)
  fleet-marl train --engine rllib --task hard --sharing mappo --reward-scheme global --iterations 100
  fleet-marl train --resume runs/train/easy-shared-mixed --iterations 80
  fleet-marl train --engine rllib --config seq.yaml  # env: {protocol: sequential}: turn-based episodes (docs/training.md)
  fleet-marl train --engine rllib --overwrite        # start runs/train/easy-shared-mixed over
  RAY_AUTH_MODE=disabled ray start --head && fleet-marl train --address auto --num-env-runners 2

Precedence: the defaults, then --config (or, with --resume, the run's own config), then the
flags. Outputs go to <out>/<name>/ (default runs/train/<task>-<sharing>-<reward scheme>/):
checkpoint/, metrics.csv, tb/ (tensorboard --logdir runs/train), learning_curve.png and
results.md. See docs/training.md.
"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl train``."""
    t.add_argument("--config", default=None, metavar="YAML", help="a run config: a path, or the name of one in experiments/configs/")
    t.add_argument("--task", default=None, help=f"one of {', '.join(TASKS)} (default easy)")
    t.add_argument("--reward-scheme", default=None, help=f"one of {', '.join(REWARD_SCHEMES)} (default mixed)")
    t.add_argument("--sharing", default=None, help=f"one of {', '.join(SHARING)} (default shared)")
    t.add_argument("--iterations", type=int, default=None, help="training iterations in all (with --resume: the total to reach)")
    t.add_argument("--seed", type=int, default=None, help="seed of the env runners and the initial weights (default 0)")
    t.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        metavar="N",
        help="remote sampling processes, one CPU each (default 0: sample in the driver)",
    )
    t.add_argument("--address", default=None, help="join a running Ray cluster ('auto' or host:port) instead of starting one")
    t.add_argument("--resume", default=None, metavar="DIR", help="continue a run from its folder or its checkpoint/ folder")
    t.add_argument("--overwrite", action="store_true", help="start the run folder over if it already holds a run (make train does)")
    t.add_argument("--out", default=None, help="folder for runs (default runs/train)")
    t.add_argument("--name", default=None, help="run folder name (default <task>-<sharing>-<reward scheme>)")
    t.add_argument(
        "--final-episodes",
        type=int,
        default=None,
        metavar="K",
        help="seeds of the final evaluation (default: the config's final_episodes, 10; 0 skips it)",
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print the final summaries as JSON")


def resolve(args: argparse.Namespace) -> tuple[TrainConfig, Any]:
    """(TrainConfig, resume) from the arguments; raises TrainConfigError."""
    options = {"num_env_runners": args.num_env_runners, "max_minutes": getattr(args, "max_minutes", None)}
    return from_command(args, TrainConfig, ENGINE, _read_config, options)


def _read_config(name: str) -> TrainConfig:
    return TrainConfig.from_yaml(config_path(name))


def run(args: argparse.Namespace) -> int:
    """Run ``fleet-marl train`` with parsed ``args``; returns the exit code (2: a bad option)."""
    # before Ray is imported: no token auth, no usage stats, for the Ray this command starts
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    require(NEEDS, "rllib", "fleet-marl train")  # MissingExtra: the CLI prints how to install it (exit code 2)
    from fleet_marl.rllib.train import prepare, quiet, train  # Ray: after the settings above

    try:
        tc, resume = resolve(args)
        if args.resume and args.overwrite:
            raise TrainConfigError("--resume and --overwrite: pick one (continue the run, or start it over)")
        prepare(tc, resume, args.overwrite)  # the run folder and the checkpoint are checked before Ray starts
    except (TrainConfigError, ValueError) as exc:
        return usage_error(exc)
    quiet()
    try:
        res = train(
            tc,
            address=args.address,
            resume=resume,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            final_episodes=args.final_episodes,
        )
    except TrainConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return print_result(
        res, tc, args.json, f"trained {tc.run_name}: {res.iterations} iterations, {res.env_steps:,} env steps in {res.seconds / 60:.1f} min"
    )


__all__ = ["EXAMPLES", "NEEDS", "add_arguments", "config_path", "resolve", "run"]

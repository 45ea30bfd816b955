"""The ``fleet-marl`` command: one table of subcommands, each living with its feature.

``COMMANDS`` maps a subcommand to the module that implements it and its one line of help.
Each module defines ``EXAMPLES`` (the ``--help`` epilog), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code); optionally ``DESCRIPTION`` and ``ERRORS``, the exception
types that are the user's mistake (printed as ``error: ...`` with a ``--help`` hint, exit
code 2). Running a command imports only its own module; a command module imports nothing
optional (no Ray, no torch, no OpenEnv) at module level, because ``build_parser()`` (all
commands' options, for tests and docs) imports them all.

To add a command: write the module next to its feature and add one line to ``COMMANDS``.
Run ``fleet-marl <command> --help`` for each command's options and examples.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fleet_marl.catalog import CatalogError
from fleet_marl.config import ConfigError
from fleet_marl.errors import UsageError

#: Subcommand -> (the module that implements it, one line of help), in the order
#: ``fleet-marl --help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("fleet_marl.cli.train", "train PPO tenants with TorchRL (the main job, make train) or RLlib (--engine rllib)"),
    "compare": (
        "fleet_marl.studies.command",
        "the credit-assignment study: PPO under 7 reward and critic arms, N = 2..64 tenants, two arbiters",
    ),
    "evaluate": ("fleet_marl.evaluation.command", "grade a policy on a task over K seeds"),
    "baselines": ("fleet_marl.studies.baselines", "every reference policy on every task, as a table"),
    "open-loop": (
        "fleet_marl.evaluation.open_loop",
        "search an open-loop table (one joint action per round, blind to the state) on seeds: the baseline that should lose",
    ),
    "docs": ("fleet_marl.studies.publish", "render every generated block of README.md and docs/ from the data in docs/data/"),
    "demo": ("fleet_marl.evaluation.demo", "one rendered episode with a summary"),
    "estimate": ("fleet_marl.tools.estimate", "memory per GPU, fit and throughput of one configuration"),
    "validate": ("fleet_marl.validation.command", "the cost model against published measurements: each case, its error, the targets"),
    "coupling": (
        "fleet_marl.studies.coupling_command",
        "how much the tenants couple under a policy: externality share, factoredness, learnability, selfish/team ratio",
    ),
    "suite": (
        "fleet_marl.studies.suite_command",
        "the credit-assignment suite: list its tasks and their coupling, show a scenario, measure the coupling",
    ),
    "sweep": ("fleet_marl.tools.sweep", "batched-kernel search for the best safe configuration of catalog models"),
    "bench": ("fleet_marl.studies.bench.command", "how fast the env and the batched kernel are, against a stock PettingZoo env"),
    "serve": ("fleet_marl.openenv.command", "serve the env over HTTP/WebSocket with OpenEnv (for LLM agents and remote policies)"),
    "view": (
        "fleet_marl.openenv.viewer_command",
        "a read-only web page replaying an episode (a recording, or a policy's or trained run's)",
    ),
    "traces": ("fleet_marl.traces.command", "list the public traces and fetch full ones into the cache"),
}

EPILOG = """examples:
  fleet-marl train
  fleet-marl compare --quick
  fleet-marl evaluate --task easy --policy precision_expert
  fleet-marl open-loop --task tiny --seeds 0-9 --out tiny.json
  fleet-marl estimate --model llama-3.1-8b --gpus 8 --gpu-type h100-sxm
  fleet-marl sweep --quick
  fleet-marl validate --summary
  fleet-marl coupling --task easy
  fleet-marl suite list
  fleet-marl demo
  fleet-marl bench --quick
  fleet-marl serve --mode ego
  fleet-marl view runs/easy.jsonl
  fleet-marl traces list
  fleet-marl docs --check

Run 'fleet-marl <command> --help' for each command's options."""

#: Errors that are the user's mistake in every command.
USER_ERRORS: tuple[type[Exception], ...] = (UsageError, ConfigError, CatalogError)


def command_module(name: str):
    """The module of subcommand ``name``."""
    return importlib.import_module(COMMANDS[name][0])


def build_parser(commands=None) -> argparse.ArgumentParser:
    """The ``fleet-marl`` parser. ``commands`` names the subcommands whose options it loads
    (default: all); the others are listed with their help only, so running one command
    imports only its own module."""
    load = set(COMMANDS) if commands is None else set(commands)
    p = argparse.ArgumentParser(
        prog="fleet-marl",
        description="fleet_marl: tenants negotiating for one shared GPU cluster.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    sub = p.add_subparsers(dest="command", metavar="command")
    for name, (_, help_) in COMMANDS.items():
        if name not in load:
            sub.add_parser(name, help=help_)
            continue
        mod = command_module(name)
        sp = sub.add_parser(
            name,
            help=help_,
            description=getattr(mod, "DESCRIPTION", None),
            epilog=mod.EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `fleet-marl ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(commands=[argv[0]] if argv and argv[0] in COMMANDS else [])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    mod = command_module(args.command)
    try:
        return int(mod.run(args) or 0)
    except USER_ERRORS + tuple(getattr(mod, "ERRORS", ())) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"run 'fleet-marl {args.command} --help' for the options", file=sys.stderr)
        return 2


__all__ = ["COMMANDS", "build_parser", "command_module", "main"]

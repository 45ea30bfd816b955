"""The ``fleet-marl`` command: one table of subcommands, each living with its feature.

``COMMANDS`` maps a subcommand to the module that implements it. Each module defines ``HELP``
(one line), ``EXAMPLES`` (the ``--help`` epilog), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code); optionally ``DESCRIPTION`` and ``ERRORS``, the exception
types that are the user's mistake (printed as ``error: ...`` with a ``--help`` hint, exit
code 2). Building the parser imports each module, so a command module imports nothing heavy
(no Ray, no torch, no OpenEnv) at module level.

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

#: Subcommand -> the module that implements it, in the order ``fleet-marl --help`` lists them.
COMMANDS: dict[str, str] = {
    "train": "fleet_marl.rllib.command",  # PPO tenants with RLlib, the main job (make train)
    "compare": "fleet_marl.studies.command",  # the credit-assignment study
    "evaluate": "fleet_marl.evaluation.command",  # grade a policy against random and planner
    "baselines": "fleet_marl.evaluation.baselines",  # every reference policy on every task
    "demo": "fleet_marl.evaluation.demo",  # one rendered episode
    "estimate": "fleet_marl.tools.estimate",  # one configuration's memory, fit and throughput
    "sweep": "fleet_marl.tools.sweep",  # the best safe configuration by batched kernel search
    "bench": "fleet_marl.studies.bench",  # speed and memory
    "serve": "fleet_marl.openenv.command",  # the OpenEnv server for LLM agents
}

EPILOG = """examples:
  fleet-marl train
  fleet-marl compare --quick
  fleet-marl evaluate --task easy --policy precision_expert
  fleet-marl estimate --model llama-3.1-8b --gpus 8 --gpu-type h100-sxm
  fleet-marl sweep --quick
  fleet-marl demo
  fleet-marl bench --quick
  fleet-marl serve --mode ego

Run 'fleet-marl <command> --help' for each command's options."""

#: Errors that are the user's mistake in every command.
USER_ERRORS: tuple[type[Exception], ...] = (UsageError, ConfigError, CatalogError)


def command_module(name: str):
    """The module of subcommand ``name``."""
    return importlib.import_module(COMMANDS[name])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleet-marl",
        description="fleet_marl: tenants negotiating for one shared GPU cluster.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    sub = p.add_subparsers(dest="command", metavar="command")
    for name in COMMANDS:
        mod = command_module(name)
        sp = sub.add_parser(name, help=mod.HELP, description=getattr(mod, "DESCRIPTION", None), epilog=mod.EXAMPLES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `fleet-marl ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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

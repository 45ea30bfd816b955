"""The ``fleet-marl bench`` command: :data:`DESCRIPTION`, :data:`EXAMPLES`, :func:`add_arguments`
and :func:`run`, which runs the main run (:mod:`~fleet_marl.studies.bench.suite`), ``--train``
(:mod:`~fleet_marl.studies.bench.train`) or ``--clients`` (:mod:`~fleet_marl.studies.bench.clients`)
and prints its report.
"""

from __future__ import annotations

import argparse
import json
import sys

from fleet_marl.studies.bench import clients, suite, train
from fleet_marl.studies.bench.targets import KERNEL_BEFORE_COMMIT

EXAMPLES = """examples:
  fleet-marl bench                      # the full run: a table on stdout, progress on stderr
  fleet-marl bench --quick --json       # the CI smoke run, one JSON object
  fleet-marl bench --cpu 0 --json > bench.json
  git worktree add --detach ../v030 12a23ba && fleet-marl bench --kernel-before ../v030   # the kernel against 0.3.0's
  fleet-marl bench --train              # end-to-end training throughput of make train's config
  fleet-marl bench --clients --json     # every outside client's route and RLlib's training before/after
  fleet-marl bench --clients --before ../before   # RLlib's "before": a checkout of the engine before its vector env

Every key of the JSON report is documented in docs/benchmarks.md.
"""
DESCRIPTION = (
    "Measure env steps (N = 4, 16, 64; local and difference rewards), the vector env (N = 16, B = 256), the batched "
    "kernel (N = 16, batch 1 to 16384), the difference, exact- and sampled-Shapley overheads, every task's env as the "
    "README builds it against the same env with compute_all=False, RSS over a long vector-env run and a "
    "stock PettingZoo env, on one pinned core; "
    "medians over repeats, actions pre-sampled."
)


def add_arguments(b: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl bench``."""
    b.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    b.add_argument("--quick", action="store_true", help="fewer steps and repeats (the CI smoke test)")
    b.add_argument("--cpu", type=int, default=None, help="core to pin to (default: the last core this process may use)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.add_argument(
        "--train", action="store_true", help="measure end-to-end training throughput instead (the torchrl engine on easy, every core)"
    )
    b.add_argument(
        "--clients",
        action="store_true",
        help="measure every outside client's route and fleet-marl train --engine rllib before and after instead (against the clients' targets; pinned)",
    )
    b.add_argument(
        "--kernel-before",
        default=None,
        metavar="DIR",
        help=f"also measure the kernel of a checkout of the engine (a folder holding its fleet_marl package, e.g. a git worktree of "
        f"{KERNEL_BEFORE_COMMIT}, the 0.3.0 kernel) at N = 16, batch 1024, interleaved with this one (against its speed-up target)",
    )
    b.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="with --clients: a checkout of the engine to compare RLlib's training with (a folder holding its fleet_marl package; "
        "default: this package with vector: false)",
    )


def run(args) -> int:
    """Run ``fleet-marl bench`` with parsed ``args``; print the report; return the exit code."""
    if args.train:
        r = train.train_throughput(quick=args.quick, progress=not args.no_progress)
        print(json.dumps(r, indent=2) if args.json else train.format_train_table(r))
        return 0
    if args.clients:
        try:
            c = clients.measure(quick=args.quick, cpu=args.cpu, progress=not args.no_progress, before=args.before)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(c, indent=2) if args.json else clients.format_table(c))
        return 0
    try:
        r = suite.measure(quick=args.quick, cpu=args.cpu, progress=not args.no_progress, kernel_before=args.kernel_before)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl bench --help' for the options", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2) if args.json else suite.format_table(r))
    return 0


__all__ = ["DESCRIPTION", "EXAMPLES", "add_arguments", "run"]

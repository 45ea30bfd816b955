"""``fleet-marl compare``: the command-line front of the credit-assignment study
(:mod:`fleet_marl.studies.credit_assignment`, :mod:`fleet_marl.studies.report`).

The ``compare`` entry of the CLI's command table: :data:`EXAMPLES` (the
epilog), :func:`add_arguments` and :func:`run`. :func:`study_from_args` turns the arguments into a
checked :class:`~fleet_marl.studies.credit_assignment.Study`. Importing this module does not
import Ray, and every option is checked before Ray starts. Training needs the ``[rllib]`` extra
(Ray, torch and matplotlib for the plots, :data:`NEEDS`), ``--report`` only the ``[plot]``
extra; without it the command says which to install and exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from fleet_marl.config import MECHANISMS, REWARD_SCHEMES
from fleet_marl.errors import require
from fleet_marl.rllib.config import TrainConfigError
from fleet_marl.studies import credit_assignment, report
from fleet_marl.studies.credit_assignment import FULL_BUDGETS, Study, StudyError

#: What a study imports: RLlib and torch to train, matplotlib for the plots (all in the
#: ``[rllib]`` extra); ``--report`` needs matplotlib only (the ``[plot]`` extra).
NEEDS = ("ray.rllib", "torch", "matplotlib")

EXAMPLES = """examples:
  fleet-marl compare --quick                      # the whole pipeline in a few minutes (CI runs it)
  fleet-marl compare                              # the full study: 72 runs, about 90 min on 2 cores
  fleet-marl compare --n 2,4 --schemes global,difference --seeds 5
  fleet-marl compare --budget 2=40000,4=40000 --n 2,4 --out runs/longer
  fleet-marl compare --report                     # tables and plots again from the CSVs
  fleet-marl compare --report --docs              # ... and into docs/credit_assignment.md
  RAY_AUTH_MODE=disabled ray start --head && fleet-marl compare --address auto --jobs 8

A killed study resumes: run the same command again and the runs already in
<out>/results.csv are skipped. Outputs in <out>/: results.csv (one row per run), curves.csv
(one row per iteration), summary.md, curves_n<N>.png, scaling.png. See docs/credit_assignment.md.
"""


def add_arguments(c: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl compare``."""
    c.add_argument("--quick", action="store_true", help="N = 2, 4, two seeds, tiny budgets: checks the pipeline, not the science")
    c.add_argument("--n", default=None, metavar="N,N", help="tenant counts (default 2,4,8,16; quick 2,4)")
    c.add_argument("--schemes", default=None, metavar="S,S", help=f"reward schemes (default all: {','.join(REWARD_SCHEMES)})")
    c.add_argument("--seeds", type=int, default=None, help="seeds per (N, scheme): 0 .. K-1 (default 3; quick 2)")
    c.add_argument("--budget", default=None, metavar="N=STEPS,...",
                   help="env steps per run for each N (default " + ",".join(f"{n}={b}" for n, b in FULL_BUDGETS.items()) + ")")
    c.add_argument("--episodes", type=int, default=None, help="grader episodes per run (default 5; quick 2)")
    c.add_argument("--mechanism", default=None, help=f"arbiter, one of {', '.join(MECHANISMS)} (default proportional)")
    c.add_argument("--jobs", type=int, default=2, help="runs at once, one CPU each (default 2)")
    c.add_argument("--address", default=None, help="run on an existing Ray cluster ('auto' or host:port)")
    c.add_argument("--out", default=None, help="study folder (default runs/credit_assignment, quick runs/credit_assignment_quick)")
    c.add_argument("--overwrite", action="store_true", help="start the study folder over")
    c.add_argument("--report", action="store_true", help="no training: rebuild the tables and plots from the CSVs in --out")
    c.add_argument("--docs", action="store_true", help="also write the tables, plots and CSVs into docs/credit_assignment.md (its own block for an arbiter other than proportional)")
    c.add_argument("--no-progress", action="store_true", help="no progress bars")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out:
        raise StudyError(f"{option} {text!r}: expected comma-separated integers, e.g. 2,4,8")
    return out


def study_from_args(args) -> Study:
    """The :class:`~fleet_marl.studies.credit_assignment.Study` the arguments describe (checked)."""
    changes: dict = {}
    if args.n:
        changes["ns"] = _ints(args.n, "--n")
    if args.schemes:
        changes["schemes"] = tuple(s.strip() for s in args.schemes.split(",") if s.strip())
    for name in ("seeds", "episodes", "mechanism", "out"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    study = Study.quick(**changes) if args.quick else Study(**changes)
    if args.budget:
        budgets = dict(study.budgets)
        for part in args.budget.split(","):
            n, sep, steps = part.partition("=")
            if not sep or not n.strip().isdigit() or not steps.strip().isdigit():
                raise StudyError(f"--budget {args.budget!r}: expected N=STEPS pairs of integers, e.g. 2=24000,4=24000")
            budgets[int(n)] = int(steps)
        study.budgets = budgets
    study.check()
    return study


def run(args) -> int:
    """Run ``fleet-marl compare`` with parsed ``args``: the missing runs (unless ``--report``),
    then the report (and ``--docs``); returns the exit code (2: a bad option)."""
    # for the Ray the study starts: no token auth, no usage stats
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # MissingExtra: the CLI prints how to install it (exit code 2)
    if args.report:
        require("matplotlib", "plot", "fleet-marl compare --report")
    else:
        require(NEEDS, "rllib", "fleet-marl compare")
    try:
        study = study_from_args(args)
        if not args.report:
            credit_assignment.run(study, jobs=args.jobs, address=args.address, overwrite=args.overwrite, progress=not args.no_progress)
        report.report(study.out)
        if args.docs:
            report.write_docs(study.out)
    except (StudyError, TrainConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl compare --help' for the options", file=sys.stderr)
        return 2
    return 0


__all__ = ["EXAMPLES", "NEEDS", "add_arguments", "run", "study_from_args"]

"""``fleet-marl compare``: the command-line front of the credit-assignment study (:mod:`fleet_marl.studies.credit`).

One study (7 arms, N up to 64, both arbiters, the sharing schemes), run on the engine
``--engine`` names: an engine of the registry (:data:`fleet_marl.training.engines.ENGINES`) that
the study has runs for (:data:`fleet_marl.studies.credit.runs.ENGINES`: ``torchrl``, the
default, and ``rllib``; another is refused by name before anything runs). A study on ``rllib``
has a folder of its own by default (``runs/credit_study_rllib``, quick
``runs/credit_study_quick_rllib``), runs on this machine, on cpu, one or two runs at a time, and
is not published to the docs (``--docs``). :mod:`fleet_marl.studies.credit.runs` runs and
resumes it, :mod:`fleet_marl.studies.credit.report` reports it. The ``compare`` entry of the
CLI's command table: :data:`EXAMPLES` (the epilog), :func:`add_arguments` and :func:`run`;
:func:`study_from_args` turns the arguments into a checked study. Importing this module imports
neither Ray nor torch, and every option is checked before either starts. Training needs the
engine's extra (:data:`NEEDS`: ``[torchrl]``; :data:`RLLIB_NEEDS`: ``[rllib]``), ``--report``
only the ``[plot]`` extra; without it the command says which to install and exits with code 2.
``--docs`` saves the study under ``docs/data/`` and publishes the docs
(:func:`fleet_marl.studies.credit.report.write_docs`). ``--suite`` runs the study on the
credit-assignment suite instead (:class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`,
``--families``; TorchRL only, no ``--docs`` yet) and reports it with
:mod:`fleet_marl.studies.credit.suite_report`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fleet_marl.errors import require
from fleet_marl.studies.credit import report, runs, suite_report
from fleet_marl.studies.credit.suite_design import ENGINES as SUITE_ENGINES
from fleet_marl.studies.credit.suite_design import SUITE_ARMS, SuiteStudy
from fleet_marl.studies.credit.torchrl_design import ARMS, Study
from fleet_marl.studies.store import StudyError
from fleet_marl.training import TrainConfigError, engines

#: What the study's runs on TorchRL import: torch, TorchRL and matplotlib for the plots (the ``[torchrl]`` extra).
NEEDS = ("torch", "torchrl", "tensordict", "matplotlib")
#: What the study's runs on RLlib import: Ray's RLlib, torch and matplotlib for the plots (the ``[rllib]`` extra).
RLLIB_NEEDS = ("ray.rllib", "torch", "matplotlib")
#: The engines the study runs on (of the registry), the default first.
ENGINES = runs.ENGINES

EXAMPLES = """examples:
  fleet-marl compare --quick                      # the whole pipeline in about a minute (CI runs it)
  fleet-marl compare                              # the full study: 920 runs (resumable)
  fleet-marl compare --n 2,4,8 --arms global,difference,mappo --seeds 5 --out runs/small
  fleet-marl compare --report                     # tables, verdicts and plots again from the CSVs
  fleet-marl compare --report --docs              # ... and into docs/credit_assignment.md
  fleet-marl compare --address auto               # each run a Ray task on the cluster this machine joined (ray start)
  fleet-marl compare --address ray://head:10001 --device cuda --gpus-per-run 0.25   # learners on the cluster's GPUs
  fleet-marl compare --engine rllib --quick       # the same study on RLlib (its own folder, runs/credit_study_quick_rllib)
  fleet-marl compare --suite --quick              # the study on the credit-assignment suite, its pipeline check
  fleet-marl compare --suite                      # ... in full: every family, N and arm of SuiteStudy, 10 seeds (resumable)
  fleet-marl compare --suite --families scarce,power --n 8,32 --arms local,difference --seeds 3

A stopped study resumes: run the same command again and the runs already in
<out>/results.csv are skipped (sessions.csv adds up the wall time). Every run trains with the
reproducible collector (sync): a run gives the same results on this machine's processes and on
a Ray cluster (--address), bit for bit. Outputs in <out>/:
results.csv (one row per run), curves.csv (the grader's score along each run), summary.md,
and the plots; with --suite, baselines.csv (the open_loop baseline of each task, graded before
the runs) and no plots. See docs/credit_assignment.md and docs/suite.md.
"""


def arms_help() -> str:
    """``--arms``' help, from the tables: the scaling study's arms (:data:`~fleet_marl.studies.credit.torchrl_design.ARMS`)
    and the suite study's (:data:`~fleet_marl.studies.credit.suite_design.ENGINES`: its PPO arms and the
    value-decomposition arms it trains on BenchMARL), each with its default."""
    value = [a for a, engine in SUITE_ENGINES.items() if engine != ENGINES[0]]
    engines_of = sorted({SUITE_ENGINES[a] for a in value})
    return (
        f"the arms (of {','.join(ARMS)}; default {','.join(Study().arms)}); with --suite of {','.join(SUITE_ENGINES)} "
        f"({','.join(value)}: value decomposition on {','.join(engines_of)}; default {','.join(SUITE_ARMS)})"
    )


def add_arguments(c: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl compare``."""
    c.add_argument(
        "--engine",
        default=ENGINES[0],
        choices=tuple(engines.ENGINES),
        help=f"the engine that trains the runs ({', '.join(ENGINES)}; default {ENGINES[0]}); the same design, budgets and "
        "CSV columns on each, a folder of its own (default <out>_<engine>); rllib: on this machine, on cpu, --jobs 1 or 2",
    )
    c.add_argument("--quick", action="store_true", help="N = 2, 4, two seeds, tiny budgets: checks the pipeline, not the science")
    c.add_argument(
        "--suite",
        action="store_true",
        help="the study on the credit-assignment suite (fleet-marl suite list): each family's tasks at each N, every run graded on "
        "held-out and train scenarios (TorchRL only; default folder runs/credit_suite, quick runs/credit_suite_quick)",
    )
    c.add_argument(
        "--families",
        default=None,
        metavar="F,F",
        help="with --suite: the suite's families (default " + ",".join(SuiteStudy.families) + "; quick aligned,power)",
    )
    c.add_argument(
        "--n", default=None, metavar="N,N", help="tenant counts (default 2,4,8,16,32,64; quick 2,4; --suite 8,16,32,64, quick 4)"
    )
    c.add_argument(
        "--arms",
        default=None,
        metavar="A,A",
        help=arms_help(),
    )
    c.add_argument("--mechanisms", default=None, metavar="M,M", help="arbiters of the scaling part (default proportional,auction)")
    c.add_argument("--iterations", type=int, default=None, help="PPO iterations per scaling run (default 24; sharing runs 32)")
    c.add_argument(
        "--address",
        default=None,
        help="run on an existing Ray cluster ('auto', host:port or ray://host:port): each run a Ray task of one CPU, the results "
        "streamed into the same resumable store (the same results as this machine's processes, bit for bit, on nodes with the same software)",
    )
    c.add_argument("--device", default=None, help="where each run's learner runs: cpu (default) or cuda; the env stays on CPU")
    c.add_argument(
        "--gpus-per-run",
        type=float,
        default=None,
        metavar="G",
        help="with --address: the GPUs each run's Ray task asks for (default 1 with --device cuda, else 0; 0.25 packs 4 runs on a GPU)",
    )
    c.add_argument("--seeds", type=int, default=None, help="seeds per arm and N: 0 .. K-1 (default 10; quick 2)")
    c.add_argument("--episodes", type=int, default=None, help="grader episodes per evaluation (default 4; quick fewer)")
    c.add_argument(
        "--jobs", type=int, default=None, help="runs at once, one CPU each (default 2; with --address as many as the cluster fits)"
    )
    c.add_argument(
        "--out",
        default=None,
        help="study folder (default runs/credit_study; quick: runs/credit_study_quick; with --engine rllib, _rllib after either)",
    )
    c.add_argument("--overwrite", action="store_true", help="start the study folder over")
    c.add_argument("--report", action="store_true", help="no training: rebuild the tables and plots from the CSVs in --out")
    c.add_argument(
        "--docs",
        action="store_true",
        help="also save the CSVs in docs/data/ and the plots in docs/img/, then publish the docs (docs/credit_assignment.md)",
    )
    c.add_argument("--no-progress", action="store_true", help="no progress bars")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out:
        raise StudyError(f"{option} {text!r}: expected comma-separated integers, e.g. 2,4,8")
    return out


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _check_engine(args: argparse.Namespace) -> None:
    if args.engine not in ENGINES:
        raise StudyError(
            f"--engine {args.engine}: the study has runs for {', '.join(ENGINES)} only (--engine {args.engine} trains with "
            "fleet-marl train; the study's runs on it are not written yet)"
        )
    if args.engine != ENGINES[0] and args.docs:
        raise StudyError(
            f"--docs with --engine {args.engine}: the docs publish the study's runs on {ENGINES[0]}; drop --docs "
            "(the report is in the study folder)"
        )
    suite = getattr(args, "suite", False)
    if suite:
        for option, given in (("--engine", args.engine != ENGINES[0]), ("--mechanisms", args.mechanisms), ("--docs", args.docs)):
            if given:
                raise StudyError(
                    f"{option} with --suite: the study on the suite runs on {ENGINES[0]} over families (--families), "
                    "and is not published to the docs yet; drop it"
                )
    elif getattr(args, "families", None):
        raise StudyError(f"--families {args.families!r}: the families are the study on the suite's; add --suite")


def study_from_args(args: argparse.Namespace) -> Study:
    """The study the arguments describe (checked), after checking that it runs on ``--engine``."""
    _check_engine(args)
    changes: dict[str, Any] = {}
    if args.n:
        changes["ns"] = _ints(args.n, "--n")
    if args.arms:
        changes["arms"] = _names(args.arms)
    if args.mechanisms:
        changes["mechanisms"] = _names(args.mechanisms)
    if getattr(args, "families", None):
        changes["families"] = _names(args.families)
    for name in ("seeds", "episodes", "iterations", "device", "out"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.out is None and args.engine != ENGINES[0]:  # a folder of its own: study.json names the engine
        changes["out"] = f"{runs.make_study(args.quick).out}_{args.engine}"
    study = runs.make_study(args.quick, suite=getattr(args, "suite", False), **changes)
    study.check()
    return study


def run(args: argparse.Namespace) -> int:
    """Run ``fleet-marl compare`` with parsed ``args``: the missing runs (unless ``--report``),
    then the report (and ``--docs``); returns the exit code (2: a bad option)."""
    # for a Ray cluster (--address): no token auth, no usage stats
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    out = args.out
    try:
        _check_engine(args)
        # MissingExtra: the CLI prints how to install it (exit code 2)
        if args.report and getattr(args, "suite", False):
            pass  # the suite's report is tables only
        elif args.report:
            require("matplotlib", "plot", "fleet-marl compare --report")
        elif args.engine == "rllib":
            require(RLLIB_NEEDS, "rllib", "fleet-marl compare --engine rllib")
        else:
            require(NEEDS, "torchrl", "fleet-marl compare")
            if args.address is not None:
                require("ray", "rllib", "fleet-marl compare --address (Ray)")
        study = study_from_args(args)
        out = study.out
        progress = not args.no_progress
        if not args.report:
            runs.run(
                study,
                engine=args.engine,
                jobs=args.jobs,
                address=args.address,
                gpus=args.gpus_per_run,
                overwrite=args.overwrite,
                progress=progress,
            )
        echo = print if progress or args.report else (lambda *_: None)
        if isinstance(study, SuiteStudy):
            suite_report.report(study.out, echo=echo)
        else:
            report.report(study.out, echo=echo)
        if args.docs:
            report.write_docs(study.out)
    except (StudyError, TrainConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl compare --help' for the options", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: the finished runs are in {out}; the same command resumes the study", file=sys.stderr)
        return 130
    return 0


__all__ = ["ENGINES", "EXAMPLES", "NEEDS", "RLLIB_NEEDS", "add_arguments", "arms_help", "run", "study_from_args"]

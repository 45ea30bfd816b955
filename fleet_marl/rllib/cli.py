"""``fleet-marl train``: the command-line front of :mod:`fleet_marl.rllib.train`.

Importing this module does not import Ray; the parser is built without it, and every check of
the arguments, the config file and the checkpoint runs before Ray starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXAMPLES = """examples:
  fleet-marl train                                   # the default run: PPO on easy, about 6 min on 2 cores
  fleet-marl train --iterations 5 --final-episodes 3 # a quick look
  fleet-marl train --config experiments/configs/medium_per_kind_difference.yaml
  fleet-marl train --config medium_per_kind_difference   # the same, by name
  fleet-marl train --task hard --sharing mappo --reward-scheme global --iterations 100
  fleet-marl train --resume runs/train/easy-shared-mixed --iterations 80
  fleet-marl train --overwrite                       # start runs/train/easy-shared-mixed over
  RAY_AUTH_MODE=disabled ray start --head && fleet-marl train --address auto --num-env-runners 2

Precedence: the defaults, then --config (or, with --resume, the run's own config), then the
flags. Outputs go to <out>/<name>/ (default runs/train/<task>-<sharing>-<reward scheme>/):
checkpoint/, metrics.csv, tb/ (tensorboard --logdir runs/train), learning_curve.png and
results.md. See docs/training.md.
"""


def add_parser(sub) -> argparse.ArgumentParser:
    from fleet_marl.config import REWARD_SCHEMES
    from fleet_marl.rllib.sharing import SHARING
    from fleet_marl.tasks import TASKS

    t = sub.add_parser("train", help="train PPO tenants with RLlib (the main job, make train)", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--config", default=None, metavar="YAML", help="a run config: a path, or the name of one in experiments/configs/")
    t.add_argument("--task", default=None, help=f"one of {', '.join(TASKS)} (default easy)")
    t.add_argument("--reward-scheme", default=None, help=f"one of {', '.join(REWARD_SCHEMES)} (default mixed)")
    t.add_argument("--sharing", default=None, help=f"one of {', '.join(SHARING)} (default shared)")
    t.add_argument("--iterations", type=int, default=None, help="training iterations in all (with --resume: the total to reach)")
    t.add_argument("--seed", type=int, default=None, help="seed of the env runners and the initial weights (default 0)")
    t.add_argument("--num-env-runners", type=int, default=None, metavar="N", help="remote sampling processes, one CPU each (default 0: sample in the driver)")
    t.add_argument("--address", default=None, help="join a running Ray cluster ('auto' or host:port) instead of starting one")
    t.add_argument("--resume", default=None, metavar="DIR", help="continue a run from its folder or its checkpoint/ folder")
    t.add_argument("--overwrite", action="store_true", help="start the run folder over if it already holds a run (make train does)")
    t.add_argument("--out", default=None, help="folder for runs (default runs/train)")
    t.add_argument("--name", default=None, help="run folder name (default <task>-<sharing>-<reward scheme>)")
    t.add_argument("--final-episodes", type=int, default=None, metavar="K", help="seeds of the final evaluation (default: the config's final_episodes, 10; 0 skips it)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print the final summaries as JSON")
    return t


def config_path(name: str) -> Path:
    """``--config`` as given, or ``experiments/configs/<name>.yaml`` of the checkout."""
    p = Path(name)
    if p.is_file() or p.suffix in (".yaml", ".yml") or "/" in name:
        return p
    from fleet_marl.baselines import checkout

    root = checkout()
    cand = (root / "experiments" / "configs" / f"{name}.yaml") if root else p
    return cand if cand.is_file() else p


def resolve(args):
    """(TrainConfig, resume) from the arguments; raises TrainConfigError."""
    from fleet_marl.rllib.config import TrainConfig, TrainConfigError
    from fleet_marl.rllib.policy import read_sidecar
    from fleet_marl.rllib.train import find_checkpoint

    if args.config:
        tc = TrainConfig.from_yaml(config_path(args.config))
    elif args.resume:
        meta = read_sidecar(find_checkpoint(args.resume))
        tc = TrainConfig.from_dict(meta.get("train_config", {}), source=f"{args.resume} (the run's config)")
    else:
        tc = TrainConfig()
    if args.final_episodes is not None and args.final_episodes < 0:
        raise TrainConfigError(f"--final-episodes {args.final_episodes}: expected an integer >= 0")
    changes = {"task": args.task, "reward_scheme": args.reward_scheme, "sharing": args.sharing, "iterations": args.iterations,
               "seed": args.seed, "num_env_runners": args.num_env_runners, "out": args.out, "name": args.name}
    return tc.replace(source="command line", **changes), args.resume


def main(args) -> int:
    import os

    # before Ray is imported: no token auth, no usage stats, for the Ray this command starts
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from fleet_marl.rllib.config import TrainConfigError

    try:
        tc, resume = resolve(args)
        from fleet_marl.rllib.train import prepare

        if args.resume and args.overwrite:
            raise TrainConfigError("--resume and --overwrite: pick one (continue the run, or start it over)")
        prepare(tc, resume, args.overwrite)  # the run folder and the checkpoint are checked before Ray starts
    except (TrainConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl train --help' for the options", file=sys.stderr)
        return 2
    from fleet_marl.rllib.train import quiet, train

    quiet()
    try:
        res = train(tc, address=args.address, resume=resume, overwrite=args.overwrite, progress=not args.no_progress,
                    final_episodes=args.final_episodes)
    except TrainConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"run_dir": str(res.run_dir), "checkpoint": str(res.checkpoint), "env_steps": res.env_steps,
                          "seconds": res.seconds, "evaluations": res.final}, indent=2))
        return 0
    print(f"trained {tc.run_name}: {res.iterations} iterations, {res.env_steps:,} env steps in {res.seconds / 60:.1f} min")
    if res.table:
        print()
        print(res.table)
        print()
    print(f"checkpoint      {res.checkpoint}")
    print(f"metrics         {res.run_dir / 'metrics.csv'}  (tensorboard --logdir {res.run_dir / 'tb'})")
    print(f"learning curve  {res.run_dir / 'learning_curve.png'}")
    if tc.env:
        print(f"evaluate again  grader.evaluate({tc.task!r}, {str(res.run_dir)!r}, overrides={tc.env!r})  (the run's env overrides)")
    else:
        print(f"evaluate again  fleet-marl evaluate --task {tc.task} --policy {res.run_dir}")
    return 0


# --- fleet-marl compare ----------------------------------------------------------------------------

COMPARE_EXAMPLES = """examples:
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


def add_compare_parser(sub) -> argparse.ArgumentParser:
    from fleet_marl.config import MECHANISMS, REWARD_SCHEMES
    from fleet_marl.rllib.compare import FULL_BUDGETS

    c = sub.add_parser("compare", help="the credit-assignment study: PPO under every reward scheme, N = 2..16 tenants",
                       epilog=COMPARE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    return c


def _ints(text: str, option: str) -> tuple[int, ...]:
    from fleet_marl.rllib.compare import StudyError

    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out:
        raise StudyError(f"{option} {text!r}: expected comma-separated integers, e.g. 2,4,8")
    return out


def study_from_args(args):
    """The :class:`~fleet_marl.rllib.compare.Study` the arguments describe (checked)."""
    from fleet_marl.rllib.compare import Study, StudyError

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


def compare_main(args) -> int:
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from fleet_marl.rllib import compare
    from fleet_marl.rllib.config import TrainConfigError

    try:
        study = study_from_args(args)
        if args.report:
            compare.report(study.out)
        else:
            compare.run(study, jobs=args.jobs, address=args.address, overwrite=args.overwrite, progress=not args.no_progress)
        if args.docs:
            compare.write_docs(study.out)
    except (compare.StudyError, TrainConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl compare --help' for the options", file=sys.stderr)
        return 2
    return 0


"""``fleet-marl baselines`` (``make baselines``): every reference policy on every task, as the
baseline table (:mod:`fleet_marl.evaluation.baselines`).

A full run saves the table's data (``docs/data/baselines.json``) and publishes it: into the
checkout's README and ``docs/results.md`` through :func:`fleet_marl.studies.publish.publish`
(which renders every block from its data), or into the files ``--results`` and ``--readme`` name.
A partial run (``--tasks``, ``--policies``) or one under the sequential protocol prints the table;
a partial run with ``--write`` puts its rows into the saved table in place of those cells' (:func:`merged`),
and every row's score and gap are recomputed from its task's reference rows
(:func:`fleet_marl.evaluation.baselines.derived`). ``--episodes`` defaults to the grader's count
per task (100 on ``tiny``, 10 elsewhere).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fleet_marl.errors import UsageError
from fleet_marl.evaluation.baselines import DATA, END, POLICIES, START, block, data, derived, run_all, table
from fleet_marl.evaluation.command import add_protocol_arguments, positive, protocol_overrides
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.evaluation.reference import EPISODES, TASK_EPISODES
from fleet_marl.evaluation.score import GraderError
from fleet_marl.studies.publish import publish, write_block
from fleet_marl.tasks import TASKS
from fleet_marl.training.config import checkout

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError, GraderError)
EXAMPLES = """examples:
  fleet-marl baselines                          # 10 seeds (100 on tiny), every task and policy; updates README.md and docs/results.md
  fleet-marl baselines --tasks tiny,easy --episodes 3  # a partial run prints the table and writes nothing (--write to force)
  fleet-marl baselines --tasks medium --protocol sequential --turn-order rotating  # the AEC loop; prints the table only
"""


def add_arguments(parser) -> None:
    parser.add_argument("--tasks", default="", help="comma-separated tasks (default: all of " + ", ".join(TASKS) + ")")
    parser.add_argument(
        "--policies", default="", help="comma-separated policies of the table (default: all of " + ", ".join(POLICIES) + ")"
    )
    per_task = ", ".join(f"{n} on {t}" for t, n in TASK_EPISODES.items())
    parser.add_argument("--episodes", type=int, default=None, help=f"seeds per cell (default: the grader's, {EPISODES}; {per_task})")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--results", default=None, help="markdown file to update (default: docs/results.md of the fleet_marl checkout)")
    parser.add_argument("--readme", default=None, help="README to update (default: README.md of the fleet_marl checkout)")
    add_protocol_arguments(parser)
    w = parser.add_mutually_exclusive_group()
    w.add_argument(
        "--write",
        action="store_true",
        help="update the files even for a partial run (--tasks/--policies): its rows replace those cells' rows",
    )
    w.add_argument("--no-write", action="store_true", help="print the table only")


def run(args) -> int:
    tasks = [t for t in args.tasks.split(",") if t] or list(TASKS)
    names = [p for p in args.policies.split(",") if p] or list(POLICIES)
    for t in tasks:
        if t not in TASKS:
            raise UsageError(f"--tasks: {t!r}: expected tasks from {', '.join(TASKS)}")
    for n in names:
        if n not in POLICIES:
            raise UsageError(f"--policies: {n!r}: expected policies from {', '.join(POLICIES)}")
    if args.episodes is not None:
        positive("episodes", args.episodes)
    positive("seed", args.seed, 0)
    overrides = protocol_overrides(args)
    if overrides and args.write:
        raise UsageError(
            f"--write with --protocol {overrides['protocol']}: the README's and docs/results.md's table is the simultaneous "
            "protocol's; the sequential protocol's table is printed only (docs/results.md, 'The sequential protocol', has the study's)"
        )
    full = tasks == list(TASKS) and names == list(POLICIES) and not overrides
    do_write = not args.no_write and (full or args.write)
    root = checkout()
    results = Path(args.results) if args.results else (root / "docs" / "results.md" if root else None)
    readme = Path(args.readme) if args.readme else (root / "README.md" if root else None)
    if do_write and (results is None or readme is None):
        raise UsageError(
            "no fleet_marl checkout found to write README.md and docs/results.md into; pass --results and --readme, or --no-write"
        )
    evals = run_all(tasks, names, episodes=args.episodes, seed=args.seed, overrides=overrides)
    print(table(evals))
    if not do_write:
        if overrides and not args.no_write:
            print(
                f"--protocol {overrides['protocol']}: the README and docs/results.md are left as they are (their table is the simultaneous "
                "protocol's)",
                file=sys.stderr,
            )
        elif not args.no_write:
            print(
                "partial run (--tasks/--policies): the README and docs/results.md are left as they are; pass --write to update them",
                file=sys.stderr,
            )
        return 0
    assert results is not None and readme is not None  # do_write: both were found or given (checked above)
    dest = results.parent / DATA
    d = merged(data(evals, args.episodes, args.seed), dest, tasks, names)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(d, indent=1) + "\n")
    print(f"wrote {dest}", file=sys.stderr)
    if root is not None and results == root / "docs" / "results.md" and readme == root / "README.md":
        publish(root, echo=lambda m: print(m, file=sys.stderr))  # the checkout's docs: every block from its data
        return 0
    text = block(d)
    for path in (results, readme):
        if path.name == "results.md" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# Results\n\n## Baselines: the reference policies\n\n")
        if write_block(path, START, END, text):
            print(f"updated {path}", file=sys.stderr)
    return 0


def merged(new: dict, dest: Path, tasks: list[str], names: list[str]) -> dict:
    """The table's data after a run of ``tasks`` x ``names``: its rows in place of the saved
    data's rows of those cells, the saved data's other rows kept (a partial ``--write`` adds to
    the table; it does not drop the tasks it did not play), in the registry's order of tasks and
    policies, every row's score and gap recomputed from its task's reference rows
    (:func:`~fleet_marl.evaluation.baselines.derived`). ``extra_args`` names the tasks and
    policies the table then holds, empty when it holds them all (``make baselines`` reproduces
    every row: each is a function of its seeds). Saved rows of other seeds or episodes are not
    mixed in: that is a :class:`UsageError`, unless the run replaces every row of the task."""
    rows = {(r["task"], r["policy"]): r for r in new["rows"]}
    count = {t: new.get("task_episodes", {}).get(t, new["episodes"]) for t in tasks}
    episodes = new["episodes"]
    if dest.exists() and (set(tasks) != set(TASKS) or set(names) != set(POLICIES)):
        old = json.loads(dest.read_text())
        held = {r["task"]: old.get("task_episodes", {}).get(r["task"], old["episodes"]) for r in old["rows"]}
        for t in tasks:
            replaced = {p for (task, p) in rows if task == t} >= {r["policy"] for r in old["rows"] if r["task"] == t}
            if t in held and (held[t], old["seed"]) != (count[t], new["seed"]) and not (replaced and old["seed"] == new["seed"]):
                raise UsageError(
                    f"--write: {dest} holds {held[t]} episodes of {t} from seed {old['seed']}, this run {count[t]} from seed "
                    f"{new['seed']}; a partial run adds to the table only with the same seeds, or (same first seed) with every "
                    "policy of the task (or run every task: make baselines)"
                )
        count = {**held, **count}
        rows = {**{(r["task"], r["policy"]): r for r in old["rows"]}, **rows}
        episodes = old["episodes"]
    order = {t: i for i, t in enumerate(TASKS)}, {p: i for i, p in enumerate(POLICIES)}
    keys = sorted(rows, key=lambda k: (order[0].get(k[0], len(TASKS)), order[1].get(k[1], len(POLICIES))))
    held_t = [t for t in TASKS if any(k[0] == t for k in keys)]
    held_p = [p for p in POLICIES if any(k[1] == p for k in keys)]
    extra = ("" if held_t == list(TASKS) else f" --tasks {','.join(held_t)}") + (
        "" if held_p == list(POLICIES) else f" --policies {','.join(held_p)}"
    )
    return {
        **new,
        "episodes": episodes,
        "task_episodes": {t: count[t] for t in held_t if count.get(t, episodes) != episodes},
        "extra_args": extra,
        "rows": derived([rows[k] for k in keys]),
    }


__all__ = ["ERRORS", "EXAMPLES", "add_arguments", "merged", "run"]

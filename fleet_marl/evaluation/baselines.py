"""The baseline table: every reference policy on every task (``make baselines``).

For each task and policy: the mean and standard deviation of the episode welfare over the
seeds, the grader's score, the gap to the hindsight reference and the mean Jain index. The table is written to
``docs/results.md`` and into the README, between the markers ``<!-- baselines:start -->``
and ``<!-- baselines:end -->``, and its data to ``docs/data/baselines.json`` (:data:`DATA`),
from which the tests re-render both blocks.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path

from tqdm import tqdm

from fleet_marl.errors import UsageError
from fleet_marl.evaluation.command import add_protocol_arguments, positive, protocol_overrides
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.evaluation.score import Evaluation, GraderError, evaluate
from fleet_marl.policies import POLICIES
from fleet_marl.tasks import TASKS

START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
#: Where a written table's data goes, relative to the folder of the results file (docs/): the
#: test that ties the docs to their data re-renders the README's and results.md's block from it.
DATA = "data/baselines.json"
#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError, GraderError)
EXAMPLES = """examples:
  fleet-marl baselines                          # 10 seeds, every task and policy; updates README.md and docs/results.md
  fleet-marl baselines --tasks tiny,easy --episodes 3  # a partial run prints the table and writes nothing (--write to force)
  fleet-marl baselines --tasks medium --protocol sequential --turn-order rotating  # the AEC loop; prints the table only
"""


def run_all(tasks, policies, episodes: int = 10, seed: int = 0, progress: bool = True, overrides: dict | None = None) -> list[Evaluation]:
    """Evaluate every policy on every task (the references come from the grader's cache);
    ``overrides`` are the env's (``protocol``, ``turn_order``)."""
    out = []
    bar = None
    if progress:
        bar = tqdm(total=len(tasks) * len(policies), desc="baselines", unit="eval", file=sys.stderr)
    for task in tasks:
        for name in policies:
            if bar is not None:
                bar.set_postfix_str(f"{task}/{name}")
            out.append(evaluate(task, name, episodes=episodes, seed=seed, progress=False, overrides=dict(overrides or {})))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return out


#: The fields of a row of the table's data (:func:`rows`), from ``Evaluation.summary()``.
ROW_FIELDS = ("task", "policy", "welfare_mean", "welfare_std", "score", "gap_to_hindsight", "jain_mean", "starvation_events", "degenerate")


def rows(evals: list[Evaluation]) -> list[dict]:
    """The table's data: one dict of :data:`ROW_FIELDS` per evaluation."""
    return [{k: s[k] for k in ROW_FIELDS} for s in (ev.summary() for ev in evals)]


def table(evals: list[Evaluation] | list[dict]) -> str:
    """The markdown table, of evaluations or of their :func:`rows`."""
    lines = [
        "| task | policy | welfare (mean ± std) | score | gap to hindsight | Jain | starvation events | degenerate |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in [r if isinstance(r, dict) else rows([r])[0] for r in evals]:
        g = "–" if s["gap_to_hindsight"] is None else f"{s['gap_to_hindsight']:.2f}"
        lines.append(
            f"| {s['task']} | {s['policy']} | {s['welfare_mean']:.1f} ± {s['welfare_std']:.1f} | {s['score']:.2f} | {g} | {s['jain_mean']:.2f} "
            f"| {s['starvation_events']} | {s['degenerate']} |"
        )
    return "\n".join(lines)


def data(evals: list[Evaluation], episodes: int, seed: int, extra_args: str = "") -> dict:
    """What :func:`block` renders, as the JSON ``fleet-marl baselines`` writes beside the docs
    (:data:`DATA`): the rows, the seeds, the command's extra arguments and the Python version."""
    return {"episodes": episodes, "seed": seed, "extra_args": extra_args, "python": platform.python_version(), "rows": rows(evals)}


def block(evals: list[Evaluation] | dict, episodes: int = 0, seed: int = 0, extra_args: str = "") -> str:
    """The table with the command and the seeds that reproduce it, from evaluations (and
    ``episodes``, ``seed``, ``extra_args``) or from their :func:`data`."""
    d = evals if isinstance(evals, dict) else data(evals, episodes, seed, extra_args)
    episodes, seed, extra_args = d["episodes"], d["seed"], d["extra_args"]
    seeds = f"{seed}..{seed + episodes - 1}"
    cmd = f"fleet-marl baselines --episodes {episodes} --seed {seed}{extra_args}"
    how = f"`{cmd}`" if extra_args else f"`make baselines` (`{cmd}`)"
    return (
        f"{START}\n"
        f"Episode welfare over seeds {seeds} ({episodes} episodes per cell; ± is the standard deviation over episodes), "
        f"score = (W − W_random) / (W_planner − W_random) clipped to [0, 1], gap to hindsight = (W_hindsight − W) / "
        f"(W_hindsight − W_random) (0 at the hindsight reference, which plans with the episode's future in hand; docs/policies.md), "
        f"Jain's index of normalized service (mean over "
        f"episodes); starvation events and degenerate tenant-rounds are summed over tenants and episodes. "
        f"Reproduce with {how}; Python {d['python']}.\n\n"
        f"{table(d['rows'])}\n{END}"
    )


def checkout() -> Path | None:
    """The fleet_marl source checkout this package runs from (None for an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "README.md").is_file() else None


def write(path: Path, text: str) -> bool:
    """Replace the marked block in ``path`` (or append it); True when the file changed."""
    old = path.read_text() if path.is_file() else ""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _: text, old) if pattern.search(old) else (old.rstrip() + "\n\n" + text + "\n" if old else text + "\n")
    if new != old:
        path.write_text(new)
        return True
    return False


def add_arguments(parser) -> None:
    parser.add_argument("--tasks", default="", help="comma-separated tasks (default: all of " + ", ".join(TASKS) + ")")
    parser.add_argument("--policies", default="", help="comma-separated reference policies (default: all)")
    parser.add_argument("--episodes", type=int, default=10, help="seeds per cell (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--results", default=None, help="markdown file to update (default: docs/results.md of the fleet_marl checkout)")
    parser.add_argument("--readme", default=None, help="README to update (default: README.md of the fleet_marl checkout)")
    add_protocol_arguments(parser)
    w = parser.add_mutually_exclusive_group()
    w.add_argument("--write", action="store_true", help="update the files even for a partial run (--tasks/--policies)")
    w.add_argument("--no-write", action="store_true", help="print the table only")


def run(args) -> int:
    tasks = [t for t in args.tasks.split(",") if t] or list(TASKS)
    names = [p for p in args.policies.split(",") if p] or list(POLICIES)
    for t in tasks:
        if t not in TASKS:
            raise UsageError(f"--tasks: {t!r}: expected tasks from {', '.join(TASKS)}")
    for n in names:
        if n not in POLICIES:
            raise UsageError(f"--policies: {n!r}: expected reference policies from {', '.join(POLICIES)}")
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
    extra = ("" if tasks == list(TASKS) else f" --tasks {','.join(tasks)}") + (
        "" if names == list(POLICIES) else f" --policies {','.join(names)}"
    )
    d = data(evals, args.episodes, args.seed, extra)
    text = block(d)
    assert results is not None and readme is not None  # do_write: both were found or given (checked above)
    dest = results.parent / DATA
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(d, indent=1) + "\n")
    print(f"wrote {dest}", file=sys.stderr)
    for path in (results, readme):
        if path.name == "results.md" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# Results\n\n## Baselines: the reference policies\n\n")
        if write(path, text):
            print(f"updated {path}", file=sys.stderr)
    return 0


__all__ = ["DATA", "EXAMPLES", "ROW_FIELDS", "add_arguments", "block", "checkout", "data", "rows", "run", "run_all", "table", "write"]

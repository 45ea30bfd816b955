"""The ``open_loop`` baseline for the grader, and ``fleet-marl open-loop``.

``open_loop`` is a policy spec the grader loads (a :class:`~fleet_marl.evaluation.loading.PolicyLoader`
registered when ``fleet_marl.evaluation`` is imported): the
:class:`~fleet_marl.policies.open_loop.OpenLoopPolicy` whose table
:func:`~fleet_marl.evaluation.reference.open_loop_table` searched on ``OPEN_LOOP_SEEDS`` for the
env's scenario, cached on disk. On a suite task the grader plays instead the one table searched
on the task's train scenarios (:mod:`~fleet_marl.evaluation.suite_open_loop`), never one fit on
the graded scenario. A ``.json`` file that ``fleet-marl open-loop --out`` wrote is a
policy spec too (``fleet-marl evaluate --policy table.json``).

``fleet-marl open-loop --task T --seeds 0-9 --out F.json`` runs the search
(:func:`fleet_marl.policies.open_loop.search`) on the seeds given, prints each kept move and
the table's welfare on each seed, and writes the table.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader, register_loader
from fleet_marl.evaluation.reference import OPEN_LOOP, OPEN_LOOP_LEVELS, OPEN_LOOP_SEEDS, OPEN_LOOP_SWEEPS, code_version, open_loop_table
from fleet_marl.evaluation.runner import make_env
from fleet_marl.policies import fleet_env
from fleet_marl.policies.open_loop import OpenLoopPolicy, search
from fleet_marl.tasks import TASKS


def _accepts(spec: str) -> bool:
    return spec == OPEN_LOOP or spec.endswith(".json")


def _load(spec: str, env) -> OpenLoopPolicy:
    try:
        if spec == OPEN_LOOP:
            return OpenLoopPolicy(env, open_loop_table(fleet_env(env).config))
        if not Path(spec).is_file():
            raise ValueError(f"file {spec} not found (looked from {Path.cwd()})")
        return OpenLoopPolicy.from_file(env, spec)
    except ValueError as exc:
        raise PolicyError(spec, str(exc)) from None


#: ``open_loop`` (the searched baseline of the env's scenario) and ``table.json`` (a table of ``fleet-marl open-loop --out``).
LOADER = PolicyLoader(
    "open_loop", _accepts, _load, "'open_loop' (the open-loop baseline) or an open-loop table file.json (fleet-marl open-loop --out)"
)
register_loader(LOADER)

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError,)
DESCRIPTION = (
    "Search an open-loop table -- one joint action per round, blind to the state -- by coordinate ascent over whole "
    "episodes on the seeds given, maximizing the mean welfare (docs/policies.md, 'The open-loop baseline')."
)
EXAMPLES = f"""examples:
  fleet-marl open-loop --task tiny --seeds 0-9 --out tiny_open_loop.json
  fleet-marl open-loop --task trace --seeds 1000-1009 --levels 1,4,16 --sweeps 2 --out trace.json
  fleet-marl evaluate --task trace --policy trace.json      # grade the table on seeds 0..9
  fleet-marl evaluate --task trace --policy open_loop       # the grader's baseline: the search on seeds {OPEN_LOOP_SEEDS[0]}..{OPEN_LOOP_SEEDS[-1]}
"""


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,7"`` (or both, ``"0-4,10"``) as a list of seeds."""
    out: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        lo, dash, hi = part.partition("-")
        if not (lo.isdigit() and (not dash or hi.isdigit())) or (dash and int(hi) < int(lo)):
            raise UsageError(f"--seeds {text!r}: {part!r} is not a seed or a range lo-hi of non-negative integers (e.g. 0-9 or 0,3,7)")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise UsageError(f"--levels {text!r}: expected block counts, integers >= 1 separated by commas (e.g. 1,4,16)")
    return levels


def add_arguments(parser) -> None:
    parser.add_argument("--task", default="tiny", help=f"one of {', '.join(TASKS)} (default tiny)")
    first, last = OPEN_LOOP_SEEDS[0], OPEN_LOOP_SEEDS[-1]
    parser.add_argument(
        "--seeds", default=f"{first}-{last}", help=f"seeds to search on: lo-hi or a,b,c (default {first}-{last}, the grader's)"
    )
    levels = ",".join(map(str, OPEN_LOOP_LEVELS))
    parser.add_argument("--levels", default=levels, help=f"block counts of the levels, coarse to fine (default {levels})")
    parser.add_argument("--sweeps", type=int, default=OPEN_LOOP_SWEEPS, help=f"passes per level at most (default {OPEN_LOOP_SWEEPS})")
    parser.add_argument("--out", default=None, help="write the table as JSON (a policy spec: fleet-marl evaluate --policy F.json)")
    parser.add_argument("--quiet", action="store_true", help="print the result only, not each kept move")


def run(args) -> int:
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    if args.sweeps < 0:
        raise UsageError(f"--sweeps {args.sweeps}: expected an integer >= 0")
    seeds, levels = parse_seeds(args.seeds), parse_levels(args.levels)
    env = make_env(args.task)
    echo = None if args.quiet else (lambda m: print(f"  {m}", file=sys.stderr))
    t0 = time.perf_counter()
    found = search(env.config, seeds, levels=levels, sweeps=args.sweeps, progress=echo)
    seconds = time.perf_counter() - t0
    print(
        f"open-loop search on {args.task}, seeds {args.seeds} ({len(seeds)}), levels {args.levels}, at most {args.sweeps} passes each: "
        f"mean welfare {found.start_welfare:.2f} at the start, {found.mean:.2f} after {len(found.moves)} moves "
        f"({found.episodes} episodes, {seconds:.1f} s)"
    )
    print("welfare per seed: " + ", ".join(f"{s}: {w:.2f}" for s, w in zip(seeds, found.welfare, strict=True)))
    if args.out:
        meta = {
            "task": args.task,
            "seeds": seeds,
            "levels": list(levels),
            "sweeps": args.sweeps,
            "welfare": found.welfare.tolist(),
            "start_welfare": found.start_welfare,
            "episodes": found.episodes,
            "code_version": code_version(),
        }
        Path(args.out).write_text(json.dumps(OpenLoopPolicy(env, found.table).to_dict(**meta)) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


__all__ = ["DESCRIPTION", "EXAMPLES", "LOADER", "add_arguments", "parse_levels", "parse_seeds", "run"]

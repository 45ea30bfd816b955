"""``fleet-marl coupling``: how much the tenants of a task couple under a policy (the measures
are :mod:`fleet_marl.studies.coupling`'s), as a table or ``--json``; ``--all --save`` measures
every built-in task, saves the rows in ``docs/data/coupling.json`` and publishes
``docs/environment.md``'s table from them (:func:`blocks`, a renderer of
:mod:`fleet_marl.studies.publish`). ``--ablate`` measures each task again with each of its
coupling mechanisms turned off in turn (:mod:`fleet_marl.studies.coupling_ablation`); with
``--save`` it writes ``docs/data/coupling_ablation.json`` and the table of what each contributes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from tqdm import tqdm

from fleet_marl.builtin_tasks import BUILTIN
from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.output import print_report
from fleet_marl.studies import coupling_ablation
from fleet_marl.studies.coupling import Settings, measure
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.tasks import TASKS

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError)
#: The policies measured when ``--policy`` is not given.
POLICIES = ("planner", "fair_share")
#: Where ``--save`` puts the rows (relative to the checkout), the doc and its block's markers.
DATA = "docs/data/coupling.json"
DOC = "docs/environment.md"
START, END = "<!-- coupling:start -->", "<!-- coupling:end -->"
#: Where ``--ablate --save`` puts the ablation's rows, and its block's markers in :data:`DOC`.
ABLATION_DATA = "docs/data/coupling_ablation.json"
ABLATION_START, ABLATION_END = "<!-- coupling-ablation:start -->", "<!-- coupling-ablation:end -->"
#: The command that made the committed ablation (``--save`` adds its tasks and any non-default option).
ABLATION_COMMAND = "fleet-marl coupling --ablate --save"
#: The command that made the committed data (``--save`` writes it with its options).
COMMAND = "fleet-marl coupling --all --save"

DESCRIPTION = (
    "How much the tenants of a task couple on the states a policy visits: the externality share "
    "Σ|D − L|/Σ|L|, Agogino and Tumer's factoredness and learnability of the local, global and "
    "difference rewards, and the selfish/team equilibrium ratio (docs/environment.md, 'How much the tenants couple')."
)
EXAMPLES = """examples:
  fleet-marl coupling --task easy                     # planner and fair_share, 2 episodes, 10 states each
  fleet-marl coupling --task hard --policy random --episodes 1 --json
  fleet-marl coupling --all --save                    # every built-in task; writes docs/data/coupling.json and docs/environment.md
  fleet-marl coupling --task capped_rack --ablate      # and again with each coupling mechanism turned off in turn
  fleet-marl coupling --all --ablate --save           # both tables; the ablation in docs/data/coupling_ablation.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", action="append", default=None, metavar="T", help="a task to measure (repeat for more)")
    which.add_argument("--all", action="store_true", help="every built-in task: " + ", ".join(name for name, _, _ in BUILTIN))
    parser.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="P",
        help="a policy (a reference policy's name or any spec evaluate takes; repeat for more; default: " + ", ".join(POLICIES) + ")",
    )
    d = Settings()
    parser.add_argument("--episodes", type=int, default=d.episodes, help=f"episodes per task and policy (default {d.episodes})")
    parser.add_argument("--seed", type=int, default=d.seed, help=f"the first episode's seed (default {d.seed})")
    parser.add_argument(
        "--states",
        type=int,
        default=d.states,
        help=f"visits per episode for the factoredness, learnability and equilibria (default {d.states})",
    )
    parser.add_argument("--samples", type=int, default=d.samples, help=f"others' changes per visit and tenant (default {d.samples})")
    parser.add_argument("--sweeps", type=int, default=d.sweeps, help=f"the most best-response sweeps of an iteration (default {d.sweeps})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--ablate",
        action="store_true",
        help="also measure each task with each coupling mechanism it turns on turned off in turn (the coupling switches; "
        "power: the rack cap raised to its GPUs' TDP sum), and report what each contributes",
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help=f"with --all: save the rows in {DATA} and publish {DOC}'s table; with --ablate: save the ablation in {ABLATION_DATA}",
    )


def settings_of(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` of the options, each checked (a ``UsageError`` names the option, its value and what was expected)."""
    lows = {"episodes": 1, "seed": 0, "states": 1, "samples": 1, "sweeps": 1}
    for name, low in lows.items():
        v = getattr(args, name)
        if v < low:
            raise UsageError(f"--{name} {v}: expected an integer >= {low}")
    return Settings(**{name: getattr(args, name) for name in lows})


def report(tasks: list[str], policies: list[str], settings: Settings, progress: bool = True, ablate: bool = False) -> dict:
    """The command's report: its settings and a row per task and policy; with ``ablate``, also a
    row per task, policy and mechanism turned off (``ablation``) and what each contributes
    (``contributions``, :mod:`fleet_marl.studies.coupling_ablation`)."""
    runs = 1 + (max((len(coupling_ablation.variants(t)) for t in tasks), default=0) if ablate else 0)
    bar = tqdm(
        total=len(tasks) * len(policies) * (settings.episodes + 1) * runs, desc="coupling", unit="step", file=sys.stderr, leave=False
    )
    bar.disable = bar.disable or not progress
    rows, ablated = [], []
    try:
        for task in tasks:
            for policy in policies:
                bar.set_postfix_str(f"{task} {policy}")
                rows.append(measure(task, policy, settings, progress=lambda: bar.update(1)))
                if ablate:
                    ablated += coupling_ablation.ablate(task, policy, settings, progress=lambda: bar.update(1))
    finally:
        bar.close()
    rep: dict = {"settings": dataclasses.asdict(settings), "rows": rows}
    if ablate:
        rep["ablation"] = ablated
        rep["contributions"] = coupling_ablation.contributions(rows, ablated)
    return rep


def _num(v, nd: int) -> str:
    return "∞" if v is None else f"{v:.{nd}f}"


def markdown(rows: list[dict]) -> str:
    """The table of the rows (the text report and the docs block)."""
    out = [
        "| task | policy | tenant-rounds | Σ\\|D − L\\| / Σ\\|L\\| | rounds with D ≠ L | factoredness local / global / difference "
        "| learnability local / global / difference | selfish / team welfare (min) | visits (converged) |",
        "|---|---|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        f, lr, eq = r["factoredness"], r["learnability"], r["equilibrium"] or {}
        ratio = "n/a" if eq.get("ratio") is None else f"{eq['ratio']:.3f} ({eq['ratio_min']:.3f})"
        conv = f"{r['states']} ({100 * eq.get('converged', 0.0):.0f} %)"
        out.append(
            f"| {r['task']} | {r['policy']} | {r['tenant_rounds']} | {r['externality_share']:.3f} | {100 * r['rounds_differ']:.1f} % "
            f"| {' / '.join(_num(f[s], 3) for s in ('local', 'global', 'difference'))} "
            f"| {' / '.join(_num(lr[s], 2) for s in ('local', 'global', 'difference'))} | {ratio} | {conv} |"
        )
    return "\n".join(out)


def text(rep: dict) -> str:
    """The report as text: its settings, then the table."""
    s = rep["settings"]
    head = ", ".join(f"{k} {v}" for k, v in s.items())
    out = f"coupling ({head})\n\n{markdown(rep['rows'])}"
    if "contributions" in rep:
        out += "\n\nwith each mechanism turned off in turn:\n\n" + coupling_ablation.markdown(rep["contributions"])
    return out


def _options(rep: dict) -> str:
    """The options of ``rep``'s settings that differ from the defaults, and its ``--policy``
    options unless it covers every reference policy."""
    d = dataclasses.asdict(Settings())
    extra = "".join(f" --{k} {v}" for k, v in rep["settings"].items() if v != d[k])
    policies = list(dict.fromkeys(r["policy"] for r in rep["rows"]))
    return extra + ("" if policies == list(POLICIES) else "".join(f" --policy {p}" for p in policies))


def _write(root: str | Path, rel: str, command: str, rep: dict) -> Path:
    path = Path(root) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, **rep}, indent=1) + "\n")
    return path


def save(rep: dict, root: str | Path) -> Path:
    """Write ``rep`` and :data:`COMMAND` (with any non-default option) to ``root``'s :data:`DATA`."""
    return _write(root, DATA, COMMAND + _options(rep), rep)


def save_ablation(rep: dict, root: str | Path) -> Path:
    """Write the ablation of ``rep`` (its rows, the ablated rows, the contributions) and the command
    that made it (``--all`` when it covers every built-in task, else its ``--task`` options) to
    ``root``'s :data:`ABLATION_DATA`."""
    tasks = list(dict.fromkeys(r["task"] for r in rep["rows"]))
    extra = " --all" if tasks == [name for name, _, _ in BUILTIN] else "".join(f" --task {t}" for t in tasks)
    return _write(root, ABLATION_DATA, ABLATION_COMMAND + extra + _options(rep), rep)


def ablation_block(data: dict) -> str:
    """The ablation's block of :data:`DOC` rendered from its saved data."""
    return (
        f"{ABLATION_START}\n<!-- written by `{ABLATION_COMMAND}` from {ABLATION_DATA}; edit the text around it, not this block -->\n\n"
        f"```bash\n{data['command']}\n```\n\n{coupling_ablation.markdown(data['contributions'])}\n{ABLATION_END}"
    )


def block(data: dict) -> str:
    """The block of :data:`DOC` rendered from the saved data."""
    return (
        f"{START}\n<!-- written by `{COMMAND}` from {DATA}; edit the text around it, not this block -->\n\n"
        f"```bash\n{data['command']}\n```\n\n{markdown(data['rows'])}\n{END}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The block of :data:`DOC` when ``root`` has the data (for :mod:`fleet_marl.studies.publish`)."""
    out = []
    path, abl = Path(root) / DATA, Path(root) / ABLATION_DATA
    if path.is_file():
        out.append((DOC, START, END, block(json.loads(path.read_text()))))
    if abl.is_file():
        out.append((DOC, ABLATION_START, ABLATION_END, ablation_block(json.loads(abl.read_text()))))
    return out


def run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    tasks = [name for name, _, _ in BUILTIN] if args.all else args.task
    for t in tasks:
        if t not in TASKS:
            raise UsageError(f"--task {t!r}: expected one of {', '.join(TASKS)}")
    if args.save and not args.all and not args.ablate:
        raise UsageError(f"--save with --task: the table of {DOC} covers every built-in task; use --all --save (or --ablate --save)")
    root = checkout_root("fleet-marl coupling --save") if args.save else None
    rep = report(tasks, args.policy or list(POLICIES), settings, ablate=args.ablate)
    if root is not None:
        if args.all:
            print(f"wrote {save({k: rep[k] for k in ('settings', 'rows')}, root)}", file=sys.stderr)
        if args.ablate:
            print(f"wrote {save_ablation(rep, root)}", file=sys.stderr)
        publish(root, echo=lambda m: print(m, file=sys.stderr))
    return print_report(rep, args.json, lambda r: print(text(r)))


__all__ = [
    "ABLATION_COMMAND",
    "ABLATION_DATA",
    "ABLATION_END",
    "ABLATION_START",
    "COMMAND",
    "DATA",
    "DESCRIPTION",
    "DOC",
    "END",
    "ERRORS",
    "EXAMPLES",
    "POLICIES",
    "START",
    "ablation_block",
    "add_arguments",
    "block",
    "blocks",
    "markdown",
    "report",
    "run",
    "save",
    "save_ablation",
    "settings_of",
    "text",
]

"""``fleet-marl suite``: the credit-assignment suite (:mod:`fleet_marl.suite`).

``list`` shows every suite task with its family, its role, its cluster and the coupling measured
on it (from ``docs/data/suite_coupling.json``); ``show`` prints one scenario's config; ``coupling``
measures each task's coupling (:func:`fleet_marl.studies.coupling.measure`) on its first train
scenarios under the reference policies and, with ``--save``, writes ``docs/data/suite_coupling.json``
and docs/suite.md's table from it (:func:`blocks`, a renderer of :mod:`fleet_marl.studies.publish`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fleet_marl import suite
from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.output import print_report
from fleet_marl.studies.coupling import Settings, measure
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.training.config import checkout

ERRORS = (UsageError, PolicyError)
#: The policies whose play the coupling is measured on (good play, as ``fleet-marl coupling``).
POLICIES = ("planner", "fair_share")
#: Where ``coupling --save`` writes, the doc it publishes into and its block's markers.
DATA = "docs/data/suite_coupling.json"
DOC = "docs/suite.md"
START, END = "<!-- suite-coupling:start -->", "<!-- suite-coupling:end -->"
#: A task is flagged misaligned on good play when both policies' shares reach this and both
#: ratios stay below :data:`RATIO` (issue 47's bar for a coupled task), aligned when every
#: share stays below :data:`ALIGNED` (the public-API check's bar for ``easy``).
SHARE, RATIO, ALIGNED = 0.2, 0.8, 0.05
COMMAND = "fleet-marl suite coupling --save"

DESCRIPTION = "The credit-assignment suite: families of tasks sweeping what couples tenants and team size, with train, held-out and shifted scenarios."
EXAMPLES = """examples:
  fleet-marl suite list                               # every suite task, its role and its measured coupling
  fleet-marl suite show scarce_n8 --seed 3 --split heldout   # one scenario's config (JSON)
  fleet-marl suite coupling --task power_n16          # measure one task on its first train scenarios
  fleet-marl suite coupling --save                    # every task up to n = 64; writes docs/data/suite_coupling.json and docs/suite.md
  fleet-marl suite coupling --task power_n128 --scenarios 1 --save   # one more task, merged into the saved rows
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="every suite task")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    sh = sub.add_parser("show", help="one scenario's config, as JSON")
    sh.add_argument("task", help="a suite task (fleet-marl suite list)")
    sh.add_argument("--seed", type=int, default=0, help="the scenario seed (default 0)")
    sh.add_argument("--split", default="train", help=f"one of {', '.join(suite.SPLITS)} (default train)")
    cp = sub.add_parser("coupling", help="measure each task's coupling on its first train scenarios")
    cp.add_argument("--task", action="append", default=None, metavar="T", help="a suite task (repeat; default: every task up to --max-n)")
    cp.add_argument("--max-n", type=int, default=64, help="with no --task: the largest team size measured (default 64)")
    cp.add_argument("--scenarios", type=int, default=3, help="train scenarios per task (seeds 0..K-1; default 3)")
    cp.add_argument("--policy", action="append", default=None, metavar="P", help=f"a policy (default: {', '.join(POLICIES)})")
    cp.add_argument("--states", type=int, default=10, help="visits per episode for the measures (default 10)")
    cp.add_argument("--json", action="store_true", help="print the report as JSON")
    cp.add_argument(
        "--save",
        action="store_true",
        help=f"save the rows in {DATA} (replacing those of the same task and policy) and publish {DOC}'s table",
    )


def _cluster(cfg: dict) -> str:
    c = cfg["cluster"]
    gpus = 8 * len(c["gpu_types"])
    parts = [f"{gpus} GPUs", cfg["arbiter"]["mechanism"]]
    if "rack_power_cap_w" in c:
        per = c["nodes_per_rack"] * 8 * suite.H100_TDP_W
        parts.append(f"racks at {c['rack_power_cap_w'] / per:.0%} of TDP")
    if c.get("uplink_oversubscription", 1.0) > 1.0:
        parts.append(f"1:{c['uplink_oversubscription']:g} uplinks")
    return ", ".join(parts)


def measured(root: Path | None = None) -> dict[str, dict]:
    """The committed coupling of each suite task (``{task: {policy: row}}``), empty when none is committed."""
    path = (root or checkout() or Path(".")) / DATA
    if not path.is_file():
        return {}
    out: dict[str, dict] = {}
    for r in json.loads(path.read_text())["rows"]:
        out.setdefault(r["task"], {})[r["policy"]] = r
    return out


def verdict(rows: dict[str, dict]) -> str:
    """``misaligned``, ``aligned`` or ``weak`` on good play, from a task's rows per policy (:data:`SHARE`, :data:`RATIO`, :data:`ALIGNED`)."""
    if not rows:
        return "not measured"
    shares = [r["share"] for r in rows.values()]
    ratios = [r["ratio"] for r in rows.values() if r["ratio"] is not None]
    if all(s >= SHARE for s in shares) and ratios and all(r <= RATIO for r in ratios):
        return "misaligned"
    if all(s < ALIGNED for s in shares):
        return "aligned"
    return "weak"


def listing() -> list[dict]:
    """A row per suite task: its name, family, role, n, cluster, shift and measured coupling."""
    got = measured()
    out = []
    for name, t in suite.SUITE.items():
        cfg = suite.scenario(name, 0)
        rows = got.get(name, {})
        out.append(
            {
                "task": name,
                "family": t.family.name,
                "role": t.family.role,
                "n": t.n,
                "cluster": _cluster(cfg),
                "shift": t.family.shift,
                "coupling": {p: {"share": r["share"], "ratio": r["ratio"]} for p, r in rows.items()},
                "on_good_play": verdict(rows),
            }
        )
    return out


def _num(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def list_text(rows: list[dict]) -> str:
    out = ["| task | role | cluster | planner share / ratio | fair_share share / ratio | on good play |", "|---|---|---|---|---|---|"]
    for r in rows:
        c = r["coupling"]
        cells = [f"{_num(c[p]['share'])} / {_num(c[p]['ratio'])}" if p in c else "not measured" for p in POLICIES]
        out.append(f"| {r['task']} | {r['role']} | {r['cluster']} | {cells[0]} | {cells[1]} | {r['on_good_play']} |")
    return "\n".join(out)


def coupling_rows(tasks: list[str], policies: list[str], scenarios: int, states: int, progress: bool = True) -> list[dict]:
    """Each task's coupling under each policy: the mean over its train scenarios ``0..scenarios-1`` (one episode each)."""
    bar = tqdm(total=len(tasks) * len(policies) * scenarios, desc="suite coupling", unit="scenario", file=sys.stderr, leave=False)
    bar.disable = bar.disable or not progress
    out = []
    try:
        for name in tasks:
            for pol in policies:
                per = []
                for s in range(scenarios):
                    bar.set_postfix_str(f"{name} {pol} {s}")
                    cfg = suite.scenario(name, s)
                    r = measure(cfg, pol, Settings(episodes=1, seed=suite.env_seed(s), states=states))
                    per.append((r["externality_share"], r["equilibrium"]["ratio"], r["learnability"]))
                    bar.update(1)
                ratios = [p[1] for p in per if p[1] is not None]
                learn = {k: [p[2][k] for p in per if p[2][k] is not None] for k in ("local", "global", "difference")}
                out.append(
                    {
                        "task": name,
                        "policy": pol,
                        "scenarios": scenarios,
                        "states": states,
                        "share": float(np.mean([p[0] for p in per])),
                        "share_range": [float(min(p[0] for p in per)), float(max(p[0] for p in per))],
                        "ratio": float(np.mean(ratios)) if ratios else None,
                        "ratio_range": [float(min(ratios)), float(max(ratios))] if ratios else None,
                        "learnability": {k: (float(np.mean(v)) if v else None) for k, v in learn.items()},
                    }
                )
    finally:
        bar.close()
    return out


def merge(path: Path, rep: dict) -> dict:
    """The saved data with ``rep``'s rows in place of the rows of the same task and policy, in suite order."""
    old = json.loads(path.read_text())["rows"] if path.is_file() else []
    rows = {(r["task"], r["policy"]): r for r in old + rep["rows"]}
    order = {name: i for i, name in enumerate(suite.SUITE)}
    return {"rows": [rows[k] for k in sorted(rows, key=lambda k: (order.get(k[0], len(order)), k[1]))]}


def block(data: dict) -> str:
    """docs/suite.md's table of the committed coupling."""
    rows: dict[str, dict] = {}
    for r in data["rows"]:
        rows.setdefault(r["task"], {})[r["policy"]] = r
    head = (
        f"{START}\n<!-- written by `{COMMAND}`; edit the text around it, not this block -->\n\n"
        "Each task's first train scenarios (the *scenarios* column), one episode each, under `planner` and `fair_share`: "
        "the externality share Σ|D − L|/Σ|L| and the selfish/team welfare "
        "ratio (means over the scenarios, the range in brackets), and the learnability of the global and difference rewards "
        f"under `planner`. *On good play*: **misaligned** when every share ≥ {SHARE} and every ratio ≤ {RATIO}, **aligned** when "
        f"every share < {ALIGNED}, else weak.\n"
    )
    table = [
        "| task | role | scenarios | share (planner) | ratio (planner) | share (fair_share) | ratio (fair_share) | learnability global / difference | on good play |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r, k):
        if r is None or r[k] is None:
            return "–"
        lo, hi = r[f"{k}_range"]
        return f"{r[k]:.3f} [{lo:.2f}, {hi:.2f}]"

    for name, pr in rows.items():
        t = suite.SUITE[name]
        p, f = pr.get("planner"), pr.get("fair_share")
        any_row = next(iter(pr.values()))
        lg = "–" if p is None else f"{_num(p['learnability']['global'])} / {_num(p['learnability']['difference'])}"
        table.append(
            f"| `{name}` | {t.family.role} | {any_row['scenarios']} | {cell(p, 'share')} | {cell(p, 'ratio')} | {cell(f, 'share')} | {cell(f, 'ratio')} | {lg} | {verdict(pr)} |"
        )
    return head + "\n" + "\n".join(table) + "\n" + END


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """docs/suite.md's block when ``root`` has the data (for :mod:`fleet_marl.studies.publish`)."""
    path = Path(root) / DATA
    return [(DOC, START, END, block(json.loads(path.read_text())))] if path.is_file() else []


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = listing()
        return print_report(rows, args.json, lambda r: print(list_text(r)))
    if args.action == "show":
        try:
            print(json.dumps(suite.scenario(args.task, args.seed, args.split), indent=2))
        except Exception as e:  # a ConfigError names the bad argument
            raise UsageError(str(e)) from e
        return 0
    if args.scenarios < 1 or args.states < 1:
        raise UsageError(f"--scenarios {args.scenarios} --states {args.states}: expected integers >= 1")
    tasks = args.task or [n for n, t in suite.SUITE.items() if t.n <= args.max_n]
    for t in tasks:
        if t not in suite.SUITE:
            raise UsageError(f"--task {t!r}: expected a suite task (fleet-marl suite list)")
    root = checkout_root(COMMAND) if args.save else None
    policies = args.policy or list(POLICIES)
    rep = {"rows": coupling_rows(tasks, policies, args.scenarios, args.states)}
    if root is not None:
        (root / DATA).write_text(json.dumps(merge(root / DATA, rep), indent=1) + "\n")
        print(f"wrote {root / DATA}", file=sys.stderr)
        publish(root, echo=lambda m: print(m, file=sys.stderr))
    return print_report(rep, args.json, lambda r: print(block(r)))


__all__ = ["DATA", "POLICIES", "blocks", "coupling_rows", "listing", "measured", "verdict"]

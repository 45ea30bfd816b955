"""The suite study's power analysis: how many seeds decide each prediction at 95 %.

How to run:  .venv/bin/python experiments/credit_suite_power.py [--json docs/data/credit_suite_power.json]
             [STUDY_FOLDER ...]   (default: docs/data/credit_study, the first study: 10 seeds a cell)

The suite study (``fleet-marl compare --suite``) decides its three predictions by the first
study's rules (:mod:`fleet_marl.studies.credit.torchrl_tables`): 95 % Student-t intervals across
seeds, paired by seed, against the margin ``m`` = 0.05 of the grader's score. How many seeds that
takes depends on how much a paired difference varies from seed to seed. This script reads the
runs of committed studies (their ``results.csv``) and, for every (part, setting, N, arm) that has
a ``difference`` run on at least three common seeds, measures the standard deviation ``sd`` of

- the held-out score difference, arm − difference (the rule of "global's gap widens" and of
  "Shapley ≈ difference"), and
- the starvation events per episode, arm − difference (the rule of "local starves others"),

and prints the seeds ``k`` at which the interval's half-width ``t(0.975, k − 1) · sd / sqrt(k)``
falls below the margin, the smallest effect the rules resolve: fewer seeds cannot tell an effect
of ``m`` from none. (For starvation the effect to resolve is one event per episode, the rule's
"did not hold" bound.) It also prints the seeds that decide the effect as measured: the interval
clears 0 for a difference of at least the margin, and clears ``m`` (an equivalence) for a smaller one. A study that runs ``max(k, 10)`` seeds per cell decides every effect of at
least the margin; the issue asks for at least 10.

Where a difference is identically 0 across seeds (two arms that learn the same policy), ``sd`` is
0 and one pair of seeds decides; the table says so rather than hiding the cell.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from fleet_marl.studies import store
from fleet_marl.studies.credit.stats import _t95
from fleet_marl.studies.credit.torchrl_tables import MARGIN, paired

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "docs/data/credit_study",)
#: The starvation effect the rule resolves: its "did not hold" bound, one event per episode.
STARVATION_EFFECT = 1.0
#: The most seeds the table searches (beyond it: "> 40").
MAX_SEEDS = 40


def seeds_needed(sd: float, effect: float) -> int | None:
    """The fewest seeds k >= 2 whose 95 % half-width ``t(k) sd / sqrt(k)`` is at most ``effect``
    (None beyond :data:`MAX_SEEDS`)."""
    for k in range(2, MAX_SEEDS + 1):
        if _t95(k) * sd / math.sqrt(k) <= effect:
            return k
    return None


def cells(rows: list[dict]) -> list[dict]:
    """Every (part, setting, n, arm != difference) with a paired difference on >= 3 seeds: its sds and seeds needed."""
    out = []
    keys = sorted({(r["part"], r["setting"], int(r["n"]), r["arm"]) for r in rows if r["arm"] != "difference"})
    for part, setting, n, arm in keys:
        m, _, _, k, d = paired(rows, part, setting, n, arm, "difference", "score")
        if k < 3:
            continue
        sm, _, _, _, ds = paired(rows, part, setting, n, arm, "difference", "starvation_events")
        sd, sds = float(np.std(d, ddof=1)), float(np.std(ds, ddof=1)) if len(ds) > 1 else float("nan")
        out.append(
            {
                "part": part,
                "setting": setting,
                "n": n,
                "arm": arm,
                "seeds": k,
                "score_diff": m,
                "score_sd": sd,
                "seeds_for_margin": seeds_needed(sd, MARGIN),
                # an effect as large as the one measured: its interval clears 0 (an equivalence, |Δ| < m: clears m)
                "seeds_for_effect": seeds_needed(sd, abs(m) if abs(m) >= MARGIN else MARGIN - abs(m)),
                "starvation_diff": sm,
                "starvation_sd": sds,
                "seeds_for_starvation": seeds_needed(sds, STARVATION_EFFECT) if not math.isnan(sds) else None,
            }
        )
    return out


def _k(v: int | None) -> str:
    return f"> {MAX_SEEDS}" if v is None else str(v)


def table(rows: list[dict]) -> str:
    head = "| study | setting | N | arm − difference | seeds | Δ score | sd | seeds for ±0.05 | seeds for the Δ measured | Δ starvation | sd | seeds for ±1 |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in rows:
        lines.append(
            f"| {c['study']} | {c['setting']} | {c['n']} | `{c['arm']}` | {c['seeds']} | {c['score_diff']:+.3f} | {c['score_sd']:.3f} | "
            f"{_k(c['seeds_for_margin'])} | {_k(c['seeds_for_effect'])} | {c['starvation_diff']:+.1f} | {c['starvation_sd']:.1f} | {_k(c['seeds_for_starvation'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="*", type=Path, default=list(DEFAULT))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    out = []
    for folder in args.studies:
        for c in cells(store.read_rows(folder / "results.csv")):
            out.append({"study": folder.name, **c})
    print(table(out))
    shares = {}
    for col, what in (("seeds_for_margin", "resolve the margin"), ("seeds_for_effect", "decide the effect measured")):
        ks = [c[col] for c in out if c["part"] == "scaling"]
        shares[col] = float(np.mean([k is not None and k <= 10 for k in ks])) if ks else float("nan")
        print(f"cells where 10 seeds {what}: {shares[col]:.0%} of {len(ks)}")
    if args.json:
        data = {"margin": MARGIN, "starvation_effect": STARVATION_EFFECT, "share_decided_by_10_seeds": shares, "cells": out}
        args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()

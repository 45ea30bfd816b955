"""The credit study's follow-up: Shapley against difference under proportional share at N = 64, 20 seeds.

How to run:  .venv/bin/python experiments/credit_followup.py [--study runs/credit_study] [--out runs/credit_followup]

The full study (``fleet-marl compare``, docs/credit_assignment.md) left one verdict undecided:
at N = 64 under ``proportional``, the score gap ``shapley - difference`` over 10 seeds was
-0.030 ± 0.032, an interval that crosses the equivalence margin (-0.05). This script runs the
same two arms at that one setting for seeds 10..19 with the study's exact settings
(:class:`~fleet_marl.studies.credit.torchrl_design.Study` with ``ns=(64,)``, ``arms=("difference",
"shapley")``, ``mechanisms=("proportional",)``, no sharing part, ``seeds=20``), reusing the
study's own rows for seeds 0..9 (copied from ``--study`` into the new folder, so only the 20
new runs train: about 13 minutes, two at a time), then prints the verdict by the study's rule
(:func:`fleet_marl.studies.credit.torchrl_tables.verdict_shapley`) on the 20 seeds. Resumable like the
study: run it again after a stop.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from fleet_marl.studies import store
from fleet_marl.studies.credit import runs, torchrl_design, torchrl_tables


def study(out: str) -> torchrl_design.Study:
    return torchrl_design.Study(ns=(64,), arms=("difference", "shapley"), mechanisms=("proportional",), sharing_arms=(), seeds=20, out=out)


def seed_from(src: Path, out: Path, s: torchrl_design.Study) -> int:
    """Copy the full study's runs of this setting into a new ``out``; returns how many."""
    runs.prepare(s)
    keep = lambda r: r["part"] == "scaling" and r["setting"] == "proportional" and r["n"] == "64" and r["arm"] in s.arms  # noqa: E731
    n = 0
    for name, cols in (("curves.csv", torchrl_design.CURVE_COLUMNS), ("results.csv", torchrl_design.RESULT_COLUMNS)):
        with open(src / name) as f:
            rows = [r for r in csv.DictReader(f) if keep(r)]
        store.append(out / name, cols, rows)
        n = len(rows)
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="runs/credit_study", help="the full study's folder (or docs/data/credit_study)")
    ap.add_argument("--out", default="runs/credit_followup")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    s = study(a.out)
    out = Path(a.out)
    if not (out / "study.json").exists():
        print(f"copied {seed_from(Path(a.study), out, s)} runs of seeds 0..9 from {a.study}")
    runs.run(s, jobs=a.jobs)
    rows = store.read_rows(out / "results.csv")
    v = torchrl_tables.verdict_shapley(rows, "proportional")
    print(f"Shapley ≈ difference, proportional, N = 64, {s.seeds} seeds: {v['verdict']}; {v['why']}")


if __name__ == "__main__":
    main()

"""The pilot of the credit-assignment study on the suite: what one run costs, to size the study.

How to run:  taskset -c 0 .venv/bin/python experiments/credit_suite_pilot.py [--families aligned,power] [--n 8,32]
             [--arms difference,local] [--seed 0] [--cache DIR] [--json runs/credit_suite_pilot.json]

For each (family, n) it first computes the grader's references of the scenarios the study grades
(random, planner and hindsight on scenarios 0 .. episodes - 1 of the held-out and train splits:
:meth:`SuiteStudy.reference_jobs`), timed one by one, in a fresh grader cache (``--cache``, default
a new temporary folder) so they are timed cold, as the study's first session pays them; then it
trains and grades one run per arm (``run_one``, what a worker of ``fleet-marl compare --suite``
runs, at the study's default budget: 24 iterations of 2048 / n clusters x 8 steps), one at a time,
with the references cached. Times are wall seconds and this process's CPU seconds (a core shared
with other work inflates the first, not the second).

The projection of the full study (``SuiteStudy()``: its families, n, arms, seeds and episodes)
on ``--cores`` cores is CPU seconds divided by cores (runs fill the cores; one run per core):

- a measured (family, n, arm): its CPU seconds;
- an arm not measured: ``difference``'s training CPU at that (family, n) times the ratio of the
  arm's training seconds to ``difference``'s at the same N in the committed study
  (``docs/data/credit_study/results.csv``: ``easy`` scaled to N, the same budget), its grading
  ``difference``'s (grading plays the policy alone: the same cost for every arm);
- an n not measured: training from the nearest measured n times the committed study's ratio
  of ``difference``'s training seconds at the two N; grading by a power law through the
  measured n (``a n^b`` per family); references from scenario 0 of each split timed at that n
  (``--ref-n``), times ``episodes``.

Results to expect: see docs/suite.md, "The study on the suite".
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "data" / "credit_study" / "results.csv"


def timed(fn, *args):
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t, time.process_time() - c


def committed_train_seconds() -> dict[tuple[int, str], float]:
    """Mean training seconds per (N, arm) of the committed study's scaling runs."""
    acc: dict[tuple[int, str], list[float]] = {}
    with COMMITTED.open() as f:
        for r in csv.DictReader(f):
            if r["part"] == "scaling":
                acc.setdefault((int(r["n"]), r["arm"]), []).append(float(r["train_seconds"]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def power_law(xs: list[int], ys: list[float], x: int) -> float:
    """``a x^b`` through the points (xs, ys) (a constant through one point)."""
    if len(xs) == 1:
        return ys[0]
    b, loga = np.polyfit(np.log(xs), np.log(np.maximum(ys, 1e-9)), 1)
    return float(math.exp(loga) * x**b)


def project(measured: dict, refs: dict, study, ratios: dict[tuple[int, str], float]) -> dict:
    """CPU seconds of ``study``'s runs and references, from the pilot's measures (see the module docstring).
    ``measured[(family, n, arm)] = (train_cpu, eval_cpu)``, ``refs[(family, n)] = cpu of every reference job`` (at the pilot's episodes)."""
    per_run: dict[tuple[str, int, str], float] = {}
    ref_cpu: dict[tuple[str, int], float] = {}
    for f in study.families:
        ns_f = sorted({n for (g, n, _) in measured if g == f})
        for n in sorted(study.ns):
            near = min(ns_f, key=lambda m: (abs(math.log(m / n)), m))
            d_train = measured[(f, near, "difference")][0] * ratios[(n, "difference")] / ratios[(near, "difference")]
            evals = [measured[(f, m, "difference")][1] for m in ns_f]
            ev = measured[(f, n, "difference")][1] if n in ns_f else power_law(ns_f, evals, n)
            for arm in study.arms:
                if (f, n, arm) in measured:
                    per_run[(f, n, arm)] = sum(measured[(f, n, arm)])
                else:
                    base = measured[(f, n, "difference")][0] if n in ns_f else d_train
                    per_run[(f, n, arm)] = base * ratios[(n, arm)] / ratios[(n, "difference")] + ev
            rn = sorted(m for (g, m) in refs if g == f)
            ref_cpu[(f, n)] = refs[(f, n)] if n in rn else power_law(rn, [refs[(f, m)] for m in rn], n)
    return {"per_run": per_run, "refs": ref_cpu}


def main() -> None:
    from fleet_marl.studies.credit.suite_design import SuiteStudy

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(SuiteStudy.families))
    p.add_argument("--n", default="8,32")
    p.add_argument("--arms", default="difference,local")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-hindsight", action="store_true", help="the study's train_hindsight: the train split's gap too")
    p.add_argument(
        "--ref-n",
        default="16,64",
        help="more n whose references are timed on scenario 0 of each split only (no runs), times episodes in the projection",
    )
    p.add_argument("--cache", default=None, help="the grader's cache folder (default: a new temporary one: references timed cold)")
    p.add_argument("--cores", type=int, default=2, help="cores of the projection")
    p.add_argument("--json", default="runs/credit_suite_pilot.json")
    args = p.parse_args()
    os.environ["FLEET_MARL_CACHE"] = args.cache or tempfile.mkdtemp(prefix="fleet_marl_pilot_cache_")

    import torch

    import fleet_marl.torchrl.train  # noqa: F401 -- torch and TorchRL imported before anything is timed
    from fleet_marl.studies.credit import torchrl_runs

    torch.set_num_threads(1)
    families = tuple(x for x in args.families.split(",") if x)
    ns = tuple(int(x) for x in args.n.split(",") if x)
    arms = tuple(x for x in args.arms.split(",") if x)
    if "difference" not in arms:
        raise SystemExit("--arms: the projection needs difference (the other arms are projected from it)")
    study = SuiteStudy(families=families, ns=ns, arms=arms, seeds=args.seed + 1, train_hindsight=args.train_hindsight)
    study.check()
    out: dict = {"settings": study.settings(), "cache": os.environ["FLEET_MARL_CACHE"], "references": [], "runs": []}
    refs: dict[tuple[str, int], float] = {}
    measured: dict[tuple[str, int, str], tuple[float, float]] = {}
    print(f"grader cache: {out['cache']}")
    for f in families:
        for n in ns:
            keys = [("suite", f, n, a, args.seed) for a in arms]
            for job in study.reference_jobs(keys):
                _, wall, cpu = timed(study.reference, job)
                out["references"].append({"job": list(job), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
                refs[(f, n)] = refs.get((f, n), 0.0) + cpu
                print(f"reference {job}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
            for key in keys:
                (row, _), wall, cpu = timed(torchrl_runs.run_one, study, key)
                rec = {
                    "key": list(key),
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "train_s": row["train_seconds"],
                    "eval_s": row["eval_seconds"],
                    "train_cpu_s": round(row["cpu_seconds"] - row["eval_cpu_seconds"], 2),
                    "eval_cpu_s": row["eval_cpu_seconds"],
                    "env_steps": row["env_steps"],
                    "score": round(row["score"], 3),
                    "train_score": round(row["train_score"], 3),
                    "gap": row["gap"],
                    "converged": row["converged"],
                }
                out["runs"].append(rec)
                measured[(f, n, key[3])] = (rec["train_cpu_s"], rec["eval_cpu_s"])
                print(
                    f"run {f} n={n} {key[3]}: {wall:.1f} s wall, {cpu:.1f} s CPU (train {rec['train_cpu_s']:.1f}, "
                    f"grading {rec['eval_cpu_s']:.1f}); held-out score {rec['score']}, train {rec['train_score']}",
                    flush=True,
                )

    for f in families:
        for n in (int(x) for x in args.ref_n.split(",") if x):
            if n in ns:
                continue
            cpu_sum = 0.0
            for split in (study.split, "train"):
                job = (f, n, split, 0)
                _, wall, cpu = timed(study.reference, job)
                out["references"].append({"job": list(job), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "scenario_0_only": True})
                cpu_sum += cpu
                print(f"reference {job}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
            refs[(f, n)] = cpu_sum * study.episodes  # every scenario as scenario 0

    ratios = committed_train_seconds()
    full = SuiteStudy(train_hindsight=args.train_hindsight)
    proj = project(measured, refs, full, ratios)
    per_seed = sum(proj["per_run"][(f, n, a)] for f in full.families for n in full.ns for a in full.arms)
    ref_total = sum(proj["refs"].values())
    lines = []
    for seeds in (full.seeds, 20):
        total = seeds * per_seed + ref_total
        lines.append(
            f"{seeds} seeds: {seeds * per_seed / 3600:.2f} CPU-h of runs + {ref_total / 3600:.2f} CPU-h of references "
            f"= {total / 3600:.2f} CPU-h, {total / args.cores / 3600:.2f} h on {args.cores} cores"
        )
    by_cell = {f"{f}_n{n}": round(sum(proj["per_run"][(f, n, a)] for a in full.arms), 1) for f in full.families for n in full.ns}
    by_arm = {a: round(sum(proj["per_run"][(f, n, a)] for f in full.families for n in full.ns), 1) for a in full.arms}
    out["projection"] = {
        "study": full.settings(),
        "cpu_s_per_seed": round(per_seed, 1),
        "cpu_s_references": round(ref_total, 1),
        "cpu_s_per_seed_by_task": by_cell,
        "cpu_s_per_seed_by_arm": by_arm,
        "cores": args.cores,
        "lines": lines,
    }
    ref_by_split: dict[str, float] = {}
    for r in out["references"]:
        ref_by_split[f"{r['job'][0]}_n{r['job'][1]} {r['job'][2]}"] = round(
            ref_by_split.get(f"{r['job'][0]}_n{r['job'][1]} {r['job'][2]}", 0.0) + r["cpu_s"], 1
        )
    out["projection"]["reference_cpu_s_measured"] = ref_by_split
    out["projection"]["reference_cpu_s_projected"] = {f"{f}_n{n}": round(v, 1) for (f, n), v in proj["refs"].items()}
    print(f"\nreferences, CPU s measured ({full.episodes} scenarios per split): {ref_by_split}")
    print(f"projection of the full study (SuiteStudy(train_hindsight={args.train_hindsight})):")
    print(f"  references, CPU s by task: {out['projection']['reference_cpu_s_projected']}")
    print(f"  CPU s per seed, by task (every arm): {by_cell}")
    print(f"  CPU s per seed, by arm (every task): {by_arm}")
    for line in lines:
        print("  " + line)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

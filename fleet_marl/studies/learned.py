"""The learned rows: each task's trained policy, graded against the reference policies on the
same seeds, as the table of the README, ``docs/results.md`` and ``docs/training.md`` between the markers
``<!-- learned-rows:start -->`` and ``<!-- learned-rows:end -->``.

``fleet-marl train --docs RUN [RUN ...]`` saves finished runs (:func:`save`): each run's
``results.json`` (its final evaluation: the trained policy and every reference policy, each
episode's welfare) and its iteration count from ``metrics.csv`` go to
``docs/data/learned/<task>.json`` for a run of the default engine (TorchRL) and
``docs/data/learned/<task>.<engine>.json`` for another engine's (``easy.rllib.json``), so each
engine's row of a task sits beside the other's; the block is rendered from every file there
(:func:`block`, :func:`blocks`, by ``fleet-marl docs``), a task without a run of the default
engine as a row "not trained yet"; ``tests/test_docs_data.py`` renders the block again from
those files.

Each row: the trained policy's welfare (mean ± std over the seeds), its score and its gap to
the hindsight reference, its welfare minus the planner's paired by seed (mean ± 95% interval,
and the seeds where it is ahead), Jain's index, the best heuristic, the planner, the hindsight
reference, what the training cost and the engine that trained it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from fleet_marl.studies.credit.stats import mean_ci
from fleet_marl.studies.store import StudyError
from fleet_marl.tasks import TASKS
from fleet_marl.training.engines import DEFAULT, ENGINES, UNMARKED_CONFIG

START, END = "<!-- learned-rows:start -->", "<!-- learned-rows:end -->"
#: Where the published runs' data goes, one file per task, relative to the checkout.
DATA = "docs/data/learned"
#: The heuristics a learned row is compared with (the best of them is shown).
HEURISTICS = ("greedy", "fair_share", "precision_expert", "bidder")
#: The files the block goes into, relative to the checkout.
DOCS = ("README.md", "docs/results.md", "docs/training.md")


def record(run: str | Path) -> dict:
    """What a finished run publishes: its ``results.json`` and its ``iterations`` (the last row
    of ``metrics.csv``). A run its ``max_minutes`` cap stopped is published with ``iterations``
    in its ``train_config`` set to the count it ran (the planned count kept as ``capped_at``):
    with a constant learning rate that config trains the same run, bit for bit. With
    ``anneal_lr`` the schedule depends on the planned count, and such a run is refused."""
    run = Path(run)
    res = run / "results.json"
    if not res.is_file():
        raise StudyError(f"--docs {str(run)!r}: no results.json; expected a finished fleet-marl train run graded with --final-episodes")
    data = json.loads(res.read_text())
    with (run / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    data["iterations"] = int(rows[-1]["iteration"]) if rows else 0
    data["run"] = run.name
    tc = data["train_config"]
    if tc.get("iterations", data["iterations"]) > data["iterations"]:  # stopped by its max_minutes cap
        if tc.get("anneal_lr", False):
            raise StudyError(
                f"--docs {str(run)!r}: the run stopped at its max_minutes cap after {data['iterations']} of {tc['iterations']} "
                "iterations with anneal_lr on, so no config reproduces it (the learning rate anneals over the planned "
                "iterations); train it again with iterations this machine finishes"
            )
        # with a constant learning rate the first k iterations are the same in every run: this config reproduces it
        data["capped_at"], tc["iterations"] = tc["iterations"], data["iterations"]
    return data


def engine(rec: dict) -> str:
    """The engine that trained a published run: its config's ``engine`` key (an RLlib config has none)."""
    return str(rec["train_config"].get("engine", UNMARKED_CONFIG))


def filename(rec: dict) -> str:
    """A published run's file in :data:`DATA`: ``<task>.json`` for the default engine, ``<task>.<engine>.json`` otherwise."""
    task, eng = rec["train_config"]["task"], engine(rec)
    return f"{task}.json" if eng == DEFAULT else f"{task}.{eng}.json"


def row(rec: dict) -> dict:
    """The row of one published run (:func:`record`)."""
    trained, *refs = rec["evaluations"]
    by = {e["policy"]: e for e in refs}
    planner = by["planner"]
    if trained["seeds"] != planner["seeds"]:
        raise StudyError(f"{rec['run']}: the trained policy and the planner were graded on different seeds")
    diff = [a - b for a, b in zip(trained["welfare"], planner["welfare"], strict=True)]
    m, h = mean_ci(diff)
    best = max((by[n] for n in HEURISTICS if n in by), key=lambda e: e["welfare_mean"])
    hind = by.get("hindsight")
    return {
        "task": rec["train_config"]["task"],
        "scheme": rec["train_config"]["reward_scheme"],
        "welfare": (trained["welfare_mean"], trained["welfare_std"]),
        "score": trained["score"],
        "gap": trained.get("gap_to_hindsight"),
        "vs_planner": (m, h, sum(d > 0 for d in diff), len(diff)),
        "jain": trained["jain_mean"],
        "best": (best["policy"], best["welfare_mean"]),
        "planner": planner["welfare_mean"],
        "hindsight": None if hind is None else hind["welfare_mean"],
        "training": (rec["env_steps"], rec["iterations"], rec["seconds"] / 60),
        "engine": engine(rec),
    }


#: How the engine column names each engine.
LABELS = {"torchrl": "TorchRL", "rllib": "RLlib"}
#: A task's row before a run of it is published.
NOT_TRAINED = "not trained yet (`fleet-marl train --docs RUN` publishes a run)"


def table(recs: list[dict]) -> str:
    """The markdown table of published runs, in task order, each task's default-engine run first
    and then the other engines' (:data:`ENGINES` order); a task without a default-engine run has
    a "not trained yet" row in its place."""
    lines = [
        "| task (reward) | PPO welfare | score | gap to hindsight | − planner, paired (seeds ahead) | Jain | best heuristic | planner "
        "| hindsight | training | engine |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    by_key = {(r["task"], r["engine"]): r for r in (row(x) for x in recs)}
    for task, eng in ((t, e) for t in TASKS for e in ENGINES):
        if (task, eng) not in by_key:
            if eng == DEFAULT:
                lines.append(f"| {task} | {NOT_TRAINED} | – | – | – | – | – | – | – | – | – |")
            continue
        r = by_key[task, eng]
        (w, sd), (m, h, ahead, k) = r["welfare"], r["vs_planner"]
        steps, iters, minutes = r["training"]
        gap = "–" if r["gap"] is None else f"{r['gap']:.2f}"
        hind = "–" if r["hindsight"] is None else f"{r['hindsight']:.1f}"
        lines.append(
            f"| {r['task']} (`{r['scheme']}`) | {w:.1f} ± {sd:.1f} | {r['score']:.2f} | {gap} | {m:+.1f} ± {h:.1f} ({ahead}/{k}) "
            f"| {r['jain']:.2f} | {r['best'][1]:.1f} ({r['best'][0]}) | {r['planner']:.1f} | {hind} "
            f"| {steps:,} env steps, {iters} iterations, {minutes:.1f} min | {LABELS.get(r['engine'], r['engine'])} |"
        )
    return "\n".join(lines)


def block(recs: list[dict]) -> str:
    """The marked block: how to reproduce the rows, then the table."""
    return (
        f"{START}\n<!-- written by `fleet-marl train --docs RUN ...`; edit the text around it, not this block -->\n\n"
        f"Each task's PPO run, TorchRL's and, where one is published, RLlib's, graded on the same seeds as the references "
        f"(welfare mean ± std over the episodes; − planner: the trained policy's welfare minus the planner's, paired by seed, "
        f"mean ± 95% interval). Each run's evaluation and whole config are in `{DATA}/<task>.json` (TorchRL) and "
        f"`{DATA}/<task>.rllib.json` (RLlib): its `train_config`, saved as YAML, is what "
        f"`fleet-marl train --config` takes to train the same run again (with the iterations it ran, when its "
        f"`max_minutes` cap stopped it: a constant learning rate makes those the same); `fleet-marl train --docs RUN` "
        f"publishes a run.\n\n{table(recs)}\n{END}"
    )


def load(root: str | Path) -> list[dict]:
    """Every published run under ``root``'s :data:`DATA`, in task order, then engine order."""
    d = Path(root) / DATA
    recs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []
    return sorted(recs, key=lambda r: (list(TASKS).index(r["train_config"]["task"]), list(ENGINES).index(engine(r))))


def save(runs: list[str], root: str | Path, echo=print) -> list[Path]:
    """Save ``runs`` (run folders) as data in the checkout ``root``'s :data:`DATA` (one file per
    task and engine, :func:`filename`: a later run of a task on the same engine replaces it);
    ``fleet-marl docs`` renders them. Every run is checked before any is written."""
    dest = Path(root) / DATA
    recs = [record(run) for run in runs]
    for rec in recs:
        row(rec)  # refuse a run whose evaluation lacks what a row needs before writing anything
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for rec in recs:
        path = dest / filename(rec)
        path.write_text(json.dumps(rec, indent=1) + "\n")
        written.append(path)
    echo(f"wrote {', '.join(str(p) for p in written)}")
    return written


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The learned rows' block of each of :data:`DOCS`, from the published runs under ``root``
    (for the publisher, :mod:`fleet_marl.studies.publish`); none without a :data:`DATA` folder."""
    if not (Path(root) / DATA).is_dir():
        return []
    text = block(load(root))
    return [(doc, START, END, text) for doc in DOCS]


__all__ = [
    "DATA",
    "DOCS",
    "END",
    "HEURISTICS",
    "LABELS",
    "NOT_TRAINED",
    "START",
    "block",
    "blocks",
    "engine",
    "filename",
    "load",
    "record",
    "row",
    "save",
    "table",
]

"""What training on the k-round difference costs: env steps per second of TorchRL training with
``credit_horizon`` k = 1, 2, 4 (``python -m fleet_marl.studies.credit_horizon_cost``; issue 48,
item 5; ``docs/credit_horizon.md``, "Training on it").

Each run is the TorchRL engine's loop (:class:`~fleet_marl.torchrl.loop.Loop`: the sync collector,
the learner on CPU, one torch thread) with the default run's batch (``num_envs`` 1024 clusters x
``rollout`` 8 steps, 2 epochs, minibatches of 2048) and ``reward_scheme: difference``, for
``warmup + iterations`` iterations; the first ``warmup`` are not counted (they load the compiled
round, and with k > 1 the first batch trains on fewer steps). The horizons of a task run one
after another, ``repeats`` times over, in one process, so they share the machine's state; the
figures are the CPU time of this process (``time.process_time``: other processes sharing the
core do not inflate it as they do wall time), per iteration: env steps per CPU second (the
batch's ``num_envs x rollout`` collected steps over the iteration's CPU time: collection,
recording, relabelling and learning), the relabelling's share of it, and the same over wall
time, for reference.

How to run (pinned to one core, as the committed data was)::

    taskset -c 0 python -m fleet_marl.studies.credit_horizon_cost --save
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from time import perf_counter, process_time
from typing import Any

import numpy as np

from fleet_marl.errors import UsageError
from fleet_marl.studies.publish import checkout_root, publish

TASKS = ("power_n8", "hard")
HORIZONS = (1, 2, 4)
DATA = "docs/data/credit_horizon_cost.json"
START, END = "<!-- credit-horizon-cost:start -->", "<!-- credit-horizon-cost:end -->"
PROG = "python -m fleet_marl.studies.credit_horizon_cost"


@dataclass(frozen=True)
class Settings:
    """What a measurement ran with (defaults: the command's)."""

    num_envs: int = 1024
    rollout: int = 8
    warmup: int = 1
    iterations: int = 3
    repeats: int = 2
    seed: int = 0


class _Timed:
    """The loop's relabelling, with the CPU seconds it took."""

    def __init__(self, relabel: Any):
        self.relabel = relabel
        self.seconds: list[float] = []

    def __call__(self, data):
        t0 = process_time()
        out = self.relabel(data)
        self.seconds.append(process_time() - t0)
        return out


def run(task: str, k: int, settings: Settings) -> dict:
    """One run of ``task`` with ``credit_horizon = k``: per counted iteration, CPU and wall seconds and the relabelling's CPU seconds."""
    import torch  # torch: only when the measurement runs (the publisher renders without it)

    from fleet_marl.torchrl import Learner, TorchRLTrainConfig  # torch: as above
    from fleet_marl.torchrl.loop import Loop  # torch: as above

    torch.set_num_threads(1)
    tc = TorchRLTrainConfig(
        task=task,
        reward_scheme="difference",
        credit_horizon=k,
        num_envs=settings.num_envs,
        rollout=settings.rollout,
        iterations=settings.warmup + settings.iterations,
        seed=settings.seed,
        max_minutes=0,
        eval_interval=0,
        final_episodes=0,
        checkpoint_interval=0,
    )
    tc.check("credit_horizon_cost")
    loop = Loop(tc, Learner(tc, tc.signature()))
    timed = None
    if loop.relabel is not None:
        timed = loop.relabel = _Timed(loop.relabel)  # type: ignore[assignment]
    cpu, wall = [], []
    c0, w0 = process_time(), perf_counter()
    try:
        for _ in loop:
            c1, w1 = process_time(), perf_counter()
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
            c0, w0 = c1, w1
    finally:
        loop.close()
    w = settings.warmup
    relabel = [0.0] * len(cpu) if timed is None else timed.seconds
    return {"cpu_s": cpu[w:], "wall_s": wall[w:], "relabel_s": relabel[w:]}


def measure(task: str, settings: Settings, horizons=HORIZONS, progress=None) -> dict:
    """The row of ``task``: per horizon the counted iterations of every repeat, and their summary."""
    runs: dict[str, list] = {str(k): [] for k in horizons}
    for _ in range(settings.repeats):
        for k in horizons:
            runs[str(k)].append(run(task, k, settings))
            if progress is not None:
                progress(task, k)
    frames = settings.num_envs * settings.rollout
    out: dict[str, Any] = {"task": task, "horizons": {}}
    for k, rs in runs.items():
        cpu = np.concatenate([r["cpu_s"] for r in rs])
        wall = np.concatenate([r["wall_s"] for r in rs])
        rel = np.concatenate([r["relabel_s"] for r in rs])
        out["horizons"][k] = {
            "runs": rs,
            "steps_per_cpu_s": frames / float(np.median(cpu)),
            "steps_per_wall_s": frames / float(np.median(wall)),
            "relabel_share": float(rel.sum() / cpu.sum()),
            "cpu_s_per_iteration": float(np.median(cpu)),
        }
    base = out["horizons"][str(horizons[0])]["steps_per_cpu_s"]
    for c in out["horizons"].values():
        c["slowdown"] = base / c["steps_per_cpu_s"]
    return out


def render(data: dict) -> str:
    """The doc's block from the saved data."""
    s = data["settings"]
    out = [
        START,
        f"Made by `{data['command']}`: {s['num_envs']} clusters x {s['rollout']} steps a batch, {s['iterations']} iterations counted "
        f"after {s['warmup']} warm-up, {s['repeats']} repeats per horizon (medians of the iterations).",
        "",
        "| task | k | env steps per CPU second | CPU time per iteration vs k = 1 | relabelling's share of the CPU time "
        "| env steps per wall second |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in data["rows"]:
        for k, c in r["horizons"].items():
            out.append(
                f"| {r['task']} | {k} | {c['steps_per_cpu_s']:,.0f} | {c['slowdown']:.2f}x | {100 * c['relabel_share']:.0f} % "
                f"| {c['steps_per_wall_s']:,.0f} |"
            )
    out.append(END)
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    d = Settings()
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated (default: %(default)s)")
    p.add_argument("--horizons", default=",".join(map(str, HORIZONS)), help="the k, the first the baseline (default %(default)s)")
    for name in ("num_envs", "rollout", "warmup", "iterations", "repeats", "seed"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name), help="(default %(default)s)")
    p.add_argument("--save", action="store_true", help=f"write {DATA} and publish the block of docs/credit_horizon.md from it")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(argv)
    settings = Settings(a.num_envs, a.rollout, a.warmup, a.iterations, a.repeats, a.seed)
    horizons = tuple(int(k) for k in a.horizons.split(","))
    if min(asdict(settings).values()) < 0 or settings.iterations < 1 or settings.repeats < 1 or min(horizons) < 1:
        p.error(f"{settings}, --horizons {a.horizons}: expected at least 1 iteration and repeat, horizons >= 1")
    rows = [measure(t, settings, horizons, lambda t, k: print(f"{t} k={k}", file=sys.stderr)) for t in a.tasks.split(",")]
    data = {"command": " ".join([PROG, *argv]), "settings": asdict(settings), "rows": rows}
    print(render(data))
    if a.save:
        try:
            root = checkout_root("--save")
        except UsageError as exc:
            p.error(f"{exc}; drop --save")
        (root / DATA).write_text(json.dumps(data, indent=1) + "\n")
        publish(root, echo=lambda m: print(m, file=sys.stderr), renderers=("fleet_marl.studies.credit_horizon",))
    return 0


if __name__ == "__main__":
    sys.exit(main())

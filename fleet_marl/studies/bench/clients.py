"""``fleet-marl bench --clients``: every outside client's route and RLlib's training end to end,
in one run pinned to one core, against the clients' targets (every client in every mode, at the
vector env's speed).

Two parts, one report:

- **The routes** (:func:`fleet_marl.studies.bench.routes.measure_clients`): agent-steps/s of the
  env through each client, the array adapters against the PettingZoo routes they replace, only
  the step call timed.
- **RLlib's training** (:func:`rllib_train_rate`): ``fleet-marl train --engine rllib`` run as a
  command (a subprocess on the same pinned core), the default config (PPO on ``easy``, shared
  policy, mixed reward, 2000 env steps and 6 epochs of 1000-step minibatches per iteration)
  with the in-training grader, checkpoints and the final table off: *after* is this package's
  default (the vector env, ``FleetEnvRunner``); *before* is the engine before its vector env, either
  a checkout of it (``before``: a folder holding its ``fleet_marl`` package, e.g. a ``git
  worktree`` of the commit before; the same command, with that package first on the path) or,
  without one, this package with ``vector: false`` (one ``FleetRLlibEnv`` per sub-env through
  RLlib's own env runner: the old sampling path, but with this package's faster module and
  distribution, so the ratio is then understated). End to end: sampling, inference and
  learning; agent-steps over the wall time of the timed iterations (``metrics.csv``'s
  ``time_s``, RLlib's clock), the first iterations (Ray's start, compilation, the first
  episodes' references) left out. Each side runs :data:`RLLIB_ROUNDS` times, interleaved
  (before, after, before, after: a shared machine's speed drifts by 10-30% between minutes),
  and reports its fastest run (``tries``: every run's rate). A checkout whose ``metrics.csv`` has no ``agent_steps``
  counts N tenant-steps per env step.

:data:`~fleet_marl.studies.bench.targets.CLIENT_TARGETS` are the targets; ``targets`` in the
report holds each one's measured figure, target and ``met``
(:func:`~fleet_marl.studies.bench.targets.verdict`).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet_marl.errors import require
from fleet_marl.studies.bench.routes import measure_clients
from fleet_marl.studies.bench.targets import CLIENT_TARGETS, verdict
from fleet_marl.studies.bench.timing import pin_to_one_core

#: (warm-up, timed) iterations of each RLlib run: (before, after), full and quick.
RLLIB_ITERATIONS = {False: ((1, 4), (2, 30)), True: ((1, 2), (2, 6))}
#: Runs of each side (full; quick runs one), interleaved before, after, before, after; each side
#: reports its fastest (``tries`` lists them all).
RLLIB_ROUNDS = 2


def rllib_train_rate(warmup: int, timed: int, vector: bool = True, checkout: str | None = None) -> dict[str, Any]:
    """One ``fleet-marl train --engine rllib`` run of the default config (no grader, checkpoint
    or final table) as a subprocess: this package (``vector`` as given) or the ``fleet_marl`` of
    ``checkout``; its agent-steps per second over the ``timed`` iterations after ``warmup``."""
    require(("ray.rllib", "torch", "tensorboardX", "matplotlib"), "rllib", "fleet-marl bench --clients")
    from fleet_marl.rllib.config import TrainConfig  # Ray: only for --clients

    if checkout is not None and not (Path(checkout) / "fleet_marl" / "__init__.py").is_file():
        raise ValueError(f"--before {checkout!r}: no fleet_marl package there (expected {checkout}/fleet_marl/__init__.py)")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(checkout).resolve()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "run.yaml"
        lines = [f"iterations: {warmup + timed}", "eval_interval: 0", "checkpoint_interval: 0"]
        if checkout is None and not vector:
            lines.append("vector: false")
        cfg.write_text("\n".join(lines) + "\n")
        cmd = [sys.executable, "-m", "fleet_marl.cli", "train", "--engine", "rllib", "--config", str(cfg), "--final-episodes", "0"]
        cmd += ["--no-progress", "--json", "--out", tmp, "--name", "bench"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"fleet-marl train --engine rllib ({checkout or 'this package'}) failed:\n{r.stderr[-2000:]}")
        with (Path(tmp) / "bench" / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
    n = len(TrainConfig().signature()["possible_agents"])
    first, last = rows[warmup - 1], rows[-1]

    def agent_steps(row: dict) -> int:
        return int(row["agent_steps"]) if row.get("agent_steps") else int(row["env_steps"]) * n

    wall = float(last["time_s"]) - float(first["time_s"])
    return {
        "engine": checkout or ("this package" if vector else "this package, vector: false"),
        "iterations_timed": timed,
        "env_steps": int(last["env_steps"]) - int(first["env_steps"]),
        "agent_steps": agent_steps(last) - agent_steps(first),
        "seconds_timed": wall,
        "seconds_run": seconds,
        "env_steps_per_s": (int(last["env_steps"]) - int(first["env_steps"])) / wall,
        "agent_steps_per_s": (agent_steps(last) - agent_steps(first)) / wall,
    }


def measure(quick: bool = False, cpu: int | None = None, progress: bool = True, before: str | None = None) -> dict[str, Any]:
    """The whole ``--clients`` report (see the module docstring and docs/benchmarks.md)."""
    pinned = pin_to_one_core(cpu)
    t0 = time.perf_counter()
    steps, repeats = (40, 3) if quick else (200, 5)
    clients = measure_clients(task="easy", clusters=256, steps=steps, repeats=repeats, progress=progress)
    (bw, bt), (aw, at) = RLLIB_ITERATIONS[quick]
    tries: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(1 if quick else RLLIB_ROUNDS):  # interleaved: the machine's speed drifts between runs
        tries["before"].append(rllib_train_rate(bw, bt, vector=False, checkout=before))
        tries["after"].append(rllib_train_rate(aw, at))
        if progress:
            print(
                " ".join(f"rllib_train_{k}: {v[-1]['agent_steps_per_s']:,.0f}" for k, v in tries.items()),
                "agent-steps/s",
                file=sys.stderr,
                flush=True,
            )
    runs = {
        k: {**max(v, key=lambda run: run["agent_steps_per_s"]), "tries": [run["agent_steps_per_s"] for run in v]} for k, v in tries.items()
    }
    measured = {**clients["ratios"], "rllib_train_speedup": runs["after"]["agent_steps_per_s"] / runs["before"]["agent_steps_per_s"]}
    return {
        "quick": quick,
        "cpu": pinned,
        "clients": clients,
        "rllib_train": runs,
        "targets": {k: verdict(measured[k], *CLIENT_TARGETS[k]) for k in CLIENT_TARGETS},
        "seconds": time.perf_counter() - t0,
    }


def format_table(r: dict[str, Any]) -> str:
    c, rl = r["clients"], r["rllib_train"]
    lines = [
        f"fleet-marl bench --clients: pinned to CPU {r['cpu']}, task {c['task']}, {c['clusters']} clusters per array step, "
        f"medians of {c['repeats']} repeats{' (quick)' if r['quick'] else ''}",
        "",
        f"{'route':<24}{'agent-steps/s':>16}",
    ]
    lines += [f"  {name:<22}{rate:>16,.0f}" for name, rate in c["agent_steps_per_s"].items()]
    lines += ["", "fleet-marl train --engine rllib (easy, the default PPO config, end to end)"]
    for label, run in rl.items():
        tries = ", ".join(f"{x:,.0f}" for x in run["tries"])
        lines.append(
            f"  {label:<8}{run['agent_steps_per_s']:>12,.0f} agent-steps/s  (the fastest of {tries}; {run['iterations_timed']} iterations "
            f"in {run['seconds_timed']:.1f} s; {run['engine']})"
        )
    lines += ["", f"{'target':<34}{'measured':>10}{'target':>10}  met"]
    for key, t in r["targets"].items():
        lines.append(f"{key:<34}{t['measured']:>9.1f}x{t['target']:>9.0f}x  {'yes' if t['met'] else 'NO'}")
    lines.append(f"\n{r['seconds']:.0f} s in all")
    return "\n".join(lines)


__all__ = ["RLLIB_ITERATIONS", "RLLIB_ROUNDS", "format_table", "measure", "rllib_train_rate"]

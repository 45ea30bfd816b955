"""The runs of the first credit-assignment study, on the RLlib engine (:class:`~fleet_marl.studies.credit.rllib_design.RLlibStudy`).

:func:`run_one` trains one (N, scheme, seed) with RLlib's PPO and grades the greedy policy with
the grader (:func:`fleet_marl.evaluation.evaluate`); it returns the run's row and its learning
curve (training welfare per iteration). :func:`run_all` runs a study's missing runs as Ray
tasks, one CPU each, ``jobs`` at a time, on this machine or on a Ray cluster (``--address``).
Each finished run appends its row to ``results.csv`` and its curve to ``curves.csv``.

Nothing here imports Ray at import time; :func:`run_one` and :func:`run_all` do.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fleet_marl.evaluation import evaluate, reference_episodes
from fleet_marl.rllib.config import build
from fleet_marl.studies import store
from fleet_marl.studies.credit.rllib_design import CURVE_COLUMNS, RESULT_COLUMNS, RLlibStudy
from fleet_marl.studies.store import StudyError


def run_one(study: RLlibStudy, n: int, scheme: str, seed: int, progress: Any = None) -> tuple[dict, list[dict]]:
    """Train and grade one (N, scheme, seed); returns its results row and learning curve."""
    # Ray: only inside a run
    from fleet_marl.rllib.env import credit_timing  # Ray
    from fleet_marl.rllib.evaluation import algorithm_policy  # Ray
    from fleet_marl.rllib.train import flatten, quiet  # Ray

    quiet()
    tc = study.train_config(n, scheme, seed)
    t0 = time.perf_counter()
    algo = build(tc).build_algo()
    curve: list[dict] = []
    steps = agent_steps = 0
    try:
        for it in range(1, tc.iterations + 1):
            flat = flatten(algo.train())
            prev, steps = steps, int(flat.get("num_env_steps_sampled_lifetime", 0))
            agent_steps = int(sum(v for k, v in flat.items() if k.startswith("env_runners/num_agent_steps_sampled_lifetime/")))
            curve.append(
                {
                    "n": n,
                    "scheme": scheme,
                    "seed": seed,
                    "iteration": it,
                    "env_steps": steps,
                    **{k: flat.get(f"env_runners/fleet/{k}", "") for k in ("welfare", "jain", "starvation_events", "degenerate")},
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            if progress is not None:
                progress.put(steps - prev)
        t1 = time.perf_counter()
        credit_s, env_steps_taken = credit_timing(algo)
        env_steps_taken = max(env_steps_taken, 1)
        ev = evaluate(
            "easy",
            lambda env: algorithm_policy(algo, env),
            episodes=study.episodes,
            seed=0,
            overrides=study.env(n),
            progress=False,
            hindsight=False,  # the study decides on scores; no hindsight reference for every N
        )
    finally:
        algo.stop()
    t2 = time.perf_counter()
    eps = ev.episodes
    welfare = [c["welfare"] for c in curve if c["welfare"] != ""]
    row = {
        "n": n,
        "scheme": scheme,
        "seed": seed,
        "iterations": tc.iterations,
        "env_steps": steps,
        "agent_steps": agent_steps,
        "train_welfare": welfare[-1] if welfare else "",
        "eval_welfare": float(ev.welfare.mean()),
        "score": ev.score,
        "jain": float(np.mean([e.jain for e in eps])),
        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
        "illegal": float(np.mean([e.illegal for e in eps])),
        "random_welfare": float(np.mean(ev.random_welfare)),
        "planner_welfare": float(np.mean(ev.reference_welfare)),
        "run_seconds": round(t2 - t0, 2),
        "train_seconds": round(t1 - t0, 2),
        "eval_seconds": round(t2 - t1, 2),
        "credit_seconds": round(credit_s, 3),
        "credit_ms_per_step": round(1e3 * credit_s / env_steps_taken, 4),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return row, curve


def _references(study: RLlibStudy, progress: bool) -> None:
    """Play the grader's random and planner episodes once per N (cached on disk), before the
    runs that all need them."""
    # the grader's seeds, and the 3 (TrainConfig.eval_episodes) of the training score
    seeds = range(max(study.episodes, 3))
    with tqdm(
        total=2 * len(study.ns) * len(seeds), desc="references (random, planner)", unit="ep", disable=not progress, leave=False
    ) as bar:
        for n in sorted(study.ns):
            for name in ("random", "planner"):
                reference_episodes("easy", name, seeds, study.env(n), progress=bar)


def run_all(study: RLlibStudy, out: Path, todo: list[tuple], jobs: int, progress: bool, address: str | None = None) -> None:
    """The runs ``todo`` of ``study`` as Ray tasks of one CPU, ``jobs`` at a time (on this
    machine, or on the cluster at ``address``), each appended to the CSVs of ``out`` as it finishes."""
    # Ray: only when the study runs
    import ray  # Ray
    from ray.util.queue import Empty, Queue  # Ray

    from fleet_marl.rllib.train import init_ray  # Ray

    _references(study, progress)
    # on this machine, the workers' log lines would break the progress bars; their errors still come back
    started = init_ray(address, log_to_driver=bool(address))
    try:
        queue = Queue(actor_options={"num_cpus": 0})
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        total_steps = sum(study.iterations(n) * study.train_batch_size for n, _, _ in todo)
        pending = list(todo)
        running: dict = {}
        failed: list[str] = []
        runs_bar = tqdm(total=len(todo), desc="runs", unit="run", position=0, disable=not progress)
        steps_bar = tqdm(
            total=total_steps, desc="env steps", unit="step", unit_scale=True, position=1, disable=not progress, smoothing=0.05
        )
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    key = pending.pop(0)
                    running[task.remote(study, *key, progress=queue)] = key
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                while True:
                    try:
                        steps_bar.update(queue.get_nowait())
                    except Empty:
                        break
                for ref in ready:
                    key = running.pop(ref)
                    try:
                        row, curve = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 -- say which run, keep the others going
                        failed.append(
                            f"N={key[0]} scheme={key[1]} seed={key[2]}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}"
                        )
                        runs_bar.update(1)
                        continue
                    store.append(out / "curves.csv", CURVE_COLUMNS, curve)  # the curve first: results.csv marks the run done
                    store.append(out / "results.csv", RESULT_COLUMNS, [row])
                    runs_bar.update(1)
                    runs_bar.set_postfix_str(
                        f"last N={key[0]} {key[1]} seed {key[2]}: welfare {row['eval_welfare']:.1f}, {row['run_seconds']:.0f}s"
                    )
        finally:
            for ref in running:  # interrupted: stop the runs in flight (on a cluster too)
                ray.cancel(ref, force=True)
            steps_bar.close()
            runs_bar.close()
        if failed:
            raise StudyError(
                f"{len(failed)} run(s) failed and were not recorded (running the same command again retries them):\n  "
                + "\n  ".join(failed)
            )
    finally:
        if started:
            ray.shutdown()


__all__ = ["run_all", "run_one"]

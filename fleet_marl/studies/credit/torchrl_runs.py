"""The runs of the credit-assignment study on the TorchRL engine (:class:`~fleet_marl.studies.credit.torchrl_design.Study`).

:func:`train_and_grade` trains one :class:`~fleet_marl.torchrl.config.TorchRLTrainConfig` with
the trainer's own loop (:class:`~fleet_marl.torchrl.train.Loop`, the sync collector, one torch
thread) and grades the greedy policy with the grader (:func:`fleet_marl.evaluation.evaluate`)
at the iterations ``eval_at``: the learning curve in graded welfare, whose last point is the
run's result. It writes nothing. Timing: ``train_seconds`` (collection and learning),
``eval_seconds`` (the grader), ``credit_seconds`` (the env's credit engine: the one kernel
call per step and the scheme's arithmetic, part of ``train_seconds``). :func:`run_one` adds
the study's measures (convergence, steps to 90% of the final score) to one run's row; the rows
are every engine's (:mod:`~fleet_marl.studies.credit.rows`).

:func:`run_all` runs a study's missing runs in ``jobs`` worker processes (one torch thread
each). Each finished run appends a row to ``results.csv`` and its curve to ``curves.csv``;
every session appends its wall time to ``sessions.csv`` (the study's wall time is their sum;
the row is rewritten after every finished run, so a killed session loses at most the time since
its last run). Stop a study with Ctrl-C (the workers ignore it; the parent terminates them at
once) or by sending SIGTERM to its process group (``kill -- -PGID``), which the worker
processes are in. torch is imported only in a run.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import multiprocessing
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleet_marl.evaluation import reference_episodes
from fleet_marl.studies import store
from fleet_marl.studies.credit import rows
from fleet_marl.studies.credit.torchrl_design import CURVE_COLUMNS, RESULT_COLUMNS, SESSION_COLUMNS, Study
from fleet_marl.studies.store import StudyError


def train_and_grade(tc: Any, eval_at: list[int], episodes: int) -> tuple[dict, list[dict]]:
    """Train ``tc`` (sync collector, its iterations; no files) and grade at the iterations
    ``eval_at`` (the last must be ``tc.iterations``) on grader seeds 0 .. episodes - 1.
    Returns (the run's measures, one curve row per graded iteration)."""
    import torch  # torch: only in a run

    from fleet_marl.torchrl.train import Learner, Loop, grade  # torch and TorchRL: only in a run

    if not eval_at or eval_at[-1] != tc.iterations:
        raise ValueError(f"eval_at = {eval_at!r}: expected iterations ending with the last, {tc.iterations}")
    torch.set_num_threads(max(tc.threads, 1))
    t0 = time.perf_counter()
    learner = Learner(tc, tc.signature())
    loop = Loop(tc, learner)
    curve: list[dict] = []
    eval_seconds = 0.0
    welfare_since: list[float] = []
    ev = None
    try:
        for row in loop:
            if row["welfare"] != "":
                welfare_since.append(float(row["welfare"]))
            if row["iteration"] in eval_at:
                te = time.perf_counter()
                ev = grade(learner, tc, episodes)
                eval_seconds += time.perf_counter() - te
                curve.append(
                    rows.point(row["iteration"], row["env_steps"], row["agent_steps"], welfare_since, ev, time.perf_counter() - t0)
                )
                welfare_since = []
        env_steps = loop.frames * tc.iterations
        credit_seconds = loop.env.venv.credit_seconds if loop.env is not None else float("nan")
    finally:
        loop.close()
    seconds = time.perf_counter() - t0
    assert ev is not None  # eval_at ends with the last iteration: the run was graded there
    n_agents = len(learner.sig["possible_agents"])
    result = rows.result(tc.iterations, env_steps, env_steps * n_agents, ev, seconds, eval_seconds, credit_seconds)
    return result, curve


def run_one(study: Study, key: tuple) -> tuple[dict, list[dict]]:
    """Train and grade the run ``key``; returns its results row and its curve rows."""
    res, curve = train_and_grade(study.train_config(key), study.eval_at(key[0]), study.episodes)
    return rows.study_row(study, key, res, curve)


def versions(dists: tuple[str, ...] = ("fleet_marl", "torch", "torchrl")) -> str:
    """The versions of ``dists`` (fleet_marl's, torch's and torchrl's) and the git commit of
    fleet_marl's checkout (if it is one)."""
    parts = []
    for dist in dists:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10, check=False
        )
        if commit.returncode == 0:
            parts.append(f"commit {commit.stdout.strip()}")
    except (OSError, subprocess.SubprocessError):
        pass
    return ", ".join(parts)


def _reference(args: tuple) -> None:
    task, overrides, name, seeds = args
    reference_episodes(task, name, seeds, overrides, progress=None)


def run_caught(args: tuple) -> tuple[tuple, tuple | str]:
    """``run_one`` in a worker (a process of the pool, or a Ray task): ``(key, (row, curve))``, or
    ``(key, message)`` when the run failed."""
    study, key = args
    return rows.caught(run_one, study, key)


def _init_worker() -> None:
    import torch  # torch: the workers train

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it terminates the pool
    torch.set_num_threads(1)


class Session:
    """One session of ``fleet-marl compare`` in the study folder ``out``, wherever its runs train
    (this machine's worker processes, or a Ray cluster: :mod:`~fleet_marl.studies.credit.torchrl_ray`):
    :meth:`add` appends a finished run to ``curves.csv`` and ``results.csv`` (or notes a failed
    one), and this session's row of ``sessions.csv`` is rewritten after each, so a kill loses at
    most the time since the last; :meth:`close` raises the failures. ``dists``: the
    distributions whose versions the session records (:func:`versions`)."""

    def __init__(self, out: Path, jobs: int, dists: tuple[str, ...] = ("fleet_marl", "torch", "torchrl")):
        self.out, self.jobs = out, jobs
        self.started = time.time()
        self.earlier = store.read_rows(out / "sessions.csv")
        self.version = versions(dists)
        self.finished = 0
        self.failed: list[str] = []

    def record(self) -> None:
        now = time.time()
        row = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "stopped": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)),
            "wall_seconds": round(now - self.started, 1),
            "runs_done": self.finished,
            "jobs": self.jobs,
            "version": self.version,
        }
        store.rewrite(self.out / "sessions.csv", SESSION_COLUMNS, [*self.earlier, row])

    def add(self, key: tuple, result: tuple | str) -> str:
        """Store one run's ``(row, curve)``, or note its failure (``result`` the message); returns
        what the progress bar says of it."""
        if isinstance(result, str):  # say which run failed, keep the others going
            self.failed.append(f"{'/'.join(map(str, key))}: {result}")
            return f"{'/'.join(map(str, key))} failed"
        row, curve = result
        store.append(self.out / "curves.csv", CURVE_COLUMNS, curve)  # the curve first: results.csv marks the run done
        store.append(self.out / "results.csv", RESULT_COLUMNS, [row])
        self.finished += 1
        self.record()
        return f"last {key[1]} N={key[2]} {key[3]} seed {key[4]}: score {row['score']:.2f}, {row['run_seconds']:.0f}s"

    def run_on_ray(self, task: Any, study: Study, todo: list[tuple], limit: int, desc: str, progress: bool) -> None:
        """The runs ``todo`` of ``study`` as the Ray tasks ``task`` (a ``run_caught`` made remote),
        at most ``limit`` at once, each added (:meth:`add`) as it finishes; a run whose worker or
        node was lost fails with its error's last line. Interrupted, it cancels the runs in flight."""
        import ray  # Ray: only for a study's runs on Ray (the rllib engine's, or a cluster's)

        pending = list(todo)
        running: dict[Any, tuple] = {}  # the runs in flight: object ref -> key
        try:
            with tqdm(total=len(todo), desc=desc, unit="run", disable=not progress, smoothing=0.02) as bar:
                while pending or running:
                    while pending and len(running) < limit:
                        key = pending.pop(0)
                        running[task.remote((study, key))] = key
                    ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                    for ref in ready:
                        key = running.pop(ref)
                        result: Any
                        try:
                            _, result = ray.get(ref)
                        except Exception as exc:  # noqa: BLE001 -- a lost node or worker: name the run, keep the others going
                            text = str(exc).strip()
                            result = text.splitlines()[-1] if text else type(exc).__name__
                        bar.update(1)
                        bar.set_postfix_str(self.add(key, result))
        finally:
            for ref in running:  # interrupted: stop the runs in flight
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self.finished:
            self.record()
        if self.failed:
            raise StudyError(
                f"{len(self.failed)} run(s) failed and were not recorded (running the same command again retries them):\n  "
                + "\n  ".join(self.failed)
            )


def run_all(study: Study, out: Path, todo: list[tuple], jobs: int, progress: bool) -> None:
    """The runs ``todo`` of ``study`` in ``jobs`` worker processes, each appended to the CSVs of
    ``out`` as it finishes, and this session's row of ``sessions.csv``."""
    session = Session(out, jobs)
    # the grader's references (random and planner episodes, cached on disk) once per setting, before the runs need them
    refs = sorted({k[:3] for k in todo})
    seeds = list(range(study.episodes))
    # multiprocessing.Pool rather than concurrent.futures: on Ctrl-C (or any error) terminate() stops
    # the workers at once, where ProcessPoolExecutor's exit waits for the runs under way
    pool = multiprocessing.get_context("spawn").Pool(jobs, initializer=_init_worker)
    try:
        jobs_refs = [(*study.env(*r), name, seeds) for r in refs for name in ("random", "planner")]
        for _ in tqdm(
            pool.imap_unordered(_reference, jobs_refs),
            total=len(jobs_refs),
            desc="references (random, planner)",
            unit="setting",
            disable=not progress,
            leave=False,
        ):
            pass
        with tqdm(total=len(todo), desc="runs", unit="run", disable=not progress, smoothing=0.02) as bar:
            for key, result in pool.imap_unordered(run_caught, [(study, k) for k in todo]):
                bar.update(1)
                bar.set_postfix_str(session.add(key, result))
        pool.close()
    finally:
        pool.terminate()
        pool.join()
        session.close()


__all__ = ["Session", "run_all", "run_caught", "run_one", "train_and_grade", "versions"]

"""The runs of the credit-assignment study on the TorchRL engine (:class:`~fleet_marl.studies.credit.torchrl_design.Study`).

:func:`train_and_grade` trains one :class:`~fleet_marl.torchrl.config.TorchRLTrainConfig` with
the trainer's own loop (:class:`~fleet_marl.torchrl.train.Loop`, the sync collector, one torch
thread) and grades the greedy policy with the grader (:func:`fleet_marl.evaluation.evaluate`)
at the iterations ``eval_at``: the learning curve in graded welfare, whose last point is the
run's result. It writes nothing. Timing: ``train_seconds`` (collection and learning),
``eval_seconds`` (the grader), ``credit_seconds`` (the env's credit engine: the one kernel
call per step and the scheme's arithmetic, and with ``credit_horizon`` k > 1 the k-round
difference's branches, :attr:`~fleet_marl.torchrl.relabel.Relabel.seconds`; part of
``train_seconds``). :func:`run_one` adds
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleet_marl.evaluation import evaluate
from fleet_marl.studies import store
from fleet_marl.studies.credit import benchmarl_runs, rows
from fleet_marl.studies.credit.torchrl_design import CURVE_COLUMNS, RESULT_COLUMNS, SESSION_COLUMNS, Study
from fleet_marl.studies.store import StudyError


def train_and_grade(
    tc: Any,
    eval_at: list[int],
    episodes: int,
    overrides: dict | None = None,
    hindsight: bool = False,
    final: Callable[[Any, Callable[[dict, bool], Any]], dict] | None = None,
) -> tuple[dict, list[dict]]:
    """Train ``tc`` (sync collector, its iterations; no files) and grade at the iterations
    ``eval_at`` (the last must be ``tc.iterations``) on grader seeds 0 .. episodes - 1.
    Returns (the run's measures, one curve row per graded iteration).

    ``overrides``: the grader's env overrides (default ``tc.env``: the env the run trained on;
    a suite task's split goes here). ``hindsight``: the last grading plays the hindsight
    reference too (its cached episodes), for the gap (:meth:`Evaluation.gap_to_hindsight`).
    ``final(ev, play)``: more measures of the trained policy, for the run's row: ``ev`` is the
    last grading, ``play(changes, hindsight)`` grades the policy again with ``changes`` to the
    overrides (its time counts in ``eval_seconds``). The measures also hold ``cpu_seconds`` and
    ``eval_cpu_seconds`` (this process's CPU time, which a shared core does not inflate) and,
    with ``hindsight``, ``gap`` and ``hindsight_welfare``: a design keeps the columns it has."""
    import torch  # torch: only in a run

    from fleet_marl.torchrl.train import Learner, Loop  # torch and TorchRL: only in a run

    if not eval_at or eval_at[-1] != tc.iterations:
        raise ValueError(f"eval_at = {eval_at!r}: expected iterations ending with the last, {tc.iterations}")
    torch.set_num_threads(max(tc.threads, 1))
    t0, c0 = time.perf_counter(), time.process_time()
    learner = Learner(tc, tc.signature())
    loop = Loop(tc, learner)
    grader_env = dict(tc.env if overrides is None else overrides)
    clock = {"wall": 0.0, "cpu": 0.0}

    def play(changes: dict, with_hindsight: bool) -> Any:
        te, ce = time.perf_counter(), time.process_time()
        try:
            return evaluate(
                tc.task,
                lambda env: learner.policy(env),  # noqa: PLW0108 -- the grader takes a function (inspect.isfunction), not a bound method
                episodes=episodes,
                seed=0,
                overrides={**grader_env, **changes},
                progress=False,
                hindsight=with_hindsight,
            )
        finally:
            clock["wall"] += time.perf_counter() - te
            clock["cpu"] += time.process_time() - ce

    curve: list[dict] = []
    welfare_since: list[float] = []
    ev = None
    try:
        for row in loop:
            if row["welfare"] != "":
                welfare_since.append(float(row["welfare"]))
            if row["iteration"] in eval_at:
                ev = play({}, hindsight and row["iteration"] == tc.iterations)
                curve.append(
                    rows.point(row["iteration"], row["env_steps"], row["agent_steps"], welfare_since, ev, time.perf_counter() - t0)
                )
                welfare_since = []
        env_steps = loop.frames * tc.iterations
        credit_seconds = loop.env.venv.credit_seconds if loop.env is not None else float("nan")
        if loop.relabel is not None:  # the k-round difference's branches: the reward's cost too
            credit_seconds += loop.relabel.seconds
    finally:
        loop.close()
    assert ev is not None  # eval_at ends with the last iteration: the run was graded there
    extra = final(ev, play) if final is not None else {}
    seconds = time.perf_counter() - t0
    n_agents = len(learner.sig["possible_agents"])
    result = rows.result(tc.iterations, env_steps, env_steps * n_agents, ev, seconds, clock["wall"], credit_seconds)
    result.update(cpu_seconds=round(time.process_time() - c0, 2), eval_cpu_seconds=round(clock["cpu"], 2))
    if hindsight:
        result.update(rows.hindsight(ev))
    result.update(extra)
    return result, curve


def run_one(study: Study, key: tuple) -> tuple[dict, list[dict]]:
    """Train and grade the run ``key`` as its design says (:meth:`Study.grading`); returns its
    results row (the design's columns) and its curve rows. A value-decomposition arm
    (:data:`~fleet_marl.studies.credit.benchmarl_runs.VALUE_ARMS`: QMIX, VDN) trains on BenchMARL
    (:func:`~fleet_marl.studies.credit.benchmarl_runs.run_one`), graded the same way."""
    if key[3] in benchmarl_runs.VALUE_ARMS:
        return benchmarl_runs.run_one(study, key)
    res, curve = train_and_grade(study.train_config(key), study.eval_at(key[0]), study.episodes, **study.grading(key))
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
    study, job = args
    study.reference(job)


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
    distributions whose versions the session records (:func:`versions`); ``columns``: the
    design's (results, curves) columns (:attr:`Study.RESULT_COLUMNS`, :attr:`Study.CURVE_COLUMNS`)."""

    def __init__(
        self,
        out: Path,
        jobs: int,
        dists: tuple[str, ...] = ("fleet_marl", "torch", "torchrl"),
        columns: tuple[tuple[str, ...], tuple[str, ...]] = (RESULT_COLUMNS, CURVE_COLUMNS),
    ):
        self.out, self.jobs = out, jobs
        self.result_columns, self.curve_columns = columns
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
        store.append(self.out / "curves.csv", self.curve_columns, curve)  # the curve first: results.csv marks the run done
        store.append(self.out / "results.csv", self.result_columns, [row])
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
    session = Session(out, jobs, columns=(study.RESULT_COLUMNS, study.CURVE_COLUMNS))
    # the grader's references (cached on disk) once per setting, before the runs need them: the design says which
    # multiprocessing.Pool rather than concurrent.futures: on Ctrl-C (or any error) terminate() stops
    # the workers at once, where ProcessPoolExecutor's exit waits for the runs under way
    pool = multiprocessing.get_context("spawn").Pool(jobs, initializer=_init_worker)
    try:
        ref_jobs = [(study, job) for job in study.reference_jobs(todo)]
        for _ in tqdm(
            pool.imap_unordered(_reference, ref_jobs),
            total=len(ref_jobs),
            desc="references",
            unit="job",
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

"""The job traces of GPU clusters: what their readers return (:class:`JobTrace`, and
:class:`PolluxTrace` with Pollux's own columns) and the parsers of the four job formats,
pollux, philly, pai and helios (the table of formats is :mod:`fleet_marl.traces.readers`'s).
Each parser takes ``(path, mtime_ns, size)``, is cached on it and returns read-only arrays in
submit order.
"""

from __future__ import annotations

import functools
import math
from array import array
from dataclasses import dataclass

import numpy as np

from fleet_marl.traces.fields import TraceError, check_int, check_number, check_order, csv_rows, frozen_array, json_items, timestamp_ns

POLLUX_HEADER = ("name", "time", "application", "num_replicas", "batch_size")
POLLUX_APPLICATIONS = ("cifar10", "ncf", "deepspeech2", "imagenet", "bert", "yolov3")
HELIOS_HEADER = (
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
)
HELIOS_STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "SUSPENDED")
#: The released ``pai_task_table.csv`` has no header line; this is its ``pai_task_table.header``.
PAI_HEADER = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
PAI_STATUSES = ("Running", "Terminated", "Failed", "Waiting")
PHILLY_STATUSES = ("Pass", "Killed", "Failed")
PHILLY_KEYS = ("status", "vc", "jobid", "attempts", "submitted_time", "user")
_MISSING = "<missing>"


@dataclass(frozen=True, eq=False)
class JobTrace:
    """Jobs of a GPU-cluster trace, one entry per job, in submit order."""

    path: str
    format: str  # the key of FORMATS that parsed it
    time_s: np.ndarray  # (jobs,) float64 submit time in seconds (the zero is the format's: fleet_marl.traces.readers)
    gpus: np.ndarray  # (jobs,) int64 GPUs the job asked for; 0 = a CPU-only job or none recorded
    duration_s: np.ndarray  # (jobs,) float64 run time in seconds; NaN where the trace has none
    unlaunched: int = 0  # pai: jobs none of whose tasks launched (no arrival time), left out of the arrays


@dataclass(frozen=True, eq=False, kw_only=True)
class PolluxTrace(JobTrace):
    """A Pollux job trace: ``gpus`` is the ``num_replicas`` column; it has no run times."""

    name: tuple[str, ...]  # (jobs,) job names
    application: tuple[str, ...]  # (jobs,) one of POLLUX_APPLICATIONS
    batch_size: np.ndarray  # (jobs,) int64 global batch size

    @property
    def num_replicas(self) -> np.ndarray:
        """(jobs,) int64 GPUs requested: the file's ``num_replicas`` column (the same array as ``gpus``)."""
        return self.gpus


# --- pollux ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_pollux(path: str, mtime_ns: int, size: int) -> PolluxTrace:
    """Pollux/Sia job trace (petuum/adaptdl ``simulator/workloads/*.csv``): ``time`` is the
    submit time in seconds from trace start, ``num_replicas`` the GPUs asked for."""
    _, rows = csv_rows(path, (POLLUX_HEADER,))
    names, apps = [], []
    times, replicas, batches = array("d"), array("q"), array("q")
    prev = 0.0
    for line, (name, time, app, rep, batch) in rows:
        if not name:
            raise TraceError(path, line, "name", name, "a non-empty job name")
        t = check_number(path, line, "time", time, "seconds from trace start")
        check_order(path, line, "time", time, t, prev, "submit")
        prev = t
        if app not in POLLUX_APPLICATIONS:
            raise TraceError(path, line, "application", app, f"one of {', '.join(POLLUX_APPLICATIONS)}")
        replicas.append(check_int(path, line, "num_replicas", rep, 1))
        batches.append(check_int(path, line, "batch_size", batch, 1))
        names.append(name)
        apps.append(app)
        times.append(t)
    return PolluxTrace(
        path,
        "pollux",
        frozen_array(times, np.float64),
        frozen_array(replicas, np.int64),
        frozen_array(np.full(len(times), np.nan), np.float64),
        name=tuple(names),
        application=tuple(apps),
        batch_size=frozen_array(batches, np.int64),
    )


# --- philly ---------------------------------------------------------------------------------


def _philly_stamp(path: str, line: int, column: str, value: object, required: bool = True) -> int:
    """A Philly time string as nanoseconds (``required``: the error does not offer null)."""
    if not isinstance(value, str):
        raise TraceError(path, line, column, value, "a timestamp string like '2017-10-07 01:11:39'" + ("" if required else " or null"))
    return timestamp_ns(path, line, column, value, "2017-10-07 01:11:39")


def _philly_optional_stamp(path: str, line: int, column: str, value: object) -> int | None:
    """An attempt's start or end time: None when the log has none (null, '' or 'None')."""
    if value in (None, "", "None"):
        return None
    return _philly_stamp(path, line, column, value, required=False)


def _philly_job(path: str, line: int, job: object) -> tuple[int, int, float]:
    """(submit ns, GPUs of the first attempt, run time s or NaN) of one cluster_job_log entry."""
    if not isinstance(job, dict):
        raise TraceError(path, line, "job", job, "a JSON object with keys " + ", ".join(PHILLY_KEYS))
    for key in PHILLY_KEYS:
        if key not in job:
            raise TraceError(path, line, key, _MISSING, f"a job with the key {key!r}")
    if job["status"] not in PHILLY_STATUSES:
        raise TraceError(path, line, "status", job["status"], f"one of {', '.join(PHILLY_STATUSES)}")
    if not isinstance(job["jobid"], str) or not job["jobid"]:
        raise TraceError(path, line, "jobid", job["jobid"], "a non-empty job id string")
    submit = _philly_stamp(path, line, "submitted_time", job["submitted_time"])
    attempts = job["attempts"]
    if not isinstance(attempts, list):
        raise TraceError(path, line, "attempts", attempts, "a list of attempts")
    times = []
    for k, a in enumerate(attempts):
        col = f"attempts[{k}]"
        if not isinstance(a, dict) or not {"start_time", "end_time", "detail"} <= a.keys():
            raise TraceError(path, line, col, a, "an object with start_time, end_time and detail")
        times.append(
            (
                _philly_optional_stamp(path, line, f"{col}.start_time", a["start_time"]),
                _philly_optional_stamp(path, line, f"{col}.end_time", a["end_time"]),
            )
        )
        if not isinstance(a["detail"], list):
            raise TraceError(path, line, f"{col}.detail", a["detail"], "a list of {ip, gpus} objects")
        for d, server in enumerate(a["detail"]):
            gpus = server.get("gpus") if isinstance(server, dict) else None
            if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
                raise TraceError(path, line, f"{col}.detail[{d}].gpus", gpus, "a list of GPU names such as ['gpu0', 'gpu1']")
    gpus = sum(len(server["gpus"]) for server in attempts[0]["detail"]) if attempts else 0
    duration = math.nan
    start, end = (times[0][0], times[-1][1]) if attempts else (None, None)
    if start is not None and end is not None:
        if end < start:
            raise TraceError(
                path,
                line,
                f"attempts[{len(attempts) - 1}].end_time",
                attempts[-1]["end_time"],
                f"a time >= the first attempt's start_time ({attempts[0]['start_time']})",
            )
        duration = (end - start) / 1e9
    return submit, gpus, duration


def _sorted_jobs(path: str, fmt: str, ns: list[int] | array, gpus, duration, unlaunched: int = 0) -> JobTrace:
    """A JobTrace sorted stably by submit time, ``time_s`` from the earliest."""
    t = np.asarray(ns, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    return JobTrace(
        path,
        fmt,
        frozen_array((t - t[0]) / 1e9, np.float64),
        frozen_array(np.asarray(gpus, np.int64)[order], np.int64),
        frozen_array(np.asarray(duration, np.float64)[order], np.float64),
        unlaunched,
    )


@functools.lru_cache(maxsize=32)
def parse_philly(path: str, mtime_ns: int, size: int) -> JobTrace:
    """Philly ``cluster_job_log`` (msr-fiddle/philly-traces): ``gpus`` are the GPUs of the
    first attempt (0 for a job never scheduled), the run time is from the first attempt's start
    to the last attempt's end (NaN when either is missing), as the trace's own notebook does."""
    ns, gpus, duration = array("q"), array("q"), array("d")
    for line, job in json_items(path):
        s, g, d = _philly_job(path, line, job)
        ns.append(s)
        gpus.append(g)
        duration.append(d)
    return _sorted_jobs(path, "philly", ns, gpus, duration)


# --- alibaba pai 2020 -----------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_pai(path: str, mtime_ns: int, size: int) -> JobTrace:
    """Alibaba PAI GPU 2020 ``pai_task_table.csv`` (alibaba/clusterdata, cluster-trace-gpu-v2020),
    one row per task, grouped into jobs by ``job_name``: a job arrives when its first task
    launches (``start_time``), asks for ``ceil(sum of inst_num * plan_gpu / 100)`` GPUs
    (``plan_gpu`` is percent of one GPU) and runs until its last task ends. Empty
    ``start_time``, ``end_time`` or ``plan_gpu`` fields are missing values (a task that never
    launched or ended; no GPU)."""
    _, rows = csv_rows(path, (PAI_HEADER,), headerless=True)
    jobs: dict[str, list[float]] = {}  # job_name -> [first launch, last end, GPUs (fractional)]
    for line, (name, _task, inst, status, start, end, _cpu, _mem, gpu, _gtype) in rows:
        if not name:
            raise TraceError(path, line, "job_name", name, "a non-empty job name")
        n = check_number(path, line, "inst_num", inst, "instances of the task")
        if status not in PAI_STATUSES:
            raise TraceError(path, line, "status", status, f"one of {', '.join(PAI_STATUSES)}")
        s = check_number(path, line, "start_time", start, "seconds, or empty") if start else math.nan
        e = check_number(path, line, "end_time", end, "seconds, or empty") if end else math.nan
        if e < s:
            raise TraceError(path, line, "end_time", end, f"a time >= start_time ({start})")
        if end and not start:
            raise TraceError(path, line, "end_time", end, "empty when start_time is (a task that never launched cannot end)")
        g = check_number(path, line, "plan_gpu", gpu, "percent of one GPU, or empty") if gpu else 0.0
        j = jobs.setdefault(name, [math.nan, math.nan, 0.0])
        if start:
            j[0] = s if math.isnan(j[0]) else min(j[0], s)
        if end:
            j[1] = e if math.isnan(j[1]) else max(j[1], e)
        j[2] += n * g / 100.0
    launched = [j for j in jobs.values() if not math.isnan(j[0])]
    if not launched:
        raise TraceError(path, 1, "start_time", "", "at least one task with a launch time")
    first = min(j[0] for j in launched)
    ns = [round((j[0] - first) * 1e9) for j in launched]
    gpus = [math.ceil(j[2] - 1e-9) for j in launched]
    duration = [j[1] - j[0] for j in launched]  # NaN when no task ended
    return _sorted_jobs(path, "pai", ns, gpus, duration, len(jobs) - len(launched))


# --- helios ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_helios(path: str, mtime_ns: int, size: int) -> JobTrace:
    """Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData): ``gpu_num`` GPUs (0 for a
    CPU job), ``duration`` seconds (empty: NaN), ``submit_time`` as written (local wall
    clock). ``user``, ``vc``, ``cpu_num``, ``node_num``, ``start_time``, ``end_time`` and
    ``queue`` are not read."""
    _, rows = csv_rows(path, (HELIOS_HEADER,))
    ns, gpus, duration = array("q"), array("q"), array("d")
    for line, row in rows:
        check_int(path, line, "job_id", row[0], 0)
        gpus.append(check_int(path, line, "gpu_num", row[3], 0))
        if row[6] not in HELIOS_STATES:
            raise TraceError(path, line, "state", row[6], f"one of {', '.join(HELIOS_STATES)}")
        ns.append(timestamp_ns(path, line, "submit_time", row[7], "2020-06-09 18:41:01"))
        duration.append(check_number(path, line, "duration", row[10], "seconds, or empty") if row[10] else math.nan)
    return _sorted_jobs(path, "helios", ns, gpus, duration)


__all__ = [
    "HELIOS_HEADER",
    "HELIOS_STATES",
    "PAI_HEADER",
    "PAI_STATUSES",
    "PHILLY_KEYS",
    "PHILLY_STATUSES",
    "POLLUX_APPLICATIONS",
    "POLLUX_HEADER",
    "JobTrace",
    "PolluxTrace",
    "parse_helios",
    "parse_pai",
    "parse_philly",
    "parse_pollux",
]

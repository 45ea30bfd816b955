"""Parsers of public GPU-cluster and LLM-serving traces: one per format, each checking every row
and raising :class:`TraceError` (``file:line: column = value: expected ...``) at the first bad
one rather than skipping it.

=========  ========  ===================================================  ==============================
format     kind      file                                                 ``time_s``: seconds from
=========  ========  ===================================================  ==============================
pollux     jobs      CSV ``name,time,application,num_replicas,...``       the file's zero (``time``)
philly     jobs      JSON list of jobs (Philly's ``cluster_job_log``)     the earliest ``submitted_time``
pai        jobs      CSV ``pai_task_table`` (Alibaba PAI, header opt.)    the earliest task launch
helios     jobs      CSV ``job_id,user,vc,gpu_num,...,duration,queue``    the earliest ``submit_time``
azure      requests  CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``      the first row
burstgpt   requests  CSV ``Timestamp,[Session ID,...,]Model,...``         0:00 of day one (``Timestamp``)
=========  ========  ===================================================  ==============================

A job trace (:class:`JobTrace`) holds per job its submit time, the GPUs it asked for and its
run time; a request trace (:class:`RequestTrace`) holds per request its arrival time, context
(prompt) tokens and generated (output) tokens. Both are in arrival order: pollux, azure and
burstgpt files must already be (a row earlier than the one before it is an error); philly, pai
and helios are sorted, stably, by submit time. How each format's fields map onto these is in
docs/traces.md.

Each parser takes ``(path, mtime_ns, size)`` and is cached on it, so a changed file is read
again; the arrays it returns are read-only. Finding a file from a trace name is
:mod:`fleet_marl.traces.registry`'s job.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

POLLUX_HEADER = ("name", "time", "application", "num_replicas", "batch_size")
POLLUX_APPLICATIONS = ("cifar10", "ncf", "deepspeech2", "imagenet", "bert", "yolov3")
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: BurstGPT v1.1 (``BurstGPT_1.csv``) and the later files with session columns.
BURSTGPT_HEADERS = (
    ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
    ("Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
)
BURSTGPT_LOG_TYPES = ("Conversation log", "API log")
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

_INT = re.compile(r"[+-]?\d+")
_NUM = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{0,9}))?(?:([+-])(\d{2}):(\d{2}))?")
_WS = re.compile(r"[ \t\r\n]*")
_INT64_MAX = np.iinfo(np.int64).max
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_MISSING = "<missing>"


class TraceError(ValueError):
    """A trace file has a bad row. ``line`` is 1-based: a CSV header is line 1, a JSON job is
    the line its object starts on. The message is ``path:line: column = value: expected ...``."""

    def __init__(self, path: str, line: int, column: str, value: object, expected: str):
        self.path, self.line, self.column, self.value, self.expected = str(path), line, column, value, expected
        super().__init__(f"{path}:{line}: {column} = {value!r}: expected {expected}")


@dataclass(frozen=True, eq=False)
class JobTrace:
    """Jobs of a GPU-cluster trace, one entry per job, in submit order."""

    path: str
    format: str  # the key of FORMATS that parsed it
    time_s: np.ndarray  # (jobs,) float64 submit time in seconds (the zero is the format's: module docstring)
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


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """LLM inference requests, one entry per request, in arrival order."""

    path: str
    format: str  # the key of FORMATS that parsed it
    time_s: np.ndarray  # (requests,) float64 arrival time in seconds (the zero is the format's)
    context_tokens: np.ndarray  # (requests,) int64 prompt tokens
    generated_tokens: np.ndarray  # (requests,) int64 output tokens


class AzureTrace(RequestTrace):
    """An Azure LLM inference trace (2023 or 2024): ``time_s`` since the first row."""


@dataclass(frozen=True, eq=False, kw_only=True)
class BurstGPTTrace(RequestTrace):
    """A BurstGPT trace: ``time_s`` is the ``Timestamp`` column, seconds from 0:00 of day one."""

    models: tuple[str, ...]  # the Model names, in order of first appearance
    model: np.ndarray  # (requests,) int64 index into ``models``
    conversation: np.ndarray  # (requests,) bool: Log Type is 'Conversation log' (else 'API log')


# --- field checks ---------------------------------------------------------------------------


def _frozen(values, dtype) -> np.ndarray:
    a = np.asarray(values, dtype=dtype)
    a.setflags(write=False)
    return a


def _int(path: str, line: int, column: str, s: str, lo: int) -> int:
    if not _INT.fullmatch(s) or int(s) < lo:
        raise TraceError(path, line, column, s, f"an integer >= {lo}")
    if int(s) > _INT64_MAX:
        raise TraceError(path, line, column, s, f"an integer <= {_INT64_MAX}")
    return int(s)


def _num(path: str, line: int, column: str, s: str, what: str) -> float:
    """A finite number >= 0; ``what`` says what the column holds, for the error."""
    if not _NUM.fullmatch(s) or not math.isfinite(float(s)) or float(s) < 0:
        raise TraceError(path, line, column, s, f"a number >= 0 ({what})")
    return float(s)


@functools.lru_cache(maxsize=4096)
def _day(y: int, mo: int, d: int) -> int:
    """Days from 1970-01-01 (ValueError for a day that does not exist)."""
    return date(y, mo, d).toordinal() - _EPOCH_DAY


def _stamp_ns(path: str, line: int, column: str, s: str, example: str) -> int:
    """Nanoseconds since 1970-01-01 UTC of 'YYYY-MM-DD HH:MM:SS[.fffffffff][+HH:MM]' (no
    offset: taken as written), for years 1970-2261 (the range of int64 nanoseconds)."""
    m = _STAMP.fullmatch(s)
    try:
        if not m:
            raise ValueError
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        oh, om = (int(m.group(9)), int(m.group(10))) if m.group(8) else (0, 0)
        if not 1970 <= y <= 2261 or h > 23 or mi > 59 or sec > 59 or oh > 23 or om > 59:
            raise ValueError
        secs = _day(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec
    except ValueError:
        raise TraceError(path, line, column, s, f"a timestamp like {example!r}") from None
    offset = (oh * 3600 + om * 60) * (-1 if m.group(8) == "-" else 1)
    return (secs - offset) * 10**9 + int((m.group(7) or "").ljust(9, "0"))


def _rows(path: str, headers: tuple[tuple[str, ...], ...], headerless: bool = False) -> Iterator:
    """Yield the file's header (one of ``headers``), then (line, fields) of each data row,
    after checking that it has the header's number of fields. With ``headerless`` a file
    whose first line is a data row of ``headers[0]``'s width is read as one without a header."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        first = next(reader, None)
        pending = []
        if first is not None and tuple(first) in headers:
            header = tuple(first)
        elif headerless and first is not None and len(first) == len(headers[0]):
            header, pending = headers[0], [(1, first)]
        else:
            want = " or ".join(repr(",".join(h)) for h in headers)
            alt = f", or no header and rows of {len(headers[0])} fields" if headerless else ""
            raise TraceError(path, 1, "header", ",".join(first or []), f"exactly {want}{alt}")
        yield header
        n = 0
        for line, row in pending:
            n += 1
            yield line, row
        for row in reader:
            if len(row) != len(header):
                raise TraceError(path, reader.line_num, "row", ",".join(row), f"{len(header)} fields ({','.join(header)})")
            n += 1
            yield reader.line_num, row
        if n == 0:
            raise TraceError(path, reader.line_num + 1, "row", "", "at least one data row after the header")


def _in_order(path: str, line: int, column: str, s: str, now: float, prev: float, what: str) -> None:
    if now < prev:
        raise TraceError(path, line, column, s, f"a time >= the previous row's ({prev:g}): rows in {what} order")


# --- pollux ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_pollux(path: str, mtime_ns: int, size: int) -> PolluxTrace:
    """Pollux/Sia job trace (petuum/adaptdl ``simulator/workloads/*.csv``): ``time`` is the
    submit time in seconds from trace start, ``num_replicas`` the GPUs asked for."""
    rows = _rows(path, (POLLUX_HEADER,))
    next(rows)
    names, apps = [], []
    times, replicas, batches = array("d"), array("q"), array("q")
    prev = 0.0
    for line, (name, time, app, rep, batch) in rows:
        if not name:
            raise TraceError(path, line, "name", name, "a non-empty job name")
        t = _num(path, line, "time", time, "seconds from trace start")
        _in_order(path, line, "time", time, t, prev, "submit")
        prev = t
        if app not in POLLUX_APPLICATIONS:
            raise TraceError(path, line, "application", app, f"one of {', '.join(POLLUX_APPLICATIONS)}")
        replicas.append(_int(path, line, "num_replicas", rep, 1))
        batches.append(_int(path, line, "batch_size", batch, 1))
        names.append(name)
        apps.append(app)
        times.append(t)
    return PolluxTrace(
        path,
        "pollux",
        _frozen(times, np.float64),
        _frozen(replicas, np.int64),
        _frozen(np.full(len(times), np.nan), np.float64),
        name=tuple(names),
        application=tuple(apps),
        batch_size=_frozen(batches, np.int64),
    )


# --- philly ---------------------------------------------------------------------------------


def _json_items(path: str) -> Iterator[tuple[int, object]]:
    """Yield (line, element) for each element of the JSON list that is the whole file."""
    with open(path, encoding="utf-8-sig") as fh:
        text = fh.read()
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[i : i + 1] != "[":
        raise TraceError(path, 1 + text.count("\n", 0, i), "file", text[i : i + 20], "a JSON list of jobs, starting with '['")
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    line, last, n = 1, 0, 0
    while text[i : i + 1] != "]":
        line += text.count("\n", last, i)
        last = i
        n += 1
        try:
            item, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise TraceError(path, e.lineno, "json", text[e.pos : e.pos + 20], f"valid JSON ({e.msg})") from None
        yield line, item
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text[i : i + 1] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        elif text[i : i + 1] != "]":
            raise TraceError(path, 1 + text.count("\n", 0, i), "json", text[i : i + 20], "',' or ']' after a job")
    if n == 0:
        raise TraceError(path, 1 + text.count("\n", 0, i), "file", "[]", "at least one job in the list")
    j = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    if j < len(text):
        raise TraceError(path, 1 + text.count("\n", 0, j), "json", text[j : j + 20], "nothing after the list's ']'")


def _philly_stamp(path: str, line: int, column: str, value: object, required: bool) -> int | None:
    if not required and value in (None, "", "None"):
        return None
    if not isinstance(value, str):
        raise TraceError(path, line, column, value, "a timestamp string like '2017-10-07 01:11:39'" + ("" if required else " or null"))
    return _stamp_ns(path, line, column, value, "2017-10-07 01:11:39")


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
    submit = _philly_stamp(path, line, "submitted_time", job["submitted_time"], required=True)
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
                _philly_stamp(path, line, f"{col}.start_time", a["start_time"], required=False),
                _philly_stamp(path, line, f"{col}.end_time", a["end_time"], required=False),
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
    if attempts and times[0][0] is not None and times[-1][1] is not None:
        if times[-1][1] < times[0][0]:
            raise TraceError(
                path,
                line,
                f"attempts[{len(attempts) - 1}].end_time",
                attempts[-1]["end_time"],
                f"a time >= the first attempt's start_time ({attempts[0]['start_time']})",
            )
        duration = (times[-1][1] - times[0][0]) / 1e9
    return submit, gpus, duration  # type: ignore[return-value]


def _sorted_jobs(path: str, fmt: str, ns: list[int] | array, gpus, duration, unlaunched: int = 0) -> JobTrace:
    """A JobTrace sorted stably by submit time, ``time_s`` from the earliest."""
    t = np.asarray(ns, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    return JobTrace(
        path,
        fmt,
        _frozen((t - t[0]) / 1e9, np.float64),
        _frozen(np.asarray(gpus, np.int64)[order], np.int64),
        _frozen(np.asarray(duration, np.float64)[order], np.float64),
        unlaunched,
    )


@functools.lru_cache(maxsize=32)
def parse_philly(path: str, mtime_ns: int, size: int) -> JobTrace:
    """Philly ``cluster_job_log`` (msr-fiddle/philly-traces): ``gpus`` are the GPUs of the
    first attempt (0 for a job never scheduled), the run time is from the first attempt's start
    to the last attempt's end (NaN when either is missing), as the trace's own notebook does."""
    ns, gpus, duration = array("q"), array("q"), array("d")
    for line, job in _json_items(path):
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
    rows = _rows(path, (PAI_HEADER,), headerless=True)
    next(rows)
    jobs: dict[str, list[float]] = {}  # job_name -> [first launch, last end, GPUs (fractional)]
    for line, (name, _task, inst, status, start, end, _cpu, _mem, gpu, _gtype) in rows:
        if not name:
            raise TraceError(path, line, "job_name", name, "a non-empty job name")
        n = _num(path, line, "inst_num", inst, "instances of the task")
        if status not in PAI_STATUSES:
            raise TraceError(path, line, "status", status, f"one of {', '.join(PAI_STATUSES)}")
        s = _num(path, line, "start_time", start, "seconds, or empty") if start else math.nan
        e = _num(path, line, "end_time", end, "seconds, or empty") if end else math.nan
        if e < s:
            raise TraceError(path, line, "end_time", end, f"a time >= start_time ({start})")
        if end and not start:
            raise TraceError(path, line, "end_time", end, "empty when start_time is (a task that never launched cannot end)")
        g = _num(path, line, "plan_gpu", gpu, "percent of one GPU, or empty") if gpu else 0.0
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
    rows = _rows(path, (HELIOS_HEADER,))
    next(rows)
    ns, gpus, duration = array("q"), array("q"), array("d")
    for line, row in rows:
        _int(path, line, "job_id", row[0], 0)
        gpus.append(_int(path, line, "gpu_num", row[3], 0))
        if row[6] not in HELIOS_STATES:
            raise TraceError(path, line, "state", row[6], f"one of {', '.join(HELIOS_STATES)}")
        ns.append(_stamp_ns(path, line, "submit_time", row[7], "2020-06-09 18:41:01"))
        duration.append(_num(path, line, "duration", row[10], "seconds, or empty") if row[10] else math.nan)
    return _sorted_jobs(path, "helios", ns, gpus, duration)


# --- azure ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_azure(path: str, mtime_ns: int, size: int) -> AzureTrace:
    """Azure LLM inference trace, 2023 (naive timestamps, 7 fractional digits) or 2024
    (``+00:00`` offset, up to 6 digits); ``time_s`` is since the first row."""
    rows = _rows(path, (AZURE_HEADER,))
    next(rows)
    stamps, ctx, gen = array("q"), array("q"), array("q")
    for line, (stamp, context, generated) in rows:
        ns = _stamp_ns(path, line, "TIMESTAMP", stamp, "2023-11-16 18:15:46.6805900")
        if stamps and ns < stamps[-1]:
            raise TraceError(path, line, "TIMESTAMP", stamp, "a timestamp >= the previous row's: rows in arrival order")
        stamps.append(ns)
        ctx.append(_int(path, line, "ContextTokens", context, 1))
        gen.append(_int(path, line, "GeneratedTokens", generated, 0))
    t = np.asarray(stamps, dtype=np.int64)
    return AzureTrace(path, "azure", _frozen((t - t[0]) / 1e9, np.float64), _frozen(ctx, np.int64), _frozen(gen, np.int64))


# --- burstgpt -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_burstgpt(path: str, mtime_ns: int, size: int) -> BurstGPTTrace:
    """BurstGPT (HPMLL/BurstGPT): ``Request tokens`` are the context, ``Response tokens`` the
    generated tokens (0 for a failed request, kept: it still arrived). ``Total tokens`` is
    checked to be an integer; ``Session ID`` and ``Elapsed time`` are not read."""
    rows = _rows(path, BURSTGPT_HEADERS)
    col = {c: i for i, c in enumerate(next(rows))}
    at, mo, req, resp, tot, log = (col[c] for c in ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"))
    times, ctx, gen, model = array("d"), array("q"), array("q"), array("q")
    conversation = bytearray()
    models: dict[str, int] = {}
    prev = 0.0
    for line, row in rows:
        t = _num(path, line, "Timestamp", row[at], "seconds from 0:00 of day one")
        _in_order(path, line, "Timestamp", row[at], t, prev, "arrival")
        prev = t
        if not row[mo]:
            raise TraceError(path, line, "Model", row[mo], "a model name such as 'ChatGPT' or 'GPT-4'")
        ctx.append(_int(path, line, "Request tokens", row[req], 0))
        gen.append(_int(path, line, "Response tokens", row[resp], 0))
        _int(path, line, "Total tokens", row[tot], 0)
        if row[log] not in BURSTGPT_LOG_TYPES:
            raise TraceError(path, line, "Log Type", row[log], f"one of {', '.join(map(repr, BURSTGPT_LOG_TYPES))}")
        times.append(t)
        model.append(models.setdefault(row[mo], len(models)))
        conversation.append(row[log] == BURSTGPT_LOG_TYPES[0])
    return BurstGPTTrace(
        path,
        "burstgpt",
        _frozen(times, np.float64),
        _frozen(ctx, np.int64),
        _frozen(gen, np.int64),
        models=tuple(models),
        model=_frozen(model, np.int64),
        conversation=_frozen(np.frombuffer(bytes(conversation), dtype=bool), bool),
    )


# --- formats --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """A trace format: its parser and how to recognise its files."""

    name: str
    kind: str  # "jobs" or "requests"
    title: str  # what the format is, for messages
    layout: str  # its header or file layout, for messages
    parse: Callable[[str, int, int], JobTrace | RequestTrace]


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("pollux", "jobs", "Pollux job trace", ",".join(POLLUX_HEADER), parse_pollux),
        Format("philly", "jobs", "Philly job log", "a JSON list of jobs (cluster_job_log)", parse_philly),
        Format(
            "pai", "jobs", "Alibaba PAI 2020 task table", ",".join(PAI_HEADER) + " (file pai_task_table*.csv, header optional)", parse_pai
        ),
        Format("helios", "jobs", "Helios job log", ",".join(HELIOS_HEADER), parse_helios),
        Format("azure", "requests", "Azure LLM inference trace", ",".join(AZURE_HEADER), parse_azure),
        Format("burstgpt", "requests", "BurstGPT trace", " or ".join(",".join(h) for h in BURSTGPT_HEADERS), parse_burstgpt),
    )
}
KIND_CLASS = {"jobs": JobTrace, "requests": RequestTrace}


def sniff(path: str) -> str:
    """The format of the file at ``path``, from its first line (a PAI task table without its
    header is recognised by its file name, ``pai_task_table*.csv``)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        first = fh.readline()
    if first.lstrip().startswith("["):
        return "philly"
    header = tuple(next(csv.reader([first]), []))
    for name, fmt_header in (("pollux", POLLUX_HEADER), ("azure", AZURE_HEADER), ("helios", HELIOS_HEADER), ("pai", PAI_HEADER)):
        if header == fmt_header:
            return name
    if header in BURSTGPT_HEADERS:
        return "burstgpt"
    if Path(path).name.startswith("pai_task_table"):
        return "pai"
    known = "; ".join(f"{f.layout} ({f.title})" for f in FORMATS.values())
    raise TraceError(path, 1, "header", ",".join(header), f"the first line of a known trace: {known}")


__all__ = [
    "AZURE_HEADER",
    "BURSTGPT_HEADERS",
    "FORMATS",
    "HELIOS_HEADER",
    "KIND_CLASS",
    "PAI_HEADER",
    "POLLUX_APPLICATIONS",
    "POLLUX_HEADER",
    "AzureTrace",
    "BurstGPTTrace",
    "Format",
    "JobTrace",
    "PolluxTrace",
    "RequestTrace",
    "TraceError",
    "parse_azure",
    "parse_burstgpt",
    "parse_helios",
    "parse_pai",
    "parse_philly",
    "parse_pollux",
    "sniff",
]

"""Arrival processes and trace replay: how many jobs or requests reach a tenant each round.

A round lasts ``round_seconds``. The mean number of arrivals per round is

    m = rate * round_seconds             (serve: ``rate`` is requests per second)
    m = rate / 3600 * round_seconds      (train: ``rate`` is jobs per hour)

and ``WorkloadSpec.pattern`` picks how the count ``N_t`` of round ``t`` is drawn:

poisson
    ``N_t ~ Poisson(m)``, independent rounds.
bursty
    A Markov-modulated Poisson process (Fischer & Meier-Hellstern 1993). A two-state chain
    ``S_t`` in {off, on} leaves a burst with ``q = P(on -> off) = 1 / burst_rounds`` (so a
    burst lasts ``burst_rounds`` rounds on average) and enters one with
    ``p = P(off -> on) = q f / (1 - f)``, ``f = burst_fraction``; its stationary on-fraction is
    ``p / (p + q) = f``. ``S_0`` is drawn from that stationary distribution. Then
    ``N_t ~ Poisson(lam(S_t))`` with ``lam_off = m / (f k + 1 - f)``, ``lam_on = k lam_off``,
    ``k = burst_factor``, so the long-run mean ``f lam_on + (1 - f) lam_off`` is still ``m``.
    If ``q f / (1 - f) > 1`` then ``p`` is clipped to 1 and the on-fraction is ``1 / (1 + q)`` < f.
    With ``burst_shared`` the tenant follows a chain shared by several tenants (correlated
    bursts); its on/off rates still use the tenant's own ``f`` and ``k``.
diurnal
    ``N_t ~ Poisson(m (1 + A sin(2 pi (t + 1/2) round_seconds / P)))`` with
    ``A = diurnal_amplitude`` in [0, 1] and ``P = diurnal_period_s``: the rate at the middle
    of each round, swinging by +-A around ``m``.
trace
    Deterministic replay of a real trace (``/work/shared/traces/README.md``): serving tenants
    replay an Azure LLM inference trace (one row per request), training tenants a Pollux job
    trace (one row per job). Rows ``i`` (0-based) with ``i % trace_shards == trace_shard`` are
    kept, so shards split a trace between tenants. A row at trace time ``s`` arrives at
    ``(s - trace_offset_s) / trace_speedup`` simulated seconds; rows that land before 0 or
    after round ``n_rounds - 1`` are dropped, and round ``t`` counts arrivals in
    ``[t round_seconds, (t + 1) round_seconds)``. ``rate`` is not used.

Every random schedule is a function of the ``numpy.random.Generator`` passed in, never of
global state. Traces are validated row by row: the first bad row raises :class:`TraceError`
naming the file and line. Parsed traces are cached per (absolute path, mtime, size) and their
arrays are read-only.
"""

from __future__ import annotations

import csv
import functools
import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from fleet_marl.config import WorkloadSpec

TRACES_ENV = "FLEET_MARL_TRACES"
POLLUX_HEADER = ("name", "time", "application", "num_replicas", "batch_size")
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
POLLUX_APPLICATIONS = ("cifar10", "ncf", "deepspeech2", "imagenet", "bert", "yolov3")
KINDS = ("train", "serve")

_INT = re.compile(r"[+-]?\d+")
_NUM = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{0,9}))?")
_INT64_MAX = np.iinfo(np.int64).max


class TraceError(ValueError):
    """A trace file has a bad row. ``line`` is 1-based; the header is line 1."""

    def __init__(self, path: str, line: int, column: str, value: object, expected: str):
        self.path, self.line, self.column, self.value, self.expected = str(path), line, column, value, expected
        super().__init__(f"{path}:{line}: {column} = {value!r}: expected {expected}")


def traces_dir() -> Path:
    """``$FLEET_MARL_TRACES`` if set, else ``<repo root>/../shared/traces``."""
    env = os.environ.get(TRACES_ENV)
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def resolve_trace(name: str | os.PathLike) -> Path:
    """``name`` itself if it is an existing file, else ``traces_dir() / name`` if that exists."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    in_dir = traces_dir() / name
    if in_dir.is_file():
        return in_dir
    raise FileNotFoundError(f"trace {str(name)!r} not found: tried {given.resolve()} and {in_dir}; "
                            f"set {TRACES_ENV} to the folder that holds the traces")


@dataclass(frozen=True, eq=False)
class PolluxTrace:
    """A Pollux job trace: one training job per row, ``time_s`` from trace start."""
    path: str
    name: tuple[str, ...]
    time_s: np.ndarray  # (jobs,) float64 submit time
    application: tuple[str, ...]
    num_replicas: np.ndarray  # (jobs,) int64 GPUs requested
    batch_size: np.ndarray  # (jobs,) int64


@dataclass(frozen=True, eq=False)
class AzureTrace:
    """An Azure LLM inference trace: one request per row, ``time_s`` since the first row."""
    path: str
    time_s: np.ndarray  # (requests,) float64
    context_tokens: np.ndarray  # (requests,) int64
    generated_tokens: np.ndarray  # (requests,) int64


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


def _rows(path: str, header: tuple[str, ...]):
    """Yield (line, fields) of each data row after checking the header and field counts."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        first = next(reader, None)
        if first is None or tuple(first) != header:
            raise TraceError(path, 1, "header", ",".join(first or []), f"exactly {','.join(header)!r}")
        n = 0
        for row in reader:
            if len(row) != len(header):
                raise TraceError(path, reader.line_num, "row", ",".join(row), f"{len(header)} fields ({','.join(header)})")
            n += 1
            yield reader.line_num, row
        if n == 0:
            raise TraceError(path, reader.line_num + 1, "row", "", "at least one data row after the header")


@functools.lru_cache(maxsize=32)
def _parse_pollux(path: str, mtime_ns: int, size: int) -> PolluxTrace:
    cols: tuple[list, ...] = ([], [], [], [], [])
    prev = 0.0
    for line, (name, time, app, replicas, batch) in _rows(path, POLLUX_HEADER):
        if not name:
            raise TraceError(path, line, "name", name, "a non-empty job name")
        if not _NUM.fullmatch(time) or not np.isfinite(float(time)) or float(time) < 0:
            raise TraceError(path, line, "time", time, "a number >= 0 (seconds from trace start)")
        if float(time) < prev:
            raise TraceError(path, line, "time", time, f"a time >= the previous row's ({prev:g}): rows in submit order")
        prev = float(time)
        if app not in POLLUX_APPLICATIONS:
            raise TraceError(path, line, "application", app, f"one of {', '.join(POLLUX_APPLICATIONS)}")
        row = (name, prev, app, _int(path, line, "num_replicas", replicas, 1), _int(path, line, "batch_size", batch, 1))
        for c, v in zip(cols, row):
            c.append(v)
    return PolluxTrace(path, tuple(cols[0]), _frozen(cols[1], np.float64), tuple(cols[2]),
                       _frozen(cols[3], np.int64), _frozen(cols[4], np.int64))


def _stamp_ns(path: str, line: int, s: str) -> int:
    """Nanoseconds since 0001-01-01 of a 'YYYY-MM-DD HH:MM:SS[.fffffffff]' timestamp."""
    m = _STAMP.fullmatch(s)
    try:
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6]) if m else (0,) * 6
        if h > 23 or mi > 59 or sec > 59:
            raise ValueError
        secs = date(y, mo, d).toordinal() * 86_400 + h * 3600 + mi * 60 + sec  # year 0 -> ValueError
    except ValueError:
        raise TraceError(path, line, "TIMESTAMP", s, "a timestamp like '2023-11-16 18:15:46.6805900'") from None
    return secs * 10**9 + int((m.group(7) or "").ljust(9, "0"))  # type: ignore[union-attr]


@functools.lru_cache(maxsize=32)
def _parse_azure(path: str, mtime_ns: int, size: int) -> AzureTrace:
    stamps: list[int] = []
    ctx: list[int] = []
    gen: list[int] = []
    for line, (stamp, context, generated) in _rows(path, AZURE_HEADER):
        ns = _stamp_ns(path, line, stamp)
        if stamps and ns < stamps[-1]:
            raise TraceError(path, line, "TIMESTAMP", stamp, "a timestamp >= the previous row's: rows in arrival order")
        stamps.append(ns)
        ctx.append(_int(path, line, "ContextTokens", context, 1))
        gen.append(_int(path, line, "GeneratedTokens", generated, 0))
    t = [(ns - stamps[0]) / 1e9 for ns in stamps]
    return AzureTrace(path, _frozen(t, np.float64), _frozen(ctx, np.int64), _frozen(gen, np.int64))


def _key(path) -> tuple[str, int, int]:
    p = resolve_trace(path).resolve()
    st = p.stat()
    return str(p), st.st_mtime_ns, st.st_size


def read_pollux(path: str | os.PathLike) -> PolluxTrace:
    """Parse and validate a Pollux trace (a path, or a file name in :func:`traces_dir`)."""
    return _parse_pollux(*_key(path))


def read_azure(path: str | os.PathLike) -> AzureTrace:
    """Parse and validate an Azure LLM inference trace (a path, or a name in :func:`traces_dir`)."""
    return _parse_azure(*_key(path))


def read_trace(path: str | os.PathLike) -> PolluxTrace | AzureTrace:
    """Parse a trace of either format, told apart by its header line."""
    key = _key(path)
    with open(key[0], newline="", encoding="utf-8-sig") as fh:
        header = tuple(next(csv.reader(fh), []))
    if header == POLLUX_HEADER:
        return _parse_pollux(*key)
    if header == AZURE_HEADER:
        return _parse_azure(*key)
    known = f"{','.join(POLLUX_HEADER)!r} (Pollux) or {','.join(AZURE_HEADER)!r} (Azure)"
    raise TraceError(key[0], 1, "header", ",".join(header), known)


def trace_stats(path: str | os.PathLike) -> dict:
    """Summary figures of a trace; durations run from 0 to the last row's time."""
    tr = read_trace(path)
    dur = float(tr.time_s[-1])
    n = len(tr.time_s)
    per_s = n / dur if dur > 0 else float("nan")
    if isinstance(tr, AzureTrace):
        return {"requests": n, "duration_s": dur, "rate_per_s": per_s,
                "mean_context_tokens": float(tr.context_tokens.mean()),
                "mean_generated_tokens": float(tr.generated_tokens.mean())}
    return {"jobs": n, "duration_s": dur, "jobs_per_hour": per_s * 3600, "mean_replicas": float(tr.num_replicas.mean())}


# --- arrival schedules ------------------------------------------------------------------------


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: expected one of {', '.join(map(repr, KINDS))}")


def mean_per_round(spec: WorkloadSpec, kind: str, round_seconds: float) -> float:
    """Mean arrivals per round: requests (serve, ``rate`` per s) or jobs (train, ``rate`` per hour)."""
    _check_kind(kind)
    return spec.rate * round_seconds if kind == "serve" else spec.rate / 3600.0 * round_seconds


def burst_chain(n_rounds: int, burst_fraction: float, burst_rounds: float, rng: np.random.Generator) -> np.ndarray:
    """(n_rounds,) bool: the on/off state of the two-state burst chain in each round."""
    if not 0.0 < burst_fraction < 1.0 or burst_rounds < 1.0 or n_rounds < 0:
        raise ValueError(f"burst_chain({n_rounds}, {burst_fraction}, {burst_rounds}): expected n_rounds >= 0, "
                         "burst_fraction in (0, 1), burst_rounds >= 1")
    q = 1.0 / burst_rounds
    p = min(1.0, q * burst_fraction / (1.0 - burst_fraction))
    u = rng.random(n_rounds)
    on = np.empty(n_rounds, dtype=bool)
    state = True
    for t in range(n_rounds):
        state = u[t] < p / (p + q) if t == 0 else (u[t] >= q if state else u[t] < p)
        on[t] = state
    return on


def _trace_counts(spec: WorkloadSpec, kind: str, n_rounds: int, round_seconds: float) -> np.ndarray:
    tr = read_trace(resolve_trace(spec.trace))  # type: ignore[arg-type]
    want = AzureTrace if kind == "serve" else PolluxTrace
    if not isinstance(tr, want):
        fmt, header = ("an Azure LLM inference", AZURE_HEADER) if kind == "serve" else ("a Pollux job", POLLUX_HEADER)
        got = POLLUX_HEADER if isinstance(tr, PolluxTrace) else AZURE_HEADER
        raise TraceError(tr.path, 1, "header", ",".join(got),
                         f"{fmt} trace ({','.join(header)}): a {kind} tenant replays {'requests' if kind == 'serve' else 'jobs'}")
    t = tr.time_s[np.arange(len(tr.time_s)) % spec.trace_shards == spec.trace_shard]
    t = (t - spec.trace_offset_s) / spec.trace_speedup
    rounds = np.floor(t[t >= 0] / round_seconds).astype(np.int64)
    return np.bincount(rounds[rounds < n_rounds], minlength=n_rounds).astype(np.float64)


def arrival_schedule(spec: WorkloadSpec, kind: str, n_rounds: int, round_seconds: float,
                     rng: np.random.Generator, shared_bursts: np.ndarray | None = None) -> np.ndarray:
    """(n_rounds,) float64 integer-valued arrival counts for one tenant (see the module docstring).

    ``shared_bursts`` is the (n_rounds,) bool chain used instead of a private one when
    ``spec.burst_shared``; ``rng`` is not used for ``trace``.
    """
    _check_kind(kind)
    if n_rounds < 0 or not round_seconds > 0:
        raise ValueError(f"n_rounds = {n_rounds}, round_seconds = {round_seconds}: expected >= 0 and > 0")
    if spec.pattern == "trace":
        return _trace_counts(spec, kind, n_rounds, round_seconds)
    m = mean_per_round(spec, kind, round_seconds)
    if spec.pattern == "poisson":
        lam = np.full(n_rounds, m)
    elif spec.pattern == "bursty":
        if spec.burst_shared and shared_bursts is not None:
            chain = np.asarray(shared_bursts, dtype=bool)
            if chain.shape != (n_rounds,):
                raise ValueError(f"shared_bursts has shape {chain.shape}: expected ({n_rounds},)")
        else:
            chain = burst_chain(n_rounds, spec.burst_fraction, spec.burst_rounds, rng)
        f, k = spec.burst_fraction, spec.burst_factor
        lam_off = m / (f * k + 1.0 - f)
        lam = np.where(chain, k * lam_off, lam_off)
    elif spec.pattern == "diurnal":
        t = np.arange(n_rounds) + 0.5
        lam = m * (1.0 + spec.diurnal_amplitude * np.sin(2.0 * np.pi * t * round_seconds / spec.diurnal_period_s))
    else:
        raise ValueError(f"pattern = {spec.pattern!r}: expected poisson, bursty, diurnal or trace")
    return rng.poisson(lam).astype(np.float64)


__all__ = ["AzureTrace", "KINDS", "POLLUX_APPLICATIONS", "PolluxTrace", "TRACES_ENV", "TraceError", "arrival_schedule",
           "burst_chain", "mean_per_round", "read_azure", "read_pollux", "read_trace", "resolve_trace", "trace_stats", "traces_dir"]

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
    Deterministic replay of a real trace (:mod:`fleet_marl.traces`, docs/traces.md): serving
    tenants replay a request trace (Azure LLM inference, BurstGPT: one row per request),
    training tenants a job trace (Pollux, Philly, Alibaba PAI, Helios: one entry per job; only
    jobs asking for >= 1 GPU, so CPU-only jobs and jobs with no GPU count recorded are not
    arrivals). ``WorkloadSpec.trace`` is a path or a name, found by
    :func:`~fleet_marl.traces.resolve_trace` (a path, ``$FLEET_MARL_TRACES``, the samples that
    ship with the package, the fetched cache). Entries ``i`` (0-based, in arrival order) with
    ``i % trace_shards == trace_shard`` are kept, so shards split a trace between tenants. An
    entry at trace time ``s`` arrives at ``(s - trace_offset_s) / trace_speedup`` simulated
    seconds; entries that land before 0 or after round ``n_rounds - 1`` are dropped, and round
    ``t`` counts arrivals in ``[t round_seconds, (t + 1) round_seconds)``. ``rate`` is not used.

Every random schedule is a function of the ``numpy.random.Generator`` passed in, never of
global state. The trace readers (re-exported here from :mod:`fleet_marl.traces`) validate every
row and raise :class:`TraceError` naming the file, line and column of the first bad one; parsed
traces are cached per (absolute path, mtime, size) and their arrays are read-only.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from fleet_marl.config import WorkloadSpec
from fleet_marl.traces import (
    FORMATS,
    TRACES_ENV,
    AzureTrace,
    JobTrace,
    PolluxTrace,
    RequestTrace,
    TraceError,
    read_azure,
    read_pollux,
    read_trace,
    resolve_trace,
    trace_stats,
    traces_dir,
)
from fleet_marl.traces.readers import AZURE_HEADER, POLLUX_APPLICATIONS, POLLUX_HEADER

KINDS = ("train", "serve")
#: The trace kind each tenant kind replays.
TRACE_KIND = {"train": "jobs", "serve": "requests"}


# --- arrival schedules ------------------------------------------------------------------------


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: expected one of {', '.join(map(repr, KINDS))}")


def mean_per_round(spec: WorkloadSpec, kind: str, round_seconds: float) -> float:
    """Mean arrivals per round: requests (serve, ``rate`` per s) or jobs (train, ``rate`` per hour)."""
    _check_kind(kind)
    return spec.rate * round_seconds if kind == "serve" else spec.rate / 3600.0 * round_seconds


def _chain_rates(burst_fraction: float, burst_rounds: float, n_rounds: int = 0) -> tuple[float, float]:
    """``(p, q)``: the burst chain's P(off -> on) and P(on -> off), or a ``ValueError``."""
    if not 0.0 < burst_fraction < 1.0 or burst_rounds < 1.0 or n_rounds < 0:
        raise ValueError(
            f"burst_chain({n_rounds}, {burst_fraction}, {burst_rounds}): expected n_rounds >= 0, "
            "burst_fraction in (0, 1), burst_rounds >= 1"
        )
    q = 1.0 / burst_rounds
    return min(1.0, q * burst_fraction / (1.0 - burst_fraction)), q


def burst_chain(n_rounds: int, burst_fraction: float, burst_rounds: float, rng: np.random.Generator) -> np.ndarray:
    """(n_rounds,) bool: the on/off state of the two-state burst chain in each round."""
    p, q = _chain_rates(burst_fraction, burst_rounds, n_rounds)
    on = np.empty(n_rounds, dtype=bool)
    _chain(rng, p, q, on)
    return on


@nb.njit(cache=True, nogil=True)
def _chain(rng, p, q, on):
    """Fill ``on`` with the chain's states: one uniform draw per round, S_0 from the stationary law."""
    state = True
    for t in range(on.shape[0]):
        u = rng.random()
        state = u < p / (p + q) if t == 0 else (u >= q if state else u < p)
        on[t] = state


#: How a tenant's arrivals are drawn (``Schedules.code``).
POISSON_OF_LAM, BURSTY, REPLAY = 0, 1, 2


class Schedules(NamedTuple):
    """How to draw the arrival schedules of T tenants over ``n`` rounds (:func:`schedules`),
    as arrays for the compiled draw. ``lam`` (T, n) is each round's Poisson mean (poisson,
    diurnal) or the replayed counts (trace); bursty tenants draw ``lam_on`` / ``lam_off`` by
    their chain, their own (``p``, ``q``) or the shared one."""

    code: np.ndarray  # (T,) int64 POISSON_OF_LAM, BURSTY or REPLAY
    lam: np.ndarray  # (T, n) float64
    lam_on: np.ndarray  # (T,) float64
    lam_off: np.ndarray  # (T,) float64
    p: np.ndarray  # (T,) float64 own chain: P(off -> on)
    q: np.ndarray  # (T,) float64 own chain: P(on -> off)
    shared: np.ndarray  # (T,) bool follows the shared chain
    shared_pq: np.ndarray  # (2,) float64 the shared chain's (p, q)
    prompt_tokens: np.ndarray  # (n, T) float64 each round's mean request lengths (:func:`trace_lengths` for a replayed
    output_tokens: np.ndarray  # (n, T) float64 request trace, else the config's means; trainers: the config's, unused)
    replays_lengths: bool  # some tenant replays a request trace's lengths


def schedules(specs, kinds, n_rounds: int, round_seconds: float) -> Schedules:
    """The :class:`Schedules` of tenants with workloads ``specs`` and ``kinds``. The shared
    burst chain follows the first tenant with ``burst_shared`` (else the first tenant)."""
    if n_rounds < 0 or not round_seconds > 0:
        raise ValueError(f"n_rounds = {n_rounds}, round_seconds = {round_seconds}: expected >= 0 and > 0")
    T = len(specs)
    replays = any(sp.pattern == "trace" and k == "serve" for sp, k in zip(specs, kinds, strict=True))
    out = Schedules(
        np.zeros(T, np.int64),
        np.zeros((T, n_rounds)),
        np.zeros(T),
        np.zeros(T),
        np.zeros(T),
        np.zeros(T),
        np.zeros(T, bool),
        np.zeros(2),
        np.empty((n_rounds, T)),
        np.empty((n_rounds, T)),
        replays,
    )
    lead = next((w for w in specs if w.burst_shared), specs[0])
    out.shared_pq[:] = _chain_rates(lead.burst_fraction, lead.burst_rounds)
    for i, (spec, kind) in enumerate(zip(specs, kinds, strict=True)):
        _check_kind(kind)
        out.prompt_tokens[:, i], out.output_tokens[:, i] = float(spec.prompt_tokens), float(spec.output_tokens)
        if spec.pattern == "trace" and kind == "serve":
            out.prompt_tokens[:, i], out.output_tokens[:, i] = trace_lengths(spec, n_rounds, round_seconds)
        if spec.pattern == "trace":
            out.code[i] = REPLAY
            out.lam[i] = _trace_counts(spec, kind, n_rounds, round_seconds)
            continue
        m = mean_per_round(spec, kind, round_seconds)
        if spec.pattern == "poisson":
            out.lam[i] = m
        elif spec.pattern == "bursty":
            f, k = spec.burst_fraction, spec.burst_factor
            out.code[i] = BURSTY
            out.lam_off[i] = m / (f * k + 1.0 - f)
            out.lam_on[i] = k * out.lam_off[i]
            out.p[i], out.q[i] = _chain_rates(f, spec.burst_rounds)
            out.shared[i] = spec.burst_shared
        elif spec.pattern == "diurnal":
            t = np.arange(n_rounds) + 0.5
            out.lam[i] = m * (1.0 + spec.diurnal_amplitude * np.sin(2.0 * np.pi * t * round_seconds / spec.diurnal_period_s))
        else:
            raise ValueError(f"pattern = {spec.pattern!r}: expected poisson, bursty, diurnal or trace")
    return out


@nb.njit(cache=True, nogil=True)
def _draw(rng, code, lam, lam_on, lam_off, p, q, shared, chain, own, out):
    """One tenant's schedule into ``out`` (n,): Poisson draws in round order (``chain`` the
    shared chain, ``own`` scratch for a private one)."""
    n = out.shape[0]
    if code == REPLAY:
        for r in range(n):
            out[r] = lam[r]
        return
    if code == BURSTY:
        if not shared:
            _chain(rng, p, q, own)
            chain = own
        for r in range(n):
            out[r] = rng.poisson(lam_on if chain[r] else lam_off)
        return
    for r in range(n):
        out[r] = rng.poisson(lam[r])


@nb.njit(cache=True, nogil=True)
def draw_cluster(rng, code, lam, lam_on, lam_off, p, q, shared, shared_pq, out, extra):
    """One cluster's episode from ``rng``: the shared burst chain (always drawn, so the stream
    does not depend on the flags), each tenant's schedule into ``out`` (n, T), then ``extra``
    (m, T) uniform draws in row order (the env's tie-breaks: the same numbers as ``m`` calls
    of ``rng.random(T)``)."""
    n, T = out.shape
    chain = np.empty(n, np.bool_)
    own = np.empty(n, np.bool_)
    one = np.empty(n)
    _chain(rng, shared_pq[0], shared_pq[1], chain)
    for i in range(T):
        _draw(rng, code[i], lam[i], lam_on[i], lam_off[i], p[i], q[i], shared[i], chain, own, one)
        for r in range(n):
            out[r, i] = one[r]
    for r in range(extra.shape[0]):
        for i in range(T):
            extra[r, i] = rng.random()


def _trace_rounds(spec: WorkloadSpec, kind: str, n_rounds: int, round_seconds: float):
    """``(rounds, trace)``: the round of each replayed entry that lands in ``[0, n_rounds)`` and
    its index into the trace, and the trace."""
    assert spec.trace is not None  # WorkloadSpec requires a trace with the trace pattern
    tr = read_trace(spec.trace)
    want = TRACE_KIND[kind]
    if not isinstance(tr, JobTrace if want == "jobs" else RequestTrace):
        titles = ", ".join(f.title for f in FORMATS.values() if f.kind == want)
        raise TraceError(tr.path, 1, "format", FORMATS[tr.format].title, f"a {want} trace ({titles}): a {kind} tenant replays {want}")
    keep = np.flatnonzero(tr.gpus >= 1) if isinstance(tr, JobTrace) else np.arange(len(tr.time_s))
    keep = keep[np.arange(len(keep)) % spec.trace_shards == spec.trace_shard]
    t = (tr.time_s[keep] - spec.trace_offset_s) / spec.trace_speedup
    land = t >= 0
    rounds = np.floor(t[land] / round_seconds)
    inside = rounds < n_rounds  # before the cast: a tiny speedup sends times to inf, which no int holds
    return rounds[inside].astype(np.int64), keep[land][inside], tr


def _trace_counts(spec: WorkloadSpec, kind: str, n_rounds: int, round_seconds: float) -> np.ndarray:
    rounds, _, _ = _trace_rounds(spec, kind, n_rounds, round_seconds)
    return np.bincount(rounds, minlength=n_rounds).astype(np.float64)


def trace_lengths(spec: WorkloadSpec, n_rounds: int, round_seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """(n_rounds,) each: the mean prompt and output tokens of the requests a serving tenant
    replays in each round (``docs/model.md``: a round is priced at the mean lengths of the
    requests that arrive in it). A round with no arrivals gets the means over the episode's
    replayed requests, and an episode with none the config's ``prompt_tokens`` and
    ``output_tokens``. Output lengths below 1 token count as 1."""
    rounds, idx, tr = _trace_rounds(spec, "serve", n_rounds, round_seconds)
    if rounds.size == 0:
        return np.full(n_rounds, float(spec.prompt_tokens)), np.full(n_rounds, float(spec.output_tokens))
    count = np.bincount(rounds, minlength=n_rounds).astype(np.float64)
    out = []
    for col, floor in ((tr.context_tokens, 0.0), (tr.generated_tokens, 1.0)):
        x = np.maximum(col[idx].astype(np.float64), floor)
        total = np.bincount(rounds, weights=x, minlength=n_rounds)
        mean = np.full(n_rounds, x.mean())
        np.divide(total, count, out=mean, where=count > 0)
        out.append(mean)
    return out[0], out[1]


def arrival_schedule(
    spec: WorkloadSpec, kind: str, n_rounds: int, round_seconds: float, rng: np.random.Generator, shared_bursts: np.ndarray | None = None
) -> np.ndarray:
    """(n_rounds,) float64 integer-valued arrival counts for one tenant (see the module docstring).

    ``shared_bursts`` is the (n_rounds,) bool chain used instead of a private one when
    ``spec.burst_shared``; ``rng`` is not used for ``trace``. The env draws a whole cluster at
    once (:func:`draw_cluster`) with the same compiled draws.
    """
    sc = schedules([spec], [kind], n_rounds, round_seconds)
    shared = bool(sc.shared[0]) and shared_bursts is not None
    chain = np.zeros(n_rounds, bool)
    if shared:
        chain = np.asarray(shared_bursts, dtype=bool)
        if chain.shape != (n_rounds,):
            raise ValueError(f"shared_bursts has shape {chain.shape}: expected ({n_rounds},)")
    out = np.empty(n_rounds)
    _draw(rng, sc.code[0], sc.lam[0], sc.lam_on[0], sc.lam_off[0], sc.p[0], sc.q[0], shared, chain, np.empty(n_rounds, bool), out)
    return out


__all__ = [
    "AZURE_HEADER",
    "KINDS",
    "POLLUX_APPLICATIONS",
    "POLLUX_HEADER",
    "TRACES_ENV",
    "TRACE_KIND",
    "AzureTrace",
    "JobTrace",
    "PolluxTrace",
    "RequestTrace",
    "Schedules",
    "TraceError",
    "arrival_schedule",
    "burst_chain",
    "draw_cluster",
    "mean_per_round",
    "read_azure",
    "read_pollux",
    "read_trace",
    "resolve_trace",
    "schedules",
    "trace_lengths",
    "trace_stats",
    "traces_dir",
]

"""Fairness: fair shares, starvation, degenerate strategies and the episode report.

Pure numpy over tenant arrays (agent-ID dicts live only in ``fleet_marl.environment``). The
detector's knobs are :class:`~fleet_marl.config.FairnessSpec` (config key ``fairness:``).

* **Fair share** ``f_i``: the max-min fair (water-filling) split of the tenant's GPU pool among
  the live tenants that have work, each capped at its ``max_gpus`` (Bertsekas and Gallager,
  *Data Networks*, 1992, sec. 6.5.2).
* **Starvation**: a tenant with work that asks for GPUs is *short* in a round when its grant
  is below ``starvation_fraction * min(f_i, request_i)``; after ``starvation_rounds``
  consecutive short rounds it is *starved*, and stays so until a round is not short.
* **Degenerate strategies** (their reward is overridden to ``degenerate_floor``):
  ``lowest_precision`` -- asking for GPUs with every layer group at the tenant's lowest legal
  precision, when that precision has fewer than 16 bits; ``hoarding`` -- holding more than
  ``hoard_share`` of the GPUs of its pool (the part of the cluster it can use) while another
  tenant is starved.
* **State**: :class:`FairnessState` holds the detector's arrays for B clusters (streaks,
  sums, event counts, the FIFO of waiting requests, the histogram of waits, Themis ratios);
  the env core writes it once per round (:func:`fair_shares`, :func:`detect`,
  :func:`serve_round`, :func:`job_started`, :func:`job_finished`).
* **Summary**: :func:`summary` is the one read API -- a frozen :class:`FairnessSummary` of one
  cluster's episode so far; the env's ``env.episode_reports[agent]``
  (:meth:`FairnessSummary.episode_report`), the OpenEnv fairness report and the RLlib
  callbacks are built from it. Its figures: welfare, Jain's index ``(sum x)^2 / (n sum x^2)`` over normalized service
  ``x_i = sum_t alloc_i / sum_t f_i`` (Jain, Chiu and Hawe 1984), the longest starvation
  streak, Themis finish-time fairness ``rho = T_shared / T_independent`` per finished training
  job (Mahajan et al., NSDI 2020), the p99 queue wait and event counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import numba as nb
import numpy as np

from fleet_marl import catalog
from fleet_marl.config import FairnessSpec
from fleet_marl.kernel import numpy_sum

_jit = nb.njit(cache=True, nogil=True, error_model="numpy")


def jain(x: np.ndarray) -> float:
    """Jain's fairness index of the non-negative values ``x``; 1.0 for no values or all zeros."""
    x = np.asarray(x, np.float64)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * (x * x).sum()))


def lowest_precision(supported: np.ndarray, is_train: np.ndarray) -> np.ndarray:
    """(T,) the fewest-bytes precision each tenant may legally use, or -1 when that precision
    has 16 bits or more (then the tenant has no low-precision degenerate strategy)."""
    legal = supported & ~(is_train[:, None] & catalog.WEIGHT_ONLY[None, :])
    nbytes = np.where(legal, catalog.PRECISION_BYTES[None, :], np.inf)
    low = np.argmin(nbytes, axis=1)
    return np.where(nbytes[np.arange(low.size), low] < 2.0, low, -1)


COUNTS = ("oom", "veto", "throttle", "degenerate")


class RoundFairness(NamedTuple):
    """What :func:`detect` found this round, each (B, T)."""

    starved: np.ndarray  # bool: starved now
    lowest_precision: np.ndarray  # bool: the lowest-precision degenerate strategy
    hoarding: np.ndarray  # bool: the hoarding degenerate strategy
    streak: np.ndarray  # int64: consecutive short rounds so far


@dataclass(frozen=True)
class FairnessSummary:
    """One cluster's episode fairness so far (:func:`summary`); arrays are (T,) copies.

    ``welfare`` is the welfare summed over the rounds recorded; ``jain`` Jain's index of the
    ``service`` of the tenants that had a fair share; ``service`` GPU-rounds granted / fair
    share (1.0 where the tenant never had one); ``streak`` and ``starved`` the current
    starvation streak and state; ``max_streak`` the longest streak; ``starvation_events``
    the times a tenant became starved; ``counts`` tenant-rounds per event (``COUNTS``: oom,
    veto, throttle, degenerate); ``rho`` the mean Themis finish-time fairness of each
    tenant's finished jobs (None without one) and ``jobs_done`` their number; ``waits`` the
    completed waits (wait in rounds -> requests or jobs); ``p99_wait_s`` the 99th percentile
    wait in seconds, or None unless ``summary(now=..., round_seconds=...)`` was asked for it.
    """

    welfare: float
    jain: float
    service: np.ndarray
    streak: np.ndarray
    starved: np.ndarray
    max_streak: np.ndarray
    starvation_events: np.ndarray
    counts: dict[str, np.ndarray]
    rho: tuple[float | None, ...]
    jobs_done: np.ndarray
    waits: tuple[dict[int, float], ...]
    p99_wait_s: np.ndarray | None = None

    def episode_report(self, i: int, agent_return: float, utility_sum: float, rounds: int) -> dict:
        """Tenant ``i``'s ``env.episode_reports[agent]`` (docs/environment.md): the summary's
        figures for ``i`` plus its return, utility and rounds played. Needs ``p99_wait_s``."""
        if self.p99_wait_s is None:
            raise ValueError("episode_report: a summary with p99_wait_s (summary(now=..., queued_jobs=..., round_seconds=...))")
        return {
            "welfare": float(self.welfare),
            "return": float(agent_return),
            "utility": float(utility_sum),
            "rounds": int(rounds),
            "jain": self.jain,
            "service": float(self.service[i]),
            "max_starvation_streak": int(self.max_streak[i]),
            "starvation_events": int(self.starvation_events[i]),
            "rho": self.rho[i],
            "jobs_done": int(self.jobs_done[i]),
            "p99_wait_s": float(self.p99_wait_s[i]),
            "oom": int(self.counts["oom"][i]),
            "veto": int(self.counts["veto"][i]),
            "throttle": int(self.counts["throttle"][i]),
            "degenerate": int(self.counts["degenerate"][i]),
        }


@dataclass
class FairnessState:
    """The fairness detector's state for B clusters of T tenants over episodes of at most
    ``n`` rounds (arrays written by the env core, read through :func:`summary`).

    ``queue_born`` / ``queue_left`` hold each serving tenant's FIFO of waiting requests (one
    entry per arrival round, the requests of that round still waiting), ``queue_head`` and
    ``queue_tail`` its bounds; ``waits`` (B, T, n + 1) the completed waits by rounds waited;
    ``rho`` (B, T, n) each finished job's Themis ratio, ``rho_n`` how many.
    """

    streak: np.ndarray  # (B, T) int64 consecutive short rounds
    max_streak: np.ndarray  # (B, T) int64
    starved: np.ndarray  # (B, T) bool
    starvation_events: np.ndarray  # (B, T) int64 times a tenant became starved
    alloc_sum: np.ndarray  # (B, T) float64 GPUs granted, summed over rounds with work
    fair_sum: np.ndarray  # (B, T) float64 fair shares, summed over the same rounds
    counts: np.ndarray  # (len(COUNTS), B, T) int64 tenant-rounds per event
    welfare_sum: np.ndarray  # (B,) float64
    queue_born: np.ndarray  # (B, T, n) int64
    queue_left: np.ndarray  # (B, T, n) float64
    queue_head: np.ndarray  # (B, T) int64
    queue_tail: np.ndarray  # (B, T) int64
    waits: np.ndarray  # (B, T, n + 1) float64
    rho: np.ndarray  # (B, T, n) float64
    rho_n: np.ndarray  # (B, T) int64

    @staticmethod
    def zeros(B: int, T: int, n: int) -> FairnessState:
        i, f = np.int64, np.float64
        return FairnessState(
            streak=np.zeros((B, T), i),
            max_streak=np.zeros((B, T), i),
            starved=np.zeros((B, T), bool),
            starvation_events=np.zeros((B, T), i),
            alloc_sum=np.zeros((B, T), f),
            fair_sum=np.zeros((B, T), f),
            counts=np.zeros((len(COUNTS), B, T), i),
            welfare_sum=np.zeros(B, f),
            queue_born=np.zeros((B, T, n), i),
            queue_left=np.zeros((B, T, n), f),
            queue_head=np.zeros((B, T), i),
            queue_tail=np.zeros((B, T), i),
            waits=np.zeros((B, T, n + 1), f),
            rho=np.zeros((B, T, n), f),
            rho_n=np.zeros((B, T), i),
        )

    def reset(self, clusters: np.ndarray) -> None:
        """Zero the state of the ``clusters`` (indices or a (B,) mask)."""
        for f in fields(self):
            a = getattr(self, f.name)
            if f.name == "counts":
                a[:, clusters] = 0
            else:
                a[clusters] = 0


@_jit
def _fair_share_row(pool, capacity, caps, demanding, out, scratch, tot, c):
    """The max-min fair split of each pool's ``capacity`` among the ``demanding`` tenants of one
    cluster, capped at ``caps``, into ``out`` (T,): the arithmetic, in its order, of the numpy
    oracle ``tests/oracle.py:fair_share`` (``scratch``, ``c`` (T,) and ``tot`` (Q,) are scratch)."""
    T = pool.shape[0]
    Q = capacity.shape[0]
    for q in range(Q):
        tot[q] = 0.0
    for t in range(T):
        out[t] = caps[t] if demanding[t] else 0.0
        tot[pool[t]] += out[t]
    contended = False
    for q in range(Q):
        if tot[q] > capacity[q]:
            contended = True
    if not contended:
        return
    for t in range(T):
        c[t] = out[t]
        out[t] = 0.0
    for q in range(Q):
        n = 0
        for t in range(T):
            if pool[t] == q and demanding[t]:
                scratch[n] = c[t]
                n += 1
        if n == 0:
            continue
        if numpy_sum(scratch, 0, n) <= capacity[q]:
            for t in range(T):
                if pool[t] == q and demanding[t]:
                    out[t] = c[t]
            continue
        for k in range(1, n):  # sort scratch[:n] in place (a handful of tenants per pool)
            x = scratch[k]
            j = k - 1
            while j >= 0 and scratch[j] > x:
                scratch[j + 1] = scratch[j]
                j -= 1
            scratch[j + 1] = x
        srt = scratch
        run = 0.0
        level = 0.0
        for k in range(n):
            left = capacity[q] - run  # capacity left before the k-th smallest
            lv = left / (n - k)
            if lv <= srt[k]:
                level = lv
                break
            run += srt[k]
        else:  # numpy's argmax of no True is 0
            level = capacity[q] / n
        for t in range(T):
            if pool[t] == q and demanding[t]:
                out[t] = min(c[t], level)


@_jit
def fair_shares(pool, capacity, caps, demanding, out):
    """Fair shares of B clusters: ``demanding`` (B, T) bool -> ``out`` (B, T) (:func:`_fair_share_row` per cluster)."""
    scratch = np.empty(pool.shape[0])
    c = np.empty(pool.shape[0])
    tot = np.empty(capacity.shape[0])
    for b in range(demanding.shape[0]):
        _fair_share_row(pool, capacity, caps, demanding[b], out[b], scratch, tot, c)


@_jit
def _detect(
    pool,
    pool_capacity,
    lowest,
    starvation_fraction,
    starvation_rounds,
    hoard_share,
    live,
    has_work,
    requested,
    alloc,
    gpus_asked,
    precision,
    fair,
    streak,
    max_streak,
    starved_state,
    events,
    alloc_sum,
    fair_sum,
    o_starved,
    o_low,
    o_hoard,
):
    B, T = live.shape
    Q = pool_capacity.shape[0]
    G = precision.shape[2]
    starved_q = np.zeros(Q)
    for b in range(B):
        for q in range(Q):
            starved_q[q] = 0.0
        for t in range(T):
            asking = live[b, t] and has_work[b, t] and requested[b, t] > 0
            entitled = min(fair[b, t], float(requested[b, t]))
            short = asking and alloc[b, t] < starvation_fraction * entitled
            streak[b, t] = streak[b, t] + 1 if short else 0
            max_streak[b, t] = max(max_streak[b, t], streak[b, t])
            st = streak[b, t] >= starvation_rounds
            if st and not starved_state[b, t]:
                events[b, t] += 1
            starved_state[b, t] = st
            o_starved[b, t] = st
            if st:
                starved_q[pool[t]] += 1.0
            if live[b, t] and has_work[b, t]:
                alloc_sum[b, t] += alloc[b, t]
                fair_sum[b, t] += fair[b, t]
            low = live[b, t] and gpus_asked[b, t] > 0 and lowest[t] >= 0
            if low:
                for g in range(G):
                    if precision[b, t, g] != lowest[t]:
                        low = False
            o_low[b, t] = low
        for t in range(T):
            others = starved_q[pool[t]] - (1.0 if o_starved[b, t] else 0.0)
            o_hoard[b, t] = live[b, t] and alloc[b, t] > hoard_share * pool_capacity[pool[t]] and others > 0


def detect(
    spec: FairnessSpec, pool, pool_capacity, lowest, fs: FairnessState, live, has_work, requested, alloc, gpus_asked, precision, fair
) -> RoundFairness:
    """Update the streaks and sums of B clusters for one round; return this round's
    (starved, lowest_precision, hoarding, streak), each (B, T) (``streak`` is the state's own
    array: do not write to it).

    A tenant with work that asks for GPUs is short when granted less than
    ``starvation_fraction * min(fair share, request)``, starved after ``starvation_rounds``
    short rounds in a row; ``lowest_precision``: asking for GPUs with every group at its lowest
    sub-16-bit precision; ``hoarding``: holding more than ``hoard_share`` of its pool while
    another tenant of that pool is starved."""
    B, T = live.shape
    out = np.empty((3, B, T), bool)
    _detect(
        pool,
        pool_capacity.astype(np.float64),
        lowest,
        float(spec.starvation_fraction),
        int(spec.starvation_rounds),
        float(spec.hoard_share),
        live,
        has_work,
        requested,
        alloc,
        gpus_asked,
        precision,
        fair,
        fs.streak,
        fs.max_streak,
        fs.starved,
        fs.starvation_events,
        fs.alloc_sum,
        fs.fair_sum,
        out[0],
        out[1],
        out[2],
    )
    return RoundFairness(out[0], out[1], out[2], fs.streak)


def record_round(fs: FairnessState, welfare, live, oom, vetoed, throttled, degenerate) -> None:
    """Count the round of B clusters: its welfare (B,), and each live tenant's events (``COUNTS``)."""
    for k, flag in enumerate((oom, vetoed, throttled, degenerate)):
        fs.counts[k] += live & flag
    fs.welfare_sum += welfare


@_jit
def serve_round(t, serving, arrivals, served, born, left, head, tail, waits):
    """FIFO accounting of serving requests for B clusters in round ``t`` (per cluster):
    this round's arrivals join the queue, then ``served`` requests leave from the front; each
    records its wait in whole rounds. ``serving`` (B, T) bool; the rest the FairnessState's
    queue arrays."""
    B, T = serving.shape
    for b in range(B):
        for i in range(T):
            if not serving[b, i] or not (arrivals[b, i] > 0 or served[b, i] > 0):
                continue
            if arrivals[b, i] > 0:
                born[b, i, tail[b, i]] = t[b]
                left[b, i, tail[b, i]] = arrivals[b, i]
                tail[b, i] += 1
            rest = served[b, i]
            while rest > 1e-9 and head[b, i] < tail[b, i]:
                h = head[b, i]
                n = left[b, i, h]
                take = min(n, rest)
                waits[b, i, t[b] - born[b, i, h]] += take
                rest -= take
                if take >= n - 1e-9:
                    head[b, i] += 1
                else:
                    left[b, i, h] = n - take


def job_started(fs: FairnessState, b: int, i: int, wait_rounds: int) -> None:
    fs.waits[b, i, wait_rounds] += 1.0


def job_finished(fs: FairnessState, b: int, i: int, rounds_taken: float, rounds_alone: float) -> None:
    if 0 < rounds_alone < np.inf:
        fs.rho[b, i, fs.rho_n[b, i]] = rounds_taken / rounds_alone
        fs.rho_n[b, i] += 1


def _p99_wait_s(waits: np.ndarray, born, left, head: int, tail: int, now: int, queued_jobs: np.ndarray, round_seconds: float) -> float:
    """99th percentile wait in seconds, counting requests still queued at ``now`` and the jobs
    queued since ``queued_jobs`` (count per arrival round) as having waited until now (a lower
    bound on their wait). A job that arrived in round b could start in round b + 1."""
    w = waits.copy()
    for h in range(head, tail):
        w[now - born[h]] += left[h]
    rs = np.flatnonzero(queued_jobs)
    np.add.at(w, now - rs - 1, np.floor(queued_jobs[rs]))  # whole jobs, added at once (a job-by-job loop cost O(jobs))
    keys = np.flatnonzero(w)
    if keys.size == 0:
        return 0.0
    cum = np.cumsum(w[keys])
    return float(keys[np.searchsorted(cum, 0.99 * cum[-1])] * round_seconds)


def summary(
    fs: FairnessState, b: int, now: int | None = None, queued_jobs: np.ndarray | None = None, round_seconds: float = 0.0
) -> FairnessSummary:
    """Cluster ``b``'s fairness so far. With ``now`` (rounds played), ``p99_wait_s`` is filled
    in, counting requests still queued and each tenant's queued jobs (``queued_jobs`` (T, n),
    counts by arrival round) as having waited until ``now``."""
    if now is not None and not round_seconds > 0:
        raise ValueError(
            f"summary: round_seconds = {round_seconds!r}: the p99 wait (asked for by now = {now}) needs the round length in seconds > 0"
        )
    T = fs.streak.shape[1]
    fair_sum, alloc_sum = fs.fair_sum[b], fs.alloc_sum[b]
    seen = fair_sum > 0
    service = np.ones(T)
    service[seen] = alloc_sum[seen] / fair_sum[seen]
    p99 = None
    if now is not None:
        p99 = np.array(
            [
                _p99_wait_s(
                    fs.waits[b, i],
                    fs.queue_born[b, i],
                    fs.queue_left[b, i],
                    int(fs.queue_head[b, i]),
                    int(fs.queue_tail[b, i]),
                    now,
                    np.zeros(0, np.int64) if queued_jobs is None else queued_jobs[i],
                    round_seconds,
                )
                for i in range(T)
            ]
        )
    return FairnessSummary(
        welfare=float(fs.welfare_sum[b]),
        jain=jain(alloc_sum[seen] / fair_sum[seen]),
        service=service,
        streak=fs.streak[b].copy(),
        starved=fs.starved[b].copy(),
        max_streak=fs.max_streak[b].copy(),
        starvation_events=fs.starvation_events[b].copy(),
        counts={k: fs.counts[j, b].copy() for j, k in enumerate(COUNTS)},
        rho=tuple(float(np.mean(fs.rho[b, i, : fs.rho_n[b, i]])) if fs.rho_n[b, i] else None for i in range(T)),
        jobs_done=fs.rho_n[b].copy(),
        waits=tuple({int(k): float(fs.waits[b, i, k]) for k in np.flatnonzero(fs.waits[b, i])} for i in range(T)),
        p99_wait_s=p99,
    )


__all__ = [
    "COUNTS",
    "FairnessState",
    "FairnessSummary",
    "RoundFairness",
    "detect",
    "fair_shares",
    "jain",
    "job_finished",
    "job_started",
    "lowest_precision",
    "record_round",
    "serve_round",
    "summary",
]

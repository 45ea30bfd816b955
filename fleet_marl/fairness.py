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
* **Summary**: :meth:`FairnessTracker.summary` is the one read API -- a frozen
  :class:`FairnessSummary` of the episode so far; the env's ``infos[agent]["episode"]``
  (:meth:`FairnessSummary.episode_report`), the OpenEnv fairness report and the RLlib
  callbacks are built from it. Its figures: welfare, Jain's index ``(sum x)^2 / (n sum x^2)`` over normalized service
  ``x_i = sum_t alloc_i / sum_t f_i`` (Jain, Chiu and Hawe 1984), the longest starvation
  streak, Themis finish-time fairness ``rho = T_shared / T_independent`` per finished training
  job (Mahajan et al., NSDI 2020), the p99 queue wait and event counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import FairnessSpec


def fair_share(pool: np.ndarray, capacity: np.ndarray, caps: np.ndarray, demanding: np.ndarray) -> np.ndarray:
    """Max-min fair split of each pool's ``capacity`` among ``demanding`` tenants, capped at ``caps``.

    pool: (T,) pool index; capacity: (Q,); caps: (T,); demanding: (T,) bool -> (T,) float64.
    """
    c = np.where(demanding, caps, 0.0).astype(np.float64)
    if (np.bincount(pool, weights=c, minlength=capacity.shape[0]) <= capacity).all():
        return c  # no contention: everyone's share is its cap
    out = np.zeros(caps.shape, np.float64)
    for q in range(capacity.shape[0]):
        sel = np.flatnonzero((pool == q) & demanding)
        if sel.size == 0:
            continue
        cq = c[sel]
        if cq.sum() <= capacity[q]:
            out[sel] = cq
            continue
        s = np.sort(cq)
        left = capacity[q] - np.concatenate(([0.0], np.cumsum(s)[:-1]))  # capacity left before the j-th smallest
        level = left / (s.size - np.arange(s.size))
        j = np.argmax(level <= s)  # first cap the equal split does not clear
        out[sel] = np.minimum(cq, level[j])
    return out


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
    """What :meth:`FairnessTracker.step` found this round, each (T,)."""

    starved: np.ndarray  # bool: starved now
    lowest_precision: np.ndarray  # bool: the lowest-precision degenerate strategy
    hoarding: np.ndarray  # bool: the hoarding degenerate strategy
    streak: np.ndarray  # int64: consecutive short rounds so far


@dataclass(frozen=True)
class FairnessSummary:
    """The episode's fairness so far (:meth:`FairnessTracker.summary`); arrays are (T,) copies.

    ``welfare`` is the welfare summed over the rounds recorded; ``jain`` Jain's index of the
    ``service`` of the tenants that had a fair share; ``service`` GPU-rounds granted / fair
    share (1.0 where the tenant never had one); ``streak`` and ``starved`` the current
    starvation streak and state; ``max_streak`` the longest streak; ``starvation_events``
    the times a tenant became starved; ``counts`` tenant-rounds per event (``COUNTS``: oom,
    veto, throttle, degenerate); ``rho`` the mean Themis finish-time fairness of each
    tenant's finished jobs (None without one) and ``jobs_done`` their number; ``waits`` the
    completed waits (wait in rounds -> requests or jobs); ``p99_wait_s`` the 99th percentile
    wait in seconds, or None unless ``summary(now=...)`` was asked for it.
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
        """Tenant ``i``'s ``infos[agent]["episode"]`` (docs/environment.md): the summary's
        figures for ``i`` plus its return, utility and rounds played. Needs ``p99_wait_s``."""
        if self.p99_wait_s is None:
            raise ValueError("episode_report: a summary with p99_wait_s (summary(now=..., queued_jobs=...))")
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


class FairnessTracker:
    """Per-episode fairness accounting for ``T`` tenants. The env writes to it (``step``,
    ``record_round``, ``serve_round``, ``job_started``, ``job_finished``); everything else
    reads :meth:`summary`."""

    def __init__(self, spec: FairnessSpec, pool: np.ndarray, pool_capacity: np.ndarray, max_gpus: np.ndarray, lowest: np.ndarray, round_seconds: float):
        self.spec = spec
        self.pool = pool
        self.pool_capacity = pool_capacity.astype(np.float64)
        self.max_gpus = max_gpus.astype(np.float64)
        self.lowest = lowest
        self.round_seconds = round_seconds
        self.T = pool.shape[0]
        self._fair_cache: dict[bytes, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        T = self.T
        self._streak = np.zeros(T, np.int64)
        self._max_streak = np.zeros(T, np.int64)
        self._starved = np.zeros(T, bool)
        self._starvation_events = np.zeros(T, np.int64)  # times a tenant became starved
        self._alloc_sum = np.zeros(T)
        self._fair_sum = np.zeros(T)
        self._counts = {k: np.zeros(T, np.int64) for k in COUNTS}
        self._cohorts = [deque() for _ in range(T)]  # serving: [arrival round, requests waiting]
        self._waits = [dict() for _ in range(T)]  # wait in rounds -> weight (requests or jobs)
        self._rho = [[] for _ in range(T)]
        self._welfare_sum = 0.0

    def fair(self, live: np.ndarray, has_work: np.ndarray) -> np.ndarray:
        """Fair shares for the tenants that are live and have work (cached by that set)."""
        demanding = live & has_work
        key = demanding.tobytes()
        got = self._fair_cache.get(key)
        if got is None:
            got = fair_share(self.pool, self.pool_capacity, self.max_gpus, demanding)
            got.setflags(write=False)
            if len(self._fair_cache) < 4096:
                self._fair_cache[key] = got
        return got

    def step(self, live, has_work, requested, alloc, gpus_asked, precision, fair) -> RoundFairness:
        """Update the streaks for one round. Returns (starved, lowest_precision, hoarding,
        streak), each (T,); ``streak`` is the tracker's own array (do not write to it)."""
        spec = self.spec
        asking = live & has_work & (requested > 0)
        entitled = np.minimum(fair, requested)
        short = asking & (alloc < spec.starvation_fraction * entitled)
        self._streak = np.where(short, self._streak + 1, 0)
        self._max_streak = np.maximum(self._max_streak, self._streak)
        starved = self._streak >= spec.starvation_rounds
        self._starvation_events += starved & ~self._starved
        self._starved = starved
        counted = live & has_work
        self._alloc_sum += np.where(counted, alloc, 0)
        self._fair_sum += np.where(counted, fair, 0.0)
        low = live & (gpus_asked > 0) & (self.lowest >= 0) & np.all(precision == self.lowest[:, None], axis=-1)
        # starved tenants other than i in i's pool (a tenant can only hoard from its own pool)
        others = np.bincount(self.pool, weights=starved, minlength=self.pool_capacity.size)[self.pool] - starved
        hoard = live & (alloc > spec.hoard_share * self.pool_capacity[self.pool]) & (others > 0)
        return RoundFairness(starved, low, hoard, self._streak)

    def record_round(self, welfare: float, live, oom, vetoed, throttled, degenerate) -> None:
        """Count the round: its welfare, and each live tenant's events (``COUNTS``)."""
        for key, flag in (("oom", oom), ("veto", vetoed), ("throttle", throttled), ("degenerate", degenerate)):
            self._counts[key] += live & flag
        self._welfare_sum += welfare

    # --- waits --------------------------------------------------------------------------------

    def serve_round(self, t: int, serving: np.ndarray, arrivals: np.ndarray, served: np.ndarray) -> None:
        """FIFO accounting of serving requests: this round's arrivals join the queue, then
        ``served`` requests leave from the front; each records its wait in whole rounds."""
        for i in np.flatnonzero(serving & ((arrivals > 0) | (served > 0))):
            q = self._cohorts[i]
            if arrivals[i] > 0:
                q.append([t, float(arrivals[i])])
            left = float(served[i])
            w = self._waits[i]
            while left > 1e-9 and q:
                born, n = q[0]
                take = min(n, left)
                w[t - born] = w.get(t - born, 0.0) + take
                left -= take
                if take >= n - 1e-9:
                    q.popleft()
                else:
                    q[0][1] = n - take

    def job_started(self, i: int, wait_rounds: int) -> None:
        self._waits[i][wait_rounds] = self._waits[i].get(wait_rounds, 0.0) + 1.0

    def job_finished(self, i: int, rounds_taken: float, rounds_alone: float) -> None:
        if 0 < rounds_alone < np.inf:
            self._rho[i].append(rounds_taken / rounds_alone)

    def _p99_wait_s(self, i: int, now: int, queued_jobs: Iterable[int] = ()) -> float:
        """99th percentile wait in seconds, counting requests still queued at ``now`` and the
        arrival rounds ``queued_jobs`` of jobs not yet started as having waited until now (a
        lower bound on their wait). A job that arrived in round b could start in round b + 1."""
        w = dict(self._waits[i])
        for born, n in self._cohorts[i]:
            w[now - born] = w.get(now - born, 0.0) + n
        for born in queued_jobs:
            w[now - born - 1] = w.get(now - born - 1, 0.0) + 1.0
        if not w:
            return 0.0
        keys = np.array(sorted(w))
        cum = np.cumsum([w[k] for k in keys])
        return float(keys[np.searchsorted(cum, 0.99 * cum[-1])] * self.round_seconds)

    # --- the read API ---------------------------------------------------------------------------

    def summary(self, now: int | None = None, queued_jobs: Sequence[Iterable[int]] | None = None) -> FairnessSummary:
        """The episode's fairness so far. With ``now`` (rounds played), ``p99_wait_s`` is filled
        in, counting requests still queued and the arrival rounds ``queued_jobs[i]`` of each
        tenant's jobs not yet started as having waited until ``now``."""
        seen = self._fair_sum > 0
        service = np.ones(self.T)
        service[seen] = self._alloc_sum[seen] / self._fair_sum[seen]
        p99 = None
        if now is not None:
            p99 = np.array([self._p99_wait_s(i, now, () if queued_jobs is None else queued_jobs[i]) for i in range(self.T)])
        return FairnessSummary(
            welfare=float(self._welfare_sum),
            jain=jain(self._alloc_sum[seen] / self._fair_sum[seen]),
            service=service,
            streak=self._streak.copy(),
            starved=self._starved.copy(),
            max_streak=self._max_streak.copy(),
            starvation_events=self._starvation_events.copy(),
            counts={k: v.copy() for k, v in self._counts.items()},
            rho=tuple(float(np.mean(r)) if r else None for r in self._rho),
            jobs_done=np.array([len(r) for r in self._rho], np.int64),
            waits=tuple(dict(w) for w in self._waits),
            p99_wait_s=p99,
        )


__all__ = ["COUNTS", "FairnessSummary", "FairnessTracker", "RoundFairness", "fair_share", "jain", "lowest_precision"]

"""Fairness: fair shares, starvation, degenerate strategies and the episode report.

Pure numpy over tenant arrays (agent-ID dicts live only in ``fleet_marl.env``).

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
* **Episode report**: welfare, Jain's index ``(sum x)^2 / (n sum x^2)`` over normalized service
  ``x_i = sum_t alloc_i / sum_t f_i`` (Jain, Chiu and Hawe 1984), the longest starvation
  streak, Themis finish-time fairness ``rho = T_shared / T_independent`` per finished training
  job (Mahajan et al., NSDI 2020), the p99 queue wait and event counts.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import RewardSpec


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


class FairnessTracker:
    """Per-episode fairness accounting for ``T`` tenants."""

    def __init__(self, spec: RewardSpec, pool: np.ndarray, pool_capacity: np.ndarray, max_gpus: np.ndarray, lowest: np.ndarray, round_seconds: float):
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
        self.streak = np.zeros(T, np.int64)
        self.max_streak = np.zeros(T, np.int64)
        self.starved = np.zeros(T, bool)
        self.starvation_events = np.zeros(T, np.int64)  # times a tenant became starved
        self.alloc_sum = np.zeros(T)
        self.fair_sum = np.zeros(T)
        self.counts = {k: np.zeros(T, np.int64) for k in ("oom", "veto", "throttle", "degenerate")}
        self.cohorts = [deque() for _ in range(T)]  # serving: [arrival round, requests waiting]
        self.waits = [dict() for _ in range(T)]  # wait in rounds -> weight (requests or jobs)
        self.rho = [[] for _ in range(T)]
        self.welfare_sum = 0.0

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

    def step(self, live, has_work, requested, alloc, gpus_asked, precision, fair) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Update the streaks for one round. Returns (starved, lowest_precision, hoarding), each (T,) bool."""
        spec = self.spec
        asking = live & has_work & (requested > 0)
        entitled = np.minimum(fair, requested)
        short = asking & (alloc < spec.starvation_fraction * entitled)
        self.streak = np.where(short, self.streak + 1, 0)
        self.max_streak = np.maximum(self.max_streak, self.streak)
        starved = self.streak >= spec.starvation_rounds
        self.starvation_events += starved & ~self.starved
        self.starved = starved
        counted = live & has_work
        self.alloc_sum += np.where(counted, alloc, 0)
        self.fair_sum += np.where(counted, fair, 0.0)
        low = live & (gpus_asked > 0) & (self.lowest >= 0) & np.all(precision == self.lowest[:, None], axis=-1)
        # starved tenants other than i in i's pool (a tenant can only hoard from its own pool)
        others = np.bincount(self.pool, weights=starved, minlength=self.pool_capacity.size)[self.pool] - starved
        hoard = live & (alloc > spec.hoard_share * self.pool_capacity[self.pool]) & (others > 0)
        return starved, low, hoard

    def count(self, live, oom, vetoed, throttled, degenerate) -> None:
        for key, flag in (("oom", oom), ("veto", vetoed), ("throttle", throttled), ("degenerate", degenerate)):
            self.counts[key] += live & flag

    # --- waits --------------------------------------------------------------------------------

    def serve_round(self, t: int, serving: np.ndarray, arrivals: np.ndarray, served: np.ndarray) -> None:
        """FIFO accounting of serving requests: this round's arrivals join the queue, then
        ``served`` requests leave from the front; each records its wait in whole rounds."""
        for i in np.flatnonzero(serving & ((arrivals > 0) | (served > 0))):
            q = self.cohorts[i]
            if arrivals[i] > 0:
                q.append([t, float(arrivals[i])])
            left = float(served[i])
            w = self.waits[i]
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
        self.waits[i][wait_rounds] = self.waits[i].get(wait_rounds, 0.0) + 1.0

    def job_finished(self, i: int, rounds_taken: float, rounds_alone: float) -> None:
        if 0 < rounds_alone < np.inf:
            self.rho[i].append(rounds_taken / rounds_alone)

    def p99_wait_s(self, i: int, now: int, queued_jobs=()) -> float:
        """99th percentile wait in seconds, counting requests still queued at ``now`` and the
        arrival rounds ``queued_jobs`` of jobs not yet started as having waited until now (a
        lower bound on their wait). A job that arrived in round b could start in round b + 1."""
        w = dict(self.waits[i])
        for born, n in self.cohorts[i]:
            w[now - born] = w.get(now - born, 0.0) + n
        for born in queued_jobs:
            w[now - born - 1] = w.get(now - born - 1, 0.0) + 1.0
        if not w:
            return 0.0
        keys = np.array(sorted(w))
        cum = np.cumsum([w[k] for k in keys])
        return float(keys[np.searchsorted(cum, 0.99 * cum[-1])] * self.round_seconds)

    # --- report -------------------------------------------------------------------------------

    def jain_index(self) -> float:
        seen = self.fair_sum > 0
        return jain(self.alloc_sum[seen] / self.fair_sum[seen])

    def report(self, i: int, now: int, agent_return: float, utility_sum: float, rounds: int, queued_jobs=()) -> dict:
        rho = self.rho[i]
        return {
            "welfare": float(self.welfare_sum),
            "return": float(agent_return),
            "utility": float(utility_sum),
            "rounds": int(rounds),
            "jain": self.jain_index(),
            "service": float(self.alloc_sum[i] / self.fair_sum[i]) if self.fair_sum[i] > 0 else 1.0,
            "max_starvation_streak": int(self.max_streak[i]),
            "starvation_events": int(self.starvation_events[i]),
            "rho": float(np.mean(rho)) if rho else None,
            "jobs_done": len(rho),
            "p99_wait_s": self.p99_wait_s(i, now, queued_jobs),
            "oom": int(self.counts["oom"][i]),
            "veto": int(self.counts["veto"][i]),
            "throttle": int(self.counts["throttle"][i]),
            "degenerate": int(self.counts["degenerate"][i]),
        }


__all__ = ["FairnessTracker", "fair_share", "jain", "lowest_precision"]

"""The starvation and degenerate-strategy detector: one round of B clusters updates the streaks
and sums of the :class:`~fleet_marl.fairness.state.FairnessState` and says who is starved,
who plays the lowest-precision strategy and who hoards."""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import FairnessSpec
from fleet_marl.fairness.state import FairnessState, RoundFairness, jit


def lowest_precision(supported: np.ndarray, is_train: np.ndarray) -> np.ndarray:
    """(T,) the fewest-bytes precision each tenant may legally use, or -1 when that precision
    has 16 bits or more (then the tenant has no low-precision degenerate strategy)."""
    legal = supported & ~(is_train[:, None] & catalog.WEIGHT_ONLY[None, :])
    nbytes = np.where(legal, catalog.PRECISION_BYTES[None, :], np.inf)
    low = np.argmin(nbytes, axis=1)
    return np.where(nbytes[np.arange(low.size), low] < 2.0, low, -1)


@jit
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


__all__ = ["detect", "lowest_precision"]

"""Fair shares: the max-min fair (water-filling) split of each GPU pool among the live tenants
that have work, each capped at its ``max_gpus`` (Bertsekas and Gallager, *Data Networks*, 1992,
sec. 6.5.2), compiled for B clusters."""

from __future__ import annotations

import numpy as np

from fleet_marl.fairness.state import jit
from fleet_marl.kernel import numpy_sum


@jit
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


@jit
def fair_shares(pool, capacity, caps, demanding, out):
    """Fair shares of B clusters: ``demanding`` (B, T) bool -> ``out`` (B, T) (:func:`_fair_share_row` per cluster)."""
    scratch = np.empty(pool.shape[0])
    c = np.empty(pool.shape[0])
    tot = np.empty(capacity.shape[0])
    for b in range(demanding.shape[0]):
        _fair_share_row(pool, capacity, caps, demanding[b], out[b], scratch, tot, c)


__all__ = ["fair_shares"]

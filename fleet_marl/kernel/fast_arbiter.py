"""The numba backend's arbiter pieces (part of ``fleet_marl.kernel.fast``): the sort keys,
water-filling and greedy fills its compiled loop calls, one batch row at a time. Each mirrors
the numpy code of ``fleet_marl.kernel.arbiter``. Importing this module imports numba.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_jit = nb.njit(cache=True, nogil=True, error_model="numpy")


@_jit
def _before(i, j, k1, k2, k3, n_keys):
    """Does element i sort before j: keys k1 (desc), k2 (desc), k3 (asc) (the first
    ``3 - n_keys`` are skipped), then the index (asc)."""
    if n_keys == 3:
        if k1[i] != k1[j]:
            return k1[i] > k1[j]
    if n_keys >= 2:
        if k2[i] != k2[j]:
            return k2[i] > k2[j]
    if k3[i] != k3[j]:
        return k3[i] < k3[j]
    return i < j


@_jit
def _sorted_by(order, k1, k2, k3, n_keys):
    """Insertion sort of ``order`` (fine for the tens of tenants of a round)."""
    n = order.shape[0]
    for i in range(n):
        order[i] = i
    for i in range(1, n):
        x = order[i]
        j = i - 1
        while j >= 0 and _before(x, order[j], k1, k2, k3, n_keys):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = x


@_jit
def _argsort_asc(order, key):
    """Stable ascending argsort of a float key (ties by index)."""
    n = order.shape[0]
    for i in range(n):
        order[i] = i
    for i in range(1, n):
        x = order[i]
        j = i - 1
        while j >= 0 and key[x] < key[order[j]]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = x


@_jit
def _waterfill(caps, weights, equal, capacity, tiebreak, got, w, level, order, frac, dummy):
    """One row of ``arbiter.waterfill`` (weights ignored when ``equal``)."""
    T = caps.shape[0]
    total = 0
    for t in range(T):
        total += caps[t]
    if total <= capacity:
        for t in range(T):
            got[t] = caps[t]
        return
    for t in range(T):
        if caps[t] > 0:
            w[t] = 1.0 if equal else weights[t]
            level[t] = caps[t] / (w[t] if w[t] > 0 else 1.0)
        else:
            w[t] = 0.0
            level[t] = np.inf
    _argsort_asc(order, level)
    cap_f = float(capacity)
    # capped_before[i] = cumsum(cs)[i] - cs[i]; w_from[i] = sum of ws[i:] added from the end
    acc = 0.0
    for i in range(T - 1, -1, -1):  # frac doubles as w_from: the weights at or after i, added from the end
        acc += w[order[i]]
        frac[i] = acc
    cb_k = 0.0
    wk = frac[0]  # argmax of all-False is 0
    run = 0.0
    for i in range(T):
        cs = float(caps[order[i]])
        run += cs
        cb = run - cs
        lv = level[order[i]]
        filled = cb + lv * frac[i] if math.isfinite(lv) else np.inf
        if filled >= cap_f:
            cb_k = cb
            wk = frac[i]
            break
    lam = (cap_f - cb_k) / (wk if wk > 0 else 1.0)
    left = capacity
    for t in range(T):
        x = min(float(caps[t]), lam * w[t])
        base = int(math.floor(x + 1e-9))
        base = min(base, caps[t])
        got[t] = base
        left -= base
        frac[t] = x - base if base < caps[t] else -1.0
    if left > 0:
        _sorted_by(order, dummy, frac, tiebreak, 2)
        for r in range(left):
            t = order[r]
            if got[t] < caps[t]:
                got[t] += 1


@_jit
def _greedy(caps, order, capacity, got):
    """Serve tenants fully in ``order`` until the capacity runs out."""
    before = 0
    for i in range(order.shape[0]):
        t = order[i]
        got[t] = min(max(capacity - before, 0), caps[t])
        before += caps[t]


__all__ = ["_argsort_asc", "_before", "_greedy", "_jit", "_sorted_by", "_waterfill"]

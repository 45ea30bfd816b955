"""The arbiter's mechanisms: a registry of names and codes, and the compiled pieces that
clear one pool of one batch row.

Each GPU type is a pool cleared on its own (``docs/model.md`` section 4):

``proportional``  weighted water-filling with weights = bids (Kelly's proportional share,
                  capped by requests, leftovers redistributed); each tenant pays its bid.
``maxmin``        max-min fair water-filling (equal weights); list price.
``priority``      strict priority (priority, then bid, then the tie-break draw); list price.
``auction``       uniform-price multi-unit auction: highest bids served first; everyone
                  served pays the clearing price = max(reserve, highest bid not fully
                  served); bids below the reserve get nothing.

Fractional shares become integers by the largest-remainder method (ties by the tie-break
draw). :data:`REGISTRY` maps each name to its :class:`Mechanism`; the compiled round
(:mod:`fleet_marl.kernel.engine`) branches on the code and raises on a code it does not
know. Adding a mechanism is an entry here, a branch in ``engine._clear_pools`` and its name in
``fleet_marl.config.MECHANISMS`` (``tests/test_registries.py`` checks that the three agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba as nb
import numpy as np

from fleet_marl.config import MECHANISMS

#: numba's compile options for every kernel function: cached on disk, no GIL, numpy's
#: division semantics (x / 0 is inf or nan, as in the model's formulas).
jit = nb.njit(cache=True, nogil=True, error_model="numpy")


@dataclass(frozen=True)
class Mechanism:
    """One clearing rule: its ``code`` in the compiled round, what a served tenant pays
    (``"bid"``, ``"list"`` or ``"clearing"``), and whether a budget affords GPUs at the bid
    (``afford_at_bid``) or at list price."""

    name: str
    code: int
    pays: str
    afford_at_bid: bool


REGISTRY: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("proportional", 0, "bid", True),
        Mechanism("maxmin", 1, "list", False),
        Mechanism("priority", 2, "list", False),
        Mechanism("auction", 3, "clearing", True),
    )
}
PROPORTIONAL, MAXMIN, PRIORITY, AUCTION = (REGISTRY[m].code for m in ("proportional", "maxmin", "priority", "auction"))


def mechanism(name: str) -> Mechanism:
    """The registered mechanism ``name``, or a ``ValueError`` listing the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"arbiter.mechanism = {name!r}: expected one of {', '.join(map(repr, REGISTRY))}")
    return REGISTRY[name]


def check_code(code: int) -> int:
    """``code`` if it is a registered mechanism's code, else a ``ValueError``."""
    codes = {m.code: m.name for m in REGISTRY.values()}
    if code not in codes:
        raise ValueError(f"mechanism code {code!r}: expected one of {', '.join(f'{c} ({n})' for c, n in sorted(codes.items()))}")
    return code


assert tuple(REGISTRY) == MECHANISMS, "the mechanism registry and config.MECHANISMS list the same names in the same order"


# --- compiled pieces, one batch row at a time ------------------------------------------------


@jit
def before(i, j, k1, k2, k3, n_keys):
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


@jit
def sort_by(order, k1, k2, k3, n_keys):
    """Insertion sort of ``order`` (0..n-1) by :func:`before` (fine for the tens of tenants of a round)."""
    n = order.shape[0]
    for i in range(n):
        order[i] = i
    for i in range(1, n):
        x = order[i]
        j = i - 1
        while j >= 0 and before(x, order[j], k1, k2, k3, n_keys):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = x


@jit
def argsort_asc(order, key):
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


@jit
def waterfill(caps, weights, equal, capacity, tiebreak, got, w, level, order, frac, zeros):
    """Weighted max-min fair integer shares of ``capacity`` (equal weights when ``equal``):
    ``0 <= got <= caps`` and ``sum got = min(capacity, sum caps)``. The water level rises
    until the pool is full; tenants whose cap lies below it get their cap, the rest
    ``level x weight``, floored; the GPUs left go one each by largest remainder, ties by the
    tie-break draw. ``w``, ``level``, ``order``, ``frac`` are scratch (T,), ``zeros`` (T,) 0."""
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
    argsort_asc(order, level)
    cap_f = float(capacity)
    acc = 0.0
    for i in range(T - 1, -1, -1):  # frac doubles as the weights still growing at level i
        acc += w[order[i]]
        frac[i] = acc
    cb_k = 0.0
    wk = frac[0]
    run = 0.0
    for i in range(T):
        cs = float(caps[order[i]])
        run += cs
        cb = run - cs  # caps of the tenants saturated below this level
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
        base = min(int(math.floor(x + 1e-9)), caps[t])
        got[t] = base
        left -= base
        frac[t] = x - base if base < caps[t] else -1.0
    if left > 0:  # the `left` largest remainders (ties by the draw, then index) get one more
        sort_by(order, zeros, frac, tiebreak, 2)
        for r in range(min(left, T)):
            t = order[r]
            if got[t] < caps[t]:
                got[t] += 1


@jit
def greedy(caps, order, capacity, got):
    """Serve tenants fully in ``order`` until the capacity runs out."""
    before_ = 0
    for i in range(order.shape[0]):
        t = order[i]
        got[t] = min(max(capacity - before_, 0), caps[t])
        before_ += caps[t]


__all__ = ["AUCTION", "MAXMIN", "PRIORITY", "PROPORTIONAL", "REGISTRY", "Mechanism", "check_code", "jit", "mechanism"]

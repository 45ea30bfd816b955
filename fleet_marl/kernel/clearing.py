"""The round's clearing stage, compiled: what each tenant may ask for (:func:`ask`), then the
mechanism on every pool (:func:`clear_pools`), one batch row at a time.

The stage branches on the mechanism's codes packed in ``sc`` (``mechanisms.codes``): its
clearing rule (:func:`waterfill` or :func:`greedy` over its keys), what a served tenant pays
(list price, its bid, or the pool's clearing price) and its reserve. ``docs/model.md``
section 4 has the rules; ``fleet_marl.config.mechanisms`` the registry.
"""

from __future__ import annotations

import math

import numpy as np

from fleet_marl.kernel.jit import argsort_asc, jit, sort_by
from fleet_marl.kernel.layout import (
    F_BID,
    F_BUDGET,
    F_TIE,
    I_GPUS,
    I_PRES,
    S_AFFORD,
    S_CLEARS,
    S_HAS_RESERVE,
    S_KEY1,
    S_KEY2,
    S_NKEYS,
    S_PAYS,
    S_RESERVE,
    S_ROUND,
    T_MAXG,
    T_POOL,
    T_PRICE,
    T_PRIO,
)
from fleet_marl.kernel.mechanisms import GREEDY, KEY_BID, KEY_PRIORITY, NO_KEY, PAY_BID, PAY_CLEARING, PAY_LIST, WATERFILL


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
        base = min(math.floor(x + 1e-9), caps[t])  # math.floor of a float is an int, as in Python
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


@jit
def ask(b, tf, ti, sc, ins_i, ins_f, req):
    """What each tenant of row ``b`` may ask for, into ``req`` (T,): its request capped by its
    ``max_gpus`` and by what its budget affords for the round (at its bid, or at list price,
    as the mechanism charges); nothing when absent, or under a reserve when its bid is below it."""
    hours = sc[S_ROUND] / 3600.0
    afford_at_bid = sc[S_AFFORD] != 0.0
    has_reserve = sc[S_HAS_RESERVE] != 0.0
    reserve = sc[S_RESERVE]
    for t in range(req.shape[0]):
        bid = ins_f[F_BID, b, t]
        budget = ins_f[F_BUDGET, b, t]
        unit = tf[t, T_PRICE] * (bid if afford_at_bid else 1.0) * hours  # USD per GPU for the round, at most
        af = np.floor(max(budget, 0.0) / unit)
        if af * unit > budget:  # never overspend by rounding
            af -= 1.0
        r = min(float(min(ins_i[I_GPUS, b, t], ti[t, T_MAXG])), af)
        asked = int(r) if ins_i[I_PRES, b, t] != 0 else 0
        if has_reserve and not bid >= reserve:  # bids below the reserve ask for nothing
            asked = 0
        req[t] = asked


@jit
def clear_pools(b, q_caps, tf, ti, sc, ins_f, req, alloc, mult, price, caps, got, k1, k2, w, level, order, frac, zeros):
    """Run the mechanism on every pool of row ``b``: ``req`` (T,) requests -> ``alloc`` (T,)
    GPUs, ``mult`` (T,) the price paid as a multiple of list price and ``price`` (T,) it in USD
    per GPU-hour. ``k1`` and ``k2`` (T,) take the rule's keys (bids, priorities or zeros)."""
    T = req.shape[0]
    rule, n_keys, pays, c1, c2 = int(sc[S_CLEARS]), int(sc[S_NKEYS]), int(sc[S_PAYS]), int(sc[S_KEY1]), int(sc[S_KEY2])
    floor = sc[S_RESERVE] if sc[S_HAS_RESERVE] != 0.0 else 0.0  # the lowest clearing price
    bid = ins_f[F_BID, b]
    tie = ins_f[F_TIE, b]
    if pays not in (PAY_LIST, PAY_BID, PAY_CLEARING):
        raise ValueError("unknown price code (see fleet_marl.config.mechanisms.PRICES)")
    for t in range(T):
        mult[t] = bid[t] if pays == PAY_BID else 1.0
        k1[t] = bid[t] if c1 == KEY_BID else (tf[t, T_PRIO] if c1 == KEY_PRIORITY else 0.0)
        k2[t] = bid[t] if c2 == KEY_BID else (tf[t, T_PRIO] if c2 == KEY_PRIORITY else 0.0)
    for q in range(q_caps.shape[0]):
        cap = int(q_caps[q])
        for t in range(T):
            caps[t] = req[t] if ti[t, T_POOL] == q else 0
        if rule == WATERFILL:
            waterfill(caps, k2, c2 == NO_KEY, cap, tie, got, w, level, order, frac, zeros)
        elif rule == GREEDY:
            sort_by(order, k1, k2, tie, n_keys)
            greedy(caps, order, cap, got)
        else:
            raise ValueError("unknown clearing rule code (see fleet_marl.config.mechanisms.CLEARING_RULES)")
        if pays == PAY_CLEARING:  # the highest bid not fully served, at least the reserve
            clearing = 0.0
            for t in range(T):
                if ti[t, T_POOL] == q and got[t] < caps[t] and bid[t] > clearing:
                    clearing = bid[t]
            clearing = max(floor, clearing)
            for t in range(T):
                if ti[t, T_POOL] == q:
                    mult[t] = clearing
        for t in range(T):
            if ti[t, T_POOL] == q:
                alloc[t] = got[t]
    for t in range(T):
        price[t] = tf[t, T_PRICE] * mult[t]


__all__ = ["ask", "clear_pools", "greedy", "waterfill"]

"""The arbiter: requests and bids -> integer GPUs per tenant per node, and prices.

Each GPU type is a pool cleared on its own. Mechanisms (``config.MECHANISMS``):

``proportional``  weighted water-filling with weights = bids (Kelly's proportional share,
                  capped by requests, leftovers redistributed); each tenant pays its bid.
``maxmin``        max-min fair water-filling (equal weights); list price.
``priority``      strict priority (priority, then bid, then the tie-break draw); list price.
``auction``       uniform-price multi-unit auction: highest bids served first; everyone
                  served pays the clearing price = max(reserve, highest bid not fully
                  served); bids below the reserve get nothing.

Fractional shares become integers by the largest-remainder method (ties by the tie-break
draw). Granted GPUs are placed on the pool's nodes by best-fit decreasing: largest tenant
first, onto the fullest node that still holds it, splitting across the emptiest nodes only
when no single node can.
All functions are batched over leading axes and pure.
"""

from __future__ import annotations

import numpy as np

from fleet_marl.config import MECHANISMS

PROPORTIONAL, MAXMIN, PRIORITY, AUCTION = (MECHANISMS.index(m) for m in ("proportional", "maxmin", "priority", "auction"))


def _rank(primary: np.ndarray, tiebreak: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """Rank (0 = first) along the last axis by ``first`` descending (if given), then
    ``primary`` descending, then ``tiebreak`` ascending."""
    keys = (tiebreak, -primary) if first is None else (tiebreak, -primary, -np.broadcast_to(first, primary.shape))
    order = np.lexsort(keys, axis=-1)
    rank = np.empty_like(order)
    rows = np.arange(order.shape[0])[:, None]
    rank[rows, order] = np.arange(order.shape[-1])
    return rank


def waterfill(caps: np.ndarray, weights: np.ndarray, capacity: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """Weighted max-min fair integer shares.

    caps: (B, T) int64 >= 0; weights: (B, T) > 0 where caps > 0 (or None: equal weights);
    capacity: (B,) int64; tiebreak: (B, T) or (T,). Returns (B, T) int64 with
    ``0 <= x <= caps`` and ``sum x = min(capacity, sum caps)``.
    """
    caps = np.asarray(caps, np.int64)
    B, T = caps.shape
    total = caps.sum(-1)
    uncontended = total <= capacity
    if uncontended.all():  # no contention in any row: every request is granted
        return caps
    asks = caps > 0
    if weights is None:
        w = asks.astype(np.float64)
        level = np.where(asks, caps, np.inf)  # caps / 1.0
    else:
        w = np.where(asks, weights, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(asks, caps / np.where(w > 0, w, 1.0), np.inf)
    order = np.argsort(level, axis=-1, kind="stable")
    lv = np.take_along_axis(level, order, -1)
    cs = np.take_along_axis(caps, order, -1).astype(np.float64)
    ws = np.take_along_axis(w, order, -1)
    capped_before = np.cumsum(cs, -1) - cs  # caps of tenants saturated below this level
    w_from = np.cumsum(ws[:, ::-1], -1)[:, ::-1]  # weights still growing at this level
    cap_f = capacity.astype(np.float64)[:, None]
    with np.errstate(invalid="ignore"):
        filled = np.where(np.isfinite(lv), capped_before + lv * w_from, np.inf)
    k = np.argmax(filled >= cap_f, axis=-1)[:, None]  # first level at which the pool is full
    wk = np.take_along_axis(w_from, k, -1)[:, 0]
    lam = (cap_f[:, 0] - np.take_along_axis(capped_before, k, -1)[:, 0]) / np.where(wk > 0, wk, 1.0)
    x = np.minimum(caps, lam[:, None] * w)
    base = np.floor(x + 1e-9).astype(np.int64)
    np.minimum(base, caps, out=base)
    left = capacity - base.sum(-1)  # GPUs to hand out one by one (< T)
    if left.any():
        below = base < caps
        frac = np.where(below, x - base, -1.0)
        bonus = _rank(frac, np.broadcast_to(tiebreak, caps.shape)) < left[:, None]
        base += bonus & below
    return np.where(uncontended[:, None], caps, base)


def greedy(caps: np.ndarray, rank: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Serve tenants fully in ``rank`` order (0 first) until the capacity runs out. (B, T)."""
    order = np.argsort(rank, axis=-1)
    r = np.arange(caps.shape[0])[:, None]
    cs = caps[r, order]
    before = np.cumsum(cs, -1) - cs
    got = np.minimum(np.maximum(capacity[:, None] - before, 0), cs)
    out = np.empty_like(caps)
    out[r, order] = got
    return out


def admissible(st, request: np.ndarray, bid: np.ndarray) -> np.ndarray:
    """The requests the mechanism considers: in an auction a bid below the reserve price
    asks for nothing. (B, T)."""
    if st.mechanism == AUCTION:
        return np.where(bid >= st.reserve_price, request, 0)
    return request


def clear(st, request: np.ndarray, bid: np.ndarray, tiebreak: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run the configured mechanism on every pool.

    request: (B, T) int64 (already capped by presence, max_gpus and budget); bid: (B, T) > 0.
    Returns (alloc (B, T) int64, price multiplier of list price (B, T) float64).
    """
    B, T = request.shape
    tiebreak = np.broadcast_to(tiebreak, (B, T))
    bid = np.broadcast_to(bid, (B, T))
    mech = st.mechanism
    request = admissible(st, request, bid)
    one_pool = len(st.pool_capacity) == 1
    alloc = None if one_pool else np.zeros((B, T), np.int64)
    mult = np.ones((B, T)) if mech == AUCTION else None
    for q, cap in enumerate(st.pool_capacity):
        in_pool = st.pool == q
        caps = request if one_pool else np.where(in_pool, request, 0)
        capacity = np.full(B, cap, np.int64)
        if mech == MAXMIN:
            got = waterfill(caps, None, capacity, tiebreak)
        elif mech == PROPORTIONAL:
            got = waterfill(caps, bid, capacity, tiebreak)
        elif mech == PRIORITY:
            got = greedy(caps, _rank(bid, tiebreak, first=st.priority), capacity)  # priority, then bid
        else:  # AUCTION
            got = greedy(caps, _rank(bid, tiebreak), capacity)
            short = (got < caps) & in_pool
            clearing = np.maximum(st.reserve_price, np.where(short, bid, 0.0).max(-1))
            mult = np.where(in_pool, clearing[:, None], mult)
        alloc = got if one_pool else np.where(in_pool, got, alloc)
    if mech == PROPORTIONAL:
        mult = np.asarray(bid, np.float64)
    elif mech != AUCTION:
        return alloc, np.ones((B, T))
    return alloc, np.broadcast_to(mult, (B, T))


def place(st, alloc: np.ndarray) -> np.ndarray:
    """Place each tenant's GPUs on the nodes of its pool: best-fit decreasing.

    Tenants go largest first (ties by index). A tenant that fits on one node goes to the node of
    its pool with the least free GPUs that still holds it (best fit); one that fits on no
    single node takes the nodes with the most free GPUs first, so it spans as few nodes as the
    free space allows. Returns gpus_on_node (B, T, K) int64.

    The loop runs over sorted positions (at most T), each step vectorised over the batch.
    """
    B, T = alloc.shape
    K = st.K
    gon = np.zeros((B, T, K), np.int64)
    npos = int((alloc > 0).sum(-1).max(initial=0))
    if npos == 0:
        return gon
    order = np.argsort(-alloc, axis=-1, kind="stable")[:, :npos]  # largest first, ties by index
    a_sorted = np.take_along_axis(alloc, order, -1)
    in_pool = (st.pool[:, None] == st.node_pool[None, :])[order]  # (B, npos, K) node k can host
    rows = np.arange(B)
    col = rows[:, None]
    free = np.full((B, K), st.gpus_per_node, np.int64)
    big = np.int64(1) << 40
    for j in range(npos):
        t = order[:, j]
        a = a_sorted[:, j]
        avail = np.where(in_pool[:, j], free, -1)
        fit_key = np.where(avail >= a[:, None], avail, big)
        k_best = fit_key.argmin(-1)
        fits = fit_key[rows, k_best] < big
        if fits.all():  # the common case: one node holds it in every row
            free[rows, k_best] -= a
            gon[rows, t, k_best] = a
            continue
        take = np.zeros((B, K), np.int64)
        by_free = np.argsort(-avail, axis=-1, kind="stable")
        f_sorted = np.maximum(avail[col, by_free], 0)
        before = np.cumsum(f_sorted, -1) - f_sorted
        take[col, by_free] = np.minimum(np.maximum(a[:, None] - before, 0), f_sorted)
        take[fits] = 0
        take[rows[fits], k_best[fits]] = a[fits]
        free -= take
        gon[rows, t] = take
    return gon


__all__ = ["admissible", "clear", "greedy", "place", "waterfill"]

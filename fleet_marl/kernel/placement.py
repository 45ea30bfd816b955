"""The round's placement stage, compiled: each tenant's granted GPUs onto the nodes of its
pool, best-fit decreasing (``docs/model.md`` section 4), one batch row at a time; with
``CouplingSpec.persistent_placement`` each tenant first keeps the GPUs it held last round
(``docs/model.md`` section 12)."""

from __future__ import annotations

from fleet_marl.kernel.jit import argsort_asc, jit, jit_inline
from fleet_marl.kernel.layout import N_POOL, T_POOL

_BIG = 1 << 40


@jit
def place(alloc, prev, persist, ti, ni, gpn, gon, free, avail, order, by_free, neg_avail, count, t_nodes, n_nodes):
    """Best-fit decreasing: tenants largest first (ties by index); one that fits on a node of
    its pool goes to the fullest such node, one that fits on none takes the emptiest nodes
    first. With ``persist`` each tenant first keeps its GPUs of last round, ``prev`` (T, K)
    (:func:`keep`), and only the GPUs nobody keeps are placed so. Fills ``gon`` (T, K), and for
    each tenant ``t`` the nodes it runs on, ``t_nodes[t, :n_nodes[t]]`` (so that the round's
    loops over placements skip empty cells)."""
    T, K = gon.shape
    for k in range(K):
        free[k] = gpn
    # largest first, ties by index: a counting sort on the GPU counts (small integers)
    top = 0
    for t in range(T):
        top = max(top, alloc[t])
        for k in range(K):
            gon[t, k] = 0
        n_nodes[t] = 0
    for v in range(top + 1):  # count[v]: tenants granted exactly v (count has room for max_gpus + 1 values)
        count[v] = 0
    for t in range(T):
        count[alloc[t]] += 1
    npos = T - count[0]
    start = 0  # where the tenants granted v begin in order: after all granted more
    for v in range(top, 0, -1):
        c = count[v]
        count[v] = start
        start += c
    for t in range(T):
        if alloc[t] > 0:
            order[count[alloc[t]]] = t
            count[alloc[t]] += 1
    if persist:
        for j in range(npos):
            keep(order[j], alloc[order[j]], prev, gon, free, t_nodes, n_nodes)
    for j in range(npos):
        t = order[j]
        a = alloc[t]
        for i in range(n_nodes[t]):
            a -= gon[t, t_nodes[t, i]]
        if a <= 0:
            continue
        best = -1
        best_v = _BIG
        for k in range(K):
            avail[k] = free[k] if ni[k, N_POOL] == ti[t, T_POOL] else -1
            if avail[k] >= a and avail[k] < best_v:
                best_v = avail[k]
                best = k
        if best >= 0:
            _add(t, best, a, gon, free, t_nodes, n_nodes)
        else:
            for k in range(K):
                neg_avail[k] = -float(avail[k])
            argsort_asc(by_free, neg_avail)
            taken = 0
            for i in range(K):
                k = by_free[i]
                fk = max(avail[k], 0)
                take = min(max(a - taken, 0), fk)
                taken += fk
                if take > 0:
                    _add(t, k, take, gon, free, t_nodes, n_nodes)


@jit_inline
def _add(t, k, n, gon, free, t_nodes, n_nodes):
    """``n`` more GPUs of node ``k`` to tenant ``t`` (the node joins its list if new to it)."""
    if gon[t, k] == 0:
        t_nodes[t, n_nodes[t]] = k
        n_nodes[t] += 1
    gon[t, k] += n
    free[k] -= n


@jit_inline
def keep(t, a, prev, gon, free, t_nodes, n_nodes):
    """Tenant ``t``, granted ``a`` GPUs, keeps what it held last round (``prev[t]``): all of it
    when ``a`` is at least that, else ``a`` GPUs on the nodes where it held the most (ties: the
    lower node index), giving up its least-used nodes first."""
    K = gon.shape[1]
    held = 0
    for k in range(K):
        held += prev[t, k]
    if held == 0:
        return
    if a >= held:
        for k in range(K):
            if prev[t, k] > 0:
                _add(t, k, prev[t, k], gon, free, t_nodes, n_nodes)
        return
    left = a
    while left > 0:
        best, best_v = -1, 0
        for k in range(K):
            v = prev[t, k] if gon[t, k] == 0 else 0
            if v > best_v:
                best, best_v = k, v
        take = min(best_v, left)
        _add(t, best, take, gon, free, t_nodes, n_nodes)
        left -= take


__all__ = ["keep", "place"]

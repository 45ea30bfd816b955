"""The round's placement stage, compiled: each tenant's granted GPUs onto the nodes of its
pool, best-fit decreasing (``docs/model.md`` section 4), one batch row at a time."""

from __future__ import annotations

from fleet_marl.kernel.jit import argsort_asc, jit
from fleet_marl.kernel.layout import N_POOL, T_POOL

_BIG = 1 << 40


@jit
def place(alloc, ti, ni, gpn, gon, free, avail, order, by_free, neg_avail, count, t_nodes, n_nodes):
    """Best-fit decreasing: tenants largest first (ties by index); one that fits on a node of
    its pool goes to the fullest such node, one that fits on none takes the emptiest nodes
    first. Fills ``gon`` (T, K), and for each tenant ``t`` the nodes it runs on,
    ``t_nodes[t, :n_nodes[t]]`` (so that the round's loops over placements skip empty cells)."""
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
    for j in range(npos):
        t = order[j]
        a = alloc[t]
        best = -1
        best_v = _BIG
        for k in range(K):
            avail[k] = free[k] if ni[k, N_POOL] == ti[t, T_POOL] else -1
            if avail[k] >= a and avail[k] < best_v:
                best_v = avail[k]
                best = k
        if best >= 0:
            gon[t, best] = a
            free[best] -= a
            t_nodes[t, 0] = best
            n_nodes[t] = 1
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
                gon[t, k] = take
                free[k] -= take
                if take > 0:
                    t_nodes[t, n_nodes[t]] = k
                    n_nodes[t] += 1


__all__ = ["place"]

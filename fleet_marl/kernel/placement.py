"""The round's placement stage, compiled: each tenant's granted GPUs onto the nodes of its
pool, best-fit decreasing (``docs/model.md`` section 4), one batch row at a time; with
``CouplingSpec.persistent_placement`` each tenant first keeps the GPUs it held last round
(``docs/model.md`` section 12)."""

from __future__ import annotations

from fleet_marl.kernel.jit import jit, jit_inline
from fleet_marl.kernel.layout import N_POOL, T_POOL


@jit
def place(alloc, prev, held, persist, ti, ni, gpn, gon, free, hist, order, count, t_nodes, n_nodes):
    """Best-fit decreasing: tenants largest first (ties by index); one that fits on a node of
    its pool goes to the fullest such node (ties: the lower index), one that fits on none takes
    the emptiest nodes first (ties likewise). With ``persist`` each tenant first keeps its GPUs
    of last round, ``prev`` (T, K), ``held`` (T,) their sums (:func:`keep`), and only the GPUs
    nobody keeps are placed so. Fills ``gon`` (T, K), and for each tenant ``t`` the nodes it
    runs on, ``t_nodes[t, :n_nodes[t]]`` (so that the round's loops over placements skip empty
    cells). ``free`` (K,), ``hist`` (pools, gpn + 1), ``order`` (T,) and ``count`` (max grant +
    2,) are scratch: ``hist[q, v]`` counts the nodes of pool ``q`` with ``v`` GPUs free, so that
    a tenant finds the free count it goes to without weighing every node."""
    T, K = gon.shape
    for q in range(hist.shape[0]):
        for v in range(gpn + 1):
            hist[q, v] = 0
    for k in range(K):
        free[k] = gpn
        hist[ni[k, N_POOL], gpn] += 1
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
            t = order[j]
            if held[t] > 0:
                keep(t, alloc[t], held[t], prev, ni, gon, free, hist, t_nodes, n_nodes)
    for j in range(npos):
        t = order[j]
        a = alloc[t]
        for i in range(n_nodes[t]):
            a -= gon[t, t_nodes[t, i]]
        if a <= 0:
            continue
        pool = ti[t, T_POOL]
        v = a  # best fit: the fewest free GPUs that hold all a, on the lowest node with them
        while v <= gpn and hist[pool, v] == 0:
            v += 1
        if v <= gpn:
            _add(t, _next_node(0, v, pool, ni, free), a, ni, gon, free, hist, t_nodes, n_nodes)
            continue
        # spread: the emptiest nodes first (ties: the lower index), a free count at a time (none holds a)
        for v in range(min(a - 1, gpn), 0, -1):
            k = 0
            for _ in range(hist[pool, v]):  # a node taken at v is emptied, or a is done
                k = _next_node(k, v, pool, ni, free)
                take = min(a, v)
                _add(t, k, take, ni, gon, free, hist, t_nodes, n_nodes)
                a -= take
                k += 1
                if a == 0:
                    break
            if a == 0:
                break


@jit_inline
def _next_node(k, v, pool, ni, free):
    """The first node from ``k`` on of ``pool`` with ``v`` GPUs free (``hist`` says one is there)."""
    while free[k] != v or ni[k, N_POOL] != pool:
        k += 1
    return k


@jit_inline
def _add(t, k, n, ni, gon, free, hist, t_nodes, n_nodes):
    """``n`` more GPUs of node ``k`` to tenant ``t`` (the node joins its list if new to it)."""
    if gon[t, k] == 0:
        t_nodes[t, n_nodes[t]] = k
        n_nodes[t] += 1
    gon[t, k] += n
    q = ni[k, N_POOL]
    hist[q, free[k]] -= 1
    free[k] -= n
    hist[q, free[k]] += 1


@jit_inline
def keep(t, a, held, prev, ni, gon, free, hist, t_nodes, n_nodes):
    """Tenant ``t``, granted ``a`` GPUs, keeps what it held last round (``prev[t]``, ``held`` GPUs
    in all): all of it when ``a`` is at least that, else ``a`` GPUs on the nodes where it held
    the most (ties: the lower node index), giving up its least-used nodes first."""
    K = gon.shape[1]
    if a >= held:
        for k in range(K):
            if prev[t, k] > 0:
                _add(t, k, prev[t, k], ni, gon, free, hist, t_nodes, n_nodes)
        return
    left = a
    while left > 0:
        best, best_v = -1, 0
        for k in range(K):
            v = prev[t, k] if gon[t, k] == 0 else 0
            if v > best_v:
                best, best_v = k, v
        take = min(best_v, left)
        _add(t, best, take, ni, gon, free, hist, t_nodes, n_nodes)
        left -= take


@jit
def held_gpus(prev, held):
    """Each tenant's GPUs in the placement ``prev`` (T, K), into ``held`` (T,)."""
    for t in range(prev.shape[0]):
        h = 0
        for k in range(prev.shape[1]):
            h += prev[t, k]
        held[t] = h


__all__ = ["held_gpus", "keep", "place"]

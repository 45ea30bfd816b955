"""The round's contention stage, compiled: what tenants lose to one another on the links and the
storage they share (``coupling.contention``; ``docs/model.md`` section 12.1), one batch row at a
time. Both run only with the switch on; with it off the round never calls them.

* :func:`storage_loads`, before the throughput stage: the checkpoint loads of the tenants that
  restart in the row share the cluster's storage bandwidth, max-min fair as a fluid (each load
  at most its own loaders' and nodes' rate; a finished load's share goes to the others), which
  gives each restarted tenant's load seconds.
* :func:`contend`, after it: a trainer whose nodes sit under more than one leaf switch sends its
  ring collectives over those leaves' uplinks. Its ring crosses each leaf once each way at its
  link rate ``d = min(NVLink, GPUs per node x NIC)`` (its rails: a flow per NIC) while it
  communicates, a share ``a = t_comm / step`` of its step (of the round's available seconds),
  so its mean load is ``L = a d``. A leaf's load is the sum of its crossing tenants' ``L`` over
  the uplinks' bytes/s ``C``. While tenant ``i`` communicates its flows share the link with the
  others' flows at their mean (per-flow fair, a mean-field processor sharing): its
  communication runs ``s = max(1, (d_i + sum_{j != i} L_j) / C)`` times slower on each leaf, and
  on its most loaded one its step becomes ``step + (1 - comm_overlap) t_comm (s - 1)``. Writes
  the step-time factor (``slowdown``) and the most loaded leaf's load (``link_load``). Then a
  trainer with a checkpoint interval ``I`` (``checkpoint_every_s``) stops for a synchronous
  write of its checkpoint every ``I`` seconds of training: ``w = bytes / r`` at its own rate
  ``r = min(n x per-GPU, nodes x per-node)`` (the loaders' rates of a restart), the writers
  sharing the storage as the links are shared (``s = max(1, (r + sum_{j != i} u_j r_j) / S)``,
  ``u = w / (I + w)`` the share of its time a writer writes), so it trains ``I / (I + s w)`` of
  its time.
"""

from __future__ import annotations

import math

from fleet_marl.kernel.jit import jit
from fleet_marl.kernel.layout import (
    N_LEAF,
    N_UPLINK,
    O_EFF,
    O_LINK,
    O_PENDING,
    O_SLOW,
    O_TPS,
    OI_BATCH,
    S_LOAD_GPU,
    S_LOAD_NODE,
    S_OVERLAP,
    S_PERSIST,
    S_RESTART,
    S_ROUND,
    S_STORAGE,
    T_CKPT_EVERY,
    T_INTER,
    T_INTRA,
    T_SEQ,
    T_TRAIN,
)
from fleet_marl.kernel.tenant_cost import C_COMM, checkpoint_bytes


@jit
def storage_loads(b, ti, sc, c_terms, alloc, n_nodes, restarted, carry, avail_s, rf, ct):
    """The seconds of the round each tenant of row ``b`` has, into ``avail_s``: a tenant that
    begins a restart (``restarted``, ``tenant_cost.restarts``) loses the fixed part of a restart
    and the seconds it takes to read its checkpoint (``tenant_cost.checkpoint_bytes``), every load
    at most ``min(n x per-GPU loader, nodes x per-node rate)``, all of them sharing the storage's
    bytes/s max-min fair until each finishes. With ``coupling.persistent_placement`` a restart
    also takes its ``carry`` seconds (a planned save, or the rest of a restart under way, which
    reads nothing more), and what does not fit in the round is left for the next (``rf``'s
    ``restart_pending_s``). ``ct`` (4, T) is scratch."""
    round_s, fixed, storage, persist = sc[S_ROUND], sc[S_RESTART], sc[S_STORAGE], sc[S_PERSIST] != 0.0
    load_s, rem, cap, rate = ct[0], ct[1], ct[2], ct[3]
    total = 0.0
    for t in range(alloc.shape[0]):
        n = alloc[t]
        load_s[t] = 0.0
        rem[t] = 0.0
        if restarted[t]:
            rem[t] = checkpoint_bytes(c_terms, t, ti[t, T_TRAIN] != 0)
            cap[t] = min(n * sc[S_LOAD_GPU], max(n_nodes[t], 1) * sc[S_LOAD_NODE])
            total += cap[t]
    if total <= storage:  # every load at its own rate throughout
        for t in range(alloc.shape[0]):
            if rem[t] > 0.0:
                load_s[t] = rem[t] / cap[t]
    else:
        storage_share(storage, load_s, rem, cap, rate)
    for t in range(alloc.shape[0]):
        rf[O_PENDING, t] = 0.0
        if restarted[t]:
            down = fixed + load_s[t]
            if persist:
                down += carry[t]
                rf[O_PENDING, t] = max(down - round_s, 0.0)
            avail_s[t] = max(round_s - down, 0.0)
        elif carry[t] > 0.0:
            avail_s[t] = max(round_s - carry[t], 0.0)
            rf[O_PENDING, t] = max(carry[t] - round_s, 0.0)
        else:
            avail_s[t] = round_s


@jit
def storage_share(storage, load_s, rem, cap, rate):
    """The max-min fair fluid schedule of the loads of ``rem`` bytes (at most ``cap`` bytes/s
    each) over ``storage`` bytes/s: each load's finishing time into ``load_s``; ``rem`` is spent
    (0 after) and ``rate`` is scratch.

    Event by event: the loads not held at their cap share what the capped ones leave equally,
    ``share = (storage - sum of caps) / uncapped``. The share only grows (a finished load frees
    its rate), so a load once capped stays capped and finishes ``(rem - S) / cap`` after it was
    capped, ``S`` the bytes each uncapped load had by then; the uncapped loads progress together
    (``S`` grows at ``share``), the smallest first. Each event is the earlier of the next capped
    load's end and the smallest uncapped load's; a division per load and per event, not per load
    and event (the schedule of ``tests/oracle_contention.py``, computed from scratch each event)."""
    T = rem.shape[0]
    left, unfixed = storage, 0
    for t in range(T):
        load_s[t] = 0.0
        rate[t] = 0.0  # 0: done or no load, -1: uncapped, > 0: capped at it
        if rem[t] > 0.0:
            rate[t] = -1.0
            unfixed += 1
    now = served = 0.0  # the time, and the bytes each uncapped load has had
    while True:
        changed = True
        while changed and unfixed > 0:  # cap every uncapped load whose cap is within the share
            changed = False
            share = left / unfixed
            for t in range(T):
                if rate[t] < 0.0 and cap[t] <= share:
                    rate[t] = cap[t]
                    left -= cap[t]
                    unfixed -= 1
                    load_s[t] = now + (rem[t] - served) / cap[t]
                    changed = True
        end_c, smallest = math.inf, math.inf
        for t in range(T):
            if rate[t] > 0.0:
                end_c = min(end_c, load_s[t])
            elif rate[t] < 0.0:
                smallest = min(smallest, rem[t])
        share = left / unfixed if unfixed > 0 else 0.0
        end_u = now + (smallest - served) / share if unfixed > 0 else math.inf
        if end_c == math.inf and end_u == math.inf:
            break
        if end_c <= end_u:  # capped loads end (and free their rate)
            served += share * (end_c - now)
            now = end_c
            for t in range(T):
                if rate[t] > 0.0 and load_s[t] <= now:
                    left += rate[t]
                    rate[t] = 0.0
        else:  # the smallest uncapped loads end
            served = smallest
            now = end_u
            for t in range(T):
                if rate[t] < 0.0 and rem[t] <= served:
                    load_s[t] = now
                    rate[t] = 0.0
                    unfixed -= 1
    for t in range(T):
        rem[t] = 0.0


@jit
def contend(b, tf, ti, nf, ni, sc, c_terms, alloc, n_nodes, t_nodes, running, work_rate, avail_s, rf, ri, ct, load, stamp):
    """The leaf uplinks' contention in row ``b`` (see the module doc): scales each crossing
    trainer's work rate, tokens/s and efficiency by ``step / contended step`` and writes its
    ``slowdown`` and ``link_load`` (1 and 0 for every other tenant). ``ct`` (4, T) and ``load``,
    ``stamp`` (K,) (one per leaf, leaves numbered below K) are scratch."""
    T, K = alloc.shape[0], ni.shape[0]
    d, mean, comm, step = ct[0], ct[1], ct[2], ct[3]
    round_s, hide = sc[S_ROUND], 1.0 - sc[S_OVERLAP]
    for k in range(K):
        load[k] = 0.0
        stamp[k] = -1
    for t in range(T):
        rf[O_SLOW, t] = 1.0
        rf[O_LINK, t] = 0.0
        d[t] = 0.0
        nodes = n_nodes[t]
        if not (running[t] and ti[t, T_TRAIN] != 0 and nodes > 1 and work_rate[t] > 0.0):
            continue
        first = ni[t_nodes[t, 0], N_LEAF]
        crosses = False
        for i in range(1, nodes):
            crosses = crosses or ni[t_nodes[t, i], N_LEAF] != first
        if not crosses:
            continue
        nf_ = float(alloc[t])
        d[t] = min(tf[t, T_INTRA], nf_ / nodes * tf[t, T_INTER])  # the ring's link rate (roofline.train_step)
        comm[t] = c_terms[C_COMM, t] * (nf_ - 1.0) / nf_ / d[t]
        step[t] = nf_ * max(ri[OI_BATCH, t], 1) * tf[t, T_SEQ] / work_rate[t]
        mean[t] = min(comm[t] / step[t], 1.0) * d[t] * avail_s[t] / round_s
        for i in range(nodes):
            leaf = ni[t_nodes[t, i], N_LEAF]
            if stamp[leaf] != t:
                stamp[leaf] = t
                load[leaf] += mean[t]
    for t in range(T):
        if d[t] == 0.0:
            continue
        s, most = 1.0, 0.0
        for i in range(n_nodes[t]):
            k = t_nodes[t, i]
            leaf = ni[k, N_LEAF]
            if stamp[leaf] != T + t:
                stamp[leaf] = T + t
                capacity = nf[k, N_UPLINK]
                most = max(most, load[leaf] / capacity)
                s = max(s, (d[t] - mean[t] + load[leaf]) / capacity)
        slowed = step[t] + hide * comm[t] * (s - 1.0)
        f = step[t] / slowed
        work_rate[t] *= f
        rf[O_TPS, t] *= f
        rf[O_EFF, t] *= f
        rf[O_SLOW, t] = slowed / step[t]
        rf[O_LINK, t] = most
    checkpoint_writes(tf, ti, sc, c_terms, alloc, n_nodes, running, work_rate, rf, ct)


@jit
def checkpoint_writes(tf, ti, sc, c_terms, alloc, n_nodes, running, work_rate, rf, ct):
    """The synchronous checkpoint writes of the running trainers with an interval (see the module
    doc): scales each one's work rate and tokens/s by the share of its time it trains. ``ct``
    (4, T) is scratch (its rows are free once the links are done)."""
    storage = sc[S_STORAGE]
    rate, write, mean = ct[0], ct[1], ct[2]
    total = 0.0
    for t in range(alloc.shape[0]):
        every = tf[t, T_CKPT_EVERY]
        write[t] = 0.0
        mean[t] = 0.0
        if running[t] and ti[t, T_TRAIN] != 0 and every > 0.0 and work_rate[t] > 0.0:
            rate[t] = min(alloc[t] * sc[S_LOAD_GPU], max(n_nodes[t], 1) * sc[S_LOAD_NODE])
            write[t] = checkpoint_bytes(c_terms, t, True) / rate[t]
            mean[t] = write[t] / (every + write[t]) * rate[t]
            total += mean[t]
    for t in range(alloc.shape[0]):
        if write[t] > 0.0:
            every = tf[t, T_CKPT_EVERY]
            s = max(1.0, (rate[t] - mean[t] + total) / storage)
            f = every / (every + s * write[t])
            work_rate[t] *= f
            rf[O_TPS, t] *= f


__all__ = ["checkpoint_writes", "contend", "storage_loads", "storage_share"]

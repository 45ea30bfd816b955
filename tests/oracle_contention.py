"""The oracle's contention (``coupling.contention``, docs/model.md section 12.1), in numpy,
written apart from ``fleet_marl/kernel/contention.py``: the restarts' checkpoint loads over the
shared storage (an event simulation of max-min fair sharing, the water level found by sorting
the loads' own rates) and the leaf uplinks the multi-leaf trainers share (one array expression
over batch rows, tenants and leaves). ``tests/oracle.py`` calls both from its round."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


def _max_min(capacity: float, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates of ``capacity`` over flows each capped at ``caps``: the flows in order
    of their caps, each taking the smaller of its cap and an equal share of what is left."""
    rates = np.empty_like(caps)
    left = capacity
    order = np.argsort(caps, kind="stable")
    for i, j in enumerate(order):
        rates[j] = min(caps[j], left / (len(caps) - i))
        left -= rates[j]
    return rates


def load_seconds(capacity: float, size: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """When each of the loads of ``size`` bytes (each at most ``caps`` bytes/s) finishes when
    they share ``capacity`` bytes/s max-min fair from time 0 (a finished load's share goes to
    the others)."""
    finish = np.zeros_like(size)
    left = size.astype(np.float64).copy()
    now = 0.0
    active = left > 0
    if caps[active].sum() <= capacity:
        return np.where(active, size / np.where(active, caps, 1.0), 0.0)
    while active.any():
        idx = np.flatnonzero(active)
        rates = _max_min(capacity, caps[idx])
        times = left[idx] / rates
        dt = times.min()
        now += dt
        left[idx] -= rates * dt
        # a load that ties the first to finish up to rounding ends now too (its time may round
        # above dt while its bytes left round to zero or below: it must not finish at 0)
        done = (times <= dt) | (left[idx] <= 0.0)
        finish[idx[done]] = now
        left[idx[done]] = 0.0
        active = left > 0
    return finish


def restart_down(st, terms, alloc: np.ndarray, nodes: np.ndarray, restarted: np.ndarray) -> np.ndarray:
    """(B, T) seconds each restarted tenant is down: the fixed part of a restart and its
    checkpoint's load (a trainer's 12 bytes a parameter, fp32 master and Adam moments; a
    server's weights), the loads of a batch row sharing the storage; 0 for the others."""
    return st.round_seconds - available_seconds(st, terms, alloc, nodes, restarted, clip=False)


def available_seconds(st, terms, alloc: np.ndarray, nodes: np.ndarray, restarted: np.ndarray, clip: bool = True) -> np.ndarray:
    """(B, T) seconds of the round each tenant has: a restarted one loses the fixed part of a
    restart and its checkpoint's load (a trainer's 12 bytes a parameter, fp32 master and Adam
    moments; a server's weights), the loads of a batch row sharing the storage (``clip``: at
    least 0)."""
    ckpt = np.broadcast_to(np.where(st.is_train, 12.0 * st.params.sum(-1), terms.weights), alloc.shape)
    own = np.minimum(alloc * st.load_gpu_bps, np.maximum(nodes, 1) * st.load_node_bps)
    avail = np.full(alloc.shape, float(st.round_seconds))
    for b in range(alloc.shape[0]):
        r = restarted[b]
        if r.any():
            loads = load_seconds(st.storage_bps, np.where(r, ckpt[b], 0.0), np.where(r, own[b], 1.0))
            lo = 0.0 if clip else -np.inf
            avail[b] = np.where(r, np.maximum(st.round_seconds - (st.restart_seconds + loads), lo), st.round_seconds)
    return avail


class Links(NamedTuple):
    factor: np.ndarray  # (B, T) uncontended step / contended step (1: no shared uplink)
    slowdown: np.ndarray  # (B, T) its inverse
    link_load: np.ndarray  # (B, T) mean load / capacity of the most loaded leaf uplink the tenant crosses


def checkpoint_factor(st, terms, alloc, nodes, running, work_rate) -> np.ndarray:
    """(B, T) the share of its time each running trainer with a checkpoint interval ``I`` trains:
    ``I / (I + s w)``, ``w`` its checkpoint's write at its own rate (the loaders' of a restart)
    and ``s`` the storage's slowdown while it writes (its rate plus the other writers' mean
    rates, ``w / (I + w)`` of theirs, over the storage's bytes/s, at least 1)."""
    every = np.broadcast_to(st.checkpoint_every_s, alloc.shape)
    writes = running & st.is_train & (every > 0) & (work_rate > 0)
    rate = np.minimum(alloc * st.load_gpu_bps, np.maximum(nodes, 1) * st.load_node_bps)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(writes, 12.0 * st.params.sum(-1) / rate, 0.0)
        mean = np.where(writes, w / (every + w) * rate, 0.0)
        s = np.maximum((rate + mean.sum(-1, keepdims=True) - mean) / st.storage_bps, 1.0)
        return np.where(writes, every / (every + s * w), 1.0)


def links(st, terms, gon, alloc, nodes, batch, running, work_rate, avail) -> Links:
    """The leaf uplinks shared by the trainers whose nodes sit under more than one leaf: a
    trainer's ring crosses each of its leaves at its link rate ``d`` (GPUs per node x NIC, at
    most NVLink) for ``t_comm / step`` of its available time; while it communicates the others
    load each leaf at their mean, so its communication on a leaf takes ``(d + others' mean) /
    capacity`` times longer (at least 1), the most on its worst leaf; its exposed share
    (``1 - comm_overlap``) lengthens its step."""
    n_leaves = int(st.node_leaf.max()) + 1
    onehot = np.eye(n_leaves)[st.node_leaf]  # (K, L)
    on = (gon > 0).astype(np.float64) @ onehot > 0  # (B, T, L)
    crosses = (on.sum(-1) > 1) & st.is_train & running & (work_rate > 0)
    n = np.maximum(alloc, 1).astype(np.float64)
    per_node = n / np.maximum(nodes, 1)
    d = np.minimum(st.intra_bw, per_node * st.inter_bw)
    t_comm = terms.comm_bytes * (n - 1.0) / n / d
    with np.errstate(divide="ignore", invalid="ignore"):
        step = n * np.maximum(batch, 1) * st.seq_len / work_rate
        mean = np.where(crosses, np.minimum(t_comm / step, 1.0) * d * avail / st.round_seconds, 0.0)
    cap = np.array([st.leaf_uplink_bps[st.node_leaf == leaf][0] for leaf in range(n_leaves)])  # (L,)
    leaf_load = np.einsum("btl,bt->bl", on & crosses[..., None], mean)  # (B, L)
    seen = (leaf_load[:, None, :] - mean[..., None] + d[..., None]) / cap
    s = np.maximum(np.where(on, seen, 0.0).max(-1), 1.0)
    worst = np.where(on, leaf_load[:, None, :] / cap, 0.0).max(-1)
    with np.errstate(invalid="ignore"):
        slowed = step + (1.0 - st.comm_overlap) * t_comm * (s - 1.0)
        factor = np.where(crosses, step / slowed, 1.0)
    return Links(factor=factor, slowdown=np.where(crosses, slowed / step, 1.0), link_load=np.where(crosses, worst, 0.0))

"""The observation matrix of B clusters, one compiled pass: :class:`Observer` holds the
scenario's static features and constants (:class:`ObsScene`) and each round reads the round
:class:`Ahead` and the :class:`LastRound` into (B, T, ``N_OBS``) float32 rows (``OBS_FIELDS``,
the normalizations of ``observations.py``'s module doc). With a coupling switch of the
scenario on (``fields.coupled``) each row goes on with ``COUPLING_FIELDS``, the normalized
:class:`TenantCoupling` of the last round (:func:`tenant_coupling`, which the infos report raw).
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from fleet_marl import catalog
from fleet_marl.environment.fields import COUPLING_FIELDS, COUPLING_INDEX, N_COUPLING, N_OBS, OBS_INDEX, coupled
from fleet_marl.environment.normalize import mean_arrivals, squash
from fleet_marl.kernel import RoundState

_O = OBS_INDEX


class ObsScene(NamedTuple):
    """What :func:`_observe` reads of the scenario, built once by :class:`Observer`."""

    static: np.ndarray  # (T, N_OBS) float64 the static features
    consts: np.ndarray  # (T + 1, 6) float64 per-tenant constants, then a row of scalars (``Observer.consts``)
    is_train: np.ndarray  # (T,) bool
    pool: np.ndarray  # (T,) int64 each tenant's GPU pool
    node_pool: np.ndarray  # (K,) int64 each node's pool
    pool_cap: np.ndarray  # (Q,) float64 GPUs per pool


class Ahead(NamedTuple):
    """The round ahead of B clusters, as :func:`_observe` reads it (``Observer.matrix``'s arguments)."""

    live: np.ndarray  # (B, T) bool
    round_: np.ndarray  # (B,) int64 rounds played
    budget: np.ndarray  # (B, T) float64 USD left
    remaining: np.ndarray  # (B, T) float64 tokens left in each trainer's job
    queue: np.ndarray  # (B, T) float64 serving requests waiting
    prev_alloc: np.ndarray  # (B, T) int64 GPUs held
    temp: np.ndarray  # (B, K) float64 node temperatures
    has_job: np.ndarray  # (B, T) bool
    backlog_n: np.ndarray  # (B, T) int64 jobs queued behind the current one
    fair: np.ndarray  # (B, T) float64 fair shares
    streak: np.ndarray  # (B, T) int64 starvation streaks


class LastRound(NamedTuple):
    """The last round of B clusters, as :func:`_observe` reads it (its Outcome's fields, read
    only where ``has_last``)."""

    has_last: np.ndarray  # (B,) bool
    arrivals: np.ndarray  # (B, T) float64 its serving arrivals
    price: np.ndarray  # (B, T) float64
    value: np.ndarray
    utility: np.ndarray
    slo: np.ndarray
    throttle: np.ndarray
    mem_total: np.ndarray
    mem_capacity: np.ndarray
    requested: np.ndarray  # (B, T) int64
    alloc: np.ndarray  # (B, T) int64
    oom: np.ndarray  # (B, T) bool
    vetoed: np.ndarray
    unsafe: np.ndarray
    restarted: np.ndarray
    rack_power: np.ndarray  # (B, R) float64


class TenantCoupling(NamedTuple):
    """What sharing the cluster cost each tenant in a round, (B, T) float64 each (the
    infos' ``COUPLING_KEYS``; the observation's ``COUPLING_FIELDS`` normalize them)."""

    slowdown: np.ndarray  # step-time factor from the shared links' contention (1 unslowed)
    link_load: np.ndarray  # offered load / capacity of the most loaded shared link it crossed (0: none)
    restart_s: np.ndarray  # seconds of the round lost to a restart
    power_headroom: np.ndarray  # (rack cap - rack power) / rack cap of the tightest rack it ran on
    ttft_p99_over_slo: np.ndarray  # serve: TTFT p99 / its TTFT SLO; train: 0
    restart_pending_s: np.ndarray  # seconds of its restart still ahead at the round's end (coupling.persistent_placement)
    lost_tokens: np.ndarray  # train: tokens a preemption lost (trained since its last checkpoint; persistent_placement)


def pool_racks(st) -> np.ndarray:
    """(T, R) bool: the racks holding a node of each tenant's pool (where it can run)."""
    return (st.rack_of[None, :, :] * (st.node_pool[None, :] == st.pool[:, None])[:, :, None]).sum(1) > 0


def tenant_coupling(st, o, racks_of_pool: np.ndarray | None = None) -> TenantCoupling:
    """Each tenant's :class:`TenantCoupling` in the rounds of the kernel Outcome ``o`` (leading
    (B,)) of the scenario ``st``. A tenant's rack is the rack of a node it ran on, the tightest
    of them (the least headroom); one that ran on none reads the tightest rack of its pool
    (``racks_of_pool``, :func:`pool_racks`). A rack's headroom is its cap minus its power, over
    the cap (negative when over it)."""
    gon = np.asarray(o.gpus_on_node)
    cap = st.rack_power_cap_w
    free = (cap - np.asarray(o.rack_power_w)) / cap  # (..., R)
    headroom = np.empty(gon.shape[:-1])
    _tightest_rack(
        gon.reshape(-1, *gon.shape[-2:]),
        st.node_rack,
        free.reshape(-1, free.shape[-1]),
        pool_racks(st) if racks_of_pool is None else racks_of_pool,
        headroom.reshape(-1, gon.shape[-2]),
    )
    over = np.where(st.is_train, 0.0, np.asarray(o.ttft_p99_s) / st.slo_ttft_s)
    return TenantCoupling(
        np.asarray(o.slowdown),
        np.asarray(o.link_load),
        np.asarray(o.restart_s),
        headroom,
        over,
        np.asarray(o.restart_pending_s),
        np.asarray(o.lost_tokens),
    )


@nb.njit(cache=True, nogil=True)
def _tightest_rack(gon, node_rack, free, racks_of_pool, out):
    """``out[b, t]``: the least ``free[b, r]`` over the racks ``r`` of the nodes tenant ``t`` ran
    on in round ``b`` (``gon`` (B, T, K) > 0), or over its pool's racks (``racks_of_pool`` (T,
    R)) when it ran on none; inf when there are none."""
    B, T, K = gon.shape
    for b in range(B):
        for t in range(T):
            least, ran = np.inf, False
            for k in range(K):
                if gon[b, t, k] > 0:
                    ran = True
                    least = min(least, free[b, node_rack[k]])
            if not ran:
                for r in range(free.shape[1]):
                    if racks_of_pool[t, r]:
                        least = min(least, free[b, r])
            out[b, t] = least


class Observer:
    """The observation rows of one scenario: the static features computed once, the rest
    each round from the episode's state (:meth:`matrix`)."""

    def __init__(self, st, cfg, bid_levels: np.ndarray) -> None:
        self.st = st
        hours = st.round_seconds / 3600.0
        pool_cap = st.pool_capacity[st.pool].astype(np.float64)
        static = np.zeros((st.T, N_OBS))
        static[:, _O["is_serve"]] = ~st.is_train
        static[:, _O["fp8"]] = st.supported[:, catalog.PRECISION_CODE["fp8"]]
        static[:, _O["gpu_memory"]] = np.minimum(st.mem_bytes / cfg.cluster.usable_memory_fraction / 141e9, 1.0)
        static[:, _O["model_size"]] = np.clip(np.log10(st.params.sum(-1)) / 12.0, 0.0, 1.0)
        static[:, _O["priority"]] = st.priority / (st.priority + 1.0)
        static[:, _O["max_gpus"]] = st.max_gpus / pool_cap
        static[:, _O["burn_rate"]] = squash(st.max_gpus * st.list_price * hours / st.spend_norm, 1.0)
        self.static = static
        self.mean_arrivals = mean_arrivals(st)
        # per-tenant constants of _observe (max_gpus, budget, job_tokens, mean arrivals, list
        # price), then one row of scalars (max_cycles, top bid level, starvation_rounds,
        # ambient, critical - ambient, rack power cap)
        consts = np.zeros((st.T + 1, 6))
        consts[: st.T, :5] = np.stack([st.max_gpus, st.budget, st.job_tokens, self.mean_arrivals, st.list_price], axis=-1)
        consts[st.T] = (
            cfg.max_cycles,
            bid_levels[-1],
            cfg.fairness.starvation_rounds,
            st.ambient_c,
            st.critical_temp_c - st.ambient_c,
            st.rack_power_cap_w,
        )
        self.consts = consts
        self._no_last: dict[int, LastRound] = {}  # the zero last round of B clusters, per B (read only)
        self.scene = ObsScene(static, consts, st.is_train, st.pool, st.node_pool, st.pool_capacity.astype(np.float64))
        #: whether each row goes on with COUPLING_FIELDS (a coupling switch is on)
        self.coupled = coupled(cfg)
        #: features per row: N_OBS, plus N_COUPLING when coupled
        self.n_features = N_OBS + (N_COUPLING if self.coupled else 0)
        self.pool_racks = pool_racks(st)

    def matrix(self, *, live, round_, state: RoundState, has_job, backlog_n, fair, last, has_last, arrivals_last, streak) -> np.ndarray:
        """(B, T, N_OBS) float32 for B clusters: ``live`` (B, T) bool, ``round_`` (B,) rounds
        played, ``state`` the round ahead's RoundState (fields (B, ...)), ``has_job`` (B, T)
        trainers with a job in progress, ``backlog_n`` (B, T) jobs queued behind it, ``fair``
        (B, T) fair shares, ``last`` the last round's Outcome (leading (B,); read only where
        ``has_last`` (B,)), ``arrivals_last`` (B, T) its serving arrivals and ``streak`` (B, T)
        the starvation streaks. One compiled pass (:func:`_observe`), the formulas in the
        module doc. The arrays are read as they are, C-contiguous with the dtypes the
        ``EnvState`` and the kernel's ``Outcome`` hold (bool, int64 for GPU counts, rounds and
        streaks, float64 for the rest): a cast or a copy here cost each call more than the pass."""
        B, T = live.shape
        out = np.empty((B, T, self.n_features), np.float32)
        s = state
        ahead = Ahead(live, round_, s.budget_left, s.remaining_tokens, s.queue, s.prev_alloc, s.temp_c, has_job, backlog_n, fair, streak)
        if last is None:
            lr = self._no_last.get(B)
            if lr is None:
                z, zi, zb = np.zeros((B, T)), np.zeros((B, T), np.int64), np.zeros((B, T), bool)
                lr = self._no_last[B] = LastRound(
                    np.zeros(B, bool), z, z, z, z, z, z, z, z, zi, zi, zb, zb, zb, zb, np.zeros((B, self.st.n_racks))
                )
        else:
            lr = LastRound(
                has_last,
                arrivals_last,
                last.price,
                last.value,
                last.utility,
                last.slo_attainment,
                last.throttle,
                last.mem_total,
                last.mem_capacity,
                last.requested,
                last.alloc,
                last.oom,
                last.vetoed,
                last.unsafe_numerics,
                last.restarted,
                last.rack_power_w,
            )
        _observe(self.scene, ahead, lr, out[..., :N_OBS] if self.coupled else out)
        if self.coupled:
            self.coupling_columns(last, has_last, out[..., N_OBS:])
        return out

    def coupling_columns(self, last, has_last, out: np.ndarray) -> None:
        """Write the ``COUPLING_FIELDS`` of B clusters into ``out`` (B, T, N_COUPLING) from the
        last round's Outcome ``last`` (None: no round yet), read where ``has_last`` (B,):
        ``1 - 1/slowdown``, ``link_load / (link_load + 1)``, the rack headroom, ``(restart_s +
        restart_pending_s + lost_s) / round_seconds`` (the round's restart, the restart still
        ahead and the training a preemption lost) and ``ttft_p99/slo / (ttft_p99/slo + 1)``, each clipped to [0, 1]; a
        cluster with no round yet reads 0, but a headroom of 1."""
        out[...] = 0.0
        out[..., COUPLING_INDEX["power_headroom"]] = 1.0
        if last is None or not np.any(has_last):
            return
        c = tenant_coupling(self.st, last, self.pool_racks)
        cols = {
            "slowdown": 1.0 - 1.0 / np.maximum(c.slowdown, 1.0),
            "link_load": squash(c.link_load, 1.0),
            "power_headroom": c.power_headroom,
            "restart_lost": (c.restart_s + c.restart_pending_s + np.asarray(last.lost_s)) / self.st.round_seconds,
            "ttft_tail": squash(c.ttft_p99_over_slo, 1.0),
        }
        h = np.asarray(has_last, bool)
        for j, (name, _) in enumerate(COUPLING_FIELDS):
            out[h, :, j] = np.clip(cols[name][h], 0.0, 1.0)


# observation columns, as compile-time constants of _observe
_ALIVE, _ROUND, _BUDGET, _JOB, _WAIT, _QUEUE, _ARR, _HELD, _GRANT = (
    _O[k] for k in ("alive", "round", "budget_left", "job_left", "jobs_waiting", "queue", "arrivals", "held", "granted")
)
_PRICE, _VALUE, _UTIL, _SLO, _OOM, _VETO, _UNSAFE, _THR, _RESTART = (
    _O[k] for k in ("price", "value", "utility", "slo", "oom", "vetoed", "unsafe", "throttle", "restarted")
)
_MEM, _STARVE, _FAIR, _PFREE, _PDEM, _PPRICE, _TEMP, _RACK, _ASHARE = (
    _O[k]
    for k in ("memory", "starvation", "fair_share", "pool_free", "pool_demand", "pool_price", "temperature", "rack_power", "alive_share")
)
#: Per-tenant constants of _observe, columns of ``Observer.consts``.
_C_MAXG, _C_BUDGET, _C_JOBT, _C_MEAN, _C_LIST = range(5)


@nb.njit(cache=True, nogil=True)
def _sq(x, scale):
    x = max(x, 0.0)
    return x / (x + scale)


@nb.njit(cache=True, nogil=True, inline="always")
def _pools(b, pool, consts, alloc, requested, price, rack_power, alloc_q, req_q, paid_q):
    """Cluster ``b``'s last round by pool (GPUs granted, requested, and granted at their price
    over list price, into ``alloc_q``, ``req_q``, ``paid_q`` (Q,)); returns its hottest rack's
    power over the cap."""
    for q in range(alloc_q.shape[0]):
        alloc_q[q] = 0.0
        req_q[q] = 0.0
        paid_q[q] = 0.0
    for t in range(pool.shape[0]):
        alloc_q[pool[t]] += float(alloc[b, t])
        req_q[pool[t]] += float(requested[b, t])
        paid_q[pool[t]] += alloc[b, t] * price[b, t] / consts[t, _C_LIST]
    rack_cap = consts[pool.shape[0], 5]
    rack_max = -np.inf
    for r in range(rack_power.shape[1]):
        v = rack_power[b, r] / rack_cap
        rack_max = max(rack_max, v)
    return rack_max


@nb.njit(cache=True, nogil=True)
def _observe(scene, ahead, last, out):
    """The observation matrices of B clusters (``Observer.matrix``) from the scenario's
    :class:`ObsScene`, the round :class:`Ahead` and the :class:`LastRound`, each feature
    computed with the same operations in the same order as the numpy formulas of the module doc."""
    static, consts, is_train, pool, node_pool, pool_cap = scene
    live, round_, budget, remaining, queue, prev_alloc, temp, has_job, backlog_n, fair, streak = ahead
    (
        has_last,
        arrivals,
        price,
        value,
        utility,
        slo,
        throttle,
        mem_total,
        mem_capacity,
        requested,
        alloc,
        oom,
        vetoed,
        unsafe,
        restarted,
        rack,
    ) = last
    B, T = live.shape
    F = static.shape[1]
    Q = pool_cap.shape[0]
    K = node_pool.shape[0]
    max_cycles, top, starvation_rounds, ambient, span = consts[T, 0], consts[T, 1], consts[T, 2], consts[T, 3], consts[T, 4]
    m = np.empty(F)
    alloc_q = np.empty(Q)
    req_q = np.empty(Q)
    paid_q = np.empty(Q)
    hot = np.empty(Q)
    rack_max = -np.inf
    for b in range(B):
        n_live = 0
        for t in range(T):
            if live[b, t]:
                n_live += 1
        h = has_last[b]
        if h:
            rack_max = _pools(b, pool, consts, alloc, requested, price, rack, alloc_q, req_q, paid_q)
        for q in range(Q):
            hot[q] = -np.inf
        for k in range(K):
            hot[node_pool[k]] = max(hot[node_pool[k]], temp[b, k])
        for t in range(T):
            for f in range(F):
                m[f] = static[t, f]
            train = is_train[t]
            maxg = consts[t, _C_MAXG]
            mean = consts[t, _C_MEAN]
            m[_ALIVE] = 1.0 if live[b, t] else 0.0
            m[_ROUND] = round_[b] / max_cycles
            m[_BUDGET] = budget[b, t] / consts[t, _C_BUDGET]
            jt = consts[t, _C_JOBT] if consts[t, _C_JOBT] > 0 else 1.0
            m[_JOB] = remaining[b, t] / jt if (train and has_job[b, t]) else 0.0
            m[_WAIT] = _sq(float(backlog_n[b, t]), 1.0)
            m[_QUEUE] = 0.0 if train else _sq(queue[b, t], mean)
            m[_HELD] = prev_alloc[b, t] / maxg
            m[_FAIR] = fair[b, t] / maxg
            m[_ASHARE] = n_live / T
            if h:
                m[_ARR] = 0.0 if train else _sq(arrivals[b, t], mean)
                m[_GRANT] = alloc[b, t] / max(requested[b, t], 1) if requested[b, t] > 0 else 1.0
                m[_PRICE] = price[b, t] / (consts[t, _C_LIST] * top) if alloc[b, t] > 0 else 0.0
                m[_VALUE] = _sq(value[b, t], 1.0)
                m[_UTIL] = 0.5 + 0.5 * np.tanh(utility[b, t])
                m[_SLO] = 0.0 if train else slo[b, t]
                m[_OOM] = 1.0 if oom[b, t] else 0.0
                m[_VETO] = 1.0 if vetoed[b, t] else 0.0
                m[_UNSAFE] = 1.0 if unsafe[b, t] else 0.0
                m[_THR] = 1.0 - (throttle[b, t] if throttle[b, t] > 0 else 1.0) if alloc[b, t] > 0 else 0.0
                m[_RESTART] = 1.0 if restarted[b, t] else 0.0
                m[_MEM] = mem_total[b, t] / mem_capacity[b, t] if alloc[b, t] > 0 else 0.0
                m[_STARVE] = streak[b, t] / starvation_rounds
                q = pool[t]
                cap = pool_cap[q]
                m[_PFREE] = (cap - alloc_q[q]) / cap
                m[_PDEM] = _sq(req_q[q] / cap, 1.0)
                m[_PPRICE] = paid_q[q] / max(alloc_q[q], 1.0) / top
                m[_RACK] = rack_max
            else:
                m[_GRANT] = 1.0
                m[_UTIL] = 0.5
                m[_PFREE] = 1.0
            m[_TEMP] = (hot[pool[t]] - ambient) / span
            for f in range(F):
                out[b, t, f] = np.float32(min(max(m[f], 0.0), 1.0))


__all__ = ["Ahead", "LastRound", "ObsScene", "Observer", "TenantCoupling", "pool_racks", "tenant_coupling"]

"""The observation matrix and the ``state()`` vector of ``fleet_v0``, and their inverse.

Forward: :class:`Observer` turns the state of B clusters into the (B, T, ``N_OBS``) float32
matrices of observation rows (``OBS_FIELDS``, all in [0, 1]); :func:`state_vector` appends each node's
temperature and each rack's power. The normalizations, one per feature:

* ratios to a scale -- ``held = GPUs / max_gpus``, ``budget_left = budget / episode budget``,
  ``job_left = tokens / job_tokens``, ``temperature = (T - ambient) / (critical - ambient)``;
* :func:`squash` ``x / (x + m)`` for unbounded counts -- ``jobs_waiting`` (m = 1), ``queue``
  and ``arrivals`` (m = the tenant's mean arrivals per round, at least 1), ``value``;
* everything is clipped to [0, 1] and stored as float32.

Inverse: :func:`observed_round` rebuilds, from a ``state()`` vector alone, what it encodes
of the round ahead: the live tenants, the kernel :class:`~fleet_marl.kernel.RoundState`
(GPUs held, node temperatures, serving queues, budgets, tokens left in each trainer's job)
and last round's serving arrivals. It is exact up to float32 rounding and clipping (a node
above the critical temperature reads as critical; counts are rounded where they are counts).
``FleetParallelEnv.observed_round()`` calls it; so does the remote env, which has only the
server's state vector. The planner (``fleet_marl.policies.planner``) plans from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numba as nb
import numpy as np

from fleet_marl import catalog
from fleet_marl.environment.spaces import CLAIM_FIELDS, N_CLAIM, N_OBS, OBS_INDEX
from fleet_marl.kernel import RoundState

_O = OBS_INDEX


def squash(x, scale):
    """``x / (x + scale)`` for ``x >= 0`` (negative x counts as 0): [0, inf) onto [0, 1)."""
    x = np.maximum(x, 0.0)
    return x / (x + scale)


def unsquash(y, scale=1.0):
    """The inverse of :func:`squash`: ``scale * y / (1 - y)``, with ``y`` capped below 1."""
    y = np.minimum(y, 1.0 - 1e-6)
    return scale * (y / (1.0 - y))


def mean_arrivals(st) -> np.ndarray:
    """(T,) the scale of ``queue`` and ``arrivals``: mean arrivals per round, at least 1."""
    return np.maximum(st.arrival_rate * st.round_seconds, 1.0)


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
        out = np.empty((B, T, N_OBS), np.float32)
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
        _observe(self.scene, ahead, lr, out)
        return out


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


_CI = {name: k for k, (name, _) in enumerate(CLAIM_FIELDS)}


def claim_features(
    st, top_bid: float, position: np.ndarray, gpus: np.ndarray, bid: np.ndarray, claimed: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """(..., T, N_CLAIM) float32: each tenant's ``CLAIM_FIELDS`` (the sequential protocol) from the
    round's claims so far, for any leading batch axes (the sequential protocol's array core,
    ``environment.turns.Turns``, passes B clusters, (B, T); B = 1 under the AEC env). ``position`` (..., T) int64 each tenant's place in
    this round's order (-1: not in it), ``gpus`` (..., T) GPUs requested and ``bid`` (..., T) bid
    multipliers of the claims made, ``claimed`` (..., T) bool who has claimed; ``top_bid`` the
    highest bid level. A tenant's features count only the claims of tenants before it in the
    order, on its pool. ``rows`` (...,) int64: only these tenants' rows, (..., N_CLAIM) (the
    tenant whose turn it is in each cluster). Every sum is over the last axis of a (..., I, T)
    array, element by element the same operations, so a row has the same bits whatever the
    batch and whether it was asked for alone."""
    pos = np.asarray(position, np.int64)
    inside = pos >= 0
    lead = pos.shape[:-1]
    pool_n = (st.pool[:, None] == st.pool[None, :]).sum(1).astype(np.float64)  # (T,) tenants of each tenant's pool
    if rows is None:
        ri = np.broadcast_to(np.arange(st.T), lead + (st.T,))  # (..., I) the rows asked for: all
    else:
        ri = np.asarray(rows, np.int64)[..., None]  # (..., 1)
    pos_i = np.take_along_axis(pos, ri, -1)  # (..., I)
    inside_i = pos_i >= 0
    pool_i = st.pool[ri]
    same = pool_i[..., :, None] == st.pool  # (..., I, T): j on i's pool
    # (..., i, j): j claimed before i, on i's pool
    before = same & (np.asarray(claimed, bool) & inside)[..., None, :] & (pos[..., None, :] < pos_i[..., :, None])
    g_j = np.asarray(gpus, np.float64)
    g = np.where(before, g_j[..., None, :], 0.0).sum(-1)
    paid = np.where(before, (g_j * np.asarray(bid, np.float64))[..., None, :], 0.0).sum(-1)
    cap = st.pool_capacity[pool_i].astype(np.float64)
    n_i = pool_n[ri]
    n = inside.sum(-1, keepdims=True)  # (..., 1) tenants in the order
    out = np.zeros(ri.shape + (N_CLAIM,))
    out[..., _CI["claimed"]] = squash(g / cap, 1.0)
    out[..., _CI["unclaimed"]] = np.maximum(cap - g, 0.0) / cap
    out[..., _CI["claimed_bid"]] = np.where(g > 0, paid / np.maximum(g, 1.0) / top_bid, 0.0)
    out[..., _CI["claimants"]] = (before & (np.asarray(gpus) > 0)[..., None, :]).sum(-1) / n_i
    after = same & inside[..., None, :] & (pos[..., None, :] > pos_i[..., :, None])
    out[..., _CI["after_in_pool"]] = np.where(inside_i, after.sum(-1) / n_i, 0.0)
    out[..., _CI["position"]] = np.where(inside_i, pos_i / np.maximum(n - 1, 1), 0.0)
    out = np.clip(out, 0.0, 1.0).astype(np.float32)
    return out if rows is None else out[..., 0, :]


def state_vector(st, obs_matrix: np.ndarray, temp_c: np.ndarray, rack_power_w: np.ndarray | None) -> np.ndarray:
    """The ``state()`` vector: the observation rows, then each node's temperature
    ``(T - ambient) / (critical - ambient)`` and each rack's power / cap (None: before the
    first round, 0), all clipped to [0, 1], float32. With leading (B,) axes on every input
    (``obs_matrix`` (B, T, N_OBS), ``temp_c`` (B, K), ``rack_power_w`` (B, R)) it returns (B, S)."""
    lead = obs_matrix.shape[:-2]
    temp = (temp_c - st.ambient_c) / (st.critical_temp_c - st.ambient_c)
    rack = rack_power_w / st.rack_power_cap_w if rack_power_w is not None else np.zeros(lead + (st.n_racks,))
    flat = obs_matrix.reshape(lead + (-1,))
    return np.concatenate([flat, np.clip(temp, 0, 1), np.clip(rack, 0, 1)], axis=-1).astype(np.float32)


@dataclass(frozen=True)
class ObservedRound:
    """What a ``state()`` vector says of the round ahead (:func:`observed_round`).

    ``live`` (T,) bool; ``state`` the kernel RoundState; ``arrivals`` (T,) last round's
    serving arrivals (0 for trainers and before the first round); ``jobs_waiting`` (T,) each
    trainer's jobs queued behind the current one; ``rows`` (T, N_OBS) the observation rows.
    """

    live: np.ndarray
    state: RoundState
    arrivals: np.ndarray
    jobs_waiting: np.ndarray
    rows: np.ndarray


def observed_round(st, s: np.ndarray, include_queued_jobs: bool = False) -> ObservedRound:
    """The inverse of :func:`state_vector` for the scenario ``st`` (a KernelStatic).

    ``state.prev_alloc`` is ``held x max_gpus`` rounded; ``temp_c`` the node temperatures;
    ``queue`` the serving queues (0 for trainers); ``budget_left`` the budgets;
    ``remaining_tokens`` the tokens left in each trainer's current job (0 for servers), plus,
    with ``include_queued_jobs``, ``job_tokens`` for each job queued behind it (the trainer's
    whole known work, as the planner counts it)."""
    T = st.T
    rows = s[: T * N_OBS].reshape(T, N_OBS).astype(np.float64)
    temp = s[T * N_OBS : T * N_OBS + st.K].astype(np.float64)
    live = rows[:, _O["alive"]] > 0.5
    mean = mean_arrivals(st)
    waiting = np.rint(unsquash(rows[:, _O["jobs_waiting"]]))
    queued = waiting if include_queued_jobs else 0.0
    state = RoundState(
        prev_alloc=np.rint(rows[:, _O["held"]] * st.max_gpus).astype(np.int64),
        temp_c=st.ambient_c + temp * (st.critical_temp_c - st.ambient_c),
        queue=np.where(st.is_train, 0.0, mean * unsquash(rows[:, _O["queue"]])),
        remaining_tokens=np.where(st.is_train, (rows[:, _O["job_left"]] + queued) * st.job_tokens, 0.0),
        budget_left=rows[:, _O["budget_left"]] * st.budget,
    )
    arrivals = np.where(st.is_train, 0.0, mean * unsquash(rows[:, _O["arrivals"]]))
    return ObservedRound(live=live, state=state, arrivals=arrivals, jobs_waiting=np.where(st.is_train, waiting, 0.0), rows=rows)


__all__ = [
    "Ahead",
    "LastRound",
    "ObsScene",
    "ObservedRound",
    "Observer",
    "claim_features",
    "mean_arrivals",
    "observed_round",
    "squash",
    "state_vector",
    "unsquash",
]

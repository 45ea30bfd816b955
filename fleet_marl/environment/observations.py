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

import numba as nb
import numpy as np

from fleet_marl import catalog
from fleet_marl.environment.spaces import N_OBS, OBS_INDEX
from fleet_marl.kernel import RoundState

_O = OBS_INDEX


#: The observation features read from last round's outcome: 0 before the first round, except
#: ``granted`` (1), ``utility`` (0.5) and ``pool_free`` (1).
LAST_ROUND_FIELDS = ("arrivals", "granted", "price", "value", "utility", "slo", "oom", "vetoed", "unsafe", "throttle", "restarted",
                     "memory", "starvation", "pool_free", "pool_demand", "pool_price", "rack_power")


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


class Observer:
    """The observation rows of one scenario: the static features computed once, the rest
    each round from the episode's state (:meth:`matrix`)."""

    def __init__(self, st, cfg, bid_levels: np.ndarray) -> None:
        self.st, self.cfg, self.bid_levels = st, cfg, bid_levels
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
        self.node_of_pool = st.node_pool[None, :] == np.arange(len(st.pools))[:, None]  # (Q, K)
        #: (N_OBS,) bool: the columns set from last round's outcome (0 before the first round, but for the defaults below)
        self.first_round = np.zeros(N_OBS, bool)
        self.first_round[[_O[k] for k in LAST_ROUND_FIELDS]] = True

    def matrix(self, *, live, round_, state: RoundState, has_job, backlog_n, fair, last, has_last, arrivals_last, streak) -> np.ndarray:
        """(B, T, N_OBS) float32 for B clusters: ``live`` (B, T) bool, ``round_`` (B,) rounds
        played, ``state`` the round ahead's RoundState (fields (B, ...)), ``has_job`` (B, T)
        trainers with a job in progress, ``backlog_n`` (B, T) jobs queued behind it, ``fair``
        (B, T) fair shares, ``last`` the last round's Outcome (leading (B,); read only where
        ``has_last`` (B,)), ``arrivals_last`` (B, T) its serving arrivals and ``streak`` (B, T)
        the starvation streaks."""
        st, cfg = self.st, self.cfg
        B = live.shape[0]
        m = np.repeat(self.static[None], B, axis=0)
        s = state
        m[..., _O["alive"]] = live
        m[..., _O["round"]] = (np.asarray(round_) / cfg.max_cycles)[:, None]
        m[..., _O["budget_left"]] = s.budget_left / st.budget
        jt = np.where(st.job_tokens > 0, st.job_tokens, 1.0)
        m[..., _O["job_left"]] = np.where(st.is_train & has_job, s.remaining_tokens / jt, 0.0)
        m[..., _O["jobs_waiting"]] = squash(backlog_n.astype(np.float64), 1.0)
        m[..., _O["queue"]] = np.where(st.is_train, 0.0, squash(s.queue, self.mean_arrivals))
        m[..., _O["held"]] = s.prev_alloc / st.max_gpus
        m[..., _O["fair_share"]] = fair / st.max_gpus
        m[..., _O["alive_share"]] = live.mean(-1)[:, None]
        o = last
        Q = len(st.pools)
        if o is not None and np.any(has_last):
            h = np.asarray(has_last, bool)
            w = np.broadcast_to(self.first_round, (B, N_OBS))
            lm = np.empty_like(m)
            lm[..., _O["arrivals"]] = np.where(st.is_train, 0.0, squash(arrivals_last, self.mean_arrivals))
            lm[..., _O["granted"]] = np.where(o.requested > 0, o.alloc / np.maximum(o.requested, 1), 1.0)
            top = self.bid_levels[-1]
            lm[..., _O["price"]] = np.where(o.alloc > 0, o.price / (st.list_price * top), 0.0)
            lm[..., _O["value"]] = squash(o.value, 1.0)
            lm[..., _O["utility"]] = 0.5 + 0.5 * np.tanh(o.utility)
            lm[..., _O["slo"]] = np.where(st.is_train, 0.0, o.slo_attainment)
            lm[..., _O["oom"]] = o.oom
            lm[..., _O["vetoed"]] = o.vetoed
            lm[..., _O["unsafe"]] = o.unsafe_numerics
            lm[..., _O["throttle"]] = np.where(o.alloc > 0, 1.0 - np.where(o.throttle > 0, o.throttle, 1.0), 0.0)
            lm[..., _O["restarted"]] = o.restarted
            lm[..., _O["memory"]] = np.where(o.alloc > 0, o.mem_total / o.mem_capacity, 0.0)
            lm[..., _O["starvation"]] = streak / cfg.fairness.starvation_rounds
            alloc_q = pool_sums(np.asarray(o.alloc, np.float64), st.pool, Q)
            req_q = pool_sums(np.asarray(o.requested, np.float64), st.pool, Q)
            paid_q = pool_sums(o.alloc * o.price / st.list_price, st.pool, Q)
            cap = st.pool_capacity.astype(np.float64)
            lm[..., _O["pool_free"]] = ((cap - alloc_q) / cap)[:, st.pool]
            lm[..., _O["pool_demand"]] = squash(req_q / cap, 1.0)[:, st.pool]
            lm[..., _O["pool_price"]] = (paid_q / np.maximum(alloc_q, 1) / top)[:, st.pool]
            lm[..., _O["rack_power"]] = (o.rack_power_w / st.rack_power_cap_w).max(-1)[:, None]
            sel = h[:, None] & w  # (B, N_OBS): the columns last round sets, in the clusters that had one (0 in the others)
            m = np.where(sel[:, None, :], lm, m)
            first = ~h
        else:
            first = np.ones(B, bool)
        if first.any():
            m[first, :, _O["granted"]] = 1.0
            m[first, :, _O["utility"]] = 0.5
            m[first, :, _O["pool_free"]] = 1.0
        hot = np.where(self.node_of_pool[None], s.temp_c[:, None, :], -np.inf).max(-1)  # (B, Q)
        m[..., _O["temperature"]] = ((hot - st.ambient_c) / (st.critical_temp_c - st.ambient_c))[:, st.pool]
        np.clip(m, 0.0, 1.0, out=m)
        return m.astype(np.float32)


@nb.njit(cache=True, nogil=True)
def pool_sums(values, pool, Q):
    """(B, Q) sums of ``values`` (B, T) over each pool's tenants, added in tenant order (as
    ``np.bincount`` does)."""
    B, T = values.shape
    out = np.zeros((B, Q))
    for b in range(B):
        for t in range(T):
            out[b, pool[t]] += values[b, t]
    return out


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
    temp = s[T * N_OBS: T * N_OBS + st.K].astype(np.float64)
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


__all__ = ["LAST_ROUND_FIELDS", "ObservedRound", "Observer", "mean_arrivals", "observed_round", "pool_sums", "squash", "state_vector",
           "unsquash"]

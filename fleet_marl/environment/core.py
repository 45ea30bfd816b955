"""The env's array core: the round as pure functions on arrays (:func:`reset`, :func:`step`,
:func:`observe`) over the state of B clusters (:class:`EnvState`, with :class:`CoreStatic` and
:class:`StepResult` defined in :mod:`fleet_marl.environment.state` and re-exported here).

``FleetParallelEnv`` (B = 1, agent-ID dicts at the edge) and ``FleetVectorEnv`` (B clusters,
arrays) are thin adapters over this module; the round's dynamics live here and in the layers
below (the kernel, ``credit``, ``fairness``, ``workloads``), once.

Per round, for every cluster at once: the arrivals of the round, the tie-break draws, ONE
kernel call with every counterfactual row of every cluster (:class:`~fleet_marl.credit.CreditEngine`),
fair shares and the fairness detector's verdicts (``fairness.detect``), reward shaping, one
compiled step of both queues (:class:`~fleet_marl.environment.state.Queues` in the
:class:`EnvState`: each server's FIFO of requests and each trainer's jobs, counted by arrival
round; the kernel's ``queue`` is the servers' total), the fairness record of the round, its
waits and finished jobs (``fairness.record``), terminations and observations.
Randomness comes from one ``numpy.random.Generator`` per cluster for the env and one for credit
(sampled Shapley permutations), so a cluster's trajectory depends on nothing but its own seed.
:func:`reset` draws an episode's arrival schedules and every round's tie-breaks in one compiled
call (``workloads.draw_cluster``), in the order rounds would draw them; the tie-breaks an
episode did not use are handed back (the generator is rewound) before the next episode draws.
"""

from __future__ import annotations

from time import perf_counter

import numba as nb
import numpy as np

from fleet_marl import fairness
from fleet_marl.environment import observations
from fleet_marl.environment.state import CoreStatic, EnvState, Queues, StepResult
from fleet_marl.kernel import Draws
from fleet_marl.workloads import draw_cluster


def reset(cs: CoreStatic, s: EnvState, clusters, rngs) -> None:
    """Start a new episode in each of ``clusters`` (indices into B), drawing its arrival
    schedule and its tie-breaks from its generator in ``rngs`` (a sequence indexed like the clusters)."""
    st = cs.kernel
    n = cs.max_cycles
    clusters = np.asarray(clusters, np.int64)
    sc = cs.schedules
    for b in clusters:
        rng = rngs[b]
        if s.drawn_from[b] is rng:  # hand back the tie-breaks the last episode did not use: the
            unused = (n - int(s.round[b])) * cs.T  # stream goes on as if each round drew its own
            if unused:
                rng.bit_generator.advance(-unused)
        draw_cluster(rng, sc.code, sc.lam, sc.lam_on, sc.lam_off, sc.p, sc.q, sc.shared, sc.shared_pq, s.schedule[b], s.tiebreak[b])
        s.drawn_from[b] = rng
        future = np.cumsum(s.schedule[b, ::-1], axis=0)[::-1]  # future[t] = arrivals in rounds t..n-1
        s.future[b, :n] = future
        s.future[b, n] = 0.0
    s.round[clusters] = 0
    s.live[clusters] = True
    s.prev_alloc[clusters] = 0
    if s.prev_gon is not None:
        s.prev_gon[clusters] = 0
    for carried in (s.restart_left, s.since_ckpt, s.unsaved):
        if carried is not None:
            carried[clusters] = 0.0
    s.temp_c[clusters] = st.ambient_c
    s.queue[clusters] = 0.0
    s.remaining[clusters] = st.job_tokens
    s.budget[clusters] = st.budget
    s.has_job[clusters] = st.is_train
    s.job_born[clusters] = -1
    s.pending[clusters] = 0
    s.backlog_n[clusters] = 0
    s.waiting[clusters] = 0.0
    s.waiting_head[clusters] = 0
    s.has_last[clusters] = False
    s.ret[clusters] = 0.0
    s.utility_sum[clusters] = 0.0
    s.rounds[clusters] = 0
    s.fairness.reset(clusters)
    s.last_arrivals[clusters] = 0.0
    s.fair[clusters] = _fair(cs, s.live[clusters], has_work(cs, s, None, False)[clusters])


def _fair(cs: CoreStatic, live: np.ndarray, work: np.ndarray) -> np.ndarray:
    st = cs.kernel
    out = np.empty(live.shape)
    fairness.fair_shares(st.pool, st.pool_capacity.astype(np.float64), st.max_gpus.astype(np.float64), live & work, out)
    return out


def has_work(cs: CoreStatic, s: EnvState, arrivals: np.ndarray | None = None, upcoming: bool = False) -> np.ndarray:
    """(B, T): trainers with a job in progress or queued; servers with requests queued (plus
    ``arrivals``). ``upcoming`` also counts arrivals still to come this episode."""
    out = np.empty(s.live.shape, bool)
    _has_work(
        cs.kernel.is_train,
        s.has_job,
        s.backlog_n,
        s.queue,
        s.queue if arrivals is None else arrivals,
        arrivals is not None,
        s.future,
        s.round,
        cs.max_cycles,
        upcoming,
        out,
    )
    return out


@nb.njit(cache=True, nogil=True)
def _has_work(is_train, has_job, backlog_n, queue, arrivals, with_arrivals, future, round_, max_cycles, upcoming, out):
    B, T = out.shape
    for b in range(B):
        r = min(round_[b], max_cycles)
        for i in range(T):
            if is_train[i]:
                w = has_job[b, i] or backlog_n[b, i] > 0
            else:
                w = (queue[b, i] + (arrivals[b, i] if with_arrivals else 0.0)) > 0
            out[b, i] = w or (upcoming and future[b, r, i] > 0)


def round_draws(cs: CoreStatic, s: EnvState, t: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, Draws]:
    """Round ``t[b]`` of each cluster (``t`` (B,) rounds below ``max_cycles``), from the episode
    drawn at reset: ``(scheduled, requests, draws)``, the (B, T) arrivals scheduled (requests or
    jobs), the serving requests among them, and the kernel's draws (the requests of the ``live``
    tenants, the tie-breaks, a replayed trace's request lengths)."""
    rows = np.arange(s.B)
    r = np.minimum(t, cs.max_cycles - 1)
    scheduled = s.schedule[rows, r]  # (B, T) this round's arrivals: requests or jobs
    requests = np.where(cs.kernel.is_train, 0.0, scheduled)
    arrivals = np.where(live, requests, 0.0)
    tiebreak = s.tiebreak[rows, t]  # rounds are < max_cycles while a tenant is live
    if cs.schedules.replays_lengths:  # serving tenants replaying a trace are priced at its requests' lengths
        return scheduled, requests, Draws(arrivals, tiebreak, cs.schedules.prompt_tokens[r], cs.schedules.output_tokens[r])
    return scheduled, requests, Draws(arrivals=arrivals, tiebreak=tiebreak)


def step(cs: CoreStatic, s: EnvState, idx: np.ndarray, credit_rngs) -> StepResult:
    """Play one round in every cluster: ``idx`` (B, T, 8) checked action indices (ignored for
    tenants not live); ``credit_rngs`` each cluster's credit generator. Updates ``s`` in
    place and returns the round's :class:`StepResult`; the observations of the round ahead
    are :func:`observe` (``live`` is updated last, so they show who acted)."""
    st, cfg = cs.kernel, cs.config
    B = s.B
    t = s.round.copy()
    live = s.live.copy()
    acts = cs.decode(idx)
    scheduled, requests, draws = round_draws(cs, s, t, live)
    arrivals = draws.arrivals
    work = has_work(cs, s, arrivals)
    state = s.round_state()
    t0 = perf_counter()
    credit = cs.credit.compute(acts, state, draws, live, credit_rngs)
    credit_seconds = perf_counter() - t0
    o = credit.outcome
    fair = _fair(cs, live, work)
    rf = fairness.detect(
        cfg.fairness, st.pool, st.pool_capacity, cs.lowest, s.fairness, live, work, o.requested, o.alloc, acts.gpus, acts.precision, fair
    )
    degenerate = rf.degenerate
    reward = cs.credit.shape(credit, cs.scheme, live, rf.starved, degenerate)
    # carry the state over, then the queues; the fairness state records the round once
    s.prev_alloc = np.array(o.alloc)
    if s.prev_gon is not None:
        s.prev_gon = np.array(o.gpus_on_node)
    s.temp_c = np.array(o.temp_next)
    s.queue = np.array(o.queue_next)
    s.remaining = np.array(o.remaining_next)
    s.budget = np.array(o.budget_next)
    jobs = np.where(st.is_train, scheduled, 0.0).astype(np.int64)
    queues = fairness.QueueRound(*advance_queues(t, live, st.is_train, arrivals, o.served, jobs, st.job_tokens, s.queues()))
    if s.restart_left is not None:  # a restart still ahead; a new job has nothing since a checkpoint to lose
        s.restart_left = np.array(o.restart_pending_s)
        fresh = s.remaining != np.asarray(o.remaining_next)  # the queue step began a new job
        s.since_ckpt = np.where(fresh, 0.0, o.since_ckpt_s)
        s.unsaved = np.where(fresh, 0.0, o.unsaved_tokens)
    events = (o.oom, o.vetoed, o.power_throttled | o.thermal_throttled, degenerate)
    fairness.record(s.fairness, live, credit.welfare, events, queues, cs.rounds_alone)
    s.round = t + 1
    # the observation shows last round's serving arrivals of every tenant, live or not
    s.last, s.last_arrivals, s.fair, s.has_last = o, requests, fair.copy(), np.ones(B, bool)  # a copy: a reset writes s.fair in place
    # the episode sums, then who leaves: broke, or out of work before the horizon (terminated); at
    # max_cycles running out of the schedule is truncation
    terminated, truncated = np.empty((B, cs.T), bool), np.empty((B, cs.T), bool)
    _close(
        live,
        reward,
        o.utility,
        s.ret,
        s.utility_sum,
        s.rounds,
        s.budget,
        cs.min_unit,
        st.is_train,
        s.has_job,
        s.backlog_n,
        s.queue,
        s.future,
        s.round,
        cs.max_cycles,
        terminated,
        truncated,
    )
    return StepResult(
        credit=credit,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        live=live,
        starved=rf.starved,
        lowest_precision=rf.lowest_precision,
        hoarding=rf.hoarding,
        streak=rf.streak.copy(),
        fair=fair,
        credit_seconds=credit_seconds,
    )


@nb.njit(cache=True, nogil=True)
def _close(
    live,
    reward,
    utility,
    ret,
    utility_sum,
    rounds,
    budget,
    min_unit,
    is_train,
    has_job,
    backlog_n,
    queue,
    future,
    round_,
    max_cycles,
    terminated,
    truncated,
):
    """Add the round to the live tenants' episode sums; fill ``terminated`` (live, and broke or
    with no work left before the horizon) and ``truncated`` (live, not terminated, at the
    horizon). ``round_`` (B,) counts the round just played; the rest as in :class:`EnvState`."""
    B, T = live.shape
    for b in range(B):
        r = min(round_[b], max_cycles)
        for i in range(T):
            if live[b, i]:
                ret[b, i] += reward[b, i]
                utility_sum[b, i] += utility[b, i]
                rounds[b, i] += 1
            if is_train[i]:
                work = has_job[b, i] or backlog_n[b, i] > 0
            else:
                work = queue[b, i] > 0
            work = work or future[b, r, i] > 0
            broke = budget[b, i] < min_unit[i]
            term = live[b, i] and (broke or (not work and round_[b] < max_cycles))
            terminated[b, i] = term
            truncated[b, i] = live[b, i] and not term and round_[b] >= max_cycles


def finish(s: EnvState, result: StepResult) -> None:
    """Take the tenants that terminated or were truncated out of the episode."""
    s.live &= ~(result.terminated | result.truncated)


@nb.njit(cache=True, nogil=True)
def advance_queues(t, live, is_train, arrivals, served, jobs, job_tokens, q):
    """One round of both queues of B clusters (``q`` the :class:`Queues` of :class:`EnvState`,
    written in place), for the live tenants. A server's ``arrivals`` join its FIFO, then its
    ``served`` requests leave from the front, each with its wait in whole rounds. A trainer's
    finished job (no tokens left) leaves, this round's ``jobs`` queue behind it, and the oldest
    queued job starts, with ``job_tokens`` to do and its wait (a job of round b could start in
    round b + 1). Returns the completed waits in the order they completed, ``(wait_at (N, 3)
    [cluster, tenant, rounds waited], wait_n (N,) how many)``, and the finished jobs,
    ``(M, 3) [cluster, tenant, rounds taken]``: a :class:`~fleet_marl.fairness.QueueRound`."""
    # unpacked once: each read of an array from the tuple inside the loop costs a reference count
    waiting, waiting_head, has_job, job_born, pending, backlog_n, remaining = q
    B, T = live.shape
    wait_at = np.empty((B * T, 3), np.int64)
    wait_n = np.empty(B * T)
    finished = np.empty((B * T, 3), np.int64)
    nw = 0
    nf = 0
    for b in range(B):
        tb = t[b]
        for i in range(T):
            if not live[b, i]:
                continue
            if not is_train[i]:  # a server: its FIFO of requests, by arrival round
                if not (arrivals[b, i] > 0 or served[b, i] > 0):
                    continue
                if arrivals[b, i] > 0:
                    waiting[b, i, tb] = arrivals[b, i]
                rest = served[b, i]
                h = waiting_head[b, i]
                while rest > 1e-9 and h <= tb:
                    n = waiting[b, i, h]
                    if n == 0.0:  # no request of round h waits
                        h += 1
                        continue
                    take = min(n, rest)
                    if nw == wait_n.shape[0]:
                        wait_at, wait_n = _grow(wait_at, wait_n)
                    wait_at[nw, 0], wait_at[nw, 1], wait_at[nw, 2], wait_n[nw] = b, i, tb - h, take
                    nw += 1
                    rest -= take
                    if take >= n - 1e-9:
                        waiting[b, i, h] = 0.0
                        h += 1
                    else:
                        waiting[b, i, h] = n - take
                waiting_head[b, i] = h
                continue
            done = has_job[b, i] and remaining[b, i] <= 0
            if not (done or jobs[b, i] > 0):
                continue
            if done:
                finished[nf, 0], finished[nf, 1], finished[nf, 2] = b, i, tb - job_born[b, i]
                nf += 1
                has_job[b, i] = False
            pending[b, i, tb] += jobs[b, i]
            backlog_n[b, i] += jobs[b, i]
            if not has_job[b, i] and backlog_n[b, i] > 0:
                born = 0
                while pending[b, i, born] == 0:
                    born += 1
                pending[b, i, born] -= 1
                backlog_n[b, i] -= 1
                job_born[b, i] = born
                has_job[b, i] = True
                remaining[b, i] = job_tokens[i]
                if nw == wait_n.shape[0]:
                    wait_at, wait_n = _grow(wait_at, wait_n)
                wait_at[nw, 0], wait_at[nw, 1], wait_at[nw, 2], wait_n[nw] = b, i, tb + 1 - (born + 1), 1.0
                nw += 1
    return wait_at[:nw], wait_n[:nw], finished[:nf]


@nb.njit(cache=True, nogil=True)
def _grow(wait_at, wait_n):
    """The wait records, copied into arrays twice their size."""
    k = wait_n.shape[0]
    at = np.empty((2 * k, 3), np.int64)
    n = np.empty(2 * k)
    at[:k] = wait_at
    n[:k] = wait_n
    return at, n


def observe(cs: CoreStatic, s: EnvState, live: np.ndarray | None = None) -> np.ndarray:
    """(B, T, N_OBS) float32 observations of the round ahead (``live`` default ``s.live``)."""
    return cs.observer.matrix(
        live=s.live if live is None else live,
        round_=s.round,
        state=s.round_state(),
        has_job=s.has_job,
        backlog_n=s.backlog_n,
        fair=s.fair,
        last=s.last,
        has_last=s.has_last,
        arrivals_last=s.last_arrivals,
        streak=s.fairness.streak,
    )


def state_vectors(cs: CoreStatic, s: EnvState, obs: np.ndarray) -> np.ndarray:
    """(B, S) the ``state()`` vectors of B clusters from their observations ``obs`` (B, T, N_OBS)."""
    rack = None
    if s.last is not None:
        rack = np.where(s.has_last[:, None], s.last.rack_power_w, 0.0)
    return observations.state_vector(cs.kernel, obs, s.temp_c, rack)


def afford(cs: CoreStatic, s: EnvState) -> np.ndarray:
    """(B, T) GPUs each tenant's budget pays for at the lowest winning bid (the GPU mask)."""
    return np.floor(s.budget / cs.min_unit)


__all__ = [
    "CoreStatic",
    "EnvState",
    "Queues",
    "StepResult",
    "advance_queues",
    "afford",
    "finish",
    "has_work",
    "observe",
    "reset",
    "round_draws",
    "state_vectors",
    "step",
]

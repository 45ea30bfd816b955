"""The array core's data: :class:`CoreStatic` (what no step changes), :class:`EnvState` (the
state of B clusters, with its :class:`Queues`) and :class:`StepResult` (what one step of B
clusters produced). The round on them is :mod:`fleet_marl.environment.core`, which re-exports
the four."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from fleet_marl.config import FleetConfig
from fleet_marl.credit import Credit, CreditEngine, computed_schemes
from fleet_marl.environment import observations, scenario
from fleet_marl.environment.spaces import ActionMasks, action_nvec, decode_actions
from fleet_marl.fairness import FairnessState, lowest_precision
from fleet_marl.kernel import Actions, KernelStatic, Outcome, RoundState
from fleet_marl.workloads import Schedules, resolve_trace, schedules


@dataclass(frozen=True)
class CoreStatic:
    """Everything about a scenario that no step changes, shared by all clusters."""

    config: FleetConfig
    kernel: KernelStatic
    bid_levels: np.ndarray  # (L,) price multipliers of bid_level
    nvec: np.ndarray  # (T, 8) action sizes
    min_unit: np.ndarray  # (T,) USD of the cheapest GPU-round each tenant can buy
    masks: ActionMasks
    default_index: np.ndarray  # (T, 8) each tenant's default action
    default_actions: Actions
    rounds_alone: np.ndarray  # (T,) Themis T_independent in rounds
    lowest: np.ndarray  # (T,) lowest sub-16-bit precision code, or -1
    observer: observations.Observer
    schemes: tuple[str, ...]  # the schemes computed each round
    scheme: str  # the one that is the reward
    credit: CreditEngine
    schedules: Schedules  # how each tenant's arrivals are drawn at reset

    @staticmethod
    def from_config(cfg: FleetConfig) -> CoreStatic:
        for t in cfg.tenants:  # a missing trace file is an error now, not at reset()
            if t.workload.pattern == "trace":
                assert t.workload.trace is not None  # WorkloadSpec requires a trace with the trace pattern
                resolve_trace(t.workload.trace)
        st = KernelStatic.from_config(cfg)
        bid_levels = np.array(cfg.arbiter.bid_levels, np.float64)
        masks = ActionMasks(st, len(bid_levels))
        default_index, default_actions = scenario.default_action(st, bid_levels, masks.prec_legal)
        schemes = computed_schemes(cfg.reward.scheme, cfg.reward.compute_all)
        return CoreStatic(
            config=cfg,
            kernel=st,
            bid_levels=bid_levels,
            nvec=action_nvec(st.max_gpus, len(bid_levels)),
            min_unit=scenario.cheapest_gpu_round(st, bid_levels),
            masks=masks,
            default_index=default_index,
            default_actions=default_actions,
            rounds_alone=scenario.job_rounds_alone(st, default_actions),
            lowest=lowest_precision(st.supported, st.is_train),
            observer=observations.Observer(st, cfg, bid_levels),
            schemes=schemes,
            scheme=cfg.reward.scheme,
            credit=CreditEngine(st, cfg.reward, schemes, default_actions),
            schedules=schedules(
                [t.workload for t in cfg.tenants], [t.kind for t in cfg.tenants], cfg.max_cycles, cfg.cluster.round_seconds
            ),
        )

    @property
    def T(self) -> int:
        return self.kernel.T

    @property
    def max_cycles(self) -> int:
        return self.config.max_cycles

    def decode(self, idx: np.ndarray) -> Actions:
        """The kernel :class:`~fleet_marl.kernel.Actions` of (..., T, 8) action indices."""
        return decode_actions(idx, self.bid_levels)


class Queues(NamedTuple):
    """The queues of B clusters, the arrays of :class:`EnvState` (not copies) that the core's
    compiled queue step writes: each server's FIFO of requests and each trainer's jobs, both
    counted by arrival round (``n`` = max_cycles)."""

    waiting: np.ndarray  # (B, T, n) float64 a server's requests of each arrival round still waiting
    waiting_head: np.ndarray  # (B, T) int64 the earliest arrival round that may still wait
    has_job: np.ndarray  # (B, T) bool a trainer has a job in progress
    job_born: np.ndarray  # (B, T) int64 arrival round of the current job (-1: none yet)
    pending: np.ndarray  # (B, T, n) int64 jobs queued behind it, by arrival round
    backlog_n: np.ndarray  # (B, T) int64 jobs queued behind it
    remaining: np.ndarray  # (B, T) float64 tokens left in the current job


@dataclass
class EnvState:
    """The state of B clusters (the shape beside every field; ``n`` = max_cycles)."""

    round: np.ndarray  # (B,) int64 rounds played
    live: np.ndarray  # (B, T) bool tenants still in the episode
    prev_alloc: np.ndarray  # (B, T) int64 GPUs held last round   -- the kernel's RoundState
    temp_c: np.ndarray  # (B, K) float64 node temperatures
    queue: np.ndarray  # (B, T) float64 serving requests waiting (the kernel's count; by arrival round in waiting)
    remaining: np.ndarray  # (B, T) float64 tokens left in each trainer's current job
    budget: np.ndarray  # (B, T) float64 USD left
    has_job: np.ndarray  # (B, T) bool a trainer has a job in progress
    job_born: np.ndarray  # (B, T) int64 arrival round of the current job (-1: none yet)
    pending: np.ndarray  # (B, T, n) int64 jobs queued behind it, by arrival round
    backlog_n: np.ndarray  # (B, T) int64 jobs queued behind it
    waiting: np.ndarray  # (B, T, n) float64 serving requests of each arrival round still waiting (the FIFO)
    waiting_head: np.ndarray  # (B, T) int64 the earliest arrival round that may still wait
    schedule: np.ndarray  # (B, n, T) float64 arrivals per round drawn at reset (requests or jobs)
    tiebreak: np.ndarray  # (B, n, T) float64 each round's tie-break draws, drawn at reset after the schedule
    future: np.ndarray  # (B, n + 1, T) float64 arrivals in rounds t .. n-1
    fair: np.ndarray  # (B, T) float64 this round's fair shares
    has_last: np.ndarray  # (B,) bool a round has been played this episode
    ret: np.ndarray  # (B, T) float64 episode return
    utility_sum: np.ndarray  # (B, T) float64
    rounds: np.ndarray  # (B, T) int64 rounds played by each tenant
    fairness: FairnessState
    last_arrivals: np.ndarray  # (B, T) float64 the last round's serving arrivals
    drawn_from: list[np.random.Generator | None]  # (B,) the generator each cluster's tie-breaks came from
    last: Outcome | None = None  # the last round's outcome, leading (B,) (read where has_last)
    #: (B, T, K) int64 GPUs each tenant held on each node last round, tracked where placement
    #: persists (``CouplingSpec.persistent_placement``), else None
    prev_gon: np.ndarray | None = None
    #: (B, T) float64 each, tracked where placement persists, else None: seconds of a restart still
    #: ahead, and a trainer's seconds and tokens of training since its last checkpoint (docs/model.md section 12.3)
    restart_left: np.ndarray | None = None
    since_ckpt: np.ndarray | None = None
    unsaved: np.ndarray | None = None

    @staticmethod
    def zeros(cs: CoreStatic, B: int) -> EnvState:
        st, T, n = cs.kernel, cs.T, cs.max_cycles
        return EnvState(
            round=np.zeros(B, np.int64),
            live=np.zeros((B, T), bool),
            prev_alloc=np.zeros((B, T), np.int64),
            temp_c=np.zeros((B, st.K)),
            queue=np.zeros((B, T)),
            remaining=np.zeros((B, T)),
            budget=np.zeros((B, T)),
            has_job=np.zeros((B, T), bool),
            job_born=np.full((B, T), -1, np.int64),
            pending=np.zeros((B, T, n), np.int64),
            backlog_n=np.zeros((B, T), np.int64),
            waiting=np.zeros((B, T, n)),
            waiting_head=np.zeros((B, T), np.int64),
            schedule=np.zeros((B, n, T)),
            tiebreak=np.zeros((B, n, T)),
            future=np.zeros((B, n + 1, T)),
            fair=np.zeros((B, T)),
            has_last=np.zeros(B, bool),
            ret=np.zeros((B, T)),
            utility_sum=np.zeros((B, T)),
            rounds=np.zeros((B, T), np.int64),
            fairness=FairnessState.zeros(B, T, n),
            last_arrivals=np.zeros((B, T)),
            drawn_from=[None] * B,
            prev_gon=np.zeros((B, T, st.K), np.int64) if st.persistent_placement else None,
            restart_left=np.zeros((B, T)) if st.persistent_placement else None,
            since_ckpt=np.zeros((B, T)) if st.persistent_placement else None,
            unsaved=np.zeros((B, T)) if st.persistent_placement else None,
        )

    @property
    def B(self) -> int:
        return self.round.shape[0]

    def round_state(self) -> RoundState:
        """The kernel :class:`~fleet_marl.kernel.RoundState` the next round starts from, (B, ...)."""
        return RoundState(
            prev_alloc=self.prev_alloc,
            temp_c=self.temp_c,
            queue=self.queue,
            remaining_tokens=self.remaining,
            budget_left=self.budget,
            prev_placement=self.prev_gon,
            restart_left_s=self.restart_left,
            since_ckpt_s=self.since_ckpt,
            unsaved_tokens=self.unsaved,
        )

    def take(self, rows) -> EnvState:
        """A new state of the clusters ``rows`` (indices into B; repeats allowed) of this one,
        every array copied, so that stepping it (:func:`~fleet_marl.environment.core.step`)
        changes nothing here: a branch of the episode. Its ``drawn_from`` is None (the copy
        never hands tie-breaks back to a generator at reset)."""
        rows = np.asarray(rows, np.int64)
        out = {}
        for f in fields(EnvState):
            v = getattr(self, f.name)
            if f.name == "fairness":
                out[f.name] = v.take(rows)
            elif f.name == "drawn_from":
                out[f.name] = [None] * rows.size
            elif f.name == "last":
                out[f.name] = None if v is None else Outcome.of({k.name: np.asarray(getattr(v, k.name))[rows] for k in fields(v)})
            else:
                out[f.name] = None if v is None else v[rows]
        return EnvState(**out)

    def queues(self) -> Queues:
        """The :class:`Queues` of the B clusters: this state's own arrays."""
        return Queues(self.waiting, self.waiting_head, self.has_job, self.job_born, self.pending, self.backlog_n, self.remaining)


@dataclass
class StepResult:
    """What one :func:`step` of B clusters produced (every array (B, T) unless noted)."""

    credit: Credit  # the kernel outcome of each grand coalition and every computed scheme's rewards
    reward: np.ndarray  # float64 the chosen scheme's reward, shaped (0 for tenants not live)
    terminated: np.ndarray  # bool
    truncated: np.ndarray  # bool
    live: np.ndarray  # bool tenants that acted this round
    starved: np.ndarray  # bool
    lowest_precision: np.ndarray  # bool
    hoarding: np.ndarray  # bool
    streak: np.ndarray  # int64 (a copy)
    fair: np.ndarray  # float64 the round's fair shares
    credit_seconds: float  # wall time of the credit engine (the kernel call and the schemes) this round


__all__ = ["CoreStatic", "EnvState", "Queues", "StepResult"]

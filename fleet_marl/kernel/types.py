"""Array containers of the kernel, with the shape beside every field.

Axes: ``B`` batch rows (configurations, or counterfactual rows), ``T`` tenants, ``G`` layer
groups (``catalog.GROUPS``), ``P`` precisions (``catalog.PRECISIONS``), ``K`` nodes, ``Q``
pools (GPU types present in the cluster). Floats are float64, counts int64.

Any field of :class:`Actions`, :class:`RoundState` and :class:`Draws` may omit the leading
``B`` axis; it is then broadcast over every row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np


@dataclass(frozen=True)
class Actions:
    """What every tenant asks for, per batch row."""

    gpus: np.ndarray  # (B, T) int64   GPUs requested (>= 0)
    bid: np.ndarray  # (B, T) float64 bid, as a multiplier of the GPU type's list price (> 0)
    precision: np.ndarray  # (B, T, G) int64 precision code per layer group
    batch: np.ndarray  # (B, T) int64   train: sequences per GPU per step; serve: concurrent sequences (>= 1)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.gpus.shape[:-1]


@dataclass(frozen=True)
class RoundState:
    """What carries over between rounds."""

    prev_alloc: np.ndarray  # (B, T) int64  GPUs each tenant held last round
    temp_c: np.ndarray  # (B, K) float64 node GPU temperature
    queue: np.ndarray  # (B, T) float64 serve: requests waiting at the start of the round
    remaining_tokens: np.ndarray  # (B, T) float64 train: tokens left in the current job
    budget_left: np.ndarray  # (B, T) float64 USD left
    #: (B, T, K) int64 GPUs each tenant held on each node last round; None: not tracked (every
    #: round's placement is made afresh, as without ``CouplingSpec.persistent_placement``)
    prev_placement: np.ndarray | None = None
    #: (B, T) float64 seconds of a restart still ahead (one longer than a round goes on into the
    #: next, ``CouplingSpec.persistent_placement``; docs/model.md section 12.3); None: zeros
    restart_left_s: np.ndarray | None = None
    #: (B, T) float64 a trainer's seconds of training since its last checkpoint (with no checkpoint
    #: interval: since its job started or it last restarted); None: zeros
    since_ckpt_s: np.ndarray | None = None
    #: (B, T) float64 a trainer's tokens trained since its last checkpoint: what a preemption loses; None: zeros
    unsaved_tokens: np.ndarray | None = None

    @staticmethod
    def initial(static: Any, batch: int | None = None) -> RoundState:
        """Nothing held (on any node), nodes at ambient temperature, empty queues, whole jobs
        and budgets. With ``batch`` every field gets a leading axis of that size."""
        lead = () if batch is None else (batch,)
        T = static.T
        return RoundState(
            prev_alloc=np.zeros(lead + (T,), np.int64),
            temp_c=np.full(lead + (static.K,), static.ambient_c),
            queue=np.zeros(lead + (T,)),
            remaining_tokens=np.broadcast_to(static.job_tokens, lead + (T,)).copy(),
            budget_left=np.broadcast_to(static.budget, lead + (T,)).copy(),
            prev_placement=np.zeros(lead + (T, static.K), np.int64),
            restart_left_s=np.zeros(lead + (T,)),
            since_ckpt_s=np.zeros(lead + (T,)),
            unsaved_tokens=np.zeros(lead + (T,)),
        )


@dataclass(frozen=True)
class Draws:
    """The round's random draws. Inputs, never drawn inside the kernel, so every
    counterfactual row sees the same noise."""

    arrivals: np.ndarray  # (B, T) float64 serve: requests arriving this round
    tiebreak: np.ndarray  # (B, T) float64 in [0, 1): order among equal claims in the arbiter
    #: (B, T) float64 serve: mean prompt / output tokens of the round's requests (a replayed
    #: trace's); None: each tenant's configured means (``KernelStatic.prompt_tokens``, ...)
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None

    @staticmethod
    def sample(static: Any, rng: np.random.Generator, batch: int | None = None) -> Draws:
        """Poisson arrivals at each serving tenant's mean rate; uniform tie-breaks. With
        ``batch``, independent draws for each of ``batch`` rows."""
        lead = () if batch is None else (batch,)
        lam = static.arrival_rate * static.round_seconds
        return Draws(
            arrivals=rng.poisson(lam, size=lead + (static.T,)).astype(np.float64),
            tiebreak=rng.random(lead + (static.T,)),
        )

    @staticmethod
    def expected(static: Any) -> Draws:
        """Mean arrivals and index-order tie-breaks: a deterministic draw."""
        return Draws(
            arrivals=static.arrival_rate * static.round_seconds,
            tiebreak=np.arange(static.T, dtype=np.float64) / max(static.T, 1),
        )


@dataclass(frozen=True)
class Outcome:
    """Everything one round produced, per batch row."""

    # arbiter
    requested: np.ndarray  # (B, T) int64   request after caps (present, max_gpus, budget, auction reserve)
    alloc: np.ndarray  # (B, T) int64   GPUs granted
    gpus_on_node: np.ndarray  # (B, T, K) int64 placement
    nodes_spanned: np.ndarray  # (B, T) int64
    usable_gpus: np.ndarray  # (B, T) int64   GPUs of the grant its parallel layout uses (coupling.gang; alloc with it off)
    price: np.ndarray  # (B, T) float64 USD per GPU-hour paid
    restarted: np.ndarray  # (B, T) bool    allocation changed -> restart time lost
    # safety
    precision: np.ndarray  # (B, T, G) int64 precision actually run (after projection)
    batch: np.ndarray  # (B, T) int64   batch actually run (after projection)
    unsafe_numerics: np.ndarray  # (B, T) bool  the requested precision map was unsafe
    projected: np.ndarray  # (B, T) bool    the config was downgraded (project mode)
    vetoed: np.ndarray  # (B, T) bool       the config was refused (veto mode)
    oom: np.ndarray  # (B, T) bool          does not fit even after projection
    tripped: np.ndarray  # (B, T) bool      runs on a node that hit the critical temperature
    throttle: np.ndarray  # (B, T) float64  clock factor from power cap and heat, in [0, 1]
    power_throttled: np.ndarray  # (B, T) bool
    thermal_throttled: np.ndarray  # (B, T) bool
    # cost
    mem_weights: np.ndarray  # (B, T) float64 bytes per GPU
    mem_grads: np.ndarray  # (B, T) float64
    mem_master: np.ndarray  # (B, T) float64
    mem_optimizer: np.ndarray  # (B, T) float64
    mem_activations: np.ndarray  # (B, T) float64
    mem_kv_cache: np.ndarray  # (B, T) float64
    mem_total: np.ndarray  # (B, T) float64
    mem_capacity: np.ndarray  # (B, T) float64 usable bytes per GPU
    tokens_per_s: np.ndarray  # (B, T) float64 train: training tokens/s; serve: generated tokens/s
    multi_gpu_efficiency: np.ndarray  # (B, T) float64 compute time / step time
    # outcome
    progress_tokens: np.ndarray  # (B, T) float64 train: tokens trained this round, less those a preemption lost (lost_tokens)
    served: np.ndarray  # (B, T) float64 serve: requests completed
    slo_good: np.ndarray  # (B, T) float64 serve: requests completed within SLO
    slo_attainment: np.ndarray  # (B, T) float64 serve: slo_good / arrivals
    queue_next: np.ndarray  # (B, T) float64
    remaining_next: np.ndarray  # (B, T) float64
    spend: np.ndarray  # (B, T) float64 USD this round
    budget_next: np.ndarray  # (B, T) float64
    value: np.ndarray  # (B, T) float64 work value in [0, ~1]
    utility: np.ndarray  # (B, T) float64 u_i (0 where absent)
    # coupling (docs/model.md section 12)
    slowdown: np.ndarray  # (B, T) float64 step-time factor from the shared links' contention (1 alone)
    link_load: np.ndarray  # (B, T) float64 offered load over capacity of the most loaded shared link the tenant crosses (0: none)
    restart_s: np.ndarray  # (B, T) float64 seconds of the round lost to a restart (0 without one)
    ttft_p50_s: np.ndarray  # (B, T) float64 serve: median time to first token of the round's requests, queueing included (0 train)
    ttft_p99_s: np.ndarray  # (B, T) float64 serve: its 99th percentile
    # restarts that span rounds, lost work (coupling.persistent_placement, docs/model.md section 12.3; 0 with it off)
    restart_pending_s: np.ndarray  # (B, T) float64 seconds of restart still ahead at the round's end
    lost_tokens: np.ndarray  # (B, T) float64 train: tokens a preemption lost this round (trained since the last checkpoint)
    lost_s: np.ndarray  # (B, T) float64 train: the seconds of training they took
    since_ckpt_s: np.ndarray  # (B, T) float64 train: seconds of training since the last checkpoint, at the round's end
    unsaved_tokens: np.ndarray  # (B, T) float64 train: tokens trained since the last checkpoint, at the round's end
    welfare: np.ndarray  # (B,) float64 G = sum_i u_i
    node_power_w: np.ndarray  # (B, K) float64
    rack_power_w: np.ndarray  # (B, R) float64
    temp_next: np.ndarray  # (B, K) float64

    @classmethod
    def of(cls, fields_: dict) -> Outcome:
        """An Outcome of the arrays in ``fields_`` (every field, by name), without the
        dataclass ``__init__`` (40 frozen-attribute writes): the kernel builds one per call."""
        if len(fields_) != len(_OUTCOME_FIELDS):
            missing = set(_OUTCOME_FIELDS) ^ set(fields_)
            raise TypeError(f"Outcome.of: fields {sorted(missing)} missing or unknown")
        out = object.__new__(cls)
        out.__dict__.update(fields_)
        return out

    def next_state(self) -> RoundState:
        """The state the next round starts from (same leading shape as this outcome)."""
        return RoundState(
            prev_alloc=self.alloc,
            temp_c=self.temp_next,
            queue=self.queue_next,
            remaining_tokens=self.remaining_next,
            budget_left=self.budget_next,
            prev_placement=self.gpus_on_node,
            restart_left_s=self.restart_pending_s,
            since_ckpt_s=self.since_ckpt_s,
            unsaved_tokens=self.unsaved_tokens,
        )

    def row(self, i: int) -> Outcome:
        """One batch row, with the batch axis removed (the shapes above without ``B``)."""
        return Outcome.of({k: getattr(self, k)[i] for k in _OUTCOME_FIELDS})


class Stage1(NamedTuple):
    """Stage 1 of every tenant under one precision map each (``kernel.stage1``), (T,) each:
    what depends on nothing but the tenant and its own precision map (``docs/model.md``
    sections 2-3). Bytes are totals over all of the tenant's GPUs."""

    precision: np.ndarray  # (T, G) int64 precision run (unsafe groups in BF16 when the safety check projects)
    unsafe: np.ndarray  # bool: the requested map is numerically unsafe
    invalid: np.ndarray  # bool: the requested map uses a precision the tenant may not use
    weights: np.ndarray  # weight bytes
    grads: np.ndarray  # gradient bytes (train)
    master: np.ndarray  # fp32 master-copy bytes (train)
    optimizer: np.ndarray  # optimizer bytes (train)
    per_seq_local: np.ndarray  # bytes per sequence on each GPU, not sharded (train activations)
    per_seq_sharded: np.ndarray  # bytes per sequence split over the GPUs (serve KV cache)
    time_per_token: np.ndarray  # s per token on one GPU: serve a forward pass, train a step (forward, backward, recomputation)
    kv_read_per_seq: np.ndarray  # serve: KV bytes read per sequence per decode step
    comm_bytes: np.ndarray  # train: bytes per step before (n-1)/n; serve: per token before 2(n-1)/n
    kv_heads: np.ndarray  # the KV cache splits over at most this many GPUs
    head_time_per_token: np.ndarray  # s per forward token in the LM head (part of time_per_token)
    dequant_bytes: np.ndarray  # serve: HBM bytes of converting the weight-only weights to BF16 (a pass of >= dequant_tokens)
    stream_bytes: np.ndarray  # serve: weight bytes a forward pass reads (all but an untied embedding table)


_OUTCOME_FIELDS = tuple(f.name for f in fields(Outcome))

__all__ = ["Actions", "Draws", "Outcome", "RoundState", "Stage1"]

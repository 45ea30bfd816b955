"""Array containers of the kernel, with the shape beside every field.

Axes: ``B`` batch rows (configurations, or counterfactual rows), ``T`` tenants, ``G`` layer
groups (``catalog.GROUPS``), ``P`` precisions (``catalog.PRECISIONS``), ``K`` nodes, ``Q``
pools (GPU types present in the cluster). Floats are float64, counts int64.

Any field of :class:`Actions`, :class:`RoundState` and :class:`Draws` may omit the leading
``B`` axis; it is then broadcast over every row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import MECHANISMS, FleetConfig

MECHANISM_CODE = {m: i for i, m in enumerate(MECHANISMS)}


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

    @staticmethod
    def initial(static: "KernelStatic", batch: int | None = None) -> "RoundState":
        """Nothing held, nodes at ambient temperature, empty queues, whole jobs and budgets.
        With ``batch`` every field gets a leading axis of that size."""
        lead = () if batch is None else (batch,)
        T = static.T
        return RoundState(
            prev_alloc=np.zeros(lead + (T,), np.int64),
            temp_c=np.full(lead + (static.K,), static.ambient_c),
            queue=np.zeros(lead + (T,)),
            remaining_tokens=np.broadcast_to(static.job_tokens, lead + (T,)).copy(),
            budget_left=np.broadcast_to(static.budget, lead + (T,)).copy(),
        )


@dataclass(frozen=True)
class Draws:
    """The round's random draws. Inputs, never drawn inside the kernel, so every
    counterfactual row sees the same noise."""

    arrivals: np.ndarray  # (B, T) float64 serve: requests arriving this round
    tiebreak: np.ndarray  # (B, T) float64 in [0, 1): order among equal claims in the arbiter

    @staticmethod
    def sample(static: "KernelStatic", rng: np.random.Generator, batch: int | None = None) -> "Draws":
        """Poisson arrivals at each serving tenant's mean rate; uniform tie-breaks. With
        ``batch``, independent draws for each of ``batch`` rows."""
        lead = () if batch is None else (batch,)
        lam = static.arrival_rate * static.round_seconds
        return Draws(
            arrivals=rng.poisson(lam, size=lead + (static.T,)).astype(np.float64),
            tiebreak=rng.random(lead + (static.T,)),
        )

    @staticmethod
    def expected(static: "KernelStatic") -> "Draws":
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
    progress_tokens: np.ndarray  # (B, T) float64 train: tokens trained this round
    served: np.ndarray  # (B, T) float64 serve: requests completed
    slo_good: np.ndarray  # (B, T) float64 serve: requests completed within SLO
    slo_attainment: np.ndarray  # (B, T) float64 serve: slo_good / arrivals
    queue_next: np.ndarray  # (B, T) float64
    remaining_next: np.ndarray  # (B, T) float64
    spend: np.ndarray  # (B, T) float64 USD this round
    budget_next: np.ndarray  # (B, T) float64
    value: np.ndarray  # (B, T) float64 work value in [0, ~1]
    utility: np.ndarray  # (B, T) float64 u_i (0 where absent)
    welfare: np.ndarray  # (B,) float64 G = sum_i u_i
    node_power_w: np.ndarray  # (B, K) float64
    rack_power_w: np.ndarray  # (B, R) float64
    temp_next: np.ndarray  # (B, K) float64

    def next_state(self) -> "RoundState":
        """The state the next round starts from (same leading shape as this outcome)."""
        return RoundState(
            prev_alloc=self.alloc,
            temp_c=self.temp_next,
            queue=self.queue_next,
            remaining_tokens=self.remaining_next,
            budget_left=self.budget_next,
        )

    def row(self, i: int) -> "Outcome":
        """One batch row, with the batch axis removed (the shapes above without ``B``)."""
        return Outcome(**{f.name: getattr(self, f.name)[i] for f in fields(self)})


@dataclass(frozen=True)
class KernelStatic:
    """Per-scenario constants, flattened to arrays once (``KernelStatic.from_config``)."""

    T: int
    K: int
    n_racks: int
    # tenants
    is_train: np.ndarray  # (T,) bool
    params: np.ndarray  # (T, G) float64 parameters per layer group
    flops_fwd: np.ndarray  # (T, G) float64 forward FLOPs per token per group (ctx = seq / prompt)
    layers: np.ndarray  # (T,) float64
    hidden: np.ndarray  # (T,) float64
    heads: np.ndarray  # (T,) float64
    kv_dim: np.ndarray  # (T,) float64 kv_heads * head_dim
    kv_heads: np.ndarray  # (T,) float64
    seq_len: np.ndarray  # (T,) float64 train: sequence length
    prompt_tokens: np.ndarray  # (T,) float64
    output_tokens: np.ndarray  # (T,) float64
    slo_ttft_s: np.ndarray  # (T,) float64
    slo_tpot_s: np.ndarray  # (T,) float64
    arrival_rate: np.ndarray  # (T,) float64 requests/s (0 for training tenants)
    job_tokens: np.ndarray  # (T,) float64 (0 for serving tenants)
    flash: np.ndarray  # (T,) bool
    checkpointing: np.ndarray  # (T,) bool full activation recomputation (train)
    priority: np.ndarray  # (T,) float64
    max_gpus: np.ndarray  # (T,) int64
    budget: np.ndarray  # (T,) float64 episode budget
    spend_norm: np.ndarray  # (T,) float64 USD per round that counts as one unit of disutility
    ref_rate: np.ndarray  # (T,) float64 reference work rate (train tokens/s, serve requests/s)
    pool: np.ndarray  # (T,) int64 index of the tenant's GPU type in ``pools``
    # the tenant's GPU type
    mem_bytes: np.ndarray  # (T,) float64 usable bytes per GPU
    bw: np.ndarray  # (T,) float64 HBM bytes/s
    peak: np.ndarray  # (T, P) float64 FLOP/s by precision (0 = unsupported)
    supported: np.ndarray  # (T, P) bool
    tdp_w: np.ndarray  # (T,) float64
    idle_w: np.ndarray  # (T,) float64
    list_price: np.ndarray  # (T,) float64 USD per GPU-hour
    intra_bw: np.ndarray  # (T,) float64 bytes/s per direction inside a node
    inter_bw: np.ndarray  # (T,) float64 bytes/s per GPU across nodes
    # cluster
    pools: tuple[str, ...]
    pool_capacity: np.ndarray  # (Q,) int64
    node_pool: np.ndarray  # (K,) int64
    node_rack: np.ndarray  # (K,) int64
    rack_of: np.ndarray  # (K, R) float64 one-hot: node k is in rack r
    node_idle_w: np.ndarray  # (K,) float64 idle power of one GPU of the node's type
    node_tdp_w: np.ndarray  # (K,) float64
    gpus_per_node: int
    rack_power_cap_w: float
    ambient_c: float
    thermal_rise_at_tdp_c: float
    thermal_tau_s: float
    throttle_temp_c: float
    critical_temp_c: float
    round_seconds: float
    restart_seconds: float
    mfu: float
    mbu: float
    comm_overlap: float
    # rules
    mechanism: int  # index into config.MECHANISMS
    reserve_price: float
    veto: bool  # safety mode
    cost_weight: float
    term_table: Any = None  # cost.TermTable: stage 1 for every precision map, when T is small
    backend: str = "numpy"  # the kernel backend that runs (kernel.backend.resolve_backend)

    @staticmethod
    def from_config(cfg: FleetConfig) -> "KernelStatic":
        from fleet_marl.kernel import cost
        from fleet_marl.kernel.backend import resolve_backend
        from fleet_marl.kernel.cost import forward_flops_per_token, reference_rate
        from fleet_marl.kernel.safety import invalid_precision

        cl = cfg.cluster
        ts = cfg.tenants
        T, K = len(ts), cl.num_nodes
        pools = cl.pools
        models = [catalog.model(t.model) for t in ts]
        gpus = [catalog.gpu(t.gpu_type) for t in ts]
        is_train = np.array([t.kind == "train" for t in ts])
        arr = lambda xs, dt=np.float64: np.array(xs, dtype=dt)  # noqa: E731
        seq = arr([t.workload.seq_len for t in ts])
        prompt = arr([t.workload.prompt_tokens for t in ts])
        ctx = np.where(is_train, seq, prompt)
        flops = np.stack([forward_flops_per_token(m, c) for m, c in zip(models, ctx)])
        node_pool = arr([pools.index(g) for g in cl.gpu_types], np.int64)
        node_gpu = [catalog.gpu(g) for g in cl.gpu_types]
        peak = np.stack([g.peak_flops() for g in gpus])
        st = KernelStatic(
            T=T,
            K=K,
            n_racks=-(-K // cl.nodes_per_rack),
            is_train=is_train,
            params=np.stack([m.params_vector for m in models]),
            flops_fwd=flops,
            layers=arr([m.layers for m in models]),
            hidden=arr([m.hidden for m in models]),
            heads=arr([m.heads for m in models]),
            kv_dim=arr([m.kv_heads * m.head_dim for m in models]),
            kv_heads=arr([m.kv_heads for m in models]),
            seq_len=seq,
            prompt_tokens=prompt,
            output_tokens=arr([t.workload.output_tokens for t in ts]),
            slo_ttft_s=arr([t.workload.slo_ttft_s for t in ts]),
            slo_tpot_s=arr([t.workload.slo_tpot_s for t in ts]),
            arrival_rate=np.where(is_train, 0.0, arr([t.workload.rate for t in ts])),
            job_tokens=np.where(is_train, arr([t.workload.job_tokens for t in ts]), 0.0),
            flash=np.array([t.flash_attention for t in ts]),
            checkpointing=np.array([t.activation_checkpointing for t in ts]) & is_train,
            priority=arr([t.priority for t in ts]),
            max_gpus=arr([min(t.max_gpus, cl.capacity(t.gpu_type)) for t in ts], np.int64),
            budget=arr([t.budget for t in ts]),
            spend_norm=arr([t.budget / cfg.max_cycles for t in ts]),
            ref_rate=np.zeros(T),
            pool=arr([pools.index(t.gpu_type) for t in ts], np.int64),
            mem_bytes=arr([g.memory_gb * 1e9 * cl.usable_memory_fraction for g in gpus]),
            bw=arr([g.bandwidth_tbs * 1e12 for g in gpus]),
            peak=peak,
            supported=peak > 0,
            tdp_w=arr([g.tdp_w for g in gpus]),
            idle_w=arr([g.idle_w for g in gpus]),
            list_price=arr([g.price_per_hour for g in gpus]),
            intra_bw=arr([g.interconnect_gbs * 1e9 for g in gpus]),
            inter_bw=arr([min(g.interconnect_gbs, cl.network_gbs_per_gpu) * 1e9 for g in gpus]),
            pools=pools,
            pool_capacity=arr([cl.capacity(q) for q in pools], np.int64),
            node_pool=node_pool,
            node_rack=np.arange(K, dtype=np.int64) // cl.nodes_per_rack,
            rack_of=np.eye(-(-K // cl.nodes_per_rack))[np.arange(K) // cl.nodes_per_rack],
            node_idle_w=arr([g.idle_w for g in node_gpu]),
            node_tdp_w=arr([g.tdp_w for g in node_gpu]),
            gpus_per_node=cl.gpus_per_node,
            rack_power_cap_w=cl.rack_power_cap_w,
            ambient_c=cl.ambient_c,
            thermal_rise_at_tdp_c=cl.thermal_rise_at_tdp_c,
            thermal_tau_s=cl.thermal_tau_s,
            throttle_temp_c=cl.throttle_temp_c,
            critical_temp_c=cl.critical_temp_c,
            round_seconds=cl.round_seconds,
            restart_seconds=cl.restart_seconds,
            mfu=cl.mfu,
            mbu=cl.mbu,
            comm_overlap=cl.comm_overlap,
            mechanism=MECHANISM_CODE[cfg.arbiter.mechanism],
            reserve_price=cfg.arbiter.reserve_price,
            veto=cfg.safety.mode == "veto",
            cost_weight=cfg.reward.cost_weight,
            backend=resolve_backend(cfg.backend),
        )
        object.__setattr__(st, "ref_rate", reference_rate(st))
        if T <= cost.MAX_TABLE_TENANTS:
            object.__setattr__(st, "term_table", cost.build_term_table(st, not st.veto, invalid_precision))
        for f in fields(st):
            v = getattr(st, f.name)
            if isinstance(v, np.ndarray):
                v.setflags(write=False)
        return st


__all__ = ["Actions", "Draws", "KernelStatic", "MECHANISM_CODE", "Outcome", "RoundState"]

"""The scenario's constants, flattened to arrays once per config: :class:`KernelStatic`.

Axes as in :mod:`fleet_marl.kernel.types`: ``T`` tenants, ``G`` layer groups, ``P``
precisions, ``K`` nodes, ``Q`` pools, ``R`` racks. ``KernelStatic.from_config`` also
packs what the compiled round reads, stage-1 tables included (``layout.pack_static``); every
array is read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import FleetConfig
from fleet_marl.kernel import activations, cost, mechanisms
from fleet_marl.kernel.layout import pack_static


def model_arrays(models, ctx, loss=None) -> dict[str, Any]:
    """The fields of :class:`KernelStatic` that come from each tenant's architecture
    (``catalog.ModelArch``) at its context ``ctx`` (T,): ``dataclasses.replace(st,
    **model_arrays(...))`` swaps the models of a scenario (the validation suite runs published
    architectures that are not in the catalog this way), each with its loss implementation
    ``loss`` (T,) (a key of ``activations.LOSS_BYTES``, None for a serving tenant; default eager)."""
    loss = ["eager"] * len(models) if loss is None else loss
    arr = lambda xs: np.array(xs, dtype=np.float64)  # noqa: E731
    return {
        "params": np.stack([m.params_vector for m in models]),
        "flops_fwd": np.stack([cost.forward_flops_per_token(m, c) for m, c in zip(models, ctx, strict=True)]),
        "layers": arr([m.layers for m in models]),
        "hidden": arr([m.hidden for m in models]),
        "heads": arr([m.heads for m in models]),
        "kv_dim": arr([m.kv_heads * m.head_dim for m in models]),
        "kv_heads": arr([m.kv_heads for m in models]),
        "kv_window": arr([np.inf if m.sliding_window is None else m.sliding_window for m in models]),
        "linear_in": np.stack([cost.linear_dims(m)[0] for m in models]),
        "linear_out": np.stack([cost.linear_dims(m)[1] for m in models]),
        "act_layer": arr([activations.activation_bytes(m)[0] for m in models]),
        "act_final": arr([activations.activation_bytes(m, lo)[1] for m, lo in zip(models, loss, strict=True)]),
        "act_sac": arr([activations.selective_checkpointing(m)[0] for m in models]),
        "sac_share": np.stack([activations.selective_checkpointing(m)[1] for m in models]),
        "ew_serve": arr([cost.serve_elementwise_bytes(m) for m in models]),
        "ew_replicated": arr([cost.serve_replicated_bytes(m) for m in models]),
    }


def _topology(cfg: FleetConfig) -> dict[str, Any]:
    """The cluster's racks (``nodes_per_rack`` consecutive nodes each) and leaf switches
    (``nodes_per_leaf`` each, one a rack by default), each leaf's uplink bytes/s (its nodes'
    GPUs' NIC bandwidth over the oversubscription) on every node of it, the shared storage's
    bytes/s (inf: none given) and each trainer's checkpoint interval (0 for a server)."""
    cl = cfg.cluster
    K = cl.num_nodes
    rack = np.arange(K, dtype=np.int64) // cl.nodes_per_rack
    leaf = np.arange(K, dtype=np.int64) // cl.leaf_nodes
    nic = np.array([cl.gpus_per_node * min(catalog.gpu(g).interconnect_gbs, cl.network_gbs_per_gpu) * 1e9 for g in cl.gpu_types])
    uplink = np.bincount(leaf, weights=nic)[leaf] / cl.uplink_oversubscription
    storage = np.inf if cl.storage_gbs is None else cl.storage_gbs * 1e9
    every = np.array([t.workload.checkpoint_interval_s if t.kind == "train" else 0.0 for t in cfg.tenants])
    return dict(
        node_rack=rack,
        rack_of=np.eye(rack[-1] + 1)[rack],
        node_leaf=leaf,
        leaf_uplink_bps=uplink,
        storage_bps=storage,
        checkpoint_every_s=every,
    )


def _gang(cfg: FleetConfig) -> dict[str, Any]:
    """``coupling.gang`` and each tenant's tensor-parallel degree (a trainer's layout; 1 for a
    server, whose replica's degree follows from its GPUs: ``gang.usable``)."""
    tp = np.array([t.tensor_parallel if t.kind == "train" else 1 for t in cfg.tenants], np.int64)
    return dict(gang=cfg.coupling.gang, tensor_parallel=tp)


def _kv_cache_bytes(t) -> float:
    """Bytes per KV-cache value of serving tenant ``t`` when its workload fixes the format; 0
    (the attention group's precision) for ``"auto"`` and for training tenants."""
    fmt = t.workload.kv_cache_dtype
    if t.kind == "train" or fmt == "auto":
        return 0.0
    return float(catalog.PRECISION_BYTES[catalog.PRECISION_CODE[fmt]])


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
    kv_window: np.ndarray  # (T,) float64 tokens a sequence keeps in its KV cache: the sliding window, inf without one
    linear_in: np.ndarray  # (T, G) float64 summed input widths of the group's linear layers (cost.linear_dims)
    linear_out: np.ndarray  # (T, G) float64 summed output widths
    act_layer: np.ndarray  # (T,) float64 activation bytes per token per block at 16 bit (activations.activation_bytes)
    act_final: np.ndarray  # (T,) float64 activation bytes per token after the blocks (norm, head input, logits, loss)
    ew_serve: np.ndarray  # (T,) float64 serving: elementwise HBM bytes per token (cost.serve_elementwise_bytes)
    ew_replicated: np.ndarray  # (T,) float64 serving: the part every tensor-parallel GPU moves whole (cost.serve_replicated_bytes)
    act_sac: np.ndarray  # (T,) float64 bytes per token per block kept under selective checkpointing (activations.selective_checkpointing)
    sac_share: np.ndarray  # (T, G) float64 share of each group's linear FLOPs recomputed under selective checkpointing
    seq_len: np.ndarray  # (T,) float64 train: sequence length
    prompt_tokens: np.ndarray  # (T,) float64
    output_tokens: np.ndarray  # (T,) float64
    kv_cache_bytes: np.ndarray  # (T,) float64 serve: fixed bytes per KV-cache value (kv_cache_dtype), 0 = the attention's
    dequant_tokens: np.ndarray  # (T,) float64 serve: pass size from which weight-only weights are converted to BF16, 0 = never
    slo_ttft_s: np.ndarray  # (T,) float64
    slo_tpot_s: np.ndarray  # (T,) float64
    arrival_rate: np.ndarray  # (T,) float64 requests/s (0 for training tenants)
    job_tokens: np.ndarray  # (T,) float64 (0 for serving tenants)
    flash: np.ndarray  # (T,) bool
    attn_eff: np.ndarray  # (T,) float64 achieved share of the BF16 peak in attention (cost.attention_efficiency)
    checkpointing: np.ndarray  # (T,) int64 activation checkpointing (train): activations.CKPT_NONE, CKPT_FULL or CKPT_SELECTIVE
    tensor_parallel: np.ndarray  # (T,) int64 train: tensor-parallel degree, its groups inside one node (coupling.gang); 1 serve
    priority: np.ndarray  # (T,) float64
    max_gpus: np.ndarray  # (T,) int64
    budget: np.ndarray  # (T,) float64 episode budget
    spend_norm: np.ndarray  # (T,) float64 USD per round that counts as one unit of disutility
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
    ar_lat: np.ndarray  # (T,) float64 s: an NCCL all-reduce's latency in one node (catalog.GPUType.allreduce_fit)
    ar_bus: np.ndarray  # (T,) float64 bytes/s: its bus bandwidth (same fit)
    nvlink: np.ndarray  # (T,) float64 1 where the node's GPUs share NVLink (a serving engine's custom all-reduce), else 0
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
    restart_seconds: float  # fixed part of a restart; the checkpoint load adds to it (tenant_cost.restart_time)
    load_gpu_bps: float  # checkpoint bytes/s one GPU's loader reads
    load_node_bps: float  # checkpoint bytes/s one node reads
    mfu: float
    mbu: float
    comm_overlap: float
    node_leaf: np.ndarray  # (K,) int64 the leaf switch (or pod) node k sits under (docs/model.md section 12.1)
    leaf_uplink_bps: np.ndarray  # (K,) float64 bytes/s of node k's leaf uplinks: the leaf's GPUs' NIC bandwidth / oversubscription
    storage_bps: float  # bytes/s of the shared storage that restarts' checkpoint loads share (inf: no shared limit)
    checkpoint_every_s: np.ndarray  # (T,) float64 train: seconds of training between synchronous checkpoints (0: none)
    # rules
    mechanism: mechanisms.Mechanism  # the arbiter's: how it clears, what a served tenant pays, its reserve
    reserve_price: float
    veto: bool  # safety mode
    cost_weight: float
    # couplings (config.CouplingSpec)
    contention: bool = False  # shared links and storage (docs/model.md section 12)
    queueing: bool = False  # serving queues
    persistent_placement: bool = False  # a tenant keeps its nodes from round to round
    gang: bool = False  # a tenant runs on the GPUs its parallel layout can use (docs/model.md section 12.4)
    # derived by __post_init__, not arguments
    #: (T,) float64 each tenant's reference work rate (train tokens/s, serve requests/s): the denominator of its value
    ref_rate: np.ndarray = field(init=False, repr=False, compare=False, default_factory=lambda: np.empty(0))
    #: what the compiled round reads (``layout.pack_static``)
    packed: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self):
        """Check the mechanism, derive ``ref_rate`` and ``packed``, and make every array
        read-only. Runs again on ``dataclasses.replace``, so the derived fields never go stale."""
        if not isinstance(self.mechanism, mechanisms.Mechanism):
            raise ValueError(f"mechanism = {self.mechanism!r}: expected a Mechanism (fleet_marl.kernel.mechanisms.mechanism(name))")
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v.setflags(write=False)
        ref = cost.reference_rate(self)
        ref.setflags(write=False)
        object.__setattr__(self, "ref_rate", ref)
        object.__setattr__(self, "packed", pack_static(self))

    @staticmethod
    def from_config(cfg: FleetConfig) -> KernelStatic:
        cl = cfg.cluster
        ts = cfg.tenants
        T, K = len(ts), cl.num_nodes
        pools = cl.pools
        models = [catalog.model(t.model) for t in ts]
        gpus = [catalog.gpu(t.gpu_type) for t in ts]
        fits = {g.name: g.allreduce_fit() for g in gpus}  # (latency s, bus bandwidth B/s) per GPU type
        is_train = np.array([t.kind == "train" for t in ts])
        arr = lambda xs, dt=np.float64: np.array(xs, dtype=dt)  # noqa: E731
        seq = arr([t.workload.seq_len for t in ts])
        prompt = arr([t.workload.prompt_tokens for t in ts])
        ctx = np.where(is_train, seq, prompt)
        node_pool = arr([pools.index(g) for g in cl.gpu_types], np.int64)
        node_gpu = [catalog.gpu(g) for g in cl.gpu_types]
        peak = np.stack([g.peak_flops() for g in gpus])
        return KernelStatic(
            T=T,
            K=K,
            n_racks=-(-K // cl.nodes_per_rack),
            is_train=is_train,
            **model_arrays(models, ctx, ["eager" if t.kind == "train" else None for t in ts]),
            seq_len=seq,
            prompt_tokens=prompt,
            output_tokens=arr([t.workload.output_tokens for t in ts]),
            kv_cache_bytes=arr([_kv_cache_bytes(t) for t in ts]),
            dequant_tokens=np.where(is_train, 0.0, arr([t.workload.weight_only_dequant_tokens for t in ts])),
            slo_ttft_s=arr([t.workload.slo_ttft_s for t in ts]),
            slo_tpot_s=arr([t.workload.slo_tpot_s for t in ts]),
            arrival_rate=np.where(is_train, 0.0, arr([t.workload.rate for t in ts])),
            job_tokens=np.where(is_train, arr([t.workload.job_tokens for t in ts]), 0.0),
            flash=np.array([t.flash_attention for t in ts]),
            attn_eff=arr([cost.attention_efficiency(t.gpu_type, t.kind == "train") for t in ts]),
            checkpointing=np.where(is_train, arr([activations.CHECKPOINTING_CODE[t.activation_checkpointing] for t in ts], np.int64), 0),
            priority=arr([t.priority for t in ts]),
            max_gpus=arr([min(t.max_gpus, cl.capacity(t.gpu_type)) for t in ts], np.int64),
            budget=arr([t.budget for t in ts]),
            spend_norm=arr([t.budget / cfg.max_cycles for t in ts]),
            pool=arr([pools.index(t.gpu_type) for t in ts], np.int64),
            mem_bytes=arr([g.memory_bytes * cl.usable_memory_fraction for g in gpus]),
            bw=arr([g.bandwidth_tbs * 1e12 for g in gpus]),
            peak=peak,
            supported=peak > 0,
            tdp_w=arr([g.tdp_w for g in gpus]),
            idle_w=arr([g.idle_w for g in gpus]),
            list_price=arr([g.price_per_hour for g in gpus]),
            intra_bw=arr([g.interconnect_gbs * 1e9 for g in gpus]),
            inter_bw=arr([min(g.interconnect_gbs, cl.network_gbs_per_gpu) * 1e9 for g in gpus]),
            ar_lat=arr([fits[g.name][0] for g in gpus]),
            ar_bus=arr([fits[g.name][1] for g in gpus]),
            nvlink=arr([float(g.nvlink) for g in gpus]),
            pools=pools,
            pool_capacity=arr([cl.capacity(q) for q in pools], np.int64),
            node_pool=node_pool,
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
            load_gpu_bps=cl.checkpoint_load_gbs_per_gpu * 1e9,
            load_node_bps=cl.checkpoint_load_gbs_per_node * 1e9,
            mfu=cl.mfu,
            mbu=cl.mbu,
            comm_overlap=cl.comm_overlap,
            **_topology(cfg),
            mechanism=mechanisms.mechanism(cfg.arbiter.mechanism),
            reserve_price=cfg.arbiter.reserve_price,
            veto=cfg.safety.mode == "veto",
            cost_weight=cfg.reward.cost_weight,
            contention=cfg.coupling.contention,
            queueing=cfg.coupling.queueing,
            persistent_placement=cfg.coupling.persistent_placement,
            **_gang(cfg),
        )


__all__ = ["KernelStatic", "model_arrays"]

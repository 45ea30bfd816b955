"""Hypothesis strategies for whole scenarios: :func:`fleet_configs` draws every field of a
:class:`~fleet_marl.config.FleetConfig` that reaches the round (``KernelStatic.from_config``),
over every GPU type and every model of the catalog.

What each draw varies (``tests/test_oracle.py`` holds the compiled round to the oracle on them):

* the cluster (:class:`ClusterSpec`): 1-3 pools of any catalog GPU types on 1-5 nodes,
  ``gpus_per_node`` (1, 2, 4, 8 or any of 1-16), ``nodes_per_rack``, ``rack_power_cap_w`` from
  just above the racks' idle power to twice their TDP, ``network_gbs_per_gpu``, the thermal
  constants (``ambient_c``, ``thermal_rise_at_tdp_c``, ``thermal_tau_s``, ``throttle_temp_c``,
  ``critical_temp_c``), ``round_seconds``, ``restart_seconds`` (0 to the whole round) and the checkpoint load rates
  (``checkpoint_load_gbs_per_gpu``, ``checkpoint_load_gbs_per_node``),
  ``usable_memory_fraction``, ``mfu``, ``mbu`` and ``comm_overlap`` (0, 1 or in between);
* each tenant (:class:`TenantSpec`, :class:`WorkloadSpec`): kind, any catalog model, a GPU type
  of the cluster, ``budget``, ``priority``, ``max_gpus``, ``flash_attention``,
  ``activation_checkpointing``, ``tensor_parallel`` (a trainer's, any valid degree), ``seq_len``,
  ``prompt_tokens``, ``output_tokens`` (within the model's context), ``slo_ttft_s``,
  ``slo_tpot_s``, ``rate``, ``job_tokens``, ``kv_cache_dtype`` and ``weight_only_dequant_tokens``;
* the rules: every registered mechanism, ``reserve_price``, the safety mode, the reward's
  ``cost_weight``, ``max_cycles`` (the budget per round that prices spending) and every
  coupling switch.
"""

from __future__ import annotations

from hypothesis import strategies as hst

from fleet_marl import catalog
from fleet_marl.config import (
    MECHANISMS,
    ArbiterSpec,
    ClusterSpec,
    CouplingSpec,
    FleetConfig,
    RewardSpec,
    SafetySpec,
    TenantSpec,
    WorkloadSpec,
)
from fleet_marl.config.rules import SHAPLEY_ESTIMATORS

GPU_TYPES = tuple(sorted(catalog.gpus()))
MODELS = tuple(sorted(catalog.models()))


def _num(lo: float, hi: float, *nice: float):
    """A float in [lo, hi], often one of the ``nice`` values (edges and defaults)."""
    span = hst.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    return hst.sampled_from(nice) | span if nice else span


@hst.composite
def cluster_specs(draw, max_nodes: int = 5, max_pools: int = 3) -> ClusterSpec:
    pools = draw(hst.lists(hst.sampled_from(GPU_TYPES), min_size=1, max_size=max_pools, unique=True))
    n = draw(hst.integers(len(pools), max_nodes))
    extra = draw(hst.lists(hst.sampled_from(pools), min_size=n - len(pools), max_size=n - len(pools)))
    gpu_types = tuple(draw(hst.permutations(pools + extra)))
    gpn = draw(hst.sampled_from([1, 2, 4, 8]) | hst.integers(1, 16))
    per_rack = draw(hst.integers(1, 4))
    racks = [gpu_types[r : r + per_rack] for r in range(0, n, per_rack)]
    idle = max(gpn * sum(catalog.gpu(g).idle_w for g in rack) for rack in racks)
    full = max(gpn * sum(catalog.gpu(g).tdp_w for g in rack) for rack in racks)
    # from a cap that throttles almost everything to one no rack can reach
    cap = idle + draw(_num(0.02, 2.0, 0.05, 0.5, 1.0, 2.0)) * (full - idle)
    ambient = draw(_num(5.0, 45.0, 25.0, 35.0))
    throttle = ambient + draw(_num(5.0, 80.0, 20.0, 62.0))
    round_s = draw(_num(1.0, 3600.0, 10.0, 60.0, 600.0))
    return ClusterSpec(
        gpu_types=gpu_types,
        gpus_per_node=gpn,
        nodes_per_rack=per_rack,
        rack_power_cap_w=cap,
        network_gbs_per_gpu=draw(_num(1.0, 1000.0, 12.5, 50.0, 400.0)),
        ambient_c=ambient,
        thermal_rise_at_tdp_c=draw(_num(5.0, 120.0, 52.0, 80.0)),
        thermal_tau_s=draw(_num(1.0, 600.0, 20.0)),
        throttle_temp_c=throttle,
        critical_temp_c=throttle + draw(_num(0.5, 20.0, 5.0)),
        round_seconds=round_s,
        restart_seconds=round_s * draw(_num(0.0, 1.0, 0.0, 0.5, 1.0)),
        checkpoint_load_gbs_per_gpu=draw(_num(0.1, 100.0, 1.56, 10.0)),
        checkpoint_load_gbs_per_node=draw(_num(0.1, 400.0, 3.7, 50.0)),
        usable_memory_fraction=draw(_num(0.3, 1.0, 0.9, 1.0)),
        mfu=draw(_num(0.05, 1.0, 0.78, 1.0)),
        mbu=draw(_num(0.05, 1.0, 0.92, 0.7, 1.0)),
        comm_overlap=draw(_num(0.0, 1.0, 0.0, 0.5, 1.0)),
        uplink_oversubscription=draw(_num(1.0, 16.0, 1.0, 4.0, 7.0)),
        nodes_per_leaf=draw(hst.none() | hst.integers(1, 4)),
        storage_gbs=draw(hst.none() | _num(0.5, 2000.0, 2.0, 50.0)),
    )


def _tp_degrees(model: str, gpus_per_node: int) -> list[int]:
    """A trainer's valid tensor-parallel degrees: powers of two dividing the heads, at most a node."""
    heads = catalog.model(model).heads
    return [d for d in (1, 2, 4, 8, 16) if d <= gpus_per_node and heads % d == 0]


@hst.composite
def tenant_specs(draw, pools: tuple[str, ...], gpus_per_node: int = 8) -> TenantSpec:
    model = draw(hst.sampled_from(MODELS))
    ctx = catalog.model(model).max_seq
    kind = draw(hst.sampled_from(["train", "serve"]))
    seq = draw(hst.sampled_from([s for s in (128, 1024, 2048, 4096, 8192, 32768) if s <= ctx]) | hst.integers(1, min(ctx, 16384)))
    prompt = draw(hst.sampled_from([1, 128, 512, 1000]) | hst.integers(1, min(ctx - 1, 8192)))
    output = draw(hst.sampled_from([o for o in (1, 64, 256) if prompt + o <= ctx]) | hst.integers(1, min(ctx - prompt, 4096)))
    workload = WorkloadSpec(
        rate=draw(hst.sampled_from([0.0, 1.0, 4.0]) | _num(0.01, 50.0)),  # requests/s serving, jobs/h training
        job_tokens=draw(_num(1e6, 1e12, 2e9)),
        seq_len=seq,
        prompt_tokens=prompt,
        output_tokens=output,
        slo_ttft_s=draw(_num(0.01, 10.0, 0.5, 2.0)),
        slo_tpot_s=draw(_num(0.001, 1.0, 0.02, 0.1)),
        kv_cache_dtype=draw(hst.sampled_from(["auto", "bf16", "fp8"])),
        weight_only_dequant_tokens=draw(hst.sampled_from([0, 1, 2, 256]) | hst.integers(0, 4096)),
        checkpoint_interval_s=draw(hst.sampled_from([0.0, 0.0, 600.0]) | _num(1.0, 7200.0)),
    )
    return TenantSpec(
        kind=kind,
        model=model,
        gpu_type=draw(hst.sampled_from(pools)),
        budget=draw(_num(1.0, 1e5, 5000.0)),
        priority=draw(_num(0.1, 5.0, 1.0, 2.0)),
        max_gpus=draw(hst.integers(1, 64)),
        flash_attention=draw(hst.booleans()),
        activation_checkpointing=draw(hst.booleans()),
        tensor_parallel=draw(hst.sampled_from(_tp_degrees(model, gpus_per_node))) if kind == "train" else 1,
        workload=workload,
    )


@hst.composite
def fleet_configs(draw, max_tenants: int = 8) -> FleetConfig:
    """A whole scenario drawn field by field (the module doc lists them)."""
    cluster = draw(cluster_specs())
    tenants = tuple(draw(hst.lists(tenant_specs(cluster.pools, cluster.gpus_per_node), min_size=1, max_size=max_tenants)))
    return FleetConfig(
        cluster=cluster,
        tenants=tenants,
        arbiter=ArbiterSpec(mechanism=draw(hst.sampled_from(MECHANISMS)), reserve_price=draw(hst.sampled_from([0.0, 0.5, 1.0, 2.0]))),
        safety=SafetySpec(mode=draw(hst.sampled_from(["project", "veto"]))),
        reward=RewardSpec(cost_weight=draw(_num(0.0, 3.0, 0.0, 1.0)), shapley_estimator=draw(hst.sampled_from(SHAPLEY_ESTIMATORS))),
        coupling=CouplingSpec(
            contention=draw(hst.booleans()),
            queueing=draw(hst.booleans()),
            persistent_placement=draw(hst.booleans()),
            gang=draw(hst.booleans()),
        ),
        max_cycles=draw(hst.integers(1, 1000)),
    )


__all__ = ["GPU_TYPES", "MODELS", "cluster_specs", "fleet_configs", "tenant_specs"]

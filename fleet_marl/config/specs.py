"""The scenario's specs: :class:`FleetConfig` and the frozen dataclasses it is made of.

Each spec checks its fields in ``__post_init__`` (helpers in :mod:`fleet_marl.config.checks`).
``FleetConfig`` loads the fairness knobs that moved from ``reward:`` to ``fairness:``
(``MOVED_TO_FAIRNESS``) with a ``DeprecationWarning`` naming the new key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fleet_marl import catalog
from fleet_marl.config.checks import (
    ConfigError,
    _bool,
    _choice,
    _gpu_key,
    _int,
    _model_key,
    _num,
    _pos_float,
    _tuple,
    deprecated,
    from_dict,
    to_dict,
)
from fleet_marl.config.mechanisms import MECHANISMS
from fleet_marl.config.mechanisms import REGISTRY as MECHANISM_REGISTRY
from fleet_marl.errors import short_repr


@dataclass(frozen=True)
class ClusterSpec:
    """The shared cluster.

    Nodes are listed by GPU type; a rack holds ``nodes_per_rack`` consecutive nodes. Thermal
    constants drive a first-order model of each node's GPU temperature (docs/model.md §6).
    """

    gpu_types: tuple[str, ...] = ("h100-sxm", "h100-sxm")  # (node,) GPU type of each node
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    rack_power_cap_w: float = 16_000.0  # GPU power budget per rack (scenario choice)
    network_gbs_per_gpu: float = 50.0  # inter-node bandwidth per GPU, GB/s (400 Gb/s NDR)
    ambient_c: float = 25.0  # inlet air temperature (coolant supply temperature for liquid-cooled nodes)
    thermal_rise_at_tdp_c: float = 47.0  # steady-state rise over inlet of a node's hottest GPU at TDP (air-cooled HGX H100, measured)
    thermal_tau_s: float = 20.0  # first-order time constant
    throttle_temp_c: float = 87.0  # max operating temperature: clocks slow down above it
    critical_temp_c: float = 92.0  # shutdown temperature: the node trips and runs nothing
    round_seconds: float = 60.0  # one scheduling round
    restart_seconds: float = 30.0  # fixed part of a restart (process start, NCCL init), plus the checkpoint load below
    checkpoint_load_gbs_per_gpu: float = 1.56  # checkpoint read rate of one GPU's loader, GB/s (safetensors, Falcon-40B on 1 A100)
    checkpoint_load_gbs_per_node: float = 3.7  # checkpoint read rate of one node, GB/s (safetensors, BLOOM on 8 A100)
    usable_memory_fraction: float = 0.9  # of GPU memory usable by the job
    mfu: float = 0.78  # achieved share of the tensor-core peak in GEMMs (MFU is an output)
    mbu: float = 0.92  # share of HBM bandwidth of KV-cache reads and weight-only conversion (torchao, as the weights)
    comm_overlap: float = 0.5  # fraction of FSDP communication hidden behind compute (prefetch)

    def __post_init__(self):
        _tuple(self, "gpu_types", _gpu_key, 1, 1024)
        _int(self, "gpus_per_node", 1, 64)
        _int(self, "nodes_per_rack", 1, 1024)
        _num(self, "rack_power_cap_w", 0.0, lo_open=True)
        _num(self, "network_gbs_per_gpu", 0.0, lo_open=True)
        _num(self, "ambient_c", -50.0, 60.0)
        _num(self, "thermal_rise_at_tdp_c", 0.0, lo_open=True)
        _num(self, "thermal_tau_s", 0.0, lo_open=True)
        _num(self, "throttle_temp_c", 0.0, 150.0)
        _num(self, "critical_temp_c", 0.0, 150.0)
        if self.critical_temp_c <= self.throttle_temp_c:
            raise ConfigError("critical_temp_c", self.critical_temp_c, f"a number > throttle_temp_c ({self.throttle_temp_c})")
        if self.throttle_temp_c <= self.ambient_c:
            raise ConfigError("throttle_temp_c", self.throttle_temp_c, f"a number > ambient_c ({self.ambient_c})")
        _num(self, "round_seconds", 0.0, lo_open=True)
        _num(self, "restart_seconds", 0.0)
        if self.restart_seconds > self.round_seconds:
            raise ConfigError("restart_seconds", self.restart_seconds, f"a number <= round_seconds ({self.round_seconds})")
        _num(self, "checkpoint_load_gbs_per_gpu", 0.0, lo_open=True)
        _num(self, "checkpoint_load_gbs_per_node", 0.0, lo_open=True)
        _num(self, "usable_memory_fraction", 0.0, 1.0, lo_open=True)
        _num(self, "mfu", 0.0, 1.0, lo_open=True)
        _num(self, "mbu", 0.0, 1.0, lo_open=True)
        _num(self, "comm_overlap", 0.0, 1.0)

    @property
    def num_nodes(self) -> int:
        return len(self.gpu_types)

    @property
    def pools(self) -> tuple[str, ...]:
        """GPU types present, in first-seen order. Each is a pool the arbiter clears."""
        return tuple(dict.fromkeys(self.gpu_types))

    def capacity(self, gpu_type: str) -> int:
        return self.gpus_per_node * sum(t == gpu_type for t in self.gpu_types)


@dataclass(frozen=True)
class WorkloadSpec:
    """What a tenant has to do.

    Training tenants run jobs of ``job_tokens`` tokens at sequence length ``seq_len``; serving
    tenants receive requests at ``rate`` per second with ``prompt_tokens`` in and
    ``output_tokens`` out, against latency targets ``slo_ttft_s`` and ``slo_tpot_s``.
    """

    pattern: str = "poisson"  # arrival process: poisson | bursty | diurnal | trace
    rate: float = 1.0  # serve: requests/s; train: new jobs per hour
    job_tokens: float = 2.0e9  # train: tokens per job
    seq_len: int = 4096  # train: sequence length; serve: context cap
    prompt_tokens: int = 1024  # serve: mean prompt length (a replayed request trace's own lengths replace it, per round)
    output_tokens: int = 256  # serve: mean generated tokens (likewise)
    slo_ttft_s: float = 2.0  # serve: time-to-first-token target
    slo_tpot_s: float = 0.1  # serve: time-per-output-token target
    # serve: the KV cache's format: "auto" follows the attention group's precision (FP8 attention
    # keeps an FP8 cache, as TensorRT-LLM's FP8 engines do; weight-only formats a BF16 one), or a
    # fixed "bf16" / "fp8" (vLLM's --kv-cache-dtype, whose "auto" is the checkpoint's BF16)
    kv_cache_dtype: str = "auto"
    # serve: the forward-pass size (tokens) at or above which the engine's weight-only (INT8/INT4)
    # kernel converts the whole weight to BF16 and runs a BF16 GEMM (vLLM's AWQ layer at 256);
    # 0 = never (fused mixed-input GEMMs, as TensorRT-LLM's)
    weight_only_dequant_tokens: int = 0
    trace: str | None = None  # trace file (a path, or a name in the traces folder) when pattern == "trace"
    burst_factor: float = 4.0  # bursty: arrival rate in a burst over the calm rate
    burst_fraction: float = 0.2  # bursty: long-run fraction of rounds spent in a burst
    burst_rounds: float = 3.0  # bursty: mean length of a burst, in rounds
    burst_shared: bool = False  # bursty: follow the one on/off chain shared by all such tenants
    diurnal_amplitude: float = 0.5  # diurnal: rate swings by +- this fraction of the mean
    diurnal_period_s: float = 86_400.0  # diurnal: period of the swing
    trace_offset_s: float = 0.0  # trace: replay starts this many seconds into the trace
    trace_speedup: float = 1.0  # trace: trace seconds replayed per simulated second
    trace_shard: int = 0  # trace: replay rows i with i % trace_shards == trace_shard
    trace_shards: int = 1

    def __post_init__(self):
        _choice(self, "pattern", ("poisson", "bursty", "diurnal", "trace"))
        _num(self, "rate", 0.0)
        _num(self, "job_tokens", 0.0, lo_open=True)
        _int(self, "seq_len", 1, 1 << 20)
        _int(self, "prompt_tokens", 1, 1 << 20)
        _int(self, "output_tokens", 1, 1 << 20)
        _num(self, "slo_ttft_s", 0.0, lo_open=True)
        _num(self, "slo_tpot_s", 0.0, lo_open=True)
        _choice(self, "kv_cache_dtype", ("auto", "bf16", "fp8"))
        _int(self, "weight_only_dequant_tokens", 0, 1 << 20)
        _num(self, "burst_factor", 1.0)
        _num(self, "burst_fraction", 0.0, 1.0, lo_open=True)
        if self.burst_fraction >= 1.0:
            raise ConfigError("burst_fraction", self.burst_fraction, "a number in (0, 1)")
        _num(self, "burst_rounds", 1.0)
        _bool(self, "burst_shared")
        _num(self, "diurnal_amplitude", 0.0, 1.0)
        _num(self, "diurnal_period_s", 0.0, lo_open=True)
        _num(self, "trace_offset_s", 0.0)
        _num(self, "trace_speedup", 0.0, lo_open=True)
        _int(self, "trace_shards", 1, 1_000_000)
        _int(self, "trace_shard", 0, self.trace_shards - 1)
        if self.pattern == "trace" and not self.trace:
            raise ConfigError("trace", self.trace, "a trace file path when pattern is 'trace'")
        if self.trace is not None and not isinstance(self.trace, str):
            raise ConfigError("trace", self.trace, "a file path string or null")


@dataclass(frozen=True)
class TenantSpec:
    """One tenant: a team running a model on one GPU type."""

    kind: str = "train"  # train | serve
    model: str = "llama-3.1-8b"
    gpu_type: str = "h100-sxm"
    budget: float = 5_000.0  # USD for the episode
    priority: float = 1.0  # weight in welfare and in the strict-priority arbiter
    max_gpus: int = 8  # the most GPUs the tenant can use (its demand)
    flash_attention: bool = True  # attention scores are not stored (Dao et al. 2022)
    #: train: false (none), true or "full" (keep each block's input, recompute the block) or
    #: "selective" (torchtitan's per-op policy: keep every other matmul's and attention's output)
    activation_checkpointing: bool | str = False
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    def __post_init__(self):
        _choice(self, "kind", ("train", "serve"))
        _model_key("model", self.model)
        _gpu_key("gpu_type", self.gpu_type)
        _num(self, "budget", 0.0, lo_open=True)
        _num(self, "priority", 0.0, lo_open=True)
        _int(self, "max_gpus", 1, 4096)
        _bool(self, "flash_attention")
        v = self.activation_checkpointing
        if not isinstance(v, bool) and v not in ("none", "full", "selective"):
            raise ConfigError("activation_checkpointing", v, "true, false, 'none', 'full' or 'selective'")
        if not isinstance(self.workload, WorkloadSpec):
            raise ConfigError("workload", self.workload, "a WorkloadSpec")
        m = catalog.model(self.model)
        if self.kind == "serve" and self.workload.prompt_tokens + self.workload.output_tokens > m.max_seq:
            raise ConfigError(
                "workload.prompt_tokens",
                self.workload.prompt_tokens,
                f"prompt_tokens + output_tokens <= {m.max_seq} (the context of {self.model})",
            )
        if self.kind == "train" and self.workload.seq_len > m.max_seq:
            raise ConfigError("workload.seq_len", self.workload.seq_len, f"at most {m.max_seq} (the context of {self.model})")


@dataclass(frozen=True)
class ArbiterSpec:
    """How requests are cleared. ``bid_levels`` are multipliers of the GPU type's list price."""

    mechanism: str = "maxmin"
    bid_levels: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0)
    reserve_price: float = 0.5  # a mechanism with a reserve (auction): the lowest bid that asks, as a multiplier of list price

    def __post_init__(self):
        _choice(self, "mechanism", tuple(MECHANISM_REGISTRY))  # the built-in ones and any registered since
        _tuple(self, "bid_levels", _pos_float, 1, 64)
        if list(self.bid_levels) != sorted(self.bid_levels):
            raise ConfigError("bid_levels", self.bid_levels, "levels in increasing order")
        _num(self, "reserve_price", 0.0)


@dataclass(frozen=True)
class SafetySpec:
    """The central safety check. ``veto`` refuses an unsafe config (the tenant runs nothing);
    ``project`` downgrades it to the nearest safe one."""

    mode: str = "project"

    def __post_init__(self):
        _choice(self, "mode", ("veto", "project"))


REWARD_SCHEMES = ("local", "global", "mixed", "difference", "difference_default", "shapley")


@dataclass(frozen=True)
class RewardSpec:
    """Credit assignment and the utility that feeds it (docs/model.md §8).

    ``degenerate_floor`` and ``starvation_penalty`` shape the reward with the fairness
    detector's verdicts (the detector's own knobs are :class:`FairnessSpec`); they stay here
    because they are reward shaping, which the next restructuring gives to ``fleet_marl.credit``.
    """

    scheme: str = "difference"
    mixed_weight: float = 0.5  # mixed = w * local + (1 - w) * global
    shapley_samples: int = 64  # sampled permutations when tenants > 8
    #: the schemes computed and reported each round: None (default) the chosen one and those that
    #: need no counterfactual rows (local, global, mixed: free once the round is played); True
    #: every scheme, difference_default and shapley included (their rows cost a kernel row each);
    #: False the chosen one only
    compute_all: bool | None = None
    cost_weight: float = 1.0  # weight of money spent (per round budget) in utility
    degenerate_floor: float = 0.01  # reward of a degenerate strategy
    starvation_penalty: float = 0.0  # subtracted from the global reward per starved tenant

    def __post_init__(self):
        _choice(self, "scheme", REWARD_SCHEMES)
        _num(self, "mixed_weight", 0.0, 1.0)
        _int(self, "shapley_samples", 1, 1_000_000)
        if self.compute_all is not None and not isinstance(self.compute_all, bool):
            raise ConfigError(
                "compute_all",
                self.compute_all,
                "true (every scheme), false (the chosen one) or null (the chosen one and local, global, mixed)",
            )
        _num(self, "cost_weight", 0.0)
        _num(self, "degenerate_floor", -1e6, 1e6)
        _num(self, "starvation_penalty", 0.0)


@dataclass(frozen=True)
class FairnessSpec:
    """The fairness detector (``fleet_marl.fairness``, docs/environment.md): when a tenant is
    starved, and when holding GPUs is hoarding."""

    starvation_fraction: float = 0.5  # a round is short below this fraction of min(fair share, request)
    starvation_rounds: int = 3  # starved after this many consecutive short rounds
    hoard_share: float = 0.25  # degenerate: holding more than this share of its GPU pool while another tenant starves

    def __post_init__(self):
        _num(self, "starvation_fraction", 0.0, 1.0)
        _int(self, "starvation_rounds", 1, 1_000_000)
        _num(self, "hoard_share", 0.0, 1.0)


#: The most arrivals a tenant may expect in one round (``rate`` x ``round_seconds``, per hour for
#: trainers): 2^53, beyond which the Poisson draw's 64-bit count overflows and a float no longer
#: counts jobs one by one.
MAX_ARRIVALS_PER_ROUND = float(2**53)

#: Keys that moved from ``reward:`` (RewardSpec) to ``fairness:`` (FairnessSpec). The old
#: place still loads, with a ``DeprecationWarning``; a key given in both places is an error.
MOVED_TO_FAIRNESS = ("starvation_fraction", "starvation_rounds", "hoard_share")


@dataclass(frozen=True)
class FleetConfig:
    """The whole scenario: the cluster, the tenants and the rules."""

    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    tenants: tuple[TenantSpec, ...] = (TenantSpec(), TenantSpec(kind="serve"))
    arbiter: ArbiterSpec = field(default_factory=ArbiterSpec)
    safety: SafetySpec = field(default_factory=SafetySpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    fairness: FairnessSpec = field(default_factory=FairnessSpec)
    max_cycles: int = 100

    def __post_init__(self):
        for name, cls in (
            ("cluster", ClusterSpec),
            ("arbiter", ArbiterSpec),
            ("safety", SafetySpec),
            ("reward", RewardSpec),
            ("fairness", FairnessSpec),
        ):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, getattr(self, name), f"a {cls.__name__}")

        def tenant(path, t):
            if not isinstance(t, TenantSpec):
                raise ConfigError(path, t, "a TenantSpec")
            return t

        _tuple(self, "tenants", tenant, 1, 4096)
        _int(self, "max_cycles", 1, 10_000_000)
        cl = self.cluster
        for r in range(0, cl.num_nodes, cl.nodes_per_rack):
            idle = sum(catalog.gpu(g).idle_w for g in cl.gpu_types[r : r + cl.nodes_per_rack]) * cl.gpus_per_node
            if cl.rack_power_cap_w <= idle:
                raise ConfigError(
                    "cluster.rack_power_cap_w",
                    cl.rack_power_cap_w,
                    f"a cap above the idle power of rack {r // cl.nodes_per_rack} ({idle:g} W), or nothing in it can ever run",
                )
        if self.arbiter.reserve_price > self.arbiter.bid_levels[-1]:
            raise ConfigError(
                "arbiter.reserve_price",
                self.arbiter.reserve_price,
                f"at most the highest bid level ({self.arbiter.bid_levels[-1]:g}), or no bid can ever win",
            )
        pools = self.cluster.pools
        for i, t in enumerate(self.tenants):
            per_round = t.workload.rate * self.cluster.round_seconds / (3600.0 if t.kind == "train" else 1.0)
            if per_round > MAX_ARRIVALS_PER_ROUND:
                raise ConfigError(
                    f"tenants[{i}].workload.rate",
                    t.workload.rate,
                    f"at most {MAX_ARRIVALS_PER_ROUND / self.cluster.round_seconds * (3600.0 if t.kind == 'train' else 1.0):g} "
                    f"with rounds of {self.cluster.round_seconds:g} s: at most {MAX_ARRIVALS_PER_ROUND:g} arrivals a round "
                    "(the arrival draw counts them in 64-bit integers)",
                )
            if t.gpu_type not in pools:
                raise ConfigError(f"tenants[{i}].gpu_type", t.gpu_type, f"a GPU type present in the cluster: {', '.join(pools)}")

    # --- dict / YAML round trip ---------------------------------------------------------

    @classmethod
    def migrate(cls, data: dict, path: str = "") -> dict:
        """``data`` (a FleetConfig mapping) with the keys of ``MOVED_TO_FAIRNESS`` found under
        ``reward`` moved to ``fairness`` (a new dict; ``data`` is not changed), with a
        ``DeprecationWarning`` each; a key in both places is a :class:`ConfigError`. The
        ``backend`` key of fleet_marl 0.2 is dropped with a ``DeprecationWarning``: the kernel
        is always the compiled one now."""
        if "backend" in data:
            p = f"{path}." if path else ""
            deprecated(f"config key {p}backend is deprecated and ignored: the kernel is always compiled (numba) since fleet_marl 0.3")
            data = {k: v for k, v in data.items() if k != "backend"}
        reward = data.get("reward")
        moved = [k for k in MOVED_TO_FAIRNESS if isinstance(reward, dict) and k in reward]
        if not moved or not isinstance(reward, dict):  # (moved is empty unless reward is a dict)
            return data
        p = f"{path}." if path else ""
        fair = data.get("fairness")
        fair = {} if fair is None else fair
        data, reward = dict(data), dict(reward)
        fair = to_dict(fair) if isinstance(fair, FairnessSpec) else dict(fair) if isinstance(fair, dict) else fair
        if not isinstance(fair, dict):
            return data  # from_dict names the bad fairness field
        for k in moved:
            if k in fair:
                raise ConfigError(
                    f"{p}reward.{k}",
                    reward[k],
                    f"no value: {k} moved to {p}fairness.{k}, which is given too ({short_repr(fair[k])}); give it once, as fairness.{k}",
                )
            deprecated(
                f"config key {p}reward.{k} is deprecated: use {p}fairness.{k} (the fairness detector's knobs moved from RewardSpec to FairnessSpec)"
            )
            fair[k] = reward.pop(k)
        data["reward"], data["fairness"] = reward, fair
        return data

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FleetConfig:
        return from_dict(cls, data)

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_yaml(cls, source: str | Path) -> FleetConfig:
        """Load from a YAML file path, or from YAML text (anything containing a newline)."""
        if isinstance(source, Path) or "\n" not in str(source):
            text = Path(source).read_text(encoding="utf-8")
        else:
            text = str(source)
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ConfigError("<root>", data, "a mapping of FleetConfig fields")
        return cls.from_dict(data)


__all__ = [
    "MAX_ARRIVALS_PER_ROUND",
    "MECHANISMS",
    "MOVED_TO_FAIRNESS",
    "REWARD_SCHEMES",
    "ArbiterSpec",
    "ClusterSpec",
    "FairnessSpec",
    "FleetConfig",
    "RewardSpec",
    "SafetySpec",
    "TenantSpec",
    "WorkloadSpec",
]

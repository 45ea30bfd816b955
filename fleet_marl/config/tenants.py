"""The tenants' specs: :class:`TenantSpec` (a team running a model on one GPU type) and its
:class:`WorkloadSpec` (the jobs a trainer runs, the requests a server receives)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet_marl import catalog
from fleet_marl.config.checks import ConfigError, _bool, _choice, _gpu_key, _int, _model_key, _num


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
    # train: a synchronous checkpoint every this many seconds of training (0 = none); read with
    # coupling.contention on, its writes share the cluster's storage (docs/model.md section 12.1)
    checkpoint_interval_s: float = 0.0
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
        _num(self, "checkpoint_interval_s", 0.0)
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
    #: train: the tensor-parallel degree of its layout, a power of two that divides the model's
    #: attention heads (Megatron-LM splits the heads over the group); each group sits inside one
    #: node and data parallel (FSDP) runs across the groups. Read with ``coupling.gang`` on
    #: (docs/model.md section 12.4); a server's degree follows from the GPUs it gets, so it stays 1
    tensor_parallel: int = 1
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
        _int(self, "tensor_parallel", 1, 1024)
        tp = self.tensor_parallel
        if tp & (tp - 1) or m.heads % tp:
            raise ConfigError("tensor_parallel", tp, f"a power of two that divides the {m.heads} attention heads of {self.model}")
        if self.kind == "serve" and tp != 1:
            raise ConfigError("tensor_parallel", tp, "1 for a serving tenant (its replica's degree follows from the GPUs it gets)")
        if self.kind == "train" and self.workload.seq_len > m.max_seq:
            raise ConfigError("workload.seq_len", self.workload.seq_len, f"at most {m.max_seq} (the context of {self.model})")


__all__ = ["TenantSpec", "WorkloadSpec"]

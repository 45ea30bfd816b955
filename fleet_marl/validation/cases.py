"""The published measurements of ``measurements.yaml``, read into :class:`Case` rows.

Each row keeps what the source says (value, unit, source, hardware, model, parallelism,
precision, batch, lengths, activation checkpointing) and the setting the kernel is run at:
the catalog GPU, the architecture (a catalog model, or the published dimensions of one that is
not in the catalog), the precision map, the batch and the lengths. How a published setting
becomes a kernel setting (the batch of a throughput run, the concurrency of a latency run at a
request rate) is in ``docs/validation.md``; a measurement the kernel cannot represent keeps
its row and says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from fleet_marl import catalog
from fleet_marl.catalog import ModelArch
from fleet_marl.kernel.activations import LOSS_BYTES

PATH = Path(__file__).resolve().parent / "measurements.yaml"
#: The coupling mechanisms' measurements, a file each beside :data:`PATH`
#: (``measurements_<mechanism>.yaml``, the same format); the shipped set is all of them.
COUPLED_GLOB = "measurements_*.yaml"

#: Measured quantity -> the group its error counts in (the targets are per group).
QUANTITY_GROUP = {
    "train_tokens_per_s_per_gpu": "training throughput",
    "train_mfu": "training throughput",
    "train_memory_gib_per_gpu": "training memory",
    "serve_throughput_tokens_per_s": "serving throughput",
    "ttft_ms": "TTFT",
    "queue_ttft_ms": "queueing latency",  # mean TTFT at a request rate near the engine's capacity
    "tpot_ms": "TPOT",
    "fp8_gemm_speedup": "FP8 GEMM speedup",
    # the coupling mechanisms' quantities (docs/model.md section 12), each predicted by its own
    # module (predict.COUPLED_PREDICTORS) from the case's own block of its measurements file
    "contention_slowdown": "contention slowdown",  # a job's step time sharing links or storage, over alone
    "checkpoint_write_s": "checkpoint and restart time",  # seconds a trainer stops to save a checkpoint
    "restart_s": "checkpoint and restart time",  # seconds from a restart to training again (init and load)
    "power_capped_throughput_ratio": "power-capped throughput",  # throughput at a power limit over at the TDP
}
GROUP_ORDER = tuple(dict.fromkeys(QUANTITY_GROUP.values()))
#: The groups of the coupling mechanisms (issue 47): judged together as well as each on its own
#: (``report.COUPLING_TARGETS``).
COUPLING_GROUPS = ("queueing latency", "contention slowdown", "checkpoint and restart time", "power-capped throughput")
#: Bytes per gradient element that an FSDP reduce-scatter moves under Composer's
#: ``fsdp_config.mixed_precision`` presets (``training.fsdp_mixed_precision``, llm-foundry's "MP Mode"
#: column): ``DEFAULT`` reduces in FP32 (mosaicml/composer v0.16.4,
#: ``composer/trainer/mosaic_fsdp_utils.py``, ``get_mixed_precision``: ``param_dtype =
#: _get_torch_dtype(precision)``, ``reduce_dtype = torch.float32``; v0.16.3 and earlier left it to
#: the BF16 ``param_dtype``), ``PURE`` in the gradients' own BF16 (0: the kernel's bytes).
#: llm-foundry's ``setup.py`` pins ``mosaicml>=0.16.4,<0.17`` at b2a43a1477 (#543, 2023-10-19), the
#: commit that published its H100 rows and its DEFAULT A100 rows.
FSDP_REDUCE_BYTES = {"DEFAULT": 4.0, "PURE": 0.0}


def _mpt(h: int, heads: int, layers: int) -> dict[str, Any]:
    """MPT (llm-foundry ``mpt-<size>.yaml``): multi-head attention, GeLU MLP of 4h, LayerNorm
    without biases, tied embeddings, ALiBi (no position table), vocabulary 50368."""
    return dict(
        layers=layers, hidden=h, heads=heads, kv_heads=heads, ffn=4 * h, vocab=50368, tied_embeddings=True, mlp="dense", norm="layernorm"
    )


def _gpt(h: int, heads: int, layers: int, vocab: int, positions: int) -> dict[str, Any]:
    """A GPT-2-style transformer (Megatron-LM's GPT, BERT): multi-head attention, GeLU MLP of 4h,
    LayerNorm, biases on every linear layer, learned positions up to ``positions`` (its longest
    sequence), tied embeddings."""
    return dict(
        layers=layers,
        hidden=h,
        heads=heads,
        kv_heads=heads,
        ffn=4 * h,
        vocab=vocab,
        tied_embeddings=True,
        mlp="dense",
        norm="layernorm",
        qkv_bias=True,
        linear_bias=True,
        learned_positions=positions,
        max_seq=positions,
    )


#: Published architectures that are not in the catalog, from their ``config.json`` or training
#: YAML (the ``model_arch`` of the measurements).
EXTRA_MODELS: dict[str, dict[str, Any]] = {
    "mpt-125m": _mpt(768, 12, 12),
    "mpt-1b": _mpt(2048, 16, 24),
    "mpt-3b": _mpt(2560, 20, 32),
    "mpt-7b": _mpt(4096, 32, 32),
    "mpt-13b": _mpt(5120, 40, 40),
    "mpt-70b": _mpt(8192, 64, 80),
    # GPT-J 6B, MLPerf Inference's GPT-J (EleutherAI/gpt-j-6b config.json: n_layer 28, n_embd 4096,
    # n_head 16, n_inner null = 4 x n_embd, vocab_size 50400, gelu_new, rotary, tie_word_embeddings
    # false; its model card: "n_parameters 6,053,381,344"); its MLP and head biases
    # are left out (the count comes 0.05 % short).
    "gpt-j-6b": dict(
        layers=28, hidden=4096, heads=16, kv_heads=16, ffn=16384, vocab=50400, tied_embeddings=False, mlp="dense", norm="layernorm"
    ),
    "llama-2-7b": dict(
        layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, tied_embeddings=False, mlp="gated", norm="rmsnorm"
    ),
    "llama-2-70b": dict(
        layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000, tied_embeddings=False, mlp="gated", norm="rmsnorm"
    ),
    "llama-3.2-3b": dict(
        layers=28, hidden=3072, heads=24, kv_heads=8, ffn=8192, vocab=128256, tied_embeddings=True, mlp="gated", norm="rmsnorm"
    ),
    # Megatron-LM's GPT (examples/pretrain_gpt_distributed.sh) at GPT-2 XL's shape, as DLRover's
    # Flash Checkpoint blog runs it: --num-layers 48 --hidden-size 1600 --num-attention-heads 16
    # --max-position-embeddings 1024, GPT-2's BPE vocabulary (50257) padded by Megatron to a
    # multiple of 128 x TP 8 (51200); LayerNorm, biases, GeLU MLP of 4h, tied embeddings.
    "megatron-gpt-1.5b": _gpt(1600, 16, 48, 51200, 1024),
    # Megatron-Turing NLG 530B (Smith et al. 2022, arXiv 2201.11990, Table 1: 105 layers, hidden
    # 20480, 128 heads, sequence 2048; GPT-2's BPE vocabulary, 50257), the model of GEMINI's
    # (SOSP 2023) checkpoint-time example.
    "mt-nlg-530b": _gpt(20480, 128, 105, 50257, 2048),
    # Crux's (SIGCOMM 2024, section 2.2) GPT: "the GPT-3 parameters from [Megatron-LM's
    # examples/gpt3] ... we modify the number of transformer layers from 96 to 24, and hidden size
    # from 12288 to 1024"; its heads are not published (GPT-3's 96 do not divide 1024): 16 of 64,
    # GPT-3 Medium's at the same 24 layers and width (Brown et al. 2020, Table 2.1); GeLU MLP of
    # 4h, LayerNorm, biases, learned positions of 2048, tied embeddings, GPT-2's BPE vocabulary
    "crux-gpt3-24l-1024h": _gpt(1024, 16, 24, 50257, 2048),
    # BERT-large (Devlin et al. 2019, arXiv 1810.04805: L=24, H=1024, A=16, FFN 4H, WordPiece
    # vocabulary of 30522, learned positions of 512, biases, GeLU, LayerNorm; the MLM decoder tied
    # to the embeddings), the size assumed for Crux's unnamed "BERT"
    "bert-large": _gpt(1024, 16, 24, 30522, 512),
}


def arch(name: str) -> ModelArch:
    """The architecture of model ``name``: the catalog's, else one of :data:`EXTRA_MODELS`."""
    if name in catalog.models():
        return catalog.model(name)
    if name not in EXTRA_MODELS:
        raise KeyError(name)
    kw: dict[str, Any] = dict(
        qkv_bias=False, linear_bias=False, learned_positions=0, max_seq=1 << 20, published_params=0.0, source="measurements.yaml"
    )
    return ModelArch(name=name, **(kw | EXTRA_MODELS[name]))  # an entry may set the biases and position table


@dataclass(frozen=True)
class Case:
    """One published measurement and the kernel setting it is compared at."""

    id: str
    quantity: str
    value: float
    unit: str
    source: str  # URL, or repository@commit:path
    gpu: str  # catalog GPU type
    gpu_as_published: str
    gpus: int
    model: str
    tp: int
    precision: str  # as published
    prec_map: dict[str, str]  # per layer group, as the kernel runs it
    batch: object  # an int, or a rule ("fit", "qps:<rate>") the predictor resolves
    seq_len: int = 0
    prompt: float = 0.0
    output: float = 0.0
    checkpointing: str = "none"
    gemm: tuple[int, int, int] = (0, 0, 0)
    pure_bf16: bool = False  # bf16 weights and optimizer states, no fp32 master copy (torchtune)
    representable: bool = True
    reason: str = ""
    max_batch: int = 0  # requests in the run (caps a throughput run's batch); 0 = no cap
    kv_free_fraction: float = 0.0  # stated share of the memory left after the weights that the KV cache may take; 0 = the kernel's rule
    kv_cache_dtype: str = "auto"  # the engine's KV-cache format where it is not the attention's (WorkloadSpec.kv_cache_dtype)
    dequant_tokens: int = (
        0  # pass size from which the engine converts weight-only weights to BF16 (WorkloadSpec.weight_only_dequant_tokens)
    )
    power_limit_w: float = 0.0  # the GPUs' power limit as published; 0 = the catalog GPU's TDP
    hbm_tbs: float = 0.0  # HBM bandwidth as published (TB/s); 0 = the catalog GPU's
    loss: str = "eager"  # the loss's implementation (a key of activations.LOSS_BYTES), as the source runs it
    burst: bool = False  # every request sent at once (a rate of "INF", offline): see predict.burst_latencies
    grad_accum: int = 1  # batches a training step accumulates gradients over before its optimizer step, as published
    attn_impl: str = "flash"  # the attention kernel as the source runs it: "triton" (llm-foundry's FlashAttention-1-class Triton kernel, cost.FA2_OVER_FA1) or "flash"
    reduce_bytes: float = 0.0  # bytes per gradient element of the FSDP reduce-scatter (FSDP_REDUCE_BYTES); 0 = the gradients' own
    total_tokens: bool = False  # the throughput counts prompt and output tokens (serving.tokens_counted: total), not output tokens only
    framework: str = ""  # the serving engine as published (serving.framework, up to its parenthesis); "" for training and GEMM rows
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def group(self) -> str:
        return QUANTITY_GROUP[self.quantity]


def _grad_accum(tr: dict, par: dict, batch: object) -> int:
    """Micro-batches per optimizer step: as stated (``training.grad_accum``, or the row's GA column
    in ``parallelism.grad_accum``), else Megatron's ``num_microbatches = global_batch_size /
    (micro_batch_size x dp)`` from the stated batch sizes and data-parallel degree, else 1."""
    stated = _int(tr.get("grad_accum") or par.get("grad_accum"))
    if stated > 0:
        return stated
    gbs, dp = _int(tr.get("global_batch_size")), _int(par.get("dp"))
    if gbs > 0 and dp > 0 and isinstance(batch, int) and batch > 0:
        return max(gbs // (batch * dp), 1)
    return 1


def _attn_impl(x: object, case_id: str) -> str:
    impl = str(x).lower()
    if impl not in ("flash", "triton"):
        raise ValueError(f"{case_id}: training.attn_impl {x!r}; expected 'flash' or 'triton'")
    return impl


def _int(x, default: int = 0) -> int:
    if isinstance(x, bool) or x is None:
        return default
    if isinstance(x, int | float):
        return int(x)
    m = re.match(r"\s*(\d+)", str(x))
    return int(m.group(1)) if m else default


def _precision(text: str) -> tuple[dict[str, str], str]:
    """The layer-group map of a published precision and, if the kernel cannot run it, why."""
    t = text.lower()
    base = dict.fromkeys(catalog.GROUPS, "bf16")
    linear = ("attention", "mlp")
    for key, fmt in (("int4", "int4"), ("w4a16", "int4"), ("int8_weight", "int8"), ("int8wo", "int8"), ("fp8", "fp8")):
        if key in t:
            return base | dict.fromkeys(linear, fmt), ""
    if t.startswith("int8") or "w8a8" in t:
        return base, "W8A8 INT8 GEMMs are not modelled (catalog int8 is weight-only)"
    return base, ""


def _fraction(x, case_id: str) -> float:
    """A stated KV-cache memory fraction (TensorRT-LLM's ``--kv_cache_free_gpu_mem_fraction``), 0 if none."""
    if x is None:
        return 0.0
    if isinstance(x, bool) or not isinstance(x, int | float) or not 0.0 < float(x) <= 1.0:
        raise ValueError(f"{case_id}: kv_cache_free_gpu_mem_fraction must be a number in (0, 1], got {x!r}")
    return float(x)


def _kv_dtype(x, case_id: str) -> str:
    """A stated KV-cache format: ``auto`` (the attention group's precision), ``bf16`` or ``fp8``."""
    if x not in ("auto", "bf16", "fp8"):
        raise ValueError(f"{case_id}: kv_cache_dtype must be one of 'auto', 'bf16', 'fp8', got {x!r}")
    return str(x)


def _dequant_tokens(x, case_id: str) -> int:
    """A stated pass size from which the engine converts weight-only weights to BF16 (0: never)."""
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{case_id}: weight_only_dequant_tokens must be an integer >= 0, got {x!r}")
    return x


def _source(src: dict) -> str:
    if src.get("repo") and src.get("commit"):
        return f"{src['repo']}@{str(src['commit'])[:8]}:{src.get('path', '')}"
    return str(src.get("url", ""))


def _serving_batch(sv: dict, quantity: str) -> tuple[object, int]:
    """(batch rule, request cap) of a serving measurement: a stated batch or concurrency; the
    concurrency Little's law gives at a stated request rate; else the largest batch that fits."""
    cap = _int(sv.get("num_requests"))
    for key in ("concurrency", "batch_size"):
        v = sv.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v, cap
        if isinstance(v, str) and re.match(r"\s*\d+", v):
            return _int(v), cap
    rate = str(sv.get("request_rate") or "")
    m = re.match(r"\s*([\d.]+)\s*QPS", rate)
    if m:
        return f"qps:{m.group(1)}", cap
    return "fit", cap


def _case(e: dict) -> Case:
    hw, par = e["hardware"], e.get("parallelism") or {}
    tr, sv = e.get("training") or {}, e.get("serving") or {}
    prec_map, prec_reason = _precision(str(e["precision"]))
    model = str(e["model"])
    reason = "" if e.get("representable") else str(e.get("representable_reason", "not representable"))
    if not reason and prec_reason:
        reason = prec_reason
    try:
        arch(model)
    except KeyError:
        if not reason and e["quantity"] != "fp8_gemm_speedup":
            reason = f"architecture {model!r} is not published in enough detail"
    if e["quantity"] == "fp8_gemm_speedup":
        g = e.get("gemm") or {}
        gemm = (_int(g.get("M")), _int(g.get("K")), _int(g.get("N")))
    else:
        gemm = (0, 0, 0)
    batch: object = 1
    cap = 0
    if tr:
        batch = _int(tr.get("local_batch_size") or tr.get("micro_batch_size"), 1)
    elif sv:
        batch, cap = _serving_batch(sv, e["quantity"])
    ckpt = str(tr.get("activation_checkpointing", "none")).lower()
    loss = str(tr.get("loss_implementation") or "eager")
    if loss not in LOSS_BYTES:
        raise ValueError(f"{e['id']}: training.loss_implementation {loss!r}; expected one of {', '.join(map(repr, LOSS_BYTES))}")
    return Case(
        id=e["id"],
        quantity=e["quantity"],
        value=float(e["value"]),
        unit=str(e.get("unit", "")),
        source=_source(e.get("source") or {}),
        gpu=str(hw["gpu"]),
        gpu_as_published=str(hw.get("gpu_as_published", hw["gpu"])),
        gpus=_int(hw.get("count"), 1),
        model=model,
        tp=_int(par.get("tp"), 1),
        precision=str(e["precision"]),
        prec_map=prec_map,
        batch=batch,
        seq_len=_int(tr.get("seq_len")),
        prompt=float(_int(sv.get("input_len"), 1)),
        output=float(_int(sv.get("output_len"), 1)),
        checkpointing="full" if ckpt == "full" else ("selective" if ckpt == "selective" else "none"),
        gemm=gemm,
        pure_bf16="pure bf16" in str(e["precision"]).lower(),
        representable=not reason,
        reason=reason,
        max_batch=cap,
        kv_free_fraction=_fraction(sv.get("kv_cache_free_gpu_mem_fraction"), e["id"]),
        kv_cache_dtype=_kv_dtype(sv.get("kv_cache_dtype", "auto"), e["id"]),
        dequant_tokens=_dequant_tokens(sv.get("weight_only_dequant_tokens", 0), e["id"]),
        power_limit_w=float(hw.get("power_limit_w") or 0.0),
        hbm_tbs=float(hw.get("memory_bandwidth_tbs") or 0.0),
        loss=loss,
        burst=bool(re.match(r"\s*inf|.*all at once", str(sv.get("request_rate") or ""), re.IGNORECASE)),
        grad_accum=_grad_accum(tr, par, batch),
        attn_impl=_attn_impl(tr.get("attn_impl", "flash"), e["id"]),
        reduce_bytes=FSDP_REDUCE_BYTES[str(tr.get("fsdp_mixed_precision", "PURE")).upper()],
        total_tokens=_tokens_counted(sv.get("tokens_counted", "output"), e["id"]),
        framework=str(sv.get("framework") or "").split(" (")[0].strip(),
        extra={"notes": e.get("notes", ""), "parallelism": par, "entry": e},
    )


def _tokens_counted(v, cid: str) -> bool:
    """Whether a serving row counts prompt and output tokens (``total``, as vLLM's ``bench
    throughput`` prints its "total tokens/s") or output tokens only (``output``, the default)."""
    if str(v) not in ("output", "total"):
        raise ValueError(f"{cid}: serving.tokens_counted {v!r}; expected 'output' or 'total'")
    return str(v) == "total"


def shipped_paths() -> tuple[Path, ...]:
    """The shipped measurement files: :data:`PATH`, then the coupling mechanisms' (:data:`COUPLED_GLOB`)."""
    return (PATH, *sorted(PATH.parent.glob(COUPLED_GLOB)))


@cache
def load(path: str | None = None) -> tuple[Case, ...]:
    """Every measurement of ``path`` (default: every shipped file, :func:`shipped_paths`) as a Case."""
    out: list[Case] = []
    for p in [path] if path else shipped_paths():
        with open(p, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
        if not isinstance(raw, list):
            raise ValueError(f"{p}: expected a list of measurements")
        out += [_case(e) for e in raw]
    ids = [c.id for c in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"measurement ids appear twice: {', '.join(dup)}")
    return tuple(out)


__all__ = [
    "COUPLED_GLOB",
    "COUPLING_GROUPS",
    "EXTRA_MODELS",
    "GROUP_ORDER",
    "PATH",
    "QUANTITY_GROUP",
    "Case",
    "arch",
    "load",
    "shipped_paths",
]

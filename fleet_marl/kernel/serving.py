"""A serving engine's forward pass: its fixed costs per pass (the engine's own work, the stalls at
its kernels' boundaries, one all-reduce's latency) and the HBM bytes per token of its
memory-bound elementwise kernels, whole and the part every GPU of a tensor-parallel replica runs
whole. Constants and functions of a model's dimensions only; ``cost`` re-exports them and turns
them into stage 1's tenant terms, the roofline (``roofline.roofline``) prices them.
Every number is cited in ``docs/model.md`` section 5.
"""

from __future__ import annotations

from fleet_marl.catalog import ModelArch

#: Seconds a serving engine spends per forward pass (one prefill, one decode step) outside the
#: GPU's work: scheduling, sampling and detokenising. vLLM v0.6 measured its CPU overhead at up
#: to 62 % of a decode step of Llama-3-8B on one H100 before v0.6 cut it (vLLM blog, 2024-09-05,
#: "vLLM v0.6.0: 2.7x throughput improvement and 5x latency reduction"). 1 ms, an assumption.
#: The kernels' own launches and stalls are :data:`KERNEL_STALL_S`, apart from it.
STEP_OVERHEAD_S = 1e-3
#: Seconds of a serving forward pass's memory pipeline stalled at each kernel boundary, when no
#: weight is being loaded: "even with an optimistic 5 us of stalling per kernel (counting
#: stragglers, kernel launch, and memory latencies)" (Spector, Juravsky et al., "Look Ma, No
#: Bubbles! Designing a Low-Latency Megakernel for Llama-1B", Hazy Research blog, 2025-05-27;
#: the same post measures a kernel's launch cost under CUDA graphs at about 1.3 us on an H100).
KERNEL_STALL_S = 5e-6
#: Kernels a serving engine launches per decoder layer of a forward pass, counted from vLLM's
#: Llama decoder layer (vllm-project/vllm@0035bdf2, vllm/model_executor/models/llama.py): the
#: fused residual-add + RMSNorm, the qkv GEMM, rotary, the KV-cache write and the attention, the
#: o GEMM, the second fused add + RMSNorm, the gate_up GEMM, SiluAndMul and the down GEMM.
KERNELS_PER_LAYER = 10
#: Seconds one tensor-parallel all-reduce takes at decode sizes (10s-100s of kB), whatever its
#: bytes: an 8x H100 HGX node, NCCL 2.20.5, nccl-tests ``all_reduce_perf`` under CUDA graphs, "When
#: I run with 2 GPUs the latency is approximately 6us" (NVIDIA/nccl issue #1259, 2024-04-22). Two
#: per layer per forward pass (Megatron tensor parallelism), on the critical path. The latency of
#: the serving engines' custom one-shot all-reduce on NVLink (``roofline.allreduce_seconds``);
#: larger messages go through NCCL, whose line is fitted to a published sweep per GPU type
#: (``catalog.GPUType.allreduce_fit``).
TP_ALLREDUCE_LATENCY_S = 6e-6


def serve_elementwise_bytes(m: ModelArch) -> float:
    """HBM bytes per token of a serving forward pass's memory-bound elementwise kernels, BF16
    (2 B a value), derived from vLLM's Llama decoder layer (vllm-project/vllm@0035bdf2,
    ``vllm/model_executor/models/llama.py``, ``LlamaDecoderLayer.forward``, ``LlamaMLP``):
    two fused residual-add + RMSNorms per block, each reading the input and the residual and
    writing both (``4 h`` values); rotary embedding applied in place to q and k (``2 (q + k)``);
    SwiGLU's ``SiluAndMul`` reading gate and up and writing their product (``3 ffn``), or a GeLU
    reading and writing ``ffn`` (``2 ffn``); once after the blocks, the final norm (``4 h``).
    Nothing is kept for a backward pass, so this is a fraction of the training term
    (``EW_BYTES`` x ``activations.activation_bytes``): 5.5 MB against 25 MB per token for Llama-3.1-8B."""
    h, f, q, k = m.hidden, m.ffn, m.heads * m.head_dim, m.kv_heads * m.head_dim
    act = 3 * f if m.mlp == "gated" else 2 * f
    return float(2 * (m.layers * (2 * 4 * h + 2 * (q + k) + act) + 4 * h))


def serve_replicated_bytes(m: ModelArch) -> float:
    """HBM bytes per token of :func:`serve_elementwise_bytes` that every GPU of a
    tensor-parallel replica moves whole, not its ``1 / n`` share: the fused residual-add +
    RMSNorms (two per block, ``4 h`` values each, and the final norm) act on the full hidden
    state, which the row-parallel layers' all-reduce leaves on every GPU. vLLM's decoder layer
    builds them as plain ``RMSNorm(config.hidden_size)`` next to the column- and row-parallel
    linear layers (vllm-project/vllm@0035bdf2, ``vllm/model_executor/models/llama.py``), as
    Megatron-LM does without sequence parallelism ("the layer norms ... are duplicated across
    the tensor model parallel group", Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2);
    rotary, the KV-cache write and the MLP's activation act on the GPU's own heads and columns."""
    h = m.hidden
    return float(2 * (m.layers * 2 * 4 * h + 4 * h))


__all__ = [
    "KERNELS_PER_LAYER",
    "KERNEL_STALL_S",
    "STEP_OVERHEAD_S",
    "TP_ALLREDUCE_LATENCY_S",
    "serve_elementwise_bytes",
    "serve_replicated_bytes",
]

"""The cost model's stage 1: each tenant's bytes, FLOPs and communication volume under its
own precision map, tabulated once per scenario.

These terms depend on nothing but the tenant and its precision map, and each is a sum over
layer groups, so :func:`stage1_tables` tabulates each group's share at each precision once
per scenario and the compiled round (``engine.tenant_terms``) adds them up; the round then
turns them into bytes per GPU, throughput and power on the GPUs it was granted. Every equation is in ``docs/model.md`` with its source. In short:

* training bytes per GPU (FSDP / ZeRO-3 over ``n`` GPUs): weights, gradients, an fp32 master
  copy and two fp32 Adam moments, all sharded ``/ n`` (Rajbhandari et al. 2020); activations
  per sequence ``s h L (34 + 5 a s / h)`` bytes at 16 bit (Korthikanti et al. 2022), without the
  ``5 a s / h`` term under FlashAttention (Dao et al. 2022), recounted per block type
  (``activations.activation_bytes``); with full activation checkpointing each block keeps its input and
  runs its forward again, with selective (per-op) checkpointing it keeps what torchtitan's
  policy saves and recomputes the rest (``activations.selective_checkpointing``);
* serving bytes per GPU (tensor parallel over ``n``): weights ``/ n`` and the KV cache,
  ``2 L kv_heads head_dim`` bytes-of-dtype per token, ``/ min(n, kv_heads)`` (tensor
  parallelism splits KV heads and replicates them when GPUs outnumber them);
* forward FLOPs per token ``2 N + 2 L ctx d_attn`` (Kaplan et al. 2020), x3 for training;
  each layer group runs at the peak of its own precision, so the time per token is
  ``sum_g flops_g / peak(prec_g) / MFU``;
* communication: FSDP moves ``2 W + grad`` bytes per step at ``(n-1)/n`` (all-gather twice,
  reduce-scatter once); tensor parallel serving all-reduces ``2 L`` activations per token at
  ``2 (n-1)/n`` (nccl-tests bus-bandwidth factors); over NVLink inside a node and over the
  network across nodes.

They run once per scenario, in numpy; they never import PettingZoo or Ray.
Stage 2 (bytes per GPU on ``n`` GPUs, the roofline) is ``engine.memory_per_gpu`` and
``engine.roofline``.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import ModelArch
from fleet_marl.kernel.activations import ACT_ATTN, CKPT_FULL, CKPT_NONE, CKPT_SELECTIVE
from fleet_marl.kernel.serving import (
    KERNEL_STALL_S,
    KERNELS_PER_LAYER,
    STEP_OVERHEAD_S,
    TP_ALLREDUCE_LATENCY_S,
    serve_elementwise_bytes,
    serve_replicated_bytes,
)

_G = {g: i for i, g in enumerate(catalog.GROUPS)}
EMB, ATT, MLP, NORM, HEAD = (_G[g] for g in ("embedding", "attention", "mlp", "norm", "head"))
FP32 = catalog.PRECISION_CODE["fp32"]
BF16 = catalog.PRECISION_CODE["bf16"]
#: Bytes of the KV cache by the attention group's precision: weight-only formats keep a BF16 cache.
KV_BYTES = np.where(catalog.WEIGHT_ONLY, 2.0, catalog.PRECISION_BYTES)
#: Gradient bytes by precision: FP32 groups keep FP32 gradients, others BF16 (FP8 GEMMs
#: produce BF16 weight gradients in Transformer Engine and torchao).
GRAD_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == FP32, 4.0, 2.0)
#: Bytes of the fp32 master copy per parameter: none when the group already trains in fp32.
MASTER_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == FP32, 0.0, 4.0)
FP8 = catalog.PRECISION_CODE["fp8"]
#: Bytes per weight and per activation value while TRAINING, by precision: FP8 recipes keep
#: BF16 weights (cast to FP8 per GEMM) and save BF16 activations (Transformer Engine, torchao
#: float8), so an FP8 group trains with BF16 bytes; other formats use their own width.
TRAIN_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == FP8, 2.0, catalog.PRECISION_BYTES)
ADAM_BYTES = 8.0  # two fp32 moments
#: HBM bytes per parameter one optimizer step moves, with FP32 master weights, gradients and
#: moments (4 B an element): PyTorch's AdamW without ``fused`` (pytorch/pytorch@002d2f0b, ``torch/optim/adamw.py``,
#: ``_multi_tensor_adamw``, one kernel per op over all tensors: ``_foreach_lerp_`` of the first
#: moment towards the gradient (read m, g, write m: 12), ``_foreach_mul_`` and ``_foreach_addcmul_``
#: of the second moment (8 + 12), the decoupled weight decay ``_foreach_mul_`` of the weights (8),
#: ``_foreach_sqrt``, ``_foreach_div_`` and ``_foreach_add_`` building the denominator (3 x 8) and
#: ``_foreach_addcdiv_`` of the weights (read w, m, denominator, write w: 16): 80 B; Composer's
#: ``DecoupledAdamW`` (llm-foundry) runs the same ops one tensor at a time, 80 B with its weight
#: decay of 0 (``mul_`` then ``add_`` of the first moment, 20, for the lerp's 12 and no decay) --
#: plus clipping the gradients by their norm (torchtitan ``max_norm`` 1.0, llm-foundry
#: ``gradient_clipping`` 1.0: read each gradient for the norm, read and write it to scale, 12): 92.
#: Memory-bound: at ``CAST_BW_EFF`` of the HBM bandwidth, on each GPU's ``1 / n`` shard (FSDP), once
#: per step, after the backward (``roofline.roofline``). BF16 states move half (the kernel
#: scales it with the optimizer's bytes, ``OPT_STEP_BYTES / ADAM_BYTES`` x the moments' bytes).
OPT_STEP_BYTES = 92.0
#: Bytes per parameter of a training checkpoint, what a restarted trainer reads back: the fp32
#: master weights and Adam's two fp32 moments (ZeRO's K = 12, Rajbhandari et al. 2020); the
#: 16-bit weights and the gradients are rebuilt from them. A server reads its weights at their
#: precision (stage 1's weight bytes).
CKPT_TRAIN_BYTES = 12.0
TRAIN_FLOPS_FACTOR = 3.0  # forward + backward (2x forward) = 6N per token (Kaplan et al. 2020)
#: Achieved share of the tensor-core peak of a large dense GEMM, BF16 and FP8 alike, and of the
#: HBM bandwidth of a pointwise (cast) kernel: torchao's float8 roofline
#: (pytorch/ao, torchao/testing/training/roofline_utils.py: pct_achievable_gemm_tops 0.78,
#: pct_achievable_mem_bw 0.92, H100).
GEMM_EFF = 0.78
CAST_BW_EFF = 0.92
#: Bytes moved per element to cast a BF16 GEMM operand to FP8 with a dynamic tensorwise scale in
#: training (read for the amax, read again, write row- and column-major FP8: 2 + 2 + 2 x 1), for
#: the input and the output gradient of every linear layer; in serving, one rowwise cast of the
#: input (read 2, write 1). Same source.
CAST_BYTES_TRAIN = 6.0
CAST_BYTES_SERVE = 3.0
#: Achieved share of the BF16 peak in attention's scores and weighted sum: FlashAttention-2
#: reaches 50-73 % of the A100's peak forward and 35-50 % of the H100's, FlashAttention-3
#: 75 % of the H100's (Dao 2023, arXiv 2307.08691, sec. 4.1; Shah et al. 2024, arXiv 2407.08608).
ATTN_EFF = 0.55
#: Achieved share of the BF16 peak of FlashAttention-2 on Hopper (H100, H200): PyTorch's
#: ``scaled_dot_product_attention`` dispatches FlashAttention-2 first ("picks its backend by a fixed
#: priority that puts FlashAttention first", huggingface/transformers PR #48163, 2026), which
#: runs Ampere's MMA instructions on Hopper: pytorch/pytorch issue #142132 (nightly
#: 2.6.0.dev20241204, H100, batch 1, 24 heads, 4608 tokens, head dim 128) measured SDPA at
#: 329.483 TFLOPS against cuDNN's 631.338 and FlashAttention-3's 631.827; Shah et al. 2024
#: (FlashAttention-3, arXiv 2407.08608, abstract): FlashAttention-2 reaches "only 35%
#: utilization on the H100". 329.483 / 989.4 = 0.333. A training tenant on a Hopper GPU runs its
#: attention at this share (the PyTorch training stacks -- torchtitan, torchao, torchtune,
#: llm-foundry -- call SDPA or flash-attn 2); serving engines run their own kernels (unchanged).
ATTN_EFF_FA2_HOPPER = 329.483 / 989.4
#: Speed of FlashAttention-2 over FlashAttention(-1) at the same work: "around 2x speedup compared to
#: FlashAttention, reaching 50-73% of the theoretical maximum FLOPs/s on A100", where FlashAttention
#: reaches "only 25-40%" (Dao 2023, FlashAttention-2, arXiv 2307.08691, abstract). A tenant whose
#: attention runs a FlashAttention-1-class kernel runs it at ``1 / FA2_OVER_FA1`` of the share its GPU
#: gets with FlashAttention-2 (:func:`attention_efficiency`): llm-foundry's Triton FlashAttention
#: (``attn_impl: triton``, ``llmfoundry/models/layers/flash_attn_triton.py``: "Overall Triton forward +
#: backward is slightly slower than CUDA forward + backward", the CUDA FlashAttention-1 of
#: HazyResearch/flash-attention@eff9fe6b). Validation cases only; the environment's tenants run
#: FlashAttention-2.
FA2_OVER_FA1 = 2.0
#: Catalog GPU types of the Hopper architecture (sm_90), where :data:`ATTN_EFF_FA2_HOPPER` applies.
HOPPER = ("h100-sxm", "h200")
#: FLOPs of FlashAttention's backward pass over its forward's: the backward recomputes the scores
#: (``Q K^T``) from the saved log-sum-exp and runs 5 matmuls against the forward's 2
#: (Dao 2023, FlashAttention-2, arXiv 2307.08691, Algorithm 2; flash-attn's benchmark counts
#: ``bwd = 2.5 x fwd``, ``benchmarks/benchmark_flash_attention.py``). A training step's ``3 x``
#: forward counts 2; the extra 0.5 is priced with the recomputation
#: (:func:`recompute_seconds_table`) whenever the tenant runs FlashAttention.
FA_BWD_FACTOR = 2.5
#: HBM bytes the memory-bound elementwise kernels move per byte of activation a block saves for
#: the backward pass (each saved tensor is written once by its producer and read by the next
#: kernel; eager PyTorch, partly fused).
EW_BYTES = 4.0
#: HBM bytes per weight of converting a weight-only weight to BF16 before a BF16 GEMM: the
#: conversion writes 2 B and the GEMM reads them back (on top of reading the stored weight), as
#: vLLM's AWQ layer does at 256 tokens or more (``ops.awq_dequantize`` then ``torch.matmul``:
#: vllm-project/vllm@000796ac, vllm/model_executor/layers/quantization/awq.py) and torchao's
#: INT8 weight-only linear always (``torch.mm(x, w_int8.t().to(x.dtype))``:
#: pytorch/ao@694dab34, torchao/dtypes/affine_quantized_tensor.py, ``_linear_fp_act_int8_weight_impl``).
DEQUANT_BYTES = 4.0


def forward_flops_per_token(m: ModelArch, ctx: float) -> np.ndarray:
    """Forward FLOPs per token by layer group (G,), at context length ``ctx``.

    Matmuls cost 2 FLOPs per parameter and attention adds ``2 L ctx d_attn`` for the scores
    and the weighted sum (Kaplan et al. 2020, sec. 2.1: ``C_forward = 2N + 2 n_layer n_ctx
    d_attn``). The output head costs ``2 V h`` even when its weights are tied to the
    embedding, since the matmul still runs; embedding lookups and norms are not matmuls and
    count 0. A sliding window (Mistral) caps the keys each query attends to at ``m.sliding_window``
    (``m.kv_tokens(ctx)``); ``m.head_dim`` is config.json's where the model sets it.
    """
    pg = m.params_by_group
    out = np.zeros(catalog.N_GROUPS)
    out[ATT] = 2.0 * pg["attention"] + 2.0 * m.layers * m.kv_tokens(ctx) * m.heads * m.head_dim
    out[MLP] = 2.0 * pg["mlp"]
    out[HEAD] = 2.0 * m.vocab * m.hidden
    return out


def attention_efficiency(gpu_type: str, train: bool) -> float:
    """The achieved share of the BF16 peak of a tenant's attention scores and weighted sum on a
    ``gpu_type`` GPU: FlashAttention-2 on Hopper for a training tenant
    (:data:`ATTN_EFF_FA2_HOPPER`), else :data:`ATTN_EFF`."""
    return ATTN_EFF_FA2_HOPPER if train and gpu_type in HOPPER else ATTN_EFF


def linear_dims(m: ModelArch) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, outputs)`` by layer group (G,), each a sum over the group's linear layers (one
    ``nn.Linear`` each: q, k, v, o; gate, up, down or fc, proj; the LM head) of its input and
    output widths: the elements per token an FP8 recipe casts."""
    h, f, q, k, L = m.hidden, m.ffn, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.layers
    ins, outs = np.zeros(catalog.N_GROUPS), np.zeros(catalog.N_GROUPS)
    ins[ATT], outs[ATT] = L * (3 * h + q), L * (q + 2 * k + h)
    if m.mlp == "gated":
        ins[MLP], outs[MLP] = L * (2 * h + f), L * (2 * f + h)
    else:
        ins[MLP], outs[MLP] = L * (h + f), L * (f + h)
    ins[HEAD], outs[HEAD] = h, m.vocab
    return ins, outs


def linear_seconds(M: float, K: float, N: float, gpu, precision: str, train: bool = True) -> float:
    """Seconds of one linear layer ``(M x K) @ (K x N)`` on ``gpu`` (a ``catalog.GPUType``) in
    ``precision``, forward and, when ``train``, backward (3 GEMMs): the GEMMs at ``GEMM_EFF`` of
    the precision's peak and, in FP8, the casts of the input (M x K), the output gradient (M x N)
    and the weight (K x N, 8 bytes per element: its two casts) at ``CAST_BW_EFF`` of the HBM
    bandwidth -- the per-token terms of :func:`stage1_tables` plus the weight's cast, which a
    training step amortises over its tokens."""
    code = catalog.PRECISION_CODE[precision]
    passes = 3.0 if train else 1.0
    peak = float(gpu.peak_flops()[code])
    t = passes * 2.0 * M * K * N / (peak * GEMM_EFF)
    if code == FP8:
        cast = CAST_BYTES_TRAIN * (M * K + M * N) + 8.0 * K * N if train else CAST_BYTES_SERVE * M * K
        t += cast / (gpu.bandwidth_tbs * 1e12 * CAST_BW_EFF)
    return t


def reference_rate(st) -> np.ndarray:
    """Each tenant's reference work rate, the denominator of its value (T,).

    Training: tokens/s on ``max_gpus`` GPUs in BF16 at the model's time per token
    (:func:`seconds_per_token_table`), ignoring communication and recomputation. Serving: its
    mean arrival rate (value = the share of demand served in SLO).
    """
    tpt_bf16 = seconds_per_token_table(st)[:, :, BF16].sum(-1) / st.mfu
    train_rate = st.max_gpus / (TRAIN_FLOPS_FACTOR * tpt_bf16)
    return np.where(st.is_train, train_rate, st.arrival_rate)


#: Columns of the per-group table ``group_terms`` (T, G, P, len(GROUP_TERMS)): what a layer
#: group contributes at a precision -- weight bytes, gradient bytes (training), fp32 master
#: bytes (training), seconds per token times the GEMM efficiency (serving: one forward pass,
#: :func:`seconds_per_token_table`; training: a step's forward, backward and recomputation,
#: ``3 x forward +`` :func:`recompute_seconds_table`; inf where the GPU lacks the precision),
#: 1 where the precision is invalid for the tenant, and the HBM bytes a weight-only group moves
#: when its weights are converted to BF16 for a BF16 GEMM (write 2 B, read 2 B per weight; 0 for
#: other formats).
GROUP_TERMS = ("weights", "grads", "master", "seconds_per_token", "invalid", "dequant_bytes")
#: Per-tenant constants of stage 1 (T, len(TENANT_TERMS)): optimizer bytes (training),
#: activation bytes per sequence at 16 bit (training; ``s (L x kept per block + recomputed block
#: + after the blocks)`` by checkpointing mode), KV-cache bytes per token per byte of cache dtype
#: (``2 L kv_heads head_dim``), KV heads, the tensor-parallel all-reduce bytes per token
#: (``2 L h x 2``, serving) and the all-reduces per forward pass (``2 L``, serving), the KV cache's bytes per value when the
#: workload fixes its format (0: the attention's), the pass size from which weight-only weights
#: are converted to BF16 (0: never), and the most tokens a sequence keeps in its KV cache (the
#: sliding window; inf with full attention), the seconds a serving forward pass stalls at
#: its kernels' boundaries (:func:`kernel_stall_seconds`), and the seconds per token of the
#: elementwise work every GPU of a tensor-parallel replica runs whole (:func:`replicated_seconds`).
TENANT_TERMS = (
    "optimizer",
    "act_per_seq",
    "kv_per_token",
    "kv_heads",
    "tp_comm",
    "tp_calls",
    "kv_bytes",
    "dequant_tokens",
    "kv_window",
    "kernel_stall",
    "replicated_s",
)


def _time_parts(st):
    """The parts of the forward seconds per token of :func:`seconds_per_token_table`, (T, G, P)
    or broadcastable: ``(gemm, other, cast, ew_blocks, ew_final)`` -- the linear layers' GEMMs
    at the precision's peak, attention's scores at ``ATTN_EFF`` of the BF16 peak, the FP8
    casts, and the elementwise HBM traffic of the blocks and after them (the norm group), each
    not yet times ``st.mfu``, and the HBM bandwidth they run at."""
    T, G, P = st.T, catalog.N_GROUPS, catalog.N_PRECISIONS
    bf16 = st.peak[:, BF16][:, None, None]  # (T, 1, 1)
    peak = st.peak[:, None, :]  # (T, 1, P)
    lin = np.zeros((T, G))
    lin[:, ATT], lin[:, MLP], lin[:, HEAD] = 2.0 * st.params[:, ATT], 2.0 * st.params[:, MLP], st.flops_fwd[:, HEAD]
    cast_el = np.where(
        st.is_train[:, None], CAST_BYTES_TRAIN * (st.linear_in + st.linear_out) / TRAIN_FLOPS_FACTOR, CAST_BYTES_SERVE * st.linear_in
    )
    is_fp8 = (np.arange(P) == FP8)[None, None, :]
    bw = st.bw[:, None, None] * CAST_BW_EFF
    cast = np.where(is_fp8, cast_el[:, :, None] / bw, 0.0)
    ew_blocks, ew_final = np.zeros((T, G, 1)), np.zeros((T, G, 1))
    # training: EW_BYTES x the activations a block (and the loss) saves; serving: the inference
    # block's own traffic, final norm included (serve_elementwise_bytes)
    ew_blocks[:, NORM, 0] = np.where(st.is_train, EW_BYTES * st.layers * st.act_layer, st.ew_serve)
    ew_final[:, NORM, 0] = np.where(st.is_train, EW_BYTES * st.act_final, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        gemm = lin[:, :, None] / peak
    other = (st.flops_fwd - lin)[:, :, None] / (bf16 * st.attn_eff[:, None, None])
    return gemm, other, cast, ew_blocks, ew_final, bw


def seconds_per_token_table(st) -> np.ndarray:
    """Forward seconds per token of each layer group at each precision, times the GEMM
    efficiency ``st.mfu`` (T, G, P): the compiled round sums a map's entries and divides by it
    (``tenant_cost.tenant_terms``), so MFU is an output of three kinds of work:

    * the linear layers' GEMMs (``2 x params``, the head's ``2 V h``) at the precision's peak
      times the GEMM efficiency (the cluster's ``mfu``; torchao's 0.78), plus in FP8 the casts of
      ``linear_dims`` at ``CAST_BW_EFF`` of the HBM bandwidth (training: input and output
      gradient, per forward pass of the 3; serving: the input);
    * attention's scores and weighted sum (the rest of the group's FLOPs) at ``ATTN_EFF`` of the
      BF16 peak (FlashAttention);
    * memory-bound elementwise work (norms, residual adds, rotary, activations, softmax of the
      loss): training, ``EW_BYTES`` x the activation bytes per token (``act_layer`` per block and
      ``act_final``); serving, :func:`serve_elementwise_bytes` (``ew_serve``); through HBM at
      ``CAST_BW_EFF``, in the norm group.

    inf where the GPU lacks the precision."""
    gemm, other, cast, ew_blocks, ew_final, bw = _time_parts(st)
    ew = ew_blocks + ew_final
    with np.errstate(invalid="ignore"):
        t = gemm + st.mfu * (other + ew / bw + cast)
    busy = (st.flops_fwd[:, :, None] > 0) | (ew > 0)
    return np.where(busy, np.where(st.peak[:, None, :] > 0, t, np.inf), 0.0)


def recompute_seconds_table(st) -> np.ndarray:
    """Seconds per token the backward pass spends recomputing the forward, by layer group and
    precision, times ``st.mfu`` like :func:`seconds_per_token_table` (T, G, P). Checkpointing
    wraps each transformer block (torchtitan ``apply_ac``, torchtune and llm-foundry alike), so
    the head and the loss are never recomputed. Full recomputation runs each block's forward
    again: its GEMMs, attention and casts and its elementwise work. Selective (per-op)
    recomputation runs again the linear layers it did not save (``st.sac_share`` of each group's
    GEMMs and casts, ``activations.selective_checkpointing``) and the blocks' elementwise work, not
    attention, whose output it keeps. Whatever the checkpointing, FlashAttention's backward recomputes
    the scores: ``FA_BWD_FACTOR - 2`` of the attention's forward (the step's ``3 x`` forward counts
    2). 0 without checkpointing or FlashAttention; inf where the GPU lacks the precision."""
    gemm, other, cast, ew_blocks, _, bw = _time_parts(st)
    G = catalog.N_GROUPS
    block = np.zeros((1, G, 1))
    block[0, [ATT, MLP], 0] = 1.0
    full = np.where(st.checkpointing[:, None, None] == CKPT_FULL, block, 0.0)
    sel = np.where(st.checkpointing[:, None, None] == CKPT_SELECTIVE, st.sac_share[:, :, None], 0.0)
    ew = np.where(st.checkpointing[:, None, None] != CKPT_NONE, ew_blocks, 0.0)
    fa = np.where((st.flash & st.is_train)[:, None, None], FA_BWD_FACTOR - 2.0, 0.0)
    with np.errstate(invalid="ignore"):
        t = full * (gemm + st.mfu * (other + cast)) + sel * (gemm + st.mfu * cast) + st.mfu * ew / bw + fa * (st.mfu * other)
    busy = (full + sel > 0) | (ew > 0) | ((fa > 0) & (other > 0))
    return np.where(busy, np.where(st.peak[:, None, :] > 0, t, np.inf), 0.0)


def tp_allreduces(st) -> np.ndarray:
    """All-reduces per forward pass of each serving tenant (T,): two per layer (Megatron tensor
    parallelism: after attention's output projection and after the MLP); 0 for training. A
    replica on one GPU runs none (``roofline.allreduce_seconds``)."""
    return np.where(st.is_train, 0.0, 2.0 * st.layers)


def kernel_stall_seconds(st) -> np.ndarray:
    """Seconds per forward pass of each serving tenant spent at its kernels' boundaries (T,):
    ``L x KERNELS_PER_LAYER x KERNEL_STALL_S``, on every GPU of a tensor-parallel replica (each
    runs every kernel on its shard); 0 for training."""
    return np.where(st.is_train, 0.0, st.layers * KERNELS_PER_LAYER * KERNEL_STALL_S)


def replicated_seconds(st) -> np.ndarray:
    """Seconds per token of each serving tenant's norms and residual adds (T,):
    ``st.ew_replicated`` bytes (:func:`serve_replicated_bytes`) at ``CAST_BW_EFF`` of the HBM
    bandwidth, the rate the rest of the elementwise work runs at; part of the time per token
    (the norm group's), which a tensor-parallel replica does not divide among its GPUs
    (``roofline.roofline``); 0 for training."""
    return np.where(st.is_train, 0.0, st.ew_replicated / (st.bw * CAST_BW_EFF))


def stage1_tables(st) -> tuple[np.ndarray, np.ndarray]:
    """``(group_terms (T, G, P, 6), tenant_terms (T, len(TENANT_TERMS)))``, float64: stage 1 factored by layer
    group, so that a tenant's terms under any precision map are sums of G table entries
    (``engine.tenant_terms``). About 1 KB per tenant, read from cache every round."""
    T, G, P = st.T, catalog.N_GROUPS, catalog.N_PRECISIONS
    train = st.is_train[:, None, None]
    params = st.params[:, :, None]  # (T, G, 1)
    out = np.zeros((T, G, P, len(GROUP_TERMS)))
    out[..., 0] = params * np.where(train, TRAIN_BYTES[None, None, :], catalog.PRECISION_BYTES[None, None, :])
    out[..., 1] = np.where(train, params * GRAD_BYTES[None, None, :], 0.0)
    out[..., 2] = np.where(train, params * MASTER_BYTES[None, None, :], 0.0)
    out[..., 3] = np.where(
        train, TRAIN_FLOPS_FACTOR * seconds_per_token_table(st) + recompute_seconds_table(st), seconds_per_token_table(st)
    )
    invalid = ~st.supported | (st.is_train[:, None] & catalog.WEIGHT_ONLY[None, :])  # (T, P)
    out[..., 4] = np.broadcast_to(invalid[:, None, :], (T, G, P))
    out[..., 5] = np.where(train, 0.0, params * np.where(catalog.WEIGHT_ONLY, DEQUANT_BYTES, 0.0)[None, None, :])
    s, h, L = st.seq_len, st.hidden, st.layers
    scores = np.where(st.flash, 0.0, ACT_ATTN * st.heads * s)  # per token per block, without FlashAttention
    per_block = np.select([st.checkpointing == CKPT_FULL, st.checkpointing == CKPT_SELECTIVE], [2.0 * h, st.act_sac], st.act_layer + scores)
    recomputed = np.where(st.checkpointing != CKPT_NONE, st.act_layer + scores, 0.0)  # the block being recomputed
    kept = L * per_block + recomputed
    tenant = np.stack(
        [
            np.where(st.is_train, ADAM_BYTES * st.params.sum(-1), 0.0),
            np.where(st.is_train, s * (kept + st.act_final), 0.0),
            2.0 * L * st.kv_dim,
            st.kv_heads,
            2.0 * L * h * 2.0,
            tp_allreduces(st),
            st.kv_cache_bytes,
            st.dequant_tokens,
            st.kv_window,
            kernel_stall_seconds(st),
            replicated_seconds(st),
        ],
        axis=-1,
    )
    return out, tenant


__all__ = [
    "ADAM_BYTES",
    "ATTN_EFF",
    "ATTN_EFF_FA2_HOPPER",
    "CAST_BW_EFF",
    "CAST_BYTES_SERVE",
    "CAST_BYTES_TRAIN",
    "CKPT_TRAIN_BYTES",
    "DEQUANT_BYTES",
    "EW_BYTES",
    "FA2_OVER_FA1",
    "FA_BWD_FACTOR",
    "GEMM_EFF",
    "GROUP_TERMS",
    "HOPPER",
    "KERNELS_PER_LAYER",
    "KERNEL_STALL_S",
    "KV_BYTES",
    "OPT_STEP_BYTES",
    "STEP_OVERHEAD_S",
    "TENANT_TERMS",
    "TP_ALLREDUCE_LATENCY_S",
    "TRAIN_BYTES",
    "TRAIN_FLOPS_FACTOR",
    "attention_efficiency",
    "forward_flops_per_token",
    "kernel_stall_seconds",
    "linear_dims",
    "linear_seconds",
    "recompute_seconds_table",
    "reference_rate",
    "replicated_seconds",
    "seconds_per_token_table",
    "serve_elementwise_bytes",
    "serve_replicated_bytes",
    "stage1_tables",
    "tp_allreduces",
]

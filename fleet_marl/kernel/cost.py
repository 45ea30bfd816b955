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

They run once per scenario, in numpy; they never import PettingZoo or Ray. The constants
they use, each with its source, are ``constants.py``'s; a model's work per token (forward FLOPs,
linear widths, one linear layer's seconds) is ``flops.py``'s; this module re-exports both.
Stage 2 (bytes per GPU on ``n`` GPUs, the roofline) is ``engine.memory_per_gpu`` and
``engine.roofline``.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel.activations import ACT_ATTN, CKPT_FULL, CKPT_NONE, CKPT_SELECTIVE
from fleet_marl.kernel.constants import (
    ADAM_BYTES,
    ATT,
    ATTN_EFF,
    ATTN_EFF_FA2_HOPPER,
    BF16,
    CAST_BW_EFF,
    CAST_BYTES_SERVE,
    CAST_BYTES_TRAIN,
    CKPT_TRAIN_BYTES,
    DEQUANT_BYTES,
    EMB,
    EW_BYTES,
    FA2_OVER_FA1,
    FA_BWD_FACTOR,
    FP8,
    FP32,
    GEMM_EFF,
    GRAD_BYTES,
    HEAD,
    HOPPER,
    KV_BYTES,
    MASTER_BYTES,
    MLP,
    NORM,
    OPT_STEP_BYTES,
    TRAIN_BYTES,
    TRAIN_FLOPS_FACTOR,
)
from fleet_marl.kernel.flops import attention_efficiency, forward_flops_per_token, linear_dims, linear_seconds
from fleet_marl.kernel.serving import (
    KERNEL_STALL_S,
    KERNELS_PER_LAYER,
    STEP_OVERHEAD_S,
    TP_ALLREDUCE_LATENCY_S,
    serve_elementwise_bytes,
    serve_replicated_bytes,
)


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
    "ATT",
    "ATTN_EFF",
    "ATTN_EFF_FA2_HOPPER",
    "BF16",
    "CAST_BW_EFF",
    "CAST_BYTES_SERVE",
    "CAST_BYTES_TRAIN",
    "CKPT_TRAIN_BYTES",
    "DEQUANT_BYTES",
    "EMB",
    "EW_BYTES",
    "FA2_OVER_FA1",
    "FA_BWD_FACTOR",
    "FP8",
    "FP32",
    "GEMM_EFF",
    "GRAD_BYTES",
    "GROUP_TERMS",
    "HEAD",
    "HOPPER",
    "KERNELS_PER_LAYER",
    "KERNEL_STALL_S",
    "KV_BYTES",
    "MASTER_BYTES",
    "MLP",
    "NORM",
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

"""The cost model's constants, each with its source: bytes per element and per parameter by
precision, the FLOPs of a training step over its forward, and the achieved shares of a GPU's peak.

The layer-group and precision codes (``ATT``, ``BF16``, ...) index the stage-1 tables of
``cost.py``; ``docs/model.md`` has every equation these enter.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog

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

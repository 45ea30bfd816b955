"""A model's work per token by layer group: its forward FLOPs, its linear layers' widths,
one linear layer's seconds on a GPU, and the share of the peak its attention achieves.

Plain numpy over a :class:`~fleet_marl.catalog.ModelArch`, run once per scenario (``static.py``)
and by the validation cases; the stage-1 tables of ``cost.py`` are built from them.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import ModelArch
from fleet_marl.kernel.constants import (
    ATT,
    ATTN_EFF,
    ATTN_EFF_FA2_HOPPER,
    CAST_BW_EFF,
    CAST_BYTES_SERVE,
    CAST_BYTES_TRAIN,
    FP8,
    GEMM_EFF,
    HEAD,
    HOPPER,
    MLP,
)


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

"""The cost model's stage 1: each tenant's bytes, FLOPs and communication volume under its
own precision map, tabulated once per scenario.

These terms depend on nothing but the tenant and its precision map, and each is a sum over
layer groups, so :func:`stage1_tables` tabulates each group's share at each precision once
per scenario and the compiled round (``engine.tenant_terms``) adds them up; the round then
turns them into bytes per GPU, throughput and power on the GPUs it was granted. Every equation is in ``docs/model.md`` with its source. In short:

* training bytes per GPU (FSDP / ZeRO-3 over ``n`` GPUs): weights, gradients, an fp32 master
  copy and two fp32 Adam moments, all sharded ``/ n`` (Rajbhandari et al. 2020); activations
  per sequence ``s h L (34 + 5 a s / h)`` bytes at 16 bit (Korthikanti et al. 2022), without the
  ``5 a s / h`` term under FlashAttention (Dao et al. 2022); with full activation
  checkpointing only ``2 s h L`` bytes are kept and the forward pass runs twice;
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

_G = {g: i for i, g in enumerate(catalog.GROUPS)}
EMB, ATT, MLP, NORM, HEAD = (_G[g] for g in ("embedding", "attention", "mlp", "norm", "head"))
FP32 = catalog.PRECISION_CODE["fp32"]
BF16 = catalog.PRECISION_CODE["bf16"]
#: Bytes of the KV cache by the attention group's precision: weight-only formats keep a BF16 cache.
KV_BYTES = np.where(catalog.WEIGHT_ONLY, 2.0, catalog.PRECISION_BYTES)
#: Gradient bytes by precision: FP32 groups keep FP32 gradients, others BF16 (FP8 GEMMs
#: produce BF16 weight gradients in Transformer Engine).
GRAD_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == FP32, 4.0, 2.0)
#: Bytes of the fp32 master copy per parameter: none when the group already trains in fp32.
MASTER_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == FP32, 0.0, 4.0)
ADAM_BYTES = 8.0  # two fp32 moments
ACT_CONST = 34.0  # Korthikanti et al. 2022, eq. (1): s b h (34 + 5 a s / h)
ACT_ATTN = 5.0
ACT_CHECKPOINTED = 2.0  # full recomputation keeps only each layer's 16-bit input: 2 s b h (Korthikanti et al. 2022, sec. 4.2)
TRAIN_FLOPS_FACTOR = 3.0  # forward + backward (2x forward) = 6N per token (Kaplan et al. 2020)
RECOMPUTE_FLOPS_FACTOR = 4.0  # full recomputation runs the forward pass once more


def forward_flops_per_token(m: ModelArch, ctx: float) -> np.ndarray:
    """Forward FLOPs per token by layer group (G,), at context length ``ctx``.

    Matmuls cost 2 FLOPs per parameter and attention adds ``2 L ctx d_attn`` for the scores
    and the weighted sum (Kaplan et al. 2020, sec. 2.1: ``C_forward = 2N + 2 n_layer n_ctx
    d_attn``). The output head costs ``2 V h`` even when its weights are tied to the
    embedding, since the matmul still runs; embedding lookups and norms are not matmuls and
    count 0.
    """
    pg = m.params_by_group
    out = np.zeros(catalog.N_GROUPS)
    out[ATT] = 2.0 * pg["attention"] + 2.0 * m.layers * ctx * m.heads * m.head_dim
    out[MLP] = 2.0 * pg["mlp"]
    out[HEAD] = 2.0 * m.vocab * m.hidden
    return out


def linear_seconds(M: float, K: float, N: float, gpu, precision: str, train: bool = True) -> float:
    """Seconds of one linear layer ``(M x K) @ (K x N)`` on ``gpu`` (a ``catalog.GPUType``) in
    ``precision``, forward and, when ``train``, backward (3 GEMMs), at the GPU's peak."""
    passes = 3.0 if train else 1.0
    peak = float(gpu.peak_flops()[catalog.PRECISION_CODE[precision]])
    return passes * 2.0 * M * K * N / peak


def reference_rate(st) -> np.ndarray:
    """Each tenant's reference work rate, the denominator of its value (T,).

    Training: tokens/s on ``max_gpus`` GPUs at the BF16 peak and the cluster MFU, ignoring
    communication. Serving: its mean arrival rate (value = the share of demand served in SLO).
    """
    bf16_peak = st.peak[:, BF16]
    train_rate = st.max_gpus * bf16_peak * st.mfu / (TRAIN_FLOPS_FACTOR * st.flops_fwd.sum(-1))
    return np.where(st.is_train, train_rate, st.arrival_rate)


#: Columns of the per-group table ``group_terms`` (T, G, P, len(GROUP_TERMS)): what a layer
#: group contributes at a precision -- weight bytes, gradient bytes (training), fp32 master
#: bytes (training), forward seconds per token at peak (``flops / peak``; inf where the GPU
#: lacks the precision), and 1 where the precision is invalid for the tenant.
GROUP_TERMS = ("weights", "grads", "master", "seconds_per_token", "invalid")
#: Per-tenant constants of stage 1 (T, len(TENANT_TERMS)): optimizer bytes (training),
#: activation bytes per sequence at 16 bit (training; ``s h L (34 + 5 a s / h)`` or ``2 s h L``
#: checkpointed), KV-cache bytes per token per byte of cache dtype (``2 L kv_heads head_dim``),
#: KV heads, and the tensor-parallel all-reduce bytes per token (``2 L h x 2``, serving).
TENANT_TERMS = ("optimizer", "act_per_seq", "kv_per_token", "kv_heads", "tp_comm")


def stage1_tables(st) -> tuple[np.ndarray, np.ndarray]:
    """``(group_terms (T, G, P, 5), tenant_terms (T, 5))``, float64: stage 1 factored by layer
    group, so that a tenant's terms under any precision map are sums of G table entries
    (``engine.tenant_terms``). About 1 KB per tenant, read from cache every round."""
    T, G, P = st.T, catalog.N_GROUPS, catalog.N_PRECISIONS
    train = st.is_train[:, None, None]
    params = st.params[:, :, None]  # (T, G, 1)
    out = np.zeros((T, G, P, len(GROUP_TERMS)))
    out[..., 0] = params * catalog.PRECISION_BYTES[None, None, :]
    out[..., 1] = np.where(train, params * GRAD_BYTES[None, None, :], 0.0)
    out[..., 2] = np.where(train, params * MASTER_BYTES[None, None, :], 0.0)
    flops = st.flops_fwd[:, :, None]
    peak = st.peak[:, None, :]  # (T, 1, P)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[..., 3] = np.where(flops > 0, flops / peak, 0.0)  # inf: unsupported precision
    invalid = ~st.supported | (st.is_train[:, None] & catalog.WEIGHT_ONLY[None, :])  # (T, P)
    out[..., 4] = np.broadcast_to(invalid[:, None, :], (T, G, P))
    s, h, L = st.seq_len, st.hidden, st.layers
    per_layer = np.where(st.checkpointing, ACT_CHECKPOINTED, ACT_CONST + np.where(st.flash, 0.0, ACT_ATTN * st.heads * s / h))
    tenant = np.stack(
        [
            np.where(st.is_train, ADAM_BYTES * st.params.sum(-1), 0.0),
            np.where(st.is_train, s * h * L * per_layer, 0.0),
            2.0 * L * st.kv_dim,
            st.kv_heads,
            2.0 * L * h * 2.0,
        ],
        axis=-1,
    )
    return out, tenant


__all__ = [
    "ACT_ATTN",
    "ACT_CHECKPOINTED",
    "ACT_CONST",
    "ADAM_BYTES",
    "GROUP_TERMS",
    "KV_BYTES",
    "RECOMPUTE_FLOPS_FACTOR",
    "TENANT_TERMS",
    "TRAIN_FLOPS_FACTOR",
    "forward_flops_per_token",
    "linear_seconds",
    "reference_rate",
    "stage1_tables",
]

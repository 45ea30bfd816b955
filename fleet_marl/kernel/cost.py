"""The cost model: bytes per GPU, FLOPs and throughput by roofline.

Every equation is in ``docs/model.md`` with its source. In short:

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

Functions take and return arrays with leading batch axes; they never import PettingZoo or Ray.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import ModelArch

_G = {g: i for i, g in enumerate(catalog.GROUPS)}
EMB, ATT, MLP, NORM, HEAD = (_G[g] for g in ("embedding", "attention", "mlp", "norm", "head"))
_FP32 = catalog.PRECISION_CODE["fp32"]
_BF16 = catalog.PRECISION_CODE["bf16"]
#: Bytes of the KV cache by the attention group's precision: weight-only formats keep a BF16 cache.
KV_BYTES = np.where(catalog.WEIGHT_ONLY, 2.0, catalog.PRECISION_BYTES)
#: Gradient bytes by precision: FP32 groups keep FP32 gradients, others BF16 (FP8 GEMMs
#: produce BF16 weight gradients in Transformer Engine).
_GRAD_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == _FP32, 4.0, 2.0)
#: Bytes of the fp32 master copy per parameter: none when the group already trains in fp32.
_MASTER_BYTES = np.where(np.arange(catalog.N_PRECISIONS) == _FP32, 0.0, 4.0)
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


def reference_rate(st) -> np.ndarray:
    """Each tenant's reference work rate, the denominator of its value (T,).

    Training: tokens/s on ``max_gpus`` GPUs at the BF16 peak and the cluster MFU, ignoring
    communication. Serving: its mean arrival rate (value = the share of demand served in SLO).
    """
    bf16_peak = st.peak[:, _BF16]
    train_rate = st.max_gpus * bf16_peak * st.mfu / (TRAIN_FLOPS_FACTOR * st.flops_fwd.sum(-1))
    return np.where(st.is_train, train_rate, st.arrival_rate)


class TenantTerms(NamedTuple):
    """Per-tenant terms that do not depend on the other tenants (stage 1), (B, T) each."""

    precision: np.ndarray  # (B, T, G) int64 precision run after numeric projection
    unsafe: np.ndarray  # (B, T) bool requested precision map is numerically unsafe
    weights: np.ndarray  # total weight bytes (all GPUs)
    grads: np.ndarray  # total gradient bytes (train)
    master: np.ndarray  # total fp32 master bytes (train)
    optimizer: np.ndarray  # total optimizer bytes (train)
    per_seq_local: np.ndarray  # bytes per sequence on each GPU, not sharded (train activations)
    per_seq_sharded: np.ndarray  # bytes per sequence split over the GPUs (serve KV cache)
    time_per_token: np.ndarray  # s per forward token on one GPU at peak x MFU
    kv_read_per_seq: np.ndarray  # serve: KV bytes read per sequence per decode step
    comm_bytes: np.ndarray  # train: bytes per step before (n-1)/n; serve: per token before 2(n-1)/n
    kv_heads: np.ndarray  # (T,) the KV cache splits over at most this many GPUs (heads are replicated beyond)


def tenant_terms(st, precision: np.ndarray, project: bool) -> TenantTerms:
    """Stage 1: everything that depends only on a tenant's own action. precision: (B, T, G)."""
    unsafe_g = catalog.UNSAFE[np.arange(catalog.N_GROUPS), precision]  # (B, T, G)
    unsafe = unsafe_g.any(-1)
    prec = np.where(unsafe_g, _BF16, precision) if project else precision
    params = st.params  # (T, G)
    nbytes = catalog.PRECISION_BYTES[prec]
    weights = (params * nbytes).sum(-1)
    train = st.is_train
    grads = np.where(train, (params * _GRAD_BYTES[prec]).sum(-1), 0.0)
    master = np.where(train, (params * _MASTER_BYTES[prec]).sum(-1), 0.0)
    optimizer = np.where(train, ADAM_BYTES * params.sum(-1), 0.0)
    # activations: Korthikanti's formula is for 16-bit activations; scale by the mean bytes of
    # the attention and MLP precisions over 2.
    act_scale = 0.25 * (nbytes[..., ATT] + nbytes[..., MLP])
    s, h, L = st.seq_len, st.hidden, st.layers
    per_layer = np.where(st.checkpointing, ACT_CHECKPOINTED, ACT_CONST + np.where(st.flash, 0.0, ACT_ATTN * st.heads * s / h))
    act = np.where(train, s * h * L * per_layer * act_scale, 0.0)
    kv_tok = 2.0 * L * st.kv_dim * KV_BYTES[prec[..., ATT]]
    kv_seq = np.where(train, 0.0, (st.prompt_tokens + st.output_tokens) * kv_tok)
    kv_read = np.where(train, 0.0, (st.prompt_tokens + 0.5 * st.output_tokens) * kv_tok)
    peak = st.peak[np.arange(st.T)[:, None], prec]  # (B, T, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_group = np.where(st.flops_fwd > 0, st.flops_fwd / peak, 0.0)  # inf: unsupported precision
    tpt = per_group.sum(-1) / st.mfu
    fsdp = 2.0 * weights + grads
    tp = 2.0 * L * h * 2.0  # two all-reduces of a BF16 hidden vector per layer
    comm = np.where(train, fsdp, tp)
    kv_heads = np.broadcast_to(st.kv_heads, unsafe.shape)
    return TenantTerms(prec, unsafe, weights, grads, master, optimizer, act, kv_seq, tpt, kv_read, comm, kv_heads)


# --- tabulated stage 1 -------------------------------------------------------------------------
#
# A tenant's precision map is one of P**G = 3125 maps. Stage 1 depends on nothing else, so it is
# computed once per (map, tenant) when the scenario is built and then looked up: one gather per
# term instead of a dozen (B, T, G) reductions. ``tenant_terms`` stays the reference; the tests
# check that the table gives the same numbers.

N_MAPS = catalog.N_PRECISIONS**catalog.N_GROUPS
MAP_WEIGHTS = catalog.N_PRECISIONS ** np.arange(catalog.N_GROUPS, dtype=np.int64)  # (G,)
#: Every precision map, indexed by its code ``sum_g prec_g * P**g``. (N_MAPS, G) int64
ALL_MAPS = (np.arange(N_MAPS, dtype=np.int64)[:, None] // MAP_WEIGHTS) % catalog.N_PRECISIONS
MAX_TABLE_TENANTS = 256  # beyond this the tables (N_MAPS x T per term) are not worth their memory


def map_code(precision: np.ndarray) -> np.ndarray:
    """(..., G) precision codes -> (...) map code."""
    return precision @ MAP_WEIGHTS


#: The float terms kept in a term table, in this order (``TenantTerms`` minus precision and unsafe).
TABLE_FLOATS = ("weights", "grads", "master", "optimizer", "per_seq_local", "per_seq_sharded", "time_per_token", "kv_read_per_seq", "comm_bytes", "kv_heads")


class TermTable(NamedTuple):
    """Stage-1 terms for every (map, tenant), packed so that one lookup is one row gather:
    row ``code * T + t`` holds tenant t under precision map ``code``."""

    floats: np.ndarray  # (N_MAPS * T, len(TABLE_FLOATS)) float64, C order
    ints: np.ndarray  # (N_MAPS * T, 3) int64: code of the map that runs (after projection), unsafe, invalid
    T: int


def build_term_table(st, project: bool, invalid_fn) -> TermTable:
    maps = np.broadcast_to(ALL_MAPS[:, None, :], (N_MAPS, st.T, catalog.N_GROUPS))
    full = tenant_terms(st, maps, project)
    flat = lambda a: np.broadcast_to(a, (N_MAPS, st.T)).reshape(-1)  # noqa: E731
    floats = np.stack([flat(getattr(full, f)) for f in TABLE_FLOATS], axis=-1)
    ints = np.stack([flat(map_code(full.precision)), flat(full.unsafe), flat(invalid_fn(st, maps))], axis=-1).astype(np.int64)
    table = TermTable(np.ascontiguousarray(floats), np.ascontiguousarray(ints), st.T)
    table.floats.setflags(write=False)
    table.ints.setflags(write=False)
    return table


def table_index(table: TermTable, precision: np.ndarray) -> np.ndarray:
    """(..., T, G) precision codes -> (..., T) row of the term table."""
    return map_code(precision) * table.T + np.arange(table.T)


def lookup_terms(table: TermTable, precision: np.ndarray) -> tuple[TenantTerms, np.ndarray]:
    """Stage 1 by table lookup; same result as ``tenant_terms`` plus ``invalid_precision``."""
    idx = table_index(table, precision)
    f = np.moveaxis(table.floats[idx], -1, 0)
    code, unsafe, invalid = np.moveaxis(table.ints[idx], -1, 0)
    w, g, m, o, psl, pss, tpt, kvr, comm, kvh = f
    return TenantTerms(ALL_MAPS[code], unsafe.astype(bool), w, g, m, o, psl, pss, tpt, kvr, comm, kvh), invalid.astype(bool)


class Memory(NamedTuple):
    """Bytes per GPU, (B, T) each."""

    weights: np.ndarray
    grads: np.ndarray
    master: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    kv_cache: np.ndarray
    total: np.ndarray


def memory_per_gpu(terms: TenantTerms, n: np.ndarray, batch: np.ndarray) -> Memory:
    """Bytes per GPU on ``n`` GPUs at ``batch`` sequences (per GPU for training, per replica
    for serving). ``n`` of 0 is treated as 1 (nothing runs there anyway)."""
    inv = 1.0 / np.maximum(n, 1)
    w = terms.weights * inv
    g = terms.grads * inv
    m = terms.master * inv
    o = terms.optimizer * inv
    a = batch * terms.per_seq_local
    if a.shape != w.shape:  # activations do not depend on n: give them the rows' shape too
        a = np.broadcast_to(a, np.broadcast_shapes(a.shape, w.shape)).copy()
    kv = batch * terms.per_seq_sharded / np.minimum(np.maximum(n, 1), terms.kv_heads)
    return Memory(w, g, m, o, a, kv, w + g + m + o + a + kv)


def largest_fitting_batch(terms: TenantTerms, n: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """The largest batch whose bytes per GPU fit ``capacity`` (memory is affine in batch); may be < 1."""
    inv = 1.0 / np.maximum(n, 1)
    fixed = (terms.weights + terms.grads + terms.master + terms.optimizer) * inv
    per_seq = terms.per_seq_local + terms.per_seq_sharded / np.minimum(np.maximum(n, 1), terms.kv_heads)
    return np.floor((capacity - fixed) / per_seq)


class Throughput(NamedTuple):
    """(B, T) each, before throttling."""

    work_rate: np.ndarray  # train: tokens/s; serve: requests/s
    tokens_per_s: np.ndarray  # train: tokens/s; serve: generated tokens/s
    efficiency: np.ndarray  # compute (or memory) time / time with communication
    ttft_s: np.ndarray  # serve: prefill time of one request (no queueing)
    tpot_s: np.ndarray  # serve: time per output token at this batch


def throughput(st, terms: TenantTerms, n: np.ndarray, batch: np.ndarray, nodes: np.ndarray) -> Throughput:
    """Roofline throughput on ``n`` GPUs spread over ``nodes`` nodes at ``batch``."""
    nf = np.maximum(n, 1).astype(np.float64)
    bw_link = np.where(nodes > 1, st.inter_bw, st.intra_bw)
    b = np.maximum(batch, 1).astype(np.float64)
    hide = 1.0 - st.comm_overlap
    tpt = terms.time_per_token
    # training: data parallel FSDP, compute-bound. The passes x batch x sequence product is an
    # exact integer in float64, so it is formed in whichever order is cheapest.
    passes_seq = np.where(st.checkpointing, RECOMPUTE_FLOPS_FACTOR, TRAIN_FLOPS_FACTOR) * st.seq_len  # (T,)
    t_comp = passes_seq * b * tpt
    t_comm = terms.comm_bytes * (nf - 1.0) / nf / bw_link
    step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
    train_rate = nf * b * st.seq_len / step
    # serving: one tensor-parallel replica, prefill compute-bound, decode memory-bound. The
    # all-reduce moves twice the FSDP factor's bytes: 2 x t_comm exactly (a power-of-2 scaling).
    tp_comm_tok = 2.0 * t_comm
    prefill = st.prompt_tokens * (tpt / nf + (tp_comm_tok if hide == 1.0 else hide * tp_comm_tok))
    kv_split = np.minimum(nf, terms.kv_heads)
    t_mem = (terms.weights / nf + b * terms.kv_read_per_seq / kv_split) / (st.bw * st.mbu)
    t_cmp = b * tpt / nf
    t_dec_core = np.maximum(t_mem, t_cmp)
    t_dec = t_dec_core + (b * tp_comm_tok if hide == 1.0 else hide * b * tp_comm_tok)
    per_request = prefill + st.output_tokens * t_dec / b
    serve_rate = 1.0 / per_request
    train = st.is_train
    with np.errstate(invalid="ignore"):  # inf / inf where a precision is unsupported (vetoed)
        eff = np.where(train, t_comp / step, t_dec_core / t_dec)
    eff[eff != eff] = 0.0  # nan -> 0
    return Throughput(
        work_rate=np.where(train, train_rate, serve_rate),
        tokens_per_s=np.where(train, train_rate, serve_rate * st.output_tokens),
        efficiency=eff,
        ttft_s=np.where(train, 0.0, prefill),
        tpot_s=np.where(train, 0.0, t_dec),
    )


__all__ = [
    "Memory",
    "TenantTerms",
    "Throughput",
    "forward_flops_per_token",
    "largest_fitting_batch",
    "memory_per_gpu",
    "reference_rate",
    "tenant_terms",
    "throughput",
]

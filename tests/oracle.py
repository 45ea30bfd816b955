"""An independent numpy implementation of the round's coupled stage: the oracle the compiled
round (``fleet_marl.kernel.engine``) is tested against, and nothing else.

It is the numpy kernel of fleet_marl 0.2 (arbiter, placement, memory, roofline, power and
heat, outcome), vectorised over batch rows instead of looping over them, with stage 1 computed
for whole precision maps at once; it shares nothing with the engine but the model's constants
(``fleet_marl.kernel.cost``). ``evaluate``
takes the same inputs as ``fleet_marl.kernel.evaluate`` after its checks and returns the same
:class:`~fleet_marl.kernel.Outcome`. ``tests/test_oracle.py`` holds the engine to 1e-9 of it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel import Actions, Draws, Outcome, RoundState, cost
from fleet_marl.kernel.cost import TRAIN_FLOPS_FACTOR
from tests import oracle_contention, oracle_gang, oracle_queueing

# --- stage 1 ---------------------------------------------------------------------------------


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
    time_per_token: np.ndarray  # s per forward token on one GPU (docs/model.md section 5)
    kv_read_per_seq: np.ndarray  # serve: KV bytes read per sequence per decode step
    comm_bytes: np.ndarray  # train: bytes per step before (n-1)/n; serve: per token before 2(n-1)/n
    kv_heads: np.ndarray  # (T,) the KV cache splits over at most this many GPUs (heads are replicated beyond)
    head_time_per_token: np.ndarray  # the LM head's part of time_per_token (a prompt runs it once)
    dequant_bytes: np.ndarray  # serve: bytes of converting weight-only weights to BF16 (2 B written + 2 B read each)
    stream_bytes: np.ndarray  # serve: weight bytes a forward pass reads: an untied embedding is only looked up
    forward_time_per_token: np.ndarray  # seconds per token of one forward pass (a trainer's step takes more)


def tenant_terms(st, precision: np.ndarray, project: bool, prompt=None, output=None) -> TenantTerms:
    """Stage 1: everything that depends only on a tenant's own action and its requests'
    lengths. precision: (B, T, G); prompt, output: (B, T) or (T,) (default: the config's means)."""
    prompt = st.prompt_tokens if prompt is None else prompt
    output = st.output_tokens if output is None else output
    unsafe_g = catalog.UNSAFE[np.arange(catalog.N_GROUPS), precision]  # (B, T, G)
    unsafe = unsafe_g.any(-1)
    prec = np.where(unsafe_g, cost.BF16, precision) if project else precision
    params = st.params  # (T, G)
    nbytes = catalog.PRECISION_BYTES[prec]
    train = st.is_train
    is_fp8 = prec == catalog.PRECISION_CODE["fp8"]
    # FP8 training keeps BF16 weights (FP32 master) and saves BF16 activations
    wbytes = np.where(train[:, None] & is_fp8, 2.0, nbytes)
    weights = (params * wbytes).sum(-1)
    grads = np.where(train, (params * np.where(prec == cost.FP32, 4.0, 2.0)).sum(-1), 0.0)
    master = np.where(train, (params * np.where(prec == cost.FP32, 0.0, 4.0)).sum(-1), 0.0)
    optimizer = np.where(train, 8.0 * params.sum(-1), 0.0)
    # activations per token at 16 bit: each block's saved tensors (all of them; its input under
    # full checkpointing; what the per-op policy saves under selective), the block being
    # recomputed under either, plus the logits and loss; scaled by the attention and MLP
    # activation bytes over 2
    abytes = np.where(is_fp8, 2.0, nbytes)
    act_scale = 0.25 * (abytes[..., cost.ATT] + abytes[..., cost.MLP])
    s, h, L = st.seq_len, st.hidden, st.layers
    scores = np.where(st.flash, 0.0, 5.0 * st.heads * s)
    full, selective = st.checkpointing == 1, st.checkpointing == 2
    blocks = np.where(full, 2.0 * h * L + st.act_layer + scores, L * (st.act_layer + scores))
    blocks = np.where(selective, L * st.act_sac + st.act_layer + scores, blocks)
    act = np.where(train, s * (blocks + st.act_final) * act_scale, 0.0)
    # the KV cache's format: fixed by the workload, else the attention group's (weight-only: BF16)
    kv_tok = 2.0 * L * st.kv_dim * np.where(st.kv_cache_bytes > 0, st.kv_cache_bytes, cost.KV_BYTES[prec[..., cost.ATT]])
    # a sliding window W keeps the last W tokens: the cache holds min(P + O, W) at the end, and a
    # decode step reads the mean of min(P + x, W) over x in [0, O]: the integral is
    # a P + a^2 / 2 + (O - a) W with a = clip(W - P, 0, O) the steps before the cache is full
    W = st.kv_window
    a = np.clip(W - prompt, 0.0, output)
    mean_ctx = np.where(
        np.isinf(W), prompt + 0.5 * output, (a * prompt + 0.5 * a * a + (output - a) * np.where(np.isinf(W), 0.0, W)) / output
    )
    kv_seq = np.where(train, 0.0, np.minimum(prompt + output, W) * kv_tok)
    kv_read = np.where(train, 0.0, mean_ctx * kv_tok)
    # time per forward token: the linear GEMMs at their precision's peak x the GEMM efficiency
    # (st.mfu), attention's other FLOPs at 0.55 of the BF16 peak (a training tenant on an H100 or
    # H200: FlashAttention-2's 329.483 of 989.4 TFLOPS), elementwise traffic of 4 x the saved
    # activation bytes (norm group) and FP8 casts at 0.92 of HBM bandwidth
    peak = st.peak[np.arange(st.T)[:, None], prec]  # (B, T, G)
    bf16 = st.peak[:, cost.BF16][:, None]  # (T, 1)
    gpu_type = np.array([st.pools[q] for q in st.pool])
    hopper = np.isin(gpu_type, ["h100-sxm", "h200"]) & st.is_train
    attn_eff = np.where(hopper, 329.483 / 989.4, 0.55)[:, None]  # (T, 1)
    lin = np.stack([np.zeros(st.T), 2 * params[:, 1], 2 * params[:, 2], np.zeros(st.T), st.flops_fwd[:, 4]], -1)
    per_el = np.where(train[:, None], 6.0 * (st.linear_in + st.linear_out) / 3.0, 3.0 * st.linear_in)
    bw = st.bw[:, None] * 0.92
    cast = np.where(is_fp8, per_el / bw, 0.0)
    # serving keeps no activations: its elementwise bytes are the inference kernels' (ew_serve)
    ew = np.zeros((st.T, 5))
    ew[:, 3] = np.where(train, 4.0 * (st.layers * st.act_layer + st.act_final), st.ew_serve)
    with np.errstate(divide="ignore", invalid="ignore"):
        # (in the compiled round's order of operations: the tests compare to the last bit)
        attn = (st.flops_fwd - lin) / (bf16 * attn_eff)
        other = attn + ew / bw
        t = lin / peak + st.mfu * (other + cast)
        per_group = np.where((st.flops_fwd > 0) | (ew > 0), np.where(peak > 0, t, np.inf), 0.0)
    # training: a step is 3 forward passes plus the recomputation of the blocks (full: every
    # block group again, selective: the share of the GEMMs and casts the policy recomputes);
    # both redo the blocks' elementwise work (4 x act_layer per block), never the head or loss;
    # FlashAttention's backward (5 matmuls to the forward's 2) recomputes the scores: 0.5 x the
    # forward attention more, with or without checkpointing
    ew_blocks = np.zeros((st.T, 5))
    ew_blocks[:, 3] = np.where(st.checkpointing > 0, 4.0 * st.layers * st.act_layer, 0.0)
    redo = np.where(full[:, None], np.array([0.0, 1.0, 1.0, 0.0, 0.0]), 0.0)
    share = np.where(selective[:, None], st.sac_share, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        fa = np.where(st.flash & train, 0.5, 0.0)[:, None]
        rec = redo * t + share * (lin / peak + st.mfu * cast) + st.mfu * ew_blocks / bw + fa * (st.mfu * attn)
        rec = np.where((redo + share > 0) | (ew_blocks > 0) | ((fa > 0) & (attn > 0)), np.where(peak > 0, rec, np.inf), 0.0)
    tpt = np.where(train, (3.0 * per_group + rec).sum(-1), per_group.sum(-1)) / st.mfu
    head = np.where(train, 3.0 * per_group[..., 4] + rec[..., 4], per_group[..., 4]) / st.mfu  # the head's part of tpt
    wo = catalog.WEIGHT_ONLY[prec]  # (B, T, G)
    dequant = np.where(train, 0.0, (params * np.where(wo, 4.0, 0.0)).sum(-1))
    fsdp = 2.0 * weights + grads
    tp = 2.0 * L * h * 2.0  # two all-reduces of a BF16 hidden vector per layer
    comm = np.where(train, fsdp, tp)
    kv_heads = np.broadcast_to(st.kv_heads, unsafe.shape)
    fwd = per_group.sum(-1) / st.mfu
    # a serving pass looks up its tokens' rows of an embedding table; when the head has weights of
    # its own (untied) the table is not streamed; tied, the head's matmul reads all of it
    emb = params[:, 0] * wbytes[..., 0]
    stream = np.where(params[:, 4] > 0, weights - emb, weights)
    return TenantTerms(
        prec, unsafe, weights, grads, master, optimizer, act, kv_seq, tpt, kv_read, comm, kv_heads, head, dequant, stream, fwd
    )


def invalid_precision(st, precision: np.ndarray) -> np.ndarray:
    """(B, T) bool: a group runs a precision its GPU lacks, or a weight-only format in training."""
    t = np.arange(st.T)[:, None]
    lacks = ~st.supported[t, precision]  # (B, T, G)
    weight_only = st.is_train[:, None] & catalog.WEIGHT_ONLY[precision]
    return (lacks | weight_only).any(-1)


def reference_rate(st) -> np.ndarray:
    """Each tenant's reference work rate (T,), the denominator of its value, from this oracle's
    own stage 1 (not ``st.ref_rate``, which the kernel derives): training, tokens/s on
    ``max_gpus`` GPUs at the time per forward token of an all-BF16 map, 3 passes, no
    communication or recomputation; serving, its mean arrival rate."""
    got = st.__dict__.get("_ref_rate")
    if got is None:
        bf16 = np.full((1, st.T, catalog.N_GROUPS), cost.BF16, np.int64)
        tpt = tenant_terms(st, bf16, False).forward_time_per_token[0]
        got = np.where(st.is_train, st.max_gpus / (TRAIN_FLOPS_FACTOR * tpt), st.arrival_rate)
        st.__dict__["_ref_rate"] = got
    return got


# --- arbiter ---------------------------------------------------------------------------------


def _rank(primary: np.ndarray, tiebreak: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """Rank (0 = first) along the last axis by ``first`` descending (if given), then
    ``primary`` descending (if given), then ``tiebreak`` ascending."""
    keys = [tiebreak] + [-np.broadcast_to(k, tiebreak.shape) for k in (primary, first) if k is not None]
    order = np.lexsort(keys, axis=-1)
    rank = np.empty_like(order)
    rows = np.arange(order.shape[0])[:, None]
    rank[rows, order] = np.arange(order.shape[-1])
    return rank


def waterfill(caps: np.ndarray, weights: np.ndarray, capacity: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """Weighted max-min fair integer shares.

    caps: (B, T) int64 >= 0; weights: (B, T) > 0 where caps > 0 (or None: equal weights);
    capacity: (B,) int64; tiebreak: (B, T) or (T,). Returns (B, T) int64 with
    ``0 <= x <= caps`` and ``sum x = min(capacity, sum caps)``.
    """
    caps = np.asarray(caps, np.int64)
    total = caps.sum(-1)
    uncontended = total <= capacity
    if uncontended.all():  # no contention in any row: every request is granted
        return caps
    asks = caps > 0
    if weights is None:
        w = asks.astype(np.float64)
        level = np.where(asks, caps, np.inf)  # caps / 1.0
    else:
        w = np.where(asks, weights, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(asks, caps / np.where(w > 0, w, 1.0), np.inf)
    order = np.argsort(level, axis=-1, kind="stable")
    lv = np.take_along_axis(level, order, -1)
    cs = np.take_along_axis(caps, order, -1).astype(np.float64)
    ws = np.take_along_axis(w, order, -1)
    capped_before = np.cumsum(cs, -1) - cs  # caps of tenants saturated below this level
    w_from = np.cumsum(ws[:, ::-1], -1)[:, ::-1]  # weights still growing at this level
    cap_f = capacity.astype(np.float64)[:, None]
    with np.errstate(invalid="ignore"):
        filled = np.where(np.isfinite(lv), capped_before + lv * w_from, np.inf)
    k = np.argmax(filled >= cap_f, axis=-1)[:, None]  # first level at which the pool is full
    wk = np.take_along_axis(w_from, k, -1)[:, 0]
    lam = (cap_f[:, 0] - np.take_along_axis(capped_before, k, -1)[:, 0]) / np.where(wk > 0, wk, 1.0)
    x = np.minimum(caps, lam[:, None] * w)
    base = np.floor(x + 1e-9).astype(np.int64)
    np.minimum(base, caps, out=base)
    left = capacity - base.sum(-1)  # GPUs to hand out one by one (< T)
    if left.any():
        below = base < caps
        frac = np.where(below, x - base, -1.0)
        bonus = _rank(frac, np.broadcast_to(tiebreak, caps.shape)) < left[:, None]
        base += bonus & below
    return np.where(uncontended[:, None], caps, base)


def greedy(caps: np.ndarray, rank: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Serve tenants fully in ``rank`` order (0 first) until the capacity runs out. (B, T)."""
    order = np.argsort(rank, axis=-1)
    r = np.arange(caps.shape[0])[:, None]
    cs = caps[r, order]
    before = np.cumsum(cs, -1) - cs
    got = np.minimum(np.maximum(capacity[:, None] - before, 0), cs)
    out = np.empty_like(caps)
    out[r, order] = got
    return out


def admissible(st, request: np.ndarray, bid: np.ndarray) -> np.ndarray:
    """The requests the mechanism considers: under a reserve a bid below the reserve price
    asks for nothing. (B, T)."""
    if st.mechanism.reserve:
        return np.where(bid >= st.reserve_price, request, 0)
    return request


def _key(st, name: str, bid: np.ndarray) -> np.ndarray:
    """A mechanism's per-tenant key by name (``fleet_marl.config.mechanisms.KEYS``), (B, T)."""
    return {"bid": bid, "priority": np.broadcast_to(st.priority, bid.shape)}[name]


def clear(st, request: np.ndarray, bid: np.ndarray, tiebreak: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run the configured mechanism on every pool.

    request: (B, T) int64 (already capped by presence, max_gpus and budget); bid: (B, T) > 0.
    Returns (alloc (B, T) int64, price multiplier of list price (B, T) float64).
    """
    B, T = request.shape
    tiebreak = np.broadcast_to(tiebreak, (B, T))
    bid = np.broadcast_to(bid, (B, T))
    mech = st.mechanism  # a fleet_marl.config.mechanisms.Mechanism: the rules, as data
    keys = [_key(st, k, bid) for k in mech.by]
    request = admissible(st, request, bid)
    one_pool = len(st.pool_capacity) == 1
    alloc = None if one_pool else np.zeros((B, T), np.int64)
    mult = np.ones((B, T))
    for q, cap in enumerate(st.pool_capacity):
        in_pool = st.pool == q
        caps = request if one_pool else np.where(in_pool, request, 0)
        capacity = np.full(B, cap, np.int64)
        if mech.clears == "waterfill":  # weighted by its key, equal weights without one
            got = waterfill(caps, keys[0] if keys else None, capacity, tiebreak)
        elif mech.clears == "greedy":  # highest keys first (the first key first), then the draw
            got = greedy(caps, _rank(keys[-1] if keys else None, tiebreak, first=keys[0] if len(keys) == 2 else None), capacity)
        else:
            raise ValueError(f"the oracle has no clearing rule {mech.clears!r}")
        if mech.pays == "clearing":  # the highest bid not fully served, at least the reserve
            short = (got < caps) & in_pool
            clearing = np.maximum(st.reserve_price if mech.reserve else 0.0, np.where(short, bid, 0.0).max(-1))
            mult = np.where(in_pool, clearing[:, None], mult)
        alloc = got if one_pool else np.where(in_pool, got, alloc)
    if mech.pays == "bid":
        mult = np.asarray(bid, np.float64)
    return alloc, np.broadcast_to(mult, (B, T))


def kept_placement(alloc: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """The GPUs each tenant keeps of last round's placement ``prev`` (B, T, K) when granted
    ``alloc`` (B, T): all of them if it was granted at least as many, else ``alloc`` of them on
    the nodes where it held the most first (ties: the lower node index)."""
    order = np.argsort(-prev, axis=-1, kind="stable")
    held = np.take_along_axis(prev, order, -1)
    before = np.cumsum(held, -1) - held
    take = np.minimum(np.maximum(alloc[..., None] - before, 0), held)
    kept = np.zeros_like(prev)
    np.put_along_axis(kept, order, take, -1)
    return kept


def place(st, alloc: np.ndarray, kept: np.ndarray | None = None) -> np.ndarray:
    """Place each tenant's GPUs on the nodes of its pool: best-fit decreasing, after the GPUs
    each tenant ``kept`` (B, T, K) of last round's placement (none when None).

    Tenants go largest first (ties by index). A tenant that fits on one node goes to the node of
    its pool with the least free GPUs that still holds it (best fit); one that fits on no
    single node takes the nodes with the most free GPUs first, so it spans as few nodes as the
    free space allows. Returns gpus_on_node (B, T, K) int64.

    The loop runs over sorted positions (at most T), each step vectorised over the batch.
    """
    B, T = alloc.shape
    K = st.K
    gon = np.zeros((B, T, K), np.int64) if kept is None else kept.copy()
    need = alloc - gon.sum(-1)
    npos = int((alloc > 0).sum(-1).max(initial=0))
    if npos == 0:
        return gon
    order = np.argsort(-alloc, axis=-1, kind="stable")[:, :npos]  # largest first, ties by index
    a_sorted = np.take_along_axis(need, order, -1)
    in_pool = (st.pool[:, None] == st.node_pool[None, :])[order]  # (B, npos, K) node k can host
    rows = np.arange(B)
    col = rows[:, None]
    free = st.gpus_per_node - gon.sum(1)
    big = np.int64(1) << 40
    for j in range(npos):
        t = order[:, j]
        a = a_sorted[:, j]
        avail = np.where(in_pool[:, j], free, -1)
        fit_key = np.where(avail >= a[:, None], avail, big)
        k_best = fit_key.argmin(-1)
        fits = fit_key[rows, k_best] < big
        if fits.all():  # the common case: one node holds it in every row
            free[rows, k_best] -= a
            gon[rows, t, k_best] += a
            continue
        take = np.zeros((B, K), np.int64)
        by_free = np.argsort(-avail, axis=-1, kind="stable")
        f_sorted = np.maximum(avail[col, by_free], 0)
        before = np.cumsum(f_sorted, -1) - f_sorted
        take[col, by_free] = np.minimum(np.maximum(a[:, None] - before, 0), f_sorted)
        take[fits] = 0
        take[rows[fits], k_best[fits]] = a[fits]
        free -= take
        gon[rows, t] += take
    return gon


# --- memory and throughput -----------------------------------------------------------------


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
    # the backward frees activations as it writes gradients: they never peak together
    return Memory(w, g, m, o, a, kv, w + m + o + np.maximum(g, a) + kv)


def largest_fitting_batch(terms: TenantTerms, n: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """The largest batch whose peak bytes per GPU (weights, master, optimizer, the larger of
    gradients and activations, KV cache) fit ``capacity``; may be < 1, 0 when the gradients alone
    do not fit."""
    inv = 1.0 / np.maximum(n, 1)
    fixed = (terms.weights + terms.master + terms.optimizer) * inv
    per_seq = terms.per_seq_local + terms.per_seq_sharded / np.minimum(np.maximum(n, 1), terms.kv_heads)
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.floor((capacity - fixed) / per_seq)
    return np.where(terms.grads * inv > capacity - fixed, 0.0, fit)


class Throughput(NamedTuple):
    """(B, T) each, before throttling."""

    work_rate: np.ndarray  # train: tokens/s; serve: requests/s
    tokens_per_s: np.ndarray  # train: tokens/s; serve: generated tokens/s
    efficiency: np.ndarray  # compute (or memory) time / time with communication
    ttft_s: np.ndarray  # serve: one request's prefill plus the wait for the running step
    tpot_s: np.ndarray  # serve: time per output token at this batch


def throughput(st, terms: TenantTerms, n: np.ndarray, batch: np.ndarray, nodes: np.ndarray, prompt=None, output=None) -> Throughput:
    """Roofline throughput on ``n`` GPUs spread over ``nodes`` nodes at ``batch``, serving
    requests of ``prompt`` and ``output`` tokens (default: the config's means)."""
    prompt = st.prompt_tokens if prompt is None else prompt
    output = st.output_tokens if output is None else output
    nf = np.maximum(n, 1).astype(np.float64)
    # a ring over several nodes crosses them on all the tenant's NICs of a node at once: per GPU,
    # (GPUs per node) x its NIC rate, at most NVLink's
    per_node = np.maximum(n, 1) / np.maximum(nodes, 1)
    bw_link = np.where(nodes > 1, np.minimum(st.intra_bw, per_node * st.inter_bw), st.intra_bw)
    b = np.maximum(batch, 1).astype(np.float64)
    hide = 1.0 - st.comm_overlap
    tpt = terms.time_per_token
    # training: data parallel FSDP, compute-bound; tpt is a step's seconds per token
    t_comp = st.seq_len * b * tpt
    t_comm = terms.comm_bytes * (nf - 1.0) / nf / bw_link
    step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
    # then the optimizer step, once per step, on this GPU's 1 / n shard: unfused AdamW touches 20
    # elements per parameter (lerp 3, mul 2, addcmul 3, weight decay 2, sqrt 2, div 2, add 2,
    # addcdiv 4) and clipping by the norm 3 more; terms.optimizer holds 2 (the moments), so the
    # step moves 23 / 2 of it, at 0.92 of the HBM bandwidth
    step = step + 11.5 * terms.optimizer / nf / (st.bw * 0.92)
    train_rate = nf * b * st.seq_len / step
    # serving: one tensor-parallel replica with in-flight batching; its kernels run one after
    # another. The GEMMs stream every weight once and do their FLOPs, one after the other (no
    # overlap); the decode attention reads each sequence's KV cache; attention FLOPs and
    # elementwise traffic take the rest of the time per token. A step carries the b decode tokens
    # plus their prompts spread over their output tokens, b (1 + P / O), of which only each
    # prompt's last token runs the LM head. Each GPU does 1 / n of a token's work but the norms
    # and residual adds on the full hidden state (2 fused add + RMSNorms of 4 h values a block,
    # the final norm's 4 h, BF16), which every GPU of the replica runs whole. A pass on > 1 GPU
    # all-reduces its tokens' hidden states twice per layer (2 h bytes a token each), never
    # hidden, on the faster of NCCL's ring -- the line through the GPU type's published sweep,
    # latency + 2 (n - 1) / n x bytes / bus bandwidth, across nodes at most the node's NICs -- and,
    # on NVLink in one node, the custom one-shot kernel: 6 us + (n - 1) x bytes / link; each forward
    # pass adds its kernels' stalls and the serving engine's fixed 1 ms. TTFT: the prompt's prefill, after waiting half a
    # step whenever another of the b requests runs (probability 1 - exp(-(b - 1))), plus the
    # others' work in the step that carries it.
    calls = np.where(st.is_train, 0.0, 2.0 * st.layers)
    bus = np.where(nodes > 1, np.minimum(st.ar_bus, per_node * st.inter_bw), st.ar_bus)
    one_shot = (st.nvlink > 0) & (nodes <= 1)

    def allreduce(tokens):
        size = tokens * 2.0 * st.layers * 2.0 * st.hidden
        ring = calls * st.ar_lat + 2.0 * (nf - 1.0) / nf * size / bus
        t = np.where(one_shot, np.minimum(ring, calls * 6e-6 + (nf - 1.0) * size / st.intra_bw), ring)
        return np.where(nf > 1.0, t, 0.0)

    rep = np.where(st.is_train, 0.0, 2.0 * (st.layers * 8.0 * st.hidden + 4.0 * st.hidden) / (st.bw * 0.92)) * (1.0 - 1.0 / nf)
    # every GPU of the replica runs each of its layers' 10 kernels (vLLM's Llama decoder layer),
    # the memory pipeline stalling about 5 us at each boundary (Hazy Research, "No Bubbles")
    lat = np.where(st.is_train, 0.0, st.layers * 10.0 * 5e-6)
    # the weights stream at torchao's achievable share of HBM bandwidth, 0.92; the KV cache at mbu
    w_read = terms.stream_bytes / nf / (st.bw * 0.92)
    # only a prompt's last token goes through the LM head (the sampled position)
    with np.errstate(invalid="ignore"):
        t_prompt = np.where(np.isinf(tpt), np.inf, (tpt - terms.head_time_per_token) / nf + rep)
    t_head = terms.head_time_per_token / nf
    prefill = w_read + prompt * t_prompt + allreduce(prompt) + t_head + lat + 1e-3
    # a pass of at least dequant_tokens tokens converts the weight-only weights to BF16 first
    w_dq = np.where(st.dequant_tokens > 0, terms.dequant_bytes / nf / (st.bw * st.mbu), 0.0)
    prefill = np.where(prompt >= st.dequant_tokens, prefill + w_dq, prefill)
    out = np.maximum(output, 1.0)
    m = b + b / out * prompt
    kv_split = np.minimum(nf, terms.kv_heads)
    t_kv = b * terms.kv_read_per_seq / kv_split / (st.bw * st.mbu)
    t_dec_core = w_read + t_kv + b * (tpt / nf + rep) + b / out * (prompt * t_prompt + t_head)
    t_dec_core = np.where(m >= st.dequant_tokens, t_dec_core + w_dq, t_dec_core)
    t_dec = t_dec_core + allreduce(m) + lat + 1e-3
    serve_rate = b / (out * t_dec)
    # TTFT: the pass that runs a new prompt is one in-flight step, so it also does the b - 1
    # other requests' part of the step's per-request work (decode tokens, KV, prompts' share,
    # all-reduce bytes): the step less its fixed part (weights, stalls, the all-reduces' latency,
    # 1 ms, conversion)
    per_req = (t_dec - w_read - lat - allreduce(0.0) - 1e-3 - np.where(m >= st.dequant_tokens, w_dq, 0.0)) / b
    with np.errstate(invalid="ignore"):
        others = np.where(b > 1.0, (b - 1.0) * per_req, 0.0)
    train = st.is_train
    with np.errstate(invalid="ignore"):  # inf / inf where a precision is unsupported (vetoed)
        eff = np.where(train, t_comp / step, t_dec_core / t_dec)
    eff[np.isnan(eff)] = 0.0
    return Throughput(
        work_rate=np.where(train, train_rate, serve_rate),
        tokens_per_s=np.where(train, train_rate, serve_rate * output),
        efficiency=eff,
        ttft_s=np.where(train, 0.0, prefill + others + (1.0 - np.exp(1.0 - b)) * 0.5 * t_dec),
        tpot_s=np.where(train, 0.0, t_dec),
    )


# --- power and heat -------------------------------------------------------------------------


class PowerThermal(NamedTuple):
    factor: np.ndarray  # (B, T) clock factor from power cap and heat, 1 where not running
    power_throttled: np.ndarray  # (B, T) bool
    thermal_throttled: np.ndarray  # (B, T) bool
    tripped: np.ndarray  # (B, T) bool
    node_power_w: np.ndarray  # (B, K)
    rack_power_w: np.ndarray  # (B, R)
    temp_next: np.ndarray  # (B, K)


def _thermal_constants(st) -> tuple:
    """Per-scenario constants of ``power_thermal``, computed once per KernelStatic."""
    got = st.__dict__.get("_thermal")
    if got is None:
        g = st.gpus_per_node
        node_idle = g * st.node_idle_w  # (K,)
        got = (
            st.tdp_w - st.idle_w,  # (T,) dynamic W per GPU at full activity
            node_idle,
            st.rack_power_cap_w - node_idle @ st.rack_of,  # (R,) headroom for dynamic power
            g * st.node_tdp_w,  # (K,) node power at TDP
            np.exp(-st.round_seconds / st.thermal_tau_s),
            st.critical_temp_c - st.throttle_temp_c,
        )
        st.__dict__["_thermal"] = got
    return got


def power_thermal(st, gpus_on_node: np.ndarray, activity: np.ndarray, temp0: np.ndarray) -> PowerThermal:
    """Rack power cap, then the node thermal model, over one round.

    gpus_on_node: (B, T, K); activity: (B, T) in [0, 1] (share of the round at full power);
    temp0: (B, K) or (K,).
    """
    dyn_w, node_idle, headroom, full, decay, _span = _thermal_constants(st)
    dyn = dyn_w * activity  # (B, T) dynamic W per GPU
    node_dyn = np.einsum("btk,bt->bk", gpus_on_node, dyn)
    rack_of = st.rack_of
    rack_dyn = node_dyn @ rack_of
    with np.errstate(divide="ignore", invalid="ignore"):
        f_rack = np.where(
            rack_dyn > 0, np.cbrt(np.clip(headroom / np.where(rack_dyn > 0, rack_dyn, 1.0), 0.0, 1.0)), 1.0
        )  # idle + f^3 dyn = cap
    f_cap = f_rack[:, st.node_rack]  # (B, K)

    def settle(power):
        t_ss = st.ambient_c + st.thermal_rise_at_tdp_c * power / full
        return t_ss + (temp0 - t_ss) * decay

    crit, limit = st.critical_temp_c, st.throttle_temp_c
    # thermal slowdown: the largest clock factor f in [0, 1] whose round ends at or below the
    # max operating temperature; node power is idle + dyn (f_cap f)^3, so T_next is affine in
    # u = f^3: T_next(u) = T_next(0) + u (T_next(1) - T_next(0))
    hot = settle(node_idle + node_dyn * f_cap**3)  # f = 1
    cool = settle(node_idle + 0.0 * node_dyn)  # f = 0: idle
    with np.errstate(divide="ignore", invalid="ignore"):
        f_heat = np.where(hot <= limit, 1.0, np.cbrt(np.clip((limit - cool) / (hot - cool), 0.0, 1.0)))
    f_heat = np.where((hot > limit) & (hot == cool), 0.0, f_heat)  # no dynamic power to shed
    dead = temp0 >= crit
    f_heat = np.where(dead, 0.0, f_heat)  # a node already past shutdown stays off
    t_pred = cool  # trips if even idle the round ends at or past shutdown
    f_node = f_cap * f_heat
    node_power = node_idle + node_dyn * f_node**3  # dynamic power ~ C V^2 f, V ~ f
    temp_next = settle(node_power)
    on = gpus_on_node > 0  # (B, T, K)
    fac = np.where(on, f_node[:, None, :], np.inf).min(-1)
    fac[fac == np.inf] = 1.0  # runs on no node
    # the three per-node flags as bits, OR-ed over each tenant's nodes in one reduction
    bits = (f_cap < 1.0).view(np.uint8) | ((f_heat < 1.0).view(np.uint8) << 1) | (((t_pred >= crit) | dead).view(np.uint8) << 2)
    tb = np.bitwise_or.reduce(on * bits[:, None, :], axis=-1)
    return PowerThermal(
        factor=fac,
        power_throttled=(tb & 1).astype(bool),
        thermal_throttled=(tb & 2).astype(bool),
        tripped=(tb & 4).astype(bool),
        node_power_w=node_power,
        rack_power_w=node_power @ rack_of,
        temp_next=temp_next,
    )


# --- the round --------------------------------------------------------------------------------


def restart_seconds(st, terms: TenantTerms, n: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """(B, T) seconds a restart costs on ``n`` GPUs over ``nodes`` nodes: the fixed part plus
    the checkpoint read at ``min(n x per-GPU rate, nodes x per-node rate)``. A trainer reads an
    fp32 master copy and Adam's m and v (4 + 4 + 4 bytes a parameter); a server its weights as
    stored (stage 1's weight bytes at its precision map)."""
    n_params = st.params.sum(-1)  # (T,)
    ckpt = np.where(st.is_train, (4.0 + 4.0 + 4.0) * n_params, terms.weights)
    rate = np.minimum(n * st.load_gpu_bps, np.maximum(nodes, 1) * st.load_node_bps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, st.restart_seconds + ckpt / rate, 0.0)


class Restarts(NamedTuple):
    restarted: np.ndarray  # (B, T) bool a restart begins
    carry: np.ndarray  # (B, T) seconds added to it (a planned save) or carried on (a restart under way)
    lost_tokens: np.ndarray  # (B, T) train: tokens a preemption loses
    lost_s: np.ndarray  # (B, T) train: their seconds of training
    since: np.ndarray  # (B, T) the state's seconds since the last checkpoint
    unsaved: np.ndarray  # (B, T) the state's tokens since it


def restart_state(st, state, rows, gpus, prev, alloc, gon, nodes, prev_gon) -> Restarts:
    """Who restarts and at what cost beyond the load (docs/model.md section 12.3). With
    persistent placement a tenant with as many GPUs as before but on other nodes than last
    round's migrates (a restart); a trainer that lost GPUs it still asked for, or was moved, is
    preempted and loses its unsaved tokens; one that changed as it asked saves a checkpoint
    first (12 bytes a parameter at its new grant's loaders' rate); a tenant whose grant did not
    change carries on the restart still ahead; one with no GPUs drops it."""
    B, T = alloc.shape
    has = alloc > 0

    def field(v):
        return np.zeros((B, T)) if v is None else np.broadcast_to(rows(v, (T,)), (B, T))

    left, since, unsaved = field(state.restart_left_s), field(state.since_ckpt_s), field(state.unsaved_tokens)
    none = np.zeros((B, T))
    if not st.persistent_placement:
        return Restarts((alloc != prev) & has, none, none, none, since, unsaved)
    if prev_gon is None:
        moved = np.zeros((B, T), bool)
    else:
        moved = has & (alloc == prev) & (prev_gon.sum(-1) > 0) & (gon != prev_gon).any(-1)
    changed = (alloc != prev) | moved
    restarted = changed & has
    train = np.broadcast_to(st.is_train, (B, T))
    quits = train & changed & (prev > 0)
    preempted = quits & (moved | ((alloc < prev) & (alloc < gpus)))
    saves = quits & ~preempted & has & (left == 0.0)
    rate = np.minimum(alloc * st.load_gpu_bps, np.maximum(nodes, 1) * st.load_node_bps)
    with np.errstate(divide="ignore", invalid="ignore"):
        save_s = np.where(saves, 12.0 * st.params.sum(-1) / rate, 0.0)
    carry = np.where(changed, save_s, np.where(has, left, 0.0))
    return Restarts(restarted, carry, np.where(preempted, unsaved, 0.0), np.where(preempted, since, 0.0), since, unsaved)


def checkpoint_clock(st, rs: Restarts, alloc, run_s, trained) -> tuple[np.ndarray, np.ndarray]:
    """A trainer's seconds and tokens since its last checkpoint at the round's end: counted
    from 0 after a restart or without GPUs, ``run_s`` seconds of training at an even rate, a
    checkpoint every ``checkpoint_every_s`` of them (never when 0)."""
    B, T = alloc.shape
    if not st.persistent_placement:
        return np.zeros((B, T)), np.zeros((B, T))
    reset = rs.restarted | (alloc == 0)
    since0 = np.where(reset, 0.0, rs.since)
    unsaved0 = np.where(reset, 0.0, rs.unsaved)
    every = np.broadcast_to(st.checkpoint_every_s, (B, T))
    clock = since0 + run_s
    wrote = (every > 0) & (clock >= every) & (run_s > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        after = np.fmod(clock, np.where(every > 0, every, 1.0))
        since = np.where(wrote, after, clock)
        unsaved = np.where(wrote, trained * np.minimum(after, run_s) / np.where(run_s > 0, run_s, 1.0), unsaved0 + trained)
    train = st.is_train
    return np.where(train, since, 0.0), np.where(train, unsaved, 0.0)


def evaluate(st, actions: Actions, state: RoundState, draws: Draws, present=None) -> Outcome:
    """The round for every batch row (inputs already checked), in numpy."""
    prec = np.asarray(actions.precision)
    prompt, output = draws.prompt_tokens, draws.output_tokens
    if prompt is not None or output is not None:  # the lengths' rows and the actions' rows together
        lead = _lead_shape(actions, state, draws, present)
        prec = np.broadcast_to(prec, lead + prec.shape[-2:])
        prompt = np.broadcast_to(st.prompt_tokens if prompt is None else prompt, lead + (st.T,))
        output = np.broadcast_to(st.output_tokens if output is None else output, lead + (st.T,))
    terms = tenant_terms(st, prec, not st.veto, prompt, output)
    invalid = invalid_precision(st, prec)
    return _stage2(st, actions, terms, invalid, state, draws, present)


def _lead_shape(actions: Actions, state: RoundState, draws: Draws, present) -> tuple[int, ...]:
    shapes = [
        np.shape(actions.gpus)[:-1],
        np.shape(state.prev_alloc)[:-1],
        np.shape(state.temp_c)[:-1],
        np.shape(state.queue)[:-1],
        np.shape(state.remaining_tokens)[:-1],
        np.shape(state.budget_left)[:-1],
        np.shape(draws.arrivals)[:-1],
        np.shape(draws.tiebreak)[:-1],
    ] + [
        np.shape(v)[:-1]
        for v in (draws.prompt_tokens, draws.output_tokens, state.restart_left_s, state.since_ckpt_s, state.unsaved_tokens)
        if v is not None
    ]
    if present is not None:
        shapes.append(np.shape(present)[:-1])
    distinct = set(shapes)
    if len(distinct) == 1:
        return shapes[0]
    distinct.discard(())
    return distinct.pop() if len(distinct) == 1 else np.broadcast_shapes(*shapes)


def _row_view(lead: tuple[int, ...], B: int):
    """A function giving an input as (B, *tail), or something that broadcasts to it, without
    copying when it can (``lead`` is the broadcast leading shape, B its size)."""
    flat = len(lead) <= 1

    def rows(a, tail):
        a = np.asarray(a)
        if flat and a.shape[: a.ndim - len(tail)] in ((), (1,), (B,)):
            return a
        return np.broadcast_to(a, lead + tail).reshape((B,) + tail)

    return rows


def _stage2(st, actions: Actions, terms, invalid, state: RoundState, draws: Draws, present) -> Outcome:
    T = st.T
    lead = _lead_shape(actions, state, draws, present)
    B = int(np.prod(lead)) if lead else 1
    rows = _row_view(lead, B)

    gpus = rows(actions.gpus, (T,))
    bid = rows(actions.bid, (T,))
    batch_req = rows(actions.batch, (T,))
    pres = np.ones((B, T), bool) if present is None else np.broadcast_to(rows(present, (T,)), (B, T))
    G = catalog.N_GROUPS
    tg = terms.precision.ndim
    terms = type(terms)(*(rows(x, (T, G) if x.ndim == tg else (T,)) for x in terms))
    invalid = rows(invalid, (T,))
    prev = rows(state.prev_alloc, (T,))
    temp0 = rows(state.temp_c, (st.K,))
    queue = rows(state.queue, (T,))
    remaining = rows(state.remaining_tokens, (T,))
    budget = rows(state.budget_left, (T,))
    arrivals = rows(draws.arrivals, (T,))
    tiebreak = rows(draws.tiebreak, (T,))
    prompt = rows(st.prompt_tokens if draws.prompt_tokens is None else draws.prompt_tokens, (T,))
    output = rows(st.output_tokens if draws.output_tokens is None else draws.output_tokens, (T,))

    # --- arbiter -------------------------------------------------------------------------
    hours = st.round_seconds / 3600.0
    pay_mult = bid if st.mechanism.afford_at_bid else 1.0
    unit = st.list_price * pay_mult * hours  # USD per GPU for the round, at most
    afford = np.floor(np.maximum(budget, 0.0) / unit)
    afford = np.where(afford * unit > budget, afford - 1, afford)  # never overspend by rounding
    request = np.where(pres, np.minimum(np.minimum(gpus, st.max_gpus), afford), 0).astype(np.int64)
    request = admissible(st, request, bid)
    alloc, mult = clear(st, request, bid, tiebreak)
    if st.persistent_placement and state.prev_placement is not None:
        prev_gon = np.broadcast_to(np.asarray(state.prev_placement), lead + (T, st.K)).reshape(B, T, st.K)
        gon = place(st, alloc, kept_placement(alloc, prev_gon))
    else:
        gon = place(st, alloc)
    nodes = (gon > 0).sum(-1)
    rs = restart_state(
        st, state, rows, gpus, prev, alloc, gon, nodes, prev_gon if st.persistent_placement and state.prev_placement is not None else None
    )
    restarted = rs.restarted
    # the GPUs each tenant's parallel layout uses on each node (all of them without coupling.gang):
    # memory, throughput, contention, power and heat read them; the restart and the bill the grant
    ug = oracle_gang.usable_on_nodes(st, gon) if st.gang else gon
    used = ug.sum(-1)
    unodes = (ug > 0).sum(-1)
    uses = used > 0

    # --- safety: numerics and memory ------------------------------------------------------
    train = st.is_train
    if st.veto:
        batch = batch_req
        mem = memory_per_gpu(terms, used, batch)
        oom = (mem.total > st.mem_bytes) & uses
        vetoed = (terms.unsafe | invalid) & uses
        projected = np.zeros((B, T), bool)
    else:
        fit = largest_fitting_batch(terms, used, st.mem_bytes)
        batch = np.maximum(np.minimum(batch_req, fit), 1).astype(np.int64)
        oom = (fit < 1) & uses
        vetoed = invalid & uses
        projected = (terms.unsafe | (batch < batch_req)) & uses & ~oom & ~vetoed
        mem = memory_per_gpu(terms, used, batch)
    running = uses & ~oom & ~vetoed

    # --- cost: throughput ------------------------------------------------------------------
    thr = throughput(st, terms, used, batch, unodes, prompt, output)
    if st.contention:  # the restarts share the storage, the multi-leaf trainers their leaves' uplinks
        down = oracle_contention.restart_down(st, terms, alloc, nodes, restarted)
    else:
        down = np.where(restarted, restart_seconds(st, terms, alloc, nodes), 0.0)
    down = down + rs.carry  # a planned save before a restart, or the rest of one under way
    avail = np.maximum(st.round_seconds - down, 0.0)
    pending = np.maximum(down - st.round_seconds, 0.0) if st.persistent_placement else np.zeros((B, T))
    link = None
    if st.contention:
        link = oracle_contention.links(st, terms, ug, used, unodes, batch, running, thr.work_rate, avail)
        f_link = link.factor
        thr = thr._replace(work_rate=thr.work_rate * f_link, tokens_per_s=thr.tokens_per_s * f_link, efficiency=thr.efficiency * f_link)
        f_ckpt = oracle_contention.checkpoint_factor(st, terms, used, unodes, running, thr.work_rate)
        thr = thr._replace(work_rate=thr.work_rate * f_ckpt, tokens_per_s=thr.tokens_per_s * f_ckpt)
    demand = queue + arrivals
    capacity = thr.work_rate * avail
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(train, 1.0, np.where(capacity > 0, np.minimum(demand / capacity, 1.0), 0.0))
    activity = np.where(running, busy, 0.0)
    # a server's latencies are those at the load it carries: busy x batch requests in flight
    carried = throughput(st, terms, used, np.maximum(busy * batch, 1.0), unodes, prompt, output)
    light = ~train & (busy < 1.0)
    thr = thr._replace(ttft_s=np.where(light, carried.ttft_s, thr.ttft_s), tpot_s=np.where(light, carried.tpot_s, thr.tpot_s))

    # --- safety: power and heat -------------------------------------------------------------
    pt = power_thermal(st, ug, activity, temp0)
    running &= ~pt.tripped
    f = np.where(running, pt.factor, 0.0)

    # --- outcome ----------------------------------------------------------------------------
    work = np.where(running, thr.work_rate * f * avail, 0.0)  # train tokens, serve requests this round
    trained = np.where(train, np.minimum(remaining + rs.lost_tokens, work), 0.0)
    progress = trained - rs.lost_tokens  # net of what a preemption lost (0 without persistent placement)
    since_next, unsaved_next = checkpoint_clock(st, rs, alloc, np.where(running, avail, 0.0), trained)
    served = np.where(train, 0.0, np.minimum(demand, work))
    with np.errstate(divide="ignore", invalid="ignore"):
        on_time = (thr.tpot_s / f <= st.slo_tpot_s) & (thr.ttft_s / f <= st.slo_ttft_s) & running
        ttft_run = thr.ttft_s / f
    fresh = np.minimum(np.maximum(served - queue, 0.0), arrivals)
    good = np.where(on_time & ~train, fresh, 0.0)
    attain = np.where(arrivals > 0, good / np.where(arrivals > 0, arrivals, 1.0), 1.0)
    ttft50 = ttft99 = np.where(running & ~train, ttft_run, 0.0)
    if st.queueing:  # a server's queue: the requests served within the SLO, a share of the round's
        serving = running & ~train
        with np.errstate(divide="ignore", invalid="ignore"):
            d = oracle_queueing.prompt_work(throughput, st, terms, used, unodes, prompt, output) / f
            tpot_ok = thr.tpot_s / f <= st.slo_tpot_s
        q_good, ttft50, ttft99 = oracle_queueing.queue_outcome(
            st,
            np.where(serving, ttft_run, 0.0),
            np.where(serving, d, 0.0),
            thr.work_rate * f,
            batch.astype(np.float64),
            avail,
            queue,
            arrivals,
            tpot_ok,
            serving,
        )
        good = np.where(train, good, q_good)
        attain = np.where(train, attain, np.where(demand > 0, good / np.where(demand > 0, demand, 1.0), 1.0))
    spend = alloc * st.list_price * mult * hours
    ref = reference_rate(st) * st.round_seconds
    value = np.where(ref > 0, np.where(train, progress, good) / np.where(ref > 0, ref, 1.0), 0.0)
    utility = np.where(pres, st.priority * value - st.cost_weight * spend / st.spend_norm, 0.0)

    out = Outcome(
        requested=request,
        alloc=alloc,
        gpus_on_node=gon,
        nodes_spanned=nodes,
        usable_gpus=used,
        price=st.list_price * mult,
        restarted=restarted,
        precision=terms.precision if terms.precision.shape == (B, T, G) else np.broadcast_to(terms.precision, (B, T, G)).copy(),
        batch=batch if batch.shape == (B, T) else np.broadcast_to(batch, (B, T)).copy(),
        unsafe_numerics=terms.unsafe & uses,
        projected=projected,
        vetoed=vetoed,
        oom=oom,
        tripped=pt.tripped,
        throttle=np.where(running, pt.factor, 0.0),
        power_throttled=pt.power_throttled & running,
        thermal_throttled=pt.thermal_throttled & running,
        mem_weights=mem.weights,
        mem_grads=mem.grads,
        mem_master=mem.master,
        mem_optimizer=mem.optimizer,
        mem_activations=mem.activations,
        mem_kv_cache=mem.kv_cache,
        mem_total=mem.total,
        mem_capacity=np.repeat(st.mem_bytes[None], B, axis=0),
        tokens_per_s=thr.tokens_per_s * f,
        multi_gpu_efficiency=np.where(uses, thr.efficiency, 0.0),
        progress_tokens=progress,
        served=served,
        slo_good=good,
        slo_attainment=attain,
        queue_next=np.where(train, 0.0, demand - served),
        remaining_next=remaining - progress,
        spend=spend,
        budget_next=budget - spend,
        value=value,
        utility=utility,
        slowdown=np.ones((B, T)) if link is None else link.slowdown,
        link_load=np.zeros((B, T)) if link is None else link.link_load,
        restart_s=st.round_seconds - avail,
        ttft_p50_s=ttft50,
        ttft_p99_s=ttft99,
        restart_pending_s=pending,
        lost_tokens=rs.lost_tokens,
        lost_s=rs.lost_s,
        since_ckpt_s=since_next,
        unsaved_tokens=unsaved_next,
        welfare=utility.sum(-1),
        node_power_w=pt.node_power_w,
        rack_power_w=pt.rack_power_w,
        temp_next=pt.temp_next,
    )
    return out if lead == (B,) else _shape(out, lead)


def _shape(out: Outcome, lead: tuple[int, ...]) -> Outcome:
    """Every field is (B, ...) with B = prod(lead); give it the leading shape ``lead``."""
    return Outcome(**{f.name: getattr(out, f.name).reshape(lead + getattr(out, f.name).shape[1:]) for f in fields(out)})


def fair_share(pool: np.ndarray, capacity: np.ndarray, caps: np.ndarray, demanding: np.ndarray) -> np.ndarray:
    """Max-min fair split of each pool's ``capacity`` among ``demanding`` tenants, capped at ``caps``:
    the oracle of ``fleet_marl.fairness.fair_shares`` (compiled, B clusters at once).

    pool: (T,) pool index; capacity: (Q,); caps: (T,); demanding: (T,) bool -> (T,) float64.
    """
    c = np.where(demanding, caps, 0.0).astype(np.float64)
    if (np.bincount(pool, weights=c, minlength=capacity.shape[0]) <= capacity).all():
        return c  # no contention: everyone's share is its cap
    out = np.zeros(caps.shape, np.float64)
    for q in range(capacity.shape[0]):
        sel = np.flatnonzero((pool == q) & demanding)
        if sel.size == 0:
            continue
        cq = c[sel]
        if cq.sum() <= capacity[q]:
            out[sel] = cq
            continue
        s = np.sort(cq)
        left = capacity[q] - np.concatenate(([0.0], np.cumsum(s)[:-1]))  # capacity left before the j-th smallest
        level = left / (s.size - np.arange(s.size))
        j = np.argmax(level <= s)  # first cap the equal split does not clear
        out[sel] = np.minimum(cq, level[j])
    return out

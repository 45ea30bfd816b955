"""The round, compiled: stage 1 -> arbiter -> placement -> safety -> cost -> outcome, once per
batch row.

This is the only implementation of the round (``DESIGN.md`` section 5; every equation is in
``docs/model.md`` with its source). Stage 1, a tenant's terms under its own precision map, is
the sum of per-group table entries built once per scenario (``cost.stage1_tables``);
:func:`tenant_terms` adds them up. ``tests/oracle.py`` holds an independent numpy
implementation that the tests compare against, to 1e-9.

Compiled calls take packed arrays, field-major so that each field is one contiguous block:

* the scenario (:func:`pack_static`, built once per :class:`~fleet_marl.kernel.KernelStatic`):
  ``tf`` (T, ``len(TF)``) float64 and ``ti`` (T, ``len(TI)``) int64 per tenant, ``nf``
  (K, ``len(NF)``) float64 and ``ni`` (K, ``len(NI)``) int64 per node, ``sc`` float64 scalars
  (``SC``) followed by each pool's capacity, and ``tg`` (T, G, P, ``len(cost.GROUP_TERMS)``)
  the stage-1 table by layer group;
* the inputs: ``ins_i`` (``len(II)``, B, T) int64, ``ins_f`` (``len(IF)``, B, T) float64 and
  ``temp`` (B, K) float64;
* the outputs: ``out_f`` (``len(OF)``, B, T) float64, ``out_i`` (``len(OI)``, B, T) int64,
  ``out_b`` (``len(OB)``, B, T) bool, ``gon`` (B, T, K) int64, ``out_k`` (2, B, K) float64
  (node power, next temperature), ``rack`` (B, R) float64 and ``welfare`` (B,) float64.

:func:`evaluate_rows` writes the welfare of every row ``b``, and every other output of row
``b`` at index ``out_index[b]`` of the other outputs, or nowhere when it is -1: credit
assignment needs the whole outcome of each cluster's grand coalition and only the welfare of
its counterfactual rows.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel.cost import BF16, KV_BYTES, RECOMPUTE_FLOPS_FACTOR, TENANT_TERMS, TRAIN_FLOPS_FACTOR, stage1_tables
from fleet_marl.kernel.mechanisms import AUCTION, MAXMIN, PRIORITY, PROPORTIONAL, REGISTRY, argsort_asc, greedy, jit, sort_by, waterfill

G = catalog.N_GROUPS


def _layout(names: str) -> tuple[str, ...]:
    return tuple(names.split())


#: Per-tenant float columns of ``tf``.
TF = (
    _layout("list_price priority mem_bytes inter_bw intra_bw seq_len hbm_bw slo_ttft_s slo_tpot_s ref_rate spend_norm dyn_w") + TENANT_TERMS
)
#: Per-tenant int columns of ``ti``.
TI = _layout("max_gpus pool is_train checkpointing")
#: Per-node float columns of ``nf``: idle W of its GPUs, W of its GPUs at TDP, dynamic-power headroom of its rack.
NF = _layout("node_idle_w node_full_w rack_headroom_w")
#: Per-node int columns of ``ni``.
NI = _layout("node_pool node_rack")
#: Scalars at the head of ``sc`` (the pools' capacities follow).
SC = _layout(
    "mechanism afford_at_bid reserve veto gpus_per_node comm_overlap mbu round_s restart_s ambient_c rise_c decay "
    "critical_c span_c cost_weight mfu"
)
#: Input rows of ``ins_i`` and ``ins_f``.
II = _layout("gpus batch prev_alloc present") + tuple(f"precision{g}" for g in range(G))
IF = _layout("bid queue remaining_tokens budget_left arrivals tiebreak prompt_tokens output_tokens")
#: Output rows of ``out_f``, ``out_i`` and ``out_b`` (the names of :class:`~fleet_marl.kernel.Outcome`).
OF = _layout(
    "price throttle mem_weights mem_grads mem_master mem_optimizer mem_activations mem_kv_cache mem_total mem_capacity "
    "tokens_per_s multi_gpu_efficiency progress_tokens served slo_good slo_attainment queue_next remaining_next spend "
    "budget_next value utility"
)
OI = _layout("requested alloc nodes_spanned batch") + tuple(f"precision{g}" for g in range(G))
OB = _layout("restarted unsafe_numerics projected vetoed oom tripped power_throttled thermal_throttled")


def _index(layout: tuple[str, ...]) -> dict[str, int]:
    return {n: i for i, n in enumerate(layout)}


_tf, _sc, _ii, _of, _oi, _ob = (_index(x) for x in (TF, SC, II, OF, OI, OB))  # for the layout checks below
# column constants for the compiled code (numba reads module globals as compile-time constants)
(T_PRICE, T_PRIO, T_MEM, T_INTER, T_INTRA, T_SEQ, T_HBM, T_TTFT, T_TPOT, T_REF, T_NORM, T_DYN, T_OPT, T_ACT, T_KV, T_KVH, T_TP) = range(
    len(TF)
)
T_MAXG, T_POOL, T_TRAIN, T_CKPT = range(len(TI))
N_IDLE, N_FULL, N_HEAD = range(len(NF))
N_POOL, N_RACK = range(len(NI))
(
    S_MECH,
    S_AFFORD,
    S_RESERVE,
    S_VETO,
    S_GPN,
    S_OVERLAP,
    S_MBU,
    S_ROUND,
    S_RESTART,
    S_AMBIENT,
    S_RISE,
    S_DECAY,
    S_CRIT,
    S_SPAN,
    S_COSTW,
    S_MFU,
) = range(len(SC))
I_GPUS, I_BATCH, I_PREV, I_PRES, I_PREC = 0, 1, 2, 3, 4
F_BID, F_QUEUE, F_REMAIN, F_BUDGET, F_ARR, F_TIE, F_PROMPT, F_OUT = range(len(IF))
(
    O_PRICE,
    O_THROTTLE,
    O_MW,
    O_MG,
    O_MM,
    O_MO,
    O_MA,
    O_MKV,
    O_MTOT,
    O_MCAP,
    O_TPS,
    O_EFF,
    O_PROGRESS,
    O_SERVED,
    O_GOOD,
    O_ATTAIN,
    O_QNEXT,
    O_RNEXT,
    O_SPEND,
    O_BNEXT,
    O_VALUE,
    O_UTIL,
) = range(len(OF))
OI_REQ, OI_ALLOC, OI_NODES, OI_BATCH, OI_PREC = 0, 1, 2, 3, 4
OB_RESTART, OB_UNSAFE, OB_PROJ, OB_VETO, OB_OOM, OB_TRIP, OB_PTHR, OB_TTHR = range(len(OB))
assert [_tf[n] for n in ("list_price", "dyn_w", "tp_comm")] == [T_PRICE, T_DYN, T_TP] and _sc["mfu"] == S_MFU
assert _oi["precision0"] == OI_PREC and _ii["precision0"] == I_PREC and _of["utility"] == O_UTIL and _ob["thermal_throttled"] == OB_TTHR

_BIG = 1 << 40
_UNSAFE = catalog.UNSAFE.copy()  # (G, P) bool: module-level arrays are compile-time constants
_PREC_BYTES = catalog.PRECISION_BYTES.copy()
_KV_BYTES = KV_BYTES.copy()
_ATT, _MLP = catalog.GROUPS.index("attention"), catalog.GROUPS.index("mlp")


def pack_static(st) -> tuple[np.ndarray, ...]:
    """``(tf, ti, tg, nf, ni, sc)`` of a :class:`~fleet_marl.kernel.KernelStatic` (see the module doc)."""
    g = st.gpus_per_node
    tg, tenant_terms_ = stage1_tables(st)
    node_idle = g * st.node_idle_w
    headroom = st.rack_power_cap_w - node_idle @ st.rack_of  # (R,) W left for dynamic power at idle
    tf = np.stack(
        [
            st.list_price,
            st.priority,
            st.mem_bytes,
            st.inter_bw,
            st.intra_bw,
            st.seq_len,
            st.bw,
            st.slo_ttft_s,
            st.slo_tpot_s,
            st.ref_rate,
            st.spend_norm,
            st.tdp_w - st.idle_w,
            *tenant_terms_.T,
        ],
        axis=-1,
    ).astype(np.float64)
    ti = np.stack([st.max_gpus, st.pool, st.is_train, st.checkpointing], axis=-1).astype(np.int64)
    nf = np.stack([node_idle, g * st.node_tdp_w, headroom[st.node_rack]], axis=-1).astype(np.float64)
    ni = np.stack([st.node_pool, st.node_rack], axis=-1).astype(np.int64)
    sc = np.array(
        [
            st.mechanism,
            next(m for m in REGISTRY.values() if m.code == st.mechanism).afford_at_bid,
            st.reserve_price,
            st.veto,
            g,
            st.comm_overlap,
            st.mbu,
            st.round_seconds,
            st.restart_seconds,
            st.ambient_c,
            st.thermal_rise_at_tdp_c,
            np.exp(-st.round_seconds / st.thermal_tau_s),
            st.critical_temp_c,
            st.critical_temp_c - st.throttle_temp_c,
            st.cost_weight,
            st.mfu,
        ]
        + [float(c) for c in st.pool_capacity],
        np.float64,
    )
    out = tuple(np.ascontiguousarray(a) for a in (tf, ti, tg, nf, ni, sc))
    for a in out:
        a.setflags(write=False)
    return out


@jit
def _pairwise_block(x, lo, hi):
    """numpy's pairwise sum of at most 128 numbers: sequential below 8, else eight
    accumulators over blocks of 8, combined as a tree, then the remainder in order."""
    n = hi - lo
    if n < 8:
        res = 0.0
        for i in range(lo, hi):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = lo + 8
    end = hi - n % 8
    while i < end:
        r0 += x[i]
        r1 += x[i + 1]
        r2 += x[i + 2]
        r3 += x[i + 3]
        r4 += x[i + 4]
        r5 += x[i + 5]
        r6 += x[i + 6]
        r7 += x[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < hi:
        res += x[i]
        i += 1
    return res


@jit
def numpy_sum(x, lo, hi):
    """``x[lo:hi].sum()`` in numpy's order (pairwise: halves rounded to multiples of 8 down
    to blocks of at most 128), so that sums over tenants are bit-identical to fleet_marl
    0.2's numpy kernel: a difference reward ``G(z) - G(z_-i)`` cancels almost all of ``G``,
    and a last-bit change of ``G`` would show in it. The halving runs on an explicit stack
    (numba caches recursive functions poorly)."""
    if hi - lo <= 128:
        return _pairwise_block(x, lo, hi)
    # post-order walk of the halving tree: (lo, hi, children done) on one stack, sums on another
    s_lo = np.empty(128, np.int64)
    s_hi = np.empty(128, np.int64)
    s_done = np.empty(128, np.bool_)
    vals = np.empty(128)
    top, nv = 0, 0
    s_lo[0], s_hi[0], s_done[0] = lo, hi, False
    while top >= 0:
        a, b = s_lo[top], s_hi[top]
        if b - a <= 128:
            vals[nv] = _pairwise_block(x, a, b)
            nv += 1
            top -= 1
        elif s_done[top]:
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
            top -= 1
        else:
            s_done[top] = True
            n2 = (b - a) // 2
            n2 -= n2 % 8
            s_lo[top + 1], s_hi[top + 1], s_done[top + 1] = a + n2, b, False  # right half, summed second
            s_lo[top + 2], s_hi[top + 2], s_done[top + 2] = a, a + n2, False  # left half, summed first
            top += 2
    return vals[0]


@jit
def tenant_terms(tf, ti, tg, t, prec, project, mfu, prec_run, prompt, output):
    """Stage 1 of tenant ``t`` under the precision map ``prec`` (G,) at the cluster's ``mfu``,
    serving requests of ``prompt`` and ``output`` tokens on average: writes the map that runs
    into ``prec_run`` (G,) -- unsafe groups in BF16 when ``project`` -- and returns ``(unsafe,
    invalid, weights, grads, master, optimizer, per_seq_local, per_seq_sharded,
    time_per_token, kv_read_per_seq, comm_bytes, kv_heads)`` (``docs/model.md`` sections 2-3).
    Sums over groups run in group order, as numpy's ``sum(-1)`` does."""
    unsafe = False
    invalid = False
    for g in range(G):
        p = prec[g]
        invalid = invalid or tg[t, g, p, 4] != 0.0
        if _UNSAFE[g, p]:
            unsafe = True
            prec_run[g] = BF16 if project else p
        else:
            prec_run[g] = p
    weights = tg[t, 0, prec_run[0], 0]
    grads = tg[t, 0, prec_run[0], 1]
    master = tg[t, 0, prec_run[0], 2]
    spt = tg[t, 0, prec_run[0], 3]
    for g in range(1, G):
        p = prec_run[g]
        weights += tg[t, g, p, 0]
        grads += tg[t, g, p, 1]
        master += tg[t, g, p, 2]
        spt += tg[t, g, p, 3]
    train = ti[t, T_TRAIN] != 0
    act = tf[t, T_ACT] * (0.25 * (_PREC_BYTES[prec_run[_ATT]] + _PREC_BYTES[prec_run[_MLP]])) if train else 0.0
    kv_tok = tf[t, T_KV] * _KV_BYTES[prec_run[_ATT]]
    kv_seq = 0.0 if train else (prompt + output) * kv_tok
    kv_read = 0.0 if train else (prompt + 0.5 * output) * kv_tok
    comm = 2.0 * weights + grads if train else tf[t, T_TP]
    return unsafe, invalid, weights, grads, master, tf[t, T_OPT], act, kv_seq, spt / mfu, kv_read, comm, tf[t, T_KVH]


@jit
def fitting_batch(weights, grads, master, optimizer, per_seq_local, per_seq_sharded, kv_heads, n, capacity):
    """The largest batch whose bytes per GPU on ``n`` GPUs fit ``capacity`` (memory is affine
    in the batch); may be < 1. Training shards the weights, gradients, master copy and optimizer
    ``/ n`` (FSDP); serving splits the KV cache over at most ``kv_heads`` GPUs."""
    n1 = max(n, 1)
    fixed = (weights + grads + master + optimizer) * (1.0 / n1)
    per_seq = per_seq_local + per_seq_sharded / min(float(n1), kv_heads)
    return np.floor((capacity - fixed) / per_seq)


@jit
def memory_per_gpu(weights, grads, master, optimizer, per_seq_local, per_seq_sharded, kv_heads, n, batch):
    """Bytes per GPU on ``n`` GPUs (0 counts as 1) at ``batch`` sequences: ``(weights,
    gradients, fp32 master, optimizer, activations, KV cache)``."""
    inv = 1.0 / max(n, 1)
    return (
        weights * inv,
        grads * inv,
        master * inv,
        optimizer * inv,
        batch * per_seq_local,
        batch * per_seq_sharded / min(float(max(n, 1)), kv_heads),
    )


@jit
def roofline(
    is_train,
    checkpointing,
    seq_len,
    prompt_tokens,
    output_tokens,
    hbm_bw,
    intra_bw,
    inter_bw,
    mbu,
    comm_overlap,
    weights,
    time_per_token,
    kv_read_per_seq,
    comm_bytes,
    kv_heads,
    n,
    batch,
    nodes,
):
    """Throughput of one tenant on ``n`` GPUs over ``nodes`` nodes at ``batch``, before
    throttling: ``(work rate, tokens/s, efficiency, ttft s, tpot s)``. Training (FSDP data
    parallel) is compute-bound with the all-gather/reduce-scatter partly hidden; serving (one
    tensor-parallel replica) prefills compute-bound and decodes at the slower of memory and
    compute, plus two all-reduces per layer per token."""
    nf = float(max(n, 1))
    bw_link = inter_bw if nodes > 1 else intra_bw
    bf = float(max(batch, 1))
    hide = 1.0 - comm_overlap
    passes = RECOMPUTE_FLOPS_FACTOR if checkpointing else TRAIN_FLOPS_FACTOR
    t_comp = passes * seq_len * bf * time_per_token
    t_comm = comm_bytes * (nf - 1.0) / nf / bw_link
    step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
    if is_train:
        rate = nf * bf * seq_len / step
        eff = t_comp / step
        if eff != eff:
            eff = 0.0
        return rate, rate, eff, 0.0, 0.0
    tp_comm = 2.0 * t_comm  # the all-reduce moves twice the FSDP factor's bytes
    prefill = prompt_tokens * (time_per_token / nf + (tp_comm if hide == 1.0 else hide * tp_comm))
    t_mem = (weights / nf + bf * kv_read_per_seq / min(nf, kv_heads)) / (hbm_bw * mbu)
    t_cmp = bf * time_per_token / nf
    t_core = max(t_mem, t_cmp)
    t_dec = t_core + (bf * tp_comm if hide == 1.0 else hide * bf * tp_comm)
    rate = 1.0 / (prefill + output_tokens * t_dec / bf)
    eff = t_core / t_dec
    if eff != eff:
        eff = 0.0
    return rate, rate * output_tokens, eff, prefill, t_dec


@jit
def _clear_pools(b, q_caps, tf, ti, sc, ins_f, req, alloc, mult, caps, got, w, level, order, frac, zeros):
    """Run the mechanism on every pool of row ``b``: ``req`` (T,) requests -> ``alloc`` (T,)
    GPUs and ``mult`` (T,) the price paid as a multiple of list price."""
    T = req.shape[0]
    mech = int(sc[S_MECH])
    reserve = sc[S_RESERVE]
    bid = ins_f[F_BID, b]
    tie = ins_f[F_TIE, b]
    for t in range(T):
        mult[t] = 1.0
    for q in range(q_caps.shape[0]):
        cap = int(q_caps[q])
        for t in range(T):
            caps[t] = req[t] if ti[t, T_POOL] == q else 0
        if mech == MAXMIN:
            waterfill(caps, bid, True, cap, tie, got, w, level, order, frac, zeros)
        elif mech == PROPORTIONAL:
            waterfill(caps, bid, False, cap, tie, got, w, level, order, frac, zeros)
        elif mech == PRIORITY:
            sort_by(order, tf[:, T_PRIO], bid, tie, 3)
            greedy(caps, order, cap, got)
        elif mech == AUCTION:
            sort_by(order, zeros, bid, tie, 2)
            greedy(caps, order, cap, got)
            clearing = 0.0
            for t in range(T):
                if ti[t, T_POOL] == q and got[t] < caps[t] and bid[t] > clearing:
                    clearing = bid[t]
            clearing = max(reserve, clearing)
            for t in range(T):
                if ti[t, T_POOL] == q:
                    mult[t] = clearing
        else:
            raise ValueError("unknown mechanism code (see fleet_marl.kernel.mechanisms.REGISTRY)")
        for t in range(T):
            if ti[t, T_POOL] == q:
                alloc[t] = got[t]
    if mech == PROPORTIONAL:
        for t in range(T):
            mult[t] = bid[t]


@jit
def _place(alloc, ti, ni, gpn, gon, free, avail, order, by_free, neg_avail, count, t_nodes, n_nodes):
    """Best-fit decreasing: tenants largest first (ties by index); one that fits on a node of
    its pool goes to the fullest such node, one that fits on none takes the emptiest nodes
    first. Fills ``gon`` (T, K), and for each tenant ``t`` the nodes it runs on,
    ``t_nodes[t, :n_nodes[t]]`` (so that the round's loops over placements skip empty cells)."""
    T, K = gon.shape
    for k in range(K):
        free[k] = gpn
    # largest first, ties by index: a counting sort on the GPU counts (small integers)
    top = 0
    for t in range(T):
        top = max(top, alloc[t])
        for k in range(K):
            gon[t, k] = 0
        n_nodes[t] = 0
    for v in range(top + 1):  # count[v]: tenants granted exactly v (count has room for max_gpus + 1 values)
        count[v] = 0
    for t in range(T):
        count[alloc[t]] += 1
    npos = T - count[0]
    start = 0  # where the tenants granted v begin in order: after all granted more
    for v in range(top, 0, -1):
        c = count[v]
        count[v] = start
        start += c
    for t in range(T):
        if alloc[t] > 0:
            order[count[alloc[t]]] = t
            count[alloc[t]] += 1
    for j in range(npos):
        t = order[j]
        a = alloc[t]
        best = -1
        best_v = _BIG
        for k in range(K):
            avail[k] = free[k] if ni[k, N_POOL] == ti[t, T_POOL] else -1
            if avail[k] >= a and avail[k] < best_v:
                best_v = avail[k]
                best = k
        if best >= 0:
            gon[t, best] = a
            free[best] -= a
            t_nodes[t, 0] = best
            n_nodes[t] = 1
        else:
            for k in range(K):
                neg_avail[k] = -float(avail[k])
            argsort_asc(by_free, neg_avail)
            taken = 0
            for i in range(K):
                k = by_free[i]
                fk = max(avail[k], 0)
                take = min(max(a - taken, 0), fk)
                taken += fk
                gon[t, k] = take
                free[k] -= take
                if take > 0:
                    t_nodes[t, n_nodes[t]] = k
                    n_nodes[t] += 1


@jit
def evaluate_rows(tf, ti, tg, nf, ni, sc, ins_i, ins_f, temp, out_index, out_f, out_i, out_b, gon, out_k, rack, welfare):
    """Evaluate every row ``b`` of the packed inputs (see the module doc)."""
    _, B, T = ins_i.shape
    K = ni.shape[0]
    R = rack.shape[1]
    q_caps = sc[len(SC) :]
    hours = sc[S_ROUND] / 3600.0
    veto = sc[S_VETO] != 0.0
    afford_at_bid = sc[S_AFFORD] != 0.0
    mech = int(sc[S_MECH])
    reserve = sc[S_RESERVE]
    mfu = sc[S_MFU]
    round_s, restart_s, cost_w = sc[S_ROUND], sc[S_RESTART], sc[S_COSTW]
    ambient, rise, decay, crit, span = sc[S_AMBIENT], sc[S_RISE], sc[S_DECAY], sc[S_CRIT], sc[S_SPAN]
    mbu, overlap = sc[S_MBU], sc[S_OVERLAP]
    gpn = int(sc[S_GPN])
    # scratch in three blocks, one per dtype (a call of a few rows is dominated by allocations otherwise)
    max_n = ti[:, T_MAXG].max()
    nf_rows, ni_rows, nb_rows = len(OF) + 22, len(OI) + 4, len(OB) + 4
    fl = np.empty(nf_rows * T + 8 * K + 2 * R)
    it = np.empty(ni_rows * T + 3 * K + 2 * T * K + 2 * G + 2 * T * G + max_n + 2, np.int64)
    bo = np.empty(nb_rows * T + K, np.bool_)
    sf = fl[: nf_rows * T].reshape((nf_rows, T))  # one row's float results, per-tenant scratch, the stage-1 memo
    skf = fl[nf_rows * T : nf_rows * T + 8 * K].reshape((8, K))  # one row's node outputs, then per-node scratch
    sr = fl[nf_rows * T + 8 * K :].reshape((2, R))
    o = ni_rows * T
    si = it[:o].reshape((ni_rows, T))
    ski = it[o : o + 3 * K].reshape((3, K))
    o += 3 * K
    sg = it[o : o + 2 * T * K].reshape((2, T, K))
    o += 2 * T * K
    precs = it[o : o + 2 * G].reshape((2, G))
    o += 2 * G
    c_precs = it[o : o + 2 * T * G].reshape((2, T, G))
    o += 2 * T * G
    count = it[o:]
    sb = bo[: nb_rows * T].reshape((nb_rows, T))
    dead = bo[nb_rows * T :]
    rf, ri, rb, rk, rr, rg = sf[: len(OF)], si[: len(OI)], sb[: len(OB)], skf[:2], sr[0], sg[0]
    f0 = len(OF)
    w, level, frac, mult, zeros, activity, work_rate, avail_s, t_dec_a, prefill_a = (
        sf[f0],
        sf[f0 + 1],
        sf[f0 + 2],
        sf[f0 + 3],
        sf[f0 + 4],
        sf[f0 + 5],
        sf[f0 + 6],
        sf[f0 + 7],
        sf[f0 + 8],
        sf[f0 + 9],
    )
    c_terms = sf[f0 + 10 : f0 + 20]  # (10, T)
    c_len = sf[f0 + 20 : f0 + 22]  # (2, T) the request lengths the stage-1 memo was computed for
    zeros[:] = 0.0
    caps, got, order, n_nodes = si[len(OI)], si[len(OI) + 1], si[len(OI) + 2], si[len(OI) + 3]
    running, cached, unsafe_c, invalid_c = sb[len(OB)], sb[len(OB) + 1], sb[len(OB) + 2], sb[len(OB) + 3]
    cached[:] = False
    neg_avail, node_dyn, f_cap, f_heat, f_node, t_pred = skf[2], skf[3], skf[4], skf[5], skf[6], skf[7]
    free, by_free, avail = ski[0], ski[1], ski[2]
    rack_dyn = sr[1]
    t_nodes = sg[1]
    prec, prec_run = precs[0], precs[1]
    # each tenant's last stage 1: the precision map it was computed for (c_prec), the map that ran (c_run), its terms
    c_prec, c_run = c_precs[0], c_precs[1]
    req = ri[OI_REQ]
    alloc = ri[OI_ALLOC]
    for b in range(B):
        # --- arbiter: what each tenant may ask for ------------------------------------------
        for t in range(T):
            bid = ins_f[F_BID, b, t]
            budget = ins_f[F_BUDGET, b, t]
            unit = tf[t, T_PRICE] * (bid if afford_at_bid else 1.0) * hours  # USD per GPU for the round, at most
            af = np.floor(max(budget, 0.0) / unit)
            if af * unit > budget:  # never overspend by rounding
                af -= 1.0
            r = min(float(min(ins_i[I_GPUS, b, t], ti[t, T_MAXG])), af)
            asked = int(r) if ins_i[I_PRES, b, t] != 0 else 0
            if mech == AUCTION and not bid >= reserve:  # bids below the reserve ask for nothing
                asked = 0
            req[t] = asked
        _clear_pools(b, q_caps, tf, ti, sc, ins_f, req, alloc, mult, caps, got, w, level, order, frac, zeros)
        _place(alloc, ti, ni, gpn, rg, free, avail, order, by_free, neg_avail, count, t_nodes, n_nodes)
        # --- per tenant: numerics, memory, throughput ----------------------------------------
        for t in range(T):
            # stage 1 depends on the tenant, its precision map and its requests' lengths only: reuse it when
            # they are the ones this tenant had in the last row (a cluster's counterfactual rows share them)
            prompt, output = ins_f[F_PROMPT, b, t], ins_f[F_OUT, b, t]
            same = cached[t] and prompt == c_len[0, t] and output == c_len[1, t]
            for g in range(G):
                p = ins_i[I_PREC + g, b, t]
                if p != c_prec[t, g]:
                    same = False
                prec[g] = p
            if not same:
                unsafe, invalid, weights, grads, master, optimizer, psl, pss, tpt, kvr, comm, kvh = tenant_terms(
                    tf, ti, tg, t, prec, not veto, mfu, prec_run, prompt, output
                )
                c_len[0, t], c_len[1, t] = prompt, output
                c_terms[0, t], c_terms[1, t], c_terms[2, t], c_terms[3, t] = weights, grads, master, optimizer
                c_terms[4, t], c_terms[5, t], c_terms[6, t], c_terms[7, t] = psl, pss, tpt, kvr
                c_terms[8, t], c_terms[9, t] = comm, kvh
                unsafe_c[t], invalid_c[t] = unsafe, invalid
                for g in range(G):
                    c_prec[t, g] = prec[g]
                    c_run[t, g] = prec_run[g]
                cached[t] = True
            else:
                weights, grads, master, optimizer = c_terms[0, t], c_terms[1, t], c_terms[2, t], c_terms[3, t]
                psl, pss, tpt, kvr = c_terms[4, t], c_terms[5, t], c_terms[6, t], c_terms[7, t]
                comm, kvh = c_terms[8, t], c_terms[9, t]
                unsafe, invalid = unsafe_c[t], invalid_c[t]
            for g in range(G):
                ri[OI_PREC + g, t] = c_run[t, g]
            n = alloc[t]
            has = n > 0
            nodes = n_nodes[t]
            ri[OI_NODES, t] = nodes
            restarted = (n != ins_i[I_PREV, b, t]) and has
            rb[OB_RESTART, t] = restarted
            rf[O_PRICE, t] = tf[t, T_PRICE] * mult[t]
            batch_req = ins_i[I_BATCH, b, t]
            if veto:
                bt = batch_req
                vetoed = (unsafe or invalid) and has
                projected = False
            else:
                fit = fitting_batch(weights, grads, master, optimizer, psl, pss, kvh, n, tf[t, T_MEM])
                bt = int(max(min(float(batch_req), fit), 1.0))
                oom = fit < 1 and has
                vetoed = invalid and has
                projected = (unsafe or bt < batch_req) and has and not oom and not vetoed
            mw, mg, mm, mo, ma, mkv = memory_per_gpu(weights, grads, master, optimizer, psl, pss, kvh, n, bt)
            mtot = mw + mg + mm + mo + ma + mkv
            if veto:
                oom = mtot > tf[t, T_MEM] and has
            rf[O_MW, t] = mw
            rf[O_MG, t] = mg
            rf[O_MM, t] = mm
            rf[O_MO, t] = mo
            rf[O_MA, t] = ma
            rf[O_MKV, t] = mkv
            rf[O_MTOT, t] = mtot
            rf[O_MCAP, t] = tf[t, T_MEM]
            ri[OI_BATCH, t] = bt
            rb[OB_OOM, t] = oom
            rb[OB_VETO, t] = vetoed
            rb[OB_PROJ, t] = projected
            rb[OB_UNSAFE, t] = unsafe and has
            run = has and not oom and not vetoed
            running[t] = run
            train = ti[t, T_TRAIN] != 0
            rate, tps, eff, prefill, t_dec = roofline(
                train,
                ti[t, T_CKPT] != 0,
                tf[t, T_SEQ],
                prompt,
                output,
                tf[t, T_HBM],
                tf[t, T_INTRA],
                tf[t, T_INTER],
                mbu,
                overlap,
                weights,
                tpt,
                kvr,
                comm,
                kvh,
                n,
                bt,
                nodes,
            )
            work_rate[t] = rate
            rf[O_TPS, t] = tps
            rf[O_EFF, t] = eff if has else 0.0
            prefill_a[t] = prefill
            t_dec_a[t] = t_dec
            av = round_s - restart_s * restarted
            avail_s[t] = av
            demand = ins_f[F_QUEUE, b, t] + ins_f[F_ARR, b, t]
            capacity = rate * av
            if train:
                busy = 1.0
            else:
                busy = min(demand / capacity, 1.0) if capacity > 0 else 0.0
            activity[t] = busy if run else 0.0
        # --- safety: rack power cap, then the node thermal model -----------------------------
        for k in range(K):
            node_dyn[k] = 0.0
        for t in range(T):
            d = tf[t, T_DYN] * activity[t]
            for i in range(n_nodes[t]):
                k = t_nodes[t, i]
                node_dyn[k] += rg[t, k] * d
        for r in range(R):
            rack_dyn[r] = 0.0
        for k in range(K):
            rack_dyn[ni[k, N_RACK]] += node_dyn[k]
        for k in range(K):
            rd = rack_dyn[ni[k, N_RACK]]
            f_cap[k] = min(max(nf[k, N_HEAD] / rd, 0.0), 1.0) if rd > 0 else 1.0
            t0 = temp[b, k]
            tss = ambient + rise * (nf[k, N_IDLE] + node_dyn[k] * f_cap[k]) / nf[k, N_FULL]
            t_pred[k] = tss + (t0 - tss) * decay
            fh = min(max((crit - t_pred[k]) / span, 0.0), 1.0)
            dead[k] = t0 >= crit
            if dead[k]:  # a node already past shutdown stays off
                fh = 0.0
            f_heat[k] = fh
            f_node[k] = f_cap[k] * fh
            power = nf[k, N_IDLE] + node_dyn[k] * f_node[k]
            rk[0, k] = power
            tss = ambient + rise * power / nf[k, N_FULL]
            rk[1, k] = tss + (t0 - tss) * decay
        for r in range(R):
            rr[r] = 0.0
        for k in range(K):
            rr[ni[k, N_RACK]] += rk[0, k]
        # --- outcome: progress, service, money, utility -------------------------------------
        for t in range(T):
            fac = np.inf
            pthr = False
            tthr = False
            trip = False
            for i in range(n_nodes[t]):
                k = t_nodes[t, i]
                fac = min(fac, f_node[k])
                pthr = pthr or f_cap[k] < 1.0
                tthr = tthr or f_heat[k] < 1.0
                trip = trip or t_pred[k] >= crit or dead[k]
            if fac == np.inf:
                fac = 1.0
            run = running[t] and not trip
            f = fac if run else 0.0
            train = ti[t, T_TRAIN] != 0
            rb[OB_TRIP, t] = trip
            rf[O_THROTTLE, t] = f
            rb[OB_PTHR, t] = pthr and run
            rb[OB_TTHR, t] = tthr and run
            rf[O_TPS, t] = rf[O_TPS, t] * f
            work = work_rate[t] * f * avail_s[t] if run else 0.0
            queue = ins_f[F_QUEUE, b, t]
            arrivals = ins_f[F_ARR, b, t]
            remaining = ins_f[F_REMAIN, b, t]
            demand = queue + arrivals
            if train:
                progress = min(remaining, work)
                served = 0.0
            else:
                progress = 0.0
                served = min(demand, work)
            on_time = run and (t_dec_a[t] / f <= tf[t, T_TPOT]) and (prefill_a[t] / f <= tf[t, T_TTFT])
            fresh = min(max(served - queue, 0.0), arrivals)
            good = fresh if (on_time and not train) else 0.0
            spend = alloc[t] * tf[t, T_PRICE] * mult[t] * hours
            ref = tf[t, T_REF] * round_s
            value = ((progress if train else good) / ref) if ref > 0 else 0.0
            util = tf[t, T_PRIO] * value - cost_w * spend / tf[t, T_NORM] if ins_i[I_PRES, b, t] != 0 else 0.0
            rf[O_PROGRESS, t] = progress
            rf[O_SERVED, t] = served
            rf[O_GOOD, t] = good
            rf[O_ATTAIN, t] = good / arrivals if arrivals > 0 else 1.0
            rf[O_QNEXT, t] = 0.0 if train else demand - served
            rf[O_RNEXT, t] = remaining - progress
            rf[O_SPEND, t] = spend
            rf[O_BNEXT, t] = ins_f[F_BUDGET, b, t] - spend
            rf[O_VALUE, t] = value
            rf[O_UTIL, t] = util
        welfare[b] = numpy_sum(rf[O_UTIL], 0, T)
        j = out_index[b]
        if j >= 0:  # field by field: each field's row is contiguous in the outputs
            for c in range(len(OF)):
                for t in range(T):
                    out_f[c, j, t] = rf[c, t]
            for c in range(len(OI)):
                for t in range(T):
                    out_i[c, j, t] = ri[c, t]
            for c in range(len(OB)):
                for t in range(T):
                    out_b[c, j, t] = rb[c, t]
            for t in range(T):
                for k in range(K):
                    gon[j, t, k] = rg[t, k]
            for k in range(K):
                out_k[0, j, k] = rk[0, k]
                out_k[1, j, k] = rk[1, k]
            for r in range(R):
                rack[j, r] = rr[r]


@jit
def evaluate_one(
    tf,
    ti,
    tg,
    nf,
    ni,
    sc,
    gpus,
    batch,
    prev_alloc,
    present,
    precision,
    bid,
    queue,
    remaining,
    budget,
    arrivals,
    tiebreak,
    prompt,
    output,
    temp_c,
    flat_f,
    flat_i,
    flat_b,
):
    """One row from unpacked inputs ((T,) each, ``precision`` (T, G), ``temp_c`` (K,)) into three
    flat output buffers, one per dtype: ``flat_f`` holds ``out_f`` (``len(OF)``, T), ``out_k``
    (2, K), ``rack`` (R,) and the welfare, ``flat_i`` ``out_i`` (``len(OI)``, T) and ``gon`` (T,
    K), ``flat_b`` ``out_b`` (``len(OB)``, T), each C-ordered, in that order. Packs the inputs and
    runs :func:`evaluate_rows` (one evaluation's time is mostly the call itself, so it is one)."""
    T = gpus.shape[0]
    K = ni.shape[0]
    R = flat_f.shape[0] - len(OF) * T - 2 * K - 1
    nf_, ni_ = len(OF) * T, len(OI) * T
    out_f = flat_f[:nf_].reshape((len(OF), T))
    out_k = flat_f[nf_ : nf_ + 2 * K].reshape((2, K))
    rack = flat_f[nf_ + 2 * K : nf_ + 2 * K + R]
    welfare = flat_f[nf_ + 2 * K + R :]
    out_i = flat_i[:ni_].reshape((len(OI), T))
    gon = flat_i[ni_:].reshape((T, K))
    out_b = flat_b.reshape((len(OB), T))
    ins_i = np.empty((len(II), 1, T), np.int64)
    ins_f = np.empty((len(IF), 1, T))
    temp = np.empty((1, K))
    for t in range(T):
        ins_i[I_GPUS, 0, t] = gpus[t]
        ins_i[I_BATCH, 0, t] = batch[t]
        ins_i[I_PREV, 0, t] = prev_alloc[t]
        ins_i[I_PRES, 0, t] = present[t]
        for g in range(G):
            ins_i[I_PREC + g, 0, t] = precision[t, g]
        ins_f[F_BID, 0, t] = bid[t]
        ins_f[F_QUEUE, 0, t] = queue[t]
        ins_f[F_REMAIN, 0, t] = remaining[t]
        ins_f[F_BUDGET, 0, t] = budget[t]
        ins_f[F_ARR, 0, t] = arrivals[t]
        ins_f[F_TIE, 0, t] = tiebreak[t]
        ins_f[F_PROMPT, 0, t] = prompt[t]
        ins_f[F_OUT, 0, t] = output[t]
    for k in range(K):
        temp[0, k] = temp_c[k]
    evaluate_rows(
        tf,
        ti,
        tg,
        nf,
        ni,
        sc,
        ins_i,
        ins_f,
        temp,
        np.zeros(1, np.int64),
        out_f.reshape((len(OF), 1, T)),
        out_i.reshape((len(OI), 1, T)),
        out_b.reshape((len(OB), 1, T)),
        gon.reshape((1, T, K)),
        out_k.reshape((2, 1, K)),
        rack.reshape((1, R)),
        welfare,
    )


__all__ = [
    "IF",
    "II",
    "NF",
    "NI",
    "OB",
    "OF",
    "OI",
    "SC",
    "TF",
    "TI",
    "evaluate_one",
    "evaluate_rows",
    "fitting_batch",
    "memory_per_gpu",
    "pack_static",
    "roofline",
    "tenant_terms",
]

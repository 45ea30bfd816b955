"""The round's per-tenant cost, compiled: each tenant's stage 1 under its precision map
(:func:`tenant_terms`, memoised per row by :func:`tenant_stage1`), its bytes per GPU
(:func:`memory_per_gpu`, :func:`fitting_batch`) and its throughput on the GPUs it was granted
(``roofline.roofline`` on the groups :func:`roofline_groups` reads from the packed arrays, the
stage :func:`throughput`).

Stage 1 is the sum of per-group table entries built once per scenario
(``cost.stage1_tables``); every equation is in ``docs/model.md`` sections 2-3 with its source.
A tenant's memoised terms are the rows ``C_*`` of ``c_terms`` (13, T).
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel.cost import ADAM_BYTES, BF16, CKPT_TRAIN_BYTES, KV_BYTES, TRAIN_BYTES
from fleet_marl.kernel.jit import jit, jit_inline
from fleet_marl.kernel.layout import (
    F_ARR,
    F_OUT,
    F_PROMPT,
    F_QUEUE,
    F_RLEFT,
    F_SINCE,
    F_UNSAVED,
    I_GPUS,
    I_PREC,
    I_PREV,
    O_EFF,
    O_LINK,
    O_LOST,
    O_LOST_S,
    O_PENDING,
    O_RESTART_S,
    O_SLOW,
    O_TPS,
    OB_RESTART,
    OI_BATCH,
    OI_NODES,
    OI_PREC,
    OI_USABLE,
    S_CONTENTION,
    S_LOAD_GPU,
    S_LOAD_NODE,
    S_MBU,
    S_MFU,
    S_OVERLAP,
    S_PERSIST,
    S_RESTART,
    S_ROUND,
    S_VETO,
    T_ACT,
    T_ARB,
    T_ARL,
    T_DQT,
    T_HBM,
    T_INTER,
    T_INTRA,
    T_KST,
    T_KV,
    T_KVB,
    T_KVH,
    T_NVL,
    T_OPT,
    T_REPL,
    T_SEQ,
    T_TP,
    T_TPL,
    T_TRAIN,
    T_WIN,
    G,
)
from fleet_marl.kernel.roofline import Hardware, Job, Terms, roofline

#: Rows of the memoised stage 1 ``c_terms`` (12, T): bytes of weights, gradients, fp32 master
#: copy and optimizer, bytes per sequence kept on each GPU and split over the GPUs, seconds per
#: token, KV bytes read per sequence, communication bytes, KV heads, the LM head's share of the
#: seconds per token, the bytes of converting weight-only weights to BF16, and the weight bytes a
#: serving forward pass streams (all but an untied embedding table, of which it reads its tokens'
#: rows only).
C_W, C_G, C_M, C_O, C_PSL, C_PSS, C_TPT, C_KVR, C_COMM, C_KVH, C_HD, C_DQ, C_WS = range(13)
_UNSAFE = catalog.UNSAFE.copy()  # (G, P) bool: module-level arrays are compile-time constants
_ACT_BYTES = TRAIN_BYTES.copy()  # activations are saved in BF16 under FP8 training
_KV_BYTES = KV_BYTES.copy()
_ATT, _MLP = catalog.GROUPS.index("attention"), catalog.GROUPS.index("mlp")
_HEAD = catalog.GROUPS.index("head")
_EMB = catalog.GROUPS.index("embedding")


@jit_inline
def window_tokens(prompt, output, window):
    """``(held, read)``: the tokens of a sequence of ``prompt`` + ``output`` whose K and V its
    cache holds at the end, and the mean a decode step reads over the ``output`` steps; a
    sliding ``window`` caps both (docs/model.md section 4)."""
    held = min(prompt + output, window)
    if prompt + output <= window:
        read = prompt + 0.5 * output
    elif prompt >= window:
        read = window
    else:  # the cache fills up part of the way through the output
        read = ((window - prompt) * 0.5 * (prompt + window) + (prompt + output - window) * window) / output
    return held, read


@jit_inline
def tenant_terms(tf, ti, tg, t, prec, project, mfu, prec_run, prompt, output):
    """Stage 1 of tenant ``t`` under the precision map ``prec`` (G,) at the cluster's ``mfu``,
    serving requests of ``prompt`` and ``output`` tokens on average: writes the map that runs
    into ``prec_run`` (G,) -- unsafe groups in BF16 when ``project`` -- and returns ``(unsafe,
    invalid, weights, grads, master, optimizer, per_seq_local, per_seq_sharded,
    time_per_token, kv_read_per_seq, comm_bytes, kv_heads, head_time_per_token, dequant_bytes,
    stream_bytes)`` (``docs/model.md`` sections 2-3). ``stream_bytes`` is what a serving forward
    pass reads of the weights: all of them but an untied embedding table (a lookup reads its
    tokens' rows only); a tied table is read whole by the LM head.
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
    dq = tg[t, 0, prec_run[0], 5]
    for g in range(1, G):
        p = prec_run[g]
        weights += tg[t, g, p, 0]
        grads += tg[t, g, p, 1]
        master += tg[t, g, p, 2]
        spt += tg[t, g, p, 3]
        dq += tg[t, g, p, 5]
    train = ti[t, T_TRAIN] != 0
    act = tf[t, T_ACT] * (0.25 * (_ACT_BYTES[prec_run[_ATT]] + _ACT_BYTES[prec_run[_MLP]])) if train else 0.0
    kv_tok = tf[t, T_KV] * (tf[t, T_KVB] if tf[t, T_KVB] > 0.0 else _KV_BYTES[prec_run[_ATT]])
    held, read = window_tokens(prompt, output, tf[t, T_WIN])
    kv_seq = 0.0 if train else held * kv_tok
    kv_read = 0.0 if train else read * kv_tok
    comm = 2.0 * weights + grads if train else tf[t, T_TP]
    head = tg[t, _HEAD, prec_run[_HEAD], 3] / mfu  # the LM head's part: a prompt runs it for its last token only
    # an untied head has weights of its own; then the embedding table is only looked up
    untied = tg[t, _HEAD, prec_run[_HEAD], 0] > 0.0
    stream = weights - tg[t, _EMB, prec_run[_EMB], 0] if untied else weights
    return unsafe, invalid, weights, grads, master, tf[t, T_OPT], act, kv_seq, spt / mfu, kv_read, comm, tf[t, T_KVH], head, dq, stream


@jit
def fitting_batch(weights, grads, master, optimizer, per_seq_local, per_seq_sharded, kv_heads, n, capacity):
    """The largest batch whose peak bytes per GPU on ``n`` GPUs (:func:`peak_bytes`) fit
    ``capacity`` (the peak is affine in the batch once the gradients fit); may be < 1, and is 0
    when the gradients alone do not fit. Training shards the weights, gradients, master copy and
    optimizer ``/ n`` (FSDP); serving splits the KV cache over at most ``kv_heads`` GPUs."""
    n1 = max(n, 1)
    inv = 1.0 / n1
    fixed = (weights + master + optimizer) * inv
    if grads * inv > capacity - fixed:
        return 0.0
    per_seq = per_seq_local + per_seq_sharded / min(float(n1), kv_heads)
    return np.floor((capacity - fixed) / per_seq)


@jit
def memory_per_gpu(weights, grads, master, optimizer, per_seq_local, per_seq_sharded, kv_heads, n, batch):
    """Bytes per GPU on ``n`` GPUs (0 counts as 1) at ``batch`` sequences: ``(weights,
    gradients, fp32 master, optimizer, activations, KV cache)``; :func:`peak_bytes` is their peak."""
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
def peak_bytes(weights, grads, master, optimizer, activations, kv_cache):
    """The peak of a step's bytes per GPU from the parts :func:`memory_per_gpu` returns. The
    backward pass frees each block's activations as it writes that block's gradients, and the
    gradients are freed after the optimizer step (``zero_grad(set_to_none=True)``, PyTorch's
    default since 2.0; torchtitan, torchtune, llm-foundry), so the two never peak together:
    ``W + M + O + max(G, A) + KV``."""
    return weights + master + optimizer + max(grads, activations) + kv_cache


@jit
def tenant_stage1(b, tf, ti, tg, sc, ins_i, ins_f, prec, prec_run, c_prec, c_run, c_len, c_terms, cached, unsafe_c, invalid_c, ri):
    """Stage 1 of every tenant of row ``b`` into ``c_terms`` (13, T), ``unsafe_c`` and
    ``invalid_c`` (T,), and the precision map that runs into ``ri``'s precision rows. Stage 1
    depends on the tenant, its precision map and its requests' lengths only, so it is reused
    when they are the ones this tenant had in the last row (a cluster's counterfactual rows
    share them): ``c_prec`` (T, G) holds the map it was computed for, ``c_run`` the map that ran,
    ``c_len`` (2, T) the lengths, ``cached`` (T,) whether there is one."""
    project, mfu = sc[S_VETO] == 0.0, sc[S_MFU]
    for t in range(ri.shape[1]):
        prompt, output = ins_f[F_PROMPT, b, t], ins_f[F_OUT, b, t]
        same = cached[t] and prompt == c_len[0, t] and output == c_len[1, t]
        for g in range(G):
            p = ins_i[I_PREC + g, b, t]
            if p != c_prec[t, g]:
                same = False
            prec[g] = p
        if not same:
            unsafe, invalid, weights, grads, master, optimizer, psl, pss, tpt, kvr, comm, kvh, hd, dq, ws = tenant_terms(
                tf, ti, tg, t, prec, project, mfu, prec_run, prompt, output
            )
            c_len[0, t], c_len[1, t] = prompt, output
            c_terms[C_W, t], c_terms[C_G, t], c_terms[C_M, t], c_terms[C_O, t] = weights, grads, master, optimizer
            c_terms[C_PSL, t], c_terms[C_PSS, t], c_terms[C_TPT, t], c_terms[C_KVR, t] = psl, pss, tpt, kvr
            c_terms[C_COMM, t], c_terms[C_KVH, t], c_terms[C_HD, t], c_terms[C_DQ, t] = comm, kvh, hd, dq
            c_terms[C_WS, t] = ws
            unsafe_c[t], invalid_c[t] = unsafe, invalid
            for g in range(G):
                c_prec[t, g] = prec[g]
                c_run[t, g] = prec_run[g]
            cached[t] = True
        for g in range(G):
            ri[OI_PREC + g, t] = c_run[t, g]


@jit_inline
def checkpoint_bytes(c_terms, t, train):
    """The bytes tenant ``t`` reads to restart: a trainer's fp32 master copy and Adam moments
    (from its memoised optimizer bytes), a server's weights as stored."""
    return c_terms[C_O, t] * (CKPT_TRAIN_BYTES / ADAM_BYTES) if train else c_terms[C_W, t]


@jit
def restart_time(fixed_s, ckpt_bytes, n, nodes, gpu_bps, node_bps):
    """Seconds a tenant restarted on ``n`` GPUs over ``nodes`` nodes loses: the fixed part
    ``fixed_s`` (process start, NCCL init) and the checkpoint's ``ckpt_bytes`` read at the
    slower of ``n`` GPU loaders and ``nodes`` nodes' storage, ``min(n gpu_bps, nodes node_bps)``
    (docs/model.md section 7). 0 without GPUs."""
    if n <= 0:
        return 0.0
    return fixed_s + ckpt_bytes / min(n * gpu_bps, max(nodes, 1) * node_bps)


@jit
def restarts(b, ti, sc, ins_i, ins_f, c_terms, alloc, prev, held, gon, n_nodes, rf, rb, carry):
    """Which tenants of row ``b`` begin a restart (into ``rb``'s restart row), the seconds each
    adds to the restart it begins or carries on (``carry``), and the work a preemption loses
    (``rf``'s ``lost_tokens``, ``lost_s``); ``prev`` (T, K) is last round's placement, ``held``
    (T,) each tenant's GPUs in it (``placement.held_gpus``). Without
    ``coupling.persistent_placement`` a restart is a change of the GPU count, and nothing is carried
    or lost. With it (docs/model.md section 12.3) a tenant whose count is unchanged but whose nodes
    differ from last round's restarts too (a migration); a change the tenant did not ask for (its
    grant below both last round's and its request, or a move) preempts a trainer, which loses its
    tokens since its last checkpoint (``unsaved_tokens``); a change it asked for pays a
    checkpoint save first (``checkpoint_bytes`` at the loaders' rate of its new grant) and loses
    nothing. A change during a restart begins a new one (the one under way is dropped); a
    tenant whose grant is unchanged carries on the restart still ahead (``restart_left``); one
    with no GPUs drops it."""
    persist = sc[S_PERSIST] != 0.0
    for t in range(alloc.shape[0]):
        n, was = alloc[t], ins_i[I_PREV, b, t]
        carry[t] = 0.0
        rf[O_LOST, t] = 0.0
        rf[O_LOST_S, t] = 0.0
        if not persist:
            rb[OB_RESTART, t] = n > 0 and n != was
            continue
        moved = False
        if n > 0 and n == was and held[t] > 0:
            for k in range(gon.shape[1]):
                moved = moved or gon[t, k] != prev[t, k]
        changed = n != was or moved
        rb[OB_RESTART, t] = changed and n > 0
        left = ins_f[F_RLEFT, b, t]
        train = ti[t, T_TRAIN] != 0
        if not changed:
            carry[t] = left if n > 0 else 0.0
            continue
        if not (train and was > 0):
            continue
        if moved or (n < was and n < ins_i[I_GPUS, b, t]):  # preempted: the work since the last checkpoint is lost
            rf[O_LOST, t] = ins_f[F_UNSAVED, b, t]
            rf[O_LOST_S, t] = ins_f[F_SINCE, b, t]
        elif n > 0 and left == 0.0:  # planned: a checkpoint save before the restart
            carry[t] = checkpoint_bytes(c_terms, t, True) / min(n * sc[S_LOAD_GPU], max(n_nodes[t], 1) * sc[S_LOAD_NODE])


@jit_inline
def roofline_groups(b, t, tf, ti, sc, ins_f, c_terms):
    """The roofline's :class:`~fleet_marl.kernel.roofline.Job`, ``Hardware`` and ``Terms`` of
    tenant ``t`` in row ``b``, from the packed arrays (``roofline.tenant_groups`` builds the same
    from a ``KernelStatic``): its request lengths this round, its GPU type and the cluster's
    efficiencies, its memoised stage 1 (``c_terms``) and its static costs."""
    job = Job(ti[t, T_TRAIN] != 0, tf[t, T_SEQ], ins_f[F_PROMPT, b, t], ins_f[F_OUT, b, t])
    hw = Hardware(tf[t, T_HBM], tf[t, T_INTRA], tf[t, T_INTER], tf[t, T_ARL], tf[t, T_ARB], tf[t, T_NVL], sc[S_MBU], sc[S_OVERLAP])
    terms = Terms(
        c_terms[C_WS, t],
        c_terms[C_TPT, t],
        c_terms[C_HD, t],
        tf[t, T_REPL],
        c_terms[C_KVR, t],
        c_terms[C_COMM, t],
        c_terms[C_KVH, t],
        tf[t, T_TPL],
        tf[t, T_KST],
        c_terms[C_DQ, t],
        tf[t, T_DQT],
        c_terms[C_O, t],
    )
    return job, hw, terms


@jit_inline
def _seconds_left(sc, c_terms, t, train, n, nodes, restarted, carry, rf):
    """Tenant ``t``'s seconds of the round left by its restart (without ``coupling.contention``:
    its load at its own loaders' rate), and its ``restart_pending_s`` (see :func:`throughput`)."""
    round_s = sc[S_ROUND]
    rf[O_PENDING, t] = 0.0
    if restarted:
        total = restart_time(sc[S_RESTART], checkpoint_bytes(c_terms, t, train), n, nodes, sc[S_LOAD_GPU], sc[S_LOAD_NODE])
        if sc[S_PERSIST] != 0.0:
            total += carry
            rf[O_PENDING, t] = max(total - round_s, 0.0)
        return max(round_s - total, 0.0)
    if carry > 0.0:
        rf[O_PENDING, t] = max(carry - round_s, 0.0)
        return max(round_s - carry, 0.0)
    return round_s


@jit
def throughput(
    b,
    tf,
    ti,
    sc,
    ins_i,
    ins_f,
    c_terms,
    alloc,
    n_nodes,
    used_nodes,
    running,
    rf,
    ri,
    rb,
    work_rate,
    prefill_a,
    t_dec_a,
    avail_s,
    activity,
    carry,
):
    """Each tenant's throughput in row ``b`` on its GPUs and nodes, before throttling: writes
    its nodes spanned, restart flag, tokens/s and efficiency, and into the scratch rows its
    work rate, prefill and decode seconds, seconds available this round and its activity (the
    share of its GPUs' dynamic power it draws: 1 training, its load serving, 0 not running). A
    restart (:func:`restart_time`) longer than the round leaves none of it; with
    ``coupling.contention`` on, ``avail_s`` already holds each tenant's seconds available, its
    checkpoint load over the shared storage included (``contention.storage_loads``). A server's capacity
    is its roofline at its batch; its TTFT and TPOT are the roofline's at the load it carries,
    ``load x batch`` requests in flight (at least 1). The roofline runs on the GPUs the tenant
    uses (``ri``'s ``usable_gpus``) over ``used_nodes`` nodes (with ``coupling.gang`` off, its grant
    and ``n_nodes``); a restart (``rb``'s restart row, :func:`restarts`) is read by all its granted
    GPUs. With ``coupling.persistent_placement`` a restart adds ``carry`` (a planned save) and one
    longer than the round leaves the rest of it for the next (``restart_pending_s``); a restart
    carried on takes ``carry`` seconds."""
    round_s, shared = sc[S_ROUND], sc[S_CONTENTION] != 0.0
    for t in range(alloc.shape[0]):
        n = alloc[t]
        nodes = n_nodes[t]
        ri[OI_NODES, t] = nodes
        restarted = rb[OB_RESTART, t]
        job, hw, terms = roofline_groups(b, t, tf, ti, sc, ins_f, c_terms)
        train = job.is_train
        u, u_nodes = ri[OI_USABLE, t], used_nodes[t]
        rate, tps, eff, prefill, t_dec = roofline(job, hw, terms, u, ri[OI_BATCH, t], u_nodes)
        work_rate[t] = rate
        rf[O_TPS, t] = tps
        rf[O_EFF, t] = eff if u > 0 else 0.0
        prefill_a[t] = prefill
        t_dec_a[t] = t_dec
        if not shared:  # (with it, storage_loads wrote them)
            avail_s[t] = _seconds_left(sc, c_terms, t, train, n, nodes, restarted, carry[t], rf)
        av = avail_s[t]
        rf[O_RESTART_S, t] = round_s - av
        rf[O_SLOW, t] = 1.0
        rf[O_LINK, t] = 0.0
        demand = ins_f[F_QUEUE, b, t] + ins_f[F_ARR, b, t]
        capacity = rate * av
        if train:
            busy = 1.0
        else:
            busy = min(demand / capacity, 1.0) if capacity > 0 else 0.0
            if busy < 1.0:
                # the latencies at the load carried: busy x batch requests in flight (Little's law)
                _, _, _, prefill, t_dec = roofline(job, hw, terms, u, max(busy * ri[OI_BATCH, t], 1.0), u_nodes)
                prefill_a[t] = prefill
                t_dec_a[t] = t_dec
        activity[t] = busy if running[t] else 0.0


__all__ = [
    "C_COMM",
    "C_DQ",
    "C_HD",
    "C_KVH",
    "C_KVR",
    "C_M",
    "C_O",
    "C_PSL",
    "C_PSS",
    "C_TPT",
    "C_W",
    "C_WS",
    "checkpoint_bytes",
    "fitting_batch",
    "memory_per_gpu",
    "peak_bytes",
    "restart_time",
    "restarts",
    "roofline_groups",
    "tenant_stage1",
    "tenant_terms",
    "throughput",
]

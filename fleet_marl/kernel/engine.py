"""The round, compiled: :func:`round_rows` plays it on every batch row, stage by stage.

This is the only implementation of the round (every equation is in ``docs/model.md`` with its
source); ``tests/oracle.py`` holds an independent numpy
implementation that the tests compare against, to 1e-9. Each stage is a compiled function in
the module named for it, called once per row in this order:

1. ``clearing.ask`` and ``clearing.clear_pools``: what each tenant may ask for, then the
   mechanism on every pool (its codes from ``mechanisms.codes``): GPUs and prices;
2. ``placement.place``: the GPUs onto nodes, best-fit decreasing (with ``coupling.gang`` on,
   ``gang.usable``: the GPUs and nodes each tenant's parallel layout uses, which the later
   stages read in place of the grant's; it still pays for every granted GPU);
3. ``tenant_cost.tenant_stage1``: each tenant's stage 1 under its precision map (memoised:
   a cluster's counterfactual rows share it);
4. ``safety.check``: the numerics and memory verdicts, the batch that runs, bytes per GPU;
5. ``tenant_cost.restarts`` (who begins a restart; with ``coupling.persistent_placement`` a move
   too, a planned save's seconds, a restart carried on, a preemption's lost work), then
   ``tenant_cost.throughput``: the roofline on the granted GPUs, and each tenant's activity
   (with ``coupling.contention`` on, ``contention.storage_loads`` first: the restarts'
   checkpoint loads over the shared storage; then ``contention.contend``: the leaf uplinks
   shared by the trainers that cross them);
6. ``power_heat.power_heat`` and ``power_heat.throttle``: rack power caps, node heat, each
   tenant's clock;
7. ``outcome.outcome``: progress, service, money, utility (with ``coupling.queueing`` on, a
   server's queue, ``queueing.serve_queue``); then the welfare.

The packed arrays it reads and writes are described in :mod:`fleet_marl.kernel.layout`.
:func:`round_rows` writes the welfare of every row ``b``, and every other output of row ``b``
at index ``out_index[b]`` of the other outputs, or nowhere when it is -1: credit assignment
needs the whole outcome of each cluster's grand coalition and only the welfare of its
counterfactual rows. :func:`round_one` is one row from unpacked inputs in one compiled call.
"""

from __future__ import annotations

import numpy as np

from fleet_marl.kernel.clearing import ask, clear_pools
from fleet_marl.kernel.contention import contend, storage_loads
from fleet_marl.kernel.gang import usable
from fleet_marl.kernel.jit import copy_row, jit_alloc, numpy_sum
from fleet_marl.kernel.layout import (
    F_ARR,
    F_BID,
    F_BUDGET,
    F_OUT,
    F_PROMPT,
    F_QUEUE,
    F_REMAIN,
    F_RLEFT,
    F_SINCE,
    F_TIE,
    F_UNSAVED,
    I_BATCH,
    I_GPUS,
    I_PREC,
    I_PRES,
    I_PREV,
    IF,
    II,
    O_PRICE,
    O_UTIL,
    OB,
    OB_RESTART,
    OF,
    OI,
    OI_ALLOC,
    OI_REQ,
    OI_USABLE,
    S_CONTENTION,
    S_GANG,
    S_GPN,
    S_PERSIST,
    SC,
    T_MAXG,
    G,
    pack_static,
)
from fleet_marl.kernel.outcome import outcome
from fleet_marl.kernel.placement import held_gpus, place
from fleet_marl.kernel.power_heat import power_heat, throttle
from fleet_marl.kernel.roofline import roofline, tenant_groups, tenant_roofline
from fleet_marl.kernel.safety import check
from fleet_marl.kernel.tenant_cost import fitting_batch, memory_per_gpu, peak_bytes, restarts, tenant_stage1, tenant_terms, throughput

_NOF, _NOI, _NOB = len(OF), len(OI), len(OB)
_NF_ROWS, _NI_ROWS, _NB_ROWS = _NOF + 32, _NOI + 6, _NOB + 4  # each block: the row's outputs, then scratch rows


@jit_alloc
def _scratch(T, K, R, sc, ti):
    """The round's scratch in three blocks, one per dtype (a call of a few rows is dominated by
    allocations otherwise): ``(sf, si, sb)`` per tenant -- one row's outputs, then the stages'
    scratch rows and the stage-1 memo --, ``skf`` (8, K) and ``ski`` (3, K) per node, ``sg`` (4,
    T, K) the row's placement and each tenant's nodes, then the GPUs and nodes it uses (``gang``),
    ``sr`` (2, R) per rack, ``precs`` (2, G),
    ``c_precs`` (2, T, G) the memo's precision maps, ``count`` (max_n + 2,), ``dead`` (K,), then
    the contention stage's per-leaf scratch and ``hist`` (Q, gpn + 1) the placement's free counts
    (``max_n`` the largest grant, ``Q`` the pools and ``gpn`` the GPUs per node, from ``ti`` and ``sc``)."""
    max_n, Q, gpn = ti[:, T_MAXG].max(), sc.shape[0] - len(SC), int(sc[S_GPN])
    fl = np.empty(_NF_ROWS * T + 8 * K + 2 * R + K)  # (+ K: the contention stage's load per leaf)
    nh = Q * (gpn + 1)
    it = np.empty(_NI_ROWS * T + 3 * K + 4 * T * K + 2 * G + 2 * T * G + max_n + 2 + K + nh, np.int64)  # (+ K: its leaf stamps)
    bo = np.empty(_NB_ROWS * T + K, np.bool_)
    o = _NF_ROWS * T
    sf, skf, sr = fl[:o].reshape((_NF_ROWS, T)), fl[o : o + 8 * K].reshape((8, K)), fl[o + 8 * K : o + 8 * K + 2 * R].reshape((2, R))
    leaf_f = fl[o + 8 * K + 2 * R :]
    o = _NI_ROWS * T
    si, ski = it[:o].reshape((_NI_ROWS, T)), it[o : o + 3 * K].reshape((3, K))
    o += 3 * K
    sg, precs = it[o : o + 4 * T * K].reshape((4, T, K)), it[o + 4 * T * K : o + 4 * T * K + 2 * G].reshape((2, G))
    o += 4 * T * K + 2 * G
    end = it.shape[0] - nh
    c_precs, count, leaf_i = it[o : o + 2 * T * G].reshape((2, T, G)), it[o + 2 * T * G : end - K], it[end - K : end]
    hist = it[end:].reshape((Q, gpn + 1))
    return (
        sf,
        si,
        bo[: _NB_ROWS * T].reshape((_NB_ROWS, T)),
        skf,
        ski,
        sg,
        sr,
        precs,
        c_precs,
        count,
        bo[_NB_ROWS * T :],
        leaf_f,
        leaf_i,
        hist,
    )


@jit_alloc
def round_rows(tf, ti, tg, nf, ni, sc, ins_i, ins_f, temp, pgon, out_index, out_f, out_i, out_b, gon, out_k, rack, welfare):
    """Play the round on every row ``b`` of the packed inputs, stage by stage (see the module doc)."""
    (_, B, T), K, R = ins_i.shape, ni.shape[0], rack.shape[1]
    q_caps, gpn, persist, one_prev = sc[len(SC) :], int(sc[S_GPN]), sc[S_PERSIST] != 0.0, pgon.shape[0] == 1
    sf, si, sb, skf, ski, sg, sr, precs, c_precs, count, dead, leaf_load, leaf_stamp, hist = _scratch(T, K, R, sc, ti)
    rf, ri, rb, rk, rr, rg, t_nodes = sf[:_NOF], si[:_NOI], sb[:_NOB], skf[:2], sr[0], sg[0], sg[1]
    w, level, frac, mult, zeros = sf[_NOF], sf[_NOF + 1], sf[_NOF + 2], sf[_NOF + 3], sf[_NOF + 4]
    activity, work_rate, avail_s, t_dec_a, prefill_a = sf[_NOF + 5], sf[_NOF + 6], sf[_NOF + 7], sf[_NOF + 8], sf[_NOF + 9]
    c_terms, c_len = sf[_NOF + 10 : _NOF + 23], sf[_NOF + 23 : _NOF + 25]  # the stage-1 memo: (13, T) terms, (2, T) lengths
    k1, k2 = sf[_NOF + 25], sf[_NOF + 26]
    ct = sf[_NOF + 27 : _NOF + 31]  # the contention stage's (4, T) rows
    carry = sf[_NOF + 31]  # the seconds a restart adds or carries on (tenant_cost.restarts)
    contended, gang = sc[S_CONTENTION] != 0.0, sc[S_GANG] != 0.0
    caps, got, order, n_nodes, held = si[_NOI], si[_NOI + 1], si[_NOI + 2], si[_NOI + 3], si[_NOI + 5]
    used, u_n, ug, u_nodes = ri[OI_USABLE], si[_NOI + 4], sg[2], sg[3]  # the GPUs, nodes a tenant's layout uses (gang)
    running, cached, unsafe_c, invalid_c = sb[_NOB], sb[_NOB + 1], sb[_NOB + 2], sb[_NOB + 3]
    node_dyn, f_cap, f_heat, f_node, t_pred = skf[3], skf[4], skf[5], skf[6], skf[7]
    free, rack_dyn = ski[0], sr[1]
    prec, prec_run, c_prec, c_run = precs[0], precs[1], c_precs[0], c_precs[1]
    req, alloc, price, util = ri[OI_REQ], ri[OI_ALLOC], rf[O_PRICE], rf[O_UTIL]
    zeros[:] = 0.0
    cached[:] = False
    for b in range(B):
        ask(b, tf, ti, sc, ins_i, ins_f, req)
        clear_pools(b, q_caps, tf, ti, sc, ins_f, req, alloc, mult, price, caps, got, k1, k2, w, level, order, frac, zeros)
        prev = pgon[0] if one_prev else pgon[b]
        if persist and (b == 0 or not one_prev):  # each tenant's GPUs in it (once when every row keeps the same)
            held_gpus(prev, held)
        place(alloc, prev, held, persist, ti, ni, gpn, rg, free, hist, order, count, t_nodes, n_nodes)
        if gang:  # the stages after it run on the GPUs and nodes the layouts use (pg, pn, pl)
            usable(ti, rg, t_nodes, n_nodes, used, ug, u_nodes, u_n)
            pg, pn, pl = ug, u_nodes, u_n
        else:
            used[:] = alloc
            pg, pn, pl = rg, t_nodes, n_nodes
        tenant_stage1(b, tf, ti, tg, sc, ins_i, ins_f, prec, prec_run, c_prec, c_run, c_len, c_terms, cached, unsafe_c, invalid_c, ri)
        check(b, tf, sc, ins_i, c_terms, unsafe_c, invalid_c, used, rf, ri, rb, running)
        restarts(b, ti, sc, ins_i, ins_f, c_terms, alloc, prev, held, rg, n_nodes, rf, rb, carry)
        if contended:  # the restarts' checkpoint loads share the storage: each tenant's seconds available
            storage_loads(b, ti, sc, c_terms, alloc, n_nodes, rb[OB_RESTART], carry, avail_s, rf, ct)
        throughput(
            b,
            tf,
            ti,
            sc,
            ins_i,
            ins_f,
            c_terms,
            alloc,
            n_nodes,
            pl,
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
        )
        if contended:
            contend(b, tf, ti, nf, ni, sc, c_terms, used, pl, pn, running, work_rate, avail_s, rf, ri, ct, leaf_load, leaf_stamp)
        power_heat(b, tf, nf, ni, sc, temp, activity, pg, pn, pl, node_dyn, rack_dyn, f_cap, f_heat, f_node, t_pred, dead, rk, rr)
        throttle(sc, pn, pl, f_node, f_cap, f_heat, t_pred, dead, running, rf, rb)
        outcome(b, tf, ti, sc, ins_i, ins_f, running, work_rate, avail_s, prefill_a, t_dec_a, alloc, mult, rf, ri, rb, c_terms, pl)
        welfare[b] = numpy_sum(util, 0, T)
        j = out_index[b]
        if j < 0:
            continue
        copy_row(out_f, j, rf)  # the row's outputs into row j, field by field (each field's row is contiguous there)
        copy_row(out_i, j, ri)
        copy_row(out_b, j, rb)
        for t in range(T):
            for k in range(K):
                gon[j, t, k] = rg[t, k]
        copy_row(out_k, j, rk)
        for r in range(R):
            rack[j, r] = rr[r]


@jit_alloc
def round_one(
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
    prev_gon,
    restart_left,
    since_ckpt,
    unsaved,
    flat_f,
    flat_i,
    flat_b,
):
    """One row from unpacked inputs ((T,) each, ``precision`` (T, G), ``temp_c`` (K,), ``prev_gon``
    (T, K) last round's placement; ``restart_left``, ``since_ckpt``, ``unsaved`` the state's) into three
    flat output buffers, one per dtype: ``flat_f`` holds ``out_f`` (``len(OF)``, T), ``out_k``
    (2, K), ``rack`` (R,) and the welfare, ``flat_i`` ``out_i`` (``len(OI)``, T) and ``gon`` (T,
    K), ``flat_b`` ``out_b`` (``len(OB)``, T), each C-ordered, in that order. Packs the inputs and
    runs :func:`round_rows` (one evaluation's time is mostly the call itself, so it is one)."""
    T = gpus.shape[0]
    K = ni.shape[0]
    R = flat_f.shape[0] - _NOF * T - 2 * K - 1
    nf_, ni_ = _NOF * T, _NOI * T
    out_f = flat_f[:nf_].reshape((_NOF, T))
    out_k = flat_f[nf_ : nf_ + 2 * K].reshape((2, K))
    rack = flat_f[nf_ + 2 * K : nf_ + 2 * K + R]
    welfare = flat_f[nf_ + 2 * K + R :]
    out_i = flat_i[:ni_].reshape((_NOI, T))
    gon = flat_i[ni_:].reshape((T, K))
    out_b = flat_b.reshape((_NOB, T))
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
        ins_f[F_RLEFT, 0, t] = restart_left[t]
        ins_f[F_SINCE, 0, t] = since_ckpt[t]
        ins_f[F_UNSAVED, 0, t] = unsaved[t]
    for k in range(K):
        temp[0, k] = temp_c[k]
    out_f3, out_i3, out_b3 = out_f.reshape((_NOF, 1, T)), out_i.reshape((_NOI, 1, T)), out_b.reshape((_NOB, 1, T))
    gon3, out_k3, rack2 = gon.reshape((1, T, K)), out_k.reshape((2, 1, K)), rack.reshape((1, R))
    pg = prev_gon.reshape((1, T, K))
    round_rows(tf, ti, tg, nf, ni, sc, ins_i, ins_f, temp, pg, np.zeros(1, np.int64), out_f3, out_i3, out_b3, gon3, out_k3, rack2, welfare)


#: the compiled cost functions, here too for the callers that read them from the engine
#: (``tools.estimate``): they live in :mod:`fleet_marl.kernel.tenant_cost`
__all__ = [
    "fitting_batch",
    "memory_per_gpu",
    "pack_static",
    "peak_bytes",
    "roofline",
    "round_one",
    "round_rows",
    "tenant_groups",
    "tenant_roofline",
    "tenant_terms",
]

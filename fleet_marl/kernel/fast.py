"""The numba backend of the kernel's coupled stage (``KernelStatic.backend == "numba"``).

Stage 1 (per-tenant terms, looked up in the term table) is shared with numpy; this module
replaces ``outcome._stage2``: the arbiter, placement, safety, throughput, power and heat, and
the outcome, as one compiled loop over the batch rows. Each step mirrors the numpy code's
arithmetic in the same order, so integer results (allocations, placements, verdicts) are the
same and floating-point results agree to rounding (sums over tenants and nodes may add in a
different order); ``tests/test_backends.py`` holds it to 1e-9 of numpy on hypothesis-generated
inputs. numpy stays the reference.

The arbiter's sort keys, water-filling and greedy fills the loop calls are in
``fleet_marl.kernel.fast_arbiter``. Importing this module imports numba;
``fleet_marl.kernel.backend.resolve_backend`` decides whether it is used.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel import arbiter, cost
from fleet_marl.kernel.cost import RECOMPUTE_FLOPS_FACTOR, TRAIN_FLOPS_FACTOR
from fleet_marl.kernel.fast_arbiter import _argsort_asc, _greedy, _jit, _sorted_by, _waterfill
from fleet_marl.kernel.safety import _thermal_constants, invalid_precision
from fleet_marl.kernel.types import Outcome

_BIG = 1 << 40
_ALL_MAPS = np.array(cost.ALL_MAPS)  # a private read-only copy: one compiled signature
_ALL_MAPS.setflags(write=False)


@_jit
def _rows(
    # inputs, (B, T) unless noted
    gpus, bid, batch_req, pres, tidx, tabf, tabi, all_maps,
    prev, temp0, queue, remaining, budget, arrivals, tiebreak,
    # per tenant (T,)
    list_price, max_gpus, pool, priority, is_train, mem_bytes, inter_bw, intra_bw, checkpointing, seq_len,
    prompt_tokens, output_tokens, hbm, slo_ttft, slo_tpot, ref_rate, spend_norm, dyn_w,
    # per pool / node / rack
    pool_capacity, node_pool, node_rack, node_idle, headroom, full,
    # scalars
    mech, afford_at_bid, reserve, veto, gpn, comm_overlap, mbu, round_s, restart_s, ambient, rise, decay, crit, span, cost_weight,
    # outputs (B, T) unless noted
    o_prec, o_req, o_alloc, o_gon, o_nodes, o_price, o_restarted, o_batch, o_unsafe, o_projected, o_vetoed, o_oom, o_tripped,
    o_throttle, o_pthr, o_tthr, o_mw, o_mg, o_mm, o_mo, o_ma, o_mkv, o_mtot, o_tps, o_eff, o_progress, o_served,
    o_good, o_attain, o_qnext, o_rnext, o_spend, o_bnext, o_value, o_util, o_welfare, o_node_power, o_rack_power, o_temp_next,
):
    B, T = gpus.shape
    K = node_pool.shape[0]
    R = headroom.shape[0]
    Q = pool_capacity.shape[0]
    hours = round_s / 3600.0
    hide = 1.0 - comm_overlap
    # scratch
    caps = np.empty(T, np.int64)
    got = np.empty(T, np.int64)
    w = np.empty(T)
    level = np.empty(T)
    order = np.empty(T, np.int64)
    frac = np.empty(T)
    mult = np.empty(T)
    dummy = np.zeros(T)
    pos_key = np.empty(T)
    free = np.empty(K, np.int64)
    avail = np.empty(K, np.int64)
    by_free = np.empty(K, np.int64)
    neg_avail = np.empty(K)
    running = np.empty(T, np.bool_)
    activity = np.empty(T)
    work_rate = np.empty(T)
    avail_s = np.empty(T)
    t_dec_a = np.empty(T)
    prefill_a = np.empty(T)
    node_dyn = np.empty(K)
    rack_dyn = np.empty(R)
    f_cap = np.empty(K)
    f_heat = np.empty(K)
    f_node = np.empty(K)
    t_pred = np.empty(K)
    dead = np.empty(K, np.bool_)
    for b in range(B):
        # --- arbiter: requests ------------------------------------------------------------
        for t in range(T):
            pm = bid[b, t] if afford_at_bid else 1.0
            unit = list_price[t] * pm * hours
            af = np.floor(max(budget[b, t], 0.0) / unit)
            if af * unit > budget[b, t]:
                af -= 1.0
            r = min(float(min(gpus[b, t], max_gpus[t])), af)
            req = int(r) if pres[b, t] else 0
            if mech == arbiter.AUCTION and not bid[b, t] >= reserve:
                req = 0
            o_req[b, t] = req
            mult[t] = 1.0
        # --- arbiter: clear each pool -------------------------------------------------------
        for q in range(Q):
            for t in range(T):
                caps[t] = o_req[b, t] if pool[t] == q else 0
            if mech == arbiter.MAXMIN:
                _waterfill(caps, bid[b], True, pool_capacity[q], tiebreak[b], got, w, level, order, frac, dummy)
            elif mech == arbiter.PROPORTIONAL:
                _waterfill(caps, bid[b], False, pool_capacity[q], tiebreak[b], got, w, level, order, frac, dummy)
            elif mech == arbiter.PRIORITY:
                _sorted_by(order, priority, bid[b], tiebreak[b], 3)
                _greedy(caps, order, pool_capacity[q], got)
            else:
                _sorted_by(order, dummy, bid[b], tiebreak[b], 2)
                _greedy(caps, order, pool_capacity[q], got)
                clearing = 0.0
                for t in range(T):
                    if pool[t] == q and got[t] < caps[t] and bid[b, t] > clearing:
                        clearing = bid[b, t]
                clearing = max(reserve, clearing)
                for t in range(T):
                    if pool[t] == q:
                        mult[t] = clearing
            for t in range(T):
                if pool[t] == q:
                    o_alloc[b, t] = got[t]
        if mech == arbiter.PROPORTIONAL:
            for t in range(T):
                mult[t] = bid[b, t]
        # --- placement: best-fit decreasing -------------------------------------------------
        for k in range(K):
            free[k] = gpn
        npos = 0
        for t in range(T):
            pos_key[t] = -float(o_alloc[b, t])
            if o_alloc[b, t] > 0:
                npos += 1
            for k in range(K):
                o_gon[b, t, k] = 0
        _argsort_asc(order, pos_key)
        for j in range(npos):
            t = order[j]
            a = o_alloc[b, t]
            best = -1
            best_v = _BIG
            for k in range(K):
                avail[k] = free[k] if node_pool[k] == pool[t] else -1
                if avail[k] >= a and avail[k] < best_v:
                    best_v = avail[k]
                    best = k
            if best >= 0:
                o_gon[b, t, best] = a
                free[best] -= a
            else:
                for k in range(K):
                    neg_avail[k] = -float(avail[k])
                _argsort_asc(by_free, neg_avail)
                before = 0
                for i in range(K):
                    k = by_free[i]
                    fk = max(avail[k], 0)
                    take = min(max(a - before, 0), fk)
                    before += fk
                    o_gon[b, t, k] = take
                    free[k] -= take
        # --- per tenant: safety, memory, throughput ------------------------------------------
        for t in range(T):
            row = tidx[b, t]
            weights, grads, master, optimizer = tabf[row, 0], tabf[row, 1], tabf[row, 2], tabf[row, 3]
            psl, pss, tpt, kvr, comm, kvh = tabf[row, 4], tabf[row, 5], tabf[row, 6], tabf[row, 7], tabf[row, 8], tabf[row, 9]
            unsafe, invalid = tabi[row, 1] != 0, tabi[row, 2] != 0
            for g in range(all_maps.shape[1]):
                o_prec[b, t, g] = all_maps[tabi[row, 0], g]
            n = o_alloc[b, t]
            has = n > 0
            nodes = 0
            for k in range(K):
                if o_gon[b, t, k] > 0:
                    nodes += 1
            o_nodes[b, t] = nodes
            o_restarted[b, t] = (n != prev[b, t]) and has
            o_price[b, t] = list_price[t] * mult[t]
            n1 = max(n, 1)
            inv = 1.0 / n1
            kv_div = min(float(n1), kvh)
            if veto:
                bt = batch_req[b, t]
                oom = False
                vetoed = (unsafe or invalid) and has
                projected = False
            else:
                fixed = (weights + grads + master + optimizer) * inv
                per_seq = psl + pss / kv_div
                fit = np.floor((mem_bytes[t] - fixed) / per_seq)
                bt = int(max(min(float(batch_req[b, t]), fit), 1.0))
                oom = fit < 1 and has
                vetoed = invalid and has
                projected = (unsafe or bt < batch_req[b, t]) and has and not oom and not vetoed
            mw = weights * inv
            mg = grads * inv
            mm = master * inv
            mo = optimizer * inv
            ma = bt * psl
            mkv = bt * pss / kv_div
            mtot = mw + mg + mm + mo + ma + mkv
            if veto:
                oom = mtot > mem_bytes[t] and has
            o_mw[b, t] = mw
            o_mg[b, t] = mg
            o_mm[b, t] = mm
            o_mo[b, t] = mo
            o_ma[b, t] = ma
            o_mkv[b, t] = mkv
            o_mtot[b, t] = mtot
            o_batch[b, t] = bt
            o_oom[b, t] = oom
            o_vetoed[b, t] = vetoed
            o_projected[b, t] = projected
            o_unsafe[b, t] = unsafe and has
            run = has and not oom and not vetoed
            running[t] = run
            # throughput (cost.throughput)
            nf = float(n1)
            bw_link = inter_bw[t] if nodes > 1 else intra_bw[t]
            bf = float(max(bt, 1))
            tp = tpt
            passes = RECOMPUTE_FLOPS_FACTOR if checkpointing[t] else TRAIN_FLOPS_FACTOR
            t_comp = passes * seq_len[t] * bf * tp
            t_comm = comm * (nf - 1.0) / nf / bw_link
            step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
            train_rate = nf * bf * seq_len[t] / step
            tp_comm = 2.0 * t_comm
            prefill = prompt_tokens[t] * (tp / nf + (tp_comm if hide == 1.0 else hide * tp_comm))
            t_mem = (weights / nf + bf * kvr / min(nf, kvh)) / (hbm[t] * mbu)
            t_cmp = bf * tp / nf
            t_core = max(t_mem, t_cmp)
            t_dec = t_core + (bf * tp_comm if hide == 1.0 else hide * bf * tp_comm)
            serve_rate = 1.0 / (prefill + output_tokens[t] * t_dec / bf)
            if is_train[t]:
                eff = t_comp / step
                work_rate[t] = train_rate
                o_tps[b, t] = train_rate
            else:
                eff = t_core / t_dec
                work_rate[t] = serve_rate
                o_tps[b, t] = serve_rate * output_tokens[t]
            if eff != eff:
                eff = 0.0
            o_eff[b, t] = eff if has else 0.0
            prefill_a[t] = 0.0 if is_train[t] else prefill
            t_dec_a[t] = 0.0 if is_train[t] else t_dec
            av = round_s - restart_s * o_restarted[b, t]
            avail_s[t] = av
            demand = queue[b, t] + arrivals[b, t]
            capacity = work_rate[t] * av
            if is_train[t]:
                busy = 1.0
            else:
                busy = min(demand / capacity, 1.0) if capacity > 0 else 0.0
            activity[t] = busy if run else 0.0
        # --- power and heat (safety.power_thermal) -------------------------------------------
        for k in range(K):
            node_dyn[k] = 0.0
        for t in range(T):
            d = dyn_w[t] * activity[t]
            for k in range(K):
                if o_gon[b, t, k] != 0:
                    node_dyn[k] += o_gon[b, t, k] * d
        for r in range(R):
            rack_dyn[r] = 0.0
        for k in range(K):
            rack_dyn[node_rack[k]] += node_dyn[k]
        for k in range(K):
            rd = rack_dyn[node_rack[k]]
            f_cap[k] = min(max(headroom[node_rack[k]] / rd, 0.0), 1.0) if rd > 0 else 1.0
            tss = ambient + rise * (node_idle[k] + node_dyn[k] * f_cap[k]) / full[k]
            t_pred[k] = tss + (temp0[b, k] - tss) * decay
            fh = min(max((crit - t_pred[k]) / span, 0.0), 1.0)
            dead[k] = temp0[b, k] >= crit
            if dead[k]:
                fh = 0.0
            f_heat[k] = fh
            f_node[k] = f_cap[k] * fh
            power = node_idle[k] + node_dyn[k] * f_node[k]
            o_node_power[b, k] = power
            tss = ambient + rise * power / full[k]
            o_temp_next[b, k] = tss + (temp0[b, k] - tss) * decay
        for r in range(R):
            o_rack_power[b, r] = 0.0
        for k in range(K):
            o_rack_power[b, node_rack[k]] += o_node_power[b, k]
        # --- outcome --------------------------------------------------------------------------
        welfare = 0.0
        for t in range(T):
            fac = np.inf
            pthr = False
            tthr = False
            trip = False
            for k in range(K):
                if o_gon[b, t, k] > 0:
                    fac = min(fac, f_node[k])
                    pthr = pthr or f_cap[k] < 1.0
                    tthr = tthr or f_heat[k] < 1.0
                    trip = trip or t_pred[k] >= crit or dead[k]
            if fac == np.inf:
                fac = 1.0
            run = running[t] and not trip
            f = fac if run else 0.0
            o_tripped[b, t] = trip
            o_throttle[b, t] = f
            o_pthr[b, t] = pthr and run
            o_tthr[b, t] = tthr and run
            o_tps[b, t] = o_tps[b, t] * f
            work = work_rate[t] * f * avail_s[t] if run else 0.0
            demand = queue[b, t] + arrivals[b, t]
            if is_train[t]:
                progress = min(remaining[b, t], work)
                served = 0.0
            else:
                progress = 0.0
                served = min(demand, work)
            on_time = run and (t_dec_a[t] / f <= slo_tpot[t]) and (prefill_a[t] / f <= slo_ttft[t])
            fresh = min(max(served - queue[b, t], 0.0), arrivals[b, t])
            good = fresh if (on_time and not is_train[t]) else 0.0
            attain = good / arrivals[b, t] if arrivals[b, t] > 0 else 1.0
            spend = o_alloc[b, t] * list_price[t] * mult[t] * hours
            ref = ref_rate[t] * round_s
            value = ((progress if is_train[t] else good) / ref) if ref > 0 else 0.0
            util = priority[t] * value - cost_weight * spend / spend_norm[t] if pres[b, t] else 0.0
            o_progress[b, t] = progress
            o_served[b, t] = served
            o_good[b, t] = good
            o_attain[b, t] = attain
            o_qnext[b, t] = 0.0 if is_train[t] else demand - served
            o_rnext[b, t] = remaining[b, t] - progress
            o_spend[b, t] = spend
            o_bnext[b, t] = budget[b, t] - spend
            o_value[b, t] = value
            o_util[b, t] = util
            welfare += util
        o_welfare[b] = welfare


def _static_args(st) -> tuple:
    got = st.__dict__.get("_fast_static")
    if got is None:
        dyn_w, node_idle, headroom, full, decay, span = _thermal_constants(st)
        f = lambda a: np.ascontiguousarray(a, np.float64)  # noqa: E731
        i = lambda a: np.ascontiguousarray(a, np.int64)  # noqa: E731
        per_tenant = (
            f(st.list_price), i(st.max_gpus), i(st.pool), f(st.priority), np.ascontiguousarray(st.is_train), f(st.mem_bytes),
            f(st.inter_bw), f(st.intra_bw), np.ascontiguousarray(st.checkpointing), f(st.seq_len), f(st.prompt_tokens),
            f(st.output_tokens), f(st.bw), f(st.slo_ttft_s), f(st.slo_tpot_s), f(st.ref_rate), f(st.spend_norm), f(dyn_w),
        )
        cluster = (i(st.pool_capacity), i(st.node_pool), i(st.node_rack), f(node_idle), f(headroom), f(full))
        scalars = (
            int(st.mechanism), st.mechanism in (arbiter.PROPORTIONAL, arbiter.AUCTION), float(st.reserve_price), bool(st.veto),
            int(st.gpus_per_node), float(st.comm_overlap), float(st.mbu), float(st.round_seconds), float(st.restart_seconds),
            float(st.ambient_c), float(st.thermal_rise_at_tdp_c), float(decay), float(st.critical_temp_c), float(span), float(st.cost_weight),
        )
        got = per_tenant + cluster + scalars
        st.__dict__["_fast_static"] = got
    return got


def _table(st, precision: np.ndarray):
    """(table floats, table ints, row index (..., T)) for ``precision``: the scenario's term
    table, or, beyond ``cost.MAX_TABLE_TENANTS`` tenants, a table of just these rows."""
    if st.term_table is not None:
        return st.term_table.floats, st.term_table.ints, cost.table_index(st.term_table, precision)
    terms = cost.tenant_terms(st, precision, project=not st.veto)
    shape = terms.unsafe.shape
    floats = np.stack([np.broadcast_to(getattr(terms, f), shape).reshape(-1) for f in cost.TABLE_FLOATS], axis=-1)
    ints = np.stack([cost.map_code(terms.precision).reshape(-1), terms.unsafe.reshape(-1), invalid_precision(st, precision).reshape(-1)], axis=-1)
    floats, ints = np.ascontiguousarray(floats), np.ascontiguousarray(ints, np.int64)
    floats.setflags(write=False)  # read-only like the scenario's table, so both share one compiled signature
    ints.setflags(write=False)
    return floats, ints, np.arange(floats.shape[0]).reshape(shape)


def evaluate(st, actions, state, draws, present) -> Outcome:
    """``outcome.evaluate`` after the input checks, on the numba backend."""
    from fleet_marl.kernel.outcome import _lead_shape, _row_view, _shape

    T, K, R = st.T, st.K, st.n_racks
    lead = _lead_shape(actions, state, draws, present)
    B = int(np.prod(lead)) if lead else 1
    rows = _row_view(lead, B)
    tabf, tabi, tidx = _table(st, np.asarray(actions.precision))
    fl, it, bo = np.float64, np.int64, np.bool_
    # every input C-contiguous and writable (a copy where needed), so one compiled signature serves all calls
    c = lambda a, dt: np.require(np.broadcast_to(rows(a, (T,)), (B, T)), dt, "CW")  # noqa: E731
    ins = (
        c(actions.gpus, it), c(actions.bid, fl), c(actions.batch, it), c(True if present is None else present, bo),
        c(tidx, it), tabf, tabi, _ALL_MAPS,
        c(state.prev_alloc, it), np.require(np.broadcast_to(rows(state.temp_c, (K,)), (B, K)), fl, "CW"),
        c(state.queue, fl), c(state.remaining_tokens, fl), c(state.budget_left, fl), c(draws.arrivals, fl), c(draws.tiebreak, fl),
    )
    e = np.empty
    o = dict(
        precision=e((B, T, catalog.N_GROUPS), it),
        requested=e((B, T), it), alloc=e((B, T), it), gpus_on_node=e((B, T, K), it), nodes_spanned=e((B, T), it),
        price=e((B, T)), restarted=e((B, T), bo), batch=e((B, T), it), unsafe_numerics=e((B, T), bo), projected=e((B, T), bo),
        vetoed=e((B, T), bo), oom=e((B, T), bo), tripped=e((B, T), bo), throttle=e((B, T)), power_throttled=e((B, T), bo),
        thermal_throttled=e((B, T), bo), mem_weights=e((B, T)), mem_grads=e((B, T)), mem_master=e((B, T)),
        mem_optimizer=e((B, T)), mem_activations=e((B, T)), mem_kv_cache=e((B, T)), mem_total=e((B, T)),
        tokens_per_s=e((B, T)), multi_gpu_efficiency=e((B, T)), progress_tokens=e((B, T)), served=e((B, T)),
        slo_good=e((B, T)), slo_attainment=e((B, T)), queue_next=e((B, T)), remaining_next=e((B, T)), spend=e((B, T)),
        budget_next=e((B, T)), value=e((B, T)), utility=e((B, T)), welfare=e(B), node_power_w=e((B, K)),
        rack_power_w=e((B, R)), temp_next=e((B, K)),
    )
    _rows(*ins, *_static_args(st), *o.values())
    o["mem_capacity"] = np.repeat(st.mem_bytes[None], B, axis=0)
    out = Outcome(**o)
    return out if lead == (B,) else _shape(out, lead)


__all__ = ["evaluate"]

"""The packed arrays the compiled round reads and writes, and their column names.

Compiled calls take packed arrays, field-major so that each field is one contiguous block:

* the scenario (:func:`pack_static`, built once per :class:`~fleet_marl.kernel.KernelStatic`):
  ``tf`` (T, ``len(TF)``) float64 and ``ti`` (T, ``len(TI)``) int64 per tenant, ``nf``
  (K, ``len(NF)``) float64 and ``ni`` (K, ``len(NI)``) int64 per node, ``sc`` float64 scalars
  (``SC``: the mechanism's codes, ``mechanisms.codes``, then the cluster's constants) followed
  by each pool's capacity, and ``tg`` (T, G, P, ``len(cost.GROUP_TERMS)``) the stage-1 table by
  layer group;
* the inputs: ``ins_i`` (``len(II)``, B, T) int64, ``ins_f`` (``len(IF)``, B, T) float64 and
  ``temp`` (B, K) float64;
* the outputs: ``out_f`` (``len(OF)``, B, T) float64, ``out_i`` (``len(OI)``, B, T) int64,
  ``out_b`` (``len(OB)``, B, T) bool, ``gon`` (B, T, K) int64, ``out_k`` (2, B, K) float64
  (node power, next temperature), ``rack`` (B, R) float64 and ``welfare`` (B,) float64.

The integer constants below name the columns and rows; numba reads module globals as
compile-time constants.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel.cost import TENANT_TERMS, stage1_tables
from fleet_marl.kernel.mechanisms import codes

G = catalog.N_GROUPS


def _layout(names: str) -> tuple[str, ...]:
    return tuple(names.split())


#: Per-tenant float columns of ``tf``.
TF = (
    _layout(
        "list_price priority mem_bytes inter_bw intra_bw ar_lat ar_bus nvlink seq_len hbm_bw slo_ttft_s slo_tpot_s ref_rate spend_norm dyn_w"
    )
    + TENANT_TERMS
    + ("checkpoint_every_s",)  # train: seconds of training between synchronous checkpoints (docs/model.md section 12.1)
)
#: Per-tenant int columns of ``ti`` (``tensor_parallel``: a trainer's tensor-parallel degree, 1 for a server;
#: ``heads``, ``kv_heads``: its model's attention and KV heads; read with ``coupling.gang`` on, docs/model.md section 12.4).
TI = _layout("max_gpus pool is_train checkpointing tensor_parallel heads kv_heads")
#: Per-node float columns of ``nf``: idle W of its GPUs, W of its GPUs at TDP, dynamic-power headroom of its rack,
#: bytes/s of its leaf switch's uplinks (docs/model.md section 12.1).
NF = _layout("node_idle_w node_full_w rack_headroom_w leaf_uplink_bps")
#: Per-node int columns of ``ni``: its pool, its rack, its leaf switch.
NI = _layout("node_pool node_rack node_leaf")
#: Scalars at the head of ``sc`` (the pools' capacities follow).
SC = _layout(
    "clears key1 key2 n_keys pays has_reserve afford_at_bid reserve veto gpus_per_node comm_overlap mbu round_s restart_s "
    "ambient_c rise_c decay critical_c span_c cost_weight mfu load_gpu_bps load_node_bps contention queueing persistent storage_bps gang"
)
#: Input rows of ``ins_i`` and ``ins_f``.
II = _layout("gpus batch prev_alloc present") + tuple(f"precision{g}" for g in range(G))
IF = _layout("bid queue remaining_tokens budget_left arrivals tiebreak prompt_tokens output_tokens restart_left since_ckpt unsaved_tokens")
#: Output rows of ``out_f``, ``out_i`` and ``out_b`` (the names of :class:`~fleet_marl.kernel.Outcome`).
OF = _layout(
    "price throttle mem_weights mem_grads mem_master mem_optimizer mem_activations mem_kv_cache mem_total mem_capacity "
    "tokens_per_s multi_gpu_efficiency progress_tokens served slo_good slo_attainment queue_next remaining_next spend "
    "budget_next value utility slowdown link_load restart_s ttft_p50_s ttft_p99_s restart_pending_s lost_tokens lost_s since_ckpt_s "
    "unsaved_tokens"
)
OI = _layout("requested alloc nodes_spanned batch usable_gpus") + tuple(f"precision{g}" for g in range(G))
OB = _layout("restarted unsafe_numerics projected vetoed oom tripped power_throttled thermal_throttled")


def _index(layout: tuple[str, ...]) -> dict[str, int]:
    return {n: i for i, n in enumerate(layout)}


_tf, _sc, _ii, _of, _oi, _ob = (_index(x) for x in (TF, SC, II, OF, OI, OB))  # for the layout checks below
(
    T_PRICE,
    T_PRIO,
    T_MEM,
    T_INTER,
    T_INTRA,
    T_ARL,
    T_ARB,
    T_NVL,
    T_SEQ,
    T_HBM,
    T_TTFT,
    T_TPOT,
    T_REF,
    T_NORM,
    T_DYN,
    T_OPT,
    T_ACT,
    T_KV,
    T_KVH,
    T_TP,
    T_TPL,
    T_KVB,
    T_DQT,
    T_WIN,
    T_KST,
    T_REPL,
) = range(len(TF) - 1)
T_CKPT_EVERY = TF.index("checkpoint_every_s")
T_MAXG, T_POOL, T_TRAIN, T_CKPT, T_TPAR, T_HEADS, T_KVHEADS = range(len(TI))
N_IDLE, N_FULL, N_HEAD, N_UPLINK = range(len(NF))
N_POOL, N_RACK, N_LEAF = range(len(NI))
S_STORAGE = SC.index("storage_bps")  # bytes/s of the shared storage (inf: no shared limit)
S_GANG = SC.index("gang")  # coupling.gang: a tenant runs on the GPUs its parallel layout can use (docs/model.md section 12.4)
(S_CLEARS, S_KEY1, S_KEY2, S_NKEYS, S_PAYS, S_HAS_RESERVE, S_AFFORD, S_RESERVE, S_VETO, S_GPN, S_OVERLAP, S_MBU, S_ROUND, S_RESTART) = (
    range(14)
)
S_AMBIENT, S_RISE, S_DECAY, S_CRIT, S_SPAN, S_COSTW, S_MFU, S_LOAD_GPU, S_LOAD_NODE, S_CONTENTION, S_QUEUEING, S_PERSIST = range(
    14, S_STORAGE
)
I_GPUS, I_BATCH, I_PREV, I_PRES, I_PREC = 0, 1, 2, 3, 4
F_BID, F_QUEUE, F_REMAIN, F_BUDGET, F_ARR, F_TIE, F_PROMPT, F_OUT, F_RLEFT, F_SINCE, F_UNSAVED = range(len(IF))
(O_PRICE, O_THROTTLE, O_MW, O_MG, O_MM, O_MO, O_MA, O_MKV, O_MTOT, O_MCAP, O_TPS) = range(11)
(O_EFF, O_PROGRESS, O_SERVED, O_GOOD, O_ATTAIN, O_QNEXT, O_RNEXT, O_SPEND, O_BNEXT, O_VALUE, O_UTIL) = range(11, 22)
O_SLOW, O_LINK, O_RESTART_S, O_TTFT50, O_TTFT99, O_PENDING, O_LOST, O_LOST_S, O_SINCE, O_UNSAVED = range(22, len(OF))
OI_REQ, OI_ALLOC, OI_NODES, OI_BATCH, OI_USABLE, OI_PREC = 0, 1, 2, 3, 4, 5
OB_RESTART, OB_UNSAFE, OB_PROJ, OB_VETO, OB_OOM, OB_TRIP, OB_PTHR, OB_TTHR = range(len(OB))
assert (
    [_tf[n] for n in ("list_price", "nvlink", "dyn_w", "tp_comm", "tp_calls", "kv_bytes", "dequant_tokens")]
    == [T_PRICE, T_NVL, T_DYN, T_TP, T_TPL, T_KVB, T_DQT]
    and _sc["restart_s"] == S_RESTART
    and _sc["mfu"] == S_MFU
)
assert _oi["precision0"] == OI_PREC and _ii["precision0"] == I_PREC and _of["tokens_per_s"] == O_TPS and _of["utility"] == O_UTIL
assert _oi["usable_gpus"] == OI_USABLE and _sc["gang"] == S_GANG
assert _ob["thermal_throttled"] == OB_TTHR and _of["slowdown"] == O_SLOW and _of["ttft_p99_s"] == O_TTFT99
assert _sc["queueing"] == S_QUEUEING and _sc["persistent"] == S_PERSIST


def pack_static(st) -> tuple[np.ndarray, ...]:
    """``(tf, ti, tg, nf, ni, sc)`` of a :class:`~fleet_marl.kernel.KernelStatic` (see the module doc)."""
    g = st.gpus_per_node
    tg, tenant_terms_ = stage1_tables(st)
    node_idle = g * st.node_idle_w
    headroom = st.rack_power_cap_w - node_idle @ st.rack_of  # (R,) W left for dynamic power at idle
    tenant_cols = [st.list_price, st.priority, st.mem_bytes, st.inter_bw, st.intra_bw, st.ar_lat, st.ar_bus, st.nvlink]
    tenant_cols += [st.seq_len, st.bw, st.slo_ttft_s, st.slo_tpot_s]
    tenant_cols += [st.ref_rate, st.spend_norm, st.tdp_w - st.idle_w, *tenant_terms_.T, st.checkpoint_every_s]
    tf = np.stack(tenant_cols, axis=-1).astype(np.float64)
    ti = np.stack([st.max_gpus, st.pool, st.is_train, st.checkpointing, st.tensor_parallel, st.heads, st.kv_heads], axis=-1).astype(
        np.int64
    )
    nf = np.stack([node_idle, g * st.node_tdp_w, headroom[st.node_rack], st.leaf_uplink_bps], axis=-1).astype(np.float64)
    ni = np.stack([st.node_pool, st.node_rack, st.node_leaf], axis=-1).astype(np.int64)
    cluster = [
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
        st.load_gpu_bps,
        st.load_node_bps,
        float(st.contention),
        float(st.queueing),
        float(st.persistent_placement),
        st.storage_bps,
        float(st.gang),
    ]
    sc = np.array([*codes(st.mechanism), *cluster] + [float(c) for c in st.pool_capacity], np.float64)
    out = tuple(np.ascontiguousarray(a) for a in (tf, ti, tg, nf, ni, sc))
    for a in out:
        a.setflags(write=False)
    return out


__all__ = ["IF", "II", "NF", "NI", "OB", "OF", "OI", "SC", "TF", "TI", "pack_static"]

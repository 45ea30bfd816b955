"""The central safety check on numerics and memory: the input check of invalid precisions
(:func:`invalid_precision`, :func:`explain_invalid`) and the compiled stage :func:`check`
that gives each tenant its verdict. The power cap and the heat are the next stage
(:mod:`fleet_marl.kernel.power_heat`).

* **Invalid** (an input error, not a verdict): a precision the tenant's GPU type lacks (FP8
  before Hopper/Ada), or a weight-only format (INT8/INT4) on a training tenant; with
  ``on_invalid='veto'`` the round vetoes that tenant instead.
* **Numerics**: FP8/INT8/INT4 on the embedding, the norms or the head is unsafe
  (``catalog.UNSAFE``). ``veto`` refuses the config; ``project`` runs those groups in BF16
  (stage 1, ``tenant_cost.tenant_terms``).
* **Memory**: over the usable bytes per GPU is OOM; ``project`` first lowers the batch to the
  largest that fits.
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel.jit import jit
from fleet_marl.kernel.layout import (
    I_BATCH,
    O_MA,
    O_MCAP,
    O_MG,
    O_MKV,
    O_MM,
    O_MO,
    O_MTOT,
    O_MW,
    OB_OOM,
    OB_PROJ,
    OB_UNSAFE,
    OB_VETO,
    OI_BATCH,
    S_VETO,
    T_MEM,
)
from fleet_marl.kernel.tenant_cost import C_G, C_KVH, C_M, C_O, C_PSL, C_PSS, C_W, fitting_batch, memory_per_gpu, peak_bytes


def _check_groups(st, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(supported, weight_only_in_training), each (B, T, G) bool."""
    supported = st.supported[np.arange(st.T)[:, None], precision]
    return supported, catalog.WEIGHT_ONLY[precision] & st.is_train[:, None]


def invalid_precision(st, precision: np.ndarray) -> np.ndarray:
    """(B, T) bool: a group uses a precision the GPU lacks, or a weight-only format in training."""
    supported, weight_only = _check_groups(st, precision)
    return (~supported | weight_only).any(-1)


def explain_invalid(st, precision: np.ndarray) -> str:
    """A message for the first invalid precision in ``precision`` (B, T, G)."""
    supported, weight_only = _check_groups(st, precision)
    bad = ~supported | weight_only
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    t, g = idx[-2], idx[-1]
    p = catalog.PRECISIONS[int(precision[idx])]
    gpu = st.pools[int(st.pool[t])]
    where = f"actions.precision[{', '.join(map(str, idx))}] = {int(precision[idx])} ({p}) for tenant {t}, group {catalog.GROUPS[g]}"
    if not supported[idx]:
        ok = [catalog.PRECISIONS[i] for i in np.flatnonzero(st.supported[t])]
        return f"{where}: {gpu} does not support {p}; expected one of {', '.join(ok)}"
    return f"{where}: {p} is weight-only (serving only) and tenant {t} trains; expected fp32, bf16 or fp8"


@jit
def check(b, tf, sc, ins_i, c_terms, unsafe_c, invalid_c, alloc, rf, ri, rb, running):
    """The verdict on every tenant of row ``b`` with GPUs, from its stage 1 (``c_terms``,
    ``unsafe_c``, ``invalid_c``): vetoed, projected, unsafe numerics, OOM; the batch that runs
    and its bytes per GPU (the memory outputs); ``running`` (T,): granted GPUs and neither OOM
    nor vetoed."""
    veto = sc[S_VETO] != 0.0
    for t in range(alloc.shape[0]):
        weights, grads, master, optimizer = c_terms[C_W, t], c_terms[C_G, t], c_terms[C_M, t], c_terms[C_O, t]
        psl, pss, kvh = c_terms[C_PSL, t], c_terms[C_PSS, t], c_terms[C_KVH, t]
        unsafe, invalid = unsafe_c[t], invalid_c[t]
        n = alloc[t]
        has = n > 0
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
        mtot = peak_bytes(mw, mg, mm, mo, ma, mkv)
        if veto:
            oom = mtot > tf[t, T_MEM] and has
        rf[O_MW, t], rf[O_MG, t], rf[O_MM, t], rf[O_MO, t], rf[O_MA, t], rf[O_MKV, t] = mw, mg, mm, mo, ma, mkv
        rf[O_MTOT, t] = mtot
        rf[O_MCAP, t] = tf[t, T_MEM]
        ri[OI_BATCH, t] = bt
        rb[OB_OOM, t] = oom
        rb[OB_VETO, t] = vetoed
        rb[OB_PROJ, t] = projected
        rb[OB_UNSAFE, t] = unsafe and has
        running[t] = has and not oom and not vetoed


__all__ = ["check", "explain_invalid", "invalid_precision"]

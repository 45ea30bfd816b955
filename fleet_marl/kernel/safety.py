"""The central safety check: invalid precisions, numerics, power cap and heat.

* **Invalid** (an input error, not a verdict): a precision the tenant's GPU type lacks (FP8
  before Hopper/Ada), or a weight-only format (INT8/INT4) on a training tenant.
* **Numerics**: FP8/INT8/INT4 on the embedding, the norms or the head is unsafe
  (``catalog.UNSAFE``). ``veto`` refuses the config; ``project`` runs those groups in BF16.
* **Memory** (in ``outcome``): over the usable bytes per GPU is OOM; ``project`` first lowers
  the batch to the largest that fits.
* **Power**: each rack's GPU power is capped; over the cap every GPU in the rack is slowed by
  the same factor so that idle + factor x dynamic power = cap.
* **Heat**: each node's GPU temperature follows a first-order model toward
  ``ambient + rise_at_tdp x P / TDP``; above the max operating temperature clocks fall
  linearly to 0 at the shutdown temperature, where the node trips and runs nothing (so does a
  node that starts the round at or above it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fleet_marl import catalog


class KernelInputError(ValueError):
    """Bad input to the kernel. The message names the field, the index, the value and what
    was expected."""


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
    dyn_w, node_idle, headroom, full, decay, span = _thermal_constants(st)
    dyn = dyn_w * activity  # (B, T) dynamic W per GPU
    node_dyn = np.einsum("btk,bt->bk", gpus_on_node, dyn)
    rack_of = st.rack_of
    rack_dyn = node_dyn @ rack_of
    with np.errstate(divide="ignore", invalid="ignore"):
        f_rack = np.where(rack_dyn > 0, np.minimum(np.maximum(headroom / rack_dyn, 0.0), 1.0), 1.0)
    f_cap = f_rack[:, st.node_rack]  # (B, K)

    def settle(power):
        t_ss = st.ambient_c + st.thermal_rise_at_tdp_c * power / full
        return t_ss + (temp0 - t_ss) * decay

    t_pred = settle(node_idle + node_dyn * f_cap)
    crit = st.critical_temp_c
    f_heat = np.minimum(np.maximum((crit - t_pred) / span, 0.0), 1.0)
    dead = temp0 >= crit
    f_heat = np.where(dead, 0.0, f_heat)  # a node already past shutdown stays off
    f_node = f_cap * f_heat
    node_power = node_idle + node_dyn * f_node
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


__all__ = ["KernelInputError", "PowerThermal", "explain_invalid", "invalid_precision", "power_thermal"]

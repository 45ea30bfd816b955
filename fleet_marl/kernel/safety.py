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


def power_thermal(st, gpus_on_node: np.ndarray, activity: np.ndarray, temp0: np.ndarray) -> PowerThermal:
    """Rack power cap, then the node thermal model, over one round.

    gpus_on_node: (B, T, K); activity: (B, T) in [0, 1] (share of the round at full power);
    temp0: (B, K) or (K,).
    """
    g = st.gpus_per_node
    dyn = (st.tdp_w - st.idle_w) * activity  # (B, T) dynamic W per GPU
    node_dyn = np.einsum("btk,bt->bk", gpus_on_node, dyn)
    node_idle = g * st.node_idle_w  # (K,)
    rack_of = st.rack_of
    rack_dyn = node_dyn @ rack_of
    rack_idle = node_idle @ rack_of
    with np.errstate(divide="ignore", invalid="ignore"):
        f_rack = np.where(rack_dyn > 0, np.minimum(np.maximum((st.rack_power_cap_w - rack_idle) / rack_dyn, 0.0), 1.0), 1.0)
    f_cap = f_rack[:, st.node_rack]  # (B, K)
    full = g * st.node_tdp_w
    decay = np.exp(-st.round_seconds / st.thermal_tau_s)

    def settle(power):
        t_ss = st.ambient_c + st.thermal_rise_at_tdp_c * power / full
        return t_ss + (temp0 - t_ss) * decay

    t_pred = settle(node_idle + node_dyn * f_cap)
    span = st.critical_temp_c - st.throttle_temp_c
    f_heat = np.minimum(np.maximum((st.critical_temp_c - t_pred) / span, 0.0), 1.0)
    f_heat = np.where(temp0 >= st.critical_temp_c, 0.0, f_heat)  # a node already past shutdown stays off
    f_node = f_cap * f_heat
    node_power = node_idle + node_dyn * f_node
    temp_next = settle(node_power)
    on = gpus_on_node > 0  # (B, T, K)
    fac = np.where(on, f_node[:, None, :], np.inf).min(-1)
    fac = np.where(np.isfinite(fac), fac, 1.0)
    any_on = lambda m: (on & m[:, None, :]).any(-1)  # noqa: E731
    return PowerThermal(
        factor=fac,
        power_throttled=any_on(f_cap < 1.0),
        thermal_throttled=any_on(f_heat < 1.0),
        tripped=any_on((t_pred >= st.critical_temp_c) | (temp0 >= st.critical_temp_c)),
        node_power_w=node_power,
        rack_power_w=node_power @ rack_of,
        temp_next=temp_next,
    )


__all__ = ["KernelInputError", "PowerThermal", "explain_invalid", "invalid_precision", "power_thermal"]

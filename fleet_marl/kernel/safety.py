"""The central safety check: invalid precisions, numerics, power cap and heat.

This module holds the input checks (:func:`invalid_precision`, :func:`explain_invalid`) and
:class:`KernelInputError`; the verdicts below are computed in the compiled round
(:mod:`fleet_marl.kernel.engine`).

* **Invalid** (an input error, not a verdict): a precision the tenant's GPU type lacks (FP8
  before Hopper/Ada), or a weight-only format (INT8/INT4) on a training tenant.
* **Numerics**: FP8/INT8/INT4 on the embedding, the norms or the head is unsafe
  (``catalog.UNSAFE``). ``veto`` refuses the config; ``project`` runs those groups in BF16.
* **Memory**: over the usable bytes per GPU is OOM; ``project`` first lowers
  the batch to the largest that fits.
* **Power**: each rack's GPU power is capped; over the cap every GPU in the rack is slowed by
  the same factor so that idle + factor x dynamic power = cap.
* **Heat**: each node's GPU temperature follows a first-order model toward
  ``ambient + rise_at_tdp x P / TDP``; above the max operating temperature clocks fall
  linearly to 0 at the shutdown temperature, where the node trips and runs nothing (so does a
  node that starts the round at or above it).
"""

from __future__ import annotations

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


__all__ = ["KernelInputError", "explain_invalid", "invalid_precision"]

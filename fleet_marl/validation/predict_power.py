"""The kernel's prediction of a power-capped throughput ratio (``power_capped_throughput_ratio``,
``measurements_power.yaml``): an LLM's throughput with its GPUs at a power limit over its
throughput at the TDP, the same setting otherwise (``docs/validation.md``, "Power-capped
throughput").

The relation is the round's own (``docs/model.md`` section 6): a GPU under a power cap runs at
the clock factor ``f`` of ``power_heat.cap_clock`` (idle + ``f^3`` x (TDP - idle) = limit) and a
tenant's work in the round is its rate times ``f`` (``power_heat.throttle``, ``outcome``:
``work = work_rate x f x avail``), for a trainer and a server alike. So the throughput at the TDP
is :func:`predict.predict`'s at the case's setting without a limit, and at the limit:

* a training case: :func:`predict.predict` with the limit (its step throttled by ``f``);
* a serving case: that throughput times ``f``, as the round scales a server's rate.

The ratio is then ``f`` for both. The setting also reports ``roofline_ratio``, the ratio of
:func:`predict.predict`'s serving throughput with and without the limit, where the limit slows
only the pass's FLOPs and not its memory streams (``predict._static``): a diagnostic of how much
of the step the roofline finds compute-bound, not the prediction. Nothing is fitted.
"""

from __future__ import annotations

import dataclasses

from fleet_marl.validation import predict as pr
from fleet_marl.validation.cases import Case

SERVE = "serve_throughput_tokens_per_s"
TRAIN = "train_tokens_per_s_per_gpu"


def throughput_quantity(c: Case) -> str:
    """The throughput quantity the ratio is of: a training rate where the entry has a
    ``training`` block, else a serving rate."""
    return TRAIN if (c.extra.get("entry") or {}).get("training") else SERVE


def capped_throughput(c: Case, limit_w: float) -> tuple[float, float, dict]:
    """``(throughput at the TDP, throughput at limit_w, setting)`` of case ``c``'s setting, in
    the throughput quantity's unit (:func:`throughput_quantity`); ``limit_w`` 0 is the TDP."""
    q = throughput_quantity(c)
    base_case = dataclasses.replace(c, quantity=q, power_limit_w=0.0)
    capped_case = dataclasses.replace(c, quantity=q, power_limit_w=float(limit_w))
    base, setting = pr.predict(base_case)
    f = pr.clock(capped_case)
    if q == TRAIN:
        capped, _ = pr.predict(capped_case)
        diag = capped / base if base else 1.0
    else:
        capped = base * f  # the round's throttle scales the server's whole rate
        diag = (pr.predict(capped_case)[0] / base if base else 1.0) if limit_w else 1.0
    return float(base), float(capped), dict(setting, clock=float(f), roofline_ratio=float(diag))


def predict(c: Case) -> tuple[float, dict]:
    """The kernel's throughput at ``c.power_limit_w`` over its throughput at the catalog TDP, at
    the case's setting (a limit at or above the TDP: 1), and the setting with the clock factor,
    both throughputs and the diagnostic roofline ratio."""
    base, capped, setting = capped_throughput(c, c.power_limit_w)
    return (capped / base if base else 1.0), dict(setting, limit_w=c.power_limit_w, at_tdp=base, at_limit=capped)


__all__ = ["SERVE", "TRAIN", "capped_throughput", "predict", "throughput_quantity"]

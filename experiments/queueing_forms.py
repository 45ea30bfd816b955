"""Which queue fits the published serving measurements: the kernel's (a slot queue and DistServe's
prefill queue, ``fleet_marl.kernel.queueing``) against no queue and one M/D/1 queue for the whole
engine, on the ``queueing latency`` cases of ``fleet-marl validate`` and the TTFT case at the
highest load of the same table (docs/model.md section 12.2).

    python experiments/queueing_forms.py

Prints, per form, the median and largest |error| over the queueing cases, and each case's
prediction where the offered load is at least 0.6 of the kernel's capacity.
"""

from __future__ import annotations

from statistics import median

from fleet_marl.kernel.queueing import stochastic_wait
from fleet_marl.validation import cases
from fleet_marl.validation import predict as pr

#: the TTFT case of the same table at the highest load (32 QPS, 0.86 of the published capacity)
HIGHEST = "trtllm014_l31_8b_h100sxm_tp1_467_256_qps32_ttft"


def forms(c: cases.Case) -> tuple[float, dict[str, float]]:
    """(offered load over the kernel's capacity, {form: predicted mean TTFT ms}) of a case at a rate."""
    st = pr._static(c)
    tt, mem = pr._terms(st, c)
    model, _ = pr.predict(c)
    base = model - pr.queue_wait(st, c, tt, mem) * 1e3
    n = max(c.tp, 1)
    fit = int(max(pr.engine.fitting_batch(*mem, n, pr.serving_capacity(st, c, mem)), 1))
    slots = min(fit, pr.MAX_BATCH, c.max_batch) if c.max_batch else min(fit, pr.MAX_BATCH)
    mu = pr._roofline(st, c, tt, mem, n, slots)[0]
    rate = float(str(c.batch)[4:])
    p, m = stochastic_wait(rate, mu, 1.0, 0.0, c.max_batch / rate if c.max_batch else float("inf"))
    return rate / mu, {"kernel (slots + prefill)": model, "no queue": base, "M/D/1 whole engine": base + p * m * 1e3}


def main() -> None:
    rows = [c for c in cases.load() if c.quantity == "queue_ttft_ms"]
    highest = [c for c in cases.load() if c.id == HIGHEST]
    results = [(c, *forms(c)) for c in rows + highest]
    names = list(results[0][2])
    print(f"{len(rows)} queueing cases")
    for name in names:
        errs = [abs(pred[name] / c.value - 1.0) for c, _, pred in results[: len(rows)]]
        print(f"  {name:<26} median |error| {median(errs):6.1%}   largest {max(errs):6.1%}")
    print("cases at >= 0.6 of the kernel's capacity (measured ms; each form's ms and error):")
    for c, load, pred in results:
        if load >= 0.6:
            cells = "  ".join(f"{n}: {pred[n]:6.1f} ({pred[n] / c.value - 1.0:+.0%})" for n in names)
            print(f"  {c.id} load {load:.2f} measured {c.value:g}  {cells}")


if __name__ == "__main__":
    main()

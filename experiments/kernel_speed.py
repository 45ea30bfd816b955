"""Ad-hoc kernel timing (`fleet-marl bench` is the measured benchmark: docs/benchmarks.md).

How to run:  .venv/bin/python experiments/kernel_speed.py
What it prints: batched evaluations/s at N = 16 tenants (8 H100 nodes) for batch 1024, and the
time of one `evaluate_counterfactuals` call (N + 1 rows, no input checks) at N = 8 and N = 16.
Actions are pre-sampled and checked once, so neither sampling nor validation is timed.
Numbers vary with the machine's load; these are medians of 5 repeats.
"""

from __future__ import annotations

import time

import numpy as np

from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, check_actions, evaluate, evaluate_counterfactuals

MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b"]


def scenario(n: int) -> KernelStatic:
    tenants = tuple(TenantSpec(kind="train" if i % 2 == 0 else "serve", model=MODELS[i % 4]) for i in range(n))
    return KernelStatic.from_config(FleetConfig(cluster=ClusterSpec(gpu_types=("h100-sxm",) * (n // 2)), tenants=tenants))


def median_time(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps)
    return float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    st = scenario(16)
    B = 1024
    acts = check_actions(
        st,
        Actions(
            rng.integers(0, 9, (B, 16)),
            rng.choice([0.5, 1.0, 2.0], (B, 16)),
            rng.choice([0, 1, 2], (B, 16, 5)),
            rng.integers(1, 32, (B, 16)),
        ),
        "veto",
    )
    s, d = RoundState.initial(st), Draws.expected(st)
    dt = median_time(lambda: evaluate(st, acts, s, d, validate=False), 5)
    print(f"N=16, batch {B}: {B / dt:,.0f} evaluations/s")
    for n in (8, 16):
        st = scenario(n)
        a = check_actions(st, Actions(rng.integers(0, 9, n), np.ones(n), np.ones((n, 5), np.int64), np.ones(n, np.int64)))
        s, d = RoundState.initial(st), Draws.expected(st)
        dt = median_time(lambda st=st, a=a, s=s, d=d: evaluate_counterfactuals(st, a, s, d, validate=False), 300)
        print(f"N={n}: evaluate_counterfactuals ({n + 1} rows) {dt * 1e6:,.0f} us per call")


if __name__ == "__main__":
    main()

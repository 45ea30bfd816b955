"""What each reward scheme costs per env step as N grows, in the credit-assignment study's scenario.

How to run:  .venv/bin/python experiments/credit_cost.py [--n 2,8,16,32,64] [--schemes difference,shapley] [--samples 16,64] [--cpu 0]

It steps ``fleet_marl.vector_env(task="easy", **scaled(N, mechanism), reward_scheme=...)``
(the study's scenario, ``2048 / N`` clusters as in its runs) with random actions drawn from the
masks beforehand (sampling is not timed), pinned to one core, and prints per scheme and N:

- **agent-steps/s** of the whole vector-env step (the env, the kernel call with every
  counterfactual row the scheme needs, the scheme's arithmetic), the median of ``--repeats``;
- **credit ms / env step**: the env's own timing of its credit engine
  (``FleetVectorEnv.credit_seconds``) per env step of one cluster, the figure the study
  records per run (``credit_ms_per_step``);
- **s per study run**: what the reward alone would take in one scaling run of the study
  (393,216 agent steps), from the credit ms per env step.

``shapley`` runs with ``--samples`` sampled permutations above 8 tenants (exact up to 8; the
study uses 16, the env's default is 64). docs/credit_assignment.md ("Why Shapley stops at
N = 16") quotes this table; it takes about 2 minutes on one core with the defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import fleet_marl
from fleet_marl.tasks import scaled

AGENT_STEPS_PER_RUN = 24 * 2048 * 8  # the study's scaling budget: 24 iterations of 2048 / N clusters x 8 steps (393,216 agent steps)


def make_env(n: int, scheme: str, samples: int, mechanism: str):
    """The study's vector env at N = ``n`` (2048 / N clusters), computing ``scheme`` alone, as a
    learner's env does (``compute_all=False``: every scheme at once would time them all)."""
    extra = {"shapley_samples": samples} if scheme == "shapley" else {}
    return fleet_marl.vector_env(
        num_envs=max(16, 2048 // n), task="easy", reward_scheme=scheme, compute_all=False, max_cycles=100, **scaled(n, mechanism), **extra
    )


def measure(n: int, scheme: str, samples: int, mechanism: str, steps: int, repeats: int) -> tuple[float, float]:
    """(agent-steps/s median over repeats, credit ms per env step) of ``steps`` vector-env steps."""
    venv = make_env(n, scheme, samples, mechanism)
    B = venv.num_envs
    _obs, infos = venv.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [
        venv.sample_actions(infos, rng) for _ in range(16)
    ]  # allowed by the first masks; the GPU-count mask does not shrink below them here
    venv.step(pool[0])  # numba's compiled paths, before the clock
    rates, credit = [], []
    for _ in range(repeats):
        c0 = venv.credit_seconds
        t0 = time.perf_counter()
        for k in range(steps):
            venv.step(pool[k % len(pool)])
        dt = time.perf_counter() - t0
        rates.append(steps * B * n / dt)
        credit.append((venv.credit_seconds - c0) / (steps * B) * 1e3)  # per env step of one cluster, as the study counts
    return statistics.median(rates), statistics.median(credit)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="2,8,16,32,64", help="tenant counts, comma-separated")
    ap.add_argument("--schemes", default="difference,shapley", help="reward schemes, comma-separated")
    ap.add_argument("--samples", default="16,64", help="shapley's sampled permutations above 8 tenants, comma-separated")
    ap.add_argument("--mechanism", default="proportional")
    ap.add_argument("--steps", type=int, default=10, help="env steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the last one this process may use)")
    a = ap.parse_args(argv)
    cpu = a.cpu if a.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    print(f"easy scaled to N tenants under {a.mechanism}, 2048 / N clusters, {a.steps} steps x {a.repeats} repeats, core {cpu}\n")
    print("| scheme | permutations | N | agent-steps/s | credit ms / env step | reward s per study run |")
    print("|---|---|---|---|---|---|")
    for scheme in a.schemes.split(","):
        for samples in [int(s) for s in a.samples.split(",")] if scheme == "shapley" else [0]:
            for n in (int(x) for x in a.n.split(",")):
                if scheme == "shapley" and n <= 8 and samples != int(a.samples.split(",")[0]):
                    continue  # exact up to 8 tenants: the permutations do not matter, one row is enough
                rate, ms = measure(n, scheme, samples, a.mechanism, a.steps, a.repeats)
                per_run = ms / 1e3 * AGENT_STEPS_PER_RUN / n  # the run's env steps (one cluster each) = agent steps / N
                label = ("exact" if n <= 8 else str(samples)) if scheme == "shapley" else "–"
                print(f"| {scheme} | {label} | {n} | {rate:,.0f} | {ms:.3f} | {per_run:.1f} |", flush=True)


if __name__ == "__main__":
    main()

"""Ad-hoc environment timing per named task (`fleet-marl bench` is the measured benchmark: docs/benchmarks.md).

How to run:  .venv/bin/python experiments/env_speed.py [--episodes 5]
What it prints, for each task and reward setting: agent-steps per second over random-action
episodes (actions sampled from the masks beforehand, so sampling is not timed), the time of
one env step, and the time of the credit call inside it (``env.last_credit_seconds``: the one
batched kernel call per round plus the reward schemes' arithmetic; the rest is the env layer:
validation, fairness, observations, infos). Medians over the episodes. Then, per task, the
kernel rows of one round with every scheme computed (``compute_all=True``): at the first step
of seed 0 with every tenant's default action (``env.last_credit.rows``; docs/environment.md,
"One kernel call per round").
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fleet_marl


def presample(env, rng, n=256):
    pool = []
    for _ in range(n):
        pool.append({a: np.array([rng.choice(np.flatnonzero(d)) for d in env.action_mask(a)]) for a in env.possible_agents})
    return pool


def episode_rate(env, pool, seed):
    env.reset(seed=seed)
    agent_steps, k = 0, 0
    kernel = 0.0
    t0 = time.perf_counter()
    while env.agents:
        acts = {x: pool[k % len(pool)][x] for x in env.agents}
        env.step(acts)
        kernel += env.last_credit_seconds  # the env's own timing of its credit call
        agent_steps += len(acts)
        k += 1
    dt = time.perf_counter() - t0
    return agent_steps / dt, dt / k * 1e6, kernel / k * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--tasks", nargs="+", default=["easy", "medium", "hard"])
    args = ap.parse_args()
    print(f"{'task':<8} {'rewards':<28} {'agent-steps/s':>14} {'us/step':>9} {'us credit':>10}")
    for task in args.tasks:
        for label, kw in (
            ("difference only", dict(reward_scheme="difference", compute_all=False)),
            ("local only", dict(reward_scheme="local", compute_all=False)),
            ("difference + free (default)", dict(reward_scheme="difference")),
            ("every scheme (compute_all)", dict(reward_scheme="difference", compute_all=True)),
        ):
            env = fleet_marl.parallel_env(task=task, **kw)
            env.reset(seed=0)
            pool = presample(env, np.random.default_rng(0))
            episode_rate(env, pool, 0)  # warm-up
            runs = [episode_rate(env, pool, s) for s in range(args.episodes)]
            med = [statistics.median(r[j] for r in runs) for j in range(3)]
            print(f"{task:<8} {label:<28} {med[0]:>14.0f} {med[1]:>9.0f} {med[2]:>10.0f}")
    for task in args.tasks:
        print(f"{task:<8} kernel rows at the first step, every scheme, default actions: {first_step_rows(task)}")


def first_step_rows(task: str) -> int:
    """The kernel rows of the first round of seed 0 with every scheme computed and every tenant
    at its default action."""
    env = fleet_marl.parallel_env(task=task, reward_scheme="difference", compute_all=True)
    env.reset(seed=0)
    env.step({a: env.default_action_index[i] for i, a in enumerate(env.possible_agents)})
    return env.last_credit.rows


if __name__ == "__main__":
    main()

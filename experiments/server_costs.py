"""What one step of a served env costs a server, at the scenario sizes a client may ask for.

How to run:  .venv/bin/python experiments/server_costs.py [--sizes 16x32x64,32x64x64s] [--opponents planner,greedy] [--cpu 0]

For each size ``TxNxG`` (T tenants cycling through ``easy``'s four, N H100 nodes, every tenant's
``max_gpus`` G; a trailing ``s``: every tenant a server of Qwen2.5-0.5B with an unlimited budget,
the planner's costliest case) it builds the scenario as a client's reset would (``easy`` with
``fleet_marl.tasks.scaled(T)`` and the overrides, every scheme computed as over the wire) and,
pinned to one core, times one step of the env and each opponent policy's first plan (a new
scenario: its tables fill) and its plan of the second round (the work the ego view does per step
besides the env); beside each it prints the server's estimate of that work
(:func:`fleet_marl.openenv.cost.work`, in kernel row-columns) and the µs a unit took.
docs/llm_agents.md ("Security") quotes the table for ``--max-work``; it takes about three
minutes with the defaults.
"""

from __future__ import annotations

import argparse
import os
import time

import fleet_marl
from fleet_marl import policies
from fleet_marl.openenv.cost import work
from fleet_marl.tasks import scaled

DEFAULT_SIZES = "16x8x8,64x32x8,16x8x64s,32x16x16s,32x64x64,64x64x64s"


def scenario(tenants: int, nodes: int, gpus: int, serve_only: bool = False) -> dict:
    """The overrides of ``easy`` a client would send for this size."""
    d = scaled(tenants)
    d["cluster"]["gpu_types"] = ["h100-sxm"] * nodes
    for t in d["tenants"]:
        t["max_gpus"] = gpus
        if serve_only:
            t.update(kind="serve", model="qwen2.5-0.5b", budget=1e9, workload={"rate": 50.0})
    return {**d, "max_cycles": 1000}


def plan_seconds(env, name: str) -> tuple[float, float]:
    """Seconds of policy ``name``'s first plan on a new scenario and of its plan of the second round."""
    obs, infos = env.reset(seed=0)
    policy = policies.make(name, env)
    policy.reset(0)
    t0 = time.perf_counter()
    actions = policy.act(obs, infos)
    first = time.perf_counter() - t0
    obs, _, _, _, infos = env.step(actions)
    t0 = time.perf_counter()
    policy.act(obs, infos)
    return first, time.perf_counter() - t0


def step_seconds(env) -> float:
    """Seconds of one step of ``env`` (its second: the first compiles for new sizes)."""
    obs, infos = env.reset(seed=0)
    actions = policies.make("random", env).act(obs, infos)
    env.step(actions)
    t0 = time.perf_counter()
    env.step({a: actions[a] for a in env.agents if a in actions})
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"tenants x nodes x max_gpus, comma-separated (default {DEFAULT_SIZES})")
    p.add_argument("--opponents", default="planner,hindsight,greedy", help="policies to time (default planner,hindsight,greedy)")
    p.add_argument("--cpu", type=int, default=0, help="core to pin to (default 0; -1: no pinning)")
    args = p.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    names = args.opponents.split(",")
    head = " | ".join(f"{n}: work | {n}: first plan s | {n}: plan s | {n}: µs a unit" for n in names)
    print(f"| tenants | nodes | max_gpus | tenants are | round: work | round: step s | round: µs a unit | {head} |")
    print("|---:|---:|---:|---|---:|---:|---:|" + "---:|---:|---:|---:|" * len(names))
    for size in args.sizes.split(","):
        serve_only = size.endswith("s")
        t, n, g = (int(x) for x in size.rstrip("s").split("x"))
        env = fleet_marl.parallel_env(task="easy", compute_all=True, **scenario(t, n, g, serve_only))
        env_work, env_s = work(env.config).env, step_seconds(env)
        cells = []
        for name in names:
            w = work(env.config, name).opponents
            first, again = plan_seconds(env, name)
            cells += [f"{w:,}", f"{first:.3f}", f"{again:.3f}", f"{first / w * 1e6:.2f}"]
        kind = "servers" if serve_only else "easy's mix"
        print(
            f"| {t} | {n} | {g} | {kind} | {env_work:,} | {env_s:.3f} | {env_s / env_work * 1e6:.2f} | " + " | ".join(cells) + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""What one step of a served env costs a server, at the scenario sizes a client may ask for.

How to run:  .venv/bin/python experiments/server_costs.py [--sizes 16x32x256,64x64x64] [--opponents planner,greedy] [--cpu 0]

For each size ``TxNxG`` (T tenants cycling through ``easy``'s four, N H100 nodes, every tenant's
``max_gpus`` G) it builds the scenario as a client's reset would (``easy`` with
``fleet_marl.tasks.scaled(T)`` and the overrides), plays one round, then times one plan of each
opponent policy on the next round's observations (the work the ego view does per step besides
the env), pinned to one core; and prints ``planner_work`` (the server's measure,
:func:`fleet_marl.openenv.limits.planner_work`) beside it. docs/llm_agents.md ("Security")
quotes the table for ``--max-planner-work``; it takes about a minute with the defaults.
"""

from __future__ import annotations

import argparse
import os
import time

import fleet_marl
from fleet_marl import policies
from fleet_marl.openenv.limits import planner_work
from fleet_marl.tasks import scaled

DEFAULT_SIZES = "16x8x8,64x32x8,16x32x256,32x64x64,64x64x64,64x64x256"


def scenario(tenants: int, nodes: int, gpus: int) -> dict:
    """The overrides of ``easy`` a client would send for this size."""
    d = scaled(tenants)
    d["cluster"]["gpu_types"] = ["h100-sxm"] * nodes
    for t in d["tenants"]:
        t["max_gpus"] = gpus
    return {**d, "max_cycles": 1000}


def plan_seconds(env, name: str) -> float:
    """Seconds of one plan of policy ``name`` on the second round (the first warms it up)."""
    obs, infos = env.reset(seed=0)
    policy = policies.make(name, env)
    policy.reset(0)
    obs, _, _, _, infos = env.step(policy.act(obs, infos))
    t0 = time.perf_counter()
    policy.act(obs, infos)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"tenants x nodes x max_gpus, comma-separated (default {DEFAULT_SIZES})")
    p.add_argument("--opponents", default="planner,greedy", help="policies to time (default planner,greedy)")
    p.add_argument("--cpu", type=int, default=0, help="core to pin to (default 0; -1: no pinning)")
    args = p.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    names = args.opponents.split(",")
    print("| tenants | nodes | max_gpus | planner_work | " + " | ".join(f"{n} s/step" for n in names) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(names))
    for size in args.sizes.split(","):
        t, n, g = (int(x) for x in size.split("x"))
        env = fleet_marl.parallel_env(task="easy", **scenario(t, n, g))
        cells = [f"{plan_seconds(env, name):.3f}" for name in names]
        print(f"| {t} | {n} | {g} | {planner_work(env.config):,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

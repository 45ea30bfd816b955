"""How many concurrent sessions one core of ``fleet-marl serve`` holds when each steps ``easy``
once a second, as LLM agents do.

How to run:  .venv/bin/python experiments/serve_capacity.py [--sessions 32,64,128,192] [--seconds 30] [--mode multi] [--scenario easy]

For each count N it starts a server pinned to core 0 (``--max-sessions N``), opens N WebSocket
sessions from this process (pinned to core 1: asyncio, one coroutine a session), resets each
on ``easy`` and has each step once a second, at a random phase, for ``--seconds``; then prints a
row: N, the step's round-trip latency p50/p99 over every step of every session, the server's
RSS with no session and with N open (``/proc/<pid>/status``), and the RSS each session adds.
docs/llm_agents.md ("Capacity") quotes the table and sets the default ``--max-sessions`` from
it; ``openenv.yaml`` declares the memory. About a minute per count. ``--scenario largest``
resets every session on the largest scenario the default limits admit (64 tenants on 64 nodes,
64 GPUs each, sampled Shapley over 64 permutations, every scheme) instead: what a session can
cost in memory (run it with few sessions: a core steps such a session a few times a second).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect

BIN = Path(sys.executable).parent
ACTION = [1, 2, 1, 1, 1, 1, 1, 3]  # 1 GPU at list price, BF16, batch 8: legal for easy's four tenants


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def start(n: int, port: int, mode: str) -> subprocess.Popen:
    exe = BIN / "fleet-marl"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fleet_marl.cli"]
    args = [*cmd, "serve", "--mode", mode, "--task", "easy", "--port", str(port), "--max-sessions", str(n), "--log-level", "warning"]
    proc = subprocess.Popen(["taskset", "-c", "0", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the server did not start within 120 s")


def largest() -> dict:
    """The config overrides of the largest scenario the default limits admit."""
    from fleet_marl.openenv.limits import ServerLimits
    from fleet_marl.tasks import scaled

    limits = ServerLimits()
    d = scaled(limits.max_tenants)
    d["cluster"]["gpu_types"] = ["h100-sxm"] * limits.max_nodes
    for t in d["tenants"]:
        t["max_gpus"] = limits.max_gpus
    return {**d, "max_cycles": limits.max_rounds, "reward": {"scheme": "shapley", "shapley_samples": limits.max_shapley_samples}}


async def session(url: str, i: int, seconds: float, mode: str, opened: asyncio.Event, latencies: list, ready: list, config: dict) -> None:
    async with connect(url, open_timeout=120, max_size=None) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"seed": i, "config": config}}))
        first = json.loads(await ws.recv())
        assert first["type"] == "observation", first
        ready.append(i)
        await opened.wait()
        if mode == "multi":
            agents = first["data"]["observation"]["agents"]
            step = json.dumps({"type": "step", "data": {"actions": dict.fromkeys(agents, ACTION)}})
        else:
            step = json.dumps({"type": "step", "data": {"text": '{"request_gpus": 1, "bid": "list", "batch": 8, "precision": "bf16"}'}})
        rng = random.Random(i)
        await asyncio.sleep(rng.random())
        start = time.monotonic()
        k = 0
        while time.monotonic() - start < seconds:
            t0 = time.perf_counter()
            await ws.send(step)
            r = json.loads(await ws.recv())
            latencies.append(time.perf_counter() - t0)
            assert r["type"] == "observation", r
            k += 1
            await asyncio.sleep(max(start + k - time.monotonic(), 0.0))


async def measure(n: int, seconds: float, mode: str, port: int, config: dict) -> dict:
    proc = start(n, port, mode)
    try:
        await asyncio.sleep(1.0)
        idle = rss_mb(proc.pid)
        opened, latencies, ready = asyncio.Event(), [], []
        tasks = [
            asyncio.create_task(session(f"ws://127.0.0.1:{port}/ws", i, seconds, mode, opened, latencies, ready, config)) for i in range(n)
        ]
        while len(ready) < n:
            if any(t.done() and t.exception() for t in tasks):
                raise next(t.exception() for t in tasks if t.done() and t.exception())
            await asyncio.sleep(0.2)
        opened.set()
        peak = rss_mb(proc.pid)
        await asyncio.gather(*tasks)
        peak = max(peak, rss_mb(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    lat = np.array(latencies) * 1000
    return {
        "sessions": n,
        "steps": lat.size,
        "p50": float(np.percentile(lat, 50)),
        "p99": float(np.percentile(lat, 99)),
        "idle_mb": idle,
        "rss_mb": peak,
        "per_session_mb": (peak - idle) / n,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", default="32,64,128,192", help="session counts, comma-separated (default 32,64,128,192)")
    p.add_argument("--seconds", type=float, default=30.0, help="how long each session steps once a second (default 30)")
    p.add_argument("--mode", choices=("multi", "ego"), default="multi", help="the view (default multi; ego adds its opponents' plan)")
    p.add_argument("--scenario", choices=("easy", "largest"), default="easy", help="what each session resets to (default easy)")
    p.add_argument("--port", type=int, default=8765)
    args = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(0, {1})
    print("| sessions | steps | step p50 ms | step p99 ms | server RSS idle MB | server RSS MB | MB a session |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.sessions.split(",")):
        config = {"max_cycles": 1000} if args.scenario == "easy" else largest()
        r = asyncio.run(measure(n, args.seconds, args.mode, args.port, config))
        print(
            f"| {r['sessions']} | {r['steps']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['idle_mb']:.0f} | {r['rss_mb']:.0f} | "
            f"{r['per_session_mb']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

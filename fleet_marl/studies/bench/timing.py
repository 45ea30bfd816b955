"""How ``fleet-marl bench`` times things: the process pinned to one core, its resident set size,
joint actions sampled from the action masks beforehand, and the medians over repeats of env
steps (only ``step`` timed), of calls of any function and of a step callback's agent-steps.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def pin_to_one_core(cpu: int | None = None) -> int | None:
    """Pin this process to ``cpu`` (default: the last core it may run on). Returns the core,
    or None where affinity is not supported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if cpu is None:
        cpu = allowed[-1]
    if cpu not in allowed:
        raise ValueError(f"--cpu {cpu}: expected one of the cores this process may use: {allowed}")
    os.sched_setaffinity(0, {cpu})
    return cpu


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; else the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource  # not on Windows

        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def presample(env: Any, rng: np.random.Generator, n: int = 64) -> list[dict]:
    """``n`` joint actions drawn from the current action masks of every possible agent."""
    out = []
    for _ in range(n):
        joint = {}
        for a in env.possible_agents:
            space = env.action_space(a)
            mask = env.action_mask(a) if hasattr(env, "action_mask") else None
            if mask is None:
                joint[a] = space.sample()
            else:
                joint[a] = np.array([rng.choice(np.flatnonzero(d)) for d in mask], dtype=np.int64)
        out.append(joint)
    return out


@dataclass
class StepTiming:
    us_per_step: float  # median over repeats of (step time / steps)
    agent_steps_per_s: float  # median over repeats of (agent-steps / step time)
    agents: float  # mean live agents per step


def time_steps(env: Any, pool: list[dict], steps: int, repeats: int, seed: int = 0) -> StepTiming:
    """Time ``repeats`` runs of ``steps`` calls of ``env.step`` with pre-sampled actions.
    Only ``step`` is timed: resets (when every agent has finished) are not."""
    env.reset(seed=seed)
    k = 0

    def run(n):
        nonlocal k
        spent, agent_steps = 0.0, 0
        clock = time.perf_counter
        for _ in range(n):
            if not env.agents:
                env.reset(seed=seed + k)
            joint = pool[k % len(pool)]
            acts = {a: joint[a] for a in env.agents}
            t0 = clock()
            env.step(acts)
            spent += clock() - t0
            agent_steps += len(acts)
            k += 1
        return spent, agent_steps

    run(max(5, steps // 10))  # warm-up
    per_step, rate, agents = [], [], []
    for _ in range(repeats):
        spent, agent_steps = run(steps)
        per_step.append(spent / steps)
        rate.append(agent_steps / spent)
        agents.append(agent_steps / steps)
    return StepTiming(statistics.median(per_step) * 1e6, statistics.median(rate), statistics.fmean(agents))


def median_call_time(fn: Callable[[], object], repeats: int, min_time: float) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` repeats of enough calls to last
    ``min_time`` seconds each (after a warm-up call, calibrated on a second: a first call may
    load compiled code from numba's cache, and calibrating on it would time a handful of calls)."""
    fn()
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    calls = max(1, math.ceil(min_time / max(first, 1e-7)))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def median_rate(step: Callable[[int], int], steps: int, repeats: int) -> float:
    """Median over ``repeats`` of agent-steps per second; ``step(k)`` takes the k-th step and
    returns the agent-steps it counts (or -1 for an untimed reset step)."""
    for k in range(min(steps, 5)):  # warm-up (untimed): the compiled round's first calls, the first buffers
        step(k)
    rates = []
    for _ in range(repeats):
        spent, agent_steps = 0.0, 0
        for k in range(steps):
            t = time.perf_counter()
            n = step(k)
            dt = time.perf_counter() - t
            if n >= 0:
                spent, agent_steps = spent + dt, agent_steps + n
        rates.append(agent_steps / spent)
    return statistics.median(rates)


__all__ = ["StepTiming", "median_call_time", "median_rate", "pin_to_one_core", "presample", "rss_bytes", "time_steps"]

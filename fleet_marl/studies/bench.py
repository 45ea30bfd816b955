"""``fleet-marl bench``: how fast the environment and the batched kernel are, on one core.

Every figure is a median over repeats, measured in one process pinned to one CPU core, with
actions sampled from the action masks beforehand (sampling is never timed) and a stock
PettingZoo environment measured in the same run as the reference. The keys of the JSON
report are documented in ``docs/benchmarks.md``; the targets are the ones of the performance
issue (``TARGETS``). :func:`measure` runs every measurement; :data:`DESCRIPTION`,
:data:`EXAMPLES`, :func:`add_arguments` and :func:`run` are the ``bench`` command.

The scenario family (``bench_config``): N tenants on N/2 H100 nodes (4 GPUs per tenant against
a demand of up to 8, so the arbiter always has contention), alternating trainers and servers
over the models of the ``hard`` task, proportional-share arbiter, budgets and jobs large
enough that no tenant leaves before ``max_cycles`` (so every step has N agents).

>>> cfg = bench_config(4)
>>> len(cfg["tenants"]), len(cfg["cluster"]["gpu_types"])
(4, 2)
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from tqdm import tqdm

import fleet_marl
from fleet_marl import catalog
from fleet_marl.config import FleetConfig, from_dict
from fleet_marl.environment import parallel_env
from fleet_marl.errors import require
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, check_actions, evaluate

_H100 = "h100-sxm"
#: Trainers (model, sequence length, activation checkpointing) and servers, as in the hard task.
_TRAINERS = (("gpt2", 1024, False), ("qwen2.5-0.5b", 2048, False), ("qwen2.5-7b", 2048, True), ("llama-3.1-8b", 2048, True))
_SERVERS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b")

ENV_SIZES = (4, 16, 64)
SCHEMES = ("local", "difference")
KERNEL_BATCHES = (1, 64, 1024, 16384)
KERNEL_N = 16
SHAPLEY_N = 8
#: Vector-env agent-steps of the memory run (the issue's 10^7; --quick runs a hundredth).
RSS_AGENT_STEPS = 10_000_000
#: Clusters of the vector-env measurements.
VECTOR_B = 256

#: The targets of the "One engine" issue: key -> (target, "min" or "max").
TARGETS = {
    f"vector_agent_steps_per_s_n16_b{VECTOR_B}_local": (1_000_000.0, "min"),
    f"vector_agent_steps_per_s_n16_b{VECTOR_B}_difference": (500_000.0, "min"),
    "kernel_evals_per_s_n16_b1024": (1_000_000.0, "min"),
    "kernel_eval_us_n16_b1": (20.0, "max"),
    "env_step_us_n16_difference": (150.0, "max"),
    "agent_steps_ratio_vs_reference": (5.0, "min"),
    "difference_overhead_ratio": (1.5, "max"),
    f"shapley_overhead_ratio_n{SHAPLEY_N}": (3.0, "max"),
    "rss_growth_fraction": (0.05, "max"),
}


def bench_config(n: int, max_cycles: int = 100) -> dict:
    """The benchmark scenario with ``n`` tenants, as a plain config dict (see the module doc)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n = {n!r}: expected an integer >= 1 (tenants)")
    tenants = []
    for i in range(n):
        if i % 2 == 0:
            model, seq, ckpt = _TRAINERS[(i // 2) % len(_TRAINERS)]
            tenants.append(
                {
                    "kind": "train",
                    "model": model,
                    "gpu_type": _H100,
                    "budget": 1e6,
                    "max_gpus": 8,
                    "priority": 1.0 + (i % 3 == 0),
                    "activation_checkpointing": ckpt,
                    "workload": {"seq_len": seq, "job_tokens": 1e13, "rate": 6.0},
                }
            )
        else:
            tenants.append(
                {
                    "kind": "serve",
                    "model": _SERVERS[(i // 2) % len(_SERVERS)],
                    "gpu_type": _H100,
                    "budget": 1e6,
                    "max_gpus": 8,
                    "priority": 1.0 + (i % 4 == 1),
                    "workload": {"rate": 3.0, "prompt_tokens": 1024, "output_tokens": 256},
                }
            )
    return {
        "cluster": {"gpu_types": [_H100] * max(1, n // 2)},
        "tenants": tenants,
        "arbiter": {"mechanism": "proportional"},
        "max_cycles": max_cycles,
    }


# --- helpers ---------------------------------------------------------------------------------


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


def presample(env, rng: np.random.Generator, n: int = 64) -> list[dict]:
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


def time_steps(env, pool: list[dict], steps: int, repeats: int, seed: int = 0) -> StepTiming:
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


# --- the measurements --------------------------------------------------------------------------


def make_env(n: int, scheme: str, max_cycles: int = 100):
    return parallel_env(config=bench_config(n, max_cycles), reward_scheme=scheme, compute_all=False)


def env_step(n: int, scheme: str, steps: int, repeats: int) -> StepTiming:
    env = make_env(n, scheme)
    env.reset(seed=0)
    pool = presample(env, np.random.default_rng(n))
    return time_steps(env, pool, steps, repeats)


def kernel_actions(st, rng: np.random.Generator, batch: int):
    """Random valid kernel actions with a leading batch axis, checked once (not timed)."""
    T, G = st.T, catalog.N_GROUPS
    legal = st.supported & ~(st.is_train[:, None] & catalog.WEIGHT_ONLY[None, :])  # (T, P)
    u = rng.random((batch, T, G))
    counts = legal.sum(-1)  # (T,)
    pick = np.minimum((u * counts[None, :, None]).astype(np.int64), counts[None, :, None] - 1)
    codes = np.argsort(~legal, axis=-1, kind="stable")  # legal codes first, in order
    prec = np.take_along_axis(np.broadcast_to(codes[None], (batch, T, codes.shape[1])), pick, axis=-1)
    acts = Actions(
        gpus=rng.integers(0, 9, (batch, T)),
        bid=rng.choice([0.5, 0.75, 1.0, 1.5, 2.0], (batch, T)),
        precision=prec,
        batch=rng.integers(1, 33, (batch, T)),
    )
    return check_actions(st, acts)


def kernel_rate(batch: int, repeats: int, min_time: float) -> float:
    """Evaluations (rows) per second of ``evaluate`` at N = 16 for ``batch`` rows, inputs checked once."""
    st = KernelStatic.from_config(from_dict(FleetConfig, bench_config(KERNEL_N)))
    acts = kernel_actions(st, np.random.default_rng(batch), batch)
    state, draws = RoundState.initial(st), Draws.expected(st)
    dt = median_call_time(lambda: evaluate(st, acts, state, draws, validate=False), repeats, min_time)
    return batch / dt


def kernel_single_us(repeats: int, min_time: float) -> float:
    """Microseconds per ``evaluate`` call of one configuration at N = 16: inputs without a
    batch axis, checked once (``validate=False``), the whole Outcome returned."""
    st = KernelStatic.from_config(from_dict(FleetConfig, bench_config(KERNEL_N)))
    a = kernel_actions(st, np.random.default_rng(1), 1)
    one = Actions(gpus=a.gpus[0], bid=a.bid[0], precision=a.precision[0], batch=a.batch[0])
    state, draws = RoundState.initial(st), Draws.expected(st)
    return median_call_time(lambda: evaluate(st, one, state, draws, validate=False), repeats, min_time) * 1e6


def vector_timing(scheme: str, steps: int, repeats: int) -> tuple[float, float]:
    """(ms per step, agent-steps/s) of the vector env, N = 16, B = ``VECTOR_B``: ``steps``
    calls of ``step`` with pre-sampled actions per repeat (automatic resets included: they are
    part of stepping a vector env)."""
    venv = fleet_marl.vector_env(num_envs=VECTOR_B, config=bench_config(KERNEL_N), reward_scheme=scheme, compute_all=False)
    obs, infos = venv.reset(seed=0)
    rng = np.random.default_rng(3)
    pool = [venv.sample_actions(infos, rng) for _ in range(8)]
    venv.step(pool[0])  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for k in range(steps):
            venv.step(pool[k % len(pool)])
        times.append((time.perf_counter() - t0) / steps)
    dt = statistics.median(times)
    return dt * 1e3, VECTOR_B * KERNEL_N / dt


def rss_run(agent_steps: int) -> dict:
    """Step the N = 16, B = ``VECTOR_B`` vector env (``local`` rewards, automatic resets) for
    ``agent_steps`` agent-steps; RSS after the first tenth (warm) and at the end."""
    venv = fleet_marl.vector_env(num_envs=VECTOR_B, config=bench_config(KERNEL_N), reward_scheme="local", compute_all=False)
    obs, infos = venv.reset(seed=0)
    rng = np.random.default_rng(7)
    pool = [venv.sample_actions(infos, rng) for _ in range(8)]
    per_step = VECTOR_B * KERNEL_N
    done, k, warm = 0, 0, None
    gc.collect()
    t0 = time.perf_counter()
    while done < agent_steps:
        venv.step(pool[k % len(pool)])
        done += per_step
        k += 1
        if warm is None and done >= agent_steps // 10:
            gc.collect()
            warm = rss_bytes()
    wall = time.perf_counter() - t0
    gc.collect()
    end = rss_bytes()
    return {
        "rss_start_bytes": warm,
        "rss_end_bytes": end,
        "rss_growth_fraction": (end - warm) / warm,
        "rss_agent_steps": done,
        "rss_seconds": wall,
    }


def reference_env():
    """(name, parallel env) of the stock PettingZoo reference: MPE simple_spread from ``mpe2``
    (3 agents, discrete actions), or PettingZoo's bundled rock-paper-scissors when ``mpe2`` is
    not installed."""
    try:
        from mpe2 import simple_spread_v3  # the bench extra: optional
    except ImportError:
        try:
            # needs pygame (the bench extra brings it); rps_v2 without its warning
            from pettingzoo.classic.rps.rps import parallel_env as rps_parallel_env
        except ImportError:
            require("mpe2", "bench", "fleet-marl bench's reference env")  # neither reference env: say which extra
            raise
        return "pettingzoo.classic.rps_v2", rps_parallel_env()
    return "mpe2.simple_spread_v3", simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)


def reference_rate(steps: int, repeats: int) -> tuple[str, StepTiming]:
    name, env = reference_env()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for a in env.possible_agents:
        env.action_space(a).seed(int(rng.integers(1 << 31)))
    pool = [{a: env.action_space(a).sample() for a in env.possible_agents} for _ in range(64)]
    return name, time_steps(env, pool, steps, repeats)


# --- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    steps: dict  # tenants -> timed steps per repeat
    repeats: int
    kernel_min_time: float  # seconds per repeat of a kernel measurement
    shapley_steps: int
    rss_agent_steps: int
    reference_steps: int
    vector_steps: int  # vector-env steps per repeat


FULL = Plan(
    steps={4: 400, 16: 300, 64: 100},
    repeats=5,
    kernel_min_time=0.25,
    shapley_steps=40,
    rss_agent_steps=RSS_AGENT_STEPS,
    reference_steps=2000,
    vector_steps=40,
)
QUICK = Plan(
    steps={4: 60, 16: 40, 64: 12},
    repeats=3,
    kernel_min_time=0.03,
    shapley_steps=5,
    rss_agent_steps=RSS_AGENT_STEPS // 100,
    reference_steps=300,
    vector_steps=4,
)


def measure(quick: bool = False, cpu: int | None = None, progress: bool = True) -> dict:
    """Run every measurement and return the report (a flat dict; see docs/benchmarks.md)."""
    plan = QUICK if quick else FULL
    pinned = pin_to_one_core(cpu)
    t_start = time.perf_counter()
    r: dict = {"quick": quick, "cpu": pinned, "repeats": plan.repeats}
    jobs: list[tuple[str, Callable[[], None]]] = []

    for n in ENV_SIZES:
        for scheme in SCHEMES:

            def job(n=n, scheme=scheme):
                t = env_step(n, scheme, plan.steps[n], plan.repeats)
                r[f"env_step_us_n{n}_{scheme}"] = t.us_per_step
                r[f"agent_steps_per_s_n{n}_{scheme}"] = t.agent_steps_per_s

            jobs.append((f"env N={n} {scheme}", job))

    for b in KERNEL_BATCHES:

        def kjob(b=b):
            r[f"kernel_evals_per_s_n{KERNEL_N}_b{b}"] = kernel_rate(b, plan.repeats, plan.kernel_min_time)

        jobs.append((f"kernel batch {b}", kjob))

    def single():
        r[f"kernel_eval_us_n{KERNEL_N}_b1"] = kernel_single_us(plan.repeats, plan.kernel_min_time)

    jobs.append(("one kernel evaluation", single))

    def shapley():
        t = env_step(SHAPLEY_N, "shapley", plan.shapley_steps, plan.repeats)
        base = env_step(SHAPLEY_N, "local", plan.steps[16], plan.repeats)
        r[f"shapley_step_us_n{SHAPLEY_N}"] = t.us_per_step
        r[f"env_step_us_n{SHAPLEY_N}_local"] = base.us_per_step
        r[f"shapley_overhead_ratio_n{SHAPLEY_N}"] = t.us_per_step / base.us_per_step

    jobs.append((f"exact Shapley N={SHAPLEY_N}", shapley))

    def reference():
        name, t = reference_rate(plan.reference_steps, plan.repeats)
        r["reference_env"] = name
        r["reference_step_us"] = t.us_per_step
        r["reference_agent_steps_per_s"] = t.agent_steps_per_s

    jobs.append(("reference env", reference))
    for scheme in SCHEMES:

        def vjob(scheme=scheme):
            ms, rate = vector_timing(scheme, plan.vector_steps, plan.repeats)
            r[f"vector_step_ms_n{KERNEL_N}_b{VECTOR_B}_{scheme}"] = ms
            r[f"vector_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}_{scheme}"] = rate

        jobs.append((f"vector env B={VECTOR_B} {scheme}", vjob))
    jobs.append(("memory (long run)", lambda: r.update(rss_run(plan.rss_agent_steps))))

    bar = tqdm(jobs, desc="fleet-marl bench", unit="part", file=sys.stderr, disable=not progress)
    for label, job in bar:
        bar.set_postfix_str(label)
        job()
    bar.close()

    r["difference_overhead_ratio"] = r["env_step_us_n16_difference"] / r["env_step_us_n16_local"]
    r["agent_steps_ratio_vs_reference"] = r["agent_steps_per_s_n16_difference"] / r["reference_agent_steps_per_s"]
    r["targets"] = targets(r)
    r["seconds"] = time.perf_counter() - t_start
    r["machine"] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }
    return r


#: The training target of the "Every client works, and training is fast" issue (``--train``).
TRAIN_TARGETS = {"train_agent_steps_per_s_easy": (50_000.0, "min")}


def train_throughput(quick: bool = False, progress: bool = True) -> dict:
    """End-to-end training throughput of ``fleet-marl train`` (the torchrl engine, its default
    config: ``make train``) on ``easy``: env, inference and learning, wall time per iteration
    on the cores this process may use (the target is for the 2-core machine; the default
    config collects in a worker process while this one learns), the first iterations
    (warm-up, compilation, the worker's start) left out; plus where the learner's time goes
    (waiting for the batch vs learning on it)."""
    require(("torch", "torchrl", "tensordict"), "torchrl", "fleet-marl bench --train")
    import torch  # torch: only for --train

    from fleet_marl.torchrl.train import TorchRLTrainConfig, train  # torch: only for --train

    iterations, warmup = (4, 2) if quick else (24, 4)
    with tempfile.TemporaryDirectory() as tmp:
        tc = TorchRLTrainConfig(
            iterations=iterations + warmup, max_minutes=0, eval_interval=0, final_episodes=0, checkpoint_interval=0, out=tmp
        )
        res = train(tc, progress=progress)
    rows = res.rows[warmup:]
    n = len(tc.signature()["possible_agents"])
    frames = tc.num_envs * tc.rollout * n
    wall = float(rows[-1]["time_s"]) - float(res.rows[warmup - 1]["time_s"])
    collect = sum(float(x["collect_s"]) for x in rows)
    learn = sum(float(x["learn_s"]) for x in rows)
    r = {
        "train_task": tc.task,
        "train_num_envs": tc.num_envs,
        "train_rollout": tc.rollout,
        "train_epochs": tc.epochs,
        "train_minibatch": tc.minibatch,
        "train_hidden": list(tc.hidden),
        "train_iterations_timed": len(rows),
        "train_threads": tc.threads or torch.get_num_threads(),
        "train_collector": tc.collector,
        "train_agent_steps_per_s_easy": frames * len(rows) / wall,
        "train_wait_share": collect / (collect + learn),
        "train_learn_agent_steps_per_s": frames * len(rows) / learn,
    }
    r["targets"] = {k: _target(r[k], *TRAIN_TARGETS[k]) for k in TRAIN_TARGETS}
    return r


def format_train_table(r: dict) -> str:
    where = (
        "a worker process collects the next batch while the learner learns" if r["train_collector"] == "async" else "collect, then learn"
    )
    lines = [
        f"fleet-marl bench --train: {r['train_task']}, {r['train_num_envs']} clusters x {r['train_rollout']} steps per iteration, "
        f"{r['train_epochs']} epochs, {r['train_threads']} torch thread(s), {r['train_collector']} collector ({where}); "
        f"{r['train_iterations_timed']} iterations timed",
        "",
    ]
    lines.append(
        f"end-to-end training      {r['train_agent_steps_per_s_easy']:>12,.0f} agent-steps/s (wall time: env, inference, learning)"
    )
    lines.append(f"  learning alone         {r['train_learn_agent_steps_per_s']:>12,.0f} agent-steps/s (GAE + PPO epochs)")
    lines.append(f"  waiting for the batch  {r['train_wait_share']:>12.0%} of the learner's time")
    for key, t in r["targets"].items():
        lines.append(f"\n{key}: {t['measured']:,.0f} >= {t['target']:,.0f}: {'met' if t['met'] else 'NOT met'} (ratio {t['ratio']:.2f})")
    return "\n".join(lines)


def _target(v: float, target: float, kind: str) -> dict:
    return {"measured": v, "target": target, "kind": kind, "ratio": v / target, "met": bool(v >= target if kind == "min" else v <= target)}


def targets(r: dict) -> dict:
    """Each target of the issue: the measured figure, the target, the ratio measured / target,
    and whether it is met."""
    out = {}
    for key, (target, kind) in TARGETS.items():
        v = r[key]
        out[key] = {
            "measured": v,
            "target": target,
            "kind": kind,
            "ratio": v / target,
            "met": bool(v >= target if kind == "min" else v <= target),
        }
    return out


def format_table(r: dict) -> str:
    lines = [f"fleet-marl bench: pinned to CPU {r['cpu']}, medians of {r['repeats']} repeats{' (quick)' if r['quick'] else ''}", ""]
    lines.append(f"{'env step':<28}{'us/step':>10}{'agent-steps/s':>16}")
    for n in ENV_SIZES:
        for s in SCHEMES:
            lines.append(f"{f'  N={n:<3} {s}':<28}{r[f'env_step_us_n{n}_{s}']:>10,.0f}{r[f'agent_steps_per_s_n{n}_{s}']:>16,.0f}")
    lines.append(f"{'  reference ' + r['reference_env']:<28}{r['reference_step_us']:>10,.0f}{r['reference_agent_steps_per_s']:>16,.0f}")
    lines.append("")
    lines.append(f"{f'vector env, N=16, B={VECTOR_B}':<28}{'ms/step':>10}{'agent-steps/s':>16}")
    for s in SCHEMES:
        lines.append(
            f"{f'  {s}':<28}{r[f'vector_step_ms_n{KERNEL_N}_b{VECTOR_B}_{s}']:>10,.1f}{r[f'vector_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}_{s}']:>16,.0f}"
        )
    lines.append("")
    lines.append(f"{'one kernel evaluation, N=16':<28}{r[f'kernel_eval_us_n{KERNEL_N}_b1']:>10,.1f} us")
    lines.append(f"{'batched kernel, N=16':<28}{'evals/s':>10}")
    for b in KERNEL_BATCHES:
        lines.append(f"{f'  batch {b}':<28}{r[f'kernel_evals_per_s_n{KERNEL_N}_b{b}']:>10,.0f}")
    lines.append("")
    lines.append(f"difference overhead (N=16):     {r['difference_overhead_ratio']:.2f}x a local step")
    lines.append(
        f"exact Shapley (N={SHAPLEY_N}, {2**SHAPLEY_N} rows): {r[f'shapley_step_us_n{SHAPLEY_N}']:,.0f} us/step, {r[f'shapley_overhead_ratio_n{SHAPLEY_N}']:.1f}x a local step"
    )
    lines.append(f"ours / reference agent-steps:   {r['agent_steps_ratio_vs_reference']:.1f}x")
    lines.append(
        f"RSS over {r['rss_agent_steps']:,} vector agent-steps: {r['rss_start_bytes'] / 2**20:,.1f} -> {r['rss_end_bytes'] / 2**20:,.1f} MiB ({r['rss_growth_fraction']:+.2%})"
    )
    lines.append("")
    lines.append(f"{'target':<34}{'measured':>14}{'target':>12}{'ratio':>8}  met")
    for key, t in r["targets"].items():
        sign = ">=" if t["kind"] == "min" else "<="
        lines.append(f"{key:<34}{t['measured']:>14,.3g}{sign:>4}{t['target']:>8,.3g}{t['ratio']:>8.2f}  {'yes' if t['met'] else 'NO'}")
    lines.append(f"\n{r['seconds']:.0f} s in all")
    return "\n".join(lines)


# --- the command ---------------------------------------------------------------------------------

EXAMPLES = """examples:
  fleet-marl bench                      # the full run (under 3 minutes): a table on stdout, progress on stderr
  fleet-marl bench --quick --json       # the CI smoke run (under 30 s), one JSON object
  fleet-marl bench --cpu 0 --json > bench.json
  fleet-marl bench --train              # end-to-end training throughput of make train's config (about 1 min)

Every key of the JSON report is documented in docs/benchmarks.md.
"""
DESCRIPTION = (
    "Measure env steps (N = 4, 16, 64; local and difference rewards), the vector env (N = 16, B = 256), the batched "
    "kernel (N = 16, batch 1 to 16384), the difference and exact-Shapley overheads, RSS over a long vector-env run and a "
    "stock PettingZoo env, on one pinned core; "
    "medians over repeats, actions pre-sampled."
)


def add_arguments(b: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl bench``."""
    b.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    b.add_argument("--quick", action="store_true", help="fewer steps and repeats (under 30 s; the CI smoke test)")
    b.add_argument("--cpu", type=int, default=None, help="core to pin to (default: the last core this process may use)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.add_argument(
        "--train", action="store_true", help="measure end-to-end training throughput instead (the torchrl engine on easy, every core)"
    )


def run(args) -> int:
    """Run ``fleet-marl bench`` with parsed ``args``; print the report; return the exit code."""
    if args.train:
        r = train_throughput(quick=args.quick, progress=not args.no_progress)
        print(json.dumps(r, indent=2) if args.json else format_train_table(r))
        return 0
    try:
        r = measure(quick=args.quick, cpu=args.cpu, progress=not args.no_progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl bench --help' for the options", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2) if args.json else format_table(r))
    return 0


__all__ = [
    "DESCRIPTION",
    "ENV_SIZES",
    "EXAMPLES",
    "KERNEL_BATCHES",
    "TARGETS",
    "add_arguments",
    "bench_config",
    "format_table",
    "measure",
    "run",
    "targets",
    "train_throughput",
]

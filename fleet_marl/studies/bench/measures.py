"""What ``fleet-marl bench`` measures: the scenario family, the sizes it is measured at, and one
function per measurement (env steps, the batched and the single kernel evaluation, the vector
env, RSS over a long run, the stock PettingZoo reference, VMAS, another checkout's kernel).

The scenario family (``bench_config``): N tenants on N/2 H100 nodes (4 GPUs per tenant against
a demand of up to 8, so the arbiter always has contention), alternating trainers and servers
over the models of the ``hard`` task, proportional-share arbiter, budgets and jobs large
enough that no tenant leaves before ``max_cycles`` (so every step has N agents).

>>> cfg = bench_config(4)
>>> len(cfg["tenants"]), len(cfg["cluster"]["gpu_types"])
(4, 2)
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import fleet_marl
from fleet_marl import catalog
from fleet_marl.config import FleetConfig, from_dict
from fleet_marl.environment import parallel_env
from fleet_marl.errors import require
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, check_actions, evaluate
from fleet_marl.studies.bench.timing import StepTiming, median_call_time, presample, rss_bytes, time_steps
from fleet_marl.tasks import TASKS

_H100 = "h100-sxm"
#: Trainers (model, sequence length, activation checkpointing) and servers, as in the hard task.
_TRAINERS = (("gpt2", 1024, False), ("qwen2.5-0.5b", 2048, False), ("qwen2.5-7b", 2048, True), ("llama-3.1-8b", 2048, True))
_SERVERS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b")

#: Tenants of the env-step measurements, and their reward schemes.
ENV_SIZES = (4, 16, 64)
SCHEMES = ("local", "difference")
KERNEL_BATCHES = (1, 64, 1024, 16384)
KERNEL_N = 16
SHAPLEY_N = 8
#: Vector-env agent-steps of the memory run (10^7; --quick runs a hundredth).
RSS_AGENT_STEPS = 10_000_000
#: Clusters of the vector-env measurements.
VECTOR_B = 256
#: The tasks whose envs are measured as the README builds them (``readme_timing``), and the
#: clusters of its vector env: ``parallel_env(task="easy", reward_scheme="difference")`` and
#: ``vector_env(num_envs=64, task="easy", reward_scheme="difference")``, every other option at
#: its default.
README_TASKS = tuple(TASKS)
README_VECTOR_B = 64
#: Tenants of the sampled-Shapley measurement: the ``hard`` task (``shapley_samples`` permutations
#: at its default, 64).
SAMPLED_SHAPLEY_TASK = "hard"


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


def coupled_bench_config(n: int, max_cycles: int = 100, couplings: bool = True) -> dict:
    """:func:`bench_config` with every coupling mechanism on (``config.CouplingSpec``) over a
    topology where each can act: the same GPUs on nodes of 4 (a grant of 5 to 8 spans two), one
    leaf per node behind 4:1 uplinks, 50 GB/s of shared storage, a checkpoint every 10 minutes
    of each trainer's training, tensor-parallel degree 2. ``couplings=False``: the same nodes
    and racks only, in keys an engine without the couplings reads (the round it is compared with)."""
    cfg = bench_config(n, max_cycles)
    types = cfg["cluster"]["gpu_types"]
    cfg["cluster"].update(gpu_types=types * 2, gpus_per_node=4, nodes_per_rack=1)
    if not couplings:
        return cfg
    cfg["cluster"].update(uplink_oversubscription=4.0, storage_gbs=50.0)
    for t in cfg["tenants"]:
        if t["kind"] == "train":
            t["workload"]["checkpoint_interval_s"] = 600.0
            t["tensor_parallel"] = 2
    cfg["coupling"] = {"contention": True, "queueing": True, "persistent_placement": True, "gang": True}
    return cfg


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


def kernel_rate(batch: int, repeats: int, min_time: float, coupled: bool = False) -> float:
    """Evaluations (rows) per second of ``evaluate`` at N = 16 for ``batch`` rows, inputs checked
    once; ``coupled``: on :func:`coupled_bench_config`, every coupling mechanism on (the state
    carries a placement, none held yet)."""
    st = KernelStatic.from_config(from_dict(FleetConfig, (coupled_bench_config if coupled else bench_config)(KERNEL_N)))
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
    pool = _vector_pool(venv)
    venv.step(pool[0])  # warm-up
    dt = statistics.median(_vector_step_s(venv, pool, steps) for _ in range(repeats))
    return dt * 1e3, VECTOR_B * KERNEL_N / dt


def _vector_pool(venv, n: int = 8) -> list:
    _, infos = venv.reset(seed=0)
    rng = np.random.default_rng(3)
    return [venv.sample_actions(infos, rng) for _ in range(n)]


def _vector_step_s(venv, pool: list, steps: int) -> float:
    t0 = time.perf_counter()
    for k in range(steps):
        venv.step(pool[k % len(pool)])
    return (time.perf_counter() - t0) / steps


def readme_timing(task: str, form: str, steps: int, repeats: int) -> tuple[float, float]:
    """(us per step of ``task``'s env built as the README builds it, us per step of the same env
    built as the bench builds its envs, ``compute_all=False``): ``form`` ``"parallel"``
    (``parallel_env(task=..., reward_scheme="difference")``) or ``"vector"`` (``vector_env(num_envs=
    README_VECTOR_B, ...)``), pre-sampled actions, the repeats of the two builds interleaved so
    that a slow spell of the machine falls on both."""
    if form == "parallel":
        envs = [parallel_env(task=task, reward_scheme="difference", **kw) for kw in ({}, {"compute_all": False})]
        pools = []
        for env in envs:
            env.reset(seed=0)
            pools.append(presample(env, np.random.default_rng(7)))
        times: list[list[float]] = [[], []]
        for _ in range(repeats):
            for i, env in enumerate(envs):
                times[i].append(time_steps(env, pools[i], steps, 1).us_per_step)
        return statistics.median(times[0]), statistics.median(times[1])
    venvs = [
        fleet_marl.vector_env(num_envs=README_VECTOR_B, task=task, reward_scheme="difference", **kw) for kw in ({}, {"compute_all": False})
    ]
    vpools = [_vector_pool(v) for v in venvs]
    for v, pool in zip(venvs, vpools, strict=True):
        v.step(pool[0])  # warm-up
    vtimes: list[list[float]] = [[], []]
    for _ in range(repeats):
        for i, v in enumerate(venvs):
            vtimes[i].append(_vector_step_s(v, vpools[i], steps) * 1e6)
    return statistics.median(vtimes[0]), statistics.median(vtimes[1])


def sampled_shapley_timing(steps: int, repeats: int) -> tuple[float, float]:
    """(us per step with ``shapley`` rewards, us per step with ``local``) of the
    :data:`SAMPLED_SHAPLEY_TASK` env, ``compute_all=False``: sampled Shapley, 64 permutations."""
    out = []
    for scheme in ("shapley", "local"):
        env = parallel_env(task=SAMPLED_SHAPLEY_TASK, reward_scheme=scheme, compute_all=False)
        env.reset(seed=0)
        out.append(time_steps(env, presample(env, np.random.default_rng(5)), steps, repeats).us_per_step)
    return out[0], out[1]


def rss_run(agent_steps: int) -> dict:
    """Step the N = 16, B = ``VECTOR_B`` vector env (``local`` rewards, automatic resets) for
    ``agent_steps`` agent-steps; RSS after the first tenth (warm) and at the end."""
    venv = fleet_marl.vector_env(num_envs=VECTOR_B, config=bench_config(KERNEL_N), reward_scheme="local", compute_all=False)
    _, infos = venv.reset(seed=0)
    rng = np.random.default_rng(7)
    pool = [venv.sample_actions(infos, rng) for _ in range(8)]
    per_step = VECTOR_B * KERNEL_N
    done, k = 0, 0
    warm: int | None = None
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
    if warm is None:  # the loop never ran (for agent_steps >= 1 it takes the warm RSS by the first tenth)
        raise ValueError(f"agent_steps = {agent_steps}: expected >= 1")
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


def vmas_timing(steps: int, repeats: int) -> tuple[float, float] | None:
    """(ms per step, agent-steps/s) of VMAS's ``simple_spread`` (the vectorized peer of the vector
    env): N = ``KERNEL_N`` agents, ``VECTOR_B`` environments stepped as one batch of
    torch tensors on the CPU with one torch thread, discrete actions drawn beforehand, no resets
    (VMAS resets only when asked); None when ``vmas`` is not installed (the bench extra)."""
    try:
        import torch  # the bench extra: optional
        import vmas  # the bench extra: optional
    except ImportError:
        return None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        env = vmas.make_env("simple_spread", num_envs=VECTOR_B, device="cpu", continuous_actions=False, n_agents=KERNEL_N, seed=0)
        env.reset()
        g = torch.Generator().manual_seed(0)
        pool = [[torch.randint(0, int(space.n), (VECTOR_B,), generator=g) for space in env.action_space] for _ in range(8)]
        env.step(pool[0])  # warm-up
        dt = statistics.median(_vector_step_s(env, pool, steps) for _ in range(repeats))
    finally:
        torch.set_num_threads(threads)
    return dt * 1e3, VECTOR_B * KERNEL_N / dt


#: Where a checkout of the engine keeps ``kernel_rate``: this layout's module, then the one
#: before the bench became a package (:data:`~fleet_marl.studies.bench.targets.KERNEL_BEFORE_COMMIT`'s).
MEASURES_MODULES = ("fleet_marl.studies.bench.measures", "fleet_marl.studies.bench_measures")


def _measures_module(checkout: Path) -> str | None:
    """The first of :data:`MEASURES_MODULES` that ``checkout`` holds, or None."""
    return next((m for m in MEASURES_MODULES if (checkout / f"{m.replace('.', '/')}.py").is_file()), None)


def kernel_before_rates(before: str, cpu: int | None, repeats: int, min_time: float, rounds: int = 3) -> tuple[float, float, float, float]:
    """(this kernel's, ``before``'s kernel's) evaluations/s at N = ``KERNEL_N``, batch 1024, then
    (``before``'s on the coupled scenario's nodes, this kernel's with every coupling on there,
    :func:`coupled_bench_config`): each
    checkout's own ``kernel_rate`` in a fresh subprocess pinned to the same core (``before`` is a
    folder holding its ``fleet_marl`` package, e.g. a ``git worktree`` of
    :data:`~fleet_marl.studies.bench.targets.KERNEL_BEFORE_COMMIT`; its ``kernel_rate`` is read from
    the first of :data:`MEASURES_MODULES` it holds), ``rounds`` times each, interleaved; the best of
    each. Both run in fresh processes because the figure depends on the process's allocator state: the outputs of
    a 1024-row call are fresh multi-megabyte arrays, and what the process allocated and freed
    before (importing torch, for one) decides whether they come with page faults."""
    root = Path(before).resolve()
    if _measures_module(root) is None:
        where = " or ".join(f"{m.replace('.', '/')}.py" for m in MEASURES_MODULES)
        raise ValueError(f"--kernel-before {before!r}: no {where} there; expected a checkout of the engine")

    def rate(checkout: Path, config: dict | None = None) -> float:
        pin = f"os.sched_setaffinity(0, {{{cpu}}}); " if cpu is not None else ""
        module = _measures_module(checkout)
        if config is None:  # the checkout's own measurement, whatever its scenario
            call = f"from {module} import kernel_rate; print(json.dumps(kernel_rate(1024, {repeats}, {min_time})))"
        else:  # ``config`` on the checkout's kernel, by the public API every engine has
            call = (
                "import numpy as np; from fleet_marl.config import FleetConfig, from_dict; "
                "from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate; "
                f"from {module} import kernel_actions, median_call_time; "
                f"st = KernelStatic.from_config(from_dict(FleetConfig, json.loads({json.dumps(json.dumps(config))}))); "
                "acts = kernel_actions(st, np.random.default_rng(1024), 1024); s, d = RoundState.initial(st), Draws.expected(st); "
                f"print(json.dumps(1024 / median_call_time(lambda: evaluate(st, acts, s, d, validate=False), {repeats}, {min_time})))"
            )
        code = "import json, os; " + pin + call
        env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=checkout, timeout=1800, check=False)
        if out.returncode != 0:
            raise ValueError(f"--kernel-before: kernel_rate of {checkout} failed:\n{out.stderr[-2000:]}")
        return float(out.stdout.strip().splitlines()[-1])

    here = Path(fleet_marl.__file__).resolve().parents[1]
    ours, theirs, theirs_nodes, coupled = [], [], [], []
    for _ in range(rounds):
        ours.append(rate(here))
        theirs.append(rate(root))
        theirs_nodes.append(rate(root, coupled_bench_config(KERNEL_N, couplings=False)))
        coupled.append(rate(here, coupled_bench_config(KERNEL_N)))
    return max(ours), max(theirs), max(theirs_nodes), max(coupled)


def reference_rate(steps: int, repeats: int) -> tuple[str, StepTiming]:
    name, env = reference_env()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for a in env.possible_agents:
        env.action_space(a).seed(int(rng.integers(1 << 31)))
    pool = [{a: env.action_space(a).sample() for a in env.possible_agents} for _ in range(64)]
    return name, time_steps(env, pool, steps, repeats)


__all__ = [
    "ENV_SIZES",
    "KERNEL_BATCHES",
    "KERNEL_N",
    "MEASURES_MODULES",
    "README_TASKS",
    "README_VECTOR_B",
    "RSS_AGENT_STEPS",
    "SAMPLED_SHAPLEY_TASK",
    "SCHEMES",
    "SHAPLEY_N",
    "VECTOR_B",
    "bench_config",
    "coupled_bench_config",
    "env_step",
    "kernel_actions",
    "kernel_before_rates",
    "kernel_rate",
    "kernel_single_us",
    "make_env",
    "readme_timing",
    "reference_env",
    "reference_rate",
    "rss_run",
    "sampled_shapley_timing",
    "vector_timing",
    "vmas_timing",
]

"""How fast the outside clients step the env: the array-speed adapters against the
PettingZoo routes they replace, measured in one process (pin it: ``taskset -c 1``).

=========================  ======================================================================
``vector_env``             :class:`~fleet_marl.environment.vector.FleetVectorEnv` alone, for scale
``sb3_supersuit``          SB3 ``VecEnv`` through SuperSuit (``black_death_v3``,
                           ``pettingzoo_env_to_vec_env_v1``, ``concat_vec_envs_v1``) over the
                           ParallelEnv: ``venv.step`` of one slot per tenant
``sb3_vecenv``             :class:`fleet_marl.clients.sb3.FleetSB3VecEnv` over B clusters (``step``: the
                           slots' infos with their masks included)
``pufferlib_emulation``    PufferLib's ``PettingZooPufferEnv`` over the ParallelEnv (``step``, and
                           its reset when the episode ends)
``pufferlib_native``       :class:`fleet_marl.clients.pufferlib.FleetPufferEnv` over B clusters, through
                           ``pufferlib.vector.make`` (native), writing into PufferLib's buffers
``torchrl_wrapper``        TorchRL's ``PettingZooWrapper`` (``use_mask=True, done_on_any=False``)
                           over the ParallelEnv (``mask_layout="flat"``): ``step_and_maybe_reset``
``torchrl_native``         :class:`fleet_marl.torchrl.FleetTorchEnv` over B clusters, the same call
``torchrl_serial``         TorchRL's ``SerialEnv`` of two ``FleetTorchEnv`` of B/2 clusters each
``torchrl_parallel``       TorchRL's ``ParallelEnv`` of two ``FleetTorchEnv`` of B/2 clusters (two
                           worker processes, on the same pinned core)
``rllib_env``              RLlib: :class:`fleet_marl.rllib.FleetRLlibEnv` (one cluster, agent dicts)
``rllib_vector``           RLlib: :class:`fleet_marl.rllib.vector.FleetVectorMultiAgentEnv` over B
                           clusters, its ``VectorMultiAgentEnv`` step (one agent dict per cluster)
=========================  ======================================================================

RLlib's training end to end, before and after (``fleet-marl train --engine rllib``), is
:mod:`fleet_marl.studies.bench.clients`'s; so is the command's report.

Each rate is agent-steps per second (slots stepped: a tenant that left its episode still fills
its slot, on both sides), the median over ``repeats`` runs of ``steps`` calls; only the step
call is timed, with actions drawn from the masks beforehand (the default ``illegal_action="veto"``
handles a count a budget no longer affords). :func:`measure_clients` returns the rates and the
two ratios of the clients' targets (:data:`TARGETS`); ``fleet-marl bench --clients`` reports them
and ``python -m fleet_marl.studies.bench.routes [--cpu 1]`` prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import fleet_marl
from fleet_marl.environment.vector import sample_masked
from fleet_marl.errors import require
from fleet_marl.studies.bench.targets import CLIENT_TARGETS
from fleet_marl.studies.bench.timing import median_rate, pin_to_one_core

#: The clients' targets: each adapter's rate over the route it replaces.
TARGETS = {k: CLIENT_TARGETS[k][0] for k in ("sb3_vecenv_over_supersuit", "pufferlib_native_over_emulation")}
#: What a missing extra's message says needs it.
WHAT = "the outside clients' bench (fleet-marl bench --clients)"


def _parallel_pool(task: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Joint actions (N, 8) drawn from the masks of the ParallelEnv's first round."""
    env = fleet_marl.parallel_env(task=task, compute_all=False)
    env.reset(seed=0)
    offsets = np.concatenate(([0], np.cumsum(env.nvec.max(0))))
    masks = np.stack([np.concatenate(env.action_mask(a)).astype(bool) for a in env.possible_agents])
    return _pool(masks, offsets, rng)


def _pool(masks: np.ndarray, offsets: np.ndarray, rng: np.random.Generator, n: int = 32) -> list[np.ndarray]:
    return [sample_masked(masks, offsets, rng) for _ in range(n)]


def _pool_rate(env: Any, pool: list, agents: int, steps: int, repeats: int) -> float:
    """``env.step`` with the actions of ``pool`` in turn, each call ``agents`` agent-steps."""

    def step(k: int) -> int:
        env.step(pool[k % len(pool)])
        return agents

    return median_rate(step, steps, repeats)


def sb3_supersuit(task: str, steps: int, repeats: int, rng: np.random.Generator) -> float:
    """SB3 through SuperSuit's chain over one ParallelEnv."""
    import supersuit as ss  # the [test] extra's

    env = fleet_marl.parallel_env(task=task, compute_all=False)
    venv = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(ss.black_death_v3(env)), 1, num_cpus=0, base_class="stable_baselines3")
    venv.reset()
    pool = _parallel_pool(task, rng)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "step\\(\\) called with no live agent")  # black_death's step after the last agent left
        return _pool_rate(venv, pool, venv.num_envs, steps, repeats)


def vector_env(task: str, clusters: int, steps: int, repeats: int, rng: np.random.Generator) -> float:
    """The vector env alone, for scale: what the array adapters wrap."""
    venv = fleet_marl.vector_env(num_envs=clusters, task=task, compute_all=False)
    _, infos = venv.reset(seed=0)
    return _pool_rate(venv, _pool(infos["action_mask"], venv.mask_offsets, rng), clusters * venv.num_agents, steps, repeats)


def sb3_vecenv(task: str, clusters: int, steps: int, repeats: int, rng: np.random.Generator) -> float:
    from fleet_marl.clients.sb3 import FleetSB3VecEnv  # the [sb3] extra's

    venv = FleetSB3VecEnv(num_clusters=clusters, task=task, seed=0)
    venv.reset()
    return _pool_rate(venv, _pool(venv.action_masks(), venv.offsets, rng), venv.num_envs, steps, repeats)


def pufferlib_emulation(task: str, steps: int, repeats: int, rng: np.random.Generator) -> float:
    from pufferlib.emulation import PettingZooPufferEnv  # the [pufferlib] extra's

    env = PettingZooPufferEnv(env=fleet_marl.parallel_env(task=task, compute_all=False))
    env.reset(seed=0)
    pool = _parallel_pool(task, rng)

    def step(k: int) -> int:
        if env.done:
            env.reset()
            return -1
        env.step(pool[k % len(pool)])
        return env.num_agents

    return median_rate(step, steps, repeats)


def pufferlib_native(task: str, clusters: int, steps: int, repeats: int, rng: np.random.Generator) -> float:
    import pufferlib  # the [pufferlib] extra's
    import pufferlib.vector  # the [pufferlib] extra's

    from fleet_marl.clients.pufferlib import FleetPufferEnv  # the [pufferlib] extra's

    env = pufferlib.vector.make(FleetPufferEnv, backend=pufferlib.PufferEnv, env_kwargs={"num_clusters": clusters, "task": task, "seed": 0})
    env.reset()
    return _pool_rate(env, _pool(env.action_masks(), env.offsets, rng), env.num_agents, steps, repeats)


def _torch_actions(pool: list[np.ndarray]) -> list:
    import torch  # the [torchrl] extra's

    return [torch.as_tensor(a) for a in pool]


def _torchrl_rate(env: Any, key: tuple, pool: list, agents: int, steps: int, repeats: int) -> float:
    """``step_and_maybe_reset`` of a TorchRL env with the actions of ``pool`` (tensors shaped like ``key``'s)."""
    td = env.reset()

    def step(k: int) -> int:
        nonlocal td
        td.set(key, pool[k % len(pool)])
        _, td = env.step_and_maybe_reset(td)
        return agents

    try:
        return median_rate(step, steps, repeats)
    finally:
        env.close()


def torchrl_wrapper(task: str, steps: int, repeats: int, rng: np.random.Generator) -> float:
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # the [torchrl] extra's

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PettingZoo in TorchRL is tested")
        env = PettingZooWrapper(fleet_marl.parallel_env(task=task, compute_all=False, mask_layout="flat"), use_mask=True, done_on_any=False)
    pool = _torch_actions(_parallel_pool(task, rng))
    return _torchrl_rate(env, ("tenant", "action"), pool, len(env.group_map["tenant"]), steps, repeats)


def _torch_env(task: str, clusters: int, seed: int):
    from fleet_marl.torchrl import FleetTorchEnv  # the [torchrl] extra's

    return FleetTorchEnv(num_envs=clusters, task=task, seed=seed)


def torchrl_native(task: str, clusters: int, steps: int, repeats: int, rng: np.random.Generator, workers: int = 0) -> float:
    """FleetTorchEnv alone (``workers=0``), or ``workers`` of them of ``clusters / workers``
    each in TorchRL's ``SerialEnv`` (``workers > 0``) or ``ParallelEnv`` (``workers < 0``)."""

    from torchrl.envs import ParallelEnv, SerialEnv  # the [torchrl] extra's

    n = abs(workers)
    if n == 0:
        env = _torch_env(task, clusters, 0)
    else:
        fns = [partial(_torch_env, task, clusters // n, w * (clusters // n)) for w in range(n)]
        env = SerialEnv(n, fns) if workers > 0 else ParallelEnv(n, fns)
    agents = int(np.prod(env.action_spec["agents", "action"].shape[:-1]))
    probe = fleet_marl.vector_env(num_envs=1, task=task)
    _, infos = probe.reset(seed=0)
    shape = tuple(env.action_spec["agents", "action"].shape)
    pool = _torch_actions(
        [
            a.reshape(shape)
            for a in _pool(np.broadcast_to(infos["action_mask"], shape[:-1] + infos["action_mask"].shape[-1:]), probe.mask_offsets, rng)
        ]
    )
    return _torchrl_rate(env, ("agents", "action"), pool, agents, steps, repeats)


def rllib_env(task: str, steps: int, repeats: int, rng: np.random.Generator) -> float:
    from fleet_marl.rllib.env import FleetRLlibEnv  # the [rllib] extra's

    env = FleetRLlibEnv({"task": task})
    env.reset(seed=0)
    pool = [dict(zip(env.possible_agents, a, strict=True)) for a in _parallel_pool(task, rng)]

    def step(k: int) -> int:
        if not env.agents:
            env.reset()
            return -1
        act = pool[k % len(pool)]
        env.step({a: act[a] for a in env.agents})
        return len(act)

    return median_rate(step, steps, repeats)


def rllib_vector(task: str, clusters: int, steps: int, repeats: int, rng: np.random.Generator) -> float:
    from fleet_marl.rllib.vector import FleetVectorMultiAgentEnv  # the [rllib] extra's

    env = FleetVectorMultiAgentEnv({"task": task}, num_envs=clusters)
    obs, _ = env.reset(seed=0)
    joint = [dict(zip(env.possible_agents, a, strict=True)) for a in _parallel_pool(task, rng)]
    done: list[set] = [set() for _ in range(clusters)]

    def step(k: int) -> int:
        nonlocal obs, done
        act = joint[k % len(joint)]
        actions = [{a: act[a] for a in o if a not in d} for o, d in zip(obs, done, strict=True)]
        obs, _, term, trunc, _ = env.step(actions)
        done = [{a for a in o if t.get(a) or u.get(a)} for o, t, u in zip(obs, term, trunc, strict=True)]
        return sum(len(a) for a in actions)

    return median_rate(step, steps, repeats)


def measure_clients(
    task: str = "easy", clusters: int = 256, steps: int = 200, repeats: int = 5, seed: int = 0, progress: bool = False
) -> dict[str, Any]:
    """Every rate (agent-steps/s) and the ratios of :data:`TARGETS`: the array adapters take
    ``steps`` calls of ``clusters`` clusters each, the PettingZoo routes ``5 * steps`` calls of
    one cluster (each side runs for a comparable time)."""
    require("stable_baselines3", "sb3", WHAT)
    require("supersuit", "test", WHAT)  # the route SB3's VecEnv is measured against
    require(("torch", "torchrl", "tensordict"), "torchrl", WHAT)
    require("ray.rllib", "rllib", WHAT)
    import fleet_marl.clients.pufferlib  # noqa: F401 (its import checks the [pufferlib] extra and pufferlib-core)

    rng = np.random.default_rng(seed)
    slow_steps = 5 * steps
    jobs: dict[str, Callable[[], float]] = {
        "vector_env": lambda: vector_env(task, clusters, steps, repeats, rng),
        "sb3_supersuit": lambda: sb3_supersuit(task, slow_steps, repeats, rng),
        "sb3_vecenv": lambda: sb3_vecenv(task, clusters, steps, repeats, rng),
        "pufferlib_emulation": lambda: pufferlib_emulation(task, slow_steps, repeats, rng),
        "pufferlib_native": lambda: pufferlib_native(task, clusters, steps, repeats, rng),
        "torchrl_wrapper": lambda: torchrl_wrapper(task, slow_steps, repeats, rng),
        "torchrl_native": lambda: torchrl_native(task, clusters, steps, repeats, rng),
        "torchrl_serial": lambda: torchrl_native(task, clusters, steps, repeats, rng, workers=2),
        "torchrl_parallel": lambda: torchrl_native(task, clusters, steps, repeats, rng, workers=-2),
        "rllib_env": lambda: rllib_env(task, slow_steps, repeats, rng),
        "rllib_vector": lambda: rllib_vector(task, clusters, steps, repeats, rng),
    }
    rates = {}
    for name, job in jobs.items():
        rates[name] = job()
        if progress:
            print(f"{name}: {rates[name]:,.0f} agent-steps/s", file=sys.stderr, flush=True)
    ratios = {
        "sb3_vecenv_over_supersuit": rates["sb3_vecenv"] / rates["sb3_supersuit"],
        "pufferlib_native_over_emulation": rates["pufferlib_native"] / rates["pufferlib_emulation"],
    }
    return {
        "task": task,
        "clusters": clusters,
        "steps": steps,
        "repeats": repeats,
        "agent_steps_per_s": rates,
        "ratios": ratios,
        "targets": TARGETS,
        "met": {k: ratios[k] >= TARGETS[k] for k in TARGETS},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m fleet_marl.studies.bench.routes", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="easy")
    p.add_argument("--clusters", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cpu", type=int, default=None, help="pin to this core (default: leave the affinity as it is, e.g. taskset's)")
    args = p.parse_args(argv)
    if args.cpu is not None:
        pin_to_one_core(args.cpu)
    report = measure_clients(args.task, args.clusters, args.steps, args.repeats, progress=True)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()

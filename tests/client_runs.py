"""One rollout per outside client (the cells of the client matrix, ``tests/client_harness.py``).

Each function builds its client on the scenario ``opts`` (``task``, ``obs_mode``,
``mask_layout``, ``max_cycles``, ``illegal_action="raise"``: a masked choice is an
``ActionError``, so a client that carries a wrong mask fails) and steps it with random actions
drawn from the masks the client hands out, until ``ends`` episodes have ended (counted as the
client reports them) or ``limit`` steps. It returns a :class:`Rollout`. Where a client hands
out no mask (PufferLib's vector API over the PettingZoo emulation, observation ``"flat"``; its
emulation of a ``"dict"`` observation, which flattens the mask into it), the actions come from
the ParallelEnvs' own masks.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import fleet_marl
from fleet_marl.environment import N_ACT


@dataclass
class Rollout:
    steps: int  # client steps taken
    ends: int  # episode ends the client reported
    agent_steps: int  # actions sent for agents in their episodes (or slots, for the vector clients)
    rewards_finite: bool  # every reward the client returned was finite


def sample(mask, sizes, rng: np.random.Generator) -> np.ndarray:
    """(8,) indices allowed by one agent's ``mask``: a tuple of 8 arrays, a flat vector laid out
    by ``sizes``, or None (the all-zero action: 0 GPUs, the lowest bid, FP32, batch 1, which every
    mask allows)."""
    if mask is None:
        return np.zeros(N_ACT, np.int64)
    if not isinstance(mask, (tuple, list)):
        mask = np.split(np.asarray(mask).astype(bool).ravel(), np.cumsum(sizes)[:-1])
    return np.array([rng.choice(np.flatnonzero(np.asarray(m).astype(bool))) for m in mask], np.int64)


def sample_rows(masks: np.ndarray, sizes, rng: np.random.Generator) -> np.ndarray:
    """(R, 8) one action per row of flat masks (R, M)."""
    return np.stack([sample(m, sizes, rng) for m in masks])


def _mask(obs, info: dict):
    """An agent's mask as a ParallelEnv hands it out: in its observation (``obs_mode="dict"``) or
    its infos (``"flat"``)."""
    return obs["action_mask"] if isinstance(obs, dict) else info["action_mask"]


def _parallel(opts: dict):
    return fleet_marl.parallel_env(**opts)


def _sizes(opts: dict) -> np.ndarray:
    return _parallel(opts).nvec.max(0)


# --- over the ParallelEnv ------------------------------------------------------------------------


def sb3_supersuit(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """SuperSuit's chain to an SB3 VecEnv (black_death, pettingzoo_env_to_vec_env, concat)."""
    import supersuit as ss  # the [test] extra's

    env = _parallel(opts)
    sizes, n = env.nvec.max(0), len(env.possible_agents)
    venv = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(ss.black_death_v3(env)), 1, num_cpus=0, base_class="stable_baselines3")
    venv.reset()
    infos: list[dict] = [{} for _ in range(n)]
    r = Rollout(0, 0, 0, True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "step\\(\\) called with no live agent")  # black_death's extra step
        while r.ends < ends and r.steps < limit:
            acts = np.stack([sample(i.get("action_mask"), sizes, rng) for i in infos])
            _, rew, dones, infos = venv.step(acts)
            r.steps, r.agent_steps = r.steps + 1, r.agent_steps + sum("action_mask" in i for i in infos)
            r.rewards_finite &= bool(np.isfinite(rew).all())
            r.ends += int(dones.all())
    venv.close()
    return r


#: The PettingZoo forms TorchRL's ``PettingZooWrapper`` takes: the ParallelEnv, and the AEC env of
#: either protocol (``fleet_marl.env(protocol=...)``), which the wrapper plays a turn per step.
FORMS = ("parallel", "simultaneous", "sequential")


def _pettingzoo(opts: dict, form: str):
    return _parallel(opts) if form == "parallel" else fleet_marl.env(protocol=form, **opts)


def masked_choices(action, mask, nvec) -> np.ndarray:
    """(..., n) True where an agent's action (..., n, 8) takes a choice its flat mask (..., n,
    sum(nvec)) forbids; ``nvec`` (n, 8) the agents' action sizes."""
    action, mask = np.asarray(action), np.asarray(mask).astype(bool)
    offsets = np.concatenate([np.zeros((len(nvec), 1), np.int64), np.cumsum(nvec, 1)[:, :-1]], 1)  # (n, 8)
    return ~np.take_along_axis(mask, action + offsets, -1).all(-1)


def torchrl_wrapper(opts: dict, ends: int, limit: int, rng: np.random.Generator, form: str = "parallel", use_mask: bool = False) -> Rollout:
    """TorchRL's ``PettingZooWrapper`` over ``form`` (``FORMS``): the ParallelEnv by default or with
    ``use_mask=True, done_on_any=False``, an AEC form with ``use_mask=True`` (TorchRL requires it).
    ``check_env_specs``, then a rollout whose actions are TorchRL's own masked draws (no policy:
    ``env.rand_action``, from the action spec the wrapper masks with each ``(group, "action_mask")``);
    every action an acting agent took is checked against that mask here, and by the env, which
    raises on a masked choice. The rollout is as long as ``ends`` episodes can be (at most ``limit``
    rounds; an AEC form takes a turn per step, so that many rounds of turns)."""
    import torch  # the [torchrl] extra's
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # the [torchrl] extra's
    from torchrl.envs.utils import check_env_specs  # the [torchrl] extra's

    use_mask = use_mask or form != "parallel"
    pz = _pettingzoo(opts, form)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PettingZoo in TorchRL is tested using version")
        env = PettingZooWrapper(pz, use_mask=use_mask, done_on_any=False if use_mask else None, seed=0)
    check_env_specs(env)
    nvec, index = pz.unwrapped.nvec, pz.unwrapped.agent_index
    per_step = 1 if form == "parallel" else len(pz.possible_agents)  # an AEC round is a turn per live agent, and a step per finished one
    td = env.rollout(min(limit, ends * (opts["max_cycles"] + 1)) * per_step, break_when_any_done=False)
    done = td["next", "done"].reshape(td.shape[0], -1).any(-1)
    cut = int(np.flatnonzero(done.numpy())[ends - 1]) + 1 if int(done.sum()) >= ends else td.shape[0]
    td = td[:cut]
    r = Rollout(cut, int(done[:cut].sum()), 0, True)
    for group, agents in env.group_map.items():
        acting = td[group, "mask"].numpy() if use_mask else np.ones(td[group, "action"].shape[:2], bool)
        bad = masked_choices(td[group, "action"].numpy(), td[group, "action_mask"].numpy(), nvec[[index[a] for a in agents]])
        assert not (bad & acting).any(), f"{group}: TorchRL drew an action its mask forbids"
        r.agent_steps += int(acting.sum())
        r.rewards_finite &= bool(torch.isfinite(td["next", group, "reward"]).all())
    return r


def torchrl_wrapper_mask(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """TorchRL's ``PettingZooWrapper(use_mask=True, done_on_any=False)`` over the ParallelEnv."""
    return torchrl_wrapper(opts, ends, limit, rng, use_mask=True)


def torchrl_wrapper_aec(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """TorchRL's ``PettingZooWrapper(use_mask=True)`` over ``fleet_marl.env()`` (the AEC form)."""
    return torchrl_wrapper(opts, ends, limit, rng, form="simultaneous")


def torchrl_wrapper_sequential(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """TorchRL's ``PettingZooWrapper(use_mask=True)`` over ``fleet_marl.env(protocol="sequential")``."""
    return torchrl_wrapper(opts, ends, limit, rng, form="sequential")


def rllib_parallel(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """RLlib's ``ParallelPettingZooEnv`` (reset by hand at each episode's end, as RLlib does)."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv  # the [rllib] extra's

    sizes = _sizes(opts)
    env = ParallelPettingZooEnv(_parallel(opts))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "step\\(\\) called with no live agent")  # mixed endings: RLlib's wrapper steps once more
        return _multi_agent_rollout(env, lambda obs, infos: {a: sample(_mask(obs[a], infos[a]), sizes, rng) for a in obs}, ends, limit)


def _multi_agent_rollout(env: Any, act, ends: int, limit: int) -> Rollout:
    """Step an RLlib-style multi-agent env (agent dicts, ``__all__`` in the terminations and
    truncations) with ``act(obs, infos)`` until ``ends`` episode ends or ``limit`` steps, resetting
    at each end (the first reset seeded 0)."""
    obs, infos = env.reset(seed=0)
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        acts = act(obs, infos)
        obs, rew, term, trunc, infos = env.step(acts)
        r.steps, r.agent_steps = r.steps + 1, r.agent_steps + len(acts)
        r.rewards_finite &= all(np.isfinite(v) for v in rew.values())
        if term["__all__"] or trunc["__all__"]:
            r.ends += 1
            obs, infos = env.reset()
    return r


def pufferlib_emulation(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """PufferLib's ``PettingZooPufferEnv`` over the ParallelEnv, stepped directly; with
    ``obs_mode="dict"`` the mask is inside the emulation's flattened observation, so the actions
    come from the ParallelEnv's own ``action_mask()``."""
    from pufferlib.emulation import PettingZooPufferEnv  # the [pufferlib] extra's

    sizes = _sizes(opts)
    env = PettingZooPufferEnv(env=_parallel(opts))
    dict_mode = opts["obs_mode"] == "dict"
    _, infos = env.reset(seed=0)
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        live = set(env.env.agents)
        acts = np.stack(
            [
                sample(None if a not in live else env.env.action_mask(a) if dict_mode else infos[a]["action_mask"], sizes, rng)
                for a in env.possible_agents
            ]
        )
        r.agent_steps += len(env.agents)
        _, rew, _, _, infos = env.step(acts)
        r.steps += 1
        r.rewards_finite &= all(np.isfinite(v) for v in rew.values())
        if env.done:
            r.ends += 1
            _, infos = env.reset()
    return r


def pufferlib_vector(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``pufferlib.vector.make`` (Serial) over two ``PettingZooPufferEnv``; the actions come
    from each sub-env's ParallelEnv masks (the vector API hands out none)."""
    import pufferlib.vector  # the [pufferlib] extra's
    from pufferlib.emulation import PettingZooPufferEnv  # the [pufferlib] extra's

    sizes = _sizes(opts)
    vec = pufferlib.vector.make(
        PettingZooPufferEnv,
        backend=pufferlib.vector.Serial,
        num_envs=2,
        env_kwargs={"env_creator": fleet_marl.parallel_env, "env_kwargs": opts},
    )
    vec.reset(seed=0)
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        acts = []
        for sub in vec.envs:
            live = set(sub.env.agents)
            acts += [sample(sub.env.action_mask(a) if a in live else None, sizes, rng) for a in sub.possible_agents]
            r.agent_steps += len(live)
        _, rew, _, _, _ = vec.step(np.stack(acts))
        r.steps += 1
        r.rewards_finite &= bool(np.isfinite(rew).all())
        r.ends += sum(sub.done for sub in vec.envs)
    vec.close()
    return r


# --- over the vector env ---------------------------------------------------------------------------


def sb3_vecenv(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``fleet_marl.clients.sb3.FleetSB3VecEnv``: the masks of ``infos`` in its layout; cluster 0's ends."""
    from fleet_marl.clients.sb3 import FleetSB3VecEnv  # the [sb3] extra's

    venv = FleetSB3VecEnv(num_clusters=2, seed=0, **opts)
    sizes, n = venv.venv.nvec_max, venv.n_agents
    venv.reset()
    infos = venv.reset_infos
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        _, rew, dones, infos = venv.step(np.stack([sample(i["action_mask"], sizes, rng) for i in infos]))
        r.steps, r.agent_steps = r.steps + 1, r.agent_steps + venv.num_envs
        r.rewards_finite &= bool(np.isfinite(rew).all())
        r.ends += int(dones[:n].all())
    return r


def pufferlib_native(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``fleet_marl.clients.pufferlib.FleetPufferEnv`` through ``pufferlib.vector.make`` (native
    vectorization): masks from the observation (``"dict"``) or ``action_masks()``."""
    import pufferlib  # the [pufferlib] extra's
    import pufferlib.vector  # the [pufferlib] extra's

    from fleet_marl.clients.pufferlib import FleetPufferEnv  # the [pufferlib] extra's

    env = pufferlib.vector.make(FleetPufferEnv, backend=pufferlib.PufferEnv, env_kwargs={"num_clusters": 2, "seed": 0, **opts})
    sizes = env.venv.nvec_max
    obs, _ = env.reset()
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        if env.obs_mode == "dict":
            acts = sample_rows(obs[:, env.n_features :] > 0, sizes, rng)
        else:
            m = env.action_masks()
            acts = np.stack([sample(tuple(d[i] for d in m) if isinstance(m, tuple) else m[i], sizes, rng) for i in range(env.num_agents)])
        obs, rew, _, _, stats = env.step(acts)
        r.steps, r.agent_steps = r.steps + 1, r.agent_steps + int(env.masks.sum())
        r.rewards_finite &= bool(np.isfinite(rew).all())
        r.ends += len(stats)
    return r


def benchmarl_mappo(opts: dict, ends: int, limit: int, rng: np.random.Generator, algorithm: str = "mappo") -> Rollout:
    """A BenchMARL experiment (``algorithm``'s own config, a tiny budget) on ``FleetTask``: two
    iterations of 4 clusters x 8 steps; the collected batches' episode ends and rewards."""
    from fleet_marl.clients.benchmarl import FleetTask  # the [benchmarl] extra's
    from fleet_marl.clients.benchmarl.run import run_experiment  # the [benchmarl] extra's

    task = opts["task"].upper()
    config = {k: opts[k] for k in ("obs_mode", "mask_layout", "max_cycles")}
    config["overrides"] = {k: v for k, v in opts.items() if k not in (*config, "task")}
    seen = run_experiment(FleetTask[task].get_task(config=config), algorithm, iterations=2, frames=32)
    return Rollout(seen["steps"], seen["ends"], seen["agent_steps"], seen["rewards_finite"])


def _rllib_action(o: Any, sizes, rng: np.random.Generator) -> np.ndarray:
    """An action allowed by an RLlib observation's flat mask (obs_mode="dict"), or the all-zero one."""
    return sample(o["action_mask"] if isinstance(o, dict) else None, sizes, rng)


def rllib_env(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``fleet_marl.rllib.FleetRLlibEnv`` (one cluster, RLlib's ``MultiAgentEnv`` API; what
    ``fleet-marl train --engine rllib`` samples with ``vector: false`` and under the sequential
    protocol), reset at each ``__all__``."""
    from fleet_marl.rllib.env import FleetRLlibEnv  # the [rllib] extra's

    env = FleetRLlibEnv(dict(opts))
    return _multi_agent_rollout(env, lambda obs, _: {a: _rllib_action(obs[a], env.nvec_max, rng) for a in env.agents}, ends, limit)


def rllib_vector(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``fleet_marl.rllib.vector.FleetVectorMultiAgentEnv`` (2 clusters, RLlib's
    ``VectorMultiAgentEnv`` API, what ``fleet-marl train --engine rllib`` samples): no action for a
    tenant that finished; cluster 0's ends."""
    from fleet_marl.rllib.vector import FleetVectorMultiAgentEnv  # the [rllib] extra's

    env = FleetVectorMultiAgentEnv(dict(opts), num_envs=2)
    obs, _ = env.reset(seed=0)
    done: list[set] = [set(), set()]
    r = Rollout(0, 0, 0, True)
    while r.ends < ends and r.steps < limit:
        acts = [{a: _rllib_action(o, env.nvec_max, rng) for a, o in ob.items() if a not in d} for ob, d in zip(obs, done, strict=True)]
        obs, rew, term, trunc, _ = env.step(acts)
        r.steps, r.agent_steps = r.steps + 1, r.agent_steps + sum(len(x) for x in acts)
        r.rewards_finite &= all(np.isfinite(v) for d in rew for v in d.values())
        done = [{a for a in ob if t.get(a) or u.get(a)} for ob, t, u in zip(obs, term, trunc, strict=True)]
        r.ends += int(term[0]["__all__"] or trunc[0]["__all__"])
    return r


def torchrl_native(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """``fleet_marl.torchrl.FleetTorchEnv`` in TorchRL's ``SerialEnv`` (two envs of two
    clusters), its own masks (``("agents", "action_mask")``); cluster 0's ends."""

    import torch  # the [torchrl] extra's
    from torchrl.envs import SerialEnv  # the [torchrl] extra's

    from fleet_marl.torchrl import FleetTorchEnv  # the [torchrl] extra's

    kw = {k: v for k, v in opts.items() if k not in ("obs_mode", "mask_layout")}  # it takes neither (flat, both in its TensorDict)
    env = SerialEnv(2, [partial(FleetTorchEnv, num_envs=2, seed=2 * w, **kw) for w in range(2)])
    sizes = _sizes(kw)

    def policy(td):
        masks = td["agents", "action_mask"]
        td["agents", "action"] = torch.from_numpy(sample_rows(masks.reshape(-1, masks.shape[-1]).numpy(), sizes, rng)).reshape(
            *masks.shape[:-1], -1
        )
        return td

    td = env.rollout(limit, policy=policy, break_when_any_done=False)
    env.close()
    done = td["next", "done"][0, 0, :, 0]
    cut = int(np.flatnonzero(done.numpy())[ends - 1]) + 1 if int(done.sum()) >= ends else td.shape[-1]
    live = td["agents", "mask"][..., :cut, :]
    return Rollout(cut, int(done[:cut].sum()), int(live.sum()), bool(torch.isfinite(td["next", "agents", "reward"]).all()))


#: The CleanRL example, a script beside the package.
CLEANRL_SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "cleanrl_ppo.py"


def cleanrl_module():
    """``experiments/cleanrl_ppo.py`` as a module (loaded once)."""
    if "cleanrl_ppo_matrix" not in sys.modules:
        spec = importlib.util.spec_from_file_location("cleanrl_ppo_matrix", CLEANRL_SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["cleanrl_ppo_matrix"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["cleanrl_ppo_matrix"]


def cleanrl_example(opts: dict, ends: int, limit: int, rng: np.random.Generator) -> Rollout:
    """The CleanRL example's actor (built for the vector env's flat masks, untrained) as its grader
    policy (``GreedyPolicy``, which reads either ``obs_mode`` and ``mask_layout``) on the
    ParallelEnv, one episode per seed."""
    mod = cleanrl_module()
    env = _parallel(opts)
    venv = fleet_marl.vector_env(num_envs=1, task=opts["task"])
    obs_width = venv.single_observation_space.shape[-1]  # 34, or 39 with a coupling switch on
    agent = mod.Agent(len(env.possible_agents), obs_width, venv.state_space.shape[-1], venv.nvec_max, 16, 1, "local", False)
    policy = mod.GreedyPolicy(env, agent)
    r = Rollout(0, 0, 0, True)
    for seed in range(ends):
        obs, infos = env.reset(seed=seed)
        policy.reset(seed)
        while env.agents and r.steps < limit:
            r.agent_steps += len(env.agents)
            obs, rew, _term, _trunc, infos = env.step(policy.act(obs, infos))  # illegal_action="raise": a masked choice raises
            r.steps += 1
            r.rewards_finite &= all(np.isfinite(v) for v in rew.values())
        r.ends += not env.agents
    return r


RUNS: dict[str, Any] = {
    "sb3_supersuit": sb3_supersuit,
    "sb3_vecenv": sb3_vecenv,
    "torchrl_wrapper": torchrl_wrapper,
    "torchrl_wrapper_mask": torchrl_wrapper_mask,
    "torchrl_wrapper_aec": torchrl_wrapper_aec,
    "torchrl_wrapper_sequential": torchrl_wrapper_sequential,
    "rllib_parallel": rllib_parallel,
    "pufferlib_emulation": pufferlib_emulation,
    "pufferlib_vector": pufferlib_vector,
    "pufferlib_native": pufferlib_native,
    "benchmarl": benchmarl_mappo,
    "rllib_env": rllib_env,
    "rllib_vector": rllib_vector,
    "torchrl_native": torchrl_native,
    "cleanrl_example": cleanrl_example,
}

__all__ = ["FORMS", "RUNS", "Rollout", "masked_choices", "sample", "sample_rows"]

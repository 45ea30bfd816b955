"""``ScenarioVectorEnv``: one vector env over several scenarios of the same shapes.

A learner that trains on a distribution of scenarios (the credit-assignment suite's train split,
:mod:`fleet_marl.suite`) steps clusters of several configs at once. Each config is a
:class:`~fleet_marl.environment.vector.FleetVectorEnv` of its own clusters (``num_envs`` split
among them as evenly as it divides, the first ones taking one more); this env steps them in
turn and joins what they return along the cluster axis, so it has
``FleetVectorEnv``'s API (``reset``, ``step``, ``state``, ``alive``, ``all_allowed``, the spaces)
and every learner of the vector env takes it. Cluster b of the joined env is cluster b' of
scenario k, bit for bit (``tests/test_suite_training.py``).

The configs must share their spaces (the tenants, each one's action sizes, the observation and
state widths); a config that does not is a ``ValueError`` naming it. :func:`make_vector_env` is
what a learner builds: this env over a suite task's train scenarios, or a ``FleetVectorEnv``. Seeds: ``reset(seed=s)``
seeds cluster b with ``s + b`` across the joined clusters, as the vector env does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from fleet_marl import suite
from fleet_marl.environment.vector import FleetVectorEnv


def _join(parts: list) -> Any:
    """``parts`` (one value per scenario: arrays, or dicts and tuples of them) joined along the cluster axis."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: _join([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(_join([p[i] for p in parts]) for i in range(len(first)))
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


class ScenarioVectorEnv:
    """``num_envs`` clusters spread over ``configs`` (FleetConfig dicts or objects of one set of
    shapes), each scenario a :class:`FleetVectorEnv` of its share; ``overrides`` apply to every one."""

    def __init__(self, num_envs: int, configs: Sequence[Any], **overrides: Any):
        configs = list(configs)
        if not configs:
            raise ValueError("configs = []: expected at least one scenario config")
        if num_envs < len(configs):
            raise ValueError(f"num_envs = {num_envs}: expected at least one cluster per scenario ({len(configs)} configs)")
        base, extra = divmod(int(num_envs), len(configs))
        self.sizes = [base + (k < extra) for k in range(len(configs))]
        self.envs = [FleetVectorEnv(b, config=c, **overrides) for b, c in zip(self.sizes, configs, strict=True)]
        first = self.envs[0]
        for k, e in enumerate(self.envs[1:], 1):
            same = (
                e.possible_agents == first.possible_agents
                and np.array_equal(e.nvec, first.nvec)
                and e.single_observation_space.shape == first.single_observation_space.shape
                and e.state_space.shape[-1] == first.state_space.shape[-1]
            )
            if not same:
                raise ValueError(f"configs[{k}]: its tenants, action sizes or observation width differ from configs[0]'s")
        self.num_envs = int(num_envs)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)))
        self.task, self.config, self.kernel_static = None, first.config, first.kernel_static
        self.num_agents, self.possible_agents = first.num_agents, first.possible_agents
        self.nvec, self.nvec_max, self.mask_size = first.nvec, first.nvec_max, first.mask_size
        self.illegal_action, self.obs_fields = first.illegal_action, first.obs_fields
        self.single_observation_space, self.single_action_space = first.single_observation_space, first.single_action_space
        T, F = first.single_observation_space.shape
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (self.num_envs, T, F), np.float32)
        self.action_space = gymnasium.spaces.MultiDiscrete(np.broadcast_to(first.nvec, (self.num_envs, *first.nvec.shape)))
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (self.num_envs, first.state_space.shape[-1]), np.float32)

    def _split(self, x: np.ndarray) -> list[np.ndarray]:
        return [x[a:b] for a, b in zip(self.starts[:-1], self.starts[1:], strict=True)]

    def reset(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Start a new episode in every cluster (``seed`` as :meth:`FleetVectorEnv.reset` takes it, over the joined clusters)."""
        if seed is None:
            outs = [e.reset() for e in self.envs]
        else:
            seeds = _seeds(seed, self.num_envs)
            outs = [e.reset(seed=seeds[a:b]) for e, a, b in zip(self.envs, self.starts[:-1], self.starts[1:], strict=True)]
        return np.concatenate([o for o, _ in outs]), _join([i for _, i in outs])

    def step(self, actions):
        """``FleetVectorEnv.step`` over the joined clusters; every scenario's actions are checked before any steps."""
        actions = np.asarray(actions)
        parts = self._split(actions)
        for e, a in zip(self.envs, parts, strict=True):
            e.validate_actions(a)  # a rejected step changes nothing in any scenario
        outs = [e.step(a) for e, a in zip(self.envs, parts, strict=True)]
        obs = np.concatenate([o[0] for o in outs])
        parts_infos = [o[4] for o in outs]
        ended = next((i for i in parts_infos if "final_obs" in i), None)
        if ended is not None:  # every scenario's infos get the keys of an ended step (its own, or none ended there)
            for e, o, i in zip(self.envs, outs, parts_infos, strict=True):
                if "final_obs" not in i:
                    i["final_obs"], i["final_state"] = o[0], e.state()
                    i["episode"] = {k: np.zeros((e.num_envs, *np.shape(v)[1:]), np.asarray(v).dtype) for k, v in ended["episode"].items()}
        infos = _join(parts_infos)
        return obs, *(np.concatenate([o[j] for o in outs]) for j in (1, 2, 3)), infos

    def state(self) -> np.ndarray:
        return np.concatenate([e.state() for e in self.envs])

    def sample_actions(self, infos: dict, rng: np.random.Generator | None = None) -> np.ndarray:
        return self.envs[0].sample_actions(infos, rng)

    def validate_actions(self, actions, live: np.ndarray | None = None):
        parts = self._split(np.asarray(actions))
        lives = [None] * len(parts) if live is None else self._split(np.asarray(live))
        got = [e.validate_actions(a, lv) for e, a, lv in zip(self.envs, parts, lives, strict=True)]
        return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])

    def check_seeds(self, seed) -> list:
        return [None] * self.num_envs if seed is None else _seeds(seed, self.num_envs)

    def close(self) -> None:
        for e in self.envs:
            e.close()

    @property
    def credit_seconds(self) -> float:
        return float(sum(e.credit_seconds for e in self.envs))

    @property
    def alive(self) -> np.ndarray:
        return np.concatenate([e.alive for e in self.envs])

    @property
    def rounds(self) -> np.ndarray:
        return np.concatenate([e.rounds for e in self.envs])

    @property
    def all_allowed(self) -> np.ndarray:
        return self.envs[0].all_allowed

    @property
    def mask_offsets(self) -> np.ndarray:
        return self.envs[0].mask_offsets

    @property
    def bid_levels(self) -> np.ndarray:
        return self.envs[0].bid_levels


def make_vector_env(num_envs: int, task: str | None = None, config=None, scenarios: int | None = None, **overrides: Any):
    """The vector env a learner steps: for a suite task (``fleet_marl.suite.SUITE``), a
    :class:`ScenarioVectorEnv` over its first ``scenarios`` train scenarios (default
    :data:`fleet_marl.suite.TRAIN_SCENARIOS`, at most one per cluster); else a :class:`FleetVectorEnv`
    of ``task`` or ``config``."""
    if config is None and task in suite.SUITE:
        k = min(int(num_envs), suite.TRAIN_SCENARIOS if scenarios is None else int(scenarios))
        if k < 1:
            raise ValueError(f"scenarios = {scenarios!r}: expected a number of train scenarios >= 1")
        return ScenarioVectorEnv(num_envs, [suite.scenario(task, s, "train") for s in range(k)], **overrides)
    if scenarios is not None:
        raise ValueError(f"scenarios = {scenarios!r}: only a suite task has scenarios (task = {task!r})")
    return FleetVectorEnv(num_envs, task, config, **overrides)


def _seeds(seed, B: int) -> list:
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"reset: seed = {seed!r}: expected None, a non-negative integer or a list of {B} of them")
        return [int(seed) + b for b in range(B)]
    seeds = list(seed)
    if len(seeds) != B:
        raise ValueError(f"reset: {len(seeds)} seeds for {B} clusters: expected one per cluster")
    return seeds


__all__ = ["ScenarioVectorEnv", "make_vector_env"]

"""The trained policy of ``fleet-marl train --engine torchrl`` as a grader policy.

:class:`TrainedPolicy` plays a trained actor for every tenant of a ``FleetParallelEnv``, or the
tenant whose turn it is in the sequential protocol's AEC env, greedily (the grader's ``Policy``
protocol): the same observation rows and flat masks as :class:`~fleet_marl.torchrl.FleetTorchEnv`.

This module re-exports the action distribution (:mod:`~fleet_marl.torchrl.distribution`:
``MaskedMultiCategorical``, ``Coupling``) and the networks (:mod:`~fleet_marl.torchrl.networks`:
``build_networks``, the sharing schemes ``SHARING``, ``turn_logits``, ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fleet_marl.environment.spaces import mask_dims
from fleet_marl.policies.base import fleet_env
from fleet_marl.torchrl.distribution import Coupling, MaskedMultiCategorical
from fleet_marl.torchrl.networks import (
    ACTIVATIONS,
    SHARING,
    AutoregressiveActor,
    PerKindMLP,
    StateCritic,
    WithAgentId,
    build_networks,
    turn_logits,
)


class TrainedPolicy:
    """A trained actor network playing every live tenant of a ``FleetParallelEnv`` (the grader's
    ``Policy`` protocol): greedy (each dimension's most likely allowed choice), or sampled with
    ``explore=True`` from a generator seeded by ``reset(seed)``."""

    def __init__(self, env, actor: nn.Module, nvec, explore: bool = False):
        self.coupling = getattr(actor, "coupling", None)
        self.env = fleet_env(env)
        self.env_spaces: Any = self.env  # its observation spaces too (the PettingZoo API FleetEnvLike leaves out)
        self.actor = actor.eval()
        self.nvec = [int(n) for n in nvec]
        self.explore = bool(explore)
        self._gen = torch.Generator().manual_seed(0)
        self._index = {a: i for i, a in enumerate(self.env.possible_agents)}

    def reset(self, seed: int | None = None) -> None:
        self._gen = torch.Generator().manual_seed(0 if seed is None else int(seed))

    def act(self, observations: dict, infos: dict) -> dict[str, np.ndarray]:
        env = self.env
        N = len(env.possible_agents)
        live = [a for a in observations if a in set(env.agents)]
        rows = {a: observations[a] if not isinstance(observations[a], dict) else observations[a]["observation"] for a in live}
        # the observations' own width: 34, or 40 under the sequential protocol (whose AEC env wraps a 34-feature round engine)
        F = len(next(iter(rows.values()))) if rows else self.env_spaces.observation_space(env.possible_agents[0]).shape[-1]
        obs = np.zeros((N, F), np.float32)
        mask = np.ones((N, sum(self.nvec)), bool)
        for a in live:
            i = self._index[a]
            obs[i] = rows[a]
            mask[i] = _flat(env.action_mask(a), env.nvec[i], self.nvec)
        with torch.no_grad():
            logits = self.actor(torch.from_numpy(obs)[None])[0]
            dist = MaskedMultiCategorical(logits, torch.from_numpy(mask), self.nvec, self.coupling, generator=self._gen)
            acts = dist.sample() if self.explore else dist.mode
        chosen = acts.numpy().astype(np.int64)
        return {a: chosen[self._index[a]] for a in live}


def _flat(mask, nvec_row, nvec) -> np.ndarray:
    """A tenant's action mask (either layout), each dimension padded to ``nvec`` and concatenated."""
    out = np.zeros(sum(nvec), bool)
    o = 0
    for n, m in zip(nvec, mask_dims(mask, nvec_row), strict=True):
        out[o : o + len(m)] = m
        o += n
    return out


__all__ = [
    "ACTIVATIONS",
    "SHARING",
    "AutoregressiveActor",
    "Coupling",
    "MaskedMultiCategorical",
    "PerKindMLP",
    "StateCritic",
    "TrainedPolicy",
    "WithAgentId",
    "build_networks",
    "turn_logits",
]

"""A trained BenchMARL value learner (QMIX, VDN, IQL) on the menu env as a grader policy.

:class:`GreedyMenuPolicy` plays every live tenant of a ``FleetParallelEnv`` (the grader's
``Policy`` protocol, :func:`fleet_marl.evaluation.evaluate`) with the algorithm's own greedy
policy (BenchMARL's ``get_policy_for_loss``: the agents' Q-network, then torchrl's
``QValueModule``: the arg max of the Q-values over the allowed menu entries; no exploration):
each tenant's observation row and its action mask as :class:`~fleet_marl.clients.benchmarl.env.FleetMenuEnv`
hands them to the learner (the mask through the training env's
:class:`~fleet_marl.clients.benchmarl.env.Menu`), the chosen entry mapped back to the env's
action with the fields off the menu at the tenant's default (``default_action_index``, the
graded scenario's own). A departed tenant's slot gets a zero row and an all-allowed mask, as in
training. Greedy and stateless: the same observations give the same actions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from fleet_marl.clients.benchmarl.env import GROUP, Menu
from fleet_marl.policies.base import fleet_env


class GreedyMenuPolicy:
    """``q`` (a TensorDict module from ``(GROUP, "observation")`` and ``(GROUP, "action_mask")``,
    ``mask_features`` too under ``obs_mode="dict"``, to ``(GROUP, "action")``: a menu entry per
    tenant) playing every live tenant of ``env`` through ``menu``; see the module docstring."""

    def __init__(self, env: Any, q: Any, menu: Menu, obs_mode: str = "flat"):
        self.env = fleet_env(env)
        self.q, self.menu, self.obs_mode = q, menu, obs_mode
        self.base = np.asarray(getattr(self.env, "default_action_index"), np.int64)  # noqa: B009 (FleetEnvLike leaves it out): (T, 8)
        self._index = {a: i for i, a in enumerate(self.env.possible_agents)}

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: greedy, no state."""

    def act(self, observations: dict, infos: dict) -> dict[str, np.ndarray]:
        env, menu = self.env, self.menu
        N = len(env.possible_agents)
        live = [a for a in observations if a in set(env.agents)]
        rows = {a: observations[a] if not isinstance(observations[a], dict) else observations[a]["observation"] for a in live}
        if not live:
            return {}
        obs = np.zeros((N, len(next(iter(rows.values())))), np.float32)
        flat = np.ones((N, int(menu.offsets[-1])), bool)
        for a in live:
            i = self._index[a]
            obs[i] = rows[a]
            flat[i] = menu.flat(env.action_mask(a), env.nvec[i])
        allowed = torch.from_numpy(menu.mask(flat))[None]  # (1, N, K)
        group = {"observation": torch.from_numpy(obs)[None], "action_mask": allowed}
        if self.obs_mode == "dict":
            group["mask_features"] = allowed.to(torch.float32)
        td = TensorDict({GROUP: TensorDict(group, batch_size=(1, N))}, batch_size=(1,))
        with torch.no_grad():
            entries = self.q(td).get((GROUP, "action"))[0].numpy()
        chosen = menu.actions(entries.astype(np.int64), self.base)
        return {a: chosen[self._index[a]] for a in live}


__all__ = ["GreedyMenuPolicy"]

"""The AEC form of ``fleet_v0``: ``env()`` (and ``raw_env``, the parallel class PettingZoo's
conventions name)."""

from __future__ import annotations

from typing import Any

from pettingzoo.utils.conversions import parallel_to_aec_wrapper
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from fleet_marl.environment.parallel import FleetParallelEnv


class _FleetAEC(parallel_to_aec_wrapper):
    """PettingZoo's parallel-to-AEC conversion, with each action checked on its own turn: a
    bad action is an :class:`ActionError` naming that agent, and is not stored, so the agent
    can try again."""

    def step(self, action):
        agent = self.agent_selection
        if action is not None and not (self.terminations.get(agent) or self.truncations.get(agent)):
            self.env.check_action(agent, action)
        super().step(action)


def env(**config: Any):
    """The AEC form (PettingZoo's ``parallel_to_aec`` with its order-enforcing wrapper, plus a
    check of each action on its agent's turn). ``config`` is what ``parallel_env`` takes,
    env options included (``obs_mode``, ``mask_layout``, ...). The parallel env's views are
    on ``env(...).unwrapped`` (``episode_reports``, ``round``, ...)."""
    return OrderEnforcingWrapper(_FleetAEC(FleetParallelEnv(**config)))


raw_env = FleetParallelEnv

__all__ = ["env", "raw_env"]

"""The AEC forms of ``fleet_v0``: ``env()`` (and ``raw_env``, the parallel class PettingZoo's
conventions name).

``env(protocol="simultaneous")`` (the default) is PettingZoo's parallel-to-AEC conversion of
:class:`FleetParallelEnv`: every tenant still decides blind, and the round clears after the
last. ``env(protocol="sequential", turn_order=...)`` is the native AEC env of
:mod:`fleet_marl.environment.sequential`: within a round the tenants claim one at a time, each
seeing the claims made before its turn.
"""

from __future__ import annotations

from typing import Any

from pettingzoo.utils.conversions import parallel_to_aec_wrapper
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from fleet_marl.environment.parallel import FleetParallelEnv
from fleet_marl.environment.sequential import FleetSequentialEnv


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
    """The AEC form, with PettingZoo's order-enforcing wrapper. ``config`` is what
    ``parallel_env`` takes, env options included (``obs_mode``, ``mask_layout``, ...), plus
    ``protocol`` and ``turn_order``:

    * ``protocol="simultaneous"`` (default): PettingZoo's ``parallel_to_aec`` plus a check of
      each action on its agent's turn; the parallel env's views are on ``env(...).unwrapped``
      (``episode_reports``, ``round``, ...);
    * ``protocol="sequential"``: :class:`~fleet_marl.environment.sequential.FleetSequentialEnv`,
      turns in ``turn_order`` (``fixed``, ``rotating``, ``random``, ``priority``), the claims
      made before a tenant's turn in its observation; its views, ``claims`` and
      ``turn_sequence`` are on ``env(...).unwrapped``.
    """
    if config.get("protocol", "simultaneous") == "sequential":
        return OrderEnforcingWrapper(FleetSequentialEnv(**config))
    return OrderEnforcingWrapper(_FleetAEC(FleetParallelEnv(**config)))


raw_env = FleetParallelEnv

__all__ = ["env", "raw_env"]

"""Reference policies against the plain PettingZoo API (no Ray import).

>>> import fleet_marl
>>> import fleet_marl.policies
>>> env = fleet_marl.parallel_env(task="tiny")
>>> policy = fleet_marl.policies.make("precision_expert", env)
>>> obs, infos = env.reset(seed=0)
>>> policy.reset(seed=0)
>>> obs, rewards, terms, truncs, infos = env.step(policy.act(obs, infos))

Policies (``POLICIES``): ``random``, ``greedy``, ``fair_share``, ``precision_expert``,
``bidder`` (``fleet_marl.policies.heuristics``), ``planner`` (``fleet_marl.policies.planner``, the grader's
reference) and ``hindsight`` (the planner with the episode's future in hand: the grader's upper
reference, not an online policy). The protocol is in ``fleet_marl.policies.base`` (``Policy``; ``FleetEnvLike``, what a policy
reads of its env); docs/policies.md describes each one.
"""

from __future__ import annotations

from fleet_marl.policies.base import BasePolicy, ClaimsSoFar, FitTable, FleetEnvLike, Policy, fleet_env, split
from fleet_marl.policies.heuristics import BidderPolicy, FairSharePolicy, GreedyPolicy, PrecisionExpertPolicy, RandomPolicy
from fleet_marl.policies.planner import HindsightPolicy, PlannerPolicy

#: Reference policies by name, in the order the baseline table lists them.
POLICIES: dict[str, type[BasePolicy]] = {
    p.name: p for p in (RandomPolicy, GreedyPolicy, FairSharePolicy, PrecisionExpertPolicy, BidderPolicy, PlannerPolicy, HindsightPolicy)
}


def make(name: str, env, **kwargs) -> BasePolicy:
    """The reference policy ``name`` bound to ``env`` (a parallel or AEC fleet_marl env)."""
    if name not in POLICIES:
        raise KeyError(f"policy {name!r}: expected one of {', '.join(POLICIES)}")
    return POLICIES[name](env, **kwargs)


__all__ = [
    "POLICIES",
    "BasePolicy",
    "BidderPolicy",
    "ClaimsSoFar",
    "FairSharePolicy",
    "FitTable",
    "FleetEnvLike",
    "GreedyPolicy",
    "HindsightPolicy",
    "PlannerPolicy",
    "Policy",
    "PrecisionExpertPolicy",
    "RandomPolicy",
    "fleet_env",
    "make",
    "split",
]

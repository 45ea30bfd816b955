"""Who shares a policy: the four sharing schemes and their policy-mapping functions.

=============  ==============================================================================
``shared``     one module for every tenant (parameter sharing; the tenant's own features --
               kind, model size, priority, budget -- are in its observation)
``per_tenant`` one module per tenant (``tenant_0`` ... ``tenant_{N-1}``), independent learners
``per_kind``   one module per tenant kind: ``train`` and ``serve`` (only the kinds the task has)
``mappo``      one shared module with a centralized critic on ``env.state()`` (MAPPO)
=============  ==============================================================================

The mapping functions are module-level classes, so they pickle into checkpoints and reach remote
env runners. RLlib calls them as ``fn(agent_id, episode)`` and ``fn(agent_id, None,
worker=...)``.
"""

from __future__ import annotations

SHARING = ("shared", "per_tenant", "per_kind", "mappo")


class SharedMapping:
    """Every agent to one module (``"shared"``)."""

    def __call__(self, agent_id, episode=None, **kwargs) -> str:
        return "shared"

    def __eq__(self, other):
        return type(other) is type(self)

    __hash__ = object.__hash__


class PerTenantMapping:
    """Each agent to its own module, named like the agent."""

    def __call__(self, agent_id, episode=None, **kwargs) -> str:
        return str(agent_id)

    def __eq__(self, other):
        return type(other) is type(self)

    __hash__ = object.__hash__


class KindMapping:
    """Each agent to the module of its kind (``"train"`` or ``"serve"``)."""

    def __init__(self, kinds: dict[str, str]):
        self.kinds = dict(kinds)

    def __call__(self, agent_id, episode=None, **kwargs) -> str:
        return self.kinds[agent_id]

    def __eq__(self, other):
        return type(other) is type(self) and other.kinds == self.kinds

    __hash__ = object.__hash__


def module_ids(sharing: str, agents: list[str], kinds: dict[str, str]) -> list[str]:
    """The module IDs of ``sharing``, in a fixed order."""
    if sharing in ("shared", "mappo"):
        return ["shared"]
    if sharing == "per_tenant":
        return list(agents)
    if sharing == "per_kind":
        return [k for k in ("train", "serve") if k in kinds.values()]
    raise ValueError(f"sharing = {sharing!r}: expected one of {', '.join(SHARING)}")


def mapping_for(sharing: str, agents: list[str], kinds: dict[str, str]):
    """The policy-mapping function of ``sharing``."""
    if sharing in ("shared", "mappo"):
        return SharedMapping()
    if sharing == "per_tenant":
        return PerTenantMapping()
    if sharing == "per_kind":
        return KindMapping(kinds)
    raise ValueError(f"sharing = {sharing!r}: expected one of {', '.join(SHARING)}")

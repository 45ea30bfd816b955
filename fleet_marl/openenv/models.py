"""The wire types of both views: OpenEnv ``Action``/``Observation``/``State`` pydantic models,
and the JSON encoding of numpy values and non-finite floats.

Every float that is not finite travels as ``{"$float": "inf" | "-inf" | "nan"}`` (JSON has no
such numbers), and :func:`decode` turns it back, so a remote episode's numbers are the local
ones bit for bit (float64 round-trips through JSON exactly).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

# --- JSON encoding -----------------------------------------------------------------------------


def encode(x: Any) -> Any:
    """``x`` as plain JSON values: numpy scalars and arrays to Python, tuples to lists,
    non-finite floats to ``{"$float": ...}``."""
    if isinstance(x, dict):
        return {str(k): encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    if isinstance(x, np.ndarray):
        return encode(x.tolist())
    if isinstance(x, np.generic):
        return encode(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    return x


def decode(x: Any) -> Any:
    """The inverse of :func:`encode` (lists stay lists)."""
    if isinstance(x, dict):
        if len(x) == 1 and "$float" in x:
            return float(x["$float"])
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


# --- multi-agent view ---------------------------------------------------------------------------


class FleetJointAction(Action):
    """One round for every live tenant: ``{"actions": {"tenant_0": [8 ints], ...}}`` in the
    ``MultiDiscrete`` layout of ``fleet_marl.environment.ACTION_FIELDS``."""

    actions: dict[str, list[Any]] = Field(description="agent id -> 8 action indices (gpus, bid_level, 5 precisions, batch_level)")


class FleetMultiObservation(Observation):
    """What ``FleetParallelEnv.reset``/``step`` return, for every agent. ``reward`` is the
    round's global welfare ``G`` (0 at reset) and ``done`` is True when every agent has
    finished. ``config`` (the full scenario) comes with every reset."""

    agents: list[str] = Field(default_factory=list, description="live agents after this round")
    possible_agents: list[str] = Field(default_factory=list)
    observations: dict[str, list[float]] = Field(default_factory=dict, description="agent -> 34 features in [0, 1]")
    rewards: dict[str, float] = Field(default_factory=dict, description="agent -> reward of the configured scheme")
    reward_schemes: dict[str, dict[str, float]] = Field(default_factory=dict, description="agent -> scheme -> reward")
    terminations: dict[str, bool] = Field(default_factory=dict)
    truncations: dict[str, bool] = Field(default_factory=dict)
    action_masks: dict[str, list[list[int]]] = Field(default_factory=dict, description="agent -> 8 lists of 0/1")
    infos: dict[str, dict[str, Any]] = Field(default_factory=dict, description="agent -> info (without action_mask)")
    state: list[float] = Field(default_factory=list, description="env.state(): the global view for centralized critics")
    round: int = 0
    task: str | None = None
    config_digest: str = ""
    config: dict[str, Any] | None = Field(default=None, description="the scenario (FleetConfig.to_dict()); sent on reset")


# --- single-tenant (ego) view ---------------------------------------------------------------------


class FleetEgoAction(Action):
    """The model's raw answer. The server takes the first JSON object in it (docs/llm_agents.md)."""

    text: str = Field(description='the model output, e.g. {"request_gpus": 4, "bid": "high", "batch": 32, "precision": "bf16"}')


class FleetEgoObservation(Observation):
    """The ego tenant's view: a text ``prompt`` and a structured copy of what it says.
    ``reward`` is the ego's reward in the configured scheme (minus the penalty of an invalid
    action); ``metadata["rewards"]`` has every scheme."""

    prompt: str = ""
    ego: str = ""
    round: int = 0
    max_rounds: int = 0
    tenant: dict[str, Any] = Field(default_factory=dict, description="the ego tenant: workload, budget, what it holds")
    cluster: dict[str, Any] = Field(default_factory=dict, description="the cluster's state as the ego sees it")
    legal: dict[str, Any] = Field(default_factory=dict, description="the choices the action mask allows")
    action_schema: dict[str, Any] = Field(default_factory=dict, description="JSON Schema of the answer")
    last_action: dict[str, Any] | None = Field(default=None, description="the action that ran last round (the fallback if invalid)")
    last_action_error: str | None = Field(default=None, description="why the last answer was rejected, naming the field")
    invalid_actions: int = 0
    invalid_streak: int = 0


class FleetState(State):
    """A session's state: round, live agents, the scenario's digest and the fairness report."""

    mode: str = ""
    task: str | None = None
    round: int = 0
    max_rounds: int = 0
    agents: list[str] = Field(default_factory=list)
    config_digest: str = ""
    fairness: dict[str, Any] = Field(default_factory=dict)
    ego: str | None = None
    invalid_actions: int = 0


__all__ = [
    "FleetEgoAction",
    "FleetEgoObservation",
    "FleetJointAction",
    "FleetMultiObservation",
    "FleetState",
    "decode",
    "encode",
]

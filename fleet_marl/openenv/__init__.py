"""fleet_marl served over HTTP/WebSocket with OpenEnv, for LLM agents and remote policies.

An optional extra (``pip install fleet-marl[openenv]``): the core package never imports this
subpackage, and importing it without the ``openenv`` package is an ImportError that says how
to install it. Two views of :class:`~fleet_marl.environment.FleetParallelEnv`
(docs/llm_agents.md):

``multi``  every tenant, as PettingZoo has them (:mod:`fleet_marl.openenv.multi`): a joint
           action ``{"actions": {agent: [8 ints]}}``; per-agent observations, rewards in every
           scheme, terminations, truncations, masks and infos; the scalar ``reward`` is the
           global welfare. :class:`RemoteParallelEnv` is a PettingZoo ``ParallelEnv`` over it.
``ego``    one tenant for an LLM (:mod:`fleet_marl.openenv.ego`): a text prompt in, the model's
           raw text out, parsed by :func:`fleet_marl.parse_tenant_action`; the other tenants
           are played by a reference policy.

>>> from fleet_marl.openenv import make_app          # doctest: +SKIP
>>> app = make_app(mode="ego", max_sessions=4)       # a FastAPI app; uvicorn serves it

``fleet-marl serve --mode multi|ego`` runs it with uvicorn.
"""

from __future__ import annotations

import importlib

try:
    importlib.import_module("openenv.core")
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "fleet_marl.openenv needs the optional 'openenv' extra: pip install 'fleet-marl[openenv]' "
        f"(from a checkout: pip install -e '.[openenv]'). Import failed: {exc}"
    ) from exc

from fleet_marl.openenv.app import MODES, make_app
from fleet_marl.openenv.client import FleetEgoClient, FleetEnvClient, RemoteParallelEnv, WebSocketSession
from fleet_marl.openenv.ego import FleetEgoEnvironment
from fleet_marl.openenv.models import (
    FleetEgoAction,
    FleetEgoObservation,
    FleetJointAction,
    FleetMultiObservation,
    FleetState,
)
from fleet_marl.openenv.multi import FleetMultiEnvironment

__all__ = [
    "FleetEgoAction", "FleetEgoClient", "FleetEgoEnvironment", "FleetEgoObservation", "FleetEnvClient", "FleetJointAction",
    "FleetMultiEnvironment", "FleetMultiObservation", "FleetState", "MODES", "RemoteParallelEnv", "WebSocketSession", "make_app",
]

"""fleet_marl served over HTTP/WebSocket with OpenEnv, for LLM agents and remote policies.

An optional extra (``pip install fleet-marl[openenv]``). Two views of
:class:`~fleet_marl.environment.FleetParallelEnv` (docs/llm_agents.md):

``multi``  every tenant, as PettingZoo has them (:mod:`fleet_marl.openenv.multi`): a joint
           action ``{"actions": {agent: [8 ints]}}``; per-agent observations, rewards in every
           scheme, terminations, truncations, masks and infos; the scalar ``reward`` is the
           global welfare. :class:`RemoteParallelEnv` is a PettingZoo ``ParallelEnv`` over it.
``ego``    one tenant for an LLM (:mod:`fleet_marl.openenv.ego`): a text prompt in, the model's
           raw text out, parsed by :func:`fleet_marl.parse_tenant_action`; the other tenants
           are played by a reference policy.

>>> from fleet_marl.openenv import make_app
>>> app = make_app(mode="ego", max_sessions=4)       # a FastAPI app; uvicorn serves it

``fleet-marl serve --mode multi|ego`` runs it with uvicorn.

The text-action parser :mod:`fleet_marl.openenv.text_action` and the ``serve`` command
(:mod:`fleet_marl.openenv.command`) need no extra; every other name here is imported on first
use, and without the extra that is an ImportError saying how to install it.
"""

from __future__ import annotations

import importlib

from fleet_marl._lazy import lazy_exports

#: Public names -> the submodule that defines them (imported on first use).
_NAMES = {
    "MODES": "app",
    "make_app": "app",
    "FleetEgoClient": "client",
    "FleetEnvClient": "client",
    "RemoteParallelEnv": "client",
    "WebSocketSession": "client",
    "FleetEgoEnvironment": "ego",
    "FleetMultiEnvironment": "multi",
    "FleetEgoAction": "models",
    "FleetEgoObservation": "models",
    "FleetJointAction": "models",
    "FleetMultiObservation": "models",
    "FleetState": "models",
    "ServerLimits": "limits",
}

INSTALL_HINT = (
    "fleet_marl.openenv needs the optional 'openenv' extra: pip install 'fleet-marl[openenv]' "
    "(from a checkout: pip install -e '.[openenv]')"
)


def require() -> None:
    """Raise an ImportError that says how to install the extra when OpenEnv is missing."""
    try:
        importlib.import_module("openenv.core")
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT}. Import failed: {exc}") from exc


__getattr__, __dir__ = lazy_exports(__name__, _NAMES, check=lambda _name: require())


#: The names of _NAMES (a literal list, so tools read it without running the module).
__all__ = [
    "MODES",
    "FleetEgoAction",
    "FleetEgoClient",
    "FleetEgoEnvironment",
    "FleetEgoObservation",
    "FleetEnvClient",
    "FleetJointAction",
    "FleetMultiEnvironment",
    "FleetMultiObservation",
    "FleetState",
    "RemoteParallelEnv",
    "ServerLimits",
    "WebSocketSession",
    "make_app",
]

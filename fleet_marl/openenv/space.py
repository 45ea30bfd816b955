"""A module-level ``app`` for ``uvicorn fleet_marl.openenv.space:app`` and ``openenv.yaml``,
configured from environment variables (the Docker Space sets them):

=========================  ==================================  =============
variable                   meaning                             default
=========================  ==================================  =============
``FLEET_MARL_MODE``        ``multi`` or ``ego``                ``ego``
``FLEET_MARL_TASK``        default task of a reset             ``easy``
``FLEET_MARL_MAX_SESSIONS``  concurrent WebSocket sessions     ``128``
``FLEET_MARL_OPPONENTS``   ego view: the other tenants' policy ``precision_expert``
``FLEET_MARL_TOKEN``       bearer token every route requires   none
=========================  ==================================  =============

The limits are :class:`~fleet_marl.openenv.limits.ServerLimits`' defaults (``fleet-marl serve``
sets each with an option).

``fleet-marl serve`` is the same app with command-line options, and more: it runs uvicorn with
:func:`fleet_marl.openenv.transport.uvicorn_config`, which bounds the connections themselves (how
many, how slow, how large a head). A plain ``uvicorn fleet_marl.openenv.space:app`` has the app's
guards (Host, token, Origin, bodies, messages, pacing) but uvicorn's own connection handling: the
Docker image runs ``fleet-marl serve``.
"""

from __future__ import annotations

import os

from fleet_marl.openenv.app import make_app


def app_from_env(environ=os.environ):
    mode = environ.get("FLEET_MARL_MODE", "ego")
    kw = {
        "mode": mode,
        "task": environ.get("FLEET_MARL_TASK", "easy"),
        "max_sessions": int(environ.get("FLEET_MARL_MAX_SESSIONS", "128")),
        "token": environ.get("FLEET_MARL_TOKEN") or None,
    }
    if mode == "ego":
        kw["opponents"] = environ.get("FLEET_MARL_OPPONENTS", "precision_expert")
    return make_app(**kw)


app = app_from_env()

__all__ = ["app", "app_from_env"]

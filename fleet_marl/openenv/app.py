"""The FastAPI app: OpenEnv's read-only routes and this package's session routes, over one of
the two views.

>>> app = make_app(mode="multi", task="easy", limits=ServerLimits(max_sessions=8), token="s3cret")

Episodes live on the WebSocket endpoint ``/ws`` (one env per connection; every live session,
WebSocket or HTTP, counts once against ``limits.max_sessions``, and one more is refused with an
error frame of code ``CAPACITY_REACHED``). ``/reset``, ``/step`` and ``/state`` build a fresh
env for every request, so they suit a smoke test, not an episode. ``/health``, ``/metadata``,
``/schema``, ``/mcp`` and the task API (``/fleet_marl/splits``, ``/fleet_marl/tasks`` ...) are
there too, and the viewer's read-only page, ``/viewer/`` (:mod:`fleet_marl.openenv.viewer`: it
follows the live sessions; its data routes need the token). The routes, the session table and
the guards are :mod:`fleet_marl.openenv.server`;
what a reset may ask is bounded by :class:`~fleet_marl.openenv.limits.ServerLimits`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import Action, Observation

from fleet_marl.openenv.ego import FleetEgoEnvironment
from fleet_marl.openenv.guard import Guard
from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.openenv.models import FleetEgoAction, FleetEgoObservation, FleetJointAction, FleetMultiObservation, FleetState
from fleet_marl.openenv.multi import FleetMultiEnvironment
from fleet_marl.openenv.server import add_routes
from fleet_marl.openenv.viewer import PAGE_PATHS, add_viewer

#: The two views and their (environment, action, observation) classes.
MODES: dict[str, tuple[type[FleetMultiEnvironment | FleetEgoEnvironment], type[Action], type[Observation]]] = {
    "multi": (FleetMultiEnvironment, FleetJointAction, FleetMultiObservation),
    "ego": (FleetEgoEnvironment, FleetEgoAction, FleetEgoObservation),
}
ENV_NAME = "fleet_marl"


def make_app(
    mode: str = "multi",
    max_sessions: int | None = None,
    task: str = "easy",
    config: dict | None = None,
    limits: ServerLimits | None = None,
    token: str | None = None,
    viewer: bool = True,
    **ego_options: Any,
):
    """A FastAPI app serving ``mode`` (``"multi"`` or ``"ego"``). ``task`` and ``config`` are the
    defaults of a reset that names none (the operator's: their traces may be any file);
    ``limits`` bound what clients may do (:class:`ServerLimits`' defaults when None;
    ``max_sessions``, when given, replaces its ``max_sessions``); ``token``, when set, is the
    bearer token every route and ``/ws`` require (the viewer's page files excepted: they hold no
    data); ``viewer`` serves the read-only page that follows the live sessions; ``ego_options`` (``ego``, ``opponents``,
    ``fallback``, ``invalid_penalty``, ``max_invalid_streak``) are the ego view's defaults."""
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: expected one of {', '.join(MODES)}")
    limits = ServerLimits() if limits is None else limits
    if max_sessions is not None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions = {max_sessions!r}: expected an integer >= 1")
        limits = dataclasses.replace(limits, max_sessions=max_sessions)
    if token is not None and (not isinstance(token, str) or not token.strip() or token != token.strip()):
        raise ValueError("token: expected a non-empty string with no surrounding whitespace")
    env_cls, action_cls, obs_cls = MODES[mode]
    if mode == "multi" and ego_options:
        raise ValueError(f"{sorted(ego_options)[0]}: an option of the ego view; the multi view takes task and config only")
    env_cls(task=task, config=config, limits=limits, **ego_options)  # bad defaults fail here, not in the first session
    factory = functools.partial(env_cls, task=task, config=config, limits=limits, **ego_options)
    # create_fastapi_app, not create_app: no optional web UI (ENABLE_WEB_INTERFACE) to reach an env
    app = create_fastapi_app(
        factory, action_cls, obs_cls, max_concurrent_envs=limits.max_sessions, env_name=ENV_NAME, state_cls=FleetState, mode="simulation"
    )
    app.state.sessions = add_routes(app, factory, action_cls, FleetState, limits)
    app.state.limits = limits
    if viewer:
        add_viewer(app, sessions=app.state.sessions)
    app.add_middleware(Guard, token=token, limits=limits, public=PAGE_PATHS if viewer else frozenset())
    return app


__all__ = ["ENV_NAME", "MODES", "ServerLimits", "make_app"]

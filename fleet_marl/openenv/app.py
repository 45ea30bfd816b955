"""The FastAPI app: OpenEnv's ``create_app`` over one of the two views.

>>> app = make_app(mode="multi", max_sessions=8, task="easy")       # doctest: +SKIP

Episodes live on the WebSocket endpoint ``/ws`` (one env per connection, at most
``max_sessions`` at once; one more is refused with an error frame of code
``CAPACITY_REACHED``). OpenEnv's HTTP ``/reset``, ``/step`` and ``/state`` build a fresh env on
every request, so they suit a smoke test, not an episode. ``/health``, ``/metadata``,
``/schema`` and the task API (``/fleet_marl/splits``, ``/fleet_marl/tasks`` ...) are there too.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from openenv.core.env_server.http_server import create_app

from fleet_marl.openenv.ego import FleetEgoEnvironment
from fleet_marl.openenv.models import FleetEgoAction, FleetEgoObservation, FleetJointAction, FleetMultiObservation, FleetState
from fleet_marl.openenv.multi import FleetMultiEnvironment

#: The two views and their (environment, action, observation) classes.
MODES = {
    "multi": (FleetMultiEnvironment, FleetJointAction, FleetMultiObservation),
    "ego": (FleetEgoEnvironment, FleetEgoAction, FleetEgoObservation),
}
ENV_NAME = "fleet_marl"


def make_app(mode: str = "multi", max_sessions: int = 8, task: str = "easy", config: Optional[dict] = None, **ego_options: Any):
    """A FastAPI app serving ``mode`` (``"multi"`` or ``"ego"``). ``task`` and ``config``
    are the defaults of a reset that names none; ``ego_options`` (``ego``, ``opponents``,
    ``fallback``, ``invalid_penalty``, ``max_invalid_streak``) those of the ego view."""
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: expected one of {', '.join(MODES)}")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions = {max_sessions!r}: expected an integer >= 1")
    env_cls, action_cls, obs_cls = MODES[mode]
    if mode == "multi" and ego_options:
        raise ValueError(f"{sorted(ego_options)[0]}: an option of the ego view; the multi view takes task and config only")
    env_cls(task=task, config=config, **ego_options)  # bad defaults fail here, not in the first session
    factory = functools.partial(env_cls, task=task, config=config, **ego_options)
    return create_app(factory, action_cls, obs_cls, env_name=ENV_NAME, max_concurrent_envs=max_sessions, state_cls=FleetState)


__all__ = ["ENV_NAME", "MODES", "make_app"]

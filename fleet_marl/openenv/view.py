"""What the two server views' environments share (:mod:`~fleet_marl.openenv.multi`,
:mod:`~fleet_marl.openenv.ego`): the session's env, the state of its episode, OpenEnv's
metadata and ``close``; and, through :class:`~fleet_marl.openenv.base.TaskAPI`, the task API."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import EnvironmentMetadata

from fleet_marl.environment import FleetParallelEnv
from fleet_marl.openenv.base import SessionEnv, TaskAPI, config_digest, fairness_report, package_version
from fleet_marl.openenv.models import FleetState, encode


class SessionView(TaskAPI):
    """A view's environment over its session's env: its subclass names its ``MODE`` and the
    ``DESCRIPTION`` of its metadata, and sets ``_session``, ``_episode_id`` and ``_steps``."""

    MODE: str
    DESCRIPTION: str
    _session: SessionEnv
    _episode_id: str | None
    _steps: int

    @property
    def env(self) -> FleetParallelEnv | None:
        """The session's round engine (under the sequential protocol, the AEC env's)."""
        return self._session.env

    def _state(self, env: FleetParallelEnv, **extra: Any) -> FleetState:
        """The state of the episode on ``env`` (the view's own fields in ``extra``)."""
        return FleetState(
            episode_id=self._episode_id,
            step_count=self._steps,
            mode=self.MODE,
            task=self._session.task,
            round=env.round,
            max_rounds=env.max_cycles,
            agents=list(env.agents),
            config_digest=config_digest(env),
            fairness=encode(fairness_report(env)),
            **extra,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="fleet_marl",
            description=self.DESCRIPTION,
            version=package_version(),
            documentation_url="docs/llm_agents.md",
        )

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


__all__ = ["SessionView"]

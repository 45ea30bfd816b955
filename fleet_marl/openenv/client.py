"""Clients of the two views, and :class:`RemoteParallelEnv`, a PettingZoo ``ParallelEnv`` over
a server of the multi view.

>>> from fleet_marl.openenv import RemoteParallelEnv
>>> env = RemoteParallelEnv.connect("http://127.0.0.1:8000", task="easy")  # doctest: +SKIP
>>> import fleet_marl.policies; policy = fleet_marl.policies.make("precision_expert", env)     # doctest: +SKIP
>>> obs, infos = env.reset(seed=0); policy.reset(0)                      # doctest: +SKIP
>>> while env.agents: obs, r, term, trunc, infos = env.step(policy.act(obs, infos))  # doctest: +SKIP

``RemoteParallelEnv`` wraps the client (it is not a ``FleetParallelEnv``): a local scenario
built from the server's config answers the static questions, the server the dynamic ones.
``FleetEnvClient`` and ``FleetEgoClient`` are OpenEnv ``EnvClient`` subclasses (async; ``.sync()``
for sync code). ``WebSocketSession`` speaks the same protocol over an open WebSocket, such as
``fastapi.testclient.TestClient(app).websocket_connect("/ws")``, so tests need no uvicorn.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar, TypeVar

import numpy as np
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from pettingzoo import ParallelEnv

from fleet_marl.checks import is_seed
from fleet_marl.config import FleetConfig, from_dict
from fleet_marl.environment import OBS_MODES, REWARD_PREFIX, ActionError, FleetParallelEnv
from fleet_marl.environment.observations import ObservedRound, observed_round
from fleet_marl.environment.spaces import DimsMask, EmptyStep, check_agent, departed, parse_action
from fleet_marl.openenv.base import config_digest
from fleet_marl.openenv.models import (
    FleetEgoAction,
    FleetEgoObservation,
    FleetJointAction,
    FleetMultiObservation,
    FleetState,
    decode,
)


def _parse(obs_cls, payload: dict[str, Any]) -> StepResult:
    data = dict(payload.get("observation", {}))
    data["reward"], data["done"] = payload.get("reward"), payload.get("done", False)
    obs = obs_cls.model_validate(data)
    return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False), metadata=payload.get("metadata"))


def auth_headers(token: str | None, headers: dict[str, str] | None = None) -> dict[str, str] | None:
    """``headers`` plus ``Authorization: Bearer <token>`` when ``token`` is set (a server started
    with ``--token`` or ``FLEET_MARL_TOKEN`` requires it on every route and on ``/ws``)."""
    if token is None:
        return headers
    if not isinstance(token, str) or not token.strip():
        raise ValueError("token: expected a non-empty string")
    return {**(headers or {}), "Authorization": f"Bearer {token}"}


_Act = TypeVar("_Act")
_Obs = TypeVar("_Obs")


class _TokenClient(EnvClient[_Act, _Obs, FleetState]):
    """OpenEnv's ``EnvClient`` with ``token=``: sent as a bearer token when the socket opens; both
    views' clients read the same :class:`FleetState`."""

    def __init__(
        self, base_url: str | None = None, *args: Any, token: str | None = None, headers: dict[str, str] | None = None, **kwargs: Any
    ):
        super().__init__(base_url, *args, headers=auth_headers(token, headers), **kwargs)

    def _parse_state(self, payload: dict[str, Any]) -> FleetState:
        return FleetState.model_validate(payload)


class FleetEnvClient(_TokenClient[FleetJointAction, FleetMultiObservation]):
    """Client of the multi view: ``FleetEnvClient(base_url="http://127.0.0.1:8000").sync()``
    (``token="..."`` for a server that requires one)."""

    def _step_payload(self, action: FleetJointAction) -> dict[str, Any]:
        return {"actions": action.actions}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[FleetMultiObservation]:
        return _parse(FleetMultiObservation, payload)


class FleetEgoClient(_TokenClient[FleetEgoAction, FleetEgoObservation]):
    """Client of the ego view: ``client.step(FleetEgoAction(text=model_output))`` (``token="..."``
    for a server that requires one)."""

    def _step_payload(self, action: FleetEgoAction) -> dict[str, Any]:
        return {"text": action.text}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[FleetEgoObservation]:
        return _parse(FleetEgoObservation, payload)


class WebSocketSession:
    """The sync client's ``reset``/``step``/``state``/``close`` over an already open WebSocket
    (anything with ``send_json`` and ``receive_json``, such as Starlette's test session). Error
    frames raise ``RuntimeError("Server error: <message> (code: <code>)")``, as ``EnvClient`` does."""

    def __init__(self, ws, mode: str = "multi"):
        if mode not in ("multi", "ego"):
            raise ValueError(f"mode = {mode!r}: expected 'multi' or 'ego'")
        self.ws = ws
        self.obs_cls = FleetMultiObservation if mode == "multi" else FleetEgoObservation

    def _call(self, message: dict) -> dict:
        self.ws.send_json(message)
        response = self.ws.receive_json()
        if response.get("type") == "error":
            data = response.get("data", {})
            raise RuntimeError(f"Server error: {data.get('message', 'Unknown error')} (code: {data.get('code', 'UNKNOWN')})")
        return response.get("data", {})

    def reset(self, **kwargs: Any) -> StepResult:
        return _parse(self.obs_cls, self._call({"type": "reset", "data": kwargs}))

    def step(self, action) -> StepResult:
        data = (
            {"actions": action.actions}
            if isinstance(action, FleetJointAction)
            else {"text": action.text}
            if isinstance(action, FleetEgoAction)
            else action
        )
        return _parse(self.obs_cls, self._call({"type": "step", "data": data}))

    def state(self) -> FleetState:
        return FleetState.model_validate(self._call({"type": "state"}))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # ws is any object with send_json: closing one already closed or gone must not raise
            self.ws.send_json({"type": "close"})


class RemoteParallelEnv(ParallelEnv):
    """A PettingZoo ``ParallelEnv`` whose episodes run on a server of the multi view.

    ``client`` is a sync client (``FleetEnvClient(...).sync()``, connected) or a
    :class:`WebSocketSession`. It wraps the client; it is not a ``FleetParallelEnv``. The
    scenario's static parts -- ``possible_agents``, ``agent_index``, the spaces, ``nvec``,
    ``config``, ``kernel_static``, ``bid_levels``, ``default_action_index``,
    ``default_actions``, ``rounds_alone`` -- come from ``scenario``, a local
    :class:`~fleet_marl.environment.FleetParallelEnv` built from the config the server sends
    at reset (its digest checked against the server's) and never reset or stepped. The
    dynamic parts (``agents``, ``round``, ``state()``, ``action_mask()``, observations,
    rewards, infos, ``episode_reports``) come from the server; ``observed_round()`` reads the server's state vector
    as the local env reads its own. So the reference policies (which need
    :class:`fleet_marl.policies.base.FleetEnvLike`) and ``fleet_marl.evaluation.run_episode``
    run unchanged. Actions are checked locally before they are sent (an
    :class:`~fleet_marl.environment.ActionError` as from the local env), and the server checks
    them again. ``fairness_report()`` asks the server; ``last_outcome`` is None and
    ``render()`` is not available remotely.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "fleet_v0", "render_modes": [], "is_parallelizable": True}
    #: the local scenario (static parts only), built by the first reset in ``__init__`` and
    #: rebuilt when the server's config changes
    scenario: FleetParallelEnv

    def __init__(self, client, task: str | None = None, config: dict | None = None, obs_mode: str = "flat"):
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode = {obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
        self.client = client
        self.task = task
        self._overrides = dict(config or {})
        self.obs_mode, self.render_mode, self.illegal_action = obs_mode, None, "veto"
        self._digest: str | None = None
        self._ready = False
        self._round = 0
        self._reports: dict = {}
        self._empty_step = EmptyStep()  # step() with no live agent: five empty dicts, warned once per episode
        self._remote_reset(seed=None)  # learn the scenario: spaces must exist before reset()
        self._ready = False
        self.agents: list[str] = []

    @classmethod
    def connect(
        cls,
        base_url: str,
        task: str | None = None,
        config: dict | None = None,
        obs_mode: str = "flat",
        token: str | None = None,
        **client_kwargs: Any,
    ) -> RemoteParallelEnv:
        """Open a WebSocket session on the server at ``base_url`` (``http://host:port``);
        ``token`` for a server that requires one."""
        client = FleetEnvClient(base_url=base_url, token=token, **client_kwargs).sync()
        client.connect()
        return cls(client, task=task, config=config, obs_mode=obs_mode)

    # --- the scenario's static parts, from the local scenario -----------------------------------

    possible_agents = property(lambda self: self.scenario.possible_agents, doc="Every agent of the scenario.")
    agent_index = property(lambda self: self.scenario.agent_index, doc="Agent -> tenant row.")
    action_spaces = property(lambda self: self.scenario.action_spaces)
    observation_spaces = property(lambda self: self.scenario.observation_spaces)
    state_space = property(lambda self: self.scenario.state_space)
    nvec = property(lambda self: self.scenario.nvec, doc="(T, 8) the action sizes.")
    config = property(lambda self: self.scenario.config, doc="The scenario's FleetConfig (the server's).")
    kernel_static = property(lambda self: self.scenario.kernel_static, doc="The scenario's KernelStatic.")
    bid_levels = property(lambda self: self.scenario.bid_levels, doc="(L,) price multipliers of bid_level.")
    default_action_index = property(lambda self: self.scenario.default_action_index, doc="(T, 8) each tenant's default action.")
    default_actions = property(lambda self: self.scenario.default_actions, doc="The default actions as kernel Actions.")
    rounds_alone = property(lambda self: self.scenario.rounds_alone, doc="(T,) Themis T_independent in rounds.")

    def observation_space(self, agent: str):
        return self.scenario.observation_space(agent)

    def action_space(self, agent: str):
        return self.scenario.action_space(agent)

    @property
    def max_cycles(self) -> int:
        return self.config.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        """Takes effect at the next reset (sent to the server as an override)."""
        if value != self.config.max_cycles:
            self._overrides["max_cycles"] = int(value)
            self._ready = False

    # --- the wire --------------------------------------------------------------------------------

    def _remote_reset(self, seed: int | None) -> tuple[dict, dict]:
        kwargs: dict[str, Any] = {"seed": seed, "config": self._overrides}
        if self.task is not None:
            kwargs["task"] = self.task
        obs: FleetMultiObservation = self.client.reset(**kwargs).observation
        if obs.config_digest != self._digest:
            cfg = from_dict(FleetConfig, decode(obs.config))
            self.scenario = FleetParallelEnv(config=cfg, obs_mode=self.obs_mode)
            if config_digest(self) != obs.config_digest:
                raise RuntimeError(
                    f"the scenario rebuilt from the server's config has digest {config_digest(self)}, the server's is {obs.config_digest}: "
                    "client and server run different fleet_marl versions?"
                )
            self._digest = obs.config_digest
        self._ready = True
        self._reports = {}
        self._empty_step.warned = False
        return self._apply(obs, with_rewards=False)

    def _apply(self, obs: FleetMultiObservation, with_rewards: bool) -> tuple[dict, dict]:
        self.agents = list(obs.agents)
        self._round = obs.round
        self._state_vec = np.asarray(obs.state, np.float32)
        self._remote_masks = {a: DimsMask(np.asarray(m, np.int8) for m in ms) for a, ms in obs.action_masks.items()}
        observations = {}
        for a, o in obs.observations.items():
            vec = np.asarray(o, np.float32)
            observations[a] = vec if self.obs_mode == "flat" else {"observation": vec, "action_mask": self._remote_masks[a]}
        infos = {}
        for a, info in obs.infos.items():
            info = decode(info)
            report = info.pop("episode", None)  # the wire carries it on the finishing step
            if report is not None:
                self._reports[a] = report
            schemes = obs.reward_schemes.get(a, {}) if with_rewards else dict.fromkeys(self.scenario.reward_schemes, 0.0)
            info = {**{REWARD_PREFIX + s: v for s, v in schemes.items()}, **info}
            if "illegal_fields" in info:
                info["illegal_fields"] = np.asarray(info["illegal_fields"], bool)
            if self.obs_mode == "flat":  # with "dict" the mask is in the observation only, as in the local env
                info["action_mask"] = self._remote_masks[a]
            infos[a] = info
        return observations, infos

    def _need_reset(self, what: str) -> None:
        if not self._ready:
            raise RuntimeError(f"{what} called before reset(): call env.reset(seed=...) first")

    # --- PettingZoo API ----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict | None = None):
        """Reset on the server. ``options`` may set ``task`` and ``config`` (overrides) for this
        and later episodes; other keys are ignored, as the local env ignores ``options``."""
        if seed is not None and not is_seed(seed):
            raise ValueError(f"reset: seed = {seed!r}: expected None or a non-negative integer")
        options = dict(options or {})
        if "task" in options:
            self.task = options.pop("task")
        if "config" in options:
            self._overrides = dict(options.pop("config") or {})
        return self._remote_reset(None if seed is None else int(seed))

    def step(self, actions: dict):
        """As ``FleetParallelEnv.step``: actions of agents that already left are dropped, and a
        step with no live agent returns five empty dicts (with a warning, once per episode)."""
        self._need_reset("step()")
        if not isinstance(actions, dict):
            raise ActionError("actions", "type", type(actions).__name__, "a dict {agent: action}")
        live = set(self.agents)
        actions = departed(actions, self.agent_index, live)
        if not self.agents:
            for a in actions:
                check_agent(a, self.agent_index, self.possible_agents, set())
            return self._empty_step()
        checked = {a: self.check_action(a, act, live).tolist() for a, act in actions.items()}
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ActionError(missing[0], "action", None, f"an action for every live agent; missing {', '.join(missing)}")
        obs: FleetMultiObservation = self.client.step(FleetJointAction(actions=checked)).observation
        observations, infos = self._apply(obs, with_rewards=True)
        return observations, dict(obs.rewards), dict(obs.terminations), dict(obs.truncations), infos

    def check_action(self, a, act, live: set | None = None) -> np.ndarray:
        """Validate one agent's action locally (as the local env does, masks aside: the server
        vetoes or caps masked choices); return its 8 indices or raise ActionError."""
        self._need_reset("step()")
        i = check_agent(a, self.agent_index, self.agents, set(self.agents) if live is None else live)
        return parse_action(a, act, self.nvec[i])

    def state(self) -> np.ndarray:
        """The server's ``state()`` vector of the round ahead."""
        self._need_reset("state()")
        return self._state_vec.copy()

    def observed_round(self, state_vector: np.ndarray | None = None, include_queued_jobs: bool = False) -> ObservedRound:
        """What ``state_vector`` (default: the server's ``state()``) says of the round ahead,
        read as ``FleetParallelEnv.observed_round`` reads it."""
        return observed_round(self.kernel_static, self.state() if state_vector is None else state_vector, include_queued_jobs)

    def action_mask(self, agent: str) -> tuple:
        if agent not in self.agent_index:
            raise KeyError(f"unknown agent {agent!r}: expected one of {', '.join(self.possible_agents)}")
        self._need_reset("action_mask()")
        if agent not in self._remote_masks:
            raise KeyError(f"{agent}: no mask this round (it finished earlier); live: {', '.join(self.agents)}")
        return self._remote_masks[agent]

    @property
    def round(self) -> int:
        """Rounds played in this episode (the server's count)."""
        return self._round

    @property
    def episode_reports(self) -> dict:
        """``{agent: report}`` of the agents that have finished this episode (the server's
        reports, as ``FleetParallelEnv.episode_reports``)."""
        self._need_reset("episode_reports")
        return dict(self._reports)

    @property
    def last_outcome(self):
        """None: the kernel's outcome stays on the server."""
        return None

    def fairness_report(self) -> dict:
        """The server's fairness report of the episode so far (``FleetState.fairness``)."""
        return decode(self.client.state().fairness)

    def render(self):
        raise NotImplementedError("RemoteParallelEnv does not render: the episode runs on the server (use fleet-marl demo locally)")

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if callable(close):
            close()


__all__ = ["FleetEgoClient", "FleetEnvClient", "RemoteParallelEnv", "WebSocketSession", "auth_headers"]

"""The multi-agent view: every tenant of a :class:`FleetParallelEnv`, over OpenEnv.

========  =========================================================================================
reset     ``seed`` (None continues the session's seed sequence), ``task`` (or the task API's
          ``split`` and ``index``), ``config`` (overrides of any config field, as
          ``fleet_marl.parallel_env(**config)`` takes them; e.g. ``{"reward_scheme": "global"}``)
action    :class:`FleetJointAction`: ``{"actions": {agent: [8 ints]}}`` for every live agent
obs       :class:`FleetMultiObservation`: per-agent observations, rewards (configured scheme and
          every scheme), terminations, truncations, action masks, infos, ``state()``; the scalar
          ``reward`` is the round's global welfare; ``done`` when every agent has finished
state     :class:`FleetState`: round, live agents, config digest, fairness report
========  =========================================================================================

A rejected step (unknown agent, wrong shape, out of range, missing agent) is an error whose
message is the env's :class:`~fleet_marl.environment.ActionError` text, and changes nothing:
the env validates every action before it touches its state.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from openenv.core.env_server.interfaces import Environment

from fleet_marl.environment import ACTION_FIELDS, N_ACT, REWARD_PREFIX, ActionError, FleetParallelEnv, scheme_rewards
from fleet_marl.errors import ClientError, short_repr
from fleet_marl.openenv.base import (
    SessionEnv,
    check_episode_id,
    check_reset_args,
    check_seed,
    config_digest,
    resolve_task,
)
from fleet_marl.openenv.limits import ServerLimits, trace_values
from fleet_marl.openenv.models import FleetJointAction, FleetMultiObservation, FleetState, encode
from fleet_marl.openenv.view import SessionView


class FleetMultiEnvironment(SessionView, Environment):
    """One WebSocket session of the multi-agent view. ``task`` and ``config`` are the
    defaults of a reset that names none; ``limits`` bound what a reset may build
    (:class:`~fleet_marl.openenv.limits.ServerLimits`, its defaults when None)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    MODE = "multi"
    DESCRIPTION = "Tenants negotiate for one shared GPU cluster (PettingZoo fleet_v0); multi-agent view: a joint action per round."

    def __init__(self, task: str = "easy", config: dict | None = None, limits: ServerLimits | None = None):
        super().__init__()
        self.default_task, self.default_config = task, dict(config or {})
        resolve_task(task, None, None, task)
        self._session = SessionEnv(limits, trace_values(self.default_config))
        self._episode_id: str | None = None
        self._steps = 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: str | None = None,
        config: dict | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> FleetMultiObservation:
        check_reset_args(kwargs)
        seed, episode_id = check_seed(seed), check_episode_id(episode_id)
        name = resolve_task(task, split, index, self.default_task)
        if config is not None and not isinstance(config, dict):
            raise ClientError(f"reset: config = {short_repr(config)}: expected an object of config overrides")
        env = self._session.get(name, {**self.default_config, **(config or {})})
        obs, infos = env.reset(seed=seed)
        self._episode_id = episode_id or str(uuid.uuid4())
        self._steps = 0
        out = self._observation(env, obs, None, None, None, infos, welfare=0.0)
        out.config = encode(env.config.to_dict())
        return out

    def step(self, action: FleetJointAction, timeout_s: float | None = None, **kwargs: Any) -> FleetMultiObservation:
        env = self.env
        if env is None:
            raise RuntimeError("step() called before reset(): send a reset first")
        actions = {}
        for a, v in action.actions.items():
            numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            if not numeric and a in env.agents:  # name the value as sent, not as a numpy array
                raise ActionError(a, "action", v, f"a list of {N_ACT} integers ({', '.join(ACTION_FIELDS)})")
            actions[a] = np.asarray(v) if numeric else np.zeros(0)
        obs, rewards, terms, truncs, infos = env.step(actions)  # ActionError: nothing changed
        self._steps += 1
        welfare = next(iter(infos.values()))["welfare"] if infos else 0.0
        return self._observation(env, obs, rewards, terms, truncs, infos, welfare=welfare)

    def _observation(self, env: FleetParallelEnv, obs, rewards, terms, truncs, infos, welfare: float) -> FleetMultiObservation:
        masks = {a: [m.tolist() for m in env.action_mask(a)] for a in obs}
        # the wire's infos: the env's, less the mask and the rewards (both sent apart), plus the
        # episode report on an agent's finishing step (the env keeps it in env.episode_reports)
        reports = env.episode_reports if terms or truncs else {}
        clean = {}
        for a, info in infos.items():
            wire = {k: v for k, v in info.items() if k != "action_mask" and not k.startswith(REWARD_PREFIX)}
            if (terms or {}).get(a) or (truncs or {}).get(a):
                wire["episode"] = reports[a]
            clean[a] = encode(wire)
        return FleetMultiObservation(
            agents=list(env.agents),
            possible_agents=list(env.possible_agents),
            observations={a: np.asarray(o, np.float64).tolist() for a, o in obs.items()},
            rewards={a: float(r) for a, r in (rewards or {}).items()},
            reward_schemes={a: {s: float(v) for s, v in scheme_rewards(info).items()} for a, info in infos.items()} if rewards else {},
            terminations={a: bool(t) for a, t in (terms or {}).items()},
            truncations={a: bool(t) for a, t in (truncs or {}).items()},
            action_masks=masks,
            infos=clean,
            state=np.asarray(env.state(), np.float64).tolist(),
            round=env.round,
            task=self._session.task,
            config_digest=config_digest(env),
            reward=float(welfare),
            done=not env.agents,
            metadata={"welfare": float(welfare), "scheme": env.config.reward.scheme},
        )

    @property
    def state(self) -> FleetState:
        env = self.env
        if env is None:
            return FleetState(episode_id=self._episode_id, step_count=0, mode="multi", task=None)
        return self._state(env)


__all__ = ["FleetMultiEnvironment"]

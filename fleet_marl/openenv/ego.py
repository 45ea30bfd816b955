"""The single-tenant view for LLM agents: one ``ego`` tenant reads a text prompt and answers
with JSON text; a reference policy (``fleet_marl.policies``) plays every other tenant.

========  =========================================================================================
reset     ``seed``, ``task`` (or ``split``/``index``), ``config`` (overrides, e.g.
          ``{"reward_scheme": "difference"}``), ``ego`` (``"tenant_1"``, an index, or
          ``"random"``: drawn from the seed), ``opponents`` (a ``fleet_marl.policies.POLICIES`` name),
          ``fallback`` (``"default"`` or ``"idle"``), ``invalid_penalty``, ``max_invalid_streak``
action    :class:`FleetEgoAction`: ``{"text": "<the model's raw answer>"}``
obs       :class:`FleetEgoObservation`: ``prompt`` (deterministic text: workload and budget, what
          it holds, the cluster, the legal choices, the JSON Schema of the answer), a structured
          copy (``tenant``, ``cluster``, ``legal``, ``action_schema``), ``last_action``,
          ``last_action_error``, ``invalid_actions``, ``invalid_streak``
reward    the ego's reward in the configured scheme, minus ``invalid_penalty`` after an invalid
          answer; ``metadata["rewards"]`` has every scheme
done      the ego has finished (terminated or truncated), or ``max_invalid_streak`` invalid
          answers in a row (``metadata["truncated_by_invalid"]``)
========  =========================================================================================

Under the sequential protocol (``config`` ``{"protocol": "sequential", "turn_order": ...}``;
``fleet_marl.env(protocol="sequential")``) the opponents before the ego in each round's order
claim first, the ego's prompt lists their claims (GPUs and bid, on its pool and the others)
and its place in the order, and the opponents after it claim once it has answered; the round
clears after the last claim, and the step's reward is the ego's for that round.

An invalid answer -- no JSON, invalid JSON, an unknown or missing field, a value out of range,
a choice the action mask forbids, a text over 64 KiB -- is not an error of the session: the
fallback action runs in its place, the penalty is subtracted, and ``last_action_error`` says
what was wrong (the exact texts are in docs/llm_agents.md).

The prompt and its structured copy are :mod:`fleet_marl.openenv.prompt`'s (:func:`describe`,
:func:`render_prompt`, importable from here too).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from openenv.core.env_server.interfaces import Environment

from fleet_marl.config import FleetConfig
from fleet_marl.environment import ACTION_FIELDS, FleetParallelEnv, FleetSequentialEnv, scheme_rewards
from fleet_marl.errors import ClientError, short_repr
from fleet_marl.openenv.base import (
    SessionEnv,
    check_episode_id,
    check_reset_args,
    check_seed,
    config_digest,
    resolve_task,
)
from fleet_marl.openenv.cost import check_work
from fleet_marl.openenv.limits import ServerLimits, trace_values
from fleet_marl.openenv.models import FleetEgoAction, FleetEgoObservation, FleetState, encode
from fleet_marl.openenv.prompt import describe, render_prompt
from fleet_marl.openenv.text_action import TextActionError, action_json_schema, check_mask, from_indices, parse_tenant_action, to_indices
from fleet_marl.openenv.view import SessionView
from fleet_marl.policies import POLICIES, BasePolicy
from fleet_marl.policies import make as make_policy

FALLBACKS = ("default", "idle")
#: (rewards, terminations, truncations, infos) of one step, by agent.
StepDicts = tuple[dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]


class FleetEgoEnvironment(SessionView, Environment):
    """One WebSocket session of the single-tenant view. The constructor's arguments are the
    defaults of a reset that does not name them; ``limits`` bound what a reset may build
    (:class:`~fleet_marl.openenv.limits.ServerLimits`, its defaults when None)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    MODE = "ego"
    DESCRIPTION = "Tenants negotiate for one shared GPU cluster; single-tenant view for LLM agents: a text prompt in, JSON text out."

    def __init__(
        self,
        task: str = "easy",
        config: dict | None = None,
        ego: Any = "tenant_0",
        opponents: str = "precision_expert",
        fallback: str = "default",
        invalid_penalty: float = 1.0,
        max_invalid_streak: int = 3,
        limits: ServerLimits | None = None,
    ):
        super().__init__()
        self.defaults = {
            "task": task,
            "config": dict(config or {}),
            "ego": ego,
            "opponents": opponents,
            "fallback": fallback,
            "invalid_penalty": invalid_penalty,
            "max_invalid_streak": max_invalid_streak,
        }
        self._check_options(opponents, fallback, invalid_penalty, max_invalid_streak)
        resolve_task(task, None, None, task)
        self._session = SessionEnv(limits, trace_values(self.defaults["config"]))
        self._policy: BasePolicy | None = None
        self._policy_key: str | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._done = True
        self.ego: str | None = None
        self._seq: FleetSequentialEnv | None = None  # the sequential protocol's AEC env, when the config asks for it
        # the episode's options (set again by each reset) and what the ego last saw and did
        self.fallback, self.penalty, self.max_streak = fallback, float(invalid_penalty), int(max_invalid_streak)
        self._obs: dict[str, Any] = {}
        self._infos: dict[str, dict] = {}
        self._invalid = self._streak = 0
        self._last_action: dict | None = None

    @staticmethod
    def _check_options(opponents: Any, fallback: Any, invalid_penalty: Any, max_invalid_streak: Any) -> None:
        if opponents not in POLICIES:
            raise ClientError(f"opponents = {short_repr(opponents)}: expected one of {', '.join(POLICIES)}")
        if fallback not in FALLBACKS:
            raise ClientError(f"fallback = {short_repr(fallback)}: expected one of {', '.join(FALLBACKS)}")
        if (
            isinstance(invalid_penalty, bool)
            or not isinstance(invalid_penalty, (int, float))
            or not np.isfinite(invalid_penalty)
            or invalid_penalty < 0
        ):
            raise ClientError(f"invalid_penalty = {short_repr(invalid_penalty)}: expected a finite number >= 0")
        if isinstance(max_invalid_streak, bool) or not isinstance(max_invalid_streak, int) or max_invalid_streak < 1:
            raise ClientError(f"max_invalid_streak = {short_repr(max_invalid_streak)}: expected an integer >= 1")

    # --- OpenEnv API ------------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: str | None = None,
        config: dict | None = None,
        split: str | None = None,
        index: int | None = None,
        ego: Any = None,
        opponents: str | None = None,
        fallback: str | None = None,
        invalid_penalty: float | None = None,
        max_invalid_streak: int | None = None,
        **kwargs: Any,
    ) -> FleetEgoObservation:
        check_reset_args(kwargs, ("ego", "opponents", "fallback", "invalid_penalty", "max_invalid_streak"))
        d = self.defaults
        opponents = d["opponents"] if opponents is None else opponents
        fallback = d["fallback"] if fallback is None else fallback
        invalid_penalty = d["invalid_penalty"] if invalid_penalty is None else invalid_penalty
        max_invalid_streak = d["max_invalid_streak"] if max_invalid_streak is None else max_invalid_streak
        self._check_options(opponents, fallback, invalid_penalty, max_invalid_streak)
        seed, episode_id = check_seed(seed), check_episode_id(episode_id)
        name = resolve_task(task, split, index, d["task"])
        if config is not None and not isinstance(config, dict):
            raise ClientError(f"reset: config = {short_repr(config)}: expected an object of config overrides")
        ego = d["ego"] if ego is None else ego

        def check(cfg: FleetConfig) -> None:  # before the session's env changes: a refused reset changes nothing
            self._resolve_ego([f"tenant_{i}" for i in range(len(cfg.tenants))], ego, seed)
            check_work(cfg, self._session.limits, opponents)

        env = self._session.get(name, {**d["config"], **(config or {})}, sequential=True, check=check)
        self._seq = self._session.aec
        ego_id = self._resolve_ego(env.possible_agents, ego, seed)
        if self._seq is not None:
            self._seq.reset(seed=seed)
            obs, infos = {}, {}
        else:
            obs, infos = env.reset(seed=seed)
        policy = self._policy
        if policy is None or self._policy_key != opponents or policy.env is not env:
            policy, self._policy_key = make_policy(opponents, env), opponents
            self._policy = policy
        policy.reset(seed)
        self.ego, self.fallback, self.penalty, self.max_streak = ego_id, fallback, float(invalid_penalty), int(max_invalid_streak)
        self._obs, self._infos = obs, infos
        if self._seq is not None:
            self._to_ego_turn(self._seq, ego_id, policy)
        self._episode_id = episode_id or str(uuid.uuid4())
        self._steps = self._invalid = self._streak = 0
        self._done = False
        self._last_action = None
        return self._observation(env, ego_id, reward=None, error=None, meta={"config_digest": config_digest(env), "opponents": opponents})

    def step(self, action: FleetEgoAction, timeout_s: float | None = None, **kwargs: Any) -> FleetEgoObservation:
        env, ego, policy = self.env, self.ego, self._policy
        if env is None or ego is None or policy is None:
            raise RuntimeError("step() called before reset(): send a reset first")
        if self._done:
            raise RuntimeError("the episode is over: send a reset to start a new one")
        i = env.agent_index[ego]
        mask = env.action_mask(ego)
        error = None
        try:
            parsed = parse_tenant_action(action.text, env.bid_levels, int(env.kernel_static.max_gpus[i]))
            idx = to_indices(parsed, env.bid_levels)
            check_mask(idx, mask)
        except TextActionError as exc:
            error = str(exc)
            idx = self._fallback(env, i, mask)
        if self._seq is not None:
            rewards, terms, truncs, infos = self._sequential_round(self._seq, env, ego, policy, idx)
        else:
            joint = policy.act(self._obs, self._infos)
            actions = {a: joint[a] for a in env.agents if a != ego}
            actions[ego] = idx
            obs, rewards, terms, truncs, infos = env.step(actions)
            self._obs, self._infos = obs, infos
        self._steps += 1
        self._last_action = from_indices(idx, env.bid_levels).to_dict()
        if error is None:
            self._streak = 0
        else:
            self._invalid += 1
            self._streak += 1
        info = infos[ego]
        reward = float(rewards[ego]) - (self.penalty if error else 0.0)
        by_invalid = self._streak >= self.max_streak
        self._done = bool(terms[ego] or truncs[ego] or by_invalid or not env.agents)
        meta = {
            "rewards": {s: float(v) for s, v in scheme_rewards(info).items()},
            "scheme": env.config.reward.scheme,
            "penalty": self.penalty if error else 0.0,
            "welfare": float(info["welfare"]),
            "terminated": bool(terms[ego]),
            "truncated": bool(truncs[ego]) or by_invalid,
            "truncated_by_invalid": by_invalid,
            "illegal": [ACTION_FIELDS[k] for k in np.flatnonzero(info["illegal_fields"])],  # the masked fields by name
        }
        if terms[ego] or truncs[ego]:
            meta["episode"] = encode(env.episode_reports[ego])
        return self._observation(env, ego, reward=reward, error=error, meta=meta)

    @property
    def state(self) -> FleetState:
        env = self.env
        if env is None or self.ego is None:
            return FleetState(episode_id=self._episode_id, step_count=0, mode="ego")
        return self._state(env, ego=self.ego, invalid_actions=self._invalid)

    # --- the sequential protocol --------------------------------------------------------------------

    @staticmethod
    def _opponent_turn(seq: FleetSequentialEnv, policy: BasePolicy) -> None:
        """The tenant whose turn it is (not the ego) claims, or steps None if it has finished."""
        a = seq.agent_selection
        obs, _, term, trunc, info = seq.last()
        seq.step(None if term or trunc else policy.act({a: obs}, {a: info})[a])

    def _to_ego_turn(self, seq: FleetSequentialEnv, ego: str, policy: BasePolicy) -> None:
        """Play the opponents' turns up to the ego's (its observation then holds the claims
        before it); stop if the episode ends first."""
        while seq.agents and seq.agent_selection != ego:
            self._opponent_turn(seq, policy)
        if seq.agents:
            obs, _, _, _, info = seq.last()
            self._obs, self._infos = {ego: obs}, {ego: info}

    def _sequential_round(self, seq: FleetSequentialEnv, env: FleetParallelEnv, ego: str, policy: BasePolicy, idx: np.ndarray) -> StepDicts:
        """The ego claims ``idx``, the opponents after it claim, the round clears (``env``,
        ``seq``'s round engine, counts it): returns its (rewards, terminations, truncations,
        infos); then on to the ego's next turn."""
        r0 = env.round
        seq.step(idx)
        while env.round == r0:
            self._opponent_turn(seq, policy)
        out: StepDicts = dict(seq.rewards), dict(seq.terminations), dict(seq.truncations), dict(seq.infos)
        if out[1][ego] or out[2][ego]:
            self._obs, self._infos = {ego: seq.observe(ego)}, {ego: out[3][ego]}
        else:
            self._to_ego_turn(seq, ego, policy)
        return out

    def _turn(self, ego: str) -> dict | None:
        """The ego's turn under the sequential protocol: its place, the claims before it."""
        seq = self._seq
        if seq is None or self._done or seq.agent_selection != ego or not seq.agents:
            return None
        order = seq.turn_sequence
        k = order.index(ego)
        claims = [{"agent": a, "gpu_type": c["pool"], "gpus": c["gpus"], "bid": c["bid"]} for a, c in seq.claims.items()]
        return {"turn_order": seq.turn_order, "position": k + 1, "turns": len(order), "claims_before": claims, "after": order[k + 1 :]}

    # --- helpers ------------------------------------------------------------------------------------

    @staticmethod
    def _resolve_ego(agents: list, ego: Any, seed: int | None) -> str:
        if ego == "random":
            return agents[int(np.random.default_rng(seed).integers(len(agents)))]
        if isinstance(ego, int) and not isinstance(ego, bool) and 0 <= ego < len(agents):
            return agents[ego]
        if isinstance(ego, str) and ego in agents:
            return ego
        raise ClientError(
            f"reset: ego = {short_repr(ego)}: expected one of {', '.join(agents)}, an index in [0, {len(agents) - 1}], or 'random'"
        )

    def _fallback(self, env: FleetParallelEnv, i: int, mask: Any) -> np.ndarray:
        """The fallback action, made legal: ``default`` is the env's documented default action
        (fair share, list price, BF16, the largest batch that fits) with its GPU count capped by
        the mask; ``idle`` asks for no GPU."""
        idx = np.array(env.default_action_index[i], np.int64)
        if self.fallback == "idle":
            idx[0], idx[-1] = 0, 0
        gm = np.asarray(mask[0])
        if not gm[idx[0]]:
            idx[0] = int(np.flatnonzero(gm[: idx[0] + 1])[-1])
        return idx

    def _observation(self, env: FleetParallelEnv, ego: str, reward: float | None, error: str | None, meta: dict) -> FleetEgoObservation:
        i = env.agent_index[ego]
        tenant, cluster, legal = describe(env, ego, self._obs.get(ego), self._infos.get(ego, {}), self._turn(ego))
        schema = action_json_schema(env.bid_levels, int(env.kernel_static.max_gpus[i]), legal["precisions"])
        prompt = render_prompt(tenant, cluster, legal, schema, self._last_action, error)
        return FleetEgoObservation(
            prompt=prompt,
            ego=ego,
            round=env.round,
            max_rounds=env.max_cycles,
            tenant=encode(tenant),
            cluster=encode(cluster),
            legal=encode(legal),
            action_schema=schema,
            last_action=self._last_action,
            last_action_error=error,
            invalid_actions=self._invalid,
            invalid_streak=self._streak,
            reward=reward,
            done=self._done,
            metadata=meta,
        )


__all__ = ["FALLBACKS", "FleetEgoEnvironment", "describe", "render_prompt"]

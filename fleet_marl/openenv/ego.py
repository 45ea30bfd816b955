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
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from fleet_marl import catalog
from fleet_marl.environment import ACTION_FIELDS, OBS_FIELDS, FleetParallelEnv, FleetSequentialEnv, scheme_rewards
from fleet_marl.environment.observations import unsquash
from fleet_marl.errors import short_repr
from fleet_marl.openenv.base import (
    SessionEnv,
    TaskAPI,
    check_episode_id,
    check_seed,
    config_digest,
    fairness_report,
    package_version,
    resolve_task,
)
from fleet_marl.openenv.limits import ServerLimits, check_opponents, trace_values
from fleet_marl.openenv.models import FleetEgoAction, FleetEgoObservation, FleetState, encode
from fleet_marl.openenv.text_action import (
    BATCH_SIZES,
    GROUP_KEYS,
    MAX_CHARS,
    TextActionError,
    action_json_schema,
    bid_names,
    check_mask,
    from_indices,
    parse_tenant_action,
    to_indices,
)
from fleet_marl.policies import POLICIES
from fleet_marl.policies import make as make_policy

FALLBACKS = ("default", "idle")
_O = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}


def _r(x: float, nd: int = 3) -> float:
    return float(round(float(x), nd))


class FleetEgoEnvironment(TaskAPI, Environment):
    """One WebSocket session of the single-tenant view. The constructor's arguments are the
    defaults of a reset that does not name them; ``limits`` bound what a reset may build
    (:class:`~fleet_marl.openenv.limits.ServerLimits`, its defaults when None)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

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
        self.defaults = dict(
            task=task,
            config=dict(config or {}),
            ego=ego,
            opponents=opponents,
            fallback=fallback,
            invalid_penalty=invalid_penalty,
            max_invalid_streak=max_invalid_streak,
        )
        self._check_options(opponents, fallback, invalid_penalty, max_invalid_streak)
        resolve_task(task, None, None, task)
        self._session = SessionEnv(limits, trace_values(self.defaults["config"]))
        self._policy = None
        self._policy_key = None
        self._episode_id: str | None = None
        self._steps = 0
        self._done = True
        self.ego: str | None = None
        self._seq: FleetSequentialEnv | None = None  # the sequential protocol's AEC env, when the config asks for it

    @property
    def env(self) -> FleetParallelEnv | None:
        """The session's round engine (under the sequential protocol, the AEC env's)."""
        e = self._session.env
        return e.env if isinstance(e, FleetSequentialEnv) else e

    @staticmethod
    def _check_options(opponents, fallback, invalid_penalty, max_invalid_streak) -> None:
        if opponents not in POLICIES:
            raise ValueError(f"opponents = {short_repr(opponents)}: expected one of {', '.join(POLICIES)}")
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback = {short_repr(fallback)}: expected one of {', '.join(FALLBACKS)}")
        if (
            isinstance(invalid_penalty, bool)
            or not isinstance(invalid_penalty, (int, float))
            or not np.isfinite(invalid_penalty)
            or invalid_penalty < 0
        ):
            raise ValueError(f"invalid_penalty = {short_repr(invalid_penalty)}: expected a finite number >= 0")
        if isinstance(max_invalid_streak, bool) or not isinstance(max_invalid_streak, int) or max_invalid_streak < 1:
            raise ValueError(f"max_invalid_streak = {short_repr(max_invalid_streak)}: expected an integer >= 1")

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
        if kwargs:
            raise ValueError(
                f"reset: unknown argument {short_repr(sorted(kwargs)[0])}: expected seed, episode_id, task, config, split, index, "
                "ego, opponents, fallback, invalid_penalty, max_invalid_streak"
            )
        d = self.defaults
        opponents = d["opponents"] if opponents is None else opponents
        fallback = d["fallback"] if fallback is None else fallback
        invalid_penalty = d["invalid_penalty"] if invalid_penalty is None else invalid_penalty
        max_invalid_streak = d["max_invalid_streak"] if max_invalid_streak is None else max_invalid_streak
        self._check_options(opponents, fallback, invalid_penalty, max_invalid_streak)
        seed, episode_id = check_seed(seed), check_episode_id(episode_id)
        name = resolve_task(task, split, index, d["task"])
        if config is not None and not isinstance(config, dict):
            raise ValueError(f"reset: config = {short_repr(config)}: expected an object of config overrides")
        ego = d["ego"] if ego is None else ego

        def check(cfg) -> None:  # before the session's env changes: a refused reset changes nothing
            self._resolve_ego([f"tenant_{i}" for i in range(len(cfg.tenants))], ego, seed)
            check_opponents(opponents, cfg, self._session.limits)

        raw = self._session.get(name, {**d["config"], **(config or {})}, sequential=True, check=check)
        self._seq = raw if isinstance(raw, FleetSequentialEnv) else None
        env = self.env
        ego_id = self._resolve_ego(env.possible_agents, ego, seed)
        if self._seq is not None:
            self._seq.reset(seed=seed)
            obs, infos = {}, {}
        else:
            obs, infos = env.reset(seed=seed)
        if self._policy is None or self._policy_key != opponents or self._policy.env is not env:
            self._policy, self._policy_key = make_policy(opponents, env), opponents
        self._policy.reset(seed)
        self.ego, self.fallback, self.penalty, self.max_streak = ego_id, fallback, float(invalid_penalty), int(max_invalid_streak)
        self._obs, self._infos = obs, infos
        if self._seq is not None:
            self._to_ego_turn()
        self._episode_id = episode_id or str(uuid.uuid4())
        self._steps = self._invalid = self._streak = 0
        self._done = False
        self._last_action = None
        return self._observation(env, reward=None, error=None, meta={"config_digest": config_digest(env), "opponents": opponents})

    def step(self, action: FleetEgoAction, timeout_s: float | None = None, **kwargs: Any) -> FleetEgoObservation:
        env = self.env
        if env is None or self.ego is None:
            raise RuntimeError("step() called before reset(): send a reset first")
        if self._done:
            raise RuntimeError("the episode is over: send a reset to start a new one")
        ego, i = self.ego, env.agent_index[self.ego]
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
            rewards, terms, truncs, infos = self._sequential_round(idx)
        else:
            joint = self._policy.act(self._obs, self._infos)
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
        return self._observation(env, reward=reward, error=error, meta=meta)

    @property
    def state(self) -> FleetState:
        env = self.env
        if env is None or self.ego is None:
            return FleetState(episode_id=self._episode_id, step_count=0, mode="ego")
        return FleetState(
            episode_id=self._episode_id,
            step_count=self._steps,
            mode="ego",
            task=self._session.task,
            round=env.round,
            max_rounds=env.max_cycles,
            agents=list(env.agents),
            config_digest=config_digest(env),
            fairness=encode(fairness_report(env)),
            ego=self.ego,
            invalid_actions=self._invalid,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="fleet_marl",
            description="Tenants negotiate for one shared GPU cluster; single-tenant view for LLM agents: a text prompt in, JSON text out.",
            version=package_version(),
            documentation_url="docs/llm_agents.md",
        )

    def close(self) -> None:
        if self.env is not None:
            self.env.close()

    # --- the sequential protocol --------------------------------------------------------------------

    def _opponent_turn(self) -> None:
        """The tenant whose turn it is (not the ego) claims, or steps None if it has finished."""
        seq = self._seq
        a = seq.agent_selection
        obs, _, term, trunc, info = seq.last()
        seq.step(None if term or trunc else self._policy.act({a: obs}, {a: info})[a])

    def _to_ego_turn(self) -> None:
        """Play the opponents' turns up to the ego's (its observation then holds the claims
        before it); stop if the episode ends first."""
        seq = self._seq
        while seq.agents and seq.agent_selection != self.ego:
            self._opponent_turn()
        if seq.agents:
            obs, _, _, _, info = seq.last()
            self._obs, self._infos = {self.ego: obs}, {self.ego: info}

    def _sequential_round(self, idx: np.ndarray):
        """The ego claims ``idx``, the opponents after it claim, the round clears: returns its
        (rewards, terminations, truncations, infos); then on to the ego's next turn."""
        seq, ego = self._seq, self.ego
        r0 = self.env.round
        seq.step(idx)
        while self.env.round == r0:
            self._opponent_turn()
        out = dict(seq.rewards), dict(seq.terminations), dict(seq.truncations), dict(seq.infos)
        if out[1][ego] or out[2][ego]:
            self._obs, self._infos = {ego: seq.observe(ego)}, {ego: out[3][ego]}
        else:
            self._to_ego_turn()
        return out

    def _turn(self) -> dict | None:
        """The ego's turn under the sequential protocol: its place, the claims before it."""
        seq = self._seq
        if seq is None or self._done or seq.agent_selection != self.ego or not seq.agents:
            return None
        order = seq.turn_sequence
        k = order.index(self.ego)
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
        raise ValueError(
            f"reset: ego = {short_repr(ego)}: expected one of {', '.join(agents)}, an index in [0, {len(agents) - 1}], or 'random'"
        )

    def _fallback(self, env: FleetParallelEnv, i: int, mask) -> np.ndarray:
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

    def _observation(self, env: FleetParallelEnv, reward, error, meta) -> FleetEgoObservation:
        ego, i = self.ego, env.agent_index[self.ego]
        tenant, cluster, legal = describe(env, ego, self._obs.get(ego), self._infos.get(ego, {}), self._turn())
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


def describe(env: FleetParallelEnv, ego: str, obs, info: dict, turn: dict | None = None) -> tuple[dict, dict, dict]:
    """The structured view of ``ego``: (tenant, cluster, legal choices), from the env's public
    members (``kernel_static``, ``config``, ``last_outcome``, ``action_mask``) and the ego's
    observation and info; ``turn`` (the sequential protocol: its place in the round's order and
    the claims before it) goes into ``cluster["turn"]``."""
    st, cfg = env.kernel_static, env.config
    i = env.agent_index[ego]
    spec = cfg.tenants[i]
    o = env.last_outcome
    x = np.asarray(obs if obs is not None else np.zeros(len(OBS_FIELDS)), np.float64)
    hours = st.round_seconds / 3600.0
    train = bool(st.is_train[i])
    max_g = int(st.max_gpus[i])
    tenant: dict = {
        "agent": ego,
        "kind": "train" if train else "serve",
        "model": spec.model,
        "parameters_billion": _r(st.params[i].sum() / 1e9, 3),
        "gpu_type": spec.gpu_type,
        "priority": float(st.priority[i]),
        "max_gpus": max_g,
        "budget_usd": _r(st.budget[i], 2),
        "budget_left_usd": _r(o.budget_next[i] if o is not None else st.budget[i], 2),
        "list_price_usd_per_gpu_hour": _r(st.list_price[i], 2),
        "cost_of_max_gpus_per_round_usd": _r(max_g * st.list_price[i] * hours, 3),
        "held_gpus": int(round(x[_O["held"]] * max_g)),
        "fair_share_gpus": _r(x[_O["fair_share"]] * max_g, 2),
        "starvation_streak": int(info.get("starvation_streak", 0)),
    }
    if train:
        tenant["workload"] = {
            "job_tokens": float(st.job_tokens[i]),
            "seq_len": int(st.seq_len[i]),
            "job_tokens_left": _r(x[_O["job_left"]] * st.job_tokens[i] if obs is not None else st.job_tokens[i], 0),  # 0 between jobs
            "jobs_waiting": int(round(float(unsquash(x[_O["jobs_waiting"]])))),  # the env's inverse of its squash
        }
    else:
        tenant["workload"] = {
            "requests_per_s": _r(st.arrival_rate[i], 3),
            "prompt_tokens": int(st.prompt_tokens[i]),
            "output_tokens": int(st.output_tokens[i]),
            "slo_ttft_s": float(st.slo_ttft_s[i]),
            "slo_tpot_s": float(st.slo_tpot_s[i]),
            "queue_requests": _r(o.queue_next[i] if o is not None else 0.0, 1),
        }
    if o is not None:
        tenant["last_round"] = {
            "requested_gpus": int(o.requested[i]),
            "granted_gpus": int(o.alloc[i]),
            "price_usd_per_gpu_hour": _r(o.price[i], 3),
            "spend_usd": _r(o.spend[i], 3),
            "utility": _r(o.utility[i], 4),
            "oom": bool(o.oom[i]),
            "vetoed": bool(o.vetoed[i]),
            "unsafe_numerics": bool(o.unsafe_numerics[i]),
            "projected": bool(o.projected[i]),
            "throttle": _r(o.throttle[i], 3),
            "restarted": bool(o.restarted[i]),
            "memory_used": _r(o.mem_total[i] / o.mem_capacity[i], 3) if o.alloc[i] > 0 else 0.0,
            "tokens_per_s": _r(o.tokens_per_s[i], 1),
            "run": from_indices(_run_indices(env, o, i), env.bid_levels).to_dict()["precision"] if o.alloc[i] > 0 else None,
        }
        if not train:
            tenant["last_round"]["slo_attainment"] = _r(o.slo_attainment[i], 3)
    pool = int(st.pool[i])
    same = np.flatnonzero(st.pool == pool)
    cap = int(st.pool_capacity[pool])
    cluster: dict = {
        "round": env.round,
        "max_rounds": env.max_cycles,
        "mechanism": cfg.arbiter.mechanism,
        "safety_mode": cfg.safety.mode,
        "gpu_type": spec.gpu_type,
        "pool_capacity_gpus": cap,
        "tenants_on_pool": int(same.size),
        "live_tenants": len(env.agents),
        "tenants": len(env.possible_agents),
        "throttle_temp_c": float(cfg.cluster.throttle_temp_c),
        "rack_power_cap_w": float(cfg.cluster.rack_power_cap_w),
    }
    if o is not None:
        cluster["pool_granted_gpus"] = int(o.alloc[same].sum())
        cluster["pool_requested_gpus"] = int(o.requested[same].sum())
        nodes = np.flatnonzero(np.asarray(st.node_pool) == pool)
        cluster["hottest_node_c"] = _r(np.max(o.temp_next[nodes]), 1)
        cluster["max_rack_power_w"] = _r(np.max(o.rack_power_w), 0)
    others = []
    for j, a in enumerate(env.possible_agents):
        if j == i:
            continue
        t = cfg.tenants[j]
        row = {"agent": a, "kind": t.kind, "model": t.model, "gpu_type": t.gpu_type, "live": a in env.agents}
        if o is not None:
            row["granted_gpus"] = int(o.alloc[j])
        others.append(row)
    cluster["others"] = others
    if turn is not None:
        cluster["turn"] = turn
    mask = env.action_mask(ego)
    gm = np.asarray(mask[0])
    legal = {
        "max_affordable_gpus": int(np.flatnonzero(gm)[-1]) if gm.any() else 0,
        "bids": list(bid_names(env.bid_levels)),
        "bid_multipliers": [float(b) for b in env.bid_levels],
        "batches": list(BATCH_SIZES),
        "precisions": [catalog.PRECISIONS[p] for p in np.flatnonzero(np.asarray(mask[2]))],
        "unsafe": {k: [catalog.PRECISIONS[p] for p in np.flatnonzero(catalog.UNSAFE[g])] for g, k in enumerate(GROUP_KEYS)},
    }
    return tenant, cluster, legal


def _run_indices(env, o, i) -> np.ndarray:
    idx = np.zeros(8, np.int64)
    idx[2:7] = o.precision[i]
    idx[-1] = int(np.searchsorted(np.asarray(BATCH_SIZES), max(int(o.batch[i]), 1)))
    idx[-1] = min(idx[-1], len(BATCH_SIZES) - 1)
    return idx


def render_prompt(tenant: dict, cluster: dict, legal: dict, schema: dict, last_action: dict | None, error: str | None) -> str:
    """The prompt text: a pure function of the structured view (the same view, the same text)."""
    t, c, w = tenant, cluster, tenant["workload"]
    lines = [
        f"You are {t['agent']}, a team sharing a GPU cluster with {c['tenants'] - 1} other teams. "
        f"Round {c['round'] + 1} of {c['max_rounds']}. Each round you ask for GPUs, bid for them, and choose how to run your model.",
        "",
        "## Your workload and budget",
    ]
    if t["kind"] == "train":
        lines.append(f"- Training {t['model']} ({t['parameters_billion']}B parameters) on {t['gpu_type']}; sequence length {w['seq_len']}.")
        lines.append(f"- Current job: {w['job_tokens_left']:.0f} of {w['job_tokens']:.0f} tokens left; {w['jobs_waiting']} job(s) waiting.")
    else:
        lines.append(
            f"- Serving {t['model']} ({t['parameters_billion']}B parameters) on {t['gpu_type']}: "
            f"{w['requests_per_s']} requests/s of {w['prompt_tokens']} prompt + {w['output_tokens']} output tokens."
        )
        lines.append(
            f"- SLO: time to first token <= {w['slo_ttft_s']} s, time per output token <= {w['slo_tpot_s']} s; "
            f"{w['queue_requests']:.0f} request(s) queued."
        )
    lines.append(
        f"- Budget: ${t['budget_left_usd']:.2f} left of ${t['budget_usd']:.2f}. List price ${t['list_price_usd_per_gpu_hour']:.2f} per GPU-hour; "
        f"{t['max_gpus']} GPUs for one round cost ${t['cost_of_max_gpus_per_round_usd']:.3f} at list price."
    )
    lines.append(f"- Priority {t['priority']:g}; at most {t['max_gpus']} GPUs.")
    lines += ["", "## What you hold"]
    lines.append(
        f"- {t['held_gpus']} GPU(s) held; your fair share is about {t['fair_share_gpus']:g}; starved for {t['starvation_streak']} round(s) in a row."
    )
    lr = t.get("last_round")
    if lr:
        flags = [k for k in ("oom", "vetoed", "unsafe_numerics", "projected", "restarted") if lr[k]]
        lines.append(
            f"- Last round: asked {lr['requested_gpus']}, granted {lr['granted_gpus']} at ${lr['price_usd_per_gpu_hour']:.3f}/GPU-hour "
            f"(spent ${lr['spend_usd']:.3f}); utility {lr['utility']:+.4f}; throughput {lr['tokens_per_s']:.1f} tokens/s; "
            f"memory {lr['memory_used'] * 100:.0f}% used; clock x{lr['throttle']:.2f}."
        )
        if "slo_attainment" in lr:
            lines.append(f"- SLO attainment last round: {lr['slo_attainment'] * 100:.1f}%.")
        lines.append(f"- Events last round: {', '.join(flags) if flags else 'none'}.")
    else:
        lines.append("- Nothing yet: this is the first round.")
    if last_action is not None:
        lines.append(f"- Your last action: {json.dumps(last_action, sort_keys=False)}")
    if error:
        lines.append(f"- Your last answer was rejected ({error}); the fallback action ran instead.")
    lines += ["", "## The cluster"]
    lines.append(
        f"- {c['pool_capacity_gpus']} {c['gpu_type']} GPUs shared by {c['tenants_on_pool']} tenant(s); arbiter: {c['mechanism']}; "
        f"safety: {c['safety_mode']}; {c['live_tenants']} of {c['tenants']} tenants still running."
    )
    if "pool_granted_gpus" in c:
        lines.append(
            f"- Last round the pool granted {c['pool_granted_gpus']} GPUs of {c['pool_requested_gpus']} requested; "
            f"hottest node {c['hottest_node_c']:.1f} C (throttles at {c['throttle_temp_c']:g} C); "
            f"highest rack power {c['max_rack_power_w']:.0f} W of {c['rack_power_cap_w']:.0f} W."
        )
    for r in c["others"]:
        held = f", granted {r['granted_gpus']} GPUs last round" if "granted_gpus" in r else ""
        lines.append(f"- {r['agent']}: {r['kind']} {r['model']} on {r['gpu_type']}{held}{'' if r['live'] else ' (finished)'}.")
    turn = c.get("turn")
    if turn is not None:
        lines += ["", "## This round's claims so far"]
        lines.append(
            f"- The teams claim one at a time this round ({turn['turn_order']} order); you claim {turn['position']} of {turn['turns']}, "
            "and the round clears after the last claim."
        )
        for cl in turn["claims_before"]:
            lines.append(f"- {cl['agent']} asked for {cl['gpus']} {cl['gpu_type']} GPU(s) at x{cl['bid']:g} list price.")
        if not turn["claims_before"]:
            lines.append("- Nobody has claimed yet: you are first.")
        lines.append(f"- Still to claim after you: {', '.join(turn['after']) if turn['after'] else 'nobody'}.")
    lines += ["", "## Your choices"]
    lines.append(f"- request_gpus: 0 to {legal['max_affordable_gpus']} (your budget pays for no more).")
    lines.append("- bid: " + ", ".join(f"{n} (x{b:g} list price)" for n, b in zip(legal["bids"], legal["bid_multipliers"])) + ".")
    lines.append(
        f"- batch: one of {', '.join(map(str, legal['batches']))} ({'sequences per GPU per step' if t['kind'] == 'train' else 'concurrent sequences'})."
    )
    lines.append(
        f"- precision per layer group ({', '.join(GROUP_KEYS)}): {', '.join(legal['precisions'])}. "
        "Numerically unsafe: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in legal["unsafe"].items() if v) + "."
    )
    lines += [
        "",
        "## Answer",
        f"Reply with one JSON object (at most {MAX_CHARS} characters) that follows this JSON Schema:",
        json.dumps(schema, sort_keys=True),
        'Example: {"request_gpus": 2, "bid": "list", "batch": 8, "precision": {"embed": "bf16", "attn": "bf16", "mlp": "bf16", "norm": "bf16", "head": "bf16"}}',
    ]
    return "\n".join(lines)


__all__ = ["FALLBACKS", "FleetEgoEnvironment", "describe", "render_prompt"]

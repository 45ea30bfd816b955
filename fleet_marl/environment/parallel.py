"""``FleetParallelEnv``, the :class:`pettingzoo.ParallelEnv` of ``fleet_v0`` (the spec is the
package docstring of :mod:`fleet_marl.environment`), and ``parallel_env()``."""

from __future__ import annotations

import dataclasses
from collections import deque
from time import perf_counter
from typing import Any

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

from fleet_marl.config import REWARD_SCHEMES, FleetConfig
from fleet_marl.credit import CreditEngine
from fleet_marl.environment import observations, scenario
from fleet_marl.environment.render import new_figure, render_ansi, render_rgb
from fleet_marl.environment.spaces import (
    ACTION_FIELDS, ILLEGAL_ACTION, N_ACT, N_OBS, OBS_MODES, PREC, ActionError, ActionMasks, action_nvec, build_spaces,
    check_agent, decode_actions, parse_action,
)
from fleet_marl.environment.views import EnvViews
from fleet_marl.fairness import FairnessTracker, lowest_precision
from fleet_marl.kernel import Draws, KernelStatic, RoundState
from fleet_marl.tasks import make_config
from fleet_marl.workloads import arrival_schedule, burst_chain, resolve_trace


class FleetParallelEnv(EnvViews, ParallelEnv):
    """Tenants negotiate for one shared GPU cluster; one step is one scheduling round.

    >>> import fleet_marl
    >>> env = fleet_marl.parallel_env(task="tiny")
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs)
    ['tenant_0', 'tenant_1']
    >>> actions = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
    >>> obs, rewards, terms, truncs, infos = env.step(actions)
    >>> sorted(infos["tenant_0"]["rewards"])
    ['difference', 'difference_default', 'global', 'local', 'mixed', 'shapley']

    Read-only views of the scenario (set when it is built; do not write to them):
    ``config`` (the :class:`~fleet_marl.config.FleetConfig`), ``kernel_static`` (its
    :class:`~fleet_marl.kernel.KernelStatic`), ``bid_levels`` ((L,) price multipliers of
    ``bid_level``), ``nvec`` ((T, 8) action sizes), ``default_action_index`` and
    ``default_actions`` ((T, 8) indices and the decoded kernel ``Actions`` of each tenant's
    default action), ``rounds_alone`` ((T,) Themis ``T_independent`` in rounds), ``tracker``
    (the :class:`~fleet_marl.fairness.FairnessTracker`; read it with ``tracker.summary()``).
    Of the episode: the properties ``round``, ``last_outcome``, ``last_credit``,
    ``node_temperatures``, ``round_state``, ``arrival_schedule``, and ``observed_round()``.
    Timing: ``credit_seconds``, ``last_credit_seconds``, ``steps_taken``.
    """

    metadata = {"name": "fleet_v0", "render_modes": ["ansi", "rgb_array", "human"], "render_fps": 2, "is_parallelizable": True}

    def __init__(self, task: str | None = None, config: FleetConfig | dict | None = None, **overrides: Any):
        """``task`` (default ``"easy"``) or a full ``config``, plus overrides of any field."""
        cfg, opts = make_config(task, config, **overrides)
        self.task = (task or "easy") if config is None else None
        self.obs_mode = opts.get("obs_mode", "flat")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode = {self.obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
        self.render_mode = opts.get("render_mode")
        if self.render_mode is not None and self.render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode = {self.render_mode!r}: expected None or one of {', '.join(map(repr, self.metadata['render_modes']))}")
        self.illegal_action = opts.get("illegal_action", "veto")
        if self.illegal_action not in ILLEGAL_ACTION:
            raise ValueError(f"illegal_action = {self.illegal_action!r}: expected one of {', '.join(map(repr, ILLEGAL_ACTION))}")
        self._build(cfg)
        self._ready = False
        self._seed_seq: np.random.SeedSequence | None = None
        self._figure = None  # render_mode="rgb_array": the matplotlib figure, drawn into each frame

    # --- construction ---------------------------------------------------------------------------

    def _build(self, cfg: FleetConfig) -> None:
        for t in cfg.tenants:  # a missing trace file is an error now, not at reset()
            if t.workload.pattern == "trace":
                resolve_trace(t.workload.trace)
        self.config = cfg
        st = self.kernel_static = KernelStatic.from_config(cfg)
        T = st.T
        self.possible_agents = [f"tenant_{i}" for i in range(T)]
        self.agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self.bid_levels = np.array(cfg.arbiter.bid_levels, np.float64)
        self._min_unit = scenario.cheapest_gpu_round(st, self.bid_levels)  # cheapest GPU-round each tenant can buy
        self._action_masks = ActionMasks(st, len(self.bid_levels))
        self._prec_legal = self._action_masks.prec_legal  # (T, P)
        self.nvec = action_nvec(st.max_gpus, len(self.bid_levels))  # (T, 8)
        self.action_spaces, self.observation_spaces, self.state_space = build_spaces(
            self.possible_agents, self.nvec, self.obs_mode, T * N_OBS + st.K + st.n_racks,
        )
        self._observer = observations.Observer(st, cfg, self.bid_levels)
        # the documented default action (difference_default, Themis) and the tracker
        self.default_action_index, self.default_actions = scenario.default_action(st, self.bid_levels, self._prec_legal)
        self.rounds_alone = scenario.job_rounds_alone(st, self.default_actions)
        self._schemes = REWARD_SCHEMES if cfg.reward.compute_all else (cfg.reward.scheme,)
        self.credit_seconds = 0.0  # wall time in the credit engine, over the env's lifetime
        self.last_credit_seconds = 0.0  # ... in the last step
        self.steps_taken = 0
        self.tracker = FairnessTracker(
            cfg.fairness, st.pool, st.pool_capacity, st.max_gpus, lowest_precision(st.supported, st.is_train), st.round_seconds,
        )

    def _decode(self, idx: np.ndarray):
        return decode_actions(idx, self.bid_levels)

    # --- PettingZoo API ---------------------------------------------------------------------------

    @property
    def max_cycles(self) -> int:
        return self.config.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        """Changing the episode length rebuilds the scenario (utility is normalized per round of
        the episode budget, so it depends on ``max_cycles``)."""
        if value != self.config.max_cycles:
            self._build(dataclasses.replace(self.config, max_cycles=value))
            self._ready = False

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[self._known(agent)]

    def action_space(self, agent: str) -> gymnasium.spaces.MultiDiscrete:
        return self.action_spaces[self._known(agent)]

    def _known(self, agent) -> str:
        if agent not in self.agent_index:
            raise KeyError(f"unknown agent {agent!r}: expected one of {', '.join(self.possible_agents)}")
        return agent

    def _need_reset(self, what: str) -> None:
        if not self._ready:
            raise RuntimeError(f"{what} called before reset(): call env.reset(seed=...) first")

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"reset: seed = {seed!r}: expected None or a non-negative integer")
        if seed is not None or self._seed_seq is None:
            self._seed_seq = np.random.SeedSequence(seed)
            env_ss, credit_ss = self._seed_seq.spawn(2)
            self._rng = np.random.default_rng(env_ss)
            self._credit_rng = np.random.default_rng(credit_ss)
        cfg, st = self.config, self.kernel_static
        T, n = st.T, cfg.max_cycles
        rng = self._rng
        cl = cfg.cluster
        # arrival schedules for the whole episode: serving requests and training jobs per round
        # one on/off burst chain shared by every tenant with burst_shared (the first such
        # tenant's parameters), drawn always so the stream does not depend on the flags
        wl = next((t.workload for t in cfg.tenants if t.workload.burst_shared), cfg.tenants[0].workload)
        shared = burst_chain(n, wl.burst_fraction, wl.burst_rounds, rng)
        sched = np.zeros((n, T))
        for i, t in enumerate(cfg.tenants):
            sched[:, i] = arrival_schedule(t.workload, t.kind, n, cl.round_seconds, rng, shared)
        self._schedule = sched
        self._requests = np.where(st.is_train, 0.0, sched)
        self._jobs = np.where(st.is_train, sched, 0.0)
        future = np.cumsum(sched[::-1], axis=0)[::-1]  # future[t] = arrivals in rounds t..n-1
        self._future = np.vstack([future, np.zeros((1, T))])
        self._state = RoundState.initial(st)
        self._backlog = [deque() for _ in range(T)]  # trainers: arrival round of each queued job
        self._backlog_n = np.zeros(T, np.int64)
        self._job_born = np.full(T, -1, np.int64)  # arrival round of the current job
        self._has_job = st.is_train.copy()
        self._live = np.ones(T, bool)
        self._round = 0
        self._last = None
        self._last_credit = None
        self._streak = np.zeros(T, np.int64)
        self._fair = np.zeros(T)
        self._return = np.zeros(T)
        self._utility_sum = np.zeros(T)
        self._rounds = np.zeros(T, np.int64)
        self._engine = CreditEngine(st, cfg.reward, self._schemes, self._credit_rng)
        self.tracker.reset()
        self.agents = self.possible_agents[:]
        self._ready = True
        self._fair = self.tracker.fair(self._live, self._has_work())
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations_ = self._observations(obs_m, masks, self.agents)
        infos = {a: {"action_mask": masks[self.agent_index[a]]} for a in self.agents}
        if self.render_mode == "human":
            self.render()
        return observations_, infos

    def step(self, actions: dict):
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset(seed=...) first")
        if not self.agents:
            raise RuntimeError("step() called after every agent finished: call env.reset() to start a new episode")
        idx, illegal = self._validate(actions)
        st, cfg = self.kernel_static, self.config
        T, t = st.T, self._round
        live = self._live.copy()
        acts = self._decode(idx)
        arrivals = np.where(live, self._requests[t], 0.0)
        draws = Draws(arrivals=arrivals, tiebreak=self._rng.random(T))
        has_work = self._has_work(arrivals)
        t0 = perf_counter()
        credit = self._engine.compute(acts, self._state, draws, live, self.default_actions)
        dt = perf_counter() - t0
        self.credit_seconds += dt
        self.last_credit_seconds = dt
        self.steps_taken += 1
        o = credit.outcome
        # fairness of this round
        fair = self.tracker.fair(live, has_work)
        starved, low, hoard, streak = self.tracker.step(live, has_work, o.requested, o.alloc, acts.gpus, acts.precision, fair)
        self._engine.apply_starvation(credit, live, starved)
        degenerate = low | hoard
        raw = credit.rewards[cfg.reward.scheme]
        reward = np.where(degenerate, np.minimum(raw, cfg.reward.degenerate_floor), raw)  # never a gain
        self.tracker.record_round(credit.welfare, live, o.oom, o.vetoed, o.power_throttled | o.thermal_throttled, degenerate)
        self.tracker.serve_round(t, live & ~st.is_train, arrivals, o.served)
        # carry the state over, then the job streams
        nxt = o.next_state()
        remaining = np.array(nxt.remaining_tokens, np.float64)
        self._state = RoundState(
            prev_alloc=np.array(nxt.prev_alloc), temp_c=np.array(nxt.temp_c), queue=np.array(nxt.queue),
            remaining_tokens=remaining, budget_left=np.array(nxt.budget_left),
        )
        self._advance_jobs(t, live, remaining)
        self._round = t + 1
        self._return += np.where(live, reward, 0.0)
        self._utility_sum += np.where(live, o.utility, 0.0)
        self._rounds += live
        self._last, self._last_credit, self._fair, self._streak = o, credit, fair, streak
        # who leaves
        broke = self._state.budget_left < self._min_unit
        done = ~self._has_work(upcoming=True)
        # the schedule ends at the horizon: at max_cycles running out of it is truncation
        terminated = live & (broke | (done & (self._round < cfg.max_cycles)))
        truncated = live & ~terminated & (self._round >= cfg.max_cycles)
        finished = terminated | truncated
        agents = self.agents
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations_ = self._observations(obs_m, masks, agents)
        schemes = tuple(credit.rewards)
        vals = {s: credit.rewards[s].tolist() for s in schemes}
        rew_l, u_l, alloc_l, req_l = reward.tolist(), o.utility.tolist(), o.alloc.tolist(), o.requested.tolist()
        flags = {k: getattr(o, k).tolist() for k in ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted")}
        thr_l = (o.power_throttled | o.thermal_throttled).tolist()
        starved_l, streak_l, fair_l = starved.tolist(), streak.tolist(), fair.tolist()
        low_l, hoard_l = low.tolist(), hoard.tolist()
        welfare = credit.welfare
        summary = self.tracker.summary(self._round, self._backlog) if finished.any() else None
        rewards, terms, truncs, infos = {}, {}, {}, {}
        for a in agents:
            i = self.agent_index[a]
            rewards[a] = rew_l[i]
            terms[a] = bool(terminated[i])
            truncs[a] = bool(truncated[i])
            info = {
                "rewards": {s: vals[s][i] for s in schemes},
                "utility": u_l[i],
                "welfare": welfare,
                "requested": req_l[i],
                "alloc": alloc_l[i],
                "throttled": thr_l[i],
                "starved": starved_l[i],
                "starvation_streak": streak_l[i],
                "fair_share": fair_l[i],
                "degenerate": [r for r, f in (("lowest_precision", low_l[i]), ("hoarding", hoard_l[i])) if f],
                "illegal": illegal.get(i, []),
                "action_mask": masks[i],
            }
            for k, v in flags.items():
                info[k] = v[i]
            if finished[i]:
                info["episode"] = summary.episode_report(i, self._return[i], self._utility_sum[i], int(self._rounds[i]))
            infos[a] = info
        self._live &= ~finished
        self.agents = [a for a in agents if not finished[self.agent_index[a]]]
        if self.render_mode == "human":
            self.render()
        return observations_, rewards, terms, truncs, infos

    # --- internals --------------------------------------------------------------------------------

    def _has_work(self, arrivals: np.ndarray | None = None, upcoming: bool = False) -> np.ndarray:
        """Trainers: a job in progress or queued. Servers: requests queued (plus ``arrivals``).
        ``upcoming`` also counts arrivals still to come this episode."""
        st = self.kernel_static
        train = self._has_job | (self._backlog_n > 0)
        serve = self._state.queue + (0.0 if arrivals is None else arrivals) > 0
        work = np.where(st.is_train, train, serve)
        if upcoming:
            work |= self._future[min(self._round, self.config.max_cycles)] > 0
        return work

    def _advance_jobs(self, t: int, live: np.ndarray, remaining: np.ndarray) -> None:
        """Trainers: record finished jobs, queue this round's arrivals, start the next job."""
        st = self.kernel_static
        jobs = self._jobs[t]
        finished = live & self._has_job & (remaining <= 0)
        for i in np.flatnonzero(finished | ((jobs > 0) & live)):
            if finished[i]:
                self.tracker.job_finished(i, t - self._job_born[i], self.rounds_alone[i])
                self._has_job[i] = False
            self._backlog[i].extend([t] * int(jobs[i]))
            self._backlog_n[i] += int(jobs[i])
            if not self._has_job[i] and self._backlog[i]:
                born = self._backlog[i].popleft()
                self._backlog_n[i] -= 1
                self._job_born[i] = born
                self._has_job[i] = True
                remaining[i] = st.job_tokens[i]
                self.tracker.job_started(i, t + 1 - (born + 1))

    def _validate(self, actions) -> tuple[np.ndarray, dict]:
        """Check every action before anything changes; return (T, 8) indices and the masked
        (illegal) fields per tenant."""
        if not isinstance(actions, dict):
            raise ActionError("actions", "type", type(actions).__name__, "a dict {agent: action}")
        T = self.kernel_static.T
        idx = np.zeros((T, N_ACT), np.int64)
        live = set(self.agents)
        if len(actions) == len(live) and live.issuperset(actions):
            # fast path: integer arrays of the right shape, all in range
            vals = list(actions.values())
            if all(type(v) is np.ndarray and v.dtype.kind in "iu" and v.shape == (N_ACT,) for v in vals):
                rows = [self.agent_index[a] for a in actions]
                arr = np.stack(vals)
                if not ((arr < 0) | (arr >= self.nvec[rows])).any():
                    idx[rows] = arr
                    return idx, self._illegal(idx)
        for a, act in actions.items():
            idx[self.agent_index[a] if a in self.agent_index else 0] = self.check_action(a, act, live)
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ActionError(missing[0], "action", None, f"an action for every live agent; missing {', '.join(missing)}")
        return idx, self._illegal(idx)

    def check_action(self, a, act, live: set | None = None) -> np.ndarray:
        """Validate one agent's action; return its 8 indices or raise :class:`ActionError`.
        Masked choices raise too when ``illegal_action="raise"``. Changes nothing."""
        self._need_reset("step()")
        i = check_agent(a, self.agent_index, self.agents, set(self.agents) if live is None else live)
        out = parse_action(a, act, self.nvec[i])
        if self.illegal_action == "raise":
            one = np.zeros((self.kernel_static.T, N_ACT), np.int64)
            one[i] = out
            self._illegal(one, only=i)
        return out

    def _illegal(self, idx: np.ndarray, only: int | None = None) -> dict[int, list[str]]:
        """Masked choices per tenant (veto mode), or an ActionError (raise mode)."""
        T = self.kernel_static.T
        illegal: dict[int, list[str]] = {}
        live = self._live if only is None else (np.arange(T) == only)
        prec_bad = ~self._prec_legal[np.arange(T)[:, None], idx[:, PREC]]  # (T, G)
        gpus_bad = idx[:, 0] * self._min_unit > self._state.budget_left
        for i in np.flatnonzero(live & (prec_bad.any(1) | gpus_bad)):
            fields_ = ([ACTION_FIELDS[0]] if gpus_bad[i] else []) + [ACTION_FIELDS[2 + g] for g in np.flatnonzero(prec_bad[i])]
            if self.illegal_action == "raise":
                a = self.possible_agents[i]
                k = ACTION_FIELDS.index(fields_[0])
                raise ActionError(a, f"action[{k}] ({fields_[0]})", int(idx[i, k]), "a choice the action mask allows (see infos[agent]['action_mask'])")
            illegal[i] = fields_
        return illegal

    def _masks(self) -> list[tuple[np.ndarray, ...]]:
        return self._action_masks(np.floor(self._state.budget_left / self._min_unit))

    def _obs_matrix(self) -> np.ndarray:
        return self._observer.matrix(
            live=self._live, round_=self._round, state=self._state, has_job=self._has_job, backlog_n=self._backlog_n, fair=self._fair,
            last=self._last, arrivals_last=self._requests[self._round - 1] if self._last is not None else None, streak=self._streak,
        )

    def _observations(self, obs_m: np.ndarray, masks, agents) -> dict:
        if self.obs_mode == "flat":
            return {a: obs_m[self.agent_index[a]] for a in agents}
        return {a: {"observation": obs_m[self.agent_index[a]], "action_mask": masks[self.agent_index[a]]} for a in agents}

    # --- extras ------------------------------------------------------------------------------------

    def action_mask(self, agent: str) -> tuple[np.ndarray, ...]:
        """The current action mask of ``agent``: a tuple of 8 int8 arrays (see the package docstring)."""
        self._known(agent)
        self._need_reset("action_mask()")
        return self._masks()[self.agent_index[agent]]

    def state(self) -> np.ndarray:
        """The global view for centralized critics: every tenant's observation row, as it would
        be observed now (finished tenants' rows have ``alive`` = 0 and hold nothing), then each
        node's temperature ``(T - ambient) / (critical - ambient)`` and each rack's power / cap,
        all in [0, 1]."""
        self._need_reset("state()")
        return observations.state_vector(self.kernel_static, self._obs_matrix(), self._state.temp_c, self._last)

    def render(self):
        self._need_reset("render()")
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'rgb_array' or 'human'.")
            return None
        if self.render_mode == "rgb_array":
            if self._figure is None:
                self._figure = new_figure()
            return render_rgb(self, self._figure)
        text = render_ansi(self)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        # nothing to import unless a frame was drawn (close() also runs at interpreter exit)
        self._figure = None


def parallel_env(**config: Any) -> FleetParallelEnv:
    """The ParallelEnv: ``parallel_env(task="easy", reward_scheme="difference", obs_mode="dict")``."""
    return FleetParallelEnv(**config)


__all__ = ["FleetParallelEnv", "parallel_env"]

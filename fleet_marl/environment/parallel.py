"""``FleetParallelEnv``, the :class:`pettingzoo.ParallelEnv` of ``fleet_v0`` (the spec is the
package docstring of :mod:`fleet_marl.environment`), and ``parallel_env()``.

The infos of its steps (their keys in order, ``AgentInfo``, ``scheme_rewards``) are
:mod:`fleet_marl.environment.infos`'; this module re-exports ``REWARD_PREFIX``, ``AgentInfo`` and
``scheme_rewards``."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
from pettingzoo import ParallelEnv

from fleet_marl.checks import is_seed
from fleet_marl.config import FleetConfig
from fleet_marl.credit import Credit
from fleet_marl.environment import core
from fleet_marl.environment.infos import FLAG_KEYS, OUTCOME_KEYS, REWARD_PREFIX, AgentInfo, info_layout, scheme_rewards
from fleet_marl.environment.observer import tenant_coupling
from fleet_marl.environment.render import render_frame
from fleet_marl.environment.spaces import (
    ACTION_FIELDS,
    ILLEGAL_ACTION,
    N_ACT,
    OBS_MODES,
    OK,
    PREC,
    ActionError,
    AgentSpaces,
    EmptyStep,
    build_spaces,
    check_agent,
    check_indices,
    check_mask_layout,
    departed,
    obs_fields,
    parse_action,
)
from fleet_marl.environment.views import EnvViews
from fleet_marl.errors import ClientError, short_repr
from fleet_marl.tasks import check_protocol, make_config


class FleetParallelEnv(EnvViews, AgentSpaces, ParallelEnv):
    """Tenants negotiate for one shared GPU cluster; one step is one scheduling round.

    >>> import fleet_marl
    >>> env = fleet_marl.parallel_env(task="tiny")
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs)
    ['tenant_0', 'tenant_1']
    >>> actions = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
    >>> obs, rewards, terms, truncs, infos = env.step(actions)
    >>> sorted(fleet_marl.environment.scheme_rewards(infos["tenant_0"]))
    ['difference', 'global', 'local', 'mixed']

    Read-only views of the scenario (set when it is built; do not write to them):
    ``config`` (the :class:`~fleet_marl.config.FleetConfig`), ``kernel_static`` (its
    :class:`~fleet_marl.kernel.KernelStatic`), ``bid_levels`` ((L,) price multipliers of
    ``bid_level``), ``nvec`` ((T, 8) action sizes), ``default_action_index`` and
    ``default_actions`` ((T, 8) indices and the decoded kernel ``Actions`` of each tenant's
    default action), ``rounds_alone`` ((T,) Themis ``T_independent`` in rounds),
    ``reward_schemes`` (the schemes computed each round, each in ``infos[agent]["reward_<scheme>"]``).
    Of the episode: the properties ``round``, ``last_outcome``, ``last_credit``, ``fairness``,
    ``episode_reports``, ``node_temperatures``, ``round_state``, ``arrival_schedule``,
    ``observed_round()``, and ``core_state()`` (a copy of the array core's state, to branch the episode).
    Timing: ``credit_seconds``, ``last_credit_seconds``, ``steps_taken``.

    It is a thin adapter over the array core (:mod:`fleet_marl.environment.core`) with one
    cluster: agent-ID dicts and the checks of dict actions here, the round there.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "fleet_v0",
        "render_modes": ["ansi", "rgb_array", "human"],
        "render_fps": 2,
        "is_parallelizable": True,
    }

    def __init__(self, task: str | None = None, config: FleetConfig | dict | None = None, **overrides: Any):
        """``task`` (default ``"easy"``) or a full ``config``, plus overrides of any field."""
        cfg, opts = make_config(task, config, **overrides)
        if check_protocol(opts)[0] == "sequential":
            raise ClientError(
                "protocol = 'sequential': the ParallelEnv has every tenant act at once, and the sequential protocol is "
                "turn-based (each tenant sees the claims made before its turn); use fleet_marl.env(protocol='sequential', ...), "
                "the AEC env"
            )
        self.task = (task or "easy") if config is None else None
        self.obs_mode = opts.get("obs_mode", "flat")
        if self.obs_mode not in OBS_MODES:
            raise ClientError(f"obs_mode = {self.obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
        self.render_mode = opts.get("render_mode")
        if self.render_mode is not None and self.render_mode not in self.metadata["render_modes"]:
            raise ClientError(
                f"render_mode = {self.render_mode!r}: expected None or one of {', '.join(map(repr, self.metadata['render_modes']))}"
            )
        self.illegal_action = opts.get("illegal_action", "veto")
        if self.illegal_action not in ILLEGAL_ACTION:
            raise ClientError(f"illegal_action = {short_repr(self.illegal_action)}: expected one of {', '.join(map(repr, ILLEGAL_ACTION))}")
        self.mask_layout = check_mask_layout(opts.get("mask_layout", "dims"))
        self._build(cfg)
        self._ready = False
        self._seed_seq: np.random.SeedSequence | None = None
        self._figure = None  # render_mode="rgb_array": the matplotlib figure, drawn into each frame

    # --- construction ---------------------------------------------------------------------------

    def _build(self, cfg: FleetConfig) -> None:
        cs = self._core = core.CoreStatic.from_config(cfg)
        self.config = cfg
        st = self.kernel_static = cs.kernel
        T = st.T
        self.possible_agents = [f"tenant_{i}" for i in range(T)]
        self.agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self.bid_levels = cs.bid_levels
        self._min_unit = cs.min_unit  # the cheapest GPU-round each tenant can buy
        self._action_masks = cs.masks
        self._prec_legal = cs.masks.prec_legal  # (T, P)
        self.nvec = cs.nvec  # (T, 8)
        self.action_spaces, self.observation_spaces, self.state_space = build_spaces(
            self.possible_agents,
            self.nvec,
            self.obs_mode,
            T * cs.observer.n_features + st.K + st.n_racks,
            self.mask_layout,
            cs.observer.n_features,
        )
        #: the observation's columns in order, (name, meaning): OBS_FIELDS, then COUPLING_FIELDS
        #: when a coupling switch is on (``fields.obs_fields``)
        self.obs_fields = obs_fields(cs.observer.coupled)
        self.reward_schemes = cs.schemes  # the schemes computed each round: infos[agent]["reward_<scheme>"]
        #: the info keys, in order: each computed scheme's reward, then INFO_KEYS (without
        #: action_mask with obs_mode="dict": the mask is in the observation, PettingZoo's convention)
        self._info_keys, self._reset_info = info_layout(cs.schemes, with_mask=self.obs_mode == "flat")
        # the documented default action (difference_default, Themis)
        self.default_action_index, self.default_actions = cs.default_index, cs.default_actions
        self.rounds_alone = cs.rounds_alone
        self.credit_seconds = 0.0  # wall time in the credit engine, over the env's lifetime
        self.last_credit_seconds = 0.0  # ... in the last step
        self.steps_taken = 0
        self._s = core.EnvState.zeros(cs, 1)  # the episode: one cluster of the array core
        self._last_credit: Credit | None = None
        self._reports: dict[str, dict] = {}  # episode_reports
        self._empty_step = EmptyStep()  # step() with no live agent: five empty dicts, warned once per episode

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

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None and not is_seed(seed):
            raise ClientError(f"reset: seed = {seed!r}: expected None or a non-negative integer")
        if seed is not None or self._seed_seq is None:
            self._seed_seq = np.random.SeedSequence(seed)
            env_ss, credit_ss = self._seed_seq.spawn(2)
            self._rng = np.random.default_rng(env_ss)
            self._credit_rng = np.random.default_rng(credit_ss)
        core.reset(self._core, self._s, [0], [self._rng])
        self._last_credit = None
        self._reports = {}
        self._empty_step.warned = False
        self.agents = self.possible_agents[:]
        self._ready = True
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations_ = self._observations(obs_m, masks, self.agents)
        # the same keys as every step's infos, with the values of no round played
        infos = {a: AgentInfo(self._reset_info, illegal_fields=np.zeros(N_ACT, bool)) for a in self.agents}
        if self.obs_mode == "flat":
            for a in self.agents:
                infos[a]["action_mask"] = masks[self.agent_index[a]]
        if self.render_mode == "human":
            self.render()
        return observations_, infos

    def step(self, actions: dict):
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset(seed=...) first")
        if not self.agents:
            # PettingZoo's envs answer five empty dicts here; SuperSuit's black_death wrapper
            # and RLlib's ParallelPettingZooEnv rely on it to see the end of the episode
            if not isinstance(actions, dict):
                raise ActionError("actions", "type", type(actions).__name__, "a dict {agent: action}")
            for a in actions:
                if a not in self.agent_index:
                    raise ActionError(
                        a,
                        "agent",
                        a,
                        f"an agent of this env, one of {', '.join(self.possible_agents)} (none is live: every agent finished)",
                    )
            return self._empty_step()
        idx, illegal = self._validate(actions)
        cs, s = self._core, self._s
        r = core.step(cs, s, idx[None], [self._credit_rng])
        self.credit_seconds += r.credit_seconds
        self.last_credit_seconds = r.credit_seconds
        self.steps_taken += 1
        credit = self._last_credit = r.credit.cluster(0)
        o = r.credit.outcome  # (1, ...): the fields the core step and the observations have read already
        terminated, truncated = r.terminated[0], r.truncated[0]
        finished = terminated | truncated
        agents = self.agents
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations_ = self._observations(obs_m, masks, agents)
        T = len(self.possible_agents)
        rew_l = r.reward[0].tolist()
        term_l, trunc_l, done_l = terminated.tolist(), truncated.tolist(), finished.tolist()
        lowest, hoarding = r.lowest_precision[0], r.hoarding[0]
        if illegal is None:
            illegal = np.zeros((T, N_ACT), bool)
        # each tenant's info values in self._info_keys order, built column by column
        columns = zip(
            *(credit.rewards[k].tolist() for k in self._core.schemes),
            o.utility[0].tolist(),
            [credit.welfare] * T,
            o.requested[0].tolist(),
            o.alloc[0].tolist(),
            (o.power_throttled[0] | o.thermal_throttled[0]).tolist(),
            r.starved[0].tolist(),
            r.streak[0].tolist(),
            r.fair[0].tolist(),
            (lowest | hoarding).tolist(),
            lowest.tolist(),
            hoarding.tolist(),
            np.logical_or.reduce(illegal, axis=1).tolist(),
            illegal,
            *((masks,) if self.obs_mode == "flat" else ()),
            *(getattr(o, k)[0].tolist() for k in FLAG_KEYS + OUTCOME_KEYS),
            *(v[0].tolist() for v in tenant_coupling(self.kernel_static, o, cs.observer.pool_racks)),  # COUPLING_KEYS
            strict=True,
        )
        per_tenant = list(columns)
        summary = self.fairness if any(done_l) else None  # read once, only when someone leaves
        keys = self._info_keys
        rewards, terms, truncs, infos = {}, {}, {}, {}
        for a in agents:
            i = self.agent_index[a]
            rewards[a] = rew_l[i]
            terms[a] = term_l[i]
            truncs[a] = trunc_l[i]
            infos[a] = AgentInfo(zip(keys, per_tenant[i], strict=True))
            if summary is not None and done_l[i]:
                self._reports[a] = summary.episode_report(i, s.ret[0, i], s.utility_sum[0, i], int(s.rounds[0, i]))
        core.finish(s, r)
        self.agents = [a for a in agents if not done_l[self.agent_index[a]]]
        if self.render_mode == "human":
            self.render()
        return observations_, rewards, terms, truncs, infos

    # --- internals --------------------------------------------------------------------------------

    def _validate(self, actions) -> tuple[np.ndarray, np.ndarray | None]:
        """Check every action before anything changes; return (T, 8) indices and the masked
        (illegal) choices, (T, 8) bool (None: none). The actions of agents that already left
        the episode are dropped unchecked."""
        if not isinstance(actions, dict):
            raise ActionError("actions", "type", type(actions).__name__, "a dict {agent: action}")
        T = self.kernel_static.T
        idx = np.zeros((T, N_ACT), np.int64)
        live = set(self.agents)
        actions = departed(actions, self.agent_index, live)
        if len(actions) == len(live) and live.issuperset(actions):
            # fast path: integer arrays of the right shape, all in range
            vals = list(actions.values())
            if all(type(v) is np.ndarray and v.dtype.kind in "iu" and v.shape == (N_ACT,) for v in vals):
                rows = [self.agent_index[a] for a in actions]
                idx[rows] = np.stack(vals)
                cs, s = self._core, self._s
                checked, illegal = np.empty((1, T, N_ACT), np.int64), np.empty((1, T), bool)
                code, _, _, _ = check_indices(
                    idx[None], s.live, cs.nvec, cs.default_index, cs.masks.prec_legal, cs.min_unit, s.budget, False, checked, illegal
                )
                if code == OK and not illegal.any():  # every choice in range and allowed by the masks
                    return idx, None
                if code == OK:  # some masked choices: name them (veto) or raise
                    return idx, self._illegal(idx)
        for a, act in actions.items():
            idx[self.agent_index.get(a, 0)] = self.check_action(a, act, live)
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ActionError(missing[0], "action", None, f"an action for every live agent; missing {', '.join(missing)}")
        return idx, self._illegal(idx)

    def check_action(self, a, act, live: set | None = None) -> np.ndarray:
        """Validate one agent's action; return its 8 indices or raise :class:`ActionError`.
        Masked choices raise too when ``illegal_action="raise"``. Changes nothing. An agent
        that has finished has no action to check: an ActionError here (``step()`` drops such
        actions instead)."""
        self._need_reset("step()")
        i = check_agent(a, self.agent_index, self.agents, set(self.agents) if live is None else live)
        out = parse_action(a, act, self.nvec[i])
        if self.illegal_action == "raise":
            one = np.zeros((self.kernel_static.T, N_ACT), np.int64)
            one[i] = out
            self._illegal(one, only=i)
        return out

    def _illegal(self, idx: np.ndarray, only: int | None = None) -> np.ndarray | None:
        """Masked choices, (T, 8) bool over ``ACTION_FIELDS``, of the live tenants (veto mode;
        None if there is none), or an ActionError (raise mode)."""
        T = self.kernel_static.T
        live = self._s.live[0] if only is None else (np.arange(T) == only)
        bad = np.zeros((T, N_ACT), bool)
        bad[:, PREC] = ~self._prec_legal[np.arange(T)[:, None], idx[:, PREC]]  # (T, G)
        bad[:, 0] = idx[:, 0] * self._min_unit > self._s.budget[0]
        bad &= live[:, None]
        if not bad.any():
            return None
        if self.illegal_action == "raise":
            i = int(np.flatnonzero(bad.any(1))[0])
            k = int(np.flatnonzero(bad[i])[0])
            raise ActionError(
                self.possible_agents[i],
                f"action[{k}] ({ACTION_FIELDS[k]})",
                int(idx[i, k]),
                "a choice the action mask allows (see infos[agent]['action_mask'])",
            )
        return bad

    def _masks(self) -> list:
        """Every tenant's action mask now, in the env's ``mask_layout``."""
        afford = core.afford(self._core, self._s)[0]
        return self._action_masks(afford) if self.mask_layout == "dims" else self._action_masks.flat(afford)

    def _obs_matrix(self) -> np.ndarray:
        return core.observe(self._core, self._s)[0]

    def _observations(self, obs_m: np.ndarray, masks, agents) -> dict:
        if self.obs_mode == "flat":
            return {a: obs_m[self.agent_index[a]] for a in agents}
        return {a: {"observation": obs_m[self.agent_index[a]], "action_mask": masks[self.agent_index[a]]} for a in agents}

    # --- extras ------------------------------------------------------------------------------------

    def action_mask(self, agent: str):
        """The current action mask of ``agent`` in the env's ``mask_layout``: a tuple of 8 int8
        arrays (``"dims"``) or one int8 vector of length ``sum(nvec)`` (``"flat"``; see the
        package docstring)."""
        self._known(agent)
        self._need_reset("action_mask()")
        return self._masks()[self.agent_index[agent]]

    def state(self) -> np.ndarray:
        """The global view for centralized critics: every tenant's observation row, as it would
        be observed now (finished tenants' rows have ``alive`` = 0 and hold nothing), then each
        node's temperature ``(T - ambient) / (critical - ambient)`` and each rack's power / cap,
        all in [0, 1]."""
        self._need_reset("state()")
        cs, s = self._core, self._s
        return core.state_vectors(cs, s, core.observe(cs, s))[0]

    def render(self):
        self._need_reset("render()")
        frame, self._figure = render_frame(self.render_mode, self, self._figure)
        return frame

    def close(self) -> None:
        # nothing to import unless a frame was drawn (close() also runs at interpreter exit)
        self._figure = None


def parallel_env(**config: Any) -> FleetParallelEnv:
    """The ParallelEnv: ``parallel_env(task="easy", reward_scheme="difference", obs_mode="dict")``."""
    return FleetParallelEnv(**config)


__all__ = ["REWARD_PREFIX", "AgentInfo", "FleetParallelEnv", "parallel_env", "scheme_rewards"]

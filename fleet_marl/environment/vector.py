"""``FleetVectorEnv``: B clusters stepped as one array operation, and ``vector_env()``.

The array API for learners (``docs/environment.md``, "The vector env"): every cluster has the
same N tenants; observations are ``(B, N, F)`` float32, actions ``(B, N, 8)`` integers,
rewards, terminations and truncations ``(B, N)``. One kernel call per step evaluates every
cluster's grand coalition and every counterfactual row its reward schemes need.

Agents that left keep their slot: ``infos["alive"]`` is 0 for them, their reward 0, their
mask all-allowed, and their actions are ignored (not checked). A cluster whose last agent
finishes is reset in the same step (gymnasium's ``AutoresetMode.SAME_STEP``): the returned
observation of that cluster is the first of its new episode, its rewards, terminations and
truncations are the finishing round's, and ``infos["final_obs"]``, ``infos["final_state"]``
and ``infos["episode"]`` hold the end of the old one where ``infos["_final"]`` is True. An
automatic reset continues the cluster's generators, as ``env.reset()`` without a seed does.

``reset(seed=s)`` seeds cluster b with ``s + b`` (or ``seed[b]`` for a list), so B vector
clusters equal B :class:`~fleet_marl.environment.FleetParallelEnv` with seeds s .. s+B-1,
step by step, bit for bit (``tests/test_vector.py``).

It is not a ``gymnasium.vector.VectorEnv`` subclass: gymnasium's vector API has one reward and
one termination per sub-env, and here there is one per agent. It follows gymnasium's
conventions otherwise (seeding, same-step autoreset announced in ``metadata["autoreset_mode"]``, ``final_obs`` with its mask
``_final_obs`` (also ``_final``), ``single_observation_space`` and ``single_action_space``).
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium
import numba as nb
import numpy as np
from gymnasium.vector import AutoresetMode

from fleet_marl.errors import short_repr
from fleet_marl.environment import core
from fleet_marl.environment.observations import claim_features
from fleet_marl.environment.spaces import ACTION_FIELDS, ILLEGAL_ACTION, N_ACT, N_CLAIM, N_OBS, NOT_ALLOWED, NOT_INTEGER, OUT_OF_RANGE, ActionError, check_indices
from fleet_marl.tasks import check_protocol, make_config, require_sequential


def sample_masked(mask: np.ndarray, offsets, rng: np.random.Generator | None = None) -> np.ndarray:
    """Uniform random action indices (..., 8) allowed by flat masks (..., M) whose dimension d
    spans columns ``offsets[d]:offsets[d + 1]``."""
    rng = np.random.default_rng() if rng is None else rng
    out = np.zeros(mask.shape[:-1] + (N_ACT,), np.int64)
    for d in range(N_ACT):
        m = mask[..., offsets[d]: offsets[d + 1]]
        u = rng.random(m.shape) * m  # the largest uniform draw among the allowed choices
        out[..., d] = np.argmax(np.where(m, u + 1e-12, -1.0), axis=-1)
    return out


class FleetVectorEnv:
    """B clusters of the same scenario (``task`` or ``config`` plus overrides, as
    :func:`~fleet_marl.environment.parallel_env` takes them), stepped together.

    >>> import numpy as np, fleet_marl
    >>> venv = fleet_marl.vector_env(num_envs=4, task="tiny")
    >>> obs, infos = venv.reset(seed=0)
    >>> obs.shape, infos["action_mask"].shape
    ((4, 2, 34), (4, 2, 48))
    >>> obs, rewards, terminated, truncated, infos = venv.step(venv.sample_actions(infos))
    >>> rewards.shape, bool(infos["alive"].all())
    ((4, 2), True)
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs = {num_envs!r}: expected an integer >= 1")
        cfg, opts = make_config(task, config, **overrides)
        if check_protocol(opts)[0] == "sequential":  # a bad protocol or turn_order is a ConfigError naming it
            raise ValueError("protocol = 'sequential': FleetVectorEnv steps every tenant of every cluster at once (a round per step, "
                             "the simultaneous protocol); the sequential protocol is turn-based: use fleet_marl.vector_env(protocol="
                             "'sequential', ...) (FleetSequentialVectorEnv, one turn per step) or fleet_marl.env(protocol='sequential', ...), the AEC env")
        opts.pop("protocol", None)  # protocol='simultaneous' is what the vector env plays
        unknown = set(opts) - {"illegal_action"}
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]} = {opts[sorted(unknown)[0]]!r}: the vector env has no such option (obs_mode, render_mode and mask_layout are the parallel env's; the vector env's mask is always flat)")
        self.illegal_action = opts.get("illegal_action", "veto")
        if self.illegal_action not in ILLEGAL_ACTION:
            raise ValueError(f"illegal_action = {short_repr(self.illegal_action)}: expected one of {', '.join(map(repr, ILLEGAL_ACTION))}")
        self.num_envs = int(num_envs)
        self.task = (task or "easy") if config is None else None
        cs = self._core = core.CoreStatic.from_config(cfg)
        self.config, self.kernel_static = cfg, cs.kernel
        T = self.num_agents = cs.T
        self.possible_agents = [f"tenant_{i}" for i in range(T)]
        self.nvec = cs.nvec  # (N, 8)
        #: (8,) each action dimension's size across tenants: the layout of the flat mask
        self.nvec_max = cs.nvec.max(0)
        self._offsets = np.concatenate(([0], np.cumsum(self.nvec_max)))
        self.mask_size = int(self._offsets[-1])
        static = np.zeros((T, self.mask_size), bool)  # every dimension but the GPU count: fixed per tenant
        for d in range(1, N_ACT):
            n = self.nvec_max[d]
            rng = np.arange(n)
            for t in range(T):
                if d == 1 or d == N_ACT - 1:
                    static[t, self._offsets[d]: self._offsets[d + 1]] = rng < cs.nvec[t, d]
                else:
                    static[t, self._offsets[d]: self._offsets[d + 1]] = cs.masks.prec_legal[t, :n]
        self._static_mask = static
        self._all_allowed = np.zeros((T, self.mask_size), bool)
        for d in range(N_ACT):
            self._all_allowed[:, self._offsets[d]: self._offsets[d + 1]] = np.arange(self.nvec_max[d])[None, :] < cs.nvec[:, d, None]
        S = T * N_OBS + cs.kernel.K + cs.kernel.n_racks
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (T, N_OBS), np.float32)
        self.single_action_space = gymnasium.spaces.MultiDiscrete(cs.nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (self.num_envs, T, N_OBS), np.float32)
        self.action_space = gymnasium.spaces.MultiDiscrete(np.broadcast_to(cs.nvec, (self.num_envs, T, N_ACT)))
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (self.num_envs, S), np.float32)
        self._s = core.EnvState.zeros(cs, self.num_envs)
        self.credit_seconds = 0.0  # wall time in the credit engine (the kernel call and the schemes), over the env's lifetime
        self._rngs: list[np.random.Generator] | None = None
        self._credit_rngs: list[np.random.Generator] | None = None

    # --- the API --------------------------------------------------------------------------------

    def reset(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Start a new episode in every cluster. ``seed``: an int s (cluster b gets s + b), a
        list of B ints, or None (continue each cluster's generators; fresh entropy the first
        time). Returns ``(obs (B, N, F), infos)``."""
        B = self.num_envs
        if seed is not None or self._rngs is None:
            seeds = self._seeds(seed)
            self._rngs, self._credit_rngs = [], []
            for s in seeds:
                env_ss, credit_ss = np.random.SeedSequence(s).spawn(2)
                self._rngs.append(np.random.default_rng(env_ss))
                self._credit_rngs.append(np.random.default_rng(credit_ss))
        core.reset(self._core, self._s, np.arange(B), self._rngs)
        obs = core.observe(self._core, self._s)
        return obs, self._infos_reset()

    def step(self, actions):
        """``actions`` (B, N, 8) integer indices (those of agents that left are ignored).
        Returns ``(obs (B, N, F) float32, rewards (B, N), terminated (B, N), truncated (B, N),
        infos)``; a rejected step (an :class:`ActionError` naming the cluster, the tenant and
        the field) changes nothing."""
        if self._rngs is None:
            raise RuntimeError("step() called before reset(): call venv.reset(seed=...) first")
        cs, s = self._core, self._s
        idx, illegal = self._validate(actions)
        r = core.step(cs, s, idx, self._credit_rngs)
        self.credit_seconds += r.credit_seconds
        obs = core.observe(cs, s)
        core.finish(s, r)
        infos = self._infos_step(r, illegal)
        done = ~s.live.any(-1)
        infos["_final"] = infos["_final_obs"] = done  # ours, and gymnasium's name for the final_obs mask
        if done.any():
            which = np.flatnonzero(done)
            infos["final_obs"] = obs.copy()
            infos["final_state"] = core.state_vectors(cs, s, core.observe(cs, s))  # as state() shows it after the last step
            infos["episode"] = {
                "return": s.ret.copy(), "utility": s.utility_sum.copy(), "rounds": s.rounds.copy(),
                "welfare": s.fairness.welfare_sum.copy(), "length": s.round.copy(),
            }
            core.reset(cs, s, which, self._rngs)
            fresh = core.observe(cs, s)
            obs[which] = fresh[which]
            infos["alive"] = s.live.copy()
            self._masks_into(infos)
        return obs, r.reward, r.terminated, r.truncated, infos

    def state(self) -> np.ndarray:
        """(B, S) every cluster's global state vector (``FleetParallelEnv.state()`` per cluster)."""
        self._need_reset("state()")
        cs, s = self._core, self._s
        return core.state_vectors(cs, s, core.observe(cs, s))

    def sample_actions(self, infos: dict, rng: np.random.Generator | None = None) -> np.ndarray:
        """(B, N, 8) random actions allowed by ``infos["action_mask"]`` (for smoke tests and
        random baselines)."""
        return sample_masked(infos["action_mask"], self._offsets, rng)

    def close(self) -> None:
        pass

    @property
    def alive(self) -> np.ndarray:
        """(B, N) bool tenants in their cluster's episode now."""
        return self._s.live.copy()

    # --- internals ------------------------------------------------------------------------------

    def _need_reset(self, what: str) -> None:
        if self._rngs is None:
            raise RuntimeError(f"{what} called before reset(): call venv.reset(seed=...) first")

    def _seeds(self, seed) -> list:
        B = self.num_envs
        if seed is None:
            return [None] * B
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            if seed < 0:
                raise ValueError(f"reset: seed = {seed!r}: expected None, a non-negative integer or a list of {B} of them")
            return [int(seed) + b for b in range(B)]
        seeds = list(seed)
        if len(seeds) != B or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in seeds):
            raise ValueError(f"reset: seed = {seed!r}: expected None, a non-negative integer or a list of {B} of them")
        return [int(x) for x in seeds]

    def _validate(self, actions, live: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(B, N, 8) int64 indices with the actions of agents that left replaced by their default,
        and (B, N) bool masked choices (veto mode); or an ActionError, changing nothing.
        ``live`` (B, N) bool: the actions to check (default: the tenants in their episodes; the
        per-turn env checks the one tenant whose turn it is)."""
        cs, s = self._core, self._s
        B, T = self.num_envs, self.num_agents
        a = np.asarray(actions) if actions is not None else None
        if a is None or a.dtype == object or a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ActionError("actions", "dtype", None if a is None else a.dtype, f"an integer array of shape ({B}, {T}, {N_ACT})")
        if a.shape != (B, T, N_ACT):
            raise ActionError("actions", "shape", a.shape, f"({B}, {T}, {N_ACT}): clusters, tenants, {', '.join(ACTION_FIELDS)}")
        idx = np.empty((B, T, N_ACT), np.int64)
        illegal = np.empty((B, T), bool)
        code, b, t, k = check_indices(a, s.live if live is None else live, cs.nvec, cs.default_index, cs.masks.prec_legal, cs.min_unit, s.budget,
                                       self.illegal_action == "raise", idx, illegal)
        if code == NOT_INTEGER:
            raise ActionError(f"cluster {b}, tenant_{t}", f"action[{k}] ({ACTION_FIELDS[k]})", float(a[b, t, k]), "an integer")
        if code == OUT_OF_RANGE:
            raise ActionError(f"cluster {b}, tenant_{t}", f"action[{k}] ({ACTION_FIELDS[k]})", a[b, t, k].item(), f"an integer in [0, {cs.nvec[t, k] - 1}]")
        if code == NOT_ALLOWED:
            raise ActionError(f"cluster {b}, tenant_{t}", f"action[{k}] ({ACTION_FIELDS[k]})", int(idx[b, t, k]),
                              "a choice the action mask allows (see infos['action_mask'])")
        return idx, illegal

    def _masks_into(self, infos: dict) -> None:
        cs, s = self._core, self._s
        mask = np.empty((self.num_envs,) + self._static_mask.shape, bool)
        mask[:] = self._static_mask  # numpy copies bytes; numba's bool slice copies are ten times slower
        _fill_masks(self._all_allowed, core.afford(cs, s), cs.kernel.max_gpus, s.live, int(self.nvec_max[0]), mask)
        infos["action_mask"] = mask
        infos["action_mask_dims"] = tuple(mask[..., self._offsets[d]: self._offsets[d + 1]] for d in range(N_ACT))

    def _infos_reset(self) -> dict:
        infos = {"alive": self._s.live.copy()}
        self._masks_into(infos)
        return infos

    def _infos_step(self, r: core.StepResult, illegal: np.ndarray) -> dict:
        o = r.credit.outcome
        infos = {
            "alive": self._s.live.copy(),
            "rewards": r.credit.rewards,
            "utility": np.where(r.live, o.utility, 0.0),
            "welfare": r.credit.welfare,
            "requested": np.asarray(o.requested),
            "alloc": np.asarray(o.alloc),
            "throttled": np.asarray(o.power_throttled | o.thermal_throttled),
            "starved": r.starved,
            "starvation_streak": r.streak,
            "fair_share": r.fair,
            "lowest_precision": r.lowest_precision,
            "hoarding": r.hoarding,
            "illegal": illegal,
        }
        for k in ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted"):
            infos[k] = np.asarray(getattr(o, k))
        self._masks_into(infos)
        return infos


class FleetSequentialVectorEnv:
    """The sequential protocol for B clusters, one **turn** per array step (the per-turn vector
    env; ``fleet_marl.vector_env(protocol="sequential", turn_order=...)``).

    Every round has N turn slots in every cluster (N = tenants), so the clusters stay aligned:
    slot k of a round is the k-th tenant of the cluster's turn order among its live tenants
    (:class:`~fleet_marl.environment.FleetSequentialEnv`'s order), and the slots after the live
    ones belong to the tenants that left (``infos["active"]`` False: their actions are ignored,
    not checked). A step takes ``(B, 8)`` actions, one per cluster for the tenant whose turn it
    is (``infos["agent"]``), records the claim, and returns the next tenant's observation
    ``(B, 34 + 6)``: its ``OBS_FIELDS`` of the round's start and its ``CLAIM_FIELDS`` (the claims
    before it, :func:`~fleet_marl.environment.observations.claim_features`, the AEC env's own
    function). After the N-th turn the joint action goes through :class:`FleetVectorEnv`'s
    round (one kernel call for every cluster, counterfactual rows included), and that step
    returns the round's rewards, terminations and truncations ``(B, N)`` (zeros on the other
    turns) and the round's infos (``FleetVectorEnv.step``'s: ``alive``, ``utility``,
    ``welfare``, ..., with ``final_obs`` ``(B, N, 40)`` where a cluster's episode ended), and
    the first turn of the next round; a cluster whose episode ended starts its next one in the
    same step (same-step autoreset, as in :class:`FleetVectorEnv`).

    Every step's ``infos`` hold ``agent`` (B,) int64 the tenant whose turn is next, ``active``
    (B,) bool, ``turn`` (the slot, 0 .. N-1, the same in every cluster), ``round_end`` (the step
    cleared a round), and ``action_mask`` (B, M) / ``action_mask_dims`` that tenant's flat mask.
    ``reset(seed=s)`` seeds cluster b with ``s + b``; cluster b is then bit-identical to
    ``fleet_marl.env(protocol="sequential", turn_order=...)`` reset with seed ``s + b`` and
    given the same actions (observations, rewards, terminations, ``state()``; the random order
    is drawn from the same third stream of the seed; ``tests/test_sequential_torchrl.py``).

    >>> import fleet_marl
    >>> venv = fleet_marl.vector_env(num_envs=4, task="tiny", protocol="sequential", turn_order="rotating")
    >>> obs, infos = venv.reset(seed=0)
    >>> obs.shape, infos["agent"].tolist(), infos["turn"]
    ((4, 40), [0, 0, 0, 0], 0)
    >>> obs, rewards, terminated, truncated, infos = venv.step(venv.sample_actions(infos))
    >>> rewards.shape, infos["agent"].tolist(), infos["round_end"]
    ((4, 2), [1, 1, 1, 1], False)
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
        self.turn_order = require_sequential(overrides, "FleetSequentialVectorEnv", "FleetVectorEnv is the simultaneous protocol's vector env")
        self.protocol = "sequential"
        #: the round engine: the simultaneous protocol's vector env, stepped once per round with the joint action
        self.venv = FleetVectorEnv(num_envs, task, config, **overrides)
        v = self.venv
        self.num_envs, self.num_agents, self.possible_agents = v.num_envs, v.num_agents, v.possible_agents
        self.task, self.config, self.kernel_static, self.nvec, self.nvec_max, self.mask_size = v.task, v.config, v.kernel_static, v.nvec, v.nvec_max, v.mask_size
        self._offsets = v._offsets
        B, T = self.num_envs, self.num_agents
        F = N_OBS + N_CLAIM
        S = v.state_space.shape[-1] + 4 * T
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (F,), np.float32)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (B, F), np.float32)
        self.action_space = gymnasium.spaces.MultiDiscrete(np.broadcast_to(self.nvec_max, (B, N_ACT)))
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (B, S), np.float32)
        st = self.kernel_static
        self._top_bid = float(v._core.bid_levels[-1])
        self._bid_levels = v._core.bid_levels
        self._priority = np.array(sorted(range(T), key=lambda i: (-float(st.priority[i]), i)), np.int64)
        self._order = np.zeros((B, T), np.int64)  # (B, T) the tenant of each turn slot: the live ones in turn order, then those that left
        self._position = np.full((B, T), -1, np.int64)  # (B, T) each tenant's place in this round's order (-1: not in it)
        self._n_live = np.zeros(B, np.int64)  # (B,) tenants in this round's order
        self._joint = np.zeros((B, T, N_ACT), np.int64)  # (B, T, 8) this round's claims (action indices)
        self._claimed = np.zeros((B, T), bool)  # (B, T)
        self._base = np.zeros((B, T, N_OBS), np.float32)  # (B, T, 34) the round's start observations
        self._mask = np.zeros((B, T, self.mask_size), bool)  # (B, T, M) the round's flat action masks
        self.turn = 0
        self._order_rngs: list[np.random.Generator] | None = None

    # --- the API --------------------------------------------------------------------------------

    def reset(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Start a new episode in every cluster (``seed`` as :meth:`FleetVectorEnv.reset` takes
        it). Returns ``(obs (B, 40), infos)`` of the first turn."""
        v = self.venv
        fresh = seed is not None or self._order_rngs is None
        seeds = v._seeds(seed) if fresh else None  # checks the seed before anything changes
        obs, infos = v.reset(seed=seed, options=options)
        if fresh:
            # the turn order's own stream: the third child of each cluster's seed, as the AEC env draws it
            self._order_rngs = [np.random.default_rng(np.random.SeedSequence(s).spawn(3)[2]) for s in seeds]
        self._base, self._mask = obs, infos["action_mask"]
        self._start_round(np.arange(self.num_envs))
        out = {"alive": infos["alive"]}
        return self._turn_obs(), self._turn_infos(out, False)

    def step(self, actions):
        """``actions`` (B, 8) integer indices for the tenant whose turn it is in each cluster
        (ignored where ``infos["active"]`` is False). Returns ``(obs (B, 40) float32, rewards
        (B, N), terminated (B, N), truncated (B, N), infos)``; a rejected step (an
        :class:`ActionError` naming the cluster, the tenant and the field) changes nothing."""
        if self._order_rngs is None:
            raise RuntimeError("step() called before reset(): call venv.reset(seed=...) first")
        B, T = self.num_envs, self.num_agents
        a = np.asarray(actions) if actions is not None else None
        if a is None or a.dtype == object or a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ActionError("actions", "dtype", None if a is None else a.dtype, f"an integer array of shape ({B}, {N_ACT})")
        if a.shape != (B, N_ACT):
            raise ActionError("actions", "shape", a.shape, f"({B}, {N_ACT}): clusters, {', '.join(ACTION_FIELDS)} of the tenant whose turn it is")
        rows = np.arange(B)
        agent, active = self._order[:, self.turn], self.turn < self._n_live
        full = np.zeros((B, T, N_ACT), a.dtype)
        full[rows, agent] = a
        who = np.zeros((B, T), bool)
        who[rows, agent] = active
        idx, _ = self.venv._validate(full, who)  # an ActionError naming the cluster, the tenant and the field; nothing changed
        self._joint[rows[active], agent[active]] = idx[rows[active], agent[active]]
        self._claimed[rows[active], agent[active]] = True
        if self.turn + 1 < T:
            self.turn += 1
            z = np.zeros((B, T))
            return self._turn_obs(), z, z.astype(bool), z.astype(bool), self._turn_infos({"alive": self.venv.alive}, False)
        # the last turn: the round clears once, with the joint action, in the round engine
        obs, rew, term, trunc, infos = self.venv.step(self._joint)
        if "final_obs" in infos:
            none = np.full((B, T), -1, np.int64)  # after the last round nobody is in an order: no claims, place 0
            claims = claim_features(self.kernel_static, self._top_bid, none, np.zeros((B, T)), np.zeros((B, T)), np.zeros((B, T), bool))
            infos["final_obs"] = np.concatenate([infos["final_obs"], claims], -1)
            infos["_final_obs"] = infos["_final"]
            last = infos["final_state"]
            infos["final_state"] = np.concatenate([last, np.zeros((B, 4 * T), np.float32)], -1)
        self._base, self._mask = obs, infos["action_mask"]
        ended = np.flatnonzero(infos["_final"])
        self._start_round(np.arange(B))  # the AEC env starts a round after every clearing (the last one too) ...
        if len(ended):
            self._start_round(ended)  # ... and another when it is reset
        return self._turn_obs(), rew, term, trunc, self._turn_infos(infos, True)

    def state(self) -> np.ndarray:
        """(B, S) every cluster's ``FleetSequentialEnv.state()`` now: the simultaneous state
        vector, then per tenant claimed (0/1), GPUs / max_gpus, bid / highest level, place /
        (tenants in the order - 1)."""
        self._need_reset("state()")
        B, T = self.num_envs, self.num_agents
        extra = np.zeros((B, T, 4))
        c = self._claimed
        extra[..., 0] = c
        extra[..., 1] = np.where(c, self._joint[..., 0] / self.kernel_static.max_gpus, 0.0)
        extra[..., 2] = np.where(c, self._bid_levels[self._joint[..., 1]] / self._bid_levels[-1], 0.0)
        extra[..., 3] = np.where(self._position >= 0, self._position / np.maximum(self._n_live[:, None] - 1, 1), 0.0)
        return np.concatenate([self.venv.state(), np.clip(extra, 0.0, 1.0).reshape(B, 4 * T).astype(np.float32)], -1)

    def observations(self) -> np.ndarray:
        """(B, N, 40) every tenant's observation now, as ``FleetSequentialEnv.observe`` gives it:
        its round-start row and the claims made before its place (a tenant whose turn is still to
        come sees the claims so far that come before it)."""
        self._need_reset("observations()")
        claims = claim_features(self.kernel_static, self._top_bid, self._position, np.where(self._claimed, self._joint[..., 0], 0),
                                self._bid_levels[self._joint[..., 1]], self._claimed)
        return np.concatenate([self._base, claims], -1)

    def sample_actions(self, infos: dict, rng: np.random.Generator | None = None) -> np.ndarray:
        """(B, 8) random actions allowed by ``infos["action_mask"]`` (the acting tenants')."""
        return sample_masked(infos["action_mask"], self._offsets, rng)

    def close(self) -> None:
        pass

    @property
    def alive(self) -> np.ndarray:
        """(B, N) bool tenants in their cluster's episode now."""
        return self.venv.alive

    @property
    def order(self) -> np.ndarray:
        """(B, N) the tenant of each turn slot of this round (the live ones first, in turn order; a copy)."""
        return self._order.copy()

    # --- internals ------------------------------------------------------------------------------

    def _need_reset(self, what: str) -> None:
        if self._order_rngs is None:
            raise RuntimeError(f"{what} called before reset(): call venv.reset(seed=...) first")

    def _start_round(self, clusters: np.ndarray) -> None:
        """This round's order in ``clusters`` (the random order draws one permutation of all the
        tenants per cluster and round, as the AEC env does); no claims yet; turn slot 0."""
        T = self.num_agents
        s = self.venv._s
        if self.turn_order == "random":
            seq = np.stack([self._order_rngs[b].permutation(T) for b in clusters]) if len(clusters) else np.zeros((0, T), np.int64)
        elif self.turn_order == "rotating":
            seq = (s.round[clusters, None] + np.arange(T)) % T
        elif self.turn_order == "priority":
            seq = np.broadcast_to(self._priority, (len(clusters), T))
        else:
            seq = np.broadcast_to(np.arange(T), (len(clusters), T))
        live = np.take_along_axis(s.live[clusters], seq, 1)
        order = np.take_along_axis(seq, np.argsort(~live, axis=1, kind="stable"), 1)  # live first, each part in turn order
        n = live.sum(1)
        pos = np.full((len(clusters), T), -1, np.int64)
        k = np.broadcast_to(np.arange(T), pos.shape)
        np.put_along_axis(pos, order, np.where(k < n[:, None], k, -1), 1)
        self._order[clusters], self._position[clusters], self._n_live[clusters] = order, pos, n
        self._joint[clusters] = 0
        self._claimed[clusters] = False
        self.turn = 0

    def _turn_obs(self) -> np.ndarray:
        rows = np.arange(self.num_envs)
        agent = self._order[:, self.turn]
        claims = claim_features(self.kernel_static, self._top_bid, self._position, np.where(self._claimed, self._joint[..., 0], 0),
                                self._bid_levels[self._joint[..., 1]], self._claimed, rows=agent)
        return np.concatenate([self._base[rows, agent], claims], -1)

    def _turn_infos(self, infos: dict, round_end: bool) -> dict:
        rows = np.arange(self.num_envs)
        agent = self._order[:, self.turn]
        mask = self._mask[rows, agent]
        infos.update(agent=agent.copy(), active=self.turn < self._n_live, turn=self.turn, round_end=round_end, action_mask=mask,
                     action_mask_dims=tuple(mask[..., self._offsets[d]: self._offsets[d + 1]] for d in range(N_ACT)))
        return infos


@nb.njit(cache=True, nogil=True)
def _fill_masks(all_allowed, afford, max_gpus, live, g, mask):
    """Finish the flat masks (B, T, M), which hold each tenant's static mask: GPU counts up to
    what a live tenant's budget affords (and its cap) in the first ``g`` columns; everything
    allowed for the tenants not live."""
    B, T, M = mask.shape
    for b in range(B):
        for t in range(T):
            if not live[b, t]:
                for m in range(M):
                    mask[b, t, m] = all_allowed[t, m]
                continue
            top = min(afford[b, t], float(max_gpus[t]))
            for m in range(g):
                mask[b, t, m] = m <= top


def vector_env(num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
    """The vector env: ``vector_env(num_envs=256, task="easy", reward_scheme="difference")``, a
    :class:`FleetVectorEnv` (one round per step); with ``protocol="sequential"`` (and
    ``turn_order``) a :class:`FleetSequentialVectorEnv` (one turn per step)."""
    if overrides.get("protocol") == "sequential":
        return FleetSequentialVectorEnv(num_envs, task, config, **overrides)
    return FleetVectorEnv(num_envs, task, config, **overrides)


__all__ = ["FleetSequentialVectorEnv", "FleetVectorEnv", "vector_env"]

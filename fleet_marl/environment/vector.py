"""``FleetVectorEnv``: B clusters stepped as one array operation (the sequential protocol's
per-turn vector env, over it, and ``vector_env()`` are :mod:`fleet_marl.environment.sequential_vector`).

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

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium
import numba as nb
import numpy as np
from gymnasium.vector import AutoresetMode

from fleet_marl.checks import is_integer, is_seed
from fleet_marl.environment import core
from fleet_marl.environment.infos import COUPLING_KEYS
from fleet_marl.environment.observer import tenant_coupling
from fleet_marl.environment.spaces import (
    ACTION_FIELDS,
    ILLEGAL_ACTION,
    N_ACT,
    NOT_ALLOWED,
    NOT_INTEGER,
    OUT_OF_RANGE,
    ActionError,
    check_indices,
    obs_fields,
)
from fleet_marl.errors import short_repr
from fleet_marl.tasks import check_protocol, make_config


def sample_masked(mask: np.ndarray, offsets, rng: np.random.Generator | None = None) -> np.ndarray:
    """Uniform random action indices (..., 8) allowed by flat masks (..., M) whose dimension d
    spans columns ``offsets[d]:offsets[d + 1]``."""
    rng = np.random.default_rng() if rng is None else rng
    out = np.zeros(mask.shape[:-1] + (N_ACT,), np.int64)
    for d in range(N_ACT):
        m = mask[..., offsets[d] : offsets[d + 1]]
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

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
        if not is_integer(num_envs) or num_envs < 1:
            raise ValueError(f"num_envs = {num_envs!r}: expected an integer >= 1")
        cfg, opts = make_config(task, config, **overrides)
        if check_protocol(opts)[0] == "sequential":  # a bad protocol or turn_order is a ConfigError naming it
            raise ValueError(
                "protocol = 'sequential': FleetVectorEnv steps every tenant of every cluster at once (a round per step, "
                "the simultaneous protocol); the sequential protocol is turn-based: use fleet_marl.vector_env(protocol="
                "'sequential', ...) (FleetSequentialVectorEnv, one turn per step) or fleet_marl.env(protocol='sequential', ...), the AEC env"
            )
        opts.pop("protocol", None)  # protocol='simultaneous' is what the vector env plays
        unknown = set(opts) - {"illegal_action"}
        if unknown:
            raise ValueError(
                f"{sorted(unknown)[0]} = {opts[sorted(unknown)[0]]!r}: the vector env has no such option (obs_mode, render_mode and mask_layout are the parallel env's; the vector env's mask is always flat)"
            )
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
                    static[t, self._offsets[d] : self._offsets[d + 1]] = rng < cs.nvec[t, d]
                else:
                    static[t, self._offsets[d] : self._offsets[d + 1]] = cs.masks.prec_legal[t, :n]
        self._static_mask = static
        self._all_allowed = np.zeros((T, self.mask_size), bool)
        for d in range(N_ACT):
            self._all_allowed[:, self._offsets[d] : self._offsets[d + 1]] = np.arange(self.nvec_max[d])[None, :] < cs.nvec[:, d, None]
        F = cs.observer.n_features  # N_OBS, plus N_COUPLING with a coupling switch on
        #: the observation's columns in order, (name, meaning) (``fields.obs_fields``)
        self.obs_fields = obs_fields(cs.observer.coupled)
        S = T * F + cs.kernel.K + cs.kernel.n_racks
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (T, F), np.float32)
        self.single_action_space = gymnasium.spaces.MultiDiscrete(cs.nvec)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (self.num_envs, T, F), np.float32)
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
                "return": s.ret.copy(),
                "utility": s.utility_sum.copy(),
                "rounds": s.rounds.copy(),
                "welfare": s.fairness.welfare_sum.copy(),
                "length": s.round.copy(),
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

    def core_state(self) -> core.EnvState:
        """A copy of every cluster's array-core state (:class:`~fleet_marl.environment.core.EnvState`,
        B clusters) as the next step starts from it, every array copied: stepping it with
        :func:`fleet_marl.environment.core.step` changes nothing here (``FleetParallelEnv.core_state``
        for B clusters). For what branches the episodes: the k-round difference
        (:mod:`fleet_marl.environment.horizon`)."""
        self._need_reset("core_state()")
        return self._s.take(np.arange(self.num_envs))

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

    @property
    def rounds(self) -> np.ndarray:
        """(B,) rounds played in each cluster's episode (a copy)."""
        return self._s.round.copy()

    @property
    def all_allowed(self) -> np.ndarray:
        """(N, M) bool every choice of each tenant's action space, in the flat mask layout: the
        mask a learner sees for a cluster whose episode just ended (a read-only view)."""
        v = self._all_allowed.view()
        v.flags.writeable = False
        return v

    @property
    def mask_offsets(self) -> np.ndarray:
        """(9,) where each of the 8 action fields starts in the flat mask (the last: its length)."""
        return self._offsets.copy()

    @property
    def bid_levels(self) -> np.ndarray:
        """(L,) the price multipliers of ``bid_level``."""
        return self._core.bid_levels.copy()

    def check_seeds(self, seed) -> list:
        """The seed of each cluster that ``reset(seed=seed)`` would use (None: fresh entropy), or
        the ValueError it would raise; changes nothing."""
        return self._seeds(seed)

    def validate_actions(self, actions, live: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """What ``step(actions)`` checks before it changes anything: ``(indices (B, N, 8), masked
        (B, N) bool)``, or the ActionError naming the cluster, the tenant and the field. ``live``
        (B, N) bool: the actions to check (default: the tenants in their episodes)."""
        return self._validate(actions, live)

    # --- internals ------------------------------------------------------------------------------

    def _need_reset(self, what: str) -> None:
        if self._rngs is None:
            raise RuntimeError(f"{what} called before reset(): call venv.reset(seed=...) first")

    def _seeds(self, seed) -> list:
        B = self.num_envs
        if seed is None:
            return [None] * B
        if is_integer(seed):
            if seed < 0:
                raise ValueError(f"reset: seed = {seed!r}: expected None, a non-negative integer or a list of {B} of them")
            return [int(seed) + b for b in range(B)]
        seeds = list(seed)
        if len(seeds) != B or not all(is_seed(x) for x in seeds):
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
        if a is None or a.dtype in (object, bool) or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ActionError("actions", "dtype", None if a is None else a.dtype, f"an integer array of shape ({B}, {T}, {N_ACT})")
        if a.shape != (B, T, N_ACT):
            raise ActionError("actions", "shape", a.shape, f"({B}, {T}, {N_ACT}): clusters, tenants, {', '.join(ACTION_FIELDS)}")
        idx = np.empty((B, T, N_ACT), np.int64)
        illegal = np.empty((B, T), bool)
        code, b, t, k = check_indices(
            a,
            s.live if live is None else live,
            cs.nvec,
            cs.default_index,
            cs.masks.prec_legal,
            cs.min_unit,
            s.budget,
            self.illegal_action == "raise",
            idx,
            illegal,
        )
        if code == NOT_INTEGER:
            raise ActionError(f"cluster {b}, tenant_{t}", f"action[{k}] ({ACTION_FIELDS[k]})", float(a[b, t, k]), "an integer")
        if code == OUT_OF_RANGE:
            raise ActionError(
                f"cluster {b}, tenant_{t}",
                f"action[{k}] ({ACTION_FIELDS[k]})",
                a[b, t, k].item(),
                f"an integer in [0, {cs.nvec[t, k] - 1}]",
            )
        if code == NOT_ALLOWED:
            raise ActionError(
                f"cluster {b}, tenant_{t}",
                f"action[{k}] ({ACTION_FIELDS[k]})",
                int(idx[b, t, k]),
                "a choice the action mask allows (see infos['action_mask'])",
            )
        return idx, illegal

    def _masks_into(self, infos: dict) -> None:
        cs, s = self._core, self._s
        mask = np.empty((self.num_envs,) + self._static_mask.shape, bool)
        mask[:] = self._static_mask  # numpy copies bytes; numba's bool slice copies are ten times slower
        _fill_masks(self._all_allowed, core.afford(cs, s), cs.kernel.max_gpus, s.live, int(self.nvec_max[0]), mask)
        infos["action_mask"] = mask
        infos["action_mask_dims"] = tuple(mask[..., self._offsets[d] : self._offsets[d + 1]] for d in range(N_ACT))

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
        for k in ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted", "ttft_p50_s", "ttft_p99_s"):
            infos[k] = np.asarray(getattr(o, k))
        infos.update(zip(COUPLING_KEYS, tenant_coupling(self.kernel_static, o, self._core.observer.pool_racks), strict=True))
        self._masks_into(infos)
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


__all__ = ["FleetVectorEnv", "sample_masked"]

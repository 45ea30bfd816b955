"""``FleetSequentialVectorEnv``: the sequential protocol for B clusters, one turn per array step:
the protocol's array core (:class:`~fleet_marl.environment.turns.Turns`: the order, the turn
slots, the claims) over :class:`~fleet_marl.environment.vector.FleetVectorEnv` (which clears
each round); and ``vector_env()``, which builds the vector env of either protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from fleet_marl.environment.spaces import ACTION_FIELDS, N_ACT, N_CLAIM, N_OBS, ActionError, obs_fields
from fleet_marl.environment.turns import STATE_CLAIM_COLUMNS, Turns
from fleet_marl.environment.vector import FleetVectorEnv, sample_masked
from fleet_marl.tasks import require_sequential


class FleetSequentialVectorEnv:
    """The sequential protocol for B clusters, one **turn** per array step (the per-turn vector
    env; ``fleet_marl.vector_env(protocol="sequential", turn_order=...)``).

    Every round has N turn slots in every cluster (N = tenants), so the clusters stay aligned:
    slot k of a round is the k-th tenant of the cluster's turn order among its live tenants
    (the array core's order, the one :class:`~fleet_marl.environment.FleetSequentialEnv` plays
    for one cluster), and the slots after the live
    ones belong to the tenants that left (``infos["active"]`` False: their actions are ignored,
    not checked). A step takes ``(B, 8)`` actions, one per cluster for the tenant whose turn it
    is (``infos["agent"]``), records the claim, and returns the next tenant's observation
    ``(B, 34 + 6)``: its ``OBS_FIELDS`` of the round's start and its ``CLAIM_FIELDS`` (the claims
    before it, :meth:`Turns.features <fleet_marl.environment.turns.Turns.features>`, the AEC
    env's own). After the N-th turn the joint action goes through :class:`FleetVectorEnv`'s
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

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
        self.turn_order = require_sequential(
            overrides, "FleetSequentialVectorEnv", "FleetVectorEnv is the simultaneous protocol's vector env"
        )
        self.protocol = "sequential"
        #: the round engine: the simultaneous protocol's vector env, stepped once per round with the joint action
        self.venv = FleetVectorEnv(num_envs, task, config, **overrides)
        v = self.venv
        self.num_envs, self.num_agents, self.possible_agents = v.num_envs, v.num_agents, v.possible_agents
        self.task, self.config, self.kernel_static, self.nvec, self.nvec_max, self.mask_size = (
            v.task,
            v.config,
            v.kernel_static,
            v.nvec,
            v.nvec_max,
            v.mask_size,
        )
        self._offsets = v.mask_offsets
        B, T = self.num_envs, self.num_agents
        F = len(v.obs_fields) + N_CLAIM  # OBS_FIELDS, CLAIM_FIELDS, then COUPLING_FIELDS with a coupling switch on
        #: the observation's columns in order, (name, meaning) (``fields.obs_fields``)
        self.obs_fields = obs_fields(len(v.obs_fields) > N_OBS, sequential=True)
        S = v.state_space.shape[-1] + len(STATE_CLAIM_COLUMNS) * T
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (F,), np.float32)
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (B, F), np.float32)
        self.action_space = gymnasium.spaces.MultiDiscrete(np.broadcast_to(self.nvec_max, (B, N_ACT)))
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (B, S), np.float32)
        #: the protocol's array core: the order, the turn slots, the claims and their features
        self._turns = Turns(B, self.kernel_static, v.bid_levels, self.turn_order)
        self._base = np.zeros((B, T, len(v.obs_fields)), np.float32)  # (B, T, 34 (+5)) the round's start observations
        self._mask = np.zeros((B, T, self.mask_size), bool)  # (B, T, M) the round's flat action masks

    # --- the API --------------------------------------------------------------------------------

    def reset(self, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Start a new episode in every cluster (``seed`` as :meth:`FleetVectorEnv.reset` takes
        it). Returns ``(obs (B, 40), infos)`` of the first turn."""
        v = self.venv
        fresh = seed is not None or self._turns.rngs is None
        seeds = v.check_seeds(seed) if fresh else None  # checks the seed before anything changes
        obs, infos = v.reset(seed=seed, options=options)
        if seeds is not None:
            self._turns.seed(seeds)  # the turn order's own stream of each cluster's seed, as the AEC env draws it
        self._base, self._mask = obs, infos["action_mask"]
        self._start_round(np.arange(self.num_envs))
        out = {"alive": infos["alive"]}
        return self._turn_obs(), self._turn_infos(out, False)

    def step(self, actions):
        """``actions`` (B, 8) integer indices for the tenant whose turn it is in each cluster
        (ignored where ``infos["active"]`` is False). Returns ``(obs (B, 40) float32, rewards
        (B, N), terminated (B, N), truncated (B, N), infos)``; a rejected step (an
        :class:`ActionError` naming the cluster, the tenant and the field) changes nothing."""
        self._need_reset("step()")
        B, T = self.num_envs, self.num_agents
        a = np.asarray(actions) if actions is not None else None
        if a is None or a.dtype in (object, bool) or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ActionError("actions", "dtype", None if a is None else a.dtype, f"an integer array of shape ({B}, {N_ACT})")
        if a.shape != (B, N_ACT):
            raise ActionError(
                "actions", "shape", a.shape, f"({B}, {N_ACT}): clusters, {', '.join(ACTION_FIELDS)} of the tenant whose turn it is"
            )
        rows, turns = np.arange(B), self._turns
        agent, active = turns.agent, turns.active
        full = np.zeros((B, T, N_ACT), a.dtype)
        full[rows, agent] = a
        who = np.zeros((B, T), bool)
        who[rows, agent] = active
        idx, _ = self.venv.validate_actions(full, who)  # an ActionError naming the cluster, the tenant and the field; nothing changed
        turns.claim(rows[active], agent[active], idx[rows[active], agent[active]])
        if turns.turn + 1 < T:
            turns.advance()
            z = np.zeros((B, T))
            return self._turn_obs(), z, z.astype(bool), z.astype(bool), self._turn_infos({"alive": self.venv.alive}, False)
        # the last turn: the round clears once, with the joint action, in the round engine
        obs, rew, term, trunc, infos = self.venv.step(turns.joint)
        if "final_obs" in infos:
            # after the last round nobody is in an order: no claims, place 0
            infos["final_obs"] = _with_claims(infos["final_obs"], turns.empty_features())
            infos["_final_obs"] = infos["_final"]
            last = infos["final_state"]
            infos["final_state"] = np.concatenate([last, np.zeros((B, len(STATE_CLAIM_COLUMNS) * T), np.float32)], -1)
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
        return np.concatenate([self.venv.state(), self._turns.state_columns()], -1)

    def observations(self) -> np.ndarray:
        """(B, N, 40) every tenant's observation now, as ``FleetSequentialEnv.observe`` gives it:
        its round-start row and the claims made before its place (a tenant whose turn is still to
        come sees the claims so far that come before it)."""
        self._need_reset("observations()")
        return _with_claims(self._base, self._turns.features())

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
        return self._turns.order.copy()

    @property
    def turn(self) -> int:
        """This round's turn slot, 0 .. N-1 (the same in every cluster)."""
        return self._turns.turn

    # --- internals ------------------------------------------------------------------------------

    def _need_reset(self, what: str) -> None:
        if self._turns.rngs is None:
            raise RuntimeError(f"{what} called before reset(): call venv.reset(seed=...) first")

    def _start_round(self, clusters: np.ndarray) -> None:
        """This round's order in ``clusters`` (the array core's); no claims yet; turn slot 0."""
        self._turns.start(clusters, self.venv.rounds[clusters], self.venv.alive[clusters])

    def _turn_obs(self) -> np.ndarray:
        rows, agent = np.arange(self.num_envs), self._turns.agent
        return _with_claims(self._base[rows, agent], self._turns.features(rows=agent))

    def _turn_infos(self, infos: dict, round_end: bool) -> dict:
        rows, turns = np.arange(self.num_envs), self._turns
        agent = turns.agent
        mask = self._mask[rows, agent]
        infos.update(
            agent=agent.copy(),
            active=turns.active,
            turn=turns.turn,
            round_end=round_end,
            action_mask=mask,
            action_mask_dims=tuple(mask[..., self._offsets[d] : self._offsets[d + 1]] for d in range(N_ACT)),
        )
        return infos


def _with_claims(base: np.ndarray, claims: np.ndarray) -> np.ndarray:
    """Round-start rows (..., F) with the claim features (..., N_CLAIM) after their
    ``OBS_FIELDS`` and before their ``COUPLING_FIELDS`` (if any), as the AEC env lays them out."""
    return np.concatenate([base[..., :N_OBS], claims, base[..., N_OBS:]], -1)


def vector_env(num_envs: int = 1, task: str | None = None, config=None, **overrides: Any):
    """The vector env: ``vector_env(num_envs=256, task="easy", reward_scheme="difference")``, a
    :class:`FleetVectorEnv` (one round per step); with ``protocol="sequential"`` (and
    ``turn_order``) a :class:`FleetSequentialVectorEnv` (one turn per step)."""
    if overrides.get("protocol") == "sequential":
        return FleetSequentialVectorEnv(num_envs, task, config, **overrides)
    return FleetVectorEnv(num_envs, task, config, **overrides)


__all__ = ["FleetSequentialVectorEnv", "vector_env"]

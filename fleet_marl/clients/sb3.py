"""``FleetSB3VecEnv``: the vector env as a Stable-Baselines3 ``VecEnv``, one slot per tenant per cluster
(the ``[sb3]`` extra; importing this module without it is a :class:`~fleet_marl.errors.MissingExtra`
naming the pip command).

SB3's learners see ``num_envs = B * N`` single-agent slots, slot ``b * N + t`` being tenant t of
cluster b; one ``step_wait`` is one array step of :class:`~fleet_marl.environment.vector.FleetVectorEnv`
(B clusters, one kernel call), with no PettingZoo dicts and no SuperSuit in between::

    observations  (B*N, 34) float32 in [0, 1]            obs_mode="flat" (a Box: PPO's "MlpPolicy")
                  {"observation": (B*N, 34),             obs_mode="dict" (SB3's "MultiInputPolicy");
                   "action_mask": (B*N, M) int8}          mask_layout="flat" only: SB3 has no Tuple space
    actions       (B*N, 8) int                           MultiDiscrete(nvec_max)
    rewards       (B*N,) float32, dones (B*N,) bool, infos: a list of B*N dicts

Masks. ``action_masks()`` is the (B*N, M) bool flat mask, M = sum(nvec_max), the method
sb3-contrib's ``MaskablePPO`` calls (through ``env_method("action_masks")``); every
``infos[i]["action_mask"]`` holds the slot's mask too, in ``mask_layout`` ("flat": one vector
of M, "dims": a tuple of 8 per-dimension arrays of lengths nvec_max).

Episodes. Each slot follows its tenant: ``dones[i]`` is True at the step tenant i leaves its
cluster's episode (terminated, or truncated: then ``infos[i]["TimeLimit.truncated"]`` is True,
so SB3 bootstraps from ``infos[i]["terminal_observation"]``), and ``infos[i]["episode"]`` is its
report (``r`` return, ``l`` rounds, as SB3's ``Monitor`` writes it, so ``ep_rew_mean`` logs
with no wrapper). A tenant that left before the others holds a dead slot until its cluster
ends: zero observations, reward 0, an all-allowed mask, its actions ignored,
``infos[i]["alive"]`` False (SuperSuit's ``black_death``); when the cluster's episode ends the
dead slot is done once more (terminated, no ``episode``), which closes the stretch of zeros, and
every slot of the cluster starts its next episode (the vector env resets it in the same step;
the first observation is returned, as SB3 expects). Wrap with ``VecMonitor`` only if you want
those closing dones counted as episodes.

Seeding: ``seed(s)`` (what SB3's ``seed=`` calls) makes the next ``reset()`` seed cluster b with
``s + b``, bit for bit the parallel env reset with that seed (``FleetVectorEnv``'s rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from fleet_marl.clients.base import VectorClient, check_modes, split_dims
from fleet_marl.errors import require

require("stable_baselines3", "sb3", "fleet_marl.clients.sb3")

from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn  # noqa: E402 (after the extra's check)


def check_options(obs_mode: str, mask_layout: str) -> None:
    """The ValueError of a combination SB3 cannot take, naming one it can."""
    check_modes(obs_mode, mask_layout)
    if obs_mode == "dict" and mask_layout == "dims":
        raise ValueError(
            "obs_mode='dict' with mask_layout='dims': SB3 has no Tuple observation space for the 8 per-dimension masks; "
            "use obs_mode='dict', mask_layout='flat' (the mask one MultiBinary entry) or obs_mode='flat' with either layout"
        )


class FleetSB3VecEnv(VectorClient, VecEnv):
    """B clusters of ``task`` (or ``config``, plus overrides, as :func:`fleet_marl.vector_env`
    takes them) as ``B * N`` SB3 slots; see the module docstring.

    >>> from fleet_marl.clients.sb3 import FleetSB3VecEnv
    >>> venv = FleetSB3VecEnv(num_clusters=4, task="tiny", seed=0)
    >>> venv.num_envs, venv.reset().shape, venv.action_masks().shape
    (8, (8, 34), (8, 48))
    """

    def __init__(
        self,
        num_clusters: int = 64,
        task: str | None = None,
        config=None,
        obs_mode: str = "flat",
        mask_layout: str = "flat",
        seed: int | None = None,
        **overrides: Any,
    ):
        check_options(obs_mode, mask_layout)
        venv = self.open_clusters(num_clusters, task, config, obs_mode, mask_layout, overrides)
        B, N = self.num_clusters, self.n_agents
        F, M = venv.single_observation_space.shape[-1], venv.mask_size
        box = gymnasium.spaces.Box(0.0, 1.0, (F,), np.float32)
        obs_space: gymnasium.spaces.Space = box
        if obs_mode == "dict":
            obs_space = gymnasium.spaces.Dict({"observation": box, "action_mask": gymnasium.spaces.MultiBinary(M)})
        super().__init__(B * N, obs_space, gymnasium.spaces.MultiDiscrete(venv.nvec_max))
        self._next_seed: int | None = seed
        self._actions: np.ndarray | None = None
        self._alive = np.zeros((B, N), bool)
        self._mask = np.ones((B * N, M), bool)
        self._zeros = np.zeros((B * N, F), np.float32)
        self._return = np.zeros((B, N))  # each tenant's return and rounds so far this episode: its "episode" report
        self._rounds = np.zeros((B, N), np.int64)

    # --- VecEnv ---------------------------------------------------------------------------------

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the next ``reset()``: cluster b gets ``seed + b``. Returns each slot's cluster seed."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._next_seed = int(seed)
        return [self._next_seed + i // self.n_agents for i in range(self.num_envs)]

    def reset(self) -> VecEnvObs:
        obs, infos = self.venv.reset(seed=self._next_seed)
        self._next_seed = None
        self._alive = infos["alive"].copy()
        self._mask = infos["action_mask"].reshape(self.num_envs, -1)
        self._return[:] = 0.0
        self._rounds[:] = 0
        self.reset_infos = self._slot_infos()
        return self._obs(obs.reshape(self.num_envs, -1))

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        B, N, S = self.num_clusters, self.n_agents, self.num_envs
        actions, self._actions = self._actions.reshape(B, N, -1), None
        was_alive = self._alive
        obs, rew, term, trunc, infos = self.venv.step(actions)
        ended = infos["_final"]
        self._return += rew
        self._rounds += was_alive
        left = term | trunc  # tenants that finished at this step (0 for slots already dead)
        dones = (left | (ended[:, None] & ~was_alive)).reshape(S)  # and the dead slots of the clusters that ended
        self._alive = infos["alive"].copy()  # a cluster that ended has started its next episode
        self._mask = infos["action_mask"].reshape(S, -1)
        flat = obs.reshape(S, -1)
        next_obs = np.where(self._alive.reshape(S, 1), flat, self._zeros)
        slot_infos = self._slot_infos()
        if dones.any():
            last = np.where(ended[:, None, None], infos["final_obs"], obs).reshape(S, -1) if ended.any() else flat
            truncated = (trunc & ~term).reshape(S)
            for i in np.flatnonzero(dones):
                b, t = divmod(int(i), N)
                info = slot_infos[i]
                if not left[b, t]:  # a dead stretch ends with its cluster: terminal, nothing to report
                    info["terminal_observation"] = self._obs_row(self._zeros[i], int(i))
                    continue
                info["terminal_observation"] = self._obs_row(last[i], int(i))
                info["TimeLimit.truncated"] = bool(truncated[i])
                info["episode"] = {"r": float(self._return[b, t]), "l": int(self._rounds[b, t])}
            self._return[ended] = 0.0
            self._rounds[ended] = 0
        return self._obs(next_obs), rew.reshape(S).astype(np.float32), dones, slot_infos

    def action_masks(self) -> np.ndarray:
        """(B*N, M) bool: every slot's flat mask (what ``MaskablePPO`` reads; a dead slot's allows every choice)."""
        return self._mask.copy()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        value = getattr(self, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Only ``action_masks`` is per slot (each slot's row); other methods are the whole env's."""
        idx = list(self._get_indices(indices))
        if method_name == "action_masks":
            return list(self._mask[idx])
        result = getattr(self, method_name)(*method_args, **method_kwargs)
        return [result for _ in idx]

    def env_is_wrapped(self, wrapper_class: type[gymnasium.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    # --- internals ------------------------------------------------------------------------------

    def _obs(self, flat_obs: np.ndarray) -> VecEnvObs:
        if self.obs_mode == "flat":
            return flat_obs.astype(np.float32, copy=False)
        return {"observation": flat_obs.astype(np.float32, copy=False), "action_mask": self._mask.astype(np.int8)}

    def _obs_row(self, row: np.ndarray, i: int):
        if self.obs_mode == "flat":
            return row.copy()
        return {"observation": row.copy(), "action_mask": self._mask[i].astype(np.int8)}

    def _slot_infos(self) -> list[dict]:
        alive = self._alive.reshape(-1).tolist()
        if self.mask_layout == "flat":
            return [{"action_mask": m, "alive": a} for m, a in zip(self._mask, alive, strict=True)]
        return [{"action_mask": split_dims(m, self.offsets), "alive": a} for m, a in zip(self._mask, alive, strict=True)]


__all__ = ["FleetSB3VecEnv", "check_options"]

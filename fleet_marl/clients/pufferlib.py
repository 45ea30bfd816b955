"""``FleetPufferEnv``: the vector env as a native PufferLib env, writing into PufferLib's buffers
(pufferlib-core 3.x: the ``[pufferlib]`` extra, then ``pip install --no-deps pufferlib-core==3.0.23``:
its wheel pins torch 2.9.0, and the env needs only its numpy side; importing this module without
them is a :class:`~fleet_marl.errors.MissingExtra` naming both install commands).

A native ``pufferlib.PufferEnv`` handles its own vectorization: one instance holds B clusters
of N tenants, ``num_agents = B * N`` rows (row ``b * N + t`` is tenant t of cluster b), and one
``step`` is one array step of :class:`~fleet_marl.environment.vector.FleetVectorEnv` written
straight into the buffers PufferLib hands it (``observations``, ``rewards``, ``terminals``,
``truncations``, ``masks``; shared memory under ``pufferlib.vector``'s Multiprocessing backend)::

    observations  (B*N, 34) float32 in [0, 1]         obs_mode="flat"
                  (B*N, 34 + M) float32               obs_mode="dict": the row, then the flat action
                                                      mask as 0/1 (M = sum(nvec_max)); a native
                                                      PufferEnv observes one Box
    actions       (B*N, 8) int32                      MultiDiscrete(nvec_max)
    rewards       (B*N,) float32; terminals, truncations (B*N,) bool; masks (B*N,) bool

``pufferlib.vector.make(FleetPufferEnv, backend=pufferlib.PufferEnv, env_kwargs={...})``
returns the env itself (native vectorization); ``backend="Serial"`` or ``"Multiprocessing"``
runs several of them, each writing its slice of the shared buffers.

Masks: ``action_masks()`` is every row's mask in ``mask_layout`` (``"flat"``: (B*N, M) bool;
``"dims"``: a tuple of 8 (B*N, nvec_max[d]) arrays), for a policy in the same process. Across
processes the mask travels in the observation: take ``obs_mode="dict"`` (``mask_layout="flat"``:
a Box holds no tuple).

Episodes: a row's ``terminals`` / ``truncations`` are its tenant's at the step it leaves; from
then until its cluster's episode ends the row is dead (PufferLib's emulation of PettingZoo does
the same): zero observation, reward 0, ``terminals`` True, ``masks`` False, its actions
ignored. A cluster whose episode ends starts the next in the same step (native PufferEnvs reset
themselves): its rows hold the new episode's first observation. ``step`` returns a list of
infos, one dict of episode means when some cluster ended (``episode_return``, ``episode_length``,
``welfare``), else empty, as PufferLib's own envs log.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium
import numpy as np

from fleet_marl.clients.base import VectorClient, check_modes, import_unlisted, split_dims
from fleet_marl.errors import require

#: The install line of the extra: pufferlib-core's wheel pins torch==2.9.0, so it goes in without its dependencies.
INSTALL = "pip install 'fleet-marl[pufferlib]' && pip install --no-deps pufferlib-core==3.0.23"
WHAT = f"fleet_marl.clients.pufferlib ({INSTALL})"

require(("torch", "psutil"), "pufferlib", WHAT)
# the parent first: a loaded submodule hides a missing parent
import_unlisted(WHAT, "pufferlib", lambda: [importlib.import_module(m) for m in ("pufferlib", "pufferlib.vector")])

import pufferlib  # noqa: E402 (after the extra's check)


def check_options(obs_mode: str, mask_layout: str) -> None:
    """The ValueError of a combination a native PufferEnv cannot take, naming one it can."""
    check_modes(obs_mode, mask_layout)
    if obs_mode == "dict" and mask_layout == "dims":
        raise ValueError(
            "obs_mode='dict' with mask_layout='dims': a native PufferEnv observes one Box, which holds the mask as one flat vector "
            "and no tuple of per-dimension masks; use obs_mode='dict', mask_layout='flat' (the mask in the observation) or "
            "obs_mode='flat' with either layout (the mask from env.action_masks())"
        )


class FleetPufferEnv(VectorClient, pufferlib.PufferEnv):
    """B clusters of ``task`` (or ``config``, plus overrides, as :func:`fleet_marl.vector_env`
    takes them) as one native PufferEnv of ``B * N`` agents; see the module docstring.

    ``buf`` and ``seed`` are what ``pufferlib.vector``'s backends pass: the buffers to write
    into, and the first reset's seed. An env seeded s seeds its clusters ``s*B .. s*B + B-1``
    (B = ``num_clusters``; with B = 1, cluster s: the parallel env reset with seed s), so the envs
    ``pufferlib.vector`` seeds s, s+1, ... never share a cluster's seed.

    >>> from fleet_marl.clients.pufferlib import FleetPufferEnv
    >>> env = FleetPufferEnv(num_clusters=4, task="tiny")
    >>> obs, infos = env.reset(seed=0)
    >>> obs.shape, env.actions.shape
    ((8, 34), (8, 8))
    """

    def __init__(
        self,
        num_clusters: int = 64,
        task: str | None = None,
        config=None,
        obs_mode: str = "flat",
        mask_layout: str = "flat",
        buf: dict | None = None,
        seed: int | None = None,
        **overrides: Any,
    ):
        check_options(obs_mode, mask_layout)
        venv = self.open_clusters(num_clusters, task, config, obs_mode, mask_layout, overrides)
        self.num_agents = self.num_clusters * self.n_agents
        F, M = venv.single_observation_space.shape[-1], venv.mask_size
        self.n_features, self.mask_size = F, M
        width = F + M if obs_mode == "dict" else F
        self.single_observation_space = gymnasium.spaces.Box(0.0, 1.0, (width,), np.float32)
        self.single_action_space = gymnasium.spaces.MultiDiscrete(venv.nvec_max)
        super().__init__(buf)
        self._seed = seed
        self._mask = np.ones((self.num_agents, M), bool)
        self._return = np.zeros((self.num_clusters, self.n_agents))

    # --- PufferEnv ------------------------------------------------------------------------------

    def reset(self, seed: int | None = None):
        """Start every cluster's episode (cluster b seeded ``seed * B + b``; None: the seed the
        env was built with, then continuing each cluster's generators). Returns ``(observations, [])``."""
        seed = self._seed if seed is None else seed
        obs, infos = self.venv.reset(seed=None if seed is None else int(seed) * self.num_clusters)
        self._seed = None
        self._return[:] = 0.0
        self._write(obs, infos, np.zeros_like(self._return), infos["alive"], None, None)
        return self.observations, []

    def step(self, actions):
        """One array step of every cluster with ``actions`` (B*N, 8). Returns the buffers
        ``(observations, rewards, terminals, truncations, infos)``."""
        B, N = self.num_clusters, self.n_agents
        obs, rew, term, trunc, infos = self.venv.step(np.asarray(actions).reshape(B, N, -1))
        self._return += rew
        ended = infos["_final"]
        stats: list[dict] = []
        if ended.any():
            ep = infos["episode"]
            stats.append(
                {
                    "episode_return": float(self._return[ended].mean()),
                    "episode_length": float(ep["length"][ended].mean()),
                    "welfare": float(ep["welfare"][ended].mean()),
                }
            )
            self._return[ended] = 0.0
        self._write(obs, infos, rew, infos["alive"], term, trunc)
        return self.observations, self.rewards, self.terminals, self.truncations, stats

    def action_masks(self) -> np.ndarray | tuple[np.ndarray, ...]:
        """Every row's action mask: (B*N, M) bool (``mask_layout="flat"``), or 8 arrays (B*N,
        nvec_max[d]) (``"dims"``); a dead row's allows every choice."""
        if self.mask_layout == "flat":
            return self._mask.copy()
        return tuple(m.copy() for m in split_dims(self._mask, self.offsets))

    # --- internals ------------------------------------------------------------------------------

    def _write(self, obs, infos, rew, alive, term, trunc) -> None:
        """The step's arrays into PufferLib's buffers (in place: they may be shared memory)."""
        S, F = self.num_agents, self.n_features
        live = alive.reshape(S)
        self._mask = infos["action_mask"].reshape(S, -1)
        o = self.observations
        o[:, :F] = obs.reshape(S, F)
        if self.obs_mode == "dict":
            o[:, F:] = self._mask
        o[~live] = 0.0
        self.rewards[:] = rew.reshape(S)
        left = np.zeros(S, bool) if term is None else (term | trunc).reshape(S)
        self.terminals[:] = False if term is None else term.reshape(S)
        self.truncations[:] = False if trunc is None else trunc.reshape(S)
        self.terminals[~live & ~left] = True  # a dead row: terminal, as PufferLib's emulation marks absent agents
        self.masks[:] = live | left


__all__ = ["FleetPufferEnv", "check_options"]

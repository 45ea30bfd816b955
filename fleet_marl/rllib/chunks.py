"""The steps :class:`~fleet_marl.rllib.runner.FleetEnvRunner` samples, as arrays, and the RLlib
episodes built from them.

:class:`Chunks` records every step of B clusters as arrays (observations, masks, state, actions,
their log-probabilities and distribution inputs, rewards, flags, who acted), never as agent
dicts. When a cluster's episode ends, and for every cluster when a ``sample()`` call ends,
:meth:`Chunks.episode` turns the cluster's stretch of steps into one ``MultiAgentEpisode``
(each tenant's ``SingleAgentEpisode`` made from numpy slices of the stacked steps, as
``to_numpy()`` leaves RLlib's own: no dict per step), the episode chunk RLlib's own env runner
would have built step by step: a chunk cut at the end of a
``sample()`` call keeps its episode's id and continues in the next call from its last
observation (``env_t_started``, ``agent_t_started``), and a tenant that left carries its last
observation, reward and flag. Infos carry ``{"illegal": True}`` for a masked choice only (what
``FleetCallbacks`` counts).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer


@dataclass
class Frame:
    """What the tenants see: observations (B, N, F) float32, flat masks (B, N, M) float32
    (None with flat observations), state (B, S) float32 (None without), live (B, N) bool."""

    obs: np.ndarray
    mask: np.ndarray | None
    state: np.ndarray | None
    live: np.ndarray

    def agent_obs(self, b: int, i: int) -> Any:
        """Tenant i of cluster b's observation, as the env's observation space has it."""
        if self.mask is None:
            return self.obs[b, i]
        d = {"observations": self.obs[b, i], "action_mask": self.mask[b, i]}
        if self.state is not None:
            d["state"] = self.state[b]
        return d


@dataclass
class Step:
    """One array step: the actions taken in ``before`` and what came of them."""

    actions: np.ndarray  # (B, N, 8) int64
    logp: np.ndarray  # (B, N) float32
    dist_inputs: np.ndarray  # (B, N, A) float32
    rewards: np.ndarray  # (B, N) float64
    terminated: np.ndarray  # (B, N) bool
    truncated: np.ndarray  # (B, N) bool
    illegal: np.ndarray  # (B, N) bool
    final: Frame  # the observations after the step, before any reset (a tenant's last one if it left)


class Chunks:
    """Every step of B clusters since the last ``sample()`` call ended, and where each cluster's
    current episode stretch starts (see the module docstring)."""

    def __init__(self, num_envs: int, agents: list[str], modules: list[str], mapping_fn: Any, spaces: tuple[Any, Any]):
        self.B, self.agents, self.modules = num_envs, list(agents), list(modules)
        self.slot = {a: i for i, a in enumerate(self.agents)}
        self.mapping_fn = mapping_fn
        self.obs_spaces, self.act_spaces = spaces  # gymnasium Dict spaces of every agent's space
        self.started = np.full(num_envs, time.perf_counter())  # when each cluster's stretch began
        self._stack_end = -1
        self._stack: dict[str, np.ndarray] = {}
        self.obs_spaces, self.act_spaces = spaces
        self.frames: list[Frame] = []  # frames[k]: what the tenants saw before step k
        self.steps: list[Step] = []
        self.start = np.zeros(num_envs, np.int64)  # the step index each cluster's stretch starts at
        self.ids = [uuid.uuid4().hex for _ in range(num_envs)]  # each cluster's episode id
        self.env_t = np.zeros(num_envs, np.int64)  # env steps of the episode before its stretch
        self.agent_t = np.zeros((num_envs, len(agents)), np.int64)  # each tenant's steps before it
        self.agent_ids = [{a: uuid.uuid4().hex for a in agents} for _ in range(num_envs)]

    def begin(self, frame: Frame) -> None:
        """Start over: every cluster at a new episode (after a reset of all of them)."""
        self.frames, self.steps = [frame], []
        self._stack_end = -1
        self.start[:] = 0
        self.started[:] = time.perf_counter()
        self.ids = [uuid.uuid4().hex for _ in range(self.B)]
        self.env_t[:] = 0
        self.agent_t[:] = 0
        self.agent_ids = [{a: uuid.uuid4().hex for a in self.agents} for _ in range(self.B)]

    def record(self, step: Step, frame: Frame) -> None:
        self.steps.append(step)
        self.frames.append(frame)
        self._stack_end = -1

    def episode(self, b: int, end: int, done: bool) -> MultiAgentEpisode:
        """Cluster b's stretch of steps ``start[b] .. end - 1`` as one ``MultiAgentEpisode``,
        finished (``done``: its last step ended the episode) or a chunk to continue; each
        tenant's data as numpy arrays (what ``to_numpy()`` makes of RLlib's own episodes)."""
        s = int(self.start[b])
        x = self._stacked(end)
        agents = self.agents
        module_ids: dict[Any, str] = {a: self.modules[i] for i, a in enumerate(agents)}
        ep = MultiAgentEpisode(
            id_=self.ids[b],
            observation_space=self.obs_spaces,
            action_space=self.act_spaces,
            env_t_started=int(self.env_t[b]),
            len_lookback_buffer=0,
            agent_module_ids=module_ids,
            agent_to_module_mapping_fn=self.mapping_fn,
        )
        ma_id: Any = ep.id_  # RLlib annotates it as an int; it is the episode's id string
        ep.env_t = int(self.env_t[b]) + end - s
        live = x["live"][s:end, b]  # (L, N) who acted at each step
        for i in np.flatnonzero(self.frames[s].live[b]).tolist():
            a = agents[i]
            n = int(live[:, i].sum())  # tenants only leave: it acted at steps s .. s + n - 1
            last = s + n - 1
            left = bool(x["term"][last, b, i] or x["trunc"][last, b, i])
            after = self.steps[last].final if left else self.frames[end]  # its observation after its last step
            t0 = int(self.agent_t[b, i])
            ep.agent_t_started[a] = t0
            infos: list[dict] = [{} for _ in range(n + 1)]
            for j in np.flatnonzero(x["illegal"][s : s + n, b, i]).tolist():
                infos[j + 1] = {"illegal": True}
            sa = SingleAgentEpisode(
                id_=self.agent_ids[b][a],
                agent_id=a,
                module_id=self.modules[i],
                multi_agent_episode_id=ma_id,
                observations=InfiniteLookbackBuffer(self._obs(x, after, s, n, b, i)),
                observation_space=self.obs_spaces[a],
                infos=InfiniteLookbackBuffer(infos),
                actions=InfiniteLookbackBuffer(x["act"][s : s + n, b, i].copy()),
                action_space=self.act_spaces[a],
                rewards=InfiniteLookbackBuffer(x["rew"][s : s + n, b, i].copy()),
                extra_model_outputs={
                    Columns.ACTION_LOGP: InfiniteLookbackBuffer(x["logp"][s : s + n, b, i].copy()),
                    Columns.ACTION_DIST_INPUTS: InfiniteLookbackBuffer(x["din"][s : s + n, b, i].copy()),
                },
                terminated=left and bool(x["term"][last, b, i]),
                truncated=left and bool(x["trunc"][last, b, i]),
                t_started=t0,
                len_lookback_buffer=0,
            )
            ep.agent_episodes[a] = sa
            ep.env_t_to_agent_t[a] = InfiniteLookbackBuffer(list(range(t0, t0 + n + 1)))
        if done:  # as RLlib's add_env_step leaves the last step (docs/training.md, "Time limits"): once every
            # tenant is done the episode is terminated, and so is each tenant that finished on that step
            final = [sa for a, sa in ep.agent_episodes.items() if sa.t == int(self.agent_t[b, self.slot[str(a)]]) + end - s]
            ep.is_terminated = True
            ep.is_truncated = not all(sa.is_terminated for sa in final)  # the env's __all__ truncation
            for sa in final:
                sa.is_truncated = sa.is_truncated or ep.is_truncated
                sa.is_terminated = True
        setattr(ep, "_start_time", float(self.started[b]))  # noqa: B010 (the chunk's wall time: RLlib's episode duration metric)
        setattr(ep, "_last_step_time", time.perf_counter())  # noqa: B010
        return ep

    def _stacked(self, end: int) -> dict[str, np.ndarray]:
        """Steps ``0 .. end - 1`` and frames ``0 .. end`` stacked along a leading axis (once per ``end``)."""
        if self._stack_end == end:
            return self._stack
        fr, st = self.frames[: end + 1], self.steps[:end]
        x = {
            "obs": np.stack([f.obs for f in fr]),
            "live": np.stack([f.live for f in fr]),
            "act": np.stack([z.actions for z in st]),
            "logp": np.stack([z.logp for z in st]),
            "din": np.stack([z.dist_inputs for z in st]),
            "rew": np.stack([z.rewards for z in st]).astype(np.float32),
            "term": np.stack([z.terminated for z in st]),
            "trunc": np.stack([z.truncated for z in st]),
            "illegal": np.stack([z.illegal for z in st]),
        }
        masks = [f.mask for f in fr if f.mask is not None]
        if masks:
            x["mask"] = np.stack(masks)
        states = [f.state for f in fr if f.state is not None]
        if states:
            x["state"] = np.stack(states)
        self._stack_end, self._stack = end, x
        return x

    @staticmethod
    def _obs(x: dict, after: Frame, s: int, n: int, b: int, i: int) -> Any:
        """Tenant i of cluster b's n observations from step s on, then ``after``'s."""
        obs = np.concatenate([x["obs"][s : s + n, b, i], after.obs[b, i][None]])
        if "mask" not in x:
            return obs
        assert after.mask is not None
        d = {"observations": obs, "action_mask": np.concatenate([x["mask"][s : s + n, b, i], after.mask[b, i][None]])}
        if "state" in x:
            assert after.state is not None
            d["state"] = np.concatenate([x["state"][s : s + n, b], after.state[b][None]])
        return d

    def restart(self, b: int, at: int) -> None:
        """Cluster b's next episode starts at step ``at`` (frames[at] holds its first observation)."""
        self.start[b] = at
        self.started[b] = time.perf_counter()
        self.ids[b] = uuid.uuid4().hex
        self.env_t[b] = 0
        self.agent_t[b] = 0
        self.agent_ids[b] = {a: uuid.uuid4().hex for a in self.agents}

    def cut(self) -> None:
        """After the chunks of a ``sample()`` call went out: keep only the last frame, each
        cluster's stretch continuing from it."""
        end = len(self.steps)
        for b in range(self.B):
            s = int(self.start[b])
            self.env_t[b] += end - s
            for k in range(s, end):
                self.agent_t[b] += self.frames[k].live[b]
        self.frames, self.steps = [self.frames[-1]], []
        self._stack_end = -1
        self.start[:] = 0
        self.started[:] = time.perf_counter()

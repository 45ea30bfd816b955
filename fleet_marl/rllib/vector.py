"""``FleetVectorMultiAgentEnv``: B clusters of the vector env as one RLlib ``VectorMultiAgentEnv``.

RLlib 2.60's ``MultiAgentEnvRunner`` steps ``num_envs_per_env_runner`` sub-envs through a
``VectorMultiAgentEnv`` (``ray.rllib.env.vector``): ``reset()`` and ``step(actions)`` take and
return one agent dict per sub-env. Its own ``SyncVectorMultiAgentEnv`` loops over B
``MultiAgentEnv`` objects; this one is B clusters of
:class:`~fleet_marl.environment.vector.FleetVectorEnv`, stepped in ONE array call (one kernel
call for every cluster's round), with the dicts built at the edge. Sub-env b is cluster b;
``envs[b]`` is a :class:`FleetClusterView` (its agents and spaces, what the env runner reads of
a sub-env), not an env of its own.

Observations, actions and spaces are :class:`~fleet_marl.rllib.env.FleetRLlibEnv`'s (the same
``env_config``, the same Dict observation and padded ``MultiDiscrete``), so modules, checkpoints
and the grader do not see which of the two a run sampled from.

Endings follow RLlib's ``autoreset_mode = "next_step"``: the step on which a cluster's last
tenant leaves returns that cluster's final observations, rewards and flags (``__all__`` set as
``FleetRLlibEnv`` sets it, mixed endings included); the next ``step()`` gets no actions for it and
returns the first observations of its next episode. A tenant that leaves before the others gets
its last observation and flag once and is absent after that (its slot is dead in the vector env).
Clusters that end together (the usual case: the horizon) are reset together, with no round
played; a cluster that ends alone waits: the vector env steps every cluster at once, so the
round the others play is discarded for it and its next episode is drawn afresh after that
round (:meth:`_HeldVectorEnv.reset_clusters`).

Reading the clusters: :meth:`FleetVectorMultiAgentEnv.summary` is the fairness summary of a
cluster's episode (on the step it ended: ``FleetCallbacks.on_episode_end`` reads it there),
``credit_seconds`` and ``steps_taken`` the credit engine's time and the cluster-steps taken.

Only the simultaneous protocol: the sequential protocol is turn-based (one tenant per RLlib env
step) and keeps the per-cluster :class:`~fleet_marl.rllib.env.FleetRLlibEnv`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv

from fleet_marl import fairness
from fleet_marl.environment import core
from fleet_marl.environment.vector import FleetVectorEnv
from fleet_marl.rllib.chunks import Frame
from fleet_marl.rllib.env import PROTOCOL_KEYS, check_env_config, rllib_spaces
from fleet_marl.tasks import check_protocol


class _HeldVectorEnv(FleetVectorEnv):
    """``FleetVectorEnv`` whose ended clusters wait for :meth:`reset_clusters` (RLlib resets on
    the next step) instead of restarting within the step that ended them."""

    def step_held(self, actions: np.ndarray) -> tuple[np.ndarray, core.StepResult, np.ndarray]:
        """One round in every cluster, no reset: ``(obs (B, N, F), the step's result, illegal (B, N))``."""
        idx, illegal = self._validate(actions)
        r = core.step(self._core, self._s, idx, self._credit_rngs)
        self.credit_seconds += r.credit_seconds
        obs = core.observe(self._core, self._s)
        core.finish(self._s, r)
        return obs, r, illegal

    def reset_clusters(self, which: np.ndarray) -> None:
        """Start the next episode of clusters ``which`` (their generators continue)."""
        core.reset(self._core, self._s, which, self._rngs)

    def observe(self) -> np.ndarray:
        return core.observe(self._core, self._s)

    def masks(self) -> np.ndarray:
        """(B, N, M) bool the flat masks now."""
        infos: dict[str, Any] = {}
        self._masks_into(infos)
        return infos["action_mask"]

    def summary(self, b: int) -> fairness.FairnessSummary:
        return fairness.summary(self._s.fairness, b)


class FleetClusterView(MultiAgentEnv):
    """Cluster ``index`` of a :class:`FleetVectorMultiAgentEnv`: its agents and spaces (what
    RLlib's env runner reads of a sub-env). It is stepped by the vector env, never alone."""

    def __init__(self, parent: FleetVectorMultiAgentEnv, index: int):
        super().__init__()
        self.parent, self.index = parent, index
        self.possible_agents = list(parent.possible_agents)
        self.agents = list(self.possible_agents)
        obs_spaces: dict[Any, gym.Space] = dict(parent.single_observation_spaces or {})
        act_spaces: dict[Any, gym.Space] = dict(parent.single_action_spaces or {})
        self.observation_spaces, self.action_spaces = obs_spaces, act_spaces
        self.metadata = parent.metadata

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("a FleetClusterView is stepped by its FleetVectorMultiAgentEnv: reset that")

    def step(self, action_dict):
        raise RuntimeError("a FleetClusterView is stepped by its FleetVectorMultiAgentEnv: step that")


class FleetVectorMultiAgentEnv(VectorMultiAgentEnv):
    """``num_envs`` clusters of ``config`` (``FleetRLlibEnv``'s ``env_config``) as one RLlib
    ``VectorMultiAgentEnv``; see the module docstring."""

    def __init__(self, config: dict | None = None, num_envs: int = 1):
        super().__init__()
        cfg = dict(config or {})
        self.worker_index = int(getattr(config, "worker_index", 0) or 0)  # RLlib's EnvContext
        self.obs_mode, self.with_state, cfg = check_env_config(cfg)
        if check_protocol(cfg)[0] == "sequential":
            raise ValueError(
                "env_config protocol = 'sequential': the vector env plays a round per step (the simultaneous protocol); "
                "the sequential protocol is turn-based: use FleetRLlibEnv (TrainConfig vector = False)"
            )
        cfg = {k: v for k, v in cfg.items() if k not in PROTOCOL_KEYS}
        self.venv = venv = _HeldVectorEnv(num_envs, **cfg)
        self.num_envs = venv.num_envs
        self.possible_agents = list(venv.possible_agents)
        self.metadata = {"autoreset_mode": "next_step"}
        self.render_mode = None
        self.nvec_max = venv.nvec_max
        self._hi = venv.nvec - 1  # (N, 8) each tenant's own range (flat mode clips the padded choices)
        obs_space, act_space = rllib_spaces(
            venv.single_observation_space.shape[-1], venv.mask_size, self.nvec_max, self._state_space(), self.obs_mode
        )
        self.single_observation_spaces = dict.fromkeys(self.possible_agents, obs_space)
        self.single_action_spaces = dict.fromkeys(self.possible_agents, act_space)
        self.single_observation_space = gym.spaces.Dict(self.single_observation_spaces)
        self.single_action_space = gym.spaces.Dict(self.single_action_spaces)
        self.observation_space = self.single_observation_space
        self.action_space = self.single_action_space
        self.envs = [FleetClusterView(self, b) for b in range(self.num_envs)]
        B, N = self.num_envs, len(self.possible_agents)
        self._live = np.zeros((B, N), bool)  # tenants handed an observation to act on
        self._held = np.zeros(B, bool)  # clusters that ended on the last step: reset on this one
        self._default = np.zeros((B, N, len(self.nvec_max)), np.int64)
        self._slot = {a: i for i, a in enumerate(self.possible_agents)}
        self._summaries: dict[int, fairness.FairnessSummary] = {}  # each cluster's last finished episode's
        self.steps_taken = 0  # cluster-steps (rounds of one cluster), over the env's lifetime

    def _state_space(self) -> gym.Space | None:
        if not self.with_state:
            return None
        S = self.venv.state_space.shape[-1]
        return gym.spaces.Box(0.0, 1.0, (S,), np.float32)

    # --- VectorMultiAgentEnv ----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:  # cluster b of worker w: SeedSequence([seed, w]) + b
            seed = int(np.random.SeedSequence([int(seed), self.worker_index]).generate_state(1)[0])
        _, infos = self.venv.reset(seed=seed)
        self._held[:] = False
        self._live = infos["alive"].copy()
        obs = self._agent_obs(self.venv.observe(), infos["action_mask"], np.ones(self.num_envs, bool), self._live)
        return obs, [{} for _ in range(self.num_envs)]

    def step(self, actions: Any):  # one {agent: action} per cluster
        B, N = self.num_envs, len(self.possible_agents)
        held = self._held
        acts = self._default.copy()
        agents, slot = self.possible_agents, self._slot
        for b, d in enumerate(actions):
            for a, v in d.items():
                acts[b, slot[a]] = v
        acts = np.minimum(acts, self._hi)
        stepped = ~held
        if held.all():  # every cluster ended on the last step: a new episode everywhere, no round
            self.venv.reset_clusters(np.flatnonzero(held))
            return self._fresh(held)
        if held.any():
            self.venv.reset_clusters(np.flatnonzero(held))  # a valid state for the round the others play
        was = self._live & stepped[:, None]
        obs, r, illegal = self.venv.step_held(acts)
        self.steps_taken += int(stepped.sum())
        if held.any():
            self.venv.reset_clusters(np.flatnonzero(held))  # ... and its round discarded: the next episode afresh
            obs = np.where(held[:, None, None], self.venv.observe(), obs)
        live_now = self.venv.alive
        mask = self.venv.masks()
        ended = stepped & ~live_now.any(-1)
        self._capture(ended)
        out_obs = self._agent_obs(obs, mask, np.ones(B, bool), np.where(held[:, None], live_now, was))
        rew: list[dict] = []
        term: list[dict] = []
        trunc: list[dict] = []
        infos: list[dict] = []
        tl, rl, trl = r.terminated.tolist(), r.reward.tolist(), r.truncated.tolist()
        wl, il = was.tolist(), illegal.tolist()
        for b in range(B):
            if held[b]:
                rew.append({})
                term.append({"__all__": False})
                trunc.append({"__all__": False})
                infos.append({})
                continue
            rb, tb, trb, wb, ib = rl[b], tl[b], trl[b], wl[b], il[b]
            rew.append({agents[i]: rb[i] for i in range(N) if wb[i]})
            t = {agents[i]: tb[i] for i in range(N) if wb[i]}
            tr = {agents[i]: trb[i] for i in range(N) if wb[i]}
            done = bool(ended[b])
            finished = [i for i in range(N) if wb[i] and (tb[i] or trb[i])]
            t["__all__"] = done and all(tb[i] for i in finished)
            tr["__all__"] = done and not t["__all__"]
            term.append(t)
            trunc.append(tr)
            infos.append({agents[i]: {"illegal": True} for i in range(N) if wb[i] and ib[i]})
        self._live = live_now
        self._held = ended
        return out_obs, rew, term, trunc, infos

    # --- reading the clusters ---------------------------------------------------------------------

    def summary(self, b: int) -> fairness.FairnessSummary:
        """The fairness summary of cluster ``b``'s last finished episode (taken on the step it ended)."""
        if b not in self._summaries:
            raise LookupError(f"cluster {b} has not finished an episode yet")
        return self._summaries[b]

    # --- the array API (FleetEnvRunner's) ---------------------------------------------------------

    def reset_frame(self, seed: int | None = None) -> Frame:
        """Reset every cluster (``seed`` as in :meth:`reset`); what the tenants see, as arrays."""
        if seed is not None:
            seed = int(np.random.SeedSequence([int(seed), self.worker_index]).generate_state(1)[0])
        _, infos = self.venv.reset(seed=seed)
        self._held[:] = False
        self._live = infos["alive"].copy()
        return self._frame(self.venv.observe(), infos["action_mask"])

    def step_frame(self, actions: np.ndarray) -> tuple[core.StepResult, np.ndarray, Frame, Frame, np.ndarray]:
        """One round of every cluster from (B, N, 8) actions (tenants not live: ignored), a
        cluster whose episode ends restarting within the step (gymnasium's same-step autoreset):
        ``(result, illegal (B, N), final frame, next frame, ended (B,))``; the final frame is what
        the tenants saw after the round (a leaving tenant's last observation), the next the
        same with each ended cluster's first observation of its next episode."""
        if self._held.any():
            raise RuntimeError("step_frame() after step() ended a cluster: reset_frame() first")
        obs, r, illegal = self.venv.step_held(np.minimum(actions, self._hi))
        self.steps_taken += self.num_envs
        final = self._frame(obs, self.venv.masks())
        ended = np.asarray(~final.live.any(axis=-1), bool)
        if not ended.any():
            self._live = final.live
            return r, illegal, final, final, ended
        self._capture(ended)
        which = np.flatnonzero(ended)
        self.venv.reset_clusters(which)
        fresh = self._frame(self.venv.observe(), self.venv.masks())
        nxt = Frame(
            obs=np.where(ended[:, None, None], fresh.obs, final.obs),
            mask=None if fresh.mask is None or final.mask is None else np.where(ended[:, None, None], fresh.mask, final.mask),
            state=None if fresh.state is None or final.state is None else np.where(ended[:, None], fresh.state, final.state),
            live=fresh.live,
        )
        self._live = nxt.live
        return r, illegal, final, nxt, ended

    @property
    def credit_seconds(self) -> float:
        return float(self.venv.credit_seconds)

    def render(self):
        return None

    def close_extras(self, **kwargs: Any) -> None:
        if hasattr(self, "venv"):  # not when __init__ refused its config
            self.venv.close()

    # --- internals --------------------------------------------------------------------------------

    def _capture(self, ended: np.ndarray) -> None:
        for b in np.flatnonzero(ended).tolist():
            self._summaries[b] = self.venv.summary(b)

    def _frame(self, obs: np.ndarray, mask: np.ndarray) -> Frame:
        dict_mode = self.obs_mode == "dict"
        return Frame(
            obs=obs.astype(np.float32, copy=False),
            mask=mask.astype(np.float32) if dict_mode else None,
            state=self.venv.state().astype(np.float32) if self.with_state else None,
            live=self.venv.alive,
        )

    def _fresh(self, which: np.ndarray):
        obs = self.venv.observe()
        self._live = np.where(which[:, None], self.venv.alive, self._live)
        self._held = np.zeros(self.num_envs, bool)
        out = self._agent_obs(obs, self.venv.masks(), which, self._live)
        B = self.num_envs
        return (
            out,
            [{} for _ in range(B)],
            [{"__all__": False} for _ in range(B)],
            [{"__all__": False} for _ in range(B)],
            [{} for _ in range(B)],
        )

    def _agent_obs(self, obs: np.ndarray, mask: np.ndarray, clusters: np.ndarray, show: np.ndarray) -> list[dict]:
        """Per cluster, ``{agent: observation}`` of the tenants ``show`` (B, N)."""
        agents = self.possible_agents
        obs = obs.astype(np.float32, copy=False)
        sl = show.tolist()
        out: list[dict] = []
        if self.obs_mode == "flat":
            for b in range(self.num_envs):
                ob, sb = obs[b], sl[b]
                out.append({a: ob[i] for i, a in enumerate(agents) if sb[i]} if clusters[b] else {})
            return out
        m = mask.astype(np.float32)
        state = self.venv.state().astype(np.float32) if self.with_state else None
        for b in range(self.num_envs):
            if not clusters[b]:
                out.append({})
                continue
            ob, mb, sb = obs[b], m[b], sl[b]
            if state is None:
                out.append({a: {"observations": ob[i], "action_mask": mb[i]} for i, a in enumerate(agents) if sb[i]})
            else:
                st = state[b]
                out.append({a: {"observations": ob[i], "action_mask": mb[i], "state": st} for i, a in enumerate(agents) if sb[i]})
        return out

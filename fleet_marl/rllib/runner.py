"""``FleetEnvRunner``: RLlib's ``MultiAgentEnvRunner`` sampling B clusters as arrays.

RLlib's env runner builds its vector env with ``ray.rllib.env.vector.registration.make_vec``,
which only knows ``SyncVectorMultiAgentEnv`` (a Python loop over B ``MultiAgentEnv`` objects).
``make_env`` here builds :class:`~fleet_marl.rllib.vector.FleetVectorMultiAgentEnv` instead, of
``config.num_envs_per_env_runner`` clusters, from ``config.env_config``
(``config.env_runners(env_runner_cls=FleetEnvRunner)``: what
:func:`fleet_marl.rllib.config.build` sets unless ``TrainConfig.vector`` is off).

``sample()`` steps those clusters as arrays and leaves RLlib's per-agent machinery out of the
loop: per array step, ONE forward pass of each RLModule on the rows of its live tenants (the
observations stacked as they come from the vector env), the actions drawn from the module's own
action distribution (``get_exploration_action_dist_cls``, or the deterministic one of
``get_inference_action_dist_cls`` when not exploring), and ONE step of every cluster; a cluster
whose episode ends restarts within that step. The steps are kept as arrays
(:class:`~fleet_marl.rllib.chunks.Chunks`) and become RLlib ``MultiAgentEpisode`` objects when
an episode ends or the call ends: the episodes, metrics and callbacks RLlib's learner and
``Algorithm`` read are the stock runner's (env steps are cluster-steps, agent steps
tenant-steps; ``on_episode_created``, ``on_episode_start`` and ``on_episode_end`` are called,
``on_episode_step`` is not: no episode object exists per step). The env-to-module and
module-to-env connector pipelines are not run: a config that adds connector pieces needs the
per-cluster env (``TrainConfig.vector = False``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics import (
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from fleet_marl.environment.vector import sample_masked
from fleet_marl.rllib.chunks import Chunks, Frame, Step
from fleet_marl.rllib.vector import FleetVectorMultiAgentEnv


class FleetEnvRunner(MultiAgentEnvRunner):
    """``MultiAgentEnvRunner`` over :class:`FleetVectorMultiAgentEnv`; see the module docstring."""

    def make_env(self) -> None:
        if self.env is not None:
            self.env.close()
        ctx = self.config.env_config
        if not isinstance(ctx, EnvContext):
            ctx = EnvContext(ctx, worker_index=self.worker_index, num_workers=self.config.num_env_runners, remote=False)
        self.env = env = FleetVectorMultiAgentEnv(ctx, num_envs=self.config.num_envs_per_env_runner)
        self.num_envs = env.num_envs
        self._needs_initial_reset = True
        agents = env.possible_agents
        mapping: Any = self.config.policy_mapping_fn  # fn(agent_id, episode, **kwargs)
        self._modules_of = [str(mapping(a, None)) for a in agents]  # the sharing schemes map each tenant to one module for good
        self._module_cols = [(mid, np.array([m == mid for m in self._modules_of])) for mid in sorted(set(self._modules_of))]
        self._chunks = Chunks(env.num_envs, agents, self._modules_of, mapping, (env.single_observation_space, env.single_action_space))
        self._frame: Frame | None = None
        make_callback(
            "on_environment_created",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_environment_created,
            kwargs={"env_runner": self, "metrics_logger": self.metrics, "env": env, "env_context": ctx},
        )

    # --- sampling ---------------------------------------------------------------------------------

    @property
    def fleet_env(self) -> FleetVectorMultiAgentEnv:
        """The vector env this runner samples (built by :meth:`make_env`)."""
        if not isinstance(self.env, FleetVectorMultiAgentEnv):
            raise RuntimeError("FleetEnvRunner: no FleetVectorMultiAgentEnv built (make_env() first)")
        return self.env

    def _sample(self, *, num_timesteps=None, num_episodes=None, explore: bool, random_actions: bool = False, force_reset: bool = False):
        env = self.fleet_env
        ch = self._chunks
        if force_reset or num_episodes is not None or self._needs_initial_reset or self._frame is None:
            self._frame = env.reset_frame(seed=self._seed if self._needs_initial_reset else None)
            self._needs_initial_reset = num_episodes is not None
            ch.begin(self._frame)
            self._ongoing_episodes_for_metrics.clear()
            for b in range(self.num_envs):
                self._episode_callbacks(("on_episode_created", "on_episode_start"), b, self._start_episode(b))
        by_steps = self.config.count_steps_by == "env_steps"
        done: list[MultiAgentEpisode] = []
        counts: Counter = Counter()
        env_ts = agent_ts = 0
        while (len(done) < num_episodes) if num_timesteps is None else ((env_ts if by_steps else agent_ts) < num_timesteps):
            frame = self._frame
            actions, logp, inputs = self._act(frame, explore, random_actions, env_ts)
            r, illegal, final, nxt, ended = env.step_frame(actions)
            ch.record(Step(actions, logp, inputs, r.reward, r.terminated, r.truncated, illegal, final), nxt)
            self._frame = nxt
            env_ts += self.num_envs
            agent_ts += int(frame.live.sum())
            counts.update(self._module_counts(frame.live))
            for b in np.flatnonzero(ended).tolist():
                ep = ch.episode(b, len(ch.steps), done=True)
                self._episode_callbacks(("on_episode_end",), b, ep, prev=self._ongoing_episodes_for_metrics[ep.id_])
                done.append(ep)
                ch.restart(b, len(ch.steps))
                self._episode_callbacks(("on_episode_created", "on_episode_start"), b, self._start_episode(b))
                if num_episodes is not None and len(done) >= num_episodes:
                    break
        self._log_counts(env_ts, counts, len(done))
        self._done_episodes_for_metrics.extend(done)
        if num_timesteps is None:  # whole episodes only: the unfinished ones are dropped
            self._needs_initial_reset = True
            return done
        ongoing = []
        for b in range(self.num_envs):
            if ch.start[b] < len(ch.steps):
                ep = ch.episode(b, len(ch.steps), done=False)
                self._ongoing_episodes_for_metrics[ep.id_].append(ep)
                ongoing.append(ep)
        ch.cut()
        return done + ongoing

    def _act(self, frame: Frame, explore: bool, random_actions: bool, env_ts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(actions (B, N, 8), their log-probabilities (B, N), the distribution inputs (B, N, A))
        of every live tenant: one forward pass per module (0 where a tenant is not live)."""
        B, N = frame.live.shape
        env = self.fleet_env
        width = int(env.nvec_max.sum())
        actions = np.zeros((B, N, len(env.nvec_max)), np.int64)
        logp = np.zeros((B, N), np.float32)
        inputs = np.zeros((B, N, width), np.float32)
        if random_actions:
            allowed = frame.mask if frame.mask is not None else np.ones((B, N, width), np.float32)
            actions[:] = sample_masked(allowed > 0.5, np.concatenate(([0], np.cumsum(env.nvec_max))))
            return actions, logp, inputs
        module = self.module
        assert module is not None  # built by the runner with its env
        t = (self.num_env_steps_sampled_lifetime // (self.config.num_env_runners or 1) + env_ts) * (self.config.num_env_runners or 1)
        everyone = bool(frame.live.all())
        for mid, cols in self._module_cols:
            one = module[mid]
            if everyone and cols.all():  # one module, every tenant live (most steps): views, no gathering
                rows: Any = slice(None)
                obs = frame.obs.reshape(B * N, -1)
                mask = None if frame.mask is None else frame.mask.reshape(B * N, -1)
                state = None if frame.state is None else np.repeat(frame.state, N, axis=0)
            else:
                bi, ti = np.nonzero(frame.live & cols[None, :])
                if len(bi) == 0:
                    continue
                rows = (bi, ti)
                obs = frame.obs[bi, ti]
                mask = None if frame.mask is None else frame.mask[bi, ti]
                state = None if frame.state is None else frame.state[bi]
            o: Any = torch.from_numpy(obs)
            if mask is not None:
                o = {"observations": o, "action_mask": torch.from_numpy(mask)}
                if state is not None:
                    o["state"] = torch.from_numpy(state)
            if isinstance(one, torch.nn.Module) and one.training:  # RLlib's forward_* switch to eval and back on every
                one.eval()  # call (skipped here: the _forward_* hooks they wrap); an env runner's module never trains
            with torch.no_grad():
                b = {Columns.OBS: o}
                din = (one._forward_exploration(b, t=t) if explore else one._forward_inference(b))[Columns.ACTION_DIST_INPUTS]
                if explore:
                    dist = one.get_exploration_action_dist_cls().from_logits(din)
                else:
                    dist = one.get_inference_action_dist_cls().from_logits(din).to_deterministic()
                a = dist.sample()
                lp = dist.logp(a) if explore else None  # the deterministic distribution's logp is per dimension (zeros): left 0
            if isinstance(rows, slice):
                actions.reshape(B * N, -1)[:] = _numpy(a)
                inputs.reshape(B * N, -1)[:] = _numpy(din)
                if lp is not None:
                    logp.reshape(B * N)[:] = _numpy(lp)
            else:
                actions[rows] = _numpy(a)
                inputs[rows] = _numpy(din)
                if lp is not None:
                    logp[rows] = _numpy(lp)
        return actions, logp, inputs

    # --- bookkeeping ------------------------------------------------------------------------------

    def _start_episode(self, b: int) -> MultiAgentEpisode:
        """A cluster's new episode with its first observations (what on_episode_start receives)."""
        ch, frame = self._chunks, self._frame
        assert frame is not None
        obs: dict[Any, Any] = {a: frame.agent_obs(b, i) for i, a in enumerate(ch.agents) if frame.live[b, i]}
        ids: dict[Any, str] = dict(ch.agent_ids[b])
        ep = MultiAgentEpisode(
            id_=ch.ids[b],
            observation_space=ch.obs_spaces,
            action_space=ch.act_spaces,
            agent_episode_ids=ids,
            agent_to_module_mapping_fn=ch.mapping_fn,
        )
        ep.add_env_reset(observations=obs, infos={})
        return ep

    def _episode_callbacks(self, which: tuple[str, ...], b: int, episode: MultiAgentEpisode, prev: list | None = None) -> None:
        for name in which:
            kwargs = {
                "episode": episode,
                "env_runner": self,
                "metrics_logger": self.metrics,
                "env": self.env,
                "rl_module": self.module,
                "env_index": b,
            }
            if name == "on_episode_end":
                kwargs["prev_episode_chunks"] = prev or []
            make_callback(
                name, callbacks_objects=self._callbacks, callbacks_functions=getattr(self.config, f"callbacks_{name}"), kwargs=kwargs
            )

    def _module_counts(self, live: np.ndarray) -> Counter:
        per_tenant = live.sum(0)
        c: Counter = Counter()
        for i, mid in enumerate(self._modules_of):
            c[("agent", self._chunks.agents[i])] += int(per_tenant[i])
            c[("module", mid)] += int(per_tenant[i])
        return c

    def _log_counts(self, env_steps: int, counts: Counter, episodes: int) -> None:
        """The step and episode counts RLlib's runner logs step by step, logged once."""
        log = self.metrics.log_value
        if env_steps:
            log(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
            log(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True)
            self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=env_steps)
        if episodes:
            log(NUM_EPISODES, episodes, reduce="sum")
            log(NUM_EPISODES_LIFETIME, episodes, reduce="lifetime_sum")
        for (kind, key), n in counts.items():
            if kind == "agent":
                log((NUM_AGENT_STEPS_SAMPLED, key), n, reduce="sum")
                log((NUM_AGENT_STEPS_SAMPLED_LIFETIME, key), n, reduce="lifetime_sum")
            else:
                log((NUM_MODULE_STEPS_SAMPLED, key), n, reduce="sum")
                log((NUM_MODULE_STEPS_SAMPLED_LIFETIME, key), n, reduce="lifetime_sum")


def _numpy(x: Any) -> np.ndarray:
    """A CPU tensor (what RLlib's distributions and modules hand back) as an array."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


__all__ = ["FleetEnvRunner"]

"""The TorchRL engine's loop: the collector of a run (which one, in how many processes, with
which policy) and the iteration that collects a batch and hands it to the learner.

==========================  ==================================================================
collector                   what collects each batch of ``num_envs`` x ``rollout`` cluster steps
==========================  ==================================================================
``sync``, 1 collector       TorchRL's ``Collector`` in this process: collect, then learn. The
                            reproducible path: the same config, seed and code give a
                            bit-identical run, and a resumed run continues the uninterrupted one
                            bit for bit (:meth:`Loop.state` is in every checkpoint)
``sync``, K collectors      ``MultiSyncCollector``: K worker processes of ``num_envs / K``
                            clusters each, every one collecting with the newest weights; the
                            batch is theirs concatenated. Reproducible for a given K (each
                            worker's env and torch generator are seeded); a resumed run starts
                            fresh episodes (the workers' state is not in the checkpoint)
``async``, 1 collector      ``AsyncCollector``: a worker collects the next batch with the
                            previous weights while this process learns. Not reproducible: which
                            weights a batch was sampled with depends on timing
``async``, K collectors     ``MultiAsyncCollector``: K workers of ``num_envs`` clusters each, a
                            batch from whichever finishes first. Not reproducible
sequential protocol         :class:`~fleet_marl.torchrl.sequential.TurnCollector` (``sync``, as
                            reproducible as ``sync`` above, its state in every checkpoint) or
                            ``AsyncTurnCollector`` (``async``)
==========================  ==================================================================

Collection runs on CPU, always: the env is numpy, and the policy that samples the actions is
the learner's actor on ``device: cpu``, or a CPU copy of it (:class:`Sampler`) that takes the
learner's weights after every update when the learner is on a GPU.

With ``credit_horizon`` k > 1 (the sync collector, one process) the collector's env is recorded
and every batch relabelled with the k-round difference before the learner sees it
(:class:`~fleet_marl.torchrl.relabel.Relabel`): the learner trains k − 1 steps behind the
collector, and :meth:`Loop.state` holds the steps held back.

Nothing that learns reads the clock: the learning rate anneals over iterations
(:meth:`~fleet_marl.torchrl.train.Learner.set_progress`); ``max_minutes`` only stops a run, after
the iteration that passes it (:attr:`Loop.capped` says so).
"""

from __future__ import annotations

import copy
import os
import pickle
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.collectors import AsyncCollector, Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs.utils import ExplorationType

from fleet_marl.torchrl.config import COLUMNS, TorchRLTrainConfig
from fleet_marl.torchrl.env import GROUP, FleetTorchEnv
from fleet_marl.torchrl.relabel import Relabel
from fleet_marl.torchrl.sequential import AsyncTurnCollector, TurnCollector
from fleet_marl.training import config_env

#: A resumed run's episodes, when its collection state is not restored: seeded ``seed + RESUME_STRIDE * iteration``.
RESUME_STRIDE = 1_000_003


class MakeEnv:
    """A picklable env factory for a collector's worker process: ``num_envs`` clusters of the run
    seeded ``seed`` (cluster b gets ``seed + b``). In a worker process (not the one that made the
    factory) it first seeds torch's generator with ``torch_seed``, so that the actions the worker
    samples are the same in every run."""

    def __init__(self, tc: TorchRLTrainConfig, num_envs: int, seed: int, torch_seed: int | None = None):
        self.task, self.reward_scheme, self.env = tc.task, tc.reward_scheme, dict(tc.env)
        self.num_envs, self.seed, self.torch_seed = num_envs, seed, torch_seed
        self.owner = os.getpid()

    def __call__(self) -> FleetTorchEnv:
        if self.torch_seed is not None and os.getpid() != self.owner:
            torch.manual_seed(self.torch_seed)
        return config_env(FleetTorchEnv, self, self.num_envs, seed=self.seed)


class Sampler:
    """The policy that collects: the learner's own actor when it is on CPU; on a GPU, a CPU copy
    of it that :meth:`sync` gives the learner's weights (in place, so a collector's worker
    processes, which share its memory, see them too)."""

    def __init__(self, learner: Any):
        self.learner = learner
        if learner.device.type == "cpu":
            self.net, self.actor = learner.actor_net, learner.actor
        else:
            self.net = copy.deepcopy(learner.actor_net).to("cpu")
            self.actor = learner.make_actor(self.net)

    def sync(self) -> None:
        if self.net is not self.learner.actor_net:
            with torch.no_grad():
                self.net.load_state_dict(self.learner.actor_net.state_dict())


class RunEnv(FleetTorchEnv):
    """The sync collector's :class:`FleetTorchEnv`: it remembers the observation it last handed
    out to each cluster (what TorchRL's collector carries from one batch into the next), so that
    :meth:`snapshot` can say where every episode is, and an env built with ``resume`` (such a
    snapshot) starts there: its vector env restored, its first reset handing out that observation."""

    #: What the collector carries that the env wrote (the policy's outputs are rewritten at every step).
    KEYS = ((GROUP, "observation"), (GROUP, "action_mask"), (GROUP, "mask"), "state", "episode_welfare")

    def __init__(self, *args: Any, resume: dict | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.handed: TensorDictBase | None = None
        self.resume_from = resume
        if resume is not None:
            self.venv = pickle.loads(resume["venv"])

    def snapshot(self) -> dict:
        """The vector env (pickled) and the observation each cluster was last handed."""
        assert self.handed is not None  # the collector reset the env when it was built
        return {"venv": pickle.dumps(self.venv), "handed": self.handed.clone()}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        partial = tensordict is not None and "_reset" in tensordict.keys()  # noqa: SIM118 (a TensorDict)
        if self.resume_from is not None and not partial:
            out = self.resume_from["handed"].clone()
            self.resume_from = None
            self.action_spec[GROUP, "action"].update_mask(out.get((GROUP, "action_mask")))
            self.handed = out.clone()
            return out
        out = super()._reset(tensordict, **kwargs)
        mine = out.select(*self.KEYS)
        if partial and tensordict is not None and self.handed is not None:
            which = tensordict.get("_reset").reshape(self.num_envs)
            merged = self.handed.clone()  # new tensors: the collector may still hold the old ones
            merged[which] = mine[which]
            self.handed = merged
        else:
            self.handed = mine
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        self.handed = out.select(*self.KEYS)
        return out


class Loop:
    """Collect and learn: iterating yields one :data:`COLUMNS` row per iteration (``welfare``
    the mean of the episodes that ended in the batch; no grader columns), after the learner's
    update and the collector's new weights. What the caller does between two rows (grading,
    checkpoints) is not training time (``train_seconds``) but counts towards ``max_minutes``;
    the loop ends after ``tc.iterations`` in all (``first`` done already), or, when
    ``max_minutes`` of wall time are spent first, after that iteration with :attr:`capped` set.
    ``close()`` stops the collector (also when the caller stops early). ``env`` is the sync
    collector's :class:`FleetTorchEnv` (None when the env lives in worker processes, and under
    the sequential protocol, whose collector is :class:`~fleet_marl.torchrl.sequential.TurnCollector`).

    ``state``: what :meth:`state` returned at a checkpoint of the run, to continue it: the torch
    generator's state, and the episodes in progress where the collector is one this process
    holds (:attr:`restored` says whether they were); else a resumed run starts fresh episodes
    seeded ``seed + RESUME_STRIDE * first``.

    >>> from fleet_marl.torchrl import Learner, TorchRLTrainConfig
    >>> tc = TorchRLTrainConfig(task="tiny", iterations=2, num_envs=4, rollout=6, epochs=1, minibatch=24, hidden=[8])
    >>> loop = Loop(tc, Learner(tc, tc.signature()))
    >>> [row["iteration"] for row in loop]
    [1, 2]
    >>> loop.close()
    """

    def __init__(
        self,
        tc: TorchRLTrainConfig,
        learner: Any,
        *,
        first: int = 0,
        env_steps: int = 0,
        offset: float = 0.0,
        state: dict | None = None,
    ):
        self.tc, self.learner = tc, learner
        self.first, self.env_steps0, self.offset = first, env_steps, offset
        self.frames = tc.num_envs * tc.rollout
        self.n_agents = len(learner.sig["possible_agents"])
        self.train_seconds = 0.0
        self.capped = False  # the max_minutes cap ended the run before its iterations
        self.restored = False  # the episodes in progress at the checkpoint were restored
        self.sampler = Sampler(learner)
        self.env: RunEnv | None = None
        self.relabel: Relabel | None = None  # the k-round difference (credit_horizon > 1): relabels each batch
        usable = state if state is not None and state.get("key") == self._key() else None
        self.collector = self._build(tc.seed + RESUME_STRIDE * first, usable)
        if self.relabel is not None and self.restored and usable is not None and "credit" in usable:
            self.relabel.load_state_dict(usable["credit"])  # the steps held back at the checkpoint
        if state is not None:
            torch.set_rng_state(state["torch_rng"])  # last: building the collector may have drawn from it

    def _build(self, seed: int, state: dict | None) -> Any:
        tc, sampler, K = self.tc, self.sampler, self.tc.collectors
        batches = tc.iterations - self.first
        if tc.sequential:
            # the sequential protocol: the actor called once per turn, batches laid out per round (torchrl/sequential.py)
            make = AsyncTurnCollector if tc.collector == "async" else TurnCollector
            col = make(tc, sampler.net, self.learner.nvec, batches)
            col.set_seed(seed)  # its first reset, which it makes when iterated
            if state is not None and "turns" in state and isinstance(col, TurnCollector):
                col.load_state_dict(state["turns"])  # the episodes in progress at the checkpoint
                self.restored = True
            return col
        # the env is seeded when it is built: TorchRL's collectors reset it in their constructor, so a
        # set_seed after that would seed only a reset that never comes
        kwargs: dict[str, Any] = dict(total_frames=self.frames * batches, exploration_type=ExplorationType.RANDOM)
        if K == 1 and tc.collector == "sync":
            resume = state.get("env") if state is not None else None
            self.env = config_env(RunEnv, tc, tc.num_envs, seed=seed, resume=resume)
            self.restored = resume is not None
            if tc.credit_horizon > 1:  # before the collector steps the env: every step is recorded
                self.relabel = Relabel(self.env, tc.credit_horizon, tc.credit_branch)
            return Collector(self.env, sampler.actor, frames_per_batch=self.frames, auto_register_policy_transforms=False, **kwargs)
        # worker processes (this one keeps ``threads`` torch threads; TorchRL's default would be the cores minus the workers)
        workers = dict(num_sub_threads=1, num_threads=tc.threads or None)
        if K == 1:  # async: the env and the sampling policy in a worker that collects the next batch while this process learns
            return AsyncCollector(
                MakeEnv(tc, tc.num_envs, seed, _torch_seed(seed, 0)), sampler.actor, frames_per_batch=self.frames, **workers, **kwargs
            )
        if tc.collector == "sync":  # K workers of num_envs / K clusters, seeded as the clusters of one collector would be
            b = tc.num_envs // K
            makers = [MakeEnv(tc, b, seed + i * b, _torch_seed(seed, i)) for i in range(K)]
            return MultiSyncCollector(
                makers, sampler.actor, frames_per_batch=self.frames, cat_results=0, use_buffers=True, **workers, **kwargs
            )
        makers = [MakeEnv(tc, tc.num_envs, seed + i * tc.num_envs, _torch_seed(seed, i)) for i in range(K)]
        return MultiAsyncCollector(makers, sampler.actor, frames_per_batch=self.frames, **workers, **kwargs)

    # --- the collection state a checkpoint holds ---------------------------------------------------

    def _key(self) -> dict:
        """What a restored state must have been collected with."""
        tc = self.tc
        return {
            "task": tc.task,
            "env": repr(sorted(tc.env.items())),
            "reward_scheme": tc.reward_scheme,
            "num_envs": tc.num_envs,
            "collector": tc.collector,
            "collectors": tc.collectors,
            **({"credit": (tc.credit_horizon, tc.credit_branch)} if tc.credit_horizon > 1 else {}),
        }

    def state(self) -> dict:
        """What continues this run where it is (between two iterations): torch's generator (this
        process's: the learner's minibatches and, with the sync collector, the sampled actions) and,
        where the collector is one in this process, where its episodes are."""
        out: dict[str, Any] = {"torch_rng": torch.get_rng_state(), "key": self._key()}
        if isinstance(self.collector, TurnCollector):
            out["turns"] = self.collector.state_dict()
        elif self.env is not None:
            out["env"] = self.env.snapshot()
            if self.relabel is not None:
                out["credit"] = self.relabel.state_dict()
        return out

    # --- the loop ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        tc, learner, frames, N = self.tc, self.learner, self.frames, self.n_agents
        it, env_steps = self.first, self.env_steps0
        t0 = time.time()
        tick = t0
        for data in self.collector:
            collected = time.time()
            it += 1
            env_steps += frames
            done = data.get(("next", "done")).squeeze(-1)
            welfare = data.get(("next", "episode_welfare")).squeeze(-1)[done]
            lr = learner.set_progress((it - 1) / tc.iterations)  # over iterations only: the same in every run
            stats = learner.update(data if self.relabel is None else self.relabel(data))
            self.sampler.sync()
            self.collector.update_policy_weights_()
            now = time.time()
            self.train_seconds += now - tick
            row: dict[str, Any] = dict.fromkeys(COLUMNS, "")
            row.update(
                iteration=it,
                env_steps=env_steps,
                agent_steps=env_steps * N,
                time_s=round(self.offset + now - t0, 2),
                agent_steps_per_s=round(frames * N / max(now - tick, 1e-9), 1),
                collect_s=round(collected - tick, 4),
                learn_s=round(now - collected, 4),
                episodes=int(done.sum()),
                lr=lr,
                **{k: round(v, 6) for k, v in stats.items()},
            )
            if len(welfare):
                row["welfare"] = round(float(welfare.mean()), 4)
            yield row
            if tc.max_minutes and it < tc.iterations and self.offset + time.time() - t0 >= 60 * tc.max_minutes:
                self.capped = True  # the safety cap on wall time: the run ends short of its iterations
                return
            tick = time.time()

    def close(self) -> None:
        self.collector.shutdown()


def _torch_seed(seed: int, worker: int) -> int:
    """The torch seed of collector worker ``worker`` of a run seeded ``seed``."""
    return int(np.random.SeedSequence([seed, worker, 0x7A3C]).generate_state(1)[0])


__all__ = ["RESUME_STRIDE", "Loop", "MakeEnv", "RunEnv", "Sampler"]

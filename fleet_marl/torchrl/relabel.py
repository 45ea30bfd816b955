"""The k-round difference reward in the TorchRL loop (``credit_horizon: k`` of
:class:`~fleet_marl.torchrl.config.TorchRLTrainConfig`; ``docs/credit_horizon.md``).

A tenant-step's k-round difference D^k(t) needs the rounds t .. t+k−1, so it is computed after
they are collected: a :class:`~fleet_marl.environment.horizon.Recorder` steps the sync
collector's vector env and keeps each step's core state, and :class:`Relabel` turns each
collected batch (B clusters x ``rollout`` steps) into the batch the learner trains on:

* the learner trains **k − 1 steps behind the collector**: the last k − 1 steps of a batch wait
  for the next batch (their windows reach into it) and are trained on at its head, so every
  trained step's window stops only where its episode ends, as D^k is defined. A window cut at
  the batch's end instead would give the last k − 1 steps of every batch a shorter sum, a
  reward that depends on where a step falls in its batch, which nothing the critic sees says.
* GAE and PPO see an ordinary batch of ``rollout`` consecutive steps per cluster: the held-back
  steps come first, then the new ones (the collector continues each cluster's episode from one
  batch to the next), GAE bootstraps at its end from the critic's value of the next
  observation, as always, and PPO's ratio of a held-back step is taken against the
  log-probability of the policy that sampled it (one update older: what the async collector
  does to a whole batch).
* the run's first batch trains on ``rollout − k + 1`` steps (nothing is held back yet); the last
  k − 1 steps a run collects are not trained on. A checkpoint holds the held-back steps
  (:meth:`state_dict`), so a resumed run continues bit for bit.

The reward written is :meth:`Recorder.rewards`: D^k shaped as the env shapes ``difference``;
with k = 1 it is the env's reward, bit for bit (the loop does not relabel then).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from fleet_marl.environment.horizon import Recorder
from fleet_marl.torchrl.env import GROUP, FleetTorchEnv


class Relabel:
    """Records ``env`` (the sync collector's, stepped in this process) and relabels its batches
    with the ``k``-round difference of ``variant`` (see the module docstring)."""

    def __init__(self, env: FleetTorchEnv, k: int, variant: str):
        self.k, self.variant = k, variant
        self.recorder = Recorder(env.venv)
        env.recorder = self.recorder
        self.tail: TensorDictBase | None = None  # (B, k - 1) the steps held back from the last batch
        self.seconds = 0.0  # wall seconds computing D^k (a measurement reported beside the env's credit time; nothing learns from it)

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        """The batch to train on: the held-back steps and ``data`` (B, rollout), less its last
        k − 1 steps, with ``("next", "agents", "reward")`` the k-round difference."""
        held = 0 if self.tail is None else self.tail.shape[1]
        steps = len(self.recorder.steps)
        if steps != held + data.shape[1]:
            raise RuntimeError(f"Relabel: {steps} steps recorded for {held} held back and a batch of {data.shape[1]}")
        full = data if self.tail is None else torch.cat([self.tail, data], dim=1)
        count = full.shape[1] - (self.k - 1)
        t0 = time.perf_counter()
        rewards = self.recorder.rewards(self.k, self.variant, count)  # (count, B, T)
        self.seconds += time.perf_counter() - t0
        out: TensorDictBase = full[:, :count].clone()
        out.set(("next", GROUP, "reward"), torch.from_numpy(np.ascontiguousarray(rewards.transpose(1, 0, 2), dtype=np.float32))[..., None])
        self.tail = full[:, count:].clone()
        self.recorder.drop(count)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The held-back steps: their batch rows and their record."""
        return {"tail": None if self.tail is None else self.tail.clone(), **self.recorder.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.tail = d["tail"]
        self.recorder.load_state_dict(d)


__all__ = ["Relabel"]

"""A short BenchMARL run on a fleet_marl task: BenchMARL's own algorithm, model and experiment
configs (its YAML files), with the budget cut to a few iterations.

>>> from fleet_marl.clients.benchmarl import FleetTask
>>> from fleet_marl.clients.benchmarl.run import run_experiment
>>> seen = run_experiment(FleetTask.TINY.get_task(config={"max_cycles": 3}), "qmix")  # doctest: +SKIP
>>> seen["ends"] >= 2 and seen["rewards_finite"]  # doctest: +SKIP
True
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from tensordict import TensorDictBase

from fleet_marl.clients.benchmarl.compat import load_benchmarl

load_benchmarl()  # the extra, then benchmarl 1.5.2 on torchrl 0.14 (fleet_marl.clients.benchmarl.compat), before the imports below

from benchmarl.algorithms import IppoConfig, IqlConfig, IsacConfig, MappoConfig, MasacConfig, QmixConfig, VdnConfig  # noqa: E402
from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.experiment.callback import Callback  # noqa: E402
from benchmarl.models.mlp import MlpConfig  # noqa: E402

#: The algorithms of a discrete action space, by BenchMARL's names.
ALGORITHMS = {
    "mappo": MappoConfig,
    "ippo": IppoConfig,
    "masac": MasacConfig,
    "isac": IsacConfig,
    "qmix": QmixConfig,
    "vdn": VdnConfig,
    "iql": IqlConfig,
}


def experiment_config(save_folder: str, iterations: int = 2, frames: int = 64, n_envs: int = 4) -> ExperimentConfig:
    """BenchMARL's ``base_experiment.yaml`` with a budget of ``iterations`` x ``frames`` env
    steps over ``n_envs`` clusters, on the CPU, logging to CSV only, one evaluation at the end."""
    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.save_folder, cfg.loggers, cfg.render, cfg.create_json = save_folder, ["csv"], False, False
    cfg.max_n_iters, cfg.max_n_frames = iterations, None
    cfg.on_policy_collected_frames_per_batch = cfg.off_policy_collected_frames_per_batch = frames
    cfg.on_policy_n_envs_per_worker = cfg.off_policy_n_envs_per_worker = n_envs
    cfg.on_policy_minibatch_size = cfg.off_policy_train_batch_size = max(frames // 2, 1)
    cfg.on_policy_n_minibatch_iters, cfg.off_policy_n_optimizer_steps = 1, 2
    cfg.off_policy_memory_size = 10 * frames
    cfg.evaluation, cfg.evaluation_interval, cfg.evaluation_episodes = True, iterations * frames, 2
    cfg.checkpoint_interval, cfg.checkpoint_at_end = 0, False
    return cfg


class Seen(Callback):
    """What the collector handed the algorithm: steps, episode ends, rewards."""

    def __init__(self):
        super().__init__()
        self.stats: dict[str, Any] = {"steps": 0, "ends": 0, "agent_steps": 0, "rewards_finite": True, "batches": 0}

    def on_batch_collected(self, batch: TensorDictBase) -> None:
        s = self.stats
        reward = batch.get(("next", "agents", "reward"))
        s["batches"] += 1
        s["steps"] += int(batch.numel())
        s["agent_steps"] += int(reward[..., 0].numel())
        s["ends"] += int(batch.get(("next", "done")).sum())
        s["rewards_finite"] &= bool(torch.isfinite(reward).all())


def run_experiment(task, algorithm: str = "mappo", iterations: int = 2, frames: int = 64, n_envs: int = 4, seed: int = 0) -> dict[str, Any]:
    """Run ``algorithm`` (a key of :data:`ALGORITHMS`) on ``task`` (a ``FleetTaskClass``) from
    BenchMARL's configs with a tiny budget; returns what the collector saw (``steps``,
    ``ends``, ``agent_steps``, ``rewards_finite``, ``batches``) and ``frames`` (the
    experiment's total)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm = {algorithm!r}: expected one of {', '.join(ALGORITHMS)} (BenchMARL's, of a discrete action space)")
    seen = Seen()
    with tempfile.TemporaryDirectory() as folder:
        experiment = Experiment(
            task=task,
            algorithm_config=ALGORITHMS[algorithm].get_from_yaml(),
            model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(),
            seed=seed,
            config=experiment_config(folder, iterations, frames, n_envs),
            callbacks=[seen],
        )
        experiment.run()
        return {**seen.stats, "frames": int(experiment.total_frames)}


__all__ = ["ALGORITHMS", "Seen", "experiment_config", "run_experiment"]

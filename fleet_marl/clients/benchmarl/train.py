"""Train one of BenchMARL's value-based algorithms (QMIX, VDN, IQL) on a fleet_marl task from
BenchMARL's own configs, with a budget in env steps, and hand back its greedy policy for the grader.

:func:`train` builds the task (:class:`~fleet_marl.clients.benchmarl.task.FleetTaskClass`: the
menu env, :class:`~fleet_marl.clients.benchmarl.env.FleetMenuEnv`, of ``num_envs`` clusters;
a suite task's spread over its first train scenarios, as ``fleet_marl.torchrl``'s env spreads
them) and runs BenchMARL's ``Experiment`` with the algorithm's, the MLP model's and the
experiment's YAML configs as BenchMARL ships them, but for:

- **the budget**: ``iterations`` iterations of ``num_envs x rollout`` frames. BenchMARL counts
  a frame per step of one env of the batch (``batch.numel()``), and the menu env's batch is
  its clusters, so a frame is one env step (one round of one cluster, its N tenants acting):
  ``iterations x num_envs x rollout`` env steps in all, what a PPO run of the same
  ``iterations``, ``num_envs`` and ``rollout`` collects (``fleet_marl.torchrl``);
- **the optimizer steps per iteration**: the YAML's ratio to the frames it collects (1000 steps
  of 128 transitions per 6000 frames), scaled to this iteration's frames (at least 1);
- the replay memory: the YAML's (a million frames) cut to the run's frames, so it still keeps
  every frame and never evicts, without allocating room for a million;
- CPU devices (or ``device`` for training), one evaluation-env cluster, no evaluation, no
  logger, no checkpoint, no progress bar (the grader grades the policy; nothing is written).

Exploration (epsilon-greedy from 0.8 to 0.01 over the first third of the frames), learning
rate, discount, replay memory, target updates and the network are the YAML's. ``seed`` seeds
the experiment (BenchMARL's ``seed_everything``) and the env's first reset.
``on_iteration(iteration, env_steps, trained, train_welfare)`` is called after each
iteration's training: the policy as it stands (:meth:`Trained.policy`) and the welfare of the
training episodes that ended in it (:attr:`FleetMenuEnv.ended_welfare`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from fleet_marl.clients.benchmarl.compat import VALUE_BASED, load_benchmarl

load_benchmarl()  # the extra, then benchmarl 1.5.2 on torchrl 0.14 (fleet_marl.clients.benchmarl.compat), before the imports below

from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.experiment.callback import Callback  # noqa: E402
from benchmarl.models.mlp import MlpConfig  # noqa: E402

from fleet_marl.clients.benchmarl.env import GROUP, FleetMenuEnv, Menu  # noqa: E402
from fleet_marl.clients.benchmarl.policy import GreedyMenuPolicy  # noqa: E402
from fleet_marl.clients.benchmarl.run import ALGORITHMS  # noqa: E402
from fleet_marl.clients.benchmarl.task import FleetTaskClass  # noqa: E402


@dataclass
class Trained:
    """What :func:`train` trained: the algorithm's greedy module (``q``), the menu it picks
    from, and its budget as run (``iterations``, ``env_steps``, ``optimizer_steps`` per
    iteration); ``credit_seconds``: the training env's time in the credit engine."""

    algorithm: str
    q: Any
    menu: Menu
    obs_mode: str
    iterations: int = 0
    env_steps: int = 0
    optimizer_steps: int = 0
    credit_seconds: float = 0.0

    def policy(self, env: Any) -> GreedyMenuPolicy:
        """The greedy policy on ``env`` (a grader's ``FleetParallelEnv``): the grader's factory."""
        return GreedyMenuPolicy(env, self.q, self.menu, self.obs_mode)


def experiment_config(save_folder: str, iterations: int, frames: int, num_envs: int, device: str = "cpu") -> ExperimentConfig:
    """BenchMARL's ``base_experiment.yaml`` with the budget of the module docstring."""
    cfg = ExperimentConfig.get_from_yaml()
    ratio = cfg.off_policy_n_optimizer_steps / cfg.off_policy_collected_frames_per_batch  # the YAML's: 1000 / 6000
    cfg.sampling_device = cfg.buffer_device = "cpu"
    cfg.train_device = device
    cfg.save_folder, cfg.loggers, cfg.render, cfg.create_json = save_folder, [], False, False
    cfg.max_n_iters, cfg.max_n_frames = iterations, None
    cfg.off_policy_collected_frames_per_batch = cfg.on_policy_collected_frames_per_batch = frames
    cfg.off_policy_n_envs_per_worker = cfg.on_policy_n_envs_per_worker = num_envs
    cfg.off_policy_n_optimizer_steps = max(1, round(ratio * frames))
    cfg.off_policy_memory_size = min(cfg.off_policy_memory_size, iterations * frames)  # every frame kept, as the YAML's million would
    cfg.evaluation, cfg.evaluation_episodes = False, 1
    cfg.checkpoint_interval, cfg.checkpoint_at_end = 0, False
    return cfg


def menu_env(env: Any) -> FleetMenuEnv:
    """The menu env inside BenchMARL's ``TransformedEnv`` ``env``."""
    while not isinstance(env, FleetMenuEnv):
        env = env.base_env
    return env


class _Iterations(Callback):
    """Calls ``on_iteration`` after each iteration's training (the one group's ``on_train_end``)."""

    def __init__(self):
        super().__init__()
        self.on_iteration: Callable[[int, int, Trained, list[float]], None] | None = None
        self.trained: Trained | None = None

    def on_train_end(self, training_td: Any, group: str) -> None:
        t, env = self.trained, menu_env(self.experiment.collector.env)
        assert t is not None  # set once the experiment is built
        t.iterations, t.env_steps = self.experiment.n_iters_performed + 1, int(self.experiment.total_frames)
        t.credit_seconds = float(env.venv.credit_seconds)
        welfare, env.ended_welfare = env.ended_welfare, []
        if self.on_iteration is not None:
            self.on_iteration(t.iterations, t.env_steps, t, welfare)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """BenchMARL's experiment without its progress bar and the warnings every short run meets
    (an iteration in which no episode ended; torchrl 0.14's note on the collector's transforms)."""
    module: Any = importlib.import_module("benchmarl.experiment.experiment")  # its module global tqdm, set back after
    bar = module.tqdm
    module.tqdm = functools.partial(tqdm, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No episode terminated this iteration")
            warnings.filterwarnings("ignore", message="The env passed to Collector is missing transforms")
            yield
    finally:
        module.tqdm = bar


def train(
    task: str,
    algorithm: str,
    iterations: int,
    num_envs: int,
    rollout: int,
    seed: int,
    reward_scheme: str = "global",
    overrides: dict | None = None,
    on_iteration: Callable[[int, int, Trained, list[float]], None] | None = None,
    device: str = "cpu",
) -> Trained:
    """Train ``algorithm`` (of :data:`~fleet_marl.clients.benchmarl.compat.VALUE_BASED`) on
    ``task`` (registered or suite) under ``reward_scheme`` with the env ``overrides``
    (``max_cycles`` among them); see the module docstring."""
    if algorithm not in VALUE_BASED:
        raise ValueError(f"algorithm = {algorithm!r}: expected one of {', '.join(VALUE_BASED)} (BenchMARL's value-based algorithms)")
    overrides = dict(overrides or {})
    max_cycles = overrides.pop("max_cycles", None)
    config = {"max_cycles": max_cycles, "reward_scheme": reward_scheme, "overrides": overrides}
    fleet_task = FleetTaskClass(task.upper(), config)
    iterations_cb = _Iterations()
    with tempfile.TemporaryDirectory() as folder, quiet():
        experiment = Experiment(
            task=fleet_task,
            algorithm_config=ALGORITHMS[algorithm].get_from_yaml(),
            model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(),
            seed=seed,
            config=experiment_config(folder, iterations, num_envs * rollout, num_envs, device),
            callbacks=[iterations_cb],
        )
        menu = menu_env(experiment.test_env).menu_map  # the menu the learner picks from
        q = experiment.algorithm.get_policy_for_loss(GROUP)  # the greedy policy: Q-network, then the masked arg max
        trained = Trained(algorithm, q, menu, fleet_task.config["obs_mode"], optimizer_steps=experiment.config.off_policy_n_optimizer_steps)
        iterations_cb.trained, iterations_cb.on_iteration = trained, on_iteration  # after the experiment pickled its callbacks
        experiment.run()
    return trained


__all__ = ["Trained", "experiment_config", "menu_env", "train"]

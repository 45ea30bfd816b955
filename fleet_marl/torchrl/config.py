"""The TorchRL engine's run config: :class:`TorchRLTrainConfig` (what ``fleet-marl train
--engine torchrl`` and a YAML with ``engine: torchrl`` hold), the env's signature a checkpoint
must match, and the columns of ``metrics.csv`` (:data:`COLUMNS`).

A config is checked when it is made (the fields every engine shares by
:func:`fleet_marl.training.check_common`), so a bad one fails before anything trains.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_marl.environment import FleetParallelEnv, FleetSequentialEnv
from fleet_marl.environment.horizon import VARIANTS
from fleet_marl.torchrl.networks import ACTIVATIONS, SHARING
from fleet_marl.training import TrainConfigError, check_common, check_env, check_integers, check_numbers, config_env, replaced

#: The default run's iterations (``make train``); docs/training.md says how long they take on its machine.
ITERATIONS = 700

#: The devices a learner may name (``--device``); whether CUDA is there is checked when training starts (:func:`check_device`).
DEVICE = re.compile(r"cpu|cuda(:\d+)?")

#: The columns of ``metrics.csv`` (empty where an iteration has no value).
COLUMNS = (
    "iteration",
    "env_steps",
    "agent_steps",
    "time_s",
    "agent_steps_per_s",
    "collect_s",
    "learn_s",
    "episodes",
    "lr",
    "welfare",
    "eval_welfare",
    "score",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl_approx",
    "clip_fraction",
    "explained_variance",
)


@dataclass
class TorchRLTrainConfig:
    """A TorchRL training run. ``iterations`` collector batches of ``num_envs`` x ``rollout``
    cluster steps each; ``minibatch`` cluster steps per gradient step (each holds every tenant)."""

    task: str = "easy"
    reward_scheme: str = "local"
    #: rounds the difference reward looks ahead (``reward_scheme: difference``): each tenant-step's
    #: reward is relabelled to the k-round difference D^k (fleet_marl.environment.horizon) and the
    #: learner trains credit_horizon - 1 steps behind the collector; 1: the env's reward, as before
    credit_horizon: int = 1
    credit_branch: str = "sits_out"  # D^k's counterfactual: "sits_out" (out of round t only) or "withdrawn" (out from t on)
    sharing: str = "shared"
    env: dict = field(default_factory=dict)
    iterations: int = ITERATIONS
    max_minutes: float = 15.0  # a safety cap: stop after the iteration that passes this much wall time (0: none); reported when it binds
    seed: int = 0
    num_envs: int = 1024
    rollout: int = 8
    epochs: int = 2
    minibatch: int = 2048
    lr: float = 1e-3
    anneal_lr: bool = True  # the learning rate falls linearly to 2% of lr over the run's iterations (never over wall time)
    gamma: float = 0.95
    lmbda: float = 0.95
    clip: float = 0.2
    entropy_coeff: float = 0.01
    critic_coeff: float = 0.5
    max_grad_norm: float = 0.5
    hidden: list = field(default_factory=lambda: [64, 64])
    activation: str = "relu"
    agent_id: bool = True  # a network shared by tenants also reads the tenant's one-hot index (policy.WithAgentId)
    autoregressive: bool = False  # action dimensions chosen in order, each given the earlier ones (policy.Coupling)
    eval_interval: int = 100
    eval_episodes: int = 3
    final_episodes: int = 10
    checkpoint_interval: int = 100
    collector: str = "sync"  # "sync": collect, then learn (reproducible); "async": collect the next batch while learning (not reproducible)
    collectors: int = 1  # processes that collect (TorchRL's multi-process collectors above 1); each steps num_envs / collectors clusters
    device: str = "cpu"  # where the learner (networks, GAE, loss, optimizer) runs: cpu or cuda[:i]; the env and collection stay on CPU
    threads: int = 1  # torch threads (0: torch's default, one per core)
    out: str = "runs/train"
    name: str = ""

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> TorchRLTrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - {"engine"})
        if unknown:
            raise TrainConfigError(f"{source}: unknown key {unknown[0]!r}; the torchrl engine's keys are {', '.join(sorted(names))}")
        tc = cls(**{k: v for k, v in data.items() if k in names})
        tc.check(source)
        return tc

    def replace(self, source: str = "override", **changes: Any) -> TorchRLTrainConfig:
        """A copy with ``changes`` (``None`` values are ignored), checked."""
        return replaced(self, source, changes)

    def check(self, source: str = "config") -> None:
        def bad(name, expected):
            raise TrainConfigError(f"{source}: {name} = {getattr(self, name)!r}: expected {expected}")

        check_common(self, source, SHARING, bad)
        ones = ("iterations", "num_envs", "rollout", "epochs", "minibatch")
        zeros = ("eval_interval", "eval_episodes", "final_episodes", "checkpoint_interval", "threads", "seed")
        check_integers(self, [(name, 1) for name in ones] + [(name, 0) for name in zeros], bad)
        ranges = (
            ("max_minutes", 0, 1e6),
            ("lr", 0, 1),
            ("gamma", 0, 1),
            ("lmbda", 0, 1),
            ("clip", 0, 10),
            ("entropy_coeff", -1, 10),
            ("critic_coeff", 0, 100),
            ("max_grad_norm", 0, 1e6),
        )
        positive = ("lr", "clip")
        check_numbers(self, ranges, positive, bad, lambda name, lo, hi: f"a number in {'(' if name in positive else '['}{lo}, {hi}]")
        if self.collector not in ("sync", "async"):
            bad("collector", "'sync' or 'async'")
        if isinstance(self.collectors, bool) or not isinstance(self.collectors, int) or self.collectors < 1:
            bad("collectors", "an integer >= 1")
        if self.num_envs % self.collectors:
            bad("collectors", f"a divisor of num_envs = {self.num_envs} (each collector process steps num_envs / collectors clusters)")
        if self.collectors > 1 and self.sequential:
            bad("collectors", "1 under the sequential protocol (its turn collector is one process; collector: async moves it to another)")
        if not isinstance(self.device, str) or not DEVICE.fullmatch(self.device):
            bad("device", "'cpu', 'cuda' or 'cuda:<index>'")
        for name in ("autoregressive", "agent_id", "anneal_lr"):
            if not isinstance(getattr(self, name), bool):
                bad(name, "true or false")
        if self.activation not in ACTIVATIONS:
            bad("activation", f"one of {', '.join(ACTIVATIONS)}")
        self._check_horizon(bad)
        check_env(self, source)

    def _check_horizon(self, bad) -> None:
        """``credit_horizon`` and ``credit_branch``: a k > 1 relabels the batches of the one sync
        collector of the simultaneous protocol, whose env this process steps and records."""
        k = self.credit_horizon
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.rollout:
            bad(
                "credit_horizon",
                f"an integer from 1 (the env's reward) to rollout = {self.rollout} (the learner trains k - 1 steps behind)",
            )
        if self.credit_branch not in VARIANTS:
            bad("credit_branch", f"one of {', '.join(map(repr, VARIANTS))}")
        if k == 1:
            return
        if self.reward_scheme != "difference":
            bad("reward_scheme", f"'difference' with credit_horizon = {k} (the k-round difference relabels the difference reward)")
        if self.collector != "sync" or self.collectors != 1 or self.sequential:
            bad(
                "credit_horizon",
                "1 unless collector: sync, collectors: 1 and the simultaneous protocol (the k-round difference branches the "
                "core states of the env this process steps)",
            )

    @property
    def run_name(self) -> str:
        horizon = "" if self.credit_horizon == 1 else f"_k{self.credit_horizon}{'' if self.credit_branch == 'sits_out' else '_withdrawn'}"
        return self.name or f"{self.task}-{self.sharing}-{self.reward_scheme}{horizon}{'-sequential' if self.sequential else ''}-torchrl"

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.run_name

    def to_dict(self) -> dict:
        return {"engine": "torchrl", **dataclasses.asdict(self)}

    @property
    def sequential(self) -> bool:
        """The run trains under the sequential protocol (``env.protocol``): turns collected by
        :class:`~fleet_marl.torchrl.sequential.TurnCollector`."""
        return isinstance(self.env, dict) and self.env.get("protocol") == "sequential"

    def probe(self) -> FleetParallelEnv | FleetSequentialEnv:
        """The run's env with one cluster (its spaces are the signature's): the ParallelEnv, or the
        AEC env of the sequential protocol (40 features, the longer ``state()``)."""
        cls = FleetSequentialEnv if self.sequential else FleetParallelEnv
        return config_env(cls, self)

    def signature(self) -> dict:
        """What a checkpoint must match to be resumed or graded on an env."""
        env = self.probe()
        st = env.kernel_static
        obs = env.observation_spaces[env.possible_agents[0]].shape
        assert obs is not None  # a Box of features
        return {
            "task": self.task,
            "possible_agents": list(env.possible_agents),
            "kinds": kinds_of(env),
            "nvec": env.nvec.max(0).tolist(),
            "obs_dim": int(obs[0]),
            "state_dim": int(env.state_space.shape[0]),
            "sharing": self.sharing,
            "hidden": list(self.hidden),
            "activation": self.activation,
            "autoregressive": self.autoregressive,
            "agent_id": self.agent_id,
            "T": int(st.T),
        }


def check_device(device: str, option: str = "--device") -> None:
    """A :class:`TrainConfigError` naming ``option`` when ``device`` is a CUDA device this
    machine's torch cannot reach (no CUDA build, no GPU, or no such index)."""
    if not device.startswith("cuda"):
        return
    import torch  # torch: only where a run starts

    if not torch.cuda.is_available():
        build = "a build without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, but no GPU is visible"
        raise TrainConfigError(
            f"{option} {device}: no CUDA device here (torch {torch.__version__}: {build}); use {option} cpu, "
            "or install a CUDA build of torch on a machine with a GPU"
        )
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise TrainConfigError(
            f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 .. cuda:{torch.cuda.device_count() - 1}"
        )


def kinds_of(env) -> list[str]:
    st = env.kernel_static
    return ["train" if st.is_train[i] else "serve" for i in range(st.T)]


__all__ = ["COLUMNS", "DEVICE", "ITERATIONS", "TorchRLTrainConfig", "check_device", "kinds_of"]

"""Training configs: :class:`TrainConfig` (what ``fleet-marl train`` and the YAML files in
``experiments/configs/`` hold) and :func:`build`, which turns one into an RLlib ``PPOConfig``.

A YAML config is a flat mapping of :class:`TrainConfig` fields; any field left out keeps its
default, an unknown one is an error that lists the valid ones::

    task: medium
    sharing: per_kind
    reward_scheme: difference
    iterations: 60
    env: {arbiter: {mechanism: auction}}   # any fleet_marl.parallel_env override

``env`` may also hold ``protocol: sequential`` (and ``turn_order``): the tenants then claim one
at a time and RLlib trains on turn-based episodes (``FleetRLlibEnv``'s sequential protocol).

Everything here is checked without starting Ray, so a bad config fails in a second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleet_marl.environment import FleetParallelEnv, FleetSequentialEnv
from fleet_marl.rllib.sharing import SHARING, mapping_for, module_ids
from fleet_marl.training import TrainConfigError, check_common, check_env, check_integers, check_numbers, config_env, replaced

OBS_MODES = ("dict", "flat")
#: The most clusters per env runner when ``num_envs_per_env_runner`` is left out and the vector env
#: samples: then B = train_batch_size // max_cycles, so that each cluster plays whole episodes in
#: an iteration (the default config: 2000 // 100 = 20 clusters of 100 rounds), at most this many.
MAX_AUTO_B = 256


@dataclass
class TrainConfig:
    """One training run. Each field is also a YAML key (``lambda_`` is ``lambda`` too)."""

    #: scenario (``fleet_marl.tasks``) and its overrides
    task: str = "easy"
    reward_scheme: str = "mixed"
    sharing: str = "shared"
    obs_mode: str = "dict"
    env: dict = field(default_factory=dict)
    #: run length and seed (the env runners' seeds and the module initialization); ``max_minutes``:
    #: a cap on wall time, evaluations included (0: none): the run stops after the iteration that
    #: passes it, checkpoints and is graded as usual, and says so
    iterations: int = 36
    max_minutes: float = 15.0
    seed: int = 0
    #: sampling: ``vector`` steps B = num_envs_per_env_runner clusters per env runner as arrays (the
    #: sequential protocol, turn-based, always steps one env per cluster); None: B =
    #: train_batch_size // max_cycles with the vector env (:data:`MAX_AUTO_B` at most), 1 env otherwise
    num_env_runners: int = 0
    num_envs_per_env_runner: int | None = None
    vector: bool = True
    #: PPO (env steps per iteration; agent steps are N times more)
    train_batch_size: int = 2000
    minibatch_size: int = 1000
    num_epochs: int = 6
    lr: float = 3e-4
    gamma: float = 0.95
    lambda_: float = 0.95
    clip_param: float = 0.2
    vf_clip_param: float = 50.0
    entropy_coeff: float = 0.003
    vf_loss_coeff: float = 0.5
    hidden: list = field(default_factory=lambda: [128, 128])
    #: grader evaluations of the greedy policy during training (0: none) and at the end
    eval_interval: int = 10
    eval_episodes: int = 3
    final_episodes: int = 10
    checkpoint_interval: int = 10
    #: where runs go: <out>/<name>/ (name defaults to <task>-<sharing>-<reward_scheme>)
    out: str = "runs/train"
    name: str = ""

    # --- loading and checking -------------------------------------------------------------------

    @classmethod
    def fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> TrainConfig:
        if not isinstance(data, dict):
            raise TrainConfigError(f"{source}: expected a mapping of TrainConfig fields, got a {type(data).__name__}")
        data = dict(data)
        if "lambda" in data:
            data["lambda_"] = data.pop("lambda")
        known = cls.fields()
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise TrainConfigError(f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(k.rstrip('_') for k in known)}")
        tc = cls(**data)
        tc.check(source)
        return tc

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        p = Path(path)
        if not p.is_file():
            raise TrainConfigError(
                f"--config {str(path)!r}: no such file; the configs that ship are in experiments/configs/ (e.g. experiments/configs/easy_shared_mixed.yaml)"
            )
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            raise TrainConfigError(f"--config {str(path)!r}: not valid YAML ({exc})") from None
        return cls.from_dict(data or {}, source=str(path))

    def replace(self, source: str = "override", **changes: Any) -> TrainConfig:
        """A copy with ``changes`` (``None`` values are ignored), checked."""
        return replaced(self, source, changes)

    def check(self, source: str = "config") -> None:
        def bad(name, expected):
            raise TrainConfigError(f"{source}: {name.rstrip('_')} = {getattr(self, name)!r}: expected {expected}")

        check_common(self, source, SHARING, bad)
        if self.obs_mode not in OBS_MODES:
            bad("obs_mode", "'dict' (masked) or 'flat' (unmasked)")
        if self.sharing == "mappo" and self.obs_mode != "dict":
            bad("obs_mode", "'dict' with sharing 'mappo' (the centralized critic reads the state from the Dict observation)")
        for k in ("task", "reward_scheme", "obs_mode", "with_state"):
            if k in self.env:
                raise TrainConfigError(f"{source}: env.{k} is set by the top-level key; remove it from env")
        ones = ("iterations", "train_batch_size", "minibatch_size", "num_epochs", "final_episodes", "eval_episodes")
        zeros = ("seed", "num_env_runners", "eval_interval", "checkpoint_interval")
        check_integers(self, [(name, 1) for name in ones] + [(name, 0) for name in zeros], bad)
        n = self.num_envs_per_env_runner
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            bad(
                "num_envs_per_env_runner",
                "an integer >= 1, or null (train_batch_size // max_cycles clusters with the vector env, 1 env otherwise)",
            )
        if not isinstance(self.vector, bool):
            bad("vector", "true (B clusters stepped as arrays) or false (one env per cluster)")
        if self.minibatch_size > self.train_batch_size:
            bad("minibatch_size", f"at most train_batch_size ({self.train_batch_size})")
        ranges = (
            ("max_minutes", 0.0, 1e6),
            ("lr", 0.0, 1.0),
            ("gamma", 0.0, 1.0),
            ("lambda_", 0.0, 1.0),
            ("clip_param", 0.0, 10.0),
            ("vf_clip_param", 0.0, float("inf")),
            ("entropy_coeff", 0.0, 1.0),
            ("vf_loss_coeff", 0.0, float("inf")),
        )
        positive = ("lr", "clip_param")
        check_numbers(
            self, ranges, positive, bad, lambda name, low, hi: f"a number in [{low}, {hi}]" + (" and > 0" if name in positive else "")
        )
        check_env(self, source)

    # --- derived --------------------------------------------------------------------------------

    @property
    def run_name(self) -> str:
        return self.name or f"{self.task}-{self.sharing}-{self.reward_scheme}"

    @property
    def vectorized(self) -> bool:
        """Whether the vector env samples: ``vector`` and the simultaneous protocol."""
        return self.vector and self.env.get("protocol", "simultaneous") != "sequential"

    @property
    def envs_per_runner(self) -> int:
        """``num_envs_per_env_runner``, or its default: with the vector env, as many clusters as
        an iteration holds whole episodes of (``train_batch_size // max_cycles``, at least 1, at
        most :data:`MAX_AUTO_B`); one env per runner otherwise."""
        if self.num_envs_per_env_runner is not None:
            return self.num_envs_per_env_runner
        if not self.vectorized:
            return 1
        return max(1, min(MAX_AUTO_B, self.train_batch_size // int(self.probe().config.max_cycles)))

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.run_name

    def env_config(self) -> dict:
        """``env_config`` of :class:`~fleet_marl.rllib.env.FleetRLlibEnv`."""
        return {
            "task": self.task,
            "reward_scheme": self.reward_scheme,
            "obs_mode": self.obs_mode,
            "with_state": self.sharing == "mappo",
            **self.env,
        }

    def probe(self):
        """A ``FleetParallelEnv`` of this config, or its ``FleetSequentialEnv`` under
        ``env.protocol = "sequential"`` (cheap; no Ray). Its spaces are what the modules learn."""
        if self.env.get("protocol") == "sequential":
            return config_env(FleetSequentialEnv, self)
        return config_env(FleetParallelEnv, self)

    def signature(self) -> dict:
        """What a checkpoint must match to be resumed or evaluated with this config."""
        env = self.probe()
        st = env.kernel_static
        kinds = {a: ("train" if st.is_train[i] else "serve") for i, a in enumerate(env.possible_agents)}
        return {
            "task": self.task,
            "possible_agents": list(env.possible_agents),
            "kinds": kinds,
            "nvec": env.nvec.max(0).tolist(),
            "obs_dim": int(env.observation_spaces[env.possible_agents[0]].shape[0]),
            "state_dim": int(env.state_space.shape[0]),
            "obs_mode": self.obs_mode,
            "sharing": self.sharing,
            "modules": module_ids(self.sharing, list(env.possible_agents), kinds),
            "hidden": list(self.hidden),
        }

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["lambda"] = d.pop("lambda_")
        return d

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def check_signature(meta: dict, tc: TrainConfig, source: str) -> None:
    """Raise :class:`TrainConfigError` if a checkpoint's sidecar does not match ``tc``."""
    want = tc.signature()
    got = meta.get("signature", {})
    for key in ("possible_agents", "nvec", "obs_dim", "state_dim", "obs_mode", "sharing", "modules", "hidden", "kinds"):
        if got.get(key) != want[key]:
            raise TrainConfigError(
                f"checkpoint {source}: {key} = {got.get(key)!r} (trained on task {got.get('task')!r}), but this config has {want[key]!r} "
                f"(task {tc.task!r}, sharing {tc.sharing!r}); resume with the run's own config (leave out --task/--sharing/--config) or start a new run"
            )


def build(tc: TrainConfig):
    """The ``PPOConfig`` of ``tc`` (imports Ray; does not start it)."""
    # Ray: only when building (configs are checked without it)
    from ray.rllib.algorithms.ppo import PPOConfig  # Ray
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec  # Ray
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # Ray

    from fleet_marl.rllib.callbacks import FleetCallbacks  # Ray
    from fleet_marl.rllib.env import FleetRLlibEnv  # Ray
    from fleet_marl.rllib.evaluation import grade  # Ray
    from fleet_marl.rllib.learner import FleetPPOTorchLearner  # Ray and torch
    from fleet_marl.rllib.modules import CentralCriticPPOTorchRLModule, MaskedPPOTorchRLModule  # Ray and torch
    from fleet_marl.rllib.runner import FleetEnvRunner  # Ray and torch

    sig = tc.signature()
    if tc.sharing == "mappo":
        module_class = CentralCriticPPOTorchRLModule
    elif tc.obs_mode == "dict":
        module_class = MaskedPPOTorchRLModule
    else:
        module_class = None  # PPO's default module on the Box observation
    model_config = {
        "fcnet_hiddens": list(tc.hidden),
        "fcnet_activation": "tanh",
        "head_fcnet_hiddens": [],
        "vf_share_layers": tc.sharing == "mappo",
        "central_vf_hiddens": [256, 256],
    }
    specs = {
        mid: RLModuleSpec(module_class=module_class, model_config=model_config) if module_class else RLModuleSpec(model_config=model_config)
        for mid in sig["modules"]
    }
    config = (
        PPOConfig()
        .environment(FleetRLlibEnv, env_config=tc.env_config(), disable_env_checking=True)
        .env_runners(
            num_env_runners=tc.num_env_runners,
            num_envs_per_env_runner=tc.envs_per_runner,
            rollout_fragment_length="auto",
            sample_timeout_s=600.0,
            env_runner_cls=FleetEnvRunner if tc.vectorized else None,  # else RLlib's runner over one FleetRLlibEnv per sub-env
        )
        .learners(num_learners=0)
        .multi_agent(policies=set(sig["modules"]), policy_mapping_fn=mapping_for(tc.sharing, sig["possible_agents"], sig["kinds"]))
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .training(
            learner_class=FleetPPOTorchLearner,  # PPO's loss in fewer CPU operations (learner.py)
            train_batch_size_per_learner=tc.train_batch_size,
            minibatch_size=tc.minibatch_size,
            num_epochs=tc.num_epochs,
            lr=tc.lr,
            gamma=tc.gamma,
            lambda_=tc.lambda_,
            clip_param=tc.clip_param,
            vf_clip_param=tc.vf_clip_param,
            entropy_coeff=tc.entropy_coeff,
            vf_loss_coeff=tc.vf_loss_coeff,
        )
        .callbacks(FleetCallbacks)
        .debugging(seed=tc.seed, log_level="ERROR")
    )
    if tc.eval_interval:
        config = config.evaluation(
            evaluation_interval=tc.eval_interval,
            evaluation_duration=tc.eval_episodes,
            evaluation_duration_unit="episodes",
            custom_evaluation_function=grade,
            evaluation_num_env_runners=0,
        )
    return config

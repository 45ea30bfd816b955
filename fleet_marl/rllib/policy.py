"""Trained RLlib modules as a fleet_marl policy (the grader's ``Policy`` protocol).

:class:`ModulePolicy` plays every tenant of a plain ``FleetParallelEnv`` with RLModules: it
builds each agent's RLlib observation exactly as :class:`~fleet_marl.rllib.env.FleetRLlibEnv`
does (flat mask from ``infos[agent]["action_mask"]``, padded to the common ``nvec``), runs one
``forward_inference`` per module over the agents mapped to it, and takes the greedy action
(the mode of each action dimension). Masked choices have logit ``FLOAT_MIN``, so the greedy
action is always legal with a masking module.

``explore=True`` samples each action dimension from the policy's distribution instead (what
the env runners do in training), with a numpy generator seeded by ``reset(seed)``, so the
grader's episodes stay reproducible. Masked choices have probability 0.

>>> import fleet_marl
>>> from fleet_marl.evaluation import evaluate
>>> env = fleet_marl.parallel_env(task="easy")
>>> ckpt = "runs/train/easy-shared-difference/checkpoint"  # a trained RLlib run's checkpoint folder
>>> policy = ModulePolicy.from_checkpoint(ckpt, env)  # doctest: +SKIP
>>> evaluate("easy", lambda env: ModulePolicy.from_checkpoint(ckpt, env))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule

from fleet_marl.environment.spaces import mask_dims
from fleet_marl.policies.base import fleet_env
from fleet_marl.rllib.env import flat_mask, mask_offsets
from fleet_marl.rllib.sharing import mapping_for
from fleet_marl.training.engines import ENGINES

#: Where a fleet-marl checkpoint keeps each module, relative to the checkpoint folder.
MODULE_DIR = ("learner_group", "learner", "rl_module")


class ModulePolicy:
    """Greedy (or, with ``explore``, sampled) play of RLModules on a fleet_marl env (see the
    module docstring).

    ``modules`` maps module IDs to RLModules; ``mapping(agent_id) -> module ID``;
    ``obs_mode`` is the ``FleetRLlibEnv`` observation mode the modules were trained on.
    """

    def __init__(self, env, modules: dict[str, Any], mapping: Callable[[str], str], obs_mode: str = "dict", explore: bool = False):
        self.env = fleet_env(env)
        self.modules = modules
        self.mapping = mapping
        self.obs_mode = obs_mode
        self.explore = bool(explore)
        self._rng = np.random.default_rng(0)
        self._offsets = mask_offsets(self.env.nvec.max(0))
        self._hi = {a: self.env.nvec[i] - 1 for i, a in enumerate(self.env.possible_agents)}
        for a in self.env.possible_agents:
            mid = mapping(a)
            if mid not in modules:
                raise ValueError(f"ModulePolicy: agent {a!r} maps to module {mid!r}, which is not among the modules {sorted(modules)}")

    def reset(self, seed: int | None = None) -> None:
        """Greedy play draws no random numbers; ``explore`` reseeds its generator."""
        self._rng = np.random.default_rng(seed)

    def act(self, observations: dict, infos: dict) -> dict[str, np.ndarray]:
        groups: dict[str, list[str]] = {}
        live = set(self.env.agents)  # step() also returns the last observation of a finished agent
        for a in observations:
            if a in live:
                groups.setdefault(self.mapping(a), []).append(a)
        out = {}
        for mid, agents in groups.items():
            feats = np.stack([self._features(observations[a]) for a in agents]).astype(np.float32)
            obs: dict[str, torch.Tensor] | torch.Tensor
            if self.obs_mode == "dict":
                masks = np.stack([self._mask(a, infos) for a in agents])
                obs = {"observations": torch.from_numpy(feats), "action_mask": torch.from_numpy(masks)}
            else:
                obs = torch.from_numpy(feats)
            module = self.modules[mid]
            with torch.no_grad():
                logits = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
                if self.explore:
                    acts = self._sample(logits.numpy().astype(np.float64))
                else:
                    acts = module.get_inference_action_dist_cls().from_logits(logits).to_deterministic().sample().numpy()
            for a, act in zip(agents, acts, strict=True):
                out[a] = np.minimum(act.astype(np.int64), self._hi[a])
        return out

    def _sample(self, logits: np.ndarray) -> np.ndarray:
        """One draw per row and action dimension from the softmax of that dimension's logits."""
        out = np.empty((logits.shape[0], len(self._offsets) - 1), np.int64)
        for d in range(out.shape[1]):
            z = logits[:, self._offsets[d] : self._offsets[d + 1]]
            p = np.exp(z - z.max(axis=1, keepdims=True))  # a masked choice's logit is FLOAT_MIN: p = 0
            p /= p.sum(axis=1, keepdims=True)
            out[:, d] = [self._rng.choice(len(row), p=row) for row in p]
        return out

    def act_one(self, observation, agent: str, info: dict | None) -> np.ndarray:
        """One agent's action (the AEC loop)."""
        return self.act({agent: observation}, {agent: info or {}})[agent]

    @staticmethod
    def _features(o) -> np.ndarray:
        return np.asarray(o["observation"] if isinstance(o, dict) else o)

    def _mask(self, agent: str, infos: dict) -> np.ndarray:
        info = infos.get(agent) or {}
        mask = info.get("action_mask")
        if mask is None:
            mask = self.env.action_mask(agent)
        return flat_mask(mask_dims(mask, self.env.nvec[self.env.agent_index[agent]]), self._offsets)  # either mask_layout

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path, env, explore: bool = False) -> ModulePolicy:
        """Load the modules of a ``fleet-marl train`` checkpoint (no Ray cluster needed)."""
        path = Path(checkpoint).resolve()  # RLlib's loader takes absolute paths only
        sig = ENGINES["rllib"].checkpoints.read_sidecar(path)["signature"]  # the sidecar fleet-marl train writes beside RLlib's files
        root = path.joinpath(*MODULE_DIR)
        # TorchRLModules (torch modules: eval() switches off dropout and the like); RLModule's type does not say so
        modules: dict[str, Any] = {mid: RLModule.from_checkpoint(str(root / mid)) for mid in sig["modules"]}
        for m in modules.values():
            m.eval()
        return cls(env, modules, mapping_for(sig["sharing"], sig["possible_agents"], sig["kinds"]), sig["obs_mode"], explore)

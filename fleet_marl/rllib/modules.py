"""PPO RLModules for fleet_marl: action masking and a centralized (MAPPO-style) critic.

RLlib does not mask actions on its own. :class:`MaskedPPOTorchRLModule` reads the Dict
observation of :class:`~fleet_marl.rllib.env.FleetRLlibEnv` (``obs_mode="dict"``) --
``{"observations", "action_mask"[, "state"]}`` -- runs PPO's default encoder, policy and value
heads on ``"observations"`` only, and sets the logits of masked choices to ``FLOAT_MIN``.
The mask is the per-dimension masks concatenated in action order, which is exactly how RLlib's
``TorchMultiCategorical`` splits the logits of a ``MultiDiscrete`` space, so a masked choice
has probability 0 both when sampling (exploration) and under ``argmax`` (inference).

:class:`CentralCriticPPOTorchRLModule` keeps the masked decentralized actor and replaces the
value function with ``central_vf``, an MLP on ``[state, own observation]`` (the
"agent-specific global state" critic of MAPPO, Yu et al. 2022, arXiv:2103.01955). The critic
is learner-only: env runners build inference-only modules without it, and it is dropped from
their weights (``get_non_inference_attributes``). ``model_config["central_vf_hiddens"]``
(default ``[256, 256]``) sets its layers.
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.utils.torch_utils import FLOAT_MIN
from torch import nn


def mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` where ``mask`` is 1, ``FLOAT_MIN`` elsewhere (same shape)."""
    return torch.where(mask > 0.5, logits, torch.full_like(logits, FLOAT_MIN))


class MaskedPPOTorchRLModule(DefaultPPOTorchRLModule):
    """PPO's default module on ``obs["observations"]`` with masked action logits."""

    def __init__(self, *, observation_space=None, **kwargs):
        if observation_space is None or "action_mask" not in getattr(observation_space, "spaces", {}):
            raise ValueError(
                f"{type(self).__name__}: observation_space = {observation_space!r}: expected a Dict with 'observations' and "
                "'action_mask'; use the env with obs_mode='dict' (fleet_marl.rllib.FleetRLlibEnv), or RLlib's default module with obs_mode='flat'"
            )
        self._dict_space = observation_space
        super().__init__(observation_space=observation_space["observations"], **kwargs)

    def setup(self):
        super().setup()  # encoder and heads for the Box
        self.observation_space = self._dict_space  # checkpoints record the Dict space

    @staticmethod
    def _split(batch):
        obs = batch[Columns.OBS]
        inner = dict(batch)  # never mutate RLlib's batch
        inner[Columns.OBS] = obs["observations"]
        return inner, obs["action_mask"]

    def _forward(self, batch, **kwargs):  # inference and exploration
        inner, mask = self._split(batch)
        out = super()._forward(inner, **kwargs)
        out[Columns.ACTION_DIST_INPUTS] = mask_logits(out[Columns.ACTION_DIST_INPUTS], mask)
        return out

    def _forward_train(self, batch, **kwargs):
        inner, mask = self._split(batch)
        out = super()._forward_train(inner, **kwargs)
        out[Columns.ACTION_DIST_INPUTS] = mask_logits(out[Columns.ACTION_DIST_INPUTS], mask)
        return out

    def compute_values(self, batch, embeddings=None):
        if isinstance(batch[Columns.OBS], dict):
            batch = self._split(batch)[0]
        return super().compute_values(batch, embeddings)


class CentralCriticPPOTorchRLModule(MaskedPPOTorchRLModule):
    """Masked decentralized actor, centralized critic on ``[state, own observation]``."""

    def __init__(self, *, observation_space=None, **kwargs):
        if observation_space is not None and "state" not in getattr(observation_space, "spaces", {}):
            raise ValueError(
                f"{type(self).__name__}: the observation has no 'state': build the env with with_state=True (sharing 'mappo' does)"
            )
        super().__init__(observation_space=observation_space, **kwargs)

    def setup(self):
        super().setup()
        if not self.inference_only:  # env runners never evaluate the critic
            mc = self.model_config if isinstance(self.model_config, dict) else {}
            width = self._dict_space["state"].shape[0] + self._dict_space["observations"].shape[0]
            layers: list[nn.Module] = []
            for h in mc.get("central_vf_hiddens", [256, 256]):
                layers += [nn.Linear(width, h), nn.Tanh()]
                width = h
            layers.append(nn.Linear(width, 1))
            self.central_vf = nn.Sequential(*layers)

    def get_non_inference_attributes(self):
        return super().get_non_inference_attributes() + ["central_vf"]

    def compute_values(self, batch, embeddings=None):  # the actor's embeddings are not used
        obs = batch[Columns.OBS]
        return self.central_vf(torch.cat([obs["state"], obs["observations"]], dim=-1)).squeeze(-1)

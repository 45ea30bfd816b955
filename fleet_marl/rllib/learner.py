"""``FleetPPOTorchLearner``: RLlib's PPO torch learner with the same loss in fewer CPU operations.

RLlib 2.60's ``PPOTorchLearner.compute_loss_for_module`` takes every masked mean (the rows PPO's
learner connector adds to bootstrap each episode chunk are masked out, ``LOSS_MASK``) by boolean
indexing, which gathers a copy in the forward pass and scatters it back in the backward one, six
times a minibatch; it computes the explained variance (a logged metric) inside the autograd
graph; and its Adam steps its parameters one tensor at a time. This learner computes the same
loss (clipped surrogate, KL penalty, clipped value loss, entropy bonus, the same coefficients and
schedules, the same logged metrics) with each masked mean a weighted sum over the 0/1 mask, the
explained variance outside the graph, and Adam's ``foreach`` step (the same update, its tensors
in one call). :func:`fleet_marl.rllib.config.build` sets it (``learner_class``).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.ppo import LEARNER_RESULTS_KL_KEY, LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY, LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.torch_utils import explained_variance


class FleetPPOTorchLearner(PPOTorchLearner):
    """PPO's loss as RLlib computes it, in fewer operations (see the module docstring)."""

    def configure_optimizers_for_module(self, module_id: Any, config: Any = None) -> None:
        module: Any = self._module
        params = self.get_parameters(module[module_id])
        self.register_optimizer(
            module_id=module_id, optimizer=torch.optim.Adam(params, foreach=True), params=params, lr_or_lr_schedule=config.lr
        )

    def compute_loss_for_module(self, *, module_id: Any, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]) -> torch.Tensor:
        modules: Any = self.module
        module = modules[module_id].unwrapped()
        keep = batch.get(Columns.LOSS_MASK)
        valid: Any = None if keep is None else keep.to(torch.float32).sum()

        def mean(x: Any) -> torch.Tensor:  # over the rows the mask keeps, as RLlib's boolean indexing takes them
            return torch.mean(x) if keep is None else torch.where(keep, x, 0.0).sum() / valid

        curr = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        prev = module.get_exploration_action_dist_cls().from_logits(batch[Columns.ACTION_DIST_INPUTS])
        ratio = torch.exp(curr.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
        kl = mean(prev.kl(curr)) if config.use_kl_loss else torch.zeros((), device=ratio.device)
        entropy: Any = curr.entropy()
        adv = batch[Postprocessing.ADVANTAGES]
        surrogate = torch.min(adv * ratio, adv * torch.clamp(ratio, 1 - config.clip_param, 1 + config.clip_param))
        if config.use_critic:
            values = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
            vf_loss = torch.pow(values - batch[Postprocessing.VALUE_TARGETS], 2.0)
            vf_clipped = torch.clamp(vf_loss, 0, config.vf_clip_param)
        else:
            values = vf_loss = vf_clipped = torch.zeros((), device=ratio.device)
        coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        total: Any = mean(-surrogate + config.vf_loss_coeff * vf_clipped - coeff * entropy)
        if config.use_kl_loss:
            total = total + self.curr_kl_coeffs_per_module[module_id] * kl
        with torch.no_grad():  # the logged figures, outside the graph
            metrics = {
                POLICY_LOSS_KEY: -mean(surrogate),
                VF_LOSS_KEY: mean(vf_clipped),
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: mean(vf_loss),
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(batch[Postprocessing.VALUE_TARGETS], values.detach())
                if config.use_critic
                else torch.zeros(()),
                ENTROPY_KEY: mean(entropy),
                LEARNER_RESULTS_KL_KEY: kl.detach(),
            }
        self.metrics.log_dict(metrics, key=module_id, window=1)  # single items, as RLlib logs them
        return total


__all__ = ["FleetPPOTorchLearner"]

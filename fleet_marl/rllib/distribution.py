"""``FusedMultiCategorical``: RLlib's ``TorchMultiCategorical`` in a handful of tensor operations.

RLlib's ``TorchMultiCategorical`` keeps one ``torch.distributions.Categorical`` per action
dimension, so every log-probability, entropy, KL and sample is 8 small operations (8 softmaxes,
8 multinomial draws, 8 KL terms with their masks) on fleet_marl's 8 action dimensions. This
distribution is the same one (independent categoricals, one per dimension of a
``MultiDiscrete``; the logits of dimension d are the d-th segment of the flat logits, sizes
``input_lens``), computed on one padded table of log-probabilities ``(..., D, K)``, ``K =
max(input_lens)``, the padding at ``FLOAT_MIN``: a sample is one Gumbel-max draw over the ``D``
rows, log-probability a gather, entropy and KL one sum each. Masked logits (about
``FLOAT_MIN``, :func:`~fleet_marl.rllib.modules.mask_logits`) and the padding are never drawn.

Three CPU costs this avoids: ``torch.log_softmax`` over a last dimension of 9 is about four
times slower than the max-shift, exp, sum and log written out; ``exp`` of a value below about
-87 (where float32 underflows: every masked logit) takes a slow path, ten to twenty times
slower; and products of a probability near 0 with the loss's small gradients (entropy, KL and
their backward) land in float32's denormal range (below 1.2e-38), where every operation is slow
again (about a quarter of a PPO update on this machine). So log-probabilities are floored at
:data:`LOG_FLOOR` (-30, a probability of 9.4e-14): a masked choice's log-probability is about
-30 instead of about -3e38, its probability 9.4e-14 instead of 0 in entropy and KL (a change
below 1e-9 in either; an allowed choice's log-probability moves by less than 1e-12), and its
gradient is 0 as before; the draws read the mask itself, so a masked choice is never drawn.

:class:`~fleet_marl.rllib.modules.MaskedPPOTorchRLModule` uses it for sampling, inference and
PPO's loss; ``tests/test_rllib_vector.py`` checks it against ``TorchMultiCategorical``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from ray.rllib.core.distribution.distribution import Distribution
from ray.rllib.core.distribution.torch.torch_distribution import TorchDeterministic
from ray.rllib.utils.torch_utils import FLOAT_MIN
from ray.rllib.utils.typing import TensorType


def _table(logits: torch.Tensor, lens: tuple[int, ...]) -> torch.Tensor:
    """The flat logits (..., sum(lens)) as a table (..., D, max(lens)), padded with ``FLOAT_MIN``
    (split, pad, stack: on CPU a third of the time of one advanced-index gather, backward included)."""
    K = max(lens)
    parts = torch.split(logits, list(lens), dim=-1)
    return torch.stack([p if p.shape[-1] == K else F.pad(p, (0, K - p.shape[-1]), value=FLOAT_MIN) for p in parts], dim=-2)


#: The floor of the log-probabilities (see the module docstring): exp(-30) times the loss's
#: gradients stays far above float32's smallest normal number.
LOG_FLOOR = -30.0


class FusedMultiCategorical(Distribution):
    """Independent categoricals over the dimensions of a ``MultiDiscrete``, as one table (see
    the module docstring). Build it with :meth:`from_logits` (``input_lens``: the dimensions'
    sizes) or, as RLlib does, from ``get_partial_dist_cls(input_lens=...)``."""

    def __init__(self, log_probs: torch.Tensor, allowed: torch.Tensor):
        super().__init__()
        self.log_probs = log_probs  # (..., D, K) normalized per row, floored at LOG_FLOOR
        self.allowed = allowed  # (..., D, K) bool: neither padding nor masked

    @classmethod
    def from_logits(cls, logits: TensorType, **kwargs: Any) -> FusedMultiCategorical:
        """``logits`` (..., sum(input_lens)); ``input_lens`` (a keyword): each dimension's size."""
        logits = torch.as_tensor(logits)
        lens = tuple(int(n) for n in kwargs.get("input_lens", ()))
        if sum(lens) != logits.shape[-1]:
            raise ValueError(f"FusedMultiCategorical: input_lens {list(lens)} sum to {sum(lens)}, the logits have {logits.shape[-1]}")
        table = _table(logits, lens)
        z = (table - table.detach().amax(-1, keepdim=True)).clamp(min=LOG_FLOOR)
        allowed = table.detach() > FLOAT_MIN / 2
        return cls(z - z.exp().sum(-1, keepdim=True).log(), allowed)

    def sample(self, *, sample_shape: Any = None, **kwargs: Any) -> torch.Tensor:
        if sample_shape:
            raise ValueError("FusedMultiCategorical.sample: sample_shape is not supported (one draw per row)")
        lp = self.log_probs.detach()
        gumbel = -torch.log(-torch.log(torch.rand_like(lp).clamp_(min=1e-12)))
        return torch.where(self.allowed, lp + gumbel, -torch.inf).argmax(-1)

    def rsample(self, *, sample_shape: Any = None, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError("FusedMultiCategorical: categorical draws are not reparameterizable")

    def logp(self, value: TensorType, **kwargs: Any) -> torch.Tensor:
        return self.log_probs.gather(-1, torch.as_tensor(value).long().unsqueeze(-1)).squeeze(-1).sum(-1)

    def entropy(self, **kwargs: Any) -> torch.Tensor:
        lp = self.log_probs
        return -(lp.exp() * lp).sum((-2, -1))

    def kl(self, other: Distribution, **kwargs: Any) -> torch.Tensor:
        if not isinstance(other, FusedMultiCategorical):
            raise TypeError(f"FusedMultiCategorical.kl: other is a {type(other).__name__}, expected a FusedMultiCategorical")
        lp = self.log_probs
        return (lp.exp() * (lp - other.log_probs)).sum((-2, -1))

    def to_deterministic(self) -> TorchDeterministic:
        return TorchDeterministic(loc=torch.where(self.allowed, self.log_probs.detach(), -torch.inf).argmax(-1))

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs: Any) -> int:
        lens = kwargs.get("input_lens")
        if lens:
            return int(sum(lens))
        if not isinstance(space, gym.spaces.MultiDiscrete):
            raise TypeError(f"FusedMultiCategorical: a MultiDiscrete space or input_lens, not {space!r}")
        return int(np.sum(space.nvec))


__all__ = ["FusedMultiCategorical"]

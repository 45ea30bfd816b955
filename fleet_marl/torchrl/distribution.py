"""The masked action distribution of ``fleet-marl train --engine torchrl``:
:class:`MaskedMultiCategorical`, 8 categorical dimensions read from one flat logit vector laid
out like the flat ``action_mask`` (sizes ``nvec``), masked choices at probability 0, ``mode``
(what TorchRL's deterministic interaction and the grader take) each dimension's most likely
allowed choice; optionally autoregressive through a :class:`Coupling` of its dimensions.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import distributions as D
from torch import nn
from torch.nn import functional as F

_NEG = -1e9  # the logit of a masked choice
_FLOOR = -80.0  # log-probabilities below this count as 0 (exp(-80) is about 1.8e-35)


def _probs(lp: torch.Tensor) -> torch.Tensor:
    """exp(lp), with lp floored at -80 first: exp of a masked choice's -1e9 underflows on a slow
    path on CPU (about 7 times the time of the whole tensor's exp otherwise)."""
    return lp.clamp_min(_FLOOR).exp_()


def _layout(nvec) -> tuple[torch.Tensor, torch.Tensor]:
    """(D, K) indices of each dimension's choices in the flat layout (padding: M), and the
    (M,) dimension of each flat position."""
    key = tuple(int(n) for n in nvec)
    K, M = max(key), sum(key)
    idx = torch.full((len(key), K), M, dtype=torch.long)
    dim = torch.empty(M, dtype=torch.long)
    o = 0
    for d, n in enumerate(key):
        idx[d, :n] = torch.arange(o, o + n)
        dim[o : o + n] = d
        o += n
    return idx, dim


class Coupling(nn.Module):
    """The autoregressive part of the action distribution: a (M, M) weight whose entry (i, j)
    adds to the logit of flat choice i when choice j of an *earlier* dimension was taken
    (zero-initialized; the entries of the same or later dimensions are masked out). It lets a
    tenant's batch size depend on the GPU count and precisions it picked, which independent
    dimensions cannot express: a small GPU count is good only with a batch that fits."""

    def __init__(self, nvec):
        super().__init__()
        _, dim = _layout(nvec)
        self.weight = nn.Parameter(torch.zeros(len(dim), len(dim)))
        self.register_buffer("earlier", (dim[None, :] < dim[:, None]).float())

    def matrix(self) -> torch.Tensor:
        return self.weight * self.earlier


class MaskedMultiCategorical(D.Distribution):
    """Categorical action dimensions from flat ``logits`` (..., M) and a flat boolean ``mask``
    (..., M) with the layout ``nvec`` (sizes summing to M). Samples, modes and ``log_prob``
    arguments are (..., len(nvec)) int64; ``log_prob`` sums over the dimensions.

    Without ``coupling`` the dimensions are independent; they are gathered into one padded
    (..., max(nvec), D) block (padding and masked choices get logit -1e9), so sampling (one
    uniform per dimension against the cumulative probabilities), ``log_prob`` and ``entropy``
    are a few whole-tensor operations. With a :class:`Coupling`
    they are autoregressive in action order: dimension d's logits are ``logits`` plus the
    coupling of the choices made in dimensions 0..d-1; sampling and ``mode`` go dimension by
    dimension, ``log_prob`` of a given action is one matrix product, and ``entropy`` is the
    sum of the conditional entropies along one sampled action (an unbiased estimate of the
    joint entropy)."""

    arg_constraints: ClassVar[dict] = {}
    has_rsample = False
    _layouts: ClassVar[dict] = {}  # shared by every instance: one layout per nvec and device

    def __init__(
        self,
        logits: torch.Tensor,
        mask: torch.Tensor,
        nvec,
        coupling: Coupling | None = None,
        generator: torch.Generator | None = None,
        validate_args=None,
    ):
        key = tuple(int(n) for n in nvec)
        where = (key, logits.device)  # the layout's indices live where the logits do (a learner on a GPU)
        if where not in self._layouts:
            idx, dim = _layout(key)
            self._layouts[where] = (idx.to(logits.device), dim.to(logits.device), idx.T.reshape(-1).contiguous().to(logits.device))
        self.idx, _, self.flat_kd = self._layouts[where]
        self.M = sum(key)
        self.mask = mask
        self.coupling = None if coupling is None else coupling.matrix()
        self.base = logits
        self.generator = generator  # of the uniform draws of sample() (None: torch's global generator)
        self.logp_kd: torch.Tensor | None = None if coupling is not None else self._logp_kd(logits)
        super().__init__(batch_shape=logits.shape[:-1], event_shape=torch.Size([len(key)]), validate_args=False)

    def _logp(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., D, K) per-dimension log-probabilities of flat logits (masked choices excluded)."""
        masked = logits.masked_fill(~self.mask, _NEG)
        ext = torch.cat([masked, masked.new_full(masked.shape[:-1] + (1,), _NEG)], -1)
        return torch.log_softmax(ext[..., self.idx], -1)

    def _logp_kd(self, logits: torch.Tensor) -> torch.Tensor:
        """The same log-probabilities laid out (..., K, D): choices on the second-to-last axis,
        whose reductions (softmax, cumsum) run several times faster on CPU than over a last axis
        of 5 to 9 entries (the independent dimensions' layout)."""
        masked = F.pad(logits.masked_fill(~self.mask, _NEG), (0, 1), value=_NEG)
        D, K = self.idx.shape
        return torch.log_softmax(masked.index_select(-1, self.flat_kd).view(masked.shape[:-1] + (K, D)), -2)

    def _inverse_cdf(self, lp_kd: torch.Tensor, sample_shape=()) -> torch.Tensor:
        """Draws (*sample_shape, ..., D) from log-probabilities (..., K, D): one uniform per
        dimension against the cumulative probabilities. A choice of probability 0 (masked,
        padding) is never drawn: its cumulative sum equals the one before it, and the uniform
        is scaled below the total."""
        c = _probs(lp_kd).masked_fill_(lp_kd < _FLOOR, 0.0).cumsum(-2)  # exact zeros for masked choices
        c = c.expand(tuple(sample_shape) + c.shape)
        r = torch.rand(c.shape[:-2] + (1, c.shape[-1]), generator=self.generator, dtype=c.dtype, device=c.device)
        u = r.clamp_(max=1.0 - 2.0**-23) * c[..., -1:, :]  # below the total, also after rounding
        return (c <= u).sum(-2)

    def _onehot(self, value: torch.Tensor) -> torch.Tensor:
        D, K = self.idx.shape
        flat = self.idx[torch.arange(D, device=value.device), value.long().clamp(0, K - 1)]  # (..., D) flat positions
        out = torch.zeros(value.shape[:-1] + (self.M + 1,), dtype=self.base.dtype, device=self.base.device)
        return out.scatter_(-1, flat, 1.0)[..., : self.M]

    def _gumbel_max(self, lp: torch.Tensor) -> torch.Tensor:
        """One draw per row of log-probabilities (..., K): the Gumbel-max trick."""
        u = torch.rand(lp.shape, generator=self.generator, dtype=lp.dtype, device=lp.device).clamp_(1e-10, 1.0)
        return (lp - (-u.log()).log()).argmax(-1)

    def _independent(self) -> torch.Tensor:
        """The (..., K, D) log-probabilities of independent dimensions (no coupling)."""
        assert self.logp_kd is not None  # computed in __init__ when there is no coupling
        return self.logp_kd

    def _coupled(self, value: torch.Tensor) -> torch.Tensor:
        """The (..., D, K) log-probabilities of each dimension given the choices ``value`` before it."""
        assert self.coupling is not None  # an autoregressive distribution
        return self._logp(self.base + self._onehot(value) @ self.coupling.T)

    def _walk(self, greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Choose dimension by dimension (autoregressive): (actions (..., D), log-probs (..., D, K)
        of each dimension given the choices before it)."""
        assert self.coupling is not None  # an autoregressive distribution
        base = self.base.expand(self.mask.shape)
        onehot = torch.zeros_like(base)
        acts, logps = [], []
        for d in range(self.idx.shape[0]):
            lp = self._logp(base + onehot @ self.coupling.T)[..., d, :]
            a = lp.argmax(-1) if greedy else self._gumbel_max(lp)
            onehot = onehot.scatter(-1, self.idx[d][a].unsqueeze(-1), 1.0)
            acts.append(a)
            logps.append(lp)
        return torch.stack(acts, -1), torch.stack(logps, -2)

    def sample(self, sample_shape=()) -> torch.Tensor:
        with torch.no_grad():
            if self.coupling is None:
                return self._inverse_cdf(self._independent(), sample_shape)
            if tuple(sample_shape):
                raise NotImplementedError("an autoregressive MaskedMultiCategorical draws one sample per batch entry")
            return self._walk(greedy=False)[0]

    @property
    def mode(self) -> torch.Tensor:
        if self.coupling is None:
            return self._independent().transpose(-2, -1).argmax(-1)  # the first most likely choice
        with torch.no_grad():
            return self._walk(greedy=True)[0]

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self.coupling is None:
            return self._independent().gather(-2, value.long().unsqueeze(-2)).squeeze(-2).sum(-1)
        lp = self._coupled(value)
        return lp.gather(-1, value.long().unsqueeze(-1)).squeeze(-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        if self.coupling is None:
            lp = self._independent()
        else:
            with torch.no_grad():
                a = self._walk(greedy=False)[0]
            lp = self._coupled(a)  # differentiable given the sampled prefix
        return -(_probs(lp) * lp).sum((-2, -1))  # masked choices: p about 1e-35, p * logp about 1e-26


__all__ = ["Coupling", "MaskedMultiCategorical"]

"""The networks of ``fleet-marl train --engine torchrl`` and the trained policy as a grader policy.

``MaskedMultiCategorical``  the action distribution: 8 categorical dimensions read from one flat
                            logit vector laid out like the flat ``action_mask`` (sizes
                            ``nvec``); masked choices have probability 0; ``mode`` (what
                            TorchRL's deterministic interaction and the grader take) is each
                            dimension's most likely allowed choice
``build_networks``          the actor's logits network and the critic for a sharing scheme:

                            ``shared``      one MLP for every tenant (TorchRL's ``MultiAgentMLP``,
                                            shared parameters); critic the same on observations
                            ``per_tenant``  one MLP per tenant (``MultiAgentMLP``, not shared)
                            ``per_kind``    one MLP per tenant kind (train, serve)
                            ``mappo``       the shared actor, and a centralized critic on
                                            ``state`` and the tenant's index
``TrainedPolicy``           a trained actor playing every tenant of a ``FleetParallelEnv``
                            greedily (the grader's ``Policy`` protocol): the same observation
                            rows and flat masks as :class:`~fleet_marl.torchrl.FleetTorchEnv`
"""

from __future__ import annotations

import numpy as np
import torch
from torch import distributions as D
from torch import nn
from torchrl.modules import MLP, MultiAgentMLP

from fleet_marl.environment.spaces import mask_dims
from fleet_marl.policies.base import fleet_env

#: The sharing schemes (as the RLlib route names them, ``fleet_marl.rllib.sharing``).
SHARING = ("shared", "per_tenant", "per_kind", "mappo")

_NEG = -1e9  # the logit of a masked choice
#: The hidden layers' activations.
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MaskedMultiCategorical(D.Distribution):
    """Independent categorical action dimensions from flat ``logits`` (..., M) and a flat
    boolean ``mask`` (..., M) with the layout ``nvec`` (sizes summing to M). Samples, modes
    and ``log_prob`` arguments are (..., len(nvec)) int64; ``log_prob`` and ``entropy`` sum
    over the dimensions.

    The dimensions are gathered into one padded (..., D, max(nvec)) block (padding and masked
    choices get logit -1e9), so sampling, ``log_prob`` and ``entropy`` are a few whole-tensor
    operations, not one per dimension."""

    arg_constraints: dict = {}
    has_rsample = False
    _layouts: dict = {}

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, nvec, validate_args=None):
        key = tuple(int(n) for n in nvec)
        if key not in self._layouts:
            K, M = max(key), sum(key)
            idx = torch.full((len(key), K), M, dtype=torch.long)
            o = 0
            for d, n in enumerate(key):
                idx[d, :n] = torch.arange(o, o + n)
                o += n
            self._layouts[key] = idx
        idx = self._layouts[key]
        masked = logits.masked_fill(~mask, _NEG)
        ext = torch.cat([masked, masked.new_full(masked.shape[:-1] + (1,), _NEG)], -1)
        self.logp = torch.log_softmax(ext[..., idx], -1)  # (..., D, K)
        super().__init__(batch_shape=logits.shape[:-1], event_shape=torch.Size([len(key)]), validate_args=False)

    def sample(self, sample_shape=()) -> torch.Tensor:
        with torch.no_grad():
            lp = self.logp.expand(tuple(sample_shape) + self.logp.shape)
            u = torch.rand_like(lp).clamp_(1e-10, 1.0)
            return (lp - (-u.log()).log()).argmax(-1)  # Gumbel-max, per dimension

    @property
    def mode(self) -> torch.Tensor:
        return self.logp.argmax(-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.logp.gather(-1, value.long().unsqueeze(-1)).squeeze(-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logp.exp() * self.logp).sum((-2, -1))  # masked choices: p = 0, p * logp = 0


class PerKindMLP(nn.Module):
    """One MLP per tenant kind: input (..., N, in) -> (..., N, out), each tenant through its
    kind's MLP."""

    def __init__(self, kinds: list[str], n_in: int, n_out: int, hidden: list[int], activation=nn.Tanh):
        super().__init__()
        self.names = sorted(set(kinds))
        self.nets = nn.ModuleList([MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=activation) for _ in self.names])
        for k, name in enumerate(self.names):
            self.register_buffer(f"idx_{k}", torch.tensor([i for i, x in enumerate(kinds) if x == name], dtype=torch.long))
        self.n_out, self.n = n_out, len(kinds)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_empty(x.shape[:-1] + (self.n_out,))
        for k, net in enumerate(self.nets):
            idx = getattr(self, f"idx_{k}")
            out[..., idx, :] = net(x[..., idx, :])
        return out


class StateCritic(nn.Module):
    """MAPPO's centralized critic: each tenant's value from ``state`` (..., S) and its one-hot
    index -> (..., N, 1)."""

    def __init__(self, state_dim: int, n_agents: int, hidden: list[int], activation=nn.Tanh):
        super().__init__()
        self.n = n_agents
        self.register_buffer("eye", torch.eye(n_agents))
        self.net = MLP(in_features=state_dim + n_agents, out_features=1, num_cells=list(hidden), activation_class=activation)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        lead = state.shape[:-1]
        s = state.unsqueeze(-2).expand(*lead, self.n, state.shape[-1])
        return self.net(torch.cat([s, self.eye.expand(*lead, self.n, self.n)], -1))


def build_networks(sharing: str, n_agents: int, obs_dim: int, state_dim: int, n_logits: int, kinds: list[str], hidden: list[int],
                   activation: str = "tanh"):
    """(actor network: obs (..., N, F) -> logits (..., N, M), critic network, critic input key)
    for ``sharing``; the critic reads ``("agents", "observation")``, or ``"state"`` for MAPPO."""
    if sharing not in SHARING:
        raise ValueError(f"sharing = {sharing!r}: expected one of {', '.join(SHARING)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation = {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]

    def mlp(n_out, share):
        return MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=n_out, n_agents=n_agents, centralized=False, share_params=share,
                             depth=len(hidden), num_cells=list(hidden), activation_class=act)

    if sharing == "per_kind":
        return PerKindMLP(kinds, obs_dim, n_logits, hidden, act), PerKindMLP(kinds, obs_dim, 1, hidden, act), "observation"
    actor = mlp(n_logits, sharing != "per_tenant")
    if sharing == "mappo":
        return actor, StateCritic(state_dim, n_agents, hidden, act), "state"
    return actor, mlp(1, sharing != "per_tenant"), "observation"


class TrainedPolicy:
    """A trained actor network playing every live tenant of a ``FleetParallelEnv`` (the grader's
    ``Policy`` protocol): greedy (each dimension's most likely allowed choice), or sampled with
    ``explore=True`` from a generator seeded by ``reset(seed)``."""

    def __init__(self, env, actor: nn.Module, nvec, explore: bool = False):
        self.env = fleet_env(env)
        self.actor = actor.eval()
        self.nvec = [int(n) for n in nvec]
        self.explore = bool(explore)
        self._gen = torch.Generator().manual_seed(0)
        self._index = {a: i for i, a in enumerate(self.env.possible_agents)}

    def reset(self, seed: int | None = None) -> None:
        self._gen = torch.Generator().manual_seed(0 if seed is None else int(seed))

    def act(self, observations: dict, infos: dict) -> dict[str, np.ndarray]:
        env = self.env
        N = len(env.possible_agents)
        obs = np.zeros((N, env.observation_space(env.possible_agents[0]).shape[-1]), np.float32)
        mask = np.ones((N, sum(self.nvec)), bool)
        live = [a for a in observations if a in set(env.agents)]
        for a in live:
            i = self._index[a]
            obs[i] = observations[a] if not isinstance(observations[a], dict) else observations[a]["observation"]
            mask[i] = _flat(env.action_mask(a), env.nvec[i], self.nvec)
        with torch.no_grad():
            logits = self.actor(torch.from_numpy(obs)[None])[0]
            dist = MaskedMultiCategorical(logits, torch.from_numpy(mask), self.nvec)
            if self.explore:
                p = dist.logp.exp()
                acts = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=self._gen).reshape(p.shape[:-1])
            else:
                acts = dist.mode
        acts = acts.numpy().astype(np.int64)
        return {a: acts[self._index[a]] for a in live}


def _flat(mask, nvec_row, nvec) -> np.ndarray:
    """A tenant's action mask (either layout), each dimension padded to ``nvec`` and concatenated."""
    out = np.zeros(sum(nvec), bool)
    o = 0
    for n, m in zip(nvec, mask_dims(mask, nvec_row)):
        out[o: o + len(m)] = m
        o += n
    return out


__all__ = ["ACTIVATIONS", "MaskedMultiCategorical", "PerKindMLP", "SHARING", "StateCritic", "TrainedPolicy", "build_networks"]

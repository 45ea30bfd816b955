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

                            with ``agent_id`` a shared network also reads the tenant's
                            one-hot index (``WithAgentId``)
``turn_logits``             one tenant's logits per row, for the sequential protocol's turns
``TrainedPolicy``           a trained actor playing every tenant of a ``FleetParallelEnv``, or
                            the tenant whose turn it is in the sequential protocol's AEC env,
                            greedily (the grader's ``Policy`` protocol): the same observation
                            rows and flat masks as :class:`~fleet_marl.torchrl.FleetTorchEnv`
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import distributions as D
from torch import nn
from torch.nn import functional as F
from torchrl.modules import MLP, MultiAgentMLP

from fleet_marl.environment.spaces import mask_dims
from fleet_marl.policies.base import fleet_env

#: The sharing schemes (as the RLlib route names them, ``fleet_marl.rllib.sharing``).
SHARING = ("shared", "per_tenant", "per_kind", "mappo")

_NEG = -1e9  # the logit of a masked choice
_FLOOR = -80.0  # log-probabilities below this count as 0 (exp(-80) is about 1.8e-35)


def _probs(lp: torch.Tensor) -> torch.Tensor:
    """exp(lp), with lp floored at -80 first: exp of a masked choice's -1e9 underflows on a slow
    path on CPU (about 7 times the time of the whole tensor's exp otherwise)."""
    return lp.clamp_min(_FLOOR).exp_()


#: The hidden layers' activations.
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


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


class AutoregressiveActor(nn.Module):
    """An actor network (obs -> flat logits) with the :class:`Coupling` of its action
    dimensions (``coupling``: what :class:`MaskedMultiCategorical` takes)."""

    def __init__(self, base: nn.Module, nvec):
        super().__init__()
        self.base = base
        self.coupling = Coupling(nvec)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.base(obs)


class PerKindMLP(nn.Module):
    """One MLP per tenant kind: input (..., N, in) -> (..., N, out), each tenant through its
    kind's MLP."""

    def __init__(self, kinds: list[str], n_in: int, n_out: int, hidden: list[int], activation=nn.Tanh):
        super().__init__()
        self.names = sorted(set(kinds))
        self.nets = nn.ModuleList(
            [MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=activation) for _ in self.names]
        )
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

    eye: torch.Tensor  # a buffer: (N, N)

    def __init__(self, state_dim: int, n_agents: int, hidden: list[int], activation=nn.Tanh):
        super().__init__()
        self.n = n_agents
        self.register_buffer("eye", torch.eye(n_agents))
        self.net = MLP(in_features=state_dim + n_agents, out_features=1, num_cells=list(hidden), activation_class=activation)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        lead = state.shape[:-1]
        s = state.unsqueeze(-2).expand(*lead, self.n, state.shape[-1])
        return self.net(torch.cat([s, self.eye.expand(*lead, self.n, self.n)], -1))


class WithAgentId(nn.Module):
    """``net`` given each tenant's observation with a one-hot of the tenant's index appended:
    (..., N, F) -> net((..., N, F + N)). A network shared by tenants tells them apart by it
    (the agent ID of MAPPO's recipe, Yu et al. 2022, "The Surprising Effectiveness of PPO in
    Cooperative Multi-Agent Games")."""

    eye: torch.Tensor  # a buffer: (N, N)

    def __init__(self, net: nn.Module, n_agents: int):
        super().__init__()
        self.net = net
        self.register_buffer("eye", torch.eye(n_agents))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, self.eye.expand(*obs.shape[:-1], self.eye.shape[0])], -1))


def build_networks(
    sharing: str,
    n_agents: int,
    obs_dim: int,
    state_dim: int,
    nvec,
    kinds: list[str],
    hidden: list[int],
    activation: str = "tanh",
    autoregressive: bool = True,
    agent_id: bool = False,
):
    """(actor network: obs (..., N, F) -> logits (..., N, sum(nvec)), critic network, critic
    input key) for ``sharing``; the critic reads ``("agents", "observation")``, or ``"state"``
    for MAPPO. ``autoregressive``: the actor is an :class:`AutoregressiveActor` (its
    ``coupling`` goes to the distribution). ``agent_id``: the networks that read observations
    and are shared by tenants (all but ``per_tenant``'s) read the tenant's one-hot index too
    (:class:`WithAgentId`)."""
    ids = agent_id and sharing != "per_tenant"
    actor, critic, key = _networks(
        sharing, n_agents, obs_dim + (n_agents if ids else 0), state_dim, sum(int(n) for n in nvec), kinds, hidden, activation
    )
    if ids:
        actor = WithAgentId(actor, n_agents)
        if key == "observation":
            critic = WithAgentId(critic, n_agents)
    return (AutoregressiveActor(actor, nvec) if autoregressive else actor), critic, key


def _networks(sharing, n_agents, obs_dim, state_dim, n_logits, kinds, hidden, activation):
    if sharing not in SHARING:
        raise ValueError(f"sharing = {sharing!r}: expected one of {', '.join(SHARING)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation = {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]

    def mlp(n_out, share):
        return MultiAgentMLP(
            n_agent_inputs=obs_dim,
            n_agent_outputs=n_out,
            n_agents=n_agents,
            centralized=False,
            share_params=share,
            depth=len(hidden),
            num_cells=list(hidden),
            activation_class=act,
        )

    if sharing == "per_kind":
        return PerKindMLP(kinds, obs_dim, n_logits, hidden, act), PerKindMLP(kinds, obs_dim, 1, hidden, act), "observation"
    actor = mlp(n_logits, sharing != "per_tenant")
    if sharing == "mappo":
        return actor, StateCritic(state_dim, n_agents, hidden, act), "state"
    return actor, mlp(1, sharing != "per_tenant"), "observation"


def turn_logits(actor_net: nn.Module, obs: torch.Tensor, agent: torch.Tensor, n_agents: int) -> torch.Tensor:
    """(B, M) logits of one tenant per row (the sequential protocol's turn collector): ``obs``
    (B, F) the observation of the tenant whose turn it is, ``agent`` (B,) int64 its index. A
    network shared by the tenants (``shared`` and ``mappo``'s actor, with or without the
    one-hot index) runs on the B rows alone; the others (``per_tenant``, ``per_kind``) see each
    row in its tenant's slot of a (B, N, F) input, the other slots zero (N times the work)."""
    net = actor_net.base if isinstance(actor_net, AutoregressiveActor) else actor_net
    x = obs
    if isinstance(net, WithAgentId):
        x = torch.cat([obs, net.eye[agent]], -1)
        net = net.net
    if isinstance(net, MultiAgentMLP) and net.share_params and not net.centralized:
        with net.params.to_module(net._empty_net, preserve_module_state=False):  # what MultiAgentMLP.forward runs, on (B, F) rows
            return net._empty_net(x)
    rows = torch.arange(obs.shape[0])
    full = obs.new_zeros((obs.shape[0], n_agents, obs.shape[-1]))
    full[rows, agent] = obs
    return actor_net(full)[rows, agent]


class TrainedPolicy:
    """A trained actor network playing every live tenant of a ``FleetParallelEnv`` (the grader's
    ``Policy`` protocol): greedy (each dimension's most likely allowed choice), or sampled with
    ``explore=True`` from a generator seeded by ``reset(seed)``."""

    def __init__(self, env, actor: nn.Module, nvec, explore: bool = False):
        self.coupling = getattr(actor, "coupling", None)
        self.env = fleet_env(env)
        self.env_spaces: Any = self.env  # its observation spaces too (the PettingZoo API FleetEnvLike leaves out)
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
        live = [a for a in observations if a in set(env.agents)]
        rows = {a: observations[a] if not isinstance(observations[a], dict) else observations[a]["observation"] for a in live}
        # the observations' own width: 34, or 40 under the sequential protocol (whose AEC env wraps a 34-feature round engine)
        F = len(next(iter(rows.values()))) if rows else self.env_spaces.observation_space(env.possible_agents[0]).shape[-1]
        obs = np.zeros((N, F), np.float32)
        mask = np.ones((N, sum(self.nvec)), bool)
        for a in live:
            i = self._index[a]
            obs[i] = rows[a]
            mask[i] = _flat(env.action_mask(a), env.nvec[i], self.nvec)
        with torch.no_grad():
            logits = self.actor(torch.from_numpy(obs)[None])[0]
            dist = MaskedMultiCategorical(logits, torch.from_numpy(mask), self.nvec, self.coupling, generator=self._gen)
            acts = dist.sample() if self.explore else dist.mode
        chosen = acts.numpy().astype(np.int64)
        return {a: chosen[self._index[a]] for a in live}


def _flat(mask, nvec_row, nvec) -> np.ndarray:
    """A tenant's action mask (either layout), each dimension padded to ``nvec`` and concatenated."""
    out = np.zeros(sum(nvec), bool)
    o = 0
    for n, m in zip(nvec, mask_dims(mask, nvec_row), strict=True):
        out[o : o + len(m)] = m
        o += n
    return out


__all__ = [
    "ACTIVATIONS",
    "SHARING",
    "AutoregressiveActor",
    "Coupling",
    "MaskedMultiCategorical",
    "PerKindMLP",
    "StateCritic",
    "TrainedPolicy",
    "WithAgentId",
    "build_networks",
    "turn_logits",
]

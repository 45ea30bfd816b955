"""The networks of ``fleet-marl train --engine torchrl``: :func:`build_networks`, the actor's
logits network and the critic of each sharing scheme (:data:`SHARING`):

``shared``      one MLP for every tenant (TorchRL's ``MultiAgentMLP``, shared parameters);
                critic the same on observations
``per_tenant``  one MLP per tenant (``MultiAgentMLP``, not shared)
``per_kind``    one MLP per tenant kind (train, serve; :class:`PerKindMLP`)
``mappo``       the shared actor, and a centralized critic on ``state`` and the tenant's
                index (:class:`StateCritic`)

with ``agent_id`` a shared network also reads the tenant's one-hot index (:class:`WithAgentId`);
:func:`turn_logits` is one tenant's logits per row, for the sequential protocol's turns.
"""

from __future__ import annotations

import torch
from torch import nn
from torchrl.modules import MLP, MultiAgentMLP

from fleet_marl.torchrl.distribution import Coupling

#: The sharing schemes (as the RLlib route names them, ``fleet_marl.rllib.sharing``).
SHARING = ("shared", "per_tenant", "per_kind", "mappo")

#: The hidden layers' activations.
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


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


__all__ = ["ACTIVATIONS", "SHARING", "AutoregressiveActor", "PerKindMLP", "StateCritic", "WithAgentId", "build_networks", "turn_logits"]

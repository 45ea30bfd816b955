"""The sequential protocol's turn orders as data: how the tenants of each round take their turns.

Under the sequential protocol (``fleet_marl.env(protocol="sequential", turn_order=...)``) the
tenants of one round claim GPUs one at a time. A turn order is a row of :data:`REGISTRY` (a
:class:`TurnOrder`): a name, a one-line description, and a function that computes the order of
every tenant for C clusters at once from the round's arrays (a :class:`TurnRound`). The array
core of the protocol (``fleet_marl.environment.turns``) calls it at the start of every round
and keeps the live tenants, in that order; the AEC env and the per-turn vector env both play
that core, so a turn order is written once, here.

===========  ===========================================================================
fixed        tenant index: ``tenant_0`` first
rotating     round r starts at tenant ``r mod N`` and goes on by index
random       a permutation of all N tenants per cluster and round, from the cluster's own
             generator (a third stream of the reset seed, so the order never shifts the
             arrivals or the credit draws)
priority     highest ``priority`` first, ties by index
===========  ===========================================================================

The registry lives at config's rank so that ``fleet_marl.tasks.check_protocol`` checks a name
without the env. :func:`register_turn_order` adds one (from any module); it needs no other code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fleet_marl.config.checks import ConfigError


@dataclass(frozen=True)
class TurnRound:
    """What a turn order sees at the start of a round, for C clusters: ``rounds`` (C,) int64 the
    rounds each cluster has played in its episode, ``alive`` (C, N) bool the tenants still in
    it, ``priority`` (N,) each tenant's priority, ``rngs`` the C clusters' own generators of the
    order (drawing from one changes nothing else in its cluster)."""

    rounds: np.ndarray
    alive: np.ndarray
    priority: np.ndarray
    rngs: Sequence[np.random.Generator]

    @property
    def n_clusters(self) -> int:
        return int(self.alive.shape[0])

    @property
    def n_tenants(self) -> int:
        return int(self.alive.shape[1])


#: A turn order's function: the round's arrays -> (C, N) int64, each row a permutation of all
#: the tenants (the core keeps the live ones, in this order).
OrderFn = Callable[[TurnRound], np.ndarray]


@dataclass(frozen=True)
class TurnOrder:
    """One turn order (see the module doc): ``order`` computes every tenant's turn for C
    clusters; ``description`` is one line for people and prompts."""

    name: str
    order: OrderFn
    description: str


#: name -> :class:`TurnOrder`, in registration order (the built-in four first).
REGISTRY: dict[str, TurnOrder] = {}


def register_turn_order(name: str, order: OrderFn, description: str = "") -> TurnOrder:
    """Add a turn order (from any module): ``turn_order=name`` then plays it in the AEC env and
    the per-turn vector env. Replacing a name already registered is an error."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError("turn_order", name, "a turn order name that is a Python identifier (letters, digits, _)")
    if name in REGISTRY:
        raise ConfigError("turn_order", name, f"a new turn order name; {name!r} is already registered")
    t = TurnOrder(name, order, description)
    REGISTRY[name] = t
    return t


def turn_order(name: str) -> TurnOrder:
    """The registered turn order ``name``, or the ``ConfigError`` listing the known ones."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ConfigError("turn_order", name, f"one of {', '.join(map(repr, REGISTRY))}")
    return REGISTRY[name]


def _fixed(r: TurnRound) -> np.ndarray:
    return np.broadcast_to(np.arange(r.n_tenants), (r.n_clusters, r.n_tenants))


def _rotating(r: TurnRound) -> np.ndarray:
    return (np.asarray(r.rounds)[:, None] + np.arange(r.n_tenants)) % r.n_tenants


def _random(r: TurnRound) -> np.ndarray:
    # drawn over all the tenants, so the stream does not depend on who is live
    return np.array([g.permutation(r.n_tenants) for g in r.rngs], np.int64).reshape(r.n_clusters, r.n_tenants)


def _priority(r: TurnRound) -> np.ndarray:
    seq = sorted(range(r.n_tenants), key=lambda i: (-float(r.priority[i]), i))
    return np.broadcast_to(np.array(seq, np.int64), (r.n_clusters, r.n_tenants))


register_turn_order("fixed", _fixed, "tenant index: tenant_0 first")
register_turn_order("rotating", _rotating, "round r starts at tenant r mod N and goes on by index")
register_turn_order("random", _random, "a permutation of all the tenants per round, from the env's seeded generator")
register_turn_order("priority", _priority, "highest priority first, ties by index")

#: The built-in turn orders' names (``turn_order`` also accepts any registered later).
TURN_ORDERS = tuple(REGISTRY)

__all__ = ["REGISTRY", "TURN_ORDERS", "OrderFn", "TurnOrder", "TurnRound", "register_turn_order", "turn_order"]

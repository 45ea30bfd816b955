"""The arbiter's mechanisms as data: how each clears a pool, what a served tenant pays, and
whether it has a reserve price.

Each GPU type is a pool cleared on its own (``docs/model.md`` section 4). A mechanism is a
row of :data:`REGISTRY` (a :class:`Mechanism`) made of three choices:

* **how it clears** (``clears``, over the per-tenant keys ``by``):
  ``"waterfill"`` -- weighted max-min fair water-filling, capped by the requests, leftovers
  redistributed; weights are the key ``by[0]`` (equal weights when ``by`` is empty);
  ``"greedy"`` -- tenants served fully in the order of the keys ``by`` (each highest
  first, at most two), then the round's tie-break draw, until the pool runs out;
* **what a served tenant pays** per GPU (``pays``): the ``"list"`` price, its ``"bid"`` x list
  price, or the pool's ``"clearing"`` price x list price: the highest bid in the pool not
  fully served, at least the reserve price when the mechanism has one (only where the highest
  bids are served first, so that nobody served pays more than its bid);
* **a reserve** (``reserve``): a bid below ``arbiter.reserve_price`` asks for nothing.

A budget affords GPUs at the most a served tenant can pay: its bid, unless the mechanism
charges list price (:attr:`Mechanism.afford_at_bid`). Fractional shares become integers by
the largest-remainder method (ties by the tie-break draw).

The registry lives at config's rank so that :class:`~fleet_marl.config.ArbiterSpec` checks a
name without the kernel; the kernel (:mod:`fleet_marl.kernel.mechanisms`) turns each
mechanism into the codes its compiled clearing stage branches on, and the scenario, the
reference policies and the OpenEnv prompt read what a mechanism charges from here, never from
its name. :func:`register_mechanism` adds one (from any module); a new combination of these
rules needs no other code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_marl.config.checks import ConfigError

#: How a mechanism can clear a pool (the kernel's compiled clearing stage has a branch for each).
CLEARING_RULES = ("waterfill", "greedy")
#: The per-tenant keys a clearing rule can weight or order by: the tenant's bid (a multiplier
#: of list price) and its priority.
KEYS = ("bid", "priority")
#: What a served tenant can pay per GPU, as a multiple of its GPU type's list price.
PRICES = ("list", "bid", "clearing")


@dataclass(frozen=True)
class Mechanism:
    """One arbiter mechanism (see the module doc): ``clears`` a pool by ``"waterfill"`` or
    ``"greedy"`` over the keys ``by``; a served tenant ``pays`` ``"list"``, ``"bid"`` or
    ``"clearing"``; ``reserve``: bids below the reserve price ask for nothing (and a clearing
    price is at least it). ``description`` is one line for people and prompts."""

    name: str
    clears: str
    by: tuple[str, ...]
    pays: str
    reserve: bool
    description: str

    def __post_init__(self):
        where = f"mechanism {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ConfigError("mechanism", self.name, "a mechanism name that is a Python identifier (letters, digits, _)")
        if self.clears not in CLEARING_RULES:
            raise ConfigError(f"{where}: clears", self.clears, f"one of {', '.join(map(repr, CLEARING_RULES))}")
        by = tuple(self.by) if isinstance(self.by, (list, tuple)) else self.by
        most = 1 if self.clears == "waterfill" else 2
        if not isinstance(by, tuple) or len(by) > most or len(set(by)) != len(by) or any(k not in KEYS for k in by):
            raise ConfigError(
                f"{where}: by", self.by, f"at most {most} distinct key(s) of {', '.join(map(repr, KEYS))} for {self.clears!r}"
            )
        object.__setattr__(self, "by", by)
        if self.pays not in PRICES:
            raise ConfigError(f"{where}: pays", self.pays, f"one of {', '.join(map(repr, PRICES))}")
        if self.pays == "clearing" and (self.clears != "greedy" or by[:1] != ("bid",)):
            # served in any other order, a tenant could pay more than its bid, and overspend a budget checked at it
            raise ConfigError(
                f"{where}: pays",
                self.pays,
                "a clearing price only where the highest bids are served first (clears='greedy', by=('bid', ...))",
            )
        if not isinstance(self.reserve, bool):
            raise ConfigError(f"{where}: reserve", self.reserve, "true or false")
        object.__setattr__(self, "description", str(self.description))

    @property
    def afford_at_bid(self) -> bool:
        """Does a budget afford GPUs at the bid (else at list price)? At the bid whenever a
        served tenant may pay more than list price: the bid, or a clearing price (at most the
        bid of a tenant it serves)."""
        return self.pays != "list"

    def price_at_most(self, bid: float) -> float:
        """The most a tenant served at bid multiplier ``bid`` pays per GPU, as a multiple of
        list price."""
        return float(bid) if self.afford_at_bid else 1.0

    def lowest_winning_level(self, levels: np.ndarray, reserve_price: float) -> int:
        """The index of the lowest of the bid ``levels`` (increasing) that can win: the lowest
        level, or with a reserve the lowest at or above ``reserve_price`` (the highest level
        when none is)."""
        levels = np.asarray(levels, np.float64)
        if not self.reserve:
            return 0
        ok = np.flatnonzero(levels >= reserve_price)
        return int(ok[0]) if ok.size else int(levels.size - 1)

    def summary(self, reserve_price: float) -> str:
        """One sentence on how the mechanism clears and what it charges, at ``reserve_price``
        (for people and for an LLM agent's prompt)."""
        if self.clears == "waterfill":
            how = f"water-filling weighted by {self.by[0]}" if self.by else "max-min fair water-filling (equal weights)"
        else:
            how = "requests served whole in order of " + ", then ".join([f"highest {k}" for k in self.by] + ["the tie-break draw"])
        pays = {
            "list": "list price",
            "bid": "its bid x list price",
            "clearing": "the pool's clearing price (the highest bid not fully served"
            + (f", at least x{reserve_price:g}" if self.reserve else "")
            + ") x list price",
        }[self.pays]
        out = f"{self.name}: {how}; a served tenant pays {pays} per GPU"
        if self.reserve:
            out += f"; bids below x{reserve_price:g} list price get nothing"
        return out + "."


#: name -> :class:`Mechanism`, in registration order (the built-in four first).
REGISTRY: dict[str, Mechanism] = {}


def register_mechanism(
    name: str, clears: str, by: tuple[str, ...] = (), pays: str = "list", reserve: bool = False, description: str = ""
) -> Mechanism:
    """Add a mechanism (from any module): ``arbiter.mechanism = name`` then clears by it in
    the env, the kernel and every reader of the registry. Replacing a name already registered
    is an error."""
    m = Mechanism(name, clears, tuple(by), pays, reserve, description)
    if name in REGISTRY:
        raise ConfigError("mechanism", name, f"a new mechanism name; {name!r} is already registered")
    REGISTRY[name] = m
    return m


def mechanism(name: str) -> Mechanism:
    """The registered mechanism ``name``, or a ``ValueError`` listing the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"arbiter.mechanism = {name!r}: expected one of {', '.join(map(repr, REGISTRY))}")
    return REGISTRY[name]


register_mechanism(
    "proportional",
    "waterfill",
    ("bid",),
    "bid",
    description="Kelly's proportional share: water-filling weighted by bids; each tenant pays its bid",
)
register_mechanism("maxmin", "waterfill", (), "list", description="max-min fair water-filling (equal weights) at list price")
register_mechanism(
    "priority", "greedy", ("priority", "bid"), "list", description="strict priority (priority, then bid, then the draw) at list price"
)
register_mechanism(
    "auction",
    "greedy",
    ("bid",),
    "clearing",
    reserve=True,
    description="uniform-price multi-unit auction: highest bids served first, everyone served pays the clearing price",
)

#: The built-in mechanisms' names (``arbiter.mechanism`` also accepts any registered later).
MECHANISMS = tuple(REGISTRY)

__all__ = ["CLEARING_RULES", "KEYS", "MECHANISMS", "PRICES", "REGISTRY", "Mechanism", "mechanism", "register_mechanism"]

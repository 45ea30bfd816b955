"""The arbiter's mechanisms in the kernel: the registry of mechanisms as data
(:mod:`fleet_marl.config.mechanisms`, re-exported here) and the codes the compiled clearing
stage (:mod:`fleet_marl.kernel.clearing`) branches on.

A :class:`Mechanism` says how it clears (``clears`` over the keys ``by``), what a served
tenant pays (``pays``) and whether it has a reserve (``reserve``); :func:`codes` turns it into
small integers that ``layout.pack_static`` packs with the scenario, so the compiled round
branches on the rule, never on the mechanism's name: a mechanism that combines the rules
below needs no kernel code. :func:`register_mechanism` adds one from any module.
"""

from __future__ import annotations

from fleet_marl.config.mechanisms import CLEARING_RULES, KEYS, MECHANISMS, PRICES, REGISTRY, Mechanism, mechanism, register_mechanism

#: Codes of the clearing rules (their index in ``CLEARING_RULES``).
WATERFILL, GREEDY = (CLEARING_RULES.index(r) for r in ("waterfill", "greedy"))
#: Codes of the keys a rule weights or orders by (0: no key, a column of zeros).
NO_KEY, KEY_BID, KEY_PRIORITY = 0, 1 + KEYS.index("bid"), 1 + KEYS.index("priority")
#: Codes of what a served tenant pays (their index in ``PRICES``).
PAY_LIST, PAY_BID, PAY_CLEARING = (PRICES.index(p) for p in ("list", "bid", "clearing"))
assert len(CLEARING_RULES) == 2 and len(KEYS) == 2 and len(PRICES) == 3, "every rule, key and price has a code above"


def codes(m: Mechanism) -> tuple[int, int, int, int, int, bool, bool]:
    """``(clears, key1, key2, n_keys, pays, reserve, afford_at_bid)`` of ``m`` for the compiled
    clearing stage. A greedy rule sorts by ``key1`` (when ``n_keys`` is 3), then ``key2`` (when
    ``n_keys`` >= 2), each highest first, then the tie-break draw; water-filling weights by
    ``key2`` (equal weights when it is ``NO_KEY``)."""
    key = {k: 1 + KEYS.index(k) for k in KEYS}
    by = [NO_KEY, NO_KEY, *(key[k] for k in m.by)][-2:]
    return CLEARING_RULES.index(m.clears), by[0], by[1], len(m.by) + 1, PRICES.index(m.pays), m.reserve, m.afford_at_bid


__all__ = [
    "GREEDY",
    "KEY_BID",
    "KEY_PRIORITY",
    "MECHANISMS",
    "NO_KEY",
    "PAY_BID",
    "PAY_CLEARING",
    "PAY_LIST",
    "REGISTRY",
    "WATERFILL",
    "Mechanism",
    "codes",
    "mechanism",
    "register_mechanism",
]

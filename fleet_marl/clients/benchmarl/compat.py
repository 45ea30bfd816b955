"""benchmarl 1.5.2 on torchrl 0.14: the two places where torchrl changed under it.

benchmarl 1.5.2 pins torchrl < 0.12; fleet_marl's ``[torchrl]`` extra is torchrl 0.14, where

1. ``torchrl.collectors.SyncDataCollector`` is named ``Collector`` (same constructor, same
   iteration): :func:`bridge` gives the old name to the new class before benchmarl imports it;
2. ``QValueModule`` checks the action's shape against its spec (``strict_shape=True`` by
   default), and reads the bare ``Categorical`` spec of shape ``(n_agents,)`` that benchmarl's
   value-based algorithms (QMIX, VDN, IQL) pass it as a per-sample shape, so it refuses the
   right ``(batch, n_agents)`` actions; :func:`bridge` gives those algorithms a ``QValueModule``
   that skips the check (``strict_shape=False``, what torchrl < 0.12 did).

MAPPO, IPPO, MASAC, QMIX run on it in ``tests/test_benchmarl.py``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fleet_marl.clients.base import import_unlisted
from fleet_marl.errors import require

#: The install line of the extra: benchmarl 1.5.2 pins torchrl < 0.12, so it goes in without its dependencies.
INSTALL = "pip install 'fleet-marl[benchmarl]' && pip install --no-deps benchmarl==1.5.2"
#: What a missing package's :class:`~fleet_marl.errors.MissingExtra` names.
WHAT = f"fleet_marl.clients.benchmarl ({INSTALL})"
#: benchmarl's value-based algorithms, which build a ``QValueModule`` from the group's action spec.
VALUE_BASED = ("qmix", "vdn", "iql")


def bridge() -> None:
    """Make benchmarl 1.5.2 import and run on torchrl 0.14 (the module docstring); idempotent."""
    collectors = importlib.import_module("torchrl.collectors")
    if not hasattr(collectors, "SyncDataCollector"):
        collectors.SyncDataCollector = collectors.Collector  # type: ignore[attr-defined]  # benchmarl 1.5.2 imports torchrl < 0.12's name
    strict: type = getattr(importlib.import_module("torchrl.modules"), "QValueModule")  # noqa: B009 (torchrl exports it lazily; mypy does not see it)
    loose = _loose_q_value_module(strict)
    for name in VALUE_BASED:
        algo = importlib.import_module(f"benchmarl.algorithms.{name}")
        if getattr(algo, "QValueModule", None) is strict:  # not bridged yet
            setattr(algo, "QValueModule", loose)  # noqa: B010 (the name benchmarl's algorithm module calls)


def _loose_q_value_module(base: type) -> type:
    class LooseQValueModule(base):
        """torchrl's ``QValueModule`` without the action-shape check torchrl 0.12 added."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("strict_shape", False)
            super().__init__(*args, **kwargs)

    return LooseQValueModule


def load_benchmarl() -> ModuleType:
    """``benchmarl.environments.common`` (the Task and TaskClass bases), after :func:`bridge`;
    without the extra or benchmarl a :class:`~fleet_marl.errors.MissingExtra` naming the
    install commands."""
    require(("torch", "torchrl", "tensordict"), "benchmarl", WHAT)
    require(("hydra", "omegaconf"), "benchmarl", WHAT)

    def load() -> ModuleType:
        bridge()
        return importlib.import_module("benchmarl.environments.common")

    return import_unlisted(WHAT, "benchmarl", load)


__all__ = ["INSTALL", "VALUE_BASED", "WHAT", "bridge", "load_benchmarl"]

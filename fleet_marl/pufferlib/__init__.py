"""fleet_marl on PufferLib (pufferlib-core 3.x; the ``[pufferlib]`` extra, then
``pip install --no-deps pufferlib-core==3.0.23``: its wheel pins torch 2.9.0, and the env
needs only its numpy side; ``docs/environment.md``, "Outside clients").

=====================================  ==========================================================
``FleetPufferEnv``                     the vector env as a native ``pufferlib.PufferEnv``: B
                                       clusters x N tenants as one env of B*N agents, one array
                                       step written into PufferLib's buffers (``env.py``)
``check_options``                      the ``obs_mode`` / ``mask_layout`` combinations it takes
=====================================  ==========================================================

Names are imported lazily: ``import fleet_marl.pufferlib`` imports neither PufferLib nor torch;
the first name asked for checks the extra (a :class:`~fleet_marl.errors.MissingExtra` naming
the install commands if pufferlib is missing).
"""

import importlib

from fleet_marl.errors import MissingExtra, require

_NAMES = {"FleetPufferEnv": "env", "check_options": "env"}
#: The install line of the extra: pufferlib-core's wheel pins torch==2.9.0, so it goes in without its dependencies.
INSTALL = "pip install 'fleet-marl[pufferlib]' && pip install --no-deps pufferlib-core==3.0.23"


def __getattr__(name):
    if name in _NAMES:
        what = f"fleet_marl.pufferlib.{name} ({INSTALL})"
        require(("torch", "psutil"), "pufferlib", what)
        try:  # not in the extra (its wheel pins torch 2.9.0): installed on its own, without dependencies
            for module in ("pufferlib", "pufferlib.vector"):  # the parent first: a loaded submodule hides a missing parent
                importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(what, "pufferlib", exc.name or "pufferlib", str(exc)) from exc
        return getattr(importlib.import_module(f"fleet_marl.pufferlib.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.pufferlib' has no attribute {name!r}")


__all__ = ["FleetPufferEnv", "check_options"]  # the lazy names of _NAMES

"""fleet_marl on Stable-Baselines3 (the ``[sb3]`` extra; ``docs/environment.md``, "Outside clients").

=====================================  ==========================================================
``FleetSB3VecEnv``                     the vector env as an SB3 ``VecEnv``: one slot per tenant
                                       per cluster, one array step per ``step_wait``, masks in
                                       ``infos`` and ``action_masks()`` for sb3-contrib's
                                       ``MaskablePPO`` (``env.py``)
``check_options``                      the ``obs_mode`` / ``mask_layout`` combinations it takes
=====================================  ==========================================================

Names are imported lazily: ``import fleet_marl.sb3`` imports neither SB3 nor torch; the first
name asked for checks the extra (a :class:`~fleet_marl.errors.MissingExtra` naming the pip
command if stable-baselines3 is missing).
"""

import importlib

from fleet_marl.errors import require

_NAMES = {"FleetSB3VecEnv": "env", "check_options": "env"}


def __getattr__(name):
    if name in _NAMES:
        require("stable_baselines3", "sb3", f"fleet_marl.sb3.{name}")
        return getattr(importlib.import_module(f"fleet_marl.sb3.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.sb3' has no attribute {name!r}")


__all__ = ["FleetSB3VecEnv", "check_options"]  # the lazy names of _NAMES

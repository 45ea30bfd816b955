"""fleet_marl on BenchMARL (benchmarl 1.5.x; the ``[benchmarl]`` extra, then
``pip install --no-deps benchmarl==1.5.2``: it pins torchrl < 0.12, and runs on the extra's
torchrl 0.14 with the one rename :func:`~fleet_marl.benchmarl.task.load_benchmarl` bridges;
``docs/environment.md``, "Outside clients").

=====================================  ==========================================================
``FleetTask``                          the registered tasks as a BenchMARL ``Task`` enum
                                       (``FleetTask.EASY.get_task(config)``; ``task.py``)
``FleetTaskClass``, ``TASK_DEFAULTS``  its ``TaskClass`` and the keys of a task's config
``FleetMenuEnv``                       the vector env as a batched TorchRL env whose tenants
                                       pick one entry of a masked menu (``env.py``)
``check_options``                      the ``obs_mode`` / ``mask_layout`` combinations it takes
=====================================  ==========================================================

Names are imported lazily: ``import fleet_marl.benchmarl`` imports neither BenchMARL nor torch;
the first name asked for checks the extra (a :class:`~fleet_marl.errors.MissingExtra` naming
the install commands if benchmarl or torchrl is missing).
"""

import importlib

from fleet_marl.errors import MissingExtra, require

_NAMES = {
    "FleetTask": "task",
    "FleetTaskClass": "task",
    "TASK_DEFAULTS": "task",
    "load_benchmarl": "compat",
    "FleetMenuEnv": "env",
    "check_options": "env",
    "DEFAULT_FIELDS": "env",
}
#: The install line of the extra: benchmarl 1.5.2 pins torchrl < 0.12, so it goes in without its dependencies.
INSTALL = "pip install 'fleet-marl[benchmarl]' && pip install --no-deps benchmarl==1.5.2"


def __getattr__(name):
    if name in _NAMES:
        what = f"fleet_marl.benchmarl.{name} ({INSTALL})"
        require(("torch", "torchrl", "tensordict"), "benchmarl", what)
        if _NAMES[name] != "env":
            require(("hydra", "omegaconf"), "benchmarl", what)
            try:
                importlib.import_module("fleet_marl.benchmarl.compat").bridge()  # benchmarl 1.5.2 on torchrl 0.14
            except ImportError as exc:
                raise MissingExtra(what, "benchmarl", exc.name or "benchmarl", str(exc)) from exc
        return getattr(importlib.import_module(f"fleet_marl.benchmarl.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.benchmarl' has no attribute {name!r}")


__all__ = [
    "DEFAULT_FIELDS",
    "TASK_DEFAULTS",
    "FleetMenuEnv",
    "FleetTask",
    "FleetTaskClass",
    "check_options",
    "load_benchmarl",
]  # the lazy names of _NAMES

"""fleet_marl on BenchMARL (benchmarl 1.5.x; the ``[benchmarl]`` extra, then
``pip install --no-deps benchmarl==1.5.2``: it pins torchrl < 0.12, and runs on the extra's
torchrl 0.14 with the two bridges of :func:`~fleet_marl.clients.benchmarl.compat.bridge`;
``docs/environment.md``, "Outside clients").

=====================================  ==========================================================
``FleetTask``                          the registered tasks as a BenchMARL ``Task`` enum
                                       (``FleetTask.EASY.get_task(config)``; ``task.py``)
``FleetTaskClass``, ``TASK_DEFAULTS``  its ``TaskClass`` and the keys of a task's config
``FleetMenuEnv``                       the vector env as a batched TorchRL env whose tenants
                                       pick one entry of a masked menu (``env.py``)
``Menu``                               the menu's entries, mask and actions (plain arrays)
``check_options``                      the ``obs_mode`` / ``mask_layout`` combinations it takes
=====================================  ==========================================================

Names are imported lazily: ``import fleet_marl.clients.benchmarl`` imports neither BenchMARL nor
torch; the module of the first name asked for checks the extra (a
:class:`~fleet_marl.errors.MissingExtra` naming the install commands if benchmarl or torchrl is
missing; ``FleetMenuEnv`` needs torchrl only).
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    "FleetTask": "task",
    "FleetTaskClass": "task",
    "TASK_DEFAULTS": "task",
    "load_benchmarl": "compat",
    "FleetMenuEnv": "env",
    "Menu": "env",
    "check_options": "env",
    "DEFAULT_FIELDS": "env",
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)

__all__ = [
    "DEFAULT_FIELDS",
    "TASK_DEFAULTS",
    "FleetMenuEnv",
    "FleetTask",
    "FleetTaskClass",
    "Menu",
    "check_options",
    "load_benchmarl",
]  # the lazy names of _NAMES

"""fleet_marl: a PettingZoo multi-agent environment in which tenants negotiate for one shared
GPU cluster.

>>> import fleet_marl
>>> env = fleet_marl.parallel_env(task="easy")      # PettingZoo ParallelEnv
>>> aec = fleet_marl.env(task="easy")               # its AEC form

Layers: ``catalog`` and ``config`` (facts and scenarios), ``workloads`` (arrival processes and
trace readers), ``kernel`` (the batched numpy cost model), ``credit`` and ``fairness``
(rewards and detectors over tenant arrays), ``environment`` (the PettingZoo API),
``tasks`` (named scenarios). See docs/environment.md.

The environment names are imported lazily, so ``import fleet_marl.kernel`` does not import
PettingZoo.
"""

_ENV_NAMES = ("ActionError", "FleetParallelEnv", "env", "parallel_env", "raw_env")
_TASK_NAMES = ("TASKS", "make_config")


def __getattr__(name):
    if name in _ENV_NAMES:
        from fleet_marl import environment

        return getattr(environment, name)
    if name in _TASK_NAMES:
        from fleet_marl import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module 'fleet_marl' has no attribute {name!r}")


__all__ = list(_ENV_NAMES + _TASK_NAMES)

"""fleet_marl as a BenchMARL task (benchmarl 1.5.x): ``FleetTask`` and the ``FleetTaskClass`` behind it.

Each registered task is a member of :class:`FleetTask` (``FleetTask.TINY`` ... ``FleetTask.HARD``);
``FleetTask.EASY.get_task()`` is the :class:`FleetTaskClass` with the default config
(:data:`TASK_DEFAULTS`), ``get_task(config={...})`` with yours. BenchMARL builds the envs
through ``get_env_fun``: :class:`~fleet_marl.clients.benchmarl.env.FleetMenuEnv` with ``num_envs``
clusters (a vectorized env: BenchMARL wraps it in no ``SerialEnv``). Any algorithm of a
discrete action space runs on it, from BenchMARL's own configs::

    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig
    from fleet_marl.clients.benchmarl import FleetTask

    experiment = Experiment(
        task=FleetTask.EASY.get_task(),
        algorithm_config=MappoConfig.get_from_yaml(),
        model_config=MlpConfig.get_from_yaml(),
        critic_model_config=MlpConfig.get_from_yaml(),
        seed=0,
        config=ExperimentConfig.get_from_yaml(),
    )
    experiment.run()

benchmarl 1.5.2 pins torchrl < 0.12; fleet_marl's ``[torchrl]`` extra is torchrl 0.14, which
renamed ``torchrl.collectors.SyncDataCollector`` to ``Collector``. :func:`load_benchmarl`
gives the old name to the new class before it imports benchmarl (the one difference its
import and the algorithms run here meet), so install benchmarl without its dependencies
(``pip install --no-deps benchmarl==1.5.2``, then the ``[benchmarl]`` extra).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from fleet_marl.clients.benchmarl.compat import load_benchmarl

_common: Any = load_benchmarl()  # the extra's check, then benchmarl.environments.common on torchrl 0.14

from torchrl.data import Composite  # noqa: E402 (after the extra's check)
from torchrl.envs import EnvBase  # noqa: E402 (after the extra's check)

from fleet_marl.clients.benchmarl.env import DEFAULT_FIELDS, GROUP, FleetMenuEnv  # noqa: E402 (after the extra's check)

#: Every key of a task's config, with its default: the scenario (``task``; ``max_cycles``,
#: ``reward_scheme`` and any override of ``fleet_marl.vector_env`` in ``overrides``; a suite
#: task's ``scenarios``), the env options and the menu's fields.
TASK_DEFAULTS: dict[str, Any] = {
    "max_cycles": None,  # None: the task's horizon
    "reward_scheme": None,  # None: the task's scheme
    "scenarios": None,  # a suite task: its clusters over its first `scenarios` train scenarios (None: FleetMenuEnv's default)
    "obs_mode": "flat",
    "mask_layout": "flat",
    "action_fields": list(DEFAULT_FIELDS),
    "overrides": {},
}


class FleetTaskClass(_common.TaskClass):
    """A fleet_marl task in BenchMARL: ``name`` is the registered task (upper case, as the
    enum's member) or a suite task (``FleetTaskClass("POWER_N8", config)``: the enum holds the
    registered tasks only), ``config`` the keys of :data:`TASK_DEFAULTS`."""

    def __init__(self, name: str, config: dict[str, Any] | None):
        unknown = set(config or {}) - set(TASK_DEFAULTS)
        if unknown:
            raise ValueError(f"fleet_marl task config: unknown keys {sorted(unknown)}; expected {sorted(TASK_DEFAULTS)}")
        super().__init__(name, {**copy.deepcopy(TASK_DEFAULTS), **(config or {})})

    def env_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`FleetMenuEnv` this task builds with."""
        c = self.config
        kw: dict[str, Any] = {"task": self.name.lower(), **c["overrides"]}
        for key in ("max_cycles", "reward_scheme", "scenarios"):
            if c[key] is not None:
                kw[key] = c[key]
        return {**kw, "obs_mode": c["obs_mode"], "mask_layout": c["mask_layout"], "action_fields": tuple(c["action_fields"])}

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device) -> Callable[[], EnvBase]:
        if continuous_actions:
            raise ValueError("fleet_marl's BenchMARL task has discrete actions (a menu per tenant): use a discrete algorithm's config")
        kwargs = self.env_kwargs()
        FleetMenuEnv(num_envs=1, **kwargs)  # a bad option or config is an error here, where the experiment is built
        return lambda: FleetMenuEnv(num_envs=num_envs, seed=seed, device=device, **kwargs)

    def supports_continuous_actions(self) -> bool:
        return False

    def supports_discrete_actions(self) -> bool:
        return True

    def has_render(self, env: EnvBase) -> bool:
        return False

    def max_steps(self, env: EnvBase) -> int:
        return int(env.config.max_cycles)

    def group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return env.group_map

    def observation_spec(self, env: EnvBase) -> Composite:
        spec = env.observation_spec_unbatched.clone()
        del spec[GROUP, "action_mask"]
        del spec["state"]
        return spec

    def action_mask_spec(self, env: EnvBase) -> Composite | None:
        spec = env.observation_spec_unbatched.clone()
        for key in list(spec[GROUP].keys()):
            if key != "action_mask":
                del spec[GROUP, key]
        del spec["state"]
        return spec

    def state_spec(self, env: EnvBase) -> Composite | None:
        return Composite({"state": env.observation_spec_unbatched["state"].clone()})

    def info_spec(self, env: EnvBase) -> Composite | None:
        return None

    def action_spec(self, env: EnvBase) -> Composite:
        return env.full_action_spec_unbatched

    @staticmethod
    def env_name() -> str:
        return "fleet_marl"

    @staticmethod
    def log_info(batch) -> dict[str, float]:
        return {}


class FleetTask(_common.Task):
    """The registered fleet_marl tasks (``fleet_marl.tasks.TASKS``) as BenchMARL tasks."""

    TINY = None
    EASY = None
    MEDIUM = None
    HARD = None
    TRACE = None

    @staticmethod
    def associated_class():
        return FleetTaskClass

    def get_from_yaml(self, path: str | None = None) -> FleetTaskClass:
        """The task with its default config (:data:`TASK_DEFAULTS`), or the keys of the YAML
        file at ``path`` over them (BenchMARL's task folder has no fleet_marl files)."""
        if path is None:
            return self.get_task(config={})
        with open(path) as fh:
            return self.get_task(config=yaml.safe_load(fh) or {})


__all__ = ["TASK_DEFAULTS", "FleetTask", "FleetTaskClass", "load_benchmarl"]

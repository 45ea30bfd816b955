"""Named scenarios and the config builder behind ``fleet_marl.parallel_env(**config)``.

Every task is a :class:`~fleet_marl.config.FleetConfig`. ``make_config`` starts from one and
applies overrides of any field, so ``parallel_env(task="easy", reward_scheme="global",
cluster={"rack_power_cap_w": 9000})`` works, and an unknown field is a
:class:`~fleet_marl.config.ConfigError` that lists the valid ones.

=========  ========  ===================================================================
task       tenants   what it tests
=========  ========  ===================================================================
tiny       2         one node of 8 H100, two trainers of different priority; the one-round
                     optimum can be worked out by hand (``tests/test_env.py``)
easy       4         two H100 nodes, two trainers and two servers, Poisson arrivals,
                     generous budgets, max-min fair arbiter
medium     8         H100 and A100 nodes (the A100 has no FP8), training and serving mixed,
                     bursty arrivals, proportional-share arbiter (bids matter)
hard       16        four H100 nodes in one rack under a tight power cap, 45 C inlet air (heat binds),
                     correlated (adversarial) bursts, tight budgets, uniform-price auction
trace      6         arrivals replayed from real traces: Pollux/Philly jobs for the four
                     trainers, Azure LLM inference requests for the two servers
=========  ========  ===================================================================

``TASKS`` is the one registry of named scenarios (name, builder, one-line description); the
CLI, the baseline table, OpenEnv's task API and ``experiments/make_configs.py`` all read it.
A new task is one call of :func:`register_task`, in this file or in your own module.

``scaled(n)`` grows ``easy`` to ``n`` tenants on ``ceil(n / 2)`` nodes (the credit-assignment
study's scenarios): ``parallel_env(task="easy", **scaled(8))``.

The built-in tasks' builders are :mod:`fleet_marl.builtin_tasks` (their numbers are scenario
choices, not facts); this module registers them. The design of each task and the reasoning
behind its numbers are in ``docs/environment.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet_marl import builtin_tasks, suite
from fleet_marl.builtin_tasks import scaled
from fleet_marl.config import ConfigError, FleetConfig, from_dict
from fleet_marl.config.turn_orders import TURN_ORDERS as BUILTIN_TURN_ORDERS
from fleet_marl.config.turn_orders import turn_order as registered_turn_order

#: Options of the environment itself (not part of the scenario).
ENV_OPTIONS = ("obs_mode", "render_mode", "illegal_action", "mask_layout", "protocol", "turn_order")
#: How the tenants of one round act (the env option ``protocol``): ``"simultaneous"`` (the
#: default; every tenant decides blind, the ParallelEnv) or ``"sequential"`` (one at a time,
#: each seeing the claims made before its turn; the AEC env ``fleet_marl.env(protocol="sequential")``).
PROTOCOLS = ("simultaneous", "sequential")
#: The built-in orders of the tenants' turns within a round under the sequential protocol (the
#: env option ``turn_order``): ``fixed`` (tenant index), ``rotating`` (the first turn moves one
#: tenant on each round), ``random`` (a permutation per round from the env's seeded generator)
#: and ``priority`` (highest priority first, ties by index). They are the first rows of
#: :data:`fleet_marl.config.turn_orders.REGISTRY`; ``turn_order`` accepts any name registered there.
TURN_ORDERS = BUILTIN_TURN_ORDERS


def check_protocol(opts: dict) -> tuple[str, str]:
    """``(protocol, turn_order)`` of the env options ``opts``, checked: each one of
    :data:`PROTOCOLS` and the registered turn orders (defaults ``"simultaneous"`` and ``"fixed"``), and
    ``turn_order`` only with the sequential protocol. A bad value is a :class:`ConfigError`
    naming the option and the value."""
    protocol = opts.get("protocol", "simultaneous")
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ConfigError(
            "protocol",
            protocol,
            "'simultaneous' (every tenant decides blind; fleet_marl.parallel_env or fleet_marl.env) or "
            "'sequential' (one tenant at a time within a round; fleet_marl.env only)",
        )
    turn_order = opts.get("turn_order")
    if turn_order is not None:
        registered_turn_order(turn_order)  # a ConfigError listing the registered ones
    if turn_order is not None and protocol != "sequential":
        raise ConfigError(
            "turn_order",
            turn_order,
            "no turn_order with protocol='simultaneous' (every tenant acts at once); "
            "turns need fleet_marl.env(protocol='sequential', turn_order=...)",
        )
    return protocol, turn_order or "fixed"


def require_sequential(overrides: dict, owner: str, instead: str) -> str:
    """Pop ``protocol`` and ``turn_order`` from ``overrides`` (in place) for a class that plays
    only the sequential protocol, and return the checked ``turn_order``. ``protocol`` defaults to
    ``"sequential"``; any other value is a ``ValueError`` naming ``owner`` and what to use
    ``instead``; a bad value is :func:`check_protocol`'s ``ConfigError``."""
    opts = {k: overrides.pop(k) for k in ("protocol", "turn_order") if k in overrides}
    opts.setdefault("protocol", "sequential")
    protocol, turn_order = check_protocol(opts)
    if protocol != "sequential":
        raise ValueError(f"protocol = {protocol!r}: {owner} plays protocol='sequential'; {instead}")
    return turn_order


#: Shortcuts: a top-level keyword that sets a nested config field.
SHORTCUTS = {
    "reward_scheme": ("reward", "scheme"),
    "mixed_weight": ("reward", "mixed_weight"),
    "shapley_samples": ("reward", "shapley_samples"),
    "compute_all": ("reward", "compute_all"),
    "mechanism": ("arbiter", "mechanism"),
    "safety_mode": ("safety", "mode"),
}


@dataclass(frozen=True)
class Task:
    """A named scenario: ``builder()`` returns its plain-dict config (``FleetConfig`` fields)."""

    name: str
    builder: Callable[[], dict]
    description: str  # one line, shown by the CLI and OpenEnv's task API


#: The one registry of named scenarios, in the order the CLI, the baseline table and OpenEnv's
#: task API list them. Every place that lists tasks reads it; add one with :func:`register_task`.
TASKS: dict[str, Task] = {}


def register_task(name: str, builder: Callable[[], dict], description: str) -> Task:
    """Add a named scenario (from any module: ``parallel_env(task=name)``, ``fleet-marl evaluate
    --task name``, the baseline table and OpenEnv's task list pick it up). Replacing a name
    already registered is an error."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError("task", name, "a task name that is a Python identifier (letters, digits, _)")
    if name in TASKS:
        raise ConfigError("task", name, f"a new task name; {name!r} is already registered")
    if not callable(builder):
        raise ConfigError(f"task {name}: builder", builder, "a function returning the config dict")
    TASKS[name] = task = Task(name, builder, str(description))
    return task


# the built-in tasks, in their order (each a builder and a line in builtin_tasks.BUILTIN)
for _entry in builtin_tasks.BUILTIN:
    register_task(*_entry)


def task_dict(name: str) -> dict:
    """The plain-dict config of task ``name`` (a fresh copy, safe to edit). A suite task's name
    (:data:`fleet_marl.suite.SUITE`, ``"power_n16"``) gives its train scenario 0: the shapes every
    scenario of the task shares (``fleet_marl.suite.scenario`` draws the others)."""
    if name in suite.SUITE:
        return suite.scenario(name, 0, "train")
    if name not in TASKS:
        raise ConfigError("task", name, f"one of {', '.join(map(repr, TASKS))}, or a suite task (fleet-marl suite list)")
    return copy.deepcopy(TASKS[name].builder())


def _merge(base: dict, over: dict, path: str) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v, f"{path}{k}.")
        else:
            out[k] = v
    return out


def unknown_option(name: Any, value: Any) -> ConfigError:
    """The error of an override ``name`` that :func:`make_config` does not take."""
    valid = sorted(set(FleetConfig.__dataclass_fields__) | set(SHORTCUTS) | set(ENV_OPTIONS) | {"task", "config"})
    return ConfigError(str(name), value, f"a known option (valid: {', '.join(valid)})")


def is_option(name: Any) -> bool:
    """Whether :func:`make_config` takes ``name`` as an override (a field, a shortcut or an env option)."""
    return name in FleetConfig.__dataclass_fields__ or name in SHORTCUTS or name in ENV_OPTIONS or name == "backend"


def make_config(task: str | None = None, config: FleetConfig | dict | None = None, **overrides: Any) -> tuple[FleetConfig, dict]:
    """Build ``(FleetConfig, env_options)`` from a task name, or a full ``config``, plus overrides.

    Overrides are any top-level FleetConfig field (``cluster``, ``tenants``, ``arbiter``,
    ``safety``, ``reward``, ``fairness``, ``max_cycles``); dicts merge into the
    task's dicts, lists replace. Old fairness keys under ``reward`` move to ``fairness`` first
    (with a ``DeprecationWarning``). Shortcuts set one nested field: ``reward_scheme``, ``mixed_weight``,
    ``shapley_samples``, ``compute_all``, ``mechanism``, ``safety_mode``. Environment options
    (``obs_mode``, ``render_mode``, ``illegal_action``, ``mask_layout``, ``protocol``, ``turn_order``)
    are returned separately (:func:`check_protocol` checks the last two).
    """
    env_opts = {k: overrides.pop(k) for k in ENV_OPTIONS if k in overrides}
    if config is not None and task is not None:
        raise ConfigError("task", task, "no task when a full config is given (pass one or the other)")
    if config is not None:
        base = config.to_dict() if isinstance(config, FleetConfig) else copy.deepcopy(dict(config))
    else:
        base = task_dict("easy" if task is None else task)
    fields_ = set(FleetConfig.__dataclass_fields__)
    nested: dict = {}
    for k, v in overrides.items():
        if k in SHORTCUTS:
            top, sub = SHORTCUTS[k]
            nested.setdefault(top, {})[sub] = v
        elif k in fields_ or k == "backend":  # backend: fleet_marl 0.2's, dropped by migrate with a warning
            v = copy.deepcopy(v)  # never write into the caller's dicts
            if isinstance(v, dict) and isinstance(nested.get(k), dict):
                nested[k] = _merge(nested[k], v, f"{k}.")
            else:
                nested[k] = v
        else:
            raise unknown_option(k, v)
    # old reward.<fairness knob> overrides move to fairness first (with their deprecation
    # warning), so they override the task's fairness section instead of clashing with it
    merged = _merge(base, FleetConfig.migrate(nested), "")
    return from_dict(FleetConfig, merged), env_opts


__all__ = [
    "ENV_OPTIONS",
    "PROTOCOLS",
    "SHORTCUTS",
    "TASKS",
    "TURN_ORDERS",
    "Task",
    "check_protocol",
    "is_option",
    "make_config",
    "register_task",
    "require_sequential",
    "scaled",
    "task_dict",
    "unknown_option",
]

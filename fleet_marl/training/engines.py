"""The training engines, one registry: each engine's name, the modules that implement it (named
as strings: this rank imports no framework), the name its checkpoints carry, and how a config,
a run folder or a command line says which engine it is.

``fleet-marl train`` (:mod:`fleet_marl.cli.train`) reads :data:`ENGINES` for ``--engine``, picks
one with :func:`engine_of` and runs its ``command`` module; the credit-assignment study
(``fleet-marl compare --engine``, :mod:`fleet_marl.studies.credit.runs`) offers the engines of
this registry that it has runs for; each adapter's loader names its checkpoints with its
``checkpoints`` (:class:`~fleet_marl.training.folder.Engine`).

To add an engine: its adapter package (see ``docs/architecture.md``) and one :class:`EngineSpec`
in :data:`ENGINES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleet_marl.training.config import config_path
from fleet_marl.training.folder import Engine


@dataclass(frozen=True)
class EngineSpec:
    """One training engine. ``command``: the module of ``fleet-marl train --engine NAME``
    (``add_arguments``, ``run``); ``checkpoints``: its checkpoint sidecar; ``only``: the
    ``fleet-marl train`` options that only it has (given without ``--engine``, they pick it when
    ``picks``); ``extra``: the pip extra it needs."""

    name: str
    command: str
    checkpoints: Engine
    only: tuple[str, ...] = ()
    picks: bool = False
    extra: str = ""


#: The engines, the default first.
ENGINES: dict[str, EngineSpec] = {
    "torchrl": EngineSpec(
        name="torchrl",
        command="fleet_marl.torchrl.command",
        checkpoints=Engine(name="torchrl", sidecar="fleet_marl_torchrl.json", command="fleet-marl train --engine torchrl"),
        only=("num_envs", "collector", "collectors", "device"),
        extra="torchrl",
    ),
    "rllib": EngineSpec(
        name="rllib",
        command="fleet_marl.rllib.command",
        checkpoints=Engine(
            name="rllib", sidecar="fleet_marl.json", command="fleet-marl train --engine rllib", native="rllib_checkpoint.json"
        ),
        only=("num_env_runners", "address"),
        picks=True,
        extra="rllib",
    ),
}
#: The default engine.
DEFAULT = next(iter(ENGINES))
#: The engine of a YAML config without an ``engine`` key (the RLlib configs of ``experiments/configs/`` have none).
UNMARKED_CONFIG = "rllib"


def names() -> tuple[str, ...]:
    """The engines' names, the default first."""
    return tuple(ENGINES)


def of_config(name: str) -> str:
    """The engine of the training config ``name`` (a path, or a name in ``experiments/configs/``):
    its ``engine`` key, :data:`UNMARKED_CONFIG` without one; :data:`DEFAULT` for a file that is
    missing or not YAML (the engine's own parser reports it)."""
    p = config_path(name)
    try:
        data = yaml.safe_load(p.read_text()) if p.is_file() else None
    except yaml.YAMLError:
        data = None
    return str(data.get("engine", UNMARKED_CONFIG)) if isinstance(data, dict) else DEFAULT


def of_run(folder: str | Path) -> str | None:
    """The engine that wrote the run (or checkpoint) folder ``folder``: the first whose sidecar it holds; None for none."""
    return next((name for name, spec in ENGINES.items() if spec.checkpoints.checkpoint_folder(folder) is not None), None)


def engine_of(args: Any) -> str:
    """The engine of ``fleet-marl train``'s arguments: ``--engine``, else the one an engine-only
    option picks (``--address``, ``--num-env-runners``: rllib), else the one of ``--config``
    (:func:`of_config`) or of the run ``--resume`` names (:func:`of_run`), else :data:`DEFAULT`."""
    if getattr(args, "engine", None):
        return str(args.engine)
    for name, spec in ENGINES.items():
        if spec.picks and any(getattr(args, flag, None) is not None for flag in spec.only):
            return name
    if getattr(args, "config", None):
        return of_config(args.config)
    if getattr(args, "resume", None):
        return of_run(args.resume) or DEFAULT
    return DEFAULT


def spec(name: str, engines: Mapping[str, EngineSpec] = ENGINES) -> EngineSpec:
    """The engine ``name`` (KeyError naming the known ones)."""
    if name not in engines:
        raise KeyError(f"engine {name!r}: expected one of {', '.join(engines)}")
    return engines[name]


__all__ = ["DEFAULT", "ENGINES", "UNMARKED_CONFIG", "EngineSpec", "engine_of", "names", "of_config", "of_run", "spec"]

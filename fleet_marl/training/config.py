"""What every training engine checks in a run config, the same way.

:class:`TrainConfigError`     a bad training config, run folder or checkpoint (names the field, the
                              value and what to do); every engine raises it
:func:`check_common`          the fields every engine's config has (task, reward scheme, sharing,
                              env overrides, layer widths, run folder name)
:func:`check_integers`        integer fields with their least values
:func:`check_numbers`         number fields with their ranges
:func:`check_env`             the config's env can be built (its overrides, its trace files)
:func:`config_env`            an env of the task, reward scheme and overrides a config names
:func:`check_iterations_left` a resumed run has iterations left to train
:func:`config_path`           a run config named by ``--config NAME``
:func:`replaced`              a copy of a config with some fields changed, checked
:func:`from_command`          the config and the run to resume that ``fleet-marl train``'s options give
:func:`unreachable`           why nothing answers at an ``--address``'s host and port (a Ray cluster's)
:func:`checkout`              the source checkout the package runs from (None for a wheel)
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleet_marl.config import REWARD_SCHEMES, ConfigError
from fleet_marl.suite import SUITE
from fleet_marl.tasks import TASKS


class TrainConfigError(ValueError):
    """A bad training config, run folder or checkpoint: names the field, the value and what was
    expected, or says what to do."""


def check_common(cfg: Any, source: str, sharing: Sequence[str], bad: Callable[[str, str], None]) -> None:
    """The fields every engine's config has: ``bad(name, expected)`` raises for the first wrong one."""
    if cfg.task not in TASKS and cfg.task not in SUITE:
        bad("task", f"one of {', '.join(TASKS)}, or a suite task (fleet-marl suite list)")
    if cfg.reward_scheme not in REWARD_SCHEMES:
        bad("reward_scheme", f"one of {', '.join(REWARD_SCHEMES)}")
    if cfg.sharing not in sharing:
        bad("sharing", f"one of {', '.join(sharing)}")
    if not isinstance(cfg.env, dict):
        bad("env", "a mapping of fleet_marl.parallel_env overrides")
    if (
        not isinstance(cfg.hidden, list)
        or not cfg.hidden
        or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in cfg.hidden)
    ):
        bad("hidden", "a non-empty list of positive layer widths, e.g. [128, 128]")
    if not isinstance(cfg.out, str) or not cfg.out:
        bad("out", "a folder path")
    if not isinstance(cfg.name, str) or "/" in cfg.name:
        bad("name", "a folder name without '/'")


def check_integers(cfg: Any, lows: Sequence[tuple[str, int]], bad: Callable[[str, str], None]) -> None:
    """Each field ``name`` of ``lows`` is an integer (a bool is not one) of at least its ``lo``:
    ``bad(name, "an integer >= lo")`` raises for the first that is not, in the order of ``lows``."""
    for name, lo in lows:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            bad(name, f"an integer >= {lo}")


def check_numbers(
    cfg: Any,
    ranges: Sequence[tuple[str, float, float]],
    positive: Sequence[str],
    bad: Callable[[str, str], None],
    expected: Callable[[str, float, float], str],
) -> None:
    """Each field ``name`` of ``ranges`` is a number (a bool is not one) in ``[lo, hi]``, and not
    0 if it is one of ``positive``: ``bad(name, expected(name, lo, hi))`` raises for the first
    that is not, in the order of ``ranges``."""
    for name, lo, hi in ranges:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi or (name in positive and v == 0):
            bad(name, expected(name, lo, hi))


def config_env(env_class: Callable[..., Any], cfg: Any, *args: Any, **options: Any) -> Any:
    """``env_class`` (an env, a vector env, an adapter's env) built on what the training config
    ``cfg`` names: its ``task``, its ``reward_scheme`` and its ``env`` overrides; ``args`` and
    ``options`` are the class's own (a cluster count, a seed)."""
    return env_class(*args, task=cfg.task, reward_scheme=cfg.reward_scheme, **options, **cfg.env)


def check_env(cfg: Any, source: str) -> None:
    """The config's env can be built (``cfg.probe()``): its overrides and trace files; the last check."""
    try:
        cfg.probe()
    except (ConfigError, ValueError, TypeError, FileNotFoundError) as exc:
        raise TrainConfigError(f"{source}: env = {cfg.env!r}: {exc}") from None


def check_iterations_left(resume: str, meta: dict, iterations: int) -> None:
    """A run resumed from ``resume`` (whose sidecar is ``meta``) must have iterations left to reach ``iterations``."""
    done = int(meta.get("iteration", 0))
    if iterations <= done:
        raise TrainConfigError(
            f"--resume {resume}: the checkpoint has already trained {done} iterations and iterations = {iterations}; "
            f"pass --iterations N with N > {done} (the total to reach)"
        )


def checkout() -> Path | None:
    """The fleet_marl source checkout this package runs from (None for an installed wheel): where
    ``--config NAME`` finds ``experiments/configs/`` and ``fleet-marl docs`` the README and ``docs/``."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "README.md").is_file() else None


def config_path(name: str) -> Path:
    """A training ``--config`` as given, or ``experiments/configs/<name>.yaml`` of the checkout."""
    p = Path(name)
    if p.is_file() or p.suffix in (".yaml", ".yml") or "/" in name:
        return p
    root = checkout()
    cand = (root / "experiments" / "configs" / f"{name}.yaml") if root else p
    return cand if cand.is_file() else p


def replaced(cfg: Any, source: str, changes: dict[str, Any]) -> Any:
    """A copy of the engine's config ``cfg`` (a dataclass with ``from_dict``) with ``changes``
    (``None`` values are ignored), checked by its ``from_dict``."""
    data = dataclasses.asdict(cfg)
    data.update({k: v for k, v in changes.items() if v is not None})
    return type(cfg).from_dict(data, source)


def from_command(args: Any, cls: Any, engine: Any, read: Callable[[str], Any], options: dict[str, Any]) -> tuple[Any, Any]:
    """``(config, resume)`` of ``fleet-marl train``'s parsed ``args`` for an engine whose config
    class is ``cls``: the config ``read(args.config)`` gives, or the one of the run
    ``args.resume`` (its sidecar, through the engine's ``engine``), or ``cls()``; then the
    options every engine takes and the engine's own ``options`` (None: not given) replace its
    fields."""
    if args.config:
        tc = read(args.config)
    elif args.resume:
        meta = engine.read_sidecar(engine.find(args.resume))
        tc = cls.from_dict(meta.get("train_config", {}), source=f"{args.resume} (the run's config)")
    else:
        tc = cls()
    if args.final_episodes is not None and args.final_episodes < 0:
        raise TrainConfigError(f"--final-episodes {args.final_episodes}: expected an integer >= 0")
    changes = {
        "task": args.task,
        "reward_scheme": args.reward_scheme,
        "sharing": args.sharing,
        "iterations": args.iterations,
        "seed": args.seed,
        **options,
        "out": args.out,
        "name": args.name,
    }
    return tc.replace(source="command line", **changes), args.resume


def unreachable(host: str, port: str) -> str | None:
    """Why nothing answers on ``host:port`` (no TCP connection within 5 s; an empty host is this
    machine), or None when something does: a command fails fast on an ``--address`` where no Ray
    cluster listens, since ``ray.init`` would retry for minutes."""
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)


__all__ = [
    "TrainConfigError",
    "check_common",
    "check_env",
    "check_integers",
    "check_iterations_left",
    "check_numbers",
    "checkout",
    "config_env",
    "config_path",
    "from_command",
    "replaced",
    "unreachable",
]

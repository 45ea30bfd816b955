"""Field checks and the dict round trip behind :mod:`fleet_marl.config`.

:class:`ConfigError` names a bad field; the ``_int``, ``_num``, ``_choice`` ... helpers check
one field of a frozen dataclass in its ``__post_init__`` (and normalise it in place);
:func:`to_dict` and :func:`from_dict` turn a config dataclass into a plain dict tree and back.
A dataclass may define a ``migrate(data, path)`` classmethod: :func:`from_dict` calls it on
the raw mapping first (``FleetConfig`` uses it to load keys that moved, with a
``DeprecationWarning``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

from fleet_marl import catalog
from fleet_marl.errors import ConfigError  # ConfigError is defined at the bottom, for the scenario builders

# --- field checks -------------------------------------------------------------------------


def _set(obj, name, value):
    object.__setattr__(obj, name, value)


def _int(obj, name: str, lo: int, hi: int | None = None) -> None:
    v = getattr(obj, name)
    ok = isinstance(v, int) and not isinstance(v, bool)
    if isinstance(v, float) and v.is_integer():
        v, ok = int(v), True
    rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
    if not ok or v < lo or (hi is not None and v > hi):
        raise ConfigError(name, getattr(obj, name), f"an integer in {rng}")
    _set(obj, name, v)


def _num(obj, name: str, lo: float, hi: float | None = None, lo_open: bool = False) -> None:
    v = getattr(obj, name)
    lo_s = f"({lo}" if lo_open else f"[{lo}"
    rng = f"{lo_s}, {hi}]" if hi is not None else (f"> {lo}" if lo_open else f">= {lo}")
    try:
        finite = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise ConfigError(name, v, f"a finite number in {rng}")
    v = float(v)
    if v < lo or (lo_open and v == lo) or (hi is not None and v > hi):
        raise ConfigError(name, v, f"a number in {rng}")
    _set(obj, name, v)


def _choice(obj, name: str, choices) -> None:
    v = getattr(obj, name)
    if v not in choices:
        raise ConfigError(name, v, f"one of {', '.join(map(repr, choices))}")


def _bool(obj, name: str) -> None:
    if not isinstance(getattr(obj, name), bool):
        raise ConfigError(name, getattr(obj, name), "true or false")


def _tuple(obj, name: str, check_item, min_len: int = 1, max_len: int | None = None) -> None:
    v = getattr(obj, name)
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
        raise ConfigError(name, v, "a list")
    if len(v) < min_len or (max_len is not None and len(v) > max_len):
        want = f"a list of {min_len} to {max_len} items" if max_len else f"a list of at least {min_len} items"
        raise ConfigError(name, v, want)
    out = []
    for i, item in enumerate(v):
        out.append(check_item(f"{name}[{i}]", item))
    _set(obj, name, tuple(out))


def _gpu_key(path: str, v):
    if v not in catalog.gpus():
        raise ConfigError(path, v, f"a GPU type, one of {', '.join(sorted(catalog.gpus()))}")
    return v


def _model_key(path: str, v):
    if v not in catalog.models():
        raise ConfigError(path, v, f"a model, one of {', '.join(sorted(catalog.models()))}")
    return v


def _pos_float(path: str, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ConfigError(path, v, "a finite number > 0")
    return float(v)


# --- dict round trip ----------------------------------------------------------------------


def to_dict(obj) -> Any:
    """A plain dict/list/scalar tree of a config dataclass (YAML- and JSON-safe)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


def deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the first caller outside ``fleet_marl`` (so the
    default warning filters show it for the user's own code)."""
    package = str(Path(__file__).resolve().parents[1])
    level = 2
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _convert(tp, value, path: str):
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (list, tuple)):
            return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        return value  # the dataclass check names the field
    if origin in (typing.Union, types.UnionType):
        return value
    return value


def from_dict(cls, data: Any, path: str = ""):
    """Build the config dataclass ``cls`` from a plain dict; unknown keys are an error."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(path or cls.__name__, data, f"a mapping of {cls.__name__} fields")
    migrate = getattr(cls, "migrate", None)
    if migrate is not None:
        data = migrate(data, path)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(where, data[unknown[0]], f"a known field of {cls.__name__} (valid fields: {', '.join(sorted(known))})")
    hints = _hints(cls)
    kw = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}
    try:
        return cls(**kw)
    except ConfigError as e:
        raise e.prefixed(path) from None


__all__ = ["ConfigError", "deprecated", "from_dict", "to_dict"]

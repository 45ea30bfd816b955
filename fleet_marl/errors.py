"""The errors a command raises for bad user input (``UsageError``; ``ConfigError``, a bad config
field, which :mod:`fleet_marl.config` re-exports), and for a missing optional extra. The CLI
prints ``error: <message>`` and the command's ``--help`` hint, and exits with code 2. It sits at
the bottom of the package so that every feature's command can raise them without importing the
CLI.

``pip install fleet-marl`` installs the core only (the env, the kernel, the policies, the
grader, ``estimate``, ``sweep``, ``traces``); Ray, torch, matplotlib, OpenEnv and mpe2 come
with extras (``pyproject.toml``, ``docs/install.md``). A feature that needs one calls
:func:`require` before it starts, so a missing extra is one line that names the pip command:

>>> require("a_module_that_is_not_installed", "plot", "fleet-marl demo --gif")
Traceback (most recent call last):
    ...
fleet_marl.errors.MissingExtra: fleet-marl demo --gif needs the [plot] extra: pip install 'fleet-marl[plot]' ...
"""

from __future__ import annotations

import importlib
from typing import Any

#: The most characters of a value's ``repr`` an error message quotes (:func:`short_repr`).
REPR_LIMIT = 200


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """``repr(value)``, cut to ``limit`` characters with ``...`` and the length it had: error
    messages name the bad value without echoing a value of any length (a served env's errors go
    back to the client that sent it).

    >>> short_repr("x" * 500, limit=20)
    "'xxxxxxxxxxxxxxx... (502 characters)"
    """
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text
        return f"<{type(value).__name__} too long to show>"
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 4, 1)]}... ({len(text)} characters)"


class ClientError(ValueError):
    """A bad value given by whoever called: the message names the field, the value (cut by
    :func:`short_repr`) and what was expected, and is the project's own text, so a server sends
    it back to the client that caused it (``fleet_marl.openenv``); any other exception's text
    stays in the server's log. ``ConfigError`` and ``ActionError`` are ClientErrors."""


class ConfigError(ClientError):
    """A configuration value is invalid. ``field`` is the dotted path of the bad field (``fleet_marl.config``
    re-exports it; it lives here so that the scenario builders below the config, ``builtin_tasks`` and
    ``suite``, raise it too)."""

    def __init__(self, field_name: str, value: Any, expected: str):
        self.field = field_name
        self.value = value
        self.expected = expected
        name = field_name if len(field_name) <= 120 else short_repr(field_name, 120)  # an unknown key can be of any length
        super().__init__(f"{name} = {short_repr(value)}: expected {expected}")

    def prefixed(self, prefix: str) -> ConfigError:
        return ConfigError(f"{prefix}.{self.field}" if prefix else self.field, self.value, self.expected)


class UsageError(ClientError):
    """A bad command-line value: the message names the option, the value and what was expected."""


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``: ``pip install 'fleet-marl[<extra>]'``."""
    return f"pip install 'fleet-marl[{extra}]'"


class MissingExtra(UsageError, ImportError):
    """``what`` needs the optional extra ``extra``, and ``missing`` (a module) does not import.

    A :class:`UsageError`, so every command reports it as ``error: ...`` with exit code 2 and no
    traceback; and an ``ImportError``, so library code that catches the ImportError of an
    optional dependency catches it too. The message starts with
    ``<what> needs the [<extra>] extra: pip install 'fleet-marl[<extra>]'``.
    """

    def __init__(self, what: str, extra: str, missing: str = "", reason: str = ""):
        self.what, self.extra, self.missing, self.reason = what, extra, missing, reason
        self.name = missing or None  # ImportError's: the module that failed to import
        text = f"{what} needs the [{extra}] extra: {install_command(extra)} (from a checkout: pip install -e '.[{extra}]')"
        if missing:
            text += f"; missing: {missing}" + (f" ({reason})" if reason else "")
        super().__init__(text)

    def __reduce__(self):
        return type(self), (self.what, self.extra, self.missing, self.reason)


def require(modules: str | tuple[str, ...] | list[str], extra: str, what: str) -> None:
    """Import ``modules`` (a name or several), or raise :class:`MissingExtra` saying that
    ``what`` needs ``extra``. A dotted name is imported parent first (``ray`` before
    ``ray.rllib``), so a parent that is missing is reported as missing even when a submodule is
    already loaded."""
    for name in (modules,) if isinstance(modules, str) else modules:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            mod = ".".join(parts[:i])
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                raise MissingExtra(what, extra, mod, str(exc)) from exc


__all__ = ["ClientError", "ConfigError", "MissingExtra", "UsageError", "install_command", "require"]

"""Names a package exports lazily (PEP 562): the package's ``__getattr__`` imports the module
that defines a name the first time the name is asked for, so importing the package imports
none of them (nor the optional dependency a module needs).

>>> __getattr__, __dir__ = lazy_exports(__name__, {"FleetTorchEnv": "env", "train": "train"})

A package keeps ``__all__`` as a literal list of the same names, so tools read it without
running the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str], check: Callable[[str], None] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``(__getattr__, __dir__)`` of the package ``package``: ``names`` maps each exported
    name to the module that defines it, relative to the package (``"env"`` is ``package.env``).
    ``check(name)`` runs before each lookup of a lazy name (e.g. a check that the package's
    extra is installed). Any other name is the usual ``AttributeError``."""
    table = dict(names)

    def __getattr__(name: str) -> Any:
        if name in table:
            if check is not None:
                check(name)
            return getattr(importlib.import_module(f"{package}.{table[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]

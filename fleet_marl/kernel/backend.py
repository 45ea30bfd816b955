"""Kernel backends: ``numpy`` (the reference) and ``numba`` (compiled, optional).

``resolve_backend(name)`` returns the backend that will run: ``numba`` needs the ``numba``
package (``pip install fleet-marl[fast]``); without it the kernel falls back to ``numpy`` with
a one-line :class:`RuntimeWarning`. Both backends compute the same round; the numba one agrees
with numpy to 1e-9 (``tests/test_backends.py``).
"""

from __future__ import annotations

import warnings

from fleet_marl.config import BACKENDS


class BackendWarning(RuntimeWarning):
    """The requested kernel backend is not available; another one runs."""


def numba_available() -> bool:
    try:
        import numba  # numba: the optional [fast] extra
    except ImportError:
        return False
    return numba is not None


def resolve_backend(name: str) -> str:
    """The backend that will run for the requested ``name`` (see the module doc)."""
    if name not in BACKENDS:
        raise ValueError(f"backend = {name!r}: expected one of {', '.join(map(repr, BACKENDS))}")
    if name == "numba" and not numba_available():
        warnings.warn("backend='numba' needs numba (pip install 'fleet-marl[fast]'); falling back to numpy", BackendWarning, stacklevel=2)
        return "numpy"
    return name


__all__ = ["BACKENDS", "BackendWarning", "numba_available", "resolve_backend"]

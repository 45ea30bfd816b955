"""Checks of a value a caller passes, written once: each caller raises its own error with its
own message when a check fails.

>>> is_integer(3), is_integer(True), is_integer(3.0)
(True, False, False)
>>> is_seed(0), is_seed(-1)
(True, False)
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (a Python or NumPy one), a bool not counting as one."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_seed(value: Any) -> bool:
    """Whether ``value`` is a seed: a non-negative integer (:func:`is_integer`)."""
    return is_integer(value) and value >= 0


__all__ = ["is_integer", "is_seed"]

"""The normalizations the observation features share: :func:`squash` (an unbounded count onto
[0, 1)), its inverse :func:`unsquash`, and :func:`mean_arrivals` (the scale of a server's queue
and arrivals)."""

from __future__ import annotations

import numpy as np


def squash(x, scale):
    """``x / (x + scale)`` for ``x >= 0`` (negative x counts as 0): [0, inf) onto [0, 1)."""
    x = np.maximum(x, 0.0)
    return x / (x + scale)


def unsquash(y, scale=1.0):
    """The inverse of :func:`squash`: ``scale * y / (1 - y)``, with ``y`` capped below 1."""
    y = np.minimum(y, 1.0 - 1e-6)
    return scale * (y / (1.0 - y))


def mean_arrivals(st) -> np.ndarray:
    """(T,) the scale of ``queue`` and ``arrivals``: mean arrivals per round, at least 1."""
    return np.maximum(st.arrival_rate * st.round_seconds, 1.0)


__all__ = ["mean_arrivals", "squash", "unsquash"]

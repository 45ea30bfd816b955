"""The study's statistics: means and 95% Student-t intervals across seeds, and their formats.

:func:`mean_ci`   mean and 95% Student-t half-width across seeds
:func:`fmt`       ``m ± h`` in a format, ``–`` for no value
:func:`fmt_pm`    ``m ± h`` as the first study's tables write it
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

#: Two-sided 95% Student-t quantiles t(0.975, df) for df = 1 .. 30 (any statistics table;
#: e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
# the table as printed, two rows, rather than the formatter's one number a line
# fmt: off
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
# fmt: on


def _t95(k: int) -> float:
    """Two-sided 95% Student-t quantile for k - 1 degrees of freedom (1.96 above 30)."""
    if k < 2:
        return float("nan")
    return _T975[k - 2] if k - 1 <= len(_T975) else 1.96


def mean_ci(values: Iterable[float | str]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval) of ``values`` across seeds (nan width for one)."""
    v = np.asarray([float(x) for x in values], np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan")
    return float(v.mean()), _t95(v.size) * float(v.std(ddof=1)) / math.sqrt(v.size)


def fmt(m: float, h: float, f: str) -> str:
    """``m ± h`` in format ``f`` (``m`` alone when ``h`` is nan, ``–`` when ``m`` is; the
    half-width without a sign)."""
    if math.isnan(m):
        return "–"
    return f.format(m) + ("" if math.isnan(h) else " ± " + f.replace("+", "").format(h))


def fmt_pm(m: float, h: float, f: str) -> str:
    """``m ± h``, both in format ``f`` (``m`` alone when ``h`` is nan): the first study's tables."""
    return f.format(m) + ("" if math.isnan(h) else " ± " + f.format(h))


__all__ = ["fmt", "fmt_pm", "mean_ci"]

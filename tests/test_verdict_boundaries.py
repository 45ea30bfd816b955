"""The credit study's decision rules at and across each boundary (issue 34, item 6), on noisy
per-seed data: 10 seeds whose scores scatter so that each paired difference has a 95% interval
of a chosen half-width ``h``, and a mean placed just inside or just outside each rule's edge.
``tests/test_credit_study.py`` has the rules on clear-cut data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet_marl.studies.credit import torchrl_tables as tt
from fleet_marl.studies.credit.stats import _t95, mean_ci
from tests.test_credit_study import _rows

SEEDS = 10
_Z = np.array([-1.6, -1.1, -0.7, -0.4, -0.1, 0.1, 0.4, 0.7, 1.1, 1.6])
Z = (_Z - _Z.mean()) / _Z.std(ddof=1)  # mean 0, sample sd 1: the noise of seed s is a * Z[s]
EPS = 0.002  # how far inside or outside an edge each case sits


def noise_for(h: float) -> float:
    """The scale ``a`` that gives a paired difference ``mu + a * Z[s]`` a 95% half-width of ``h``."""
    return h * math.sqrt(SEEDS) / _t95(SEEDS)


def test_the_noise_has_the_half_width_asked_for():
    m, h = mean_ci(0.3 + noise_for(0.04) * Z)
    assert m == pytest.approx(0.3) and h == pytest.approx(0.04)


def _global(top: float, h: float, slope_sign: float = 1.0) -> str:
    """Verdict of "global stalls" when global − difference at N has mean ``top`` at N = 64,
    falling linearly in log2 N from 0 at N = 2 (``slope_sign`` 0: the same gap at every N),
    with half-width ``h`` at every N (each seed's noise is the same at every N, so the per-seed
    slopes have no spread)."""
    a = noise_for(h)

    def score(arm, n, s):
        if arm != "global":
            return 0.8
        frac = (math.log2(n) - 1) / 5 if slope_sign else 1.0
        return 0.8 + top * frac + a * Z[s]

    return tt.verdict_global(_rows(score, seeds=SEEDS), "auction")["verdict"]


@pytest.mark.parametrize(
    ("top", "h", "expected"),
    [
        (-0.02 - EPS, 0.02, "held"),  # the interval at the top N lies below 0
        (-0.02 + EPS, 0.02, "did not hold"),  # crosses 0, and its low end is above -MARGIN (-0.05)
        (-0.04 - EPS, 0.04, "held"),
        (-0.04 + EPS, 0.04, "undecided"),  # crosses 0, but reaches below -MARGIN
        (-0.01 + EPS, 0.04, "did not hold"),  # low end -0.05 + EPS: above -MARGIN
        (-0.01 - EPS, 0.04, "undecided"),  # low end just below -MARGIN
    ],
)
def test_global_stalls_at_each_edge(top, h, expected):
    assert _global(top, h) == expected


def test_global_needs_the_gap_to_grow_with_n():
    # the gap is clearly negative at every N but does not grow: the slope's interval reaches 0
    assert _global(-0.2, 0.02, slope_sign=0.0) == "undecided"


def _local(mean: float, h: float) -> str:
    """Verdict of "local starves" when local − difference starvation events per episode have
    mean ``mean`` and half-width ``h`` (the same at every N)."""
    a = noise_for(h)
    return tt.verdict_local(
        _rows(lambda arm, n, s: 0.8, starvation_of=lambda arm, n, s: 2.0 + mean + a * Z[s] if arm == "local" else 2.0), "auction"
    )["verdict"]


@pytest.mark.parametrize(
    ("mean", "h", "expected"),
    [
        (0.5 + EPS, 0.5, "held"),  # the interval lies above 0
        (0.6 - EPS, 0.6, "undecided"),  # low end just below 0, high end above STARVATION_MARGIN (1.0)
        (0.3 - EPS, 0.7, "did not hold"),  # high end just below 1.0
        (0.3 + EPS, 0.7, "undecided"),  # high end just above 1.0, low end below 0
    ],
)
def test_local_starves_at_each_edge(mean, h, expected):
    assert _local(mean, h) == expected


def _shapley(mean: float, h: float, slower: bool = True) -> str:
    """Verdict of "Shapley ≈ difference at higher cost" when shapley − difference scores have
    mean ``mean`` and half-width ``h`` at every N ≥ 8."""
    a = noise_for(h)
    rows = _rows(
        lambda arm, n, s: 0.8 + mean + a * Z[s] if arm == "shapley" else 0.8,
        ms_of=lambda arm, n: (5.0 if slower else 0.5) if arm == "shapley" else 1.0,
    )
    return tt.verdict_shapley(rows, "proportional")["verdict"]


@pytest.mark.parametrize(
    ("mean", "h", "expected"),
    [
        (0.03 - EPS, 0.02, "held"),  # high end just inside +MARGIN (0.05)
        (0.03 + EPS, 0.02, "undecided"),  # high end just outside, low end inside
        (0.07 + EPS, 0.02, "did not hold"),  # low end above +MARGIN: Shapley is better
        (-0.03 + EPS, 0.02, "held"),
        (-0.07 - EPS, 0.02, "did not hold"),  # high end below -MARGIN: Shapley is worse
    ],
)
def test_shapley_matches_difference_at_each_edge(mean, h, expected):
    assert _shapley(mean, h) == expected


def test_shapley_must_cost_more():
    assert _shapley(0.0, 0.02, slower=False) == "did not hold"

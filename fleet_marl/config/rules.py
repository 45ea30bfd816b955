"""The rules' specs: how requests clear (:class:`ArbiterSpec`), the safety check
(:class:`SafetySpec`), credit assignment and utility (:class:`RewardSpec`, its schemes
``REWARD_SCHEMES``) and the fairness detector (:class:`FairnessSpec`)."""

from __future__ import annotations

from dataclasses import dataclass

from fleet_marl.config.checks import ConfigError, _choice, _int, _num, _pos_float, _tuple
from fleet_marl.config.mechanisms import REGISTRY as MECHANISM_REGISTRY


@dataclass(frozen=True)
class ArbiterSpec:
    """How requests are cleared. ``bid_levels`` are multipliers of the GPU type's list price."""

    mechanism: str = "maxmin"
    bid_levels: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0)
    reserve_price: float = 0.5  # a mechanism with a reserve (auction): the lowest bid that asks, as a multiplier of list price

    def __post_init__(self):
        _choice(self, "mechanism", tuple(MECHANISM_REGISTRY))  # the built-in ones and any registered since
        _tuple(self, "bid_levels", _pos_float, 1, 64)
        if list(self.bid_levels) != sorted(self.bid_levels):
            raise ConfigError("bid_levels", self.bid_levels, "levels in increasing order")
        _num(self, "reserve_price", 0.0)


@dataclass(frozen=True)
class SafetySpec:
    """The central safety check. ``veto`` refuses an unsafe config (the tenant runs nothing);
    ``project`` downgrades it to the nearest safe one."""

    mode: str = "project"

    def __post_init__(self):
        _choice(self, "mode", ("veto", "project"))


REWARD_SCHEMES = ("local", "global", "mixed", "difference", "difference_default", "shapley")

#: How sampled Shapley samples above 8 live tenants (``RewardSpec.shapley_estimator``;
#: ``fleet_marl.shapley_sampling``: ``shapley_orders`` draws the permutations, ``Banded`` and
#: ``Regression`` the other two designs, and its module docstring compares them).
SHAPLEY_ESTIMATORS = ("permutation", "antithetic", "stratified", "banded", "regression")


@dataclass(frozen=True)
class RewardSpec:
    """Credit assignment and the utility that feeds it (docs/model.md §8).

    ``shapley_samples`` and ``shapley_estimator`` set sampled Shapley, used above 8 live tenants:
    how many samples and how they are drawn (``fleet_marl.shapley_sampling``'s docstring; every
    estimator is unbiased and keeps the values' sum at the grand coalition's welfare).

    ``degenerate_floor`` and ``starvation_penalty`` shape the reward with the fairness
    detector's verdicts (the detector's own knobs are :class:`FairnessSpec`); they stay here
    because they are reward shaping, which the next restructuring gives to ``fleet_marl.credit``.
    """

    scheme: str = "difference"
    mixed_weight: float = 0.5  # mixed = w * local + (1 - w) * global
    shapley_samples: int = 64  # sampled permutations (banded: readings; regression: n/4 coalition pairs each) when tenants > 8
    #: how they are drawn (``fleet_marl.shapley_sampling``): "permutation" (default) M independent uniform
    #: permutations (Castro et al. 2009); "antithetic" M/2 of them and their reverses (Mitchell
    #: et al. 2022); "stratified" cycles, each cut at evenly spaced starts and read both ways, so
    #: that a whole cycle puts every tenant at every position once; "banded" (``Banded``)
    #: stratified by position: the singletons, every arc of max(1, M // 8) random cycles for the
    #: top ceil(n/4) positions (the removals among them), M // 2 pairs of readings for the rest less
    #: a control variate fitted on other cycles (Goldwasser and Hooker 2024; Witter, Liu and
    #: Musco 2025). banded needs few samples: with M <= 12 it reaches 64 permutations' error
    #: with 4.3-8.3x fewer kernel rows at 10-64 tenants on the auction and on hard under greedy
    #: play and the planner, but only 1.8x on hard under random play (at M = 64 it costs more
    #: rows than 64 permutations); "regression" (``Regression``): the singletons, the removals
    #: and ceil(M n / 4) random coalitions of 2..n/2 tenants with their complements, a
    #: cross-fitted additive model of the welfare fitted to all of them, every coalition
    #: informing every tenant (Kolpaczki et al. 2024; Covert and Lee 2021): with M <= 24 it
    #: reaches 64 permutations' error with 3.9-12.2x fewer kernel rows in every scenario where
    #: the env samples, hard under random play included (3.9x; docs/credit_assignment.md
    #: "Shapley for less"). Each keeps sum(shapley) = G(live) - G(empty) exactly and is unbiased.
    shapley_estimator: str = "permutation"
    #: the schemes computed and reported each round: None (default) the chosen one and those that
    #: need no counterfactual rows (local, global, mixed: free once the round is played); True
    #: every scheme, difference_default and shapley included (their rows cost a kernel row each);
    #: False the chosen one only
    compute_all: bool | None = None
    cost_weight: float = 1.0  # weight of money spent (per round budget) in utility
    degenerate_floor: float = 0.01  # reward of a degenerate strategy
    starvation_penalty: float = 0.0  # subtracted from the global reward per starved tenant

    def __post_init__(self):
        _choice(self, "scheme", REWARD_SCHEMES)
        _num(self, "mixed_weight", 0.0, 1.0)
        _int(self, "shapley_samples", 1, 1_000_000)
        _choice(self, "shapley_estimator", SHAPLEY_ESTIMATORS)
        if self.compute_all is not None and not isinstance(self.compute_all, bool):
            raise ConfigError(
                "compute_all",
                self.compute_all,
                "true (every scheme), false (the chosen one) or null (the chosen one and local, global, mixed)",
            )
        _num(self, "cost_weight", 0.0)
        _num(self, "degenerate_floor", -1e6, 1e6)
        _num(self, "starvation_penalty", 0.0)


@dataclass(frozen=True)
class FairnessSpec:
    """The fairness detector (``fleet_marl.fairness``, docs/environment.md): when a tenant is
    starved, and when holding GPUs is hoarding."""

    starvation_fraction: float = 0.5  # a round is short below this fraction of min(fair share, request)
    starvation_rounds: int = 3  # starved after this many consecutive short rounds
    hoard_share: float = 0.25  # degenerate: holding more than this share of its GPU pool while another tenant starves

    def __post_init__(self):
        _num(self, "starvation_fraction", 0.0, 1.0)
        _int(self, "starvation_rounds", 1, 1_000_000)
        _num(self, "hoard_share", 0.0, 1.0)


__all__ = ["REWARD_SCHEMES", "SHAPLEY_ESTIMATORS", "ArbiterSpec", "FairnessSpec", "RewardSpec", "SafetySpec"]

"""Credit assignment: every reward scheme of one round, for B clusters, from ONE kernel call.

Pure numpy over (B, T) tenant arrays; agent-ID dicts live only in ``fleet_marl.environment``.
With ``u_i`` the utility of tenant i, ``G(z) = sum_i u_i`` the welfare of the joint action
``z`` and ``L`` the live tenants (Wolpert and Tumer 2001; Agogino and Tumer 2008; Shapley
1953)::

    local               r_i = u_i
    global              r_i = G(z) - penalty * (number of starved tenants)
    mixed               r_i = w * local_i + (1 - w) * global_i
    difference          r_i = G(z) - G(z_-i)            z_-i: tenant i removed, its GPUs freed
    difference_default  r_i = G(z) - G(z_i<-c_i)        c_i: i's documented default action
    shapley             r_i = sum_{S in L\\{i}} |S|! (n-|S|-1)! / n! (G(S + i) - G(S))

``G(S)`` is the welfare of the round with only the tenants of ``S`` present (the others ask
for nothing and count 0), under the same state and the same random draws. Shapley is exact
over all ``2^n`` coalitions up to ``EXACT_SHAPLEY_MAX`` live tenants; above that it is
sampled from ``M = RewardSpec.shapley_samples`` samples drawn as
``RewardSpec.shapley_estimator`` says (``fleet_marl.shapley_sampling``: ``permutation``,
``antithetic``, ``stratified``, ``banded`` and ``regression``, each unbiased). Every one keeps the efficiency
property ``sum_i r_i = G(L) - G(empty)`` exactly. A coalition that several samples share is
evaluated once: the cost is the distinct coalitions, the kernel rows (:func:`rows_per_round`).
``experiments/shapley_estimators.py`` measures the estimators against exact Shapley
(docs/credit_assignment.md, "Shapley for less").

A scheme is a :class:`Scheme`: the counterfactual rows it needs (``rows``: none, ``"removal"``,
``"default"`` or ``"coalitions"``) and its reward from the evaluated rows
(:meth:`Scheme.reward`). :data:`SCHEMES` is the registry; a new scheme is a ``Scheme`` added
to it and its name added to ``config.REWARD_SCHEMES`` (which config validates against).
Every row every requested scheme needs, for every cluster -- the grand coalition, each
removal, each default substitution, each coalition -- goes into the kernel as one batch: one
``evaluate_welfare`` call per round, which keeps the whole outcome of each grand coalition and
only the welfare of the other rows. Reward shaping by the fairness detector's verdicts
(:meth:`CreditEngine.shape`: the starvation penalty and the degenerate floor) is the one
step after it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from math import factorial
from typing import Any

import numpy as np

from fleet_marl.config import REWARD_SCHEMES, RewardSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, Outcome, RoundState, evaluate_welfare
from fleet_marl.shapley_sampling import MIN_TENANTS, Banded, Design, Regression, design, sampled_rows, shapley_orders

EXACT_SHAPLEY_MAX = 8


@dataclass
class Rows:
    """What the schemes read, for B clusters: ``live`` (B, T) bool, the grand coalition's
    welfare ``G`` (B,) and utilities ``u`` (B, T, 0 where not live), and each family of
    counterfactual rows that was evaluated: ``removal`` and ``default`` (B, T) the welfare
    without tenant i / with i on its default action, ``shapley`` (B, T) the Shapley values."""

    live: np.ndarray
    G: np.ndarray
    u: np.ndarray
    spec: RewardSpec
    removal: np.ndarray | None = None
    default: np.ndarray | None = None
    shapley: np.ndarray | None = None


class Scheme:
    """A reward scheme: ``name``, the counterfactual ``rows`` it needs (None, ``"removal"``,
    ``"default"`` or ``"coalitions"``), and :meth:`reward`."""

    name: str = ""
    rows: str | None = None

    def reward(self, r: Rows) -> np.ndarray:
        """(B, T) float64 rewards, 0 for tenants not live."""
        raise NotImplementedError

    def counterfactual(self, r: Rows) -> np.ndarray:
        """The counterfactual rows this scheme needs (its ``rows``), which the engine evaluated:
        ``removal``, ``default``, or the Shapley values of the ``coalitions``."""
        rows = {"removal": r.removal, "default": r.default, "coalitions": r.shapley}[str(self.rows)]
        assert rows is not None, f"rows = {self.rows!r}: the engine evaluated them"
        return rows


class Local(Scheme):
    name = "local"

    def reward(self, r: Rows) -> np.ndarray:
        return r.u


class Global(Scheme):
    name = "global"

    def reward(self, r: Rows) -> np.ndarray:
        return np.where(r.live, r.G[:, None], 0.0)


class Mixed(Scheme):
    name = "mixed"

    def reward(self, r: Rows) -> np.ndarray:
        w = r.spec.mixed_weight
        return w * r.u + (1.0 - w) * np.where(r.live, r.G[:, None], 0.0)


class Difference(Scheme):
    """The grand coalition's welfare minus the welfare without the tenant."""

    name = "difference"
    rows = "removal"

    def reward(self, r: Rows) -> np.ndarray:
        return np.where(r.live, r.G[:, None] - self.counterfactual(r), 0.0)


class DifferenceDefault(Difference):
    """The grand coalition's welfare minus the welfare with the tenant on its default action."""

    name = "difference_default"
    rows = "default"


class Shapley(Scheme):
    name = "shapley"
    rows = "coalitions"

    def reward(self, r: Rows) -> np.ndarray:
        return self.counterfactual(r)


#: The reward schemes by name, in ``config.REWARD_SCHEMES`` order.
SCHEMES: dict[str, Scheme] = {s.name: s for s in (Local(), Global(), Mixed(), Difference(), DifferenceDefault(), Shapley())}


#: The families of counterfactual rows a scheme may ask for (``Scheme.rows``).
ROW_FAMILIES = (None, "removal", "default", "coalitions")
assert tuple(SCHEMES) == REWARD_SCHEMES, "the scheme registry and config.REWARD_SCHEMES list the same names in the same order"
assert all(s.rows in ROW_FAMILIES for s in SCHEMES.values())


def computed_schemes(chosen: str, compute_all: bool | None) -> tuple[str, ...]:
    """The schemes an env computes each round, in ``SCHEMES`` order (``RewardSpec.compute_all``):
    every scheme (``True``), the ``chosen`` one only (``False``), or (``None``, the default) the
    chosen one and those that need no counterfactual rows, which cost nothing once the grand
    coalition is evaluated: ``local``, ``global`` and ``mixed``."""
    if compute_all:
        return tuple(SCHEMES)
    return tuple(s for s in SCHEMES if s == chosen or (compute_all is None and SCHEMES[s].rows is None))


def rows_per_round(tenants: int, schemes: tuple[str, ...], shapley_samples: int, shapley_estimator: str = "permutation") -> int:
    """An upper bound on the kernel rows :meth:`CreditEngine.compute` evaluates for one cluster
    of ``tenants`` live tenants computing ``schemes``: the grand coalition, ``tenants`` rows for
    each of the removal and default families, and every coalition of exact Shapley (up to
    ``EXACT_SHAPLEY_MAX`` tenants) or the distinct proper non-empty coalitions of sampled
    Shapley (:func:`sampled_rows`: the permutations' prefixes, or ``banded``'s or ``regression``'s coalitions)."""
    needs = {SCHEMES[s].rows for s in schemes}
    rows = 1 + tenants * (("removal" in needs) + ("default" in needs))
    if "coalitions" in needs:
        rows += (1 << tenants) if tenants <= EXACT_SHAPLEY_MAX else sampled_rows(tenants, shapley_samples, shapley_estimator)
    return rows


@dataclass
class Credit:
    """One round of B clusters: each grand coalition's outcome (leading shape (B,)), its
    welfare and every computed scheme's rewards ((B, T), 0 for tenants not live)."""

    outcome: Outcome
    welfare: Any  # (B,) float64; a float for one cluster (cluster())
    rewards: dict[str, np.ndarray]
    rows: Any  # (B,) int64 kernel rows evaluated for each cluster; an int for one cluster (cluster())

    def cluster(self, b: int) -> Credit:
        """Cluster ``b`` alone: fields without the B axis."""
        return Credit(self.outcome.row(b), float(self.welfare[b]), {k: v[b] for k, v in self.rewards.items()}, int(self.rows[b]))


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a (R, n) bool array and, for each row, the index of its distinct row:
    ``distinct[which] == rows``. Rows are keyed by their bits (``n`` up to 62) or compared whole."""
    n = rows.shape[1]
    if n <= 62:
        keys = rows @ (np.int64(1) << np.arange(n, dtype=np.int64))
        _, first, which = np.unique(keys, return_index=True, return_inverse=True)
        return rows[first], which.reshape(-1)
    distinct, which = np.unique(rows, axis=0, return_inverse=True)
    return distinct, which.reshape(-1)


def _shapley_plan(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For n players over bitmask coalitions: (without (n, 2^(n-1)), with_, weight)."""
    masks = np.arange(1 << n, dtype=np.int64)
    size = np.array([bin(m).count("1") for m in masks])
    fact = np.array([factorial(k) for k in range(n + 1)], dtype=np.float64)
    without, with_, weight = [], [], []
    for j in range(n):
        s = masks[(masks >> j) & 1 == 0]
        without.append(s)
        with_.append(s | (1 << j))
        weight.append(fact[size[s]] * fact[n - size[s] - 1] / fact[n])
    return np.array(without), np.array(with_), np.array(weight)


class CreditEngine:
    """Computes the requested reward schemes for rounds of B clusters.

    ``schemes`` is the set to compute (the chosen one, or all of them). ``default`` is every
    tenant's default action (needed by ``difference_default``). Sampled Shapley permutations
    come from the ``rngs`` passed to :meth:`compute` (one generator per cluster, separate from
    the environment's, so a trajectory never depends on which schemes are computed), drawn as
    ``spec.shapley_estimator`` says (``shapley_sampling.design``). ``exact_max`` (None:
    ``EXACT_SHAPLEY_MAX``) is the most live tenants whose Shapley values are exact; a
    measurement sets it (0: always sampled; 16: exact at ``hard``'s 16 tenants, 65,536 rows).
    """

    def __init__(
        self, st: KernelStatic, spec: RewardSpec, schemes: tuple[str, ...], default: Actions | None = None, exact_max: int | None = None
    ):
        unknown = [s for s in schemes if s not in SCHEMES]
        if unknown:
            raise ValueError(f"reward scheme {unknown[0]!r}: expected one of {', '.join(SCHEMES)}")
        self.st = st
        self.spec = spec
        self.schemes = tuple(schemes)
        self.default = default
        self.needs = {SCHEMES[s].rows for s in self.schemes} - {None}
        if "default" in self.needs and default is None:
            raise ValueError("difference_default needs the default actions")
        self._plans: dict[int, tuple] = {}
        self.exact_max = exact_max

    def _plan(self, n: int):
        if n not in self._plans:
            self._plans[n] = _shapley_plan(n)
        return self._plans[n]

    def compute(self, actions: Actions, state: RoundState, draws: Draws, live: np.ndarray, rngs=None) -> Credit:
        """actions, state, draws: fields with a leading (B,) axis, already validated; live
        (B, T) bool; ``rngs``: B generators, needed only for sampled Shapley (more than
        ``exact_max`` live tenants). The fairness verdicts shape the rewards after
        this, in :meth:`shape`."""
        st, T = self.st, self.st.T
        B = live.shape[0]
        eye = np.eye(T, dtype=bool)
        # each cluster's rows: its grand coalition, then every family the schemes need
        present = [live[:, None, :]]
        if "removal" in self.needs:
            present.append(live[:, None, :] & ~eye[None])
        if "default" in self.needs:
            present.append(np.repeat(live[:, None, :], T, axis=1))
        fixed = np.concatenate(present, axis=1)  # (B, F, T): the same number of rows in every cluster
        F = fixed.shape[1]
        coal: list[np.ndarray] = []
        # each cluster's plan: None (exact Shapley, every coalition) or (its sampling design,
        # `which`: the distinct row of each of its coalitions, evaluated once)
        plans: list[tuple[Design, np.ndarray] | None] = []
        if "coalitions" in self.needs:
            exact_max = EXACT_SHAPLEY_MAX if self.exact_max is None else self.exact_max
            for b in range(B):
                idx = np.flatnonzero(live[b])
                n = idx.size
                if n <= exact_max or n < MIN_TENANTS.get(self.spec.shapley_estimator, 1):  # banded needs 3 tenants, regression 4
                    bits = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1
                    co = np.zeros((1 << n, T), bool)
                    co[:, idx] = bits.astype(bool)
                    plans.append(None)
                else:
                    plan = design(self.spec.shapley_estimator, rngs[b], n, self.spec.shapley_samples)
                    distinct, which = _distinct_rows(plan.coalitions())
                    co = np.zeros((distinct.shape[0], T), bool)
                    co[:, idx] = distinct
                    plans.append((plan, which))
                coal.append(co)
        counts = F + np.array([c.shape[0] for c in coal], np.int64) if coal else np.full(B, F, np.int64)
        start = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rows_present = (
            np.concatenate([np.concatenate([fixed[b]] + ([coal[b]] if coal else [])) for b in range(B)])
            if coal
            else fixed.reshape(B * F, T)
        )
        if F == 1 and not coal:  # one row per cluster (local, global, mixed): the inputs are the rows
            out, W = evaluate_welfare(st, actions, state, draws, rows_present, full=np.ones(B, bool))
        elif B == 1 and not coal and "default" not in self.needs:  # one cluster (the parallel env): its inputs broadcast over its rows
            out, W = evaluate_welfare(st, actions, state, draws, fixed[0], full=np.arange(F) == 0)
        else:
            rc = np.repeat(np.arange(B), counts)  # the cluster of each row
            acts = Actions(*(np.asarray(getattr(actions, f))[rc] for f in ("gpus", "bid", "precision", "batch")))
            if "default" in self.needs:
                off = 1 + (T if "removal" in self.needs else 0)
                rows = (start[:, None] + off + np.arange(T)[None, :]).ravel()  # (B*T,) row of "tenant i on its default" in each cluster
                ten = np.tile(np.arange(T), B)
                d = self.default
                for f in ("gpus", "bid", "precision", "batch"):
                    getattr(acts, f)[rows, ten] = np.asarray(getattr(d, f))[ten]
            kept: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(RoundState)}
            rows_of: dict[str, Any] = {k: None if v is None else np.asarray(v)[rc] for k, v in kept.items()}
            st_rows = RoundState(**rows_of)  # each row its cluster's state (a field left None stays None)
            dr_rows = Draws(
                np.asarray(draws.arrivals)[rc],
                np.asarray(draws.tiebreak)[rc],
                *(None if v is None else np.asarray(v)[rc] for v in (draws.prompt_tokens, draws.output_tokens)),
            )
            grand = np.zeros(rc.size, bool)
            grand[start] = True
            out, W = evaluate_welfare(st, acts, st_rows, dr_rows, rows_present, full=grand)
        G = W[start]
        r = Rows(live=live, G=G, u=np.where(live, out.utility, 0.0), spec=self.spec)
        col = 1
        if "removal" in self.needs:
            r.removal = W[start[:, None] + col + np.arange(T)[None, :]]
            col += T
        if "default" in self.needs:
            r.default = W[start[:, None] + col + np.arange(T)[None, :]]
            col += T
        if "coalitions" in self.needs:
            phi = np.zeros((B, T))
            for b in range(B):
                idx = np.flatnonzero(live[b])
                n = idx.size
                if not n:
                    continue
                v = W[start[b] + col : start[b] + counts[b]]
                sampled = plans[b]
                if sampled is None:
                    without, with_, weight = self._plan(n)
                    phi[b, idx] = (weight * (v[with_] - v[without])).sum(-1)
                else:
                    plan, which = sampled
                    phi[b, idx] = plan.values(v[which], G[b])
            r.shapley = phi
        rewards = {s: SCHEMES[s].reward(r) for s in self.schemes}
        return Credit(outcome=out, welfare=G, rewards=rewards, rows=counts)

    def shape(self, credit: Credit, chosen: str, live: np.ndarray, starved: np.ndarray, degenerate: np.ndarray) -> np.ndarray:
        """Reward shaping by the fairness verdicts, in place on ``credit.rewards`` and returning
        the ``chosen`` scheme's reward: ``starvation_penalty`` per starved live tenant comes off
        ``global`` (and the global part of ``mixed``); a degenerate strategy's reward is at most
        ``degenerate_floor`` (never a gain). ``credit.rewards`` keeps the rewards before the
        floor (the env's ``infos[agent]["reward_<scheme>"]``)."""
        spec = self.spec
        pen = spec.starvation_penalty * np.count_nonzero(starved & live, axis=-1).astype(np.float64)  # (B,)
        if pen.any():
            pen = pen[:, None]
            if "global" in credit.rewards:
                credit.rewards["global"] = np.where(live, credit.rewards["global"] - pen, 0.0)
            if "mixed" in credit.rewards:
                w = spec.mixed_weight
                credit.rewards["mixed"] = np.where(live, credit.rewards["mixed"] - (1.0 - w) * pen, 0.0)
        raw = credit.rewards[chosen]
        return np.where(degenerate, np.minimum(raw, spec.degenerate_floor), raw)


__all__ = [
    "EXACT_SHAPLEY_MAX",
    "ROW_FAMILIES",
    "SCHEMES",
    "Banded",
    "Credit",
    "CreditEngine",
    "Regression",
    "Rows",
    "Scheme",
    "computed_schemes",
    "rows_per_round",
    "sampled_rows",
    "shapley_orders",
]

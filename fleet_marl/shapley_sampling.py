"""Sampled Shapley: which coalitions each estimator evaluates and its values from their welfare.

Above ``credit.EXACT_SHAPLEY_MAX`` live tenants the credit engine samples Shapley values
(``fleet_marl.credit``'s module docstring defines them): ``RewardSpec.shapley_estimator``
picks how, ``RewardSpec.shapley_samples`` (M) how much. :func:`design` builds one cluster's
plan: its :meth:`~Orders.coalitions` (which the engine evaluates, each distinct one once, in
its one kernel call) and its :meth:`~Orders.values` from their welfare. Every estimator is
unbiased and keeps the efficiency property ``sum_i phi_i = G(L) - G(empty)`` exactly.

The first three average the marginal contributions along M permutations (:func:`shapley_orders`,
the plan :class:`Orders`), each a uniformly random one:

    permutation  M independent permutations (Castro, Gomez and Tejada 2009), the default
    antithetic   M/2 independent permutations and their reverses (antithetic sampling; Mitchell,
                 Cooper, Frank and Holmes, "Sampling permutations for Shapley value estimation",
                 JMLR 23(43), 2022): exact for games with no more than pairwise interactions
    stratified   random cycles, each read from ceil(n/2) evenly spaced starts, forwards and
                 backwards: n (n even) permutations a cycle in which every tenant holds every
                 position once (stratification by position, Maleki et al. 2013 and Castro et
                 al. 2017, here as a cyclic Latin square), whose prefixes are the arcs of the
                 cycle, a quarter of them shared by a forward and a backward reading. Fewer
                 than a whole cycle's permutations: the shifts are spread evenly over it.

``banded`` (:class:`Banded`) is not a set of permutations. It is stratified by position (a
tenant's value is the mean over positions k = 0..n-1 of its expected marginal contribution to
a random coalition of k others; Castro et al. 2017) and spends its rows where the marginals
vary, which under contention is when nearly every tenant is present:

- position 0 exactly: the n singletons, a_i = G({i}) - G(empty);
- positions n-h..n-1, the band (h = min(ceil(n/4), M)): every arc of n-h..n-1 tenants of
  max(1, M // 8) random cycles, n h rows a cycle, and each tenant's marginal to the arc of k
  tenants just before it and to the one just after it (two a tenant, position and cycle); at
  position n-1 that is the removal, d_i = G(L) - G(L - i), the difference reward;
- positions 1..n-h-1: M // 2 forward-and-backward reading pairs of random cycles (as
  ``stratified``: two readings a cycle up to M = 4, four above), their prefixes of 2..n-h
  tenants. A reading puts tenant i at position k with probability 1/n, so the sum of
  (marginal - control) over the readings, times n / readings, is unbiased for the sum over
  these positions of (expected marginal - control) (Horvitz-Thompson), and the control's own
  sum is known: a_i + nu_k + b k/(n-1) (d_i - a_i), a position profile nu and a slope b in
  [0, 1] fitted (least squares) on the other cycles' readings only (cross-fitting keeps it
  unbiased; one cycle: a flat profile, b = 0), the profile scaled so the control's mean over tenants adds up to what the
  singletons and the band leave of G(L). The proxies are the ones the engine has for free:
  a_i and d_i are the marginals at positions 0 and n-1, and with b = 1 and nu = 0 the control
  is a game's exact expected marginal when the game has no more than pairwise interactions.
  This is the control-variate (regression-adjusted) estimator of Goldwasser and Hooker
  ("Stabilizing Estimates of Shapley Values with Control Variates", xAI 2024) and Witter, Liu
  and Musco ("Regression-adjusted Monte Carlo Estimators for Shapley Values and Probabilistic
  Values", NeurIPS 2025), on a position-stratified design.

Every term of ``banded`` is an unbiased estimate, and the values are shifted by a common
constant to add up to G(L) - G(empty) exactly, which keeps them unbiased; more samples mean
more band cycles and readings, so they converge to exact Shapley. Its rows: :meth:`Banded.rows`.

``regression`` (:class:`Regression`) does not take one marginal per row: every coalition it
evaluates informs every tenant's value. With Delta_s(i) the mean welfare of the coalitions of
s tenants that hold i less that of those that do not, phi_i = (G(L) - G(empty)) / n + (1/n)
sum over s = 1..n-1 of Delta_s(i) (the size-stratified form of Kolpaczki, Bengs, Muschalik and
Hullermeier, "Approximating the Shapley Value without Marginal Contributions", AAAI 2024):

- sizes 1 and n-1 exactly: the n singletons and the n removals;
- sizes 2..n-2: max(n // 2 - 1, ceil(M n / 4)) uniformly random coalitions, their sizes spread
  evenly over 2..n // 2, each with its complement (paired sampling; Covert and Lee, "Improving
  KernelSHAP", AISTATS 2021), so 2 rows each;
- a model of the welfare fitted to all of them by least squares, as KernelSHAP does (Lundberg
  and Lee 2017): each tenant's weight, a trend in t^2 of that weight (t = size / n - 1/2), a
  level per size and a quartic in t (the trend and the levels lightly penalized). The model's
  own Delta_s is exact from its coefficients; what it misses, each sample's residual r(S),
  adds r(S) (n/s if i in S, else -n/(n-s)), an unbiased (Horvitz-Thompson) estimate of the
  residual's Delta_s(i) for a uniformly random S of s tenants, averaged over the samples of s.

Cross-fitting keeps it unbiased: each pair's residual comes from a model fitted on the
singletons, the removals and the pairs of the other 7 of 8 folds only, which are independent of
it, as ``banded``'s control is fitted on other cycles.
It is exact on additive games (their model has no residual), its values add up to G(L) -
G(empty) exactly (every Delta_s sums to 0 over tenants), and it needs 4 live tenants (fewer:
the engine computes exact Shapley). Its rows: :meth:`Regression.rows`.

``experiments/shapley_estimators.py`` measures the five against exact Shapley
(docs/credit_assignment.md, "Shapley for less"; docs/data/shapley_estimators.json): with
M <= 12, ``banded`` reaches the error of 64 permutations with 4.3-8.3x fewer kernel rows at 10,
16 and 64 tenants on the auction and on ``hard`` under greedy play and the planner; on ``hard``
under random play only 1.8x (``stratified`` 2.0x), where most of a marginal's variance is with
whom a tenant shares the round, not how many, and not pairwise, which no position
stratification or pairwise control removes. ``regression``, which takes no marginals, reaches
it with M <= 24 and 3.9-12.2x fewer rows in all nine scenarios where the env samples, 3.9x on
``hard`` under random play.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fleet_marl.config.rules import SHAPLEY_ESTIMATORS

#: the fewest live tenants an estimator samples for (fewer: the engine computes exact Shapley)
MIN_TENANTS = {"banded": 3, "regression": 4}


def _cycle_sizes(n: int, M: int) -> list[int]:
    """The permutations each cycle of ``stratified`` gives, ``M`` in all: whole cycles of
    ``2 ceil(n / 2)``, then what is left."""
    whole = 2 * -(-n // 2)
    return [whole] * (M // whole) + ([M % whole] if M % whole else [])


def sampled_rows(n: int, M: int, estimator: str = "permutation") -> int:
    """An upper bound on the distinct proper non-empty coalitions sampled Shapley evaluates for
    ``n`` live tenants, ``M`` samples and ``estimator``: the prefixes of the ``M`` permutations
    of :func:`shapley_orders`, ``M (n - 1)`` for ``permutation`` and ``antithetic`` (a
    permutation's prefixes and its reverse's are never the same set); for ``stratified``, each
    cycle's arcs: ``(f + b)(n - 1)`` for ``f`` forward and ``b`` backward readings, less the
    ``f b - b`` arcs that a forward and a backward reading share (the exact count for one cycle;
    different cycles may share a few more by chance). ``banded``: :meth:`Banded.rows` (exact
    but for coalitions that different cycles share by chance)."""
    if estimator not in SHAPLEY_ESTIMATORS:
        raise ValueError(f"shapley_estimator {estimator!r}: expected one of {', '.join(SHAPLEY_ESTIMATORS)}")
    if estimator == "banded":
        return Banded.rows(n, M)
    if estimator == "regression":
        return Regression.rows(n, M)
    if estimator != "stratified":
        return M * (n - 1)
    rows = 0
    for r in _cycle_sizes(n, M):
        f, b = -(-r // 2), r // 2
        rows += (f + b) * (n - 1) - (f * b - b)
    return rows


def shapley_orders(estimator: str, rng: np.random.Generator, n: int, M: int) -> np.ndarray:
    """(M, n) int64: ``M`` permutations of ``n`` tenants for sampled Shapley, drawn from ``rng``
    by ``estimator`` (``RewardSpec.shapley_estimator``; the module docstring compares them).
    Each row is a uniformly random permutation. ``permutation`` draws what fleet_marl always
    drew, from the same generator calls (the golden digests stand)."""
    if estimator == "permutation":
        return rng.permuted(np.tile(np.arange(n), (M, 1)), axis=1)
    if estimator == "antithetic":
        half = rng.permuted(np.tile(np.arange(n), (-(-M // 2), 1)), axis=1)
        return np.stack([half, half[:, ::-1]], axis=1).reshape(-1, n)[:M]  # each permutation, then its reverse
    if estimator == "stratified":
        out = []
        for r in _cycle_sizes(n, M):
            k = -(-r // 2)  # forward readings of this cycle
            cycle = rng.permutation(n)
            starts = (np.arange(k) * n) // k  # evenly spaced: every second position in a whole cycle
            forward = cycle[(starts[:, None] + np.arange(n)[None, :]) % n]
            out.append(np.stack([forward, forward[:, ::-1]], axis=1).reshape(-1, n)[:r])  # each reading, then its reverse
        return np.concatenate(out)
    if estimator in ("banded", "regression"):
        raise ValueError(
            f"shapley_estimator {estimator!r} evaluates coalitions that are not permutations' prefixes: see shapley_sampling.{estimator.title()}"
        )
    raise ValueError(f"shapley_estimator {estimator!r}: expected one of {', '.join(SHAPLEY_ESTIMATORS)}")


def _arcs(cycle: np.ndarray, lengths) -> np.ndarray:
    """(len(lengths) * n, n) bool: every arc of ``cycle`` (a permutation of n tenants read as a
    circle) of each length, length-major then by start: row ``j n + s`` holds the tenants at
    positions ``s, s + 1, ..., s + lengths[j] - 1`` (mod n)."""
    n = cycle.size
    lengths = np.asarray(list(lengths), np.int64)
    out = np.zeros((lengths.size, n, n), bool)
    for j, length in enumerate(lengths):
        at = (np.arange(n)[:, None] + np.arange(length)[None, :]) % n  # (start, offset) -> position
        out[j, np.arange(n)[:, None], cycle[at]] = True
    return out.reshape(-1, n)


class Banded:
    """The ``banded`` estimator of one cluster's ``n`` live tenants with ``M`` samples (the
    module docstring says what and why): :meth:`coalitions` to evaluate, :meth:`values` from
    their welfare. Tenants are 0..n-1 (the live ones, in order).

    Its layout (:meth:`layout`): band depth ``h = min(ceil(n/4), M)`` (at least 1, at most
    n - 2) on ``max(1, M // 8)`` band cycles (more samples, more bands: the values converge to
    exact Shapley as M grows), and ``max(1, M // 2)`` forward-and-backward reading pairs over
    ``c`` reading cycles, one pair each up to two pairs, else two pairs a cycle. The random
    draws, in order: the band cycles, then the reading cycles."""

    def __init__(self, rng: np.random.Generator, n: int, M: int):
        if n < 3:
            raise ValueError(f"banded needs at least 3 live tenants, got {n}: use exact Shapley")
        self.n, self.M = n, M
        self.h, nbands, self.pairs = self.layout(n, M)
        self.bands = [rng.permutation(n) for _ in range(nbands)]
        orders, group = [], []
        for g, m in enumerate(self.pairs):
            cycle = rng.permutation(n)
            starts = (np.arange(m) * n) // m  # evenly spaced
            forward = cycle[(starts[:, None] + np.arange(n)[None, :]) % n]
            orders.append(np.stack([forward, forward[:, ::-1]], axis=1).reshape(-1, n))  # each reading, then its reverse
            group += [g] * (2 * m)
        self.orders = np.concatenate(orders)  # (R, n): reading t puts tenant orders[t, k] at position k
        self.group = np.array(group)  # (R,) the cycle of each reading

    @staticmethod
    def layout(n: int, M: int) -> tuple[int, int, list[int]]:
        """(band depth h, band cycles, reading pairs of each reading cycle)."""
        h = max(1, min(-(-n // 4), M, n - 2))
        P = max(1, M // 2)
        c = P if P <= 2 else -(-P // 2)
        return h, max(1, M // 8), [P // c + (1 if j < P % c else 0) for j in range(c)]

    @classmethod
    def rows(cls, n: int, M: int) -> int:
        """The distinct proper non-empty coalitions :meth:`coalitions` holds, for ``n`` >= 3
        (fewer: the engine computes exact Shapley, ``2^n`` rows): n singletons, n removals, n
        (h - 1) more arcs for each band cycle, and each reading's prefixes of 2..n-h tenants (but
        n-1: those are removals), less those a backward reading shares with a forward one of its
        cycle (the arc from a forward reading's start to the backward one's first tenant, when it
        holds 2..n-h of them). Different cycles may share a few more by chance; the engine
        evaluates those once."""
        if n < 3:
            return 1 << n  # the engine computes exact Shapley: every coalition, the empty one included
        h, nbands, pairs = cls.layout(n, M)
        top = min(n - h, n - 2)  # a reading's prefix of n-1 tenants is a removal, which the band holds
        rows = 2 * n + nbands * n * (h - 1)
        for m in pairs:
            starts = (np.arange(m) * n) // m
            gap = (starts[:, None] - starts[None, :]) % n  # length of the arc from start s' to just before start s
            rows += 2 * m * (top - 1) - int(((gap >= 2) & (gap <= top)).sum())
        return rows

    def coalitions(self) -> np.ndarray:
        """(Q, n) bool: the singletons, each band cycle's arcs of lengths n-h..n-1, and every
        reading's prefixes of 2..n-h tenants (not necessarily distinct)."""
        n, h = self.n, self.h
        rank = np.argsort(self.orders, axis=1)  # position of each tenant in each reading
        prefixes = rank[:, None, :] < np.arange(2, n - h + 1)[None, :, None]  # (R, n-h-1, n)
        bands = [_arcs(c, range(n - h, n)) for c in self.bands]
        return np.concatenate([np.eye(n, dtype=bool), *bands, prefixes.reshape(-1, n)])

    def values(self, v: np.ndarray, G: float) -> np.ndarray:
        """(n,) Shapley values from ``v``, the welfare of each row of :meth:`coalitions`, and
        ``G``, the grand coalition's (the empty one's is 0)."""
        n, h = self.n, self.h
        a = v[:n]
        # positions 0 and n-h..n-1, per tenant (`known`, the sum of these positions' marginals):
        # the singletons, the band's marginals, the removals
        band = np.zeros(n)
        for j, cycle in enumerate(self.bands):
            arcs = v[n + j * n * h : n + (j + 1) * n * h].reshape(h, n)  # arcs[i, s]: the arc of n-h+i tenants from position s
            x = np.argsort(cycle)  # each tenant's position on the cycle
            arc = {n - h + i: arcs[i] for i in range(h)}
            d = G - arc[n - 1][(x + 1) % n]  # the removal L - i: the arc of n-1 tenants from just after i
            for k in range(n - h, n - 1):
                before = arc[k + 1][(x - k) % n] - arc[k][(x - k) % n]  # i joining the k tenants just before it
                after = arc[k + 1][x] - arc[k][(x + 1) % n]  # ... the k just after it
                band += 0.5 * (before + after) / len(self.bands)
        known = a + d + band
        # positions 1..n-h-1 from the readings, less the control a_i + nu_k + b z_ik
        lo, hi = 1, n - h
        K, R = hi - lo, self.orders.shape[0]
        off = n + len(self.bands) * n * h
        pre = np.concatenate([a[self.orders[:, :1]], v[off:].reshape(R, K)], axis=1)  # prefixes of 1..n-h tenants
        who = self.orders[:, lo:hi]  # (R, K): the tenant at position k
        kk = np.arange(lo, hi)
        r = np.diff(pre, axis=1) - a[who]  # each marginal less the tenant's standalone value
        z = (kk / (n - 1))[None, :] * (d - a)[who]  # the pairwise game's slope
        zsum = (kk / (n - 1)).sum() * (d - a)  # (n,) sum over positions 1..n-h-1 of z, per tenant
        left = G - known.mean() - K * a.mean()  # estimates the sum over positions 1..n-h-1 of the mean of r
        phi = known.copy()
        for g in np.unique(self.group):
            test = self.group == g
            train = ~test
            b, nu = 0.0, np.full(K, left / K)  # one cycle: a flat profile
            if train.any():  # fitted on the other cycles only
                rt, zt = r[train], z[train]
                zc, rc = zt - zt.mean(0), rt - rt.mean(0)
                zz = float((zc * zc).sum())
                b = min(max(float((zc * rc).sum()) / zz, 0.0), 1.0) if zz > 0 else 0.0  # 0: standalone .. 1: pairwise
                nu = (rt - b * zt).mean(0)
                nu = nu + (left - nu.sum() - b * zsum.mean()) / K  # the control's mean over tenants sums to `left`
            phi += test.sum() / R * (K * a + nu.sum() + b * zsum)  # the control's own sum over positions 1..n-h-1
            resid = r[test] - nu[None, :] - b * z[test]
            phi += n / R * np.bincount(who[test].ravel(), resid.ravel(), n)  # Horvitz-Thompson: a reading puts i at k w.p. 1/n
        phi /= n
        return phi + (G - phi.sum()) / n  # a common shift: efficient, still unbiased


class Regression:
    """The ``regression`` estimator of one cluster's ``n`` >= 4 live tenants with ``M`` samples
    (the module docstring says what and why): :meth:`coalitions` to evaluate, :meth:`values`
    from their welfare. Tenants are 0..n-1 (the live ones, in order). Its pairs
    (:meth:`layout`): ``max(n // 2 - 1, ceil(M n / 4))`` random coalitions, their sizes spread
    evenly over 2..n // 2, each with its complement; pair ``j`` is in fold ``j % FOLDS``."""

    FOLDS = 8  # cross-fitting: each pair's residual is from a model fitted without its fold
    RIDGE = 1e-3  # the penalty on the weights' trend and the levels, relative to the mean of X'X's diagonal

    def __init__(self, rng: np.random.Generator, n: int, M: int):
        if n < 4:
            raise ValueError(f"regression needs at least 4 live tenants, got {n}: use exact Shapley")
        self.n = n
        small = self.layout(n, M)
        ranks = np.argsort(rng.permuted(np.tile(np.arange(n), (small.size, 1)), axis=1), axis=1)
        self.pairs = ranks < small[:, None]  # (P, n): a uniformly random coalition of each size
        self.fold = np.tile(np.arange(small.size) % min(self.FOLDS, small.size), 2)

    @staticmethod
    def layout(n: int, M: int) -> np.ndarray:
        """(P,) the smaller size of each pair, class by class."""
        classes = np.arange(2, n // 2 + 1)
        P = max(classes.size, -(-M * n // 4))
        return np.repeat(classes, P // classes.size + (np.arange(classes.size) < P % classes.size))

    @classmethod
    def rows(cls, n: int, M: int) -> int:
        """An upper bound on the distinct proper non-empty coalitions :meth:`coalitions` holds
        (exact but for pairs that coincide by chance), for ``n`` >= 4 (fewer: ``2^n``)."""
        return 2 * n + 2 * cls.layout(n, M).size if n >= 4 else 1 << n

    def coalitions(self) -> np.ndarray:
        """(2 n + 2 P, n) bool: the singletons, the removals, the pairs' coalitions, their complements."""
        eye = np.eye(self.n, dtype=bool)
        return np.concatenate([eye, ~eye, self.pairs, ~self.pairs])

    def _features(self, Z: np.ndarray) -> np.ndarray:
        """The model's columns: tenant j present; penalized, j present times t^2 and each size's
        own level; a quartic in t (t = size / n - 1/2)."""
        size = Z.sum(1)
        t = size / self.n - 0.5
        level = size[:, None] == np.arange(1, self.n)[None, :]
        return np.concatenate([Z, Z * (t * t)[:, None], level, t[:, None] ** np.arange(5)[None, :]], axis=1)

    def values(self, v: np.ndarray, G: float) -> np.ndarray:
        """(n,) Shapley values from ``v``, the welfare of each row of :meth:`coalitions`, and
        ``G``, the grand coalition's (the empty one's is 0)."""
        n = self.n
        a, d = v[:n], v[n : 2 * n]  # singletons, removals
        ends = a - (a.sum() - a) / (n - 1) + (d.sum() - d) / (n - 1) - d  # Delta_1 + Delta_{n-1}, exact
        Z = self.coalitions()
        X = self._features(Z)
        A, b = X.T @ X, X.T @ v
        # the trend and the levels lightly penalized; a trace on all, as the free columns are collinear (sum of presences = size)
        A += np.diag(np.r_[np.zeros(n), np.full(2 * n - 1, self.RIDGE), np.zeros(5)] + 1e-10) * np.trace(A) / len(A)
        Z, X, v, fold = Z[2 * n :], X[2 * n :], v[2 * n :], self.fold
        outs = [fold == k for k in range(int(fold.max()) + 1)]
        A_out = np.stack([A - X[o].T @ X[o] for o in outs])
        b_out = np.stack([b - X[o].T @ v[o] for o in outs])
        coef = np.linalg.solve(A_out, b_out[..., None])[..., 0]  # (folds, 3 n + 4): each fold's model, fitted without it
        t2 = (np.arange(2, n - 1) / n - 0.5) ** 2
        beta = coef[:, None, :n] + t2[None, :, None] * coef[:, None, n : 2 * n]  # (folds, sizes 2..n-2, n)
        model = n / (n - 1) * (beta - beta.mean(-1, keepdims=True))  # each fold's model's Delta_s
        size = Z.sum(1)
        r = v - np.einsum("rp,rp->r", X, coef[fold])  # each sample's residual
        ht = np.where(Z, n / size[:, None], -n / (n - size)[:, None]) * r[:, None]  # its residual's Delta_s, Horvitz-Thompson
        per_size = np.bincount(size, minlength=n).astype(float)
        phi = (G + ends + ((model[fold, size - 2] + ht) / per_size[size][:, None]).sum(0)) / n
        return phi + (G - phi.sum()) / n  # exact already but for rounding


class Orders:
    """The plan of the permutation estimators: the proper non-empty prefixes of ``orders``
    ((M, n) permutations of the live tenants 0..n-1, :func:`shapley_orders`), and each tenant's
    mean marginal contribution along them."""

    def __init__(self, orders: np.ndarray):
        self.ranks = np.argsort(orders, axis=1)  # position of tenant j in permutation m
        self.n = orders.shape[1]

    def coalitions(self) -> np.ndarray:
        """(M (n - 1), n) bool: each permutation's prefixes of 1..n-1 tenants."""
        n = self.n
        return (self.ranks[:, None, :] < np.arange(1, n)[None, :, None]).reshape(-1, n)

    def values(self, v: np.ndarray, G: float) -> np.ndarray:
        """(n,) the mean marginal contributions, from ``v`` the welfare of each row of
        :meth:`coalitions` and ``G`` the grand coalition's (the empty one's is 0)."""
        M, n = self.ranks.shape
        full = np.empty((M, n + 1))
        full[:, 0] = 0.0
        full[:, n] = G
        full[:, 1:n] = v.reshape(M, n - 1)
        m = np.arange(M)[:, None]
        return (full[m, self.ranks + 1] - full[m, self.ranks]).mean(0)


class Design(Protocol):
    """One cluster's sampled-Shapley plan: :class:`Orders`, :class:`Banded` or :class:`Regression`."""

    def coalitions(self) -> np.ndarray: ...

    def values(self, v: np.ndarray, G: float) -> np.ndarray: ...


def design(estimator: str, rng: np.random.Generator, n: int, M: int) -> Design:
    """The plan of ``estimator`` for ``n`` live tenants and ``M`` samples, drawn from ``rng``."""
    if estimator == "banded":
        return Banded(rng, n, M)
    if estimator == "regression":
        return Regression(rng, n, M)
    return Orders(shapley_orders(estimator, rng, n, M))


__all__ = ["MIN_TENANTS", "Banded", "Design", "Orders", "Regression", "design", "sampled_rows", "shapley_orders"]

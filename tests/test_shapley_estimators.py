"""Sampled Shapley's estimators (``RewardSpec.shapley_estimator``, ``shapley_sampling.shapley_orders``,
``shapley_sampling.Banded``, ``shapley_sampling.Regression``): what each draws, what it costs in kernel rows, that it keeps the efficiency
property, is unbiased and converges to exact Shapley, and the "Shapley for less" table of
docs/credit_assignment.md."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fleet_marl
from fleet_marl import credit
from fleet_marl.config import ConfigError, RewardSpec
from fleet_marl.config.rules import SHAPLEY_ESTIMATORS
from fleet_marl.kernel import Actions, Draws, RoundState
from fleet_marl.tasks import scaled

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "shapley_estimators.json"
DOC = ROOT / "docs" / "credit_assignment.md"
MARKERS = ("<!-- shapley-estimators:start -->", "<!-- shapley-estimators:end -->")
STRATA_MARKERS = ("<!-- shapley-strata:start -->", "<!-- shapley-strata:end -->")
ORDERS = tuple(e for e in SHAPLEY_ESTIMATORS if e not in ("banded", "regression"))  # the estimators that draw permutations


@contextlib.contextmanager
def _recording(seen):
    real = credit.CreditEngine.compute

    def spy(self, actions, state, draws, live, rngs=None):
        seen.append((actions, state, draws, np.array(live)))
        return real(self, actions, state, draws, live, rngs)

    credit.CreditEngine.compute = spy
    try:
        yield
    finally:
        credit.CreditEngine.compute = real


def rounds(n_rounds: int, policy: str = "random", **env_kw):
    """(kernel static, rounds): the credit engine's inputs of the first rounds of ``policy``'s
    episode (seed 0) on ``parallel_env(**env_kw)``."""
    from fleet_marl import policies

    env = fleet_marl.parallel_env(reward_scheme="difference", compute_all=False, **env_kw)
    pol = policies.make(policy, env)
    seen: list = []
    obs, infos = env.reset(seed=0)
    pol.reset(0)
    with _recording(seen):
        while env.agents and len(seen) < n_rounds:
            obs, _, _, _, infos = env.step(pol.act(obs, infos))

    def copy(x: Any) -> Any:
        return None if x is None else np.array(x)

    out = [
        (
            Actions(*(copy(getattr(a, f)) for f in ("gpus", "bid", "precision", "batch"))),
            RoundState(**{f.name: copy(getattr(s, f.name)) for f in fields(RoundState)}),
            Draws(*(copy(getattr(d, f.name)) for f in fields(Draws))),
            live,
        )
        for a, s, d, live in seen
    ]
    return env.kernel_static, out


def engine(st, estimator: str, M: int, exact_max: int | None = 0, schemes=("shapley",)):
    return credit.CreditEngine(
        st, RewardSpec(scheme="shapley", shapley_samples=M, shapley_estimator=estimator), schemes, exact_max=exact_max
    )


def values(eng, rnd, seed: int = 0):
    a, s, d, live = rnd
    c = eng.compute(a, s, d, live, [np.random.default_rng(seed)])
    return c.rewards["shapley"][0], int(c.rows[0]), float(c.welfare[0])


# --- configuration --------------------------------------------------------------------------


def test_the_default_is_today_s_permutations():
    assert RewardSpec().shapley_estimator == "permutation" == SHAPLEY_ESTIMATORS[0]
    got = credit.shapley_orders("permutation", np.random.default_rng(5), 12, 64)
    want = np.random.default_rng(5).permuted(np.tile(np.arange(12), (64, 1)), axis=1)  # what the engine always drew
    np.testing.assert_array_equal(got, want)


def test_an_unknown_estimator_is_a_config_error_naming_field_value_and_choices():
    with pytest.raises(ConfigError) as e:
        RewardSpec(shapley_estimator="owen")
    assert e.value.field == "shapley_estimator" and e.value.value == "owen"
    assert "'permutation', 'antithetic', 'stratified'" in str(e.value)
    with pytest.raises(ConfigError) as e:
        fleet_marl.parallel_env(task="hard", reward={"scheme": "shapley", "shapley_estimator": "Stratified"})
    assert e.value.field == "reward.shapley_estimator"
    with pytest.raises(ValueError, match="shapley_estimator 'owen'"):
        credit.shapley_orders("owen", np.random.default_rng(0), 9, 4)


# --- what each estimator draws, and its rows ------------------------------------------------------


@pytest.mark.parametrize("estimator", ORDERS)
@pytest.mark.parametrize("n", [2, 9, 16, 17])
def test_orders_are_permutations_and_rows_per_round_bounds_their_prefixes(estimator, n):
    for M in (1, 5, 16, 40):
        p = credit.shapley_orders(estimator, np.random.default_rng(M), n, M)
        assert p.shape == (M, n) and (np.sort(p, axis=1) == np.arange(n)).all()
        pre = np.argsort(p, axis=1)[:, None, :] < np.arange(1, n)[None, :, None]
        distinct = np.unique(pre.reshape(-1, n), axis=0).shape[0]
        assert distinct <= credit.sampled_rows(n, M, estimator)
        whole = 2 * -(-n // 2)  # permutations in one cycle
        one_cycle = whole >= M
        if estimator == "stratified" and one_cycle:  # one cycle: the count is exact
            assert distinct == credit.sampled_rows(n, M, estimator)
        if estimator == "antithetic":
            np.testing.assert_array_equal(p[1::2], p[0 : 2 * (M // 2) : 2, ::-1])  # each one's reverse follows it


def test_banded_and_regression_draw_no_permutations():
    with pytest.raises(ValueError, match="shapley_sampling.Banded"):
        credit.shapley_orders("banded", np.random.default_rng(0), 9, 4)
    with pytest.raises(ValueError, match="shapley_sampling.Regression"):
        credit.shapley_orders("regression", np.random.default_rng(0), 9, 4)


@pytest.mark.parametrize("n", [4, 5, 16, 40, 64])
@pytest.mark.parametrize("M", [1, 2, 5, 16, 24])
def test_regression_layout_coalitions_and_their_count(n, M):
    """The singletons, the removals, then max(n // 2 - 1, ceil(M n / 4)) coalitions with sizes
    spread evenly over 2..n // 2 (every size 2..n-2 sampled, with the complements), then their
    complements; the pairs spread evenly over the folds; Regression.rows counts them all (the
    distinct ones are fewer when two pairs coincide by chance)."""
    sizes = credit.Regression.layout(n, M)
    P = sizes.size
    assert max(n // 2 - 1, -(-M * n // 4)) == P
    per_size = np.bincount(sizes, minlength=n // 2 + 1)[2:]
    assert per_size.min() >= 1 and per_size.max() - per_size.min() <= 1
    d = credit.Regression(np.random.default_rng(7), n, M)
    co = d.coalitions()
    eye = np.eye(n, dtype=bool)
    assert (co[:n] == eye).all() and (co[n : 2 * n] == ~eye).all()
    pairs, complements = co[2 * n : 2 * n + P], co[2 * n + P :]
    assert (pairs.sum(1) == sizes).all() and (complements == ~pairs).all()
    assert credit.Regression.rows(n, M) == 2 * n + 2 * P == credit.sampled_rows(n, M, "regression")
    assert np.unique(co, axis=0).shape[0] <= 2 * n + 2 * P
    folds = np.bincount(d.fold[:P])
    assert (d.fold[P:] == d.fold[:P]).all() and folds.size == min(8, P) and folds.max() - folds.min() <= 1


def test_regression_draws_uniformly_random_coalitions_of_each_size():
    """What its Horvitz-Thompson term assumes: a coalition of s tenants holds each tenant with
    probability s / n (here 6 tenants, sizes 2 and 3, 12,000 pairs: within 5 standard errors)."""
    n = 6
    d = credit.Regression(np.random.default_rng(1), n, 8000)
    for s in (2, 3):
        at = d.pairs[d.pairs.sum(1) == s]
        p = s / n
        assert (np.abs(at.mean(0) - p) <= 5 * np.sqrt(p * (1 - p) / len(at))).all()


@pytest.mark.parametrize(("n", "M"), [(4, 1), (9, 3), (16, 8), (40, 2), (64, 16)])
def test_regression_is_exact_on_an_additive_game(n, M):
    """An additive game's welfare is its model's: no residual, each tenant gets its own value."""
    own = np.random.default_rng(n).normal(size=n)
    d = credit.Regression(np.random.default_rng(M), n, M)
    np.testing.assert_allclose(d.values(d.coalitions() @ own, own.sum()), own, atol=1e-6)


def test_regression_is_exact_shapley_below_four_tenants():
    """With fewer than 4 live tenants there is no size to sample: the engine computes exact
    Shapley over every coalition, whatever ``exact_max`` says."""
    st, rs = rounds(2, policy="greedy", task="easy", **scaled(3, "auction"))
    for rnd in rs:
        exact, rows, _ = values(engine(st, "permutation", 1, exact_max=None), rnd)
        got, rows_r, _ = values(engine(st, "regression", 8), rnd)
        np.testing.assert_array_equal(got, exact)
        assert rows_r == rows == 1 + 2**3


@pytest.mark.parametrize("n", [3, 5, 16, 40, 64])
@pytest.mark.parametrize("M", [1, 2, 4, 5, 8, 16, 24])
def test_banded_layout_coalitions_and_their_count(n, M):
    """The singletons, every arc of each band cycle's lengths n-h..n-1 (the n-1 ones are the
    removals), every reading's prefixes of 2..n-h tenants; Banded.rows counts the distinct ones,
    but for those two cycles share by chance."""
    h, nbands, pairs = credit.Banded.layout(n, M)
    assert h == max(1, min(-(-n // 4), M, n - 2)) and nbands == max(1, M // 8)
    assert sum(pairs) == max(1, M // 2) and max(pairs) <= 2
    d = credit.Banded(np.random.default_rng(7), n, M)
    co = d.coalitions()
    assert (co[:n] == np.eye(n, dtype=bool)).all()
    bands = co[n : n + nbands * n * h].reshape(nbands, h, n, n)
    assert (bands.sum(-1) == np.arange(n - h, n)[None, :, None]).all()  # n arcs of each length
    for band in bands:
        assert {frozenset(np.flatnonzero(~r)) for r in band[-1]} == {frozenset([i]) for i in range(n)}  # the removals
    reading = co[n + nbands * n * h :].reshape(d.orders.shape[0], n - h - 1, n)
    for t, order in enumerate(d.orders):
        assert [set(np.flatnonzero(r)) for r in reading[t]] == [set(order[:k]) for k in range(2, n - h + 1)]
    # Banded.rows counts each cycle's own coalitions exactly; across cycles some may coincide by chance
    own = 2 * n + nbands * n * (h - 1)  # singletons, removals, the other band arcs
    for g in np.unique(d.group):
        mine = reading[d.group == g].reshape(-1, n)
        own += np.unique(mine[mine.sum(1) <= n - 2], axis=0).shape[0]  # a prefix of n-1 tenants is a removal
    assert own == credit.Banded.rows(n, M) == credit.sampled_rows(n, M, "banded")
    assert np.unique(co, axis=0).shape[0] <= own


@pytest.mark.parametrize("n", [10, 16])
def test_a_whole_stratified_cycle_puts_every_tenant_at_every_position_once(n):
    p = credit.shapley_orders("stratified", np.random.default_rng(3), n, 3 * n)  # three cycles
    pos = np.argsort(p, axis=1)  # position of each tenant in each permutation
    for c in range(3):
        block = pos[c * n : (c + 1) * n]
        assert all(sorted(block[:, j]) == list(range(n)) for j in range(n))
    assert not (p[:n] == p[n : 2 * n]).all()  # a fresh cycle each time


def test_the_engine_evaluates_the_rows_rows_per_round_counts():
    """One stratified cycle (16 permutations of hard's 16 tenants): the engine evaluates exactly
    rows_per_round's rows; the other estimators, and every scheme at once, at most that."""
    st, rs = rounds(3, task="hard")
    default = fleet_marl.parallel_env(task="hard").default_actions
    for rnd in rs:
        n = int(rnd[3].sum())
        assert n == 16
        _, rows, _ = values(engine(st, "stratified", 16), rnd)
        assert rows == credit.rows_per_round(n, ("shapley",), 16, "stratified") == 1 + 8 * 15 * 2 - (64 - 8)
        for est in SHAPLEY_ESTIMATORS:
            for M in (7, 64):
                _, rows, _ = values(engine(st, est, M), rnd)
                assert rows <= credit.rows_per_round(n, ("shapley",), M, est)
        _, rows, _ = values(engine(st, "banded", 8), rnd)
        assert rows <= credit.rows_per_round(n, ("shapley",), 8, "banded") == 1 + 16 + 16 * 4 + 4 * 2 * 11 - 2 * 2
        spec = RewardSpec(scheme="shapley", shapley_samples=40, shapley_estimator="stratified")
        everything = credit.CreditEngine(st, spec, tuple(credit.SCHEMES), default)
        a, s, d, live = rnd
        c = everything.compute(a, s, d, live, [np.random.default_rng(1)])
        assert int(c.rows[0]) <= credit.rows_per_round(n, tuple(credit.SCHEMES), 40, "stratified")


# --- the values ----------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", SHAPLEY_ESTIMATORS)
def test_every_estimator_is_efficient_and_gives_a_tenant_not_live_nothing(estimator):
    st, rs = rounds(4, policy="greedy", task="hard")
    for rnd in rs:
        for M in (3, 16, 33):
            phi, _, G = values(engine(st, estimator, M), rnd, seed=M)
            assert phi.sum() == pytest.approx(G, abs=1e-9)  # sum = G(live) - G(empty), G(empty) = 0
            assert (phi[~rnd[3][0]] == 0).all()


@pytest.mark.parametrize("estimator", SHAPLEY_ESTIMATORS)
def test_same_seed_same_values_in_the_env(estimator):
    def play(seed):
        env = fleet_marl.parallel_env(task="hard", reward={"scheme": "shapley", "shapley_estimator": estimator, "shapley_samples": 8})
        obs, infos = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(2):
            acts = {a: np.array([rng.choice(np.flatnonzero(m)) for m in infos[a]["action_mask"]]) for a in env.agents}
            obs, rew, _, _, infos = env.step(acts)
            out.append([rew[a] for a in env.possible_agents if a in rew])
        return np.array(out)

    np.testing.assert_array_equal(play(4), play(4))
    assert not np.array_equal(play(4), play(5))


@pytest.mark.parametrize("estimator", SHAPLEY_ESTIMATORS)
def test_every_estimator_converges_to_exact_shapley(estimator):
    """Eight tenants competing at the auction (easy scaled, greedy play): 4,000 permutations
    within 6 % of the largest value of exact Shapley over the 256 coalitions, whichever way
    they are drawn."""
    st, rs = rounds(3, policy="greedy", task="easy", **scaled(8, "auction"))
    for r, rnd in enumerate(rs):
        exact, rows, _ = values(engine(st, estimator, 1, exact_max=None), rnd)
        assert rows == 1 + 2**8 == credit.rows_per_round(8, ("shapley",), 1)  # exact: the grand row and all 256 coalitions
        sampled, _, _ = values(engine(st, estimator, 4000), rnd, seed=r)
        scale = np.abs(exact).max()
        assert scale > 0.1
        np.testing.assert_allclose(sampled, exact, atol=0.06 * scale)


def test_banded_is_unbiased():
    """Every term of banded is an unbiased estimate: over 400 seeds its mean on recorded rounds
    (eight tenants at the auction, greedy play, where the marginals change most with the
    coalition) is within 4 standard errors of exact Shapley for every tenant, and its error
    falls as the samples grow."""
    st, rs = rounds(5, policy="greedy", task="easy", **scaled(8, "auction"))
    for r, rnd in enumerate(rs[1::2]):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=None), rnd)
        spread = []
        for M in (4, 16):
            eng = engine(st, "banded", M)
            phi = np.array([values(eng, rnd, seed=1000 * r + k)[0] for k in range(400)])
            se = phi.std(axis=0, ddof=1) / np.sqrt(len(phi))
            assert (np.abs(phi.mean(axis=0) - exact) <= 4 * se + 1e-9).all()
            spread.append(((phi - exact) ** 2).mean())
        assert spread[1] < spread[0]


def test_regression_is_unbiased():
    """Cross-fitting keeps regression unbiased: over 400 seeds its mean on recorded rounds (eight
    tenants at the auction, greedy play) is within 4 standard errors of exact Shapley for every
    tenant, and its error falls as the samples grow."""
    st, rs = rounds(5, policy="greedy", task="easy", **scaled(8, "auction"))
    for r, rnd in enumerate(rs[1::2]):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=None), rnd)
        spread = []
        for M in (2, 8):
            eng = engine(st, "regression", M)
            phi = np.array([values(eng, rnd, seed=1000 * r + k)[0] for k in range(400)])
            se = phi.std(axis=0, ddof=1) / np.sqrt(len(phi))
            assert (np.abs(phi.mean(axis=0) - exact) <= 4 * se + 1e-9).all()
            spread.append(((phi - exact) ** 2).mean())
        assert spread[1] < spread[0]


@pytest.mark.parametrize("policy", ["random", "greedy"])
def test_banded_converges_to_exact_shapley_as_the_samples_grow(policy):
    """Ten tenants at the auction against exact Shapley (1,024 coalitions): the mean square
    error over 30 draws falls as 1/M for an unbiased estimator of bounded variance; from 8 to
    128 samples (16x) it falls at least 8x on every round (measured: 16-19x)."""
    st, rs = rounds(3, policy=policy, task="easy", **scaled(10, "auction"))
    for rnd in rs[1:]:
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=10), rnd)
        mse = []
        for M in (8, 32, 128):
            eng = engine(st, "banded", M)
            mse.append(np.mean([((values(eng, rnd, seed=k)[0] - exact) ** 2).mean() for k in range(30)]))
        assert mse[0] > mse[1] > mse[2] and mse[2] <= mse[0] / 8


@pytest.mark.parametrize("policy", ["random", "greedy"])
def test_banded_with_few_samples_stays_near_the_values(policy):
    """The control's slope is fitted on two readings when M = 4; where the tenants' standalone
    values and difference rewards barely differ that fit is ill-posed, and before the slope was
    held to [0, 1] it reached 1e13 (the first measurement of "Shapley for less"). Every draw now
    stays within twice the largest value of exact Shapley."""
    st, rs = rounds(6, policy=policy, task="easy", **scaled(8, "auction"))
    for r, rnd in enumerate(rs):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=None), rnd)
        eng = engine(st, "banded", 4)
        worst = max(np.abs(values(eng, rnd, seed=1000 * r + k)[0] - exact).max() for k in range(60))
        assert worst <= 2 * np.abs(exact).max() + 1e-9


def test_banded_reaches_64_permutations_error_with_a_third_of_the_rows():
    """The claim of "Shapley for less" where the table holds it, with room: 16 tenants at the
    auction under greedy play against exact Shapley, banded with 6 samples (145 rows) errs less
    than 64 permutations (825 rows)."""
    st, rs = rounds(6, policy="greedy", task="easy", **scaled(16, "auction"))
    rs = rs[1::2]
    err = {"permutation": [], "banded": []}
    rows = {"permutation": [], "banded": []}
    for r, rnd in enumerate(rs):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=16), rnd)
        for est, M in (("permutation", 64), ("banded", 6)):
            for k in range(4):
                phi, rw, _ = values(engine(st, est, M), rnd, seed=100 * r + k)
                err[est].append(((phi - exact) ** 2).mean())
                rows[est].append(rw)
    assert 3 * np.mean(rows["banded"]) <= np.mean(rows["permutation"])
    assert np.mean(err["banded"]) < np.mean(err["permutation"])


def test_regression_reaches_64_permutations_error_with_a_third_of_the_rows_on_hard_under_random_play():
    """The claim of "Shapley for less" where no other estimator holds it: on hard's rounds under
    random play against exact Shapley, regression with 24 samples (225 rows) errs less than 64
    permutations (about 825)."""
    st, rs = rounds(6, policy="random", task="hard")
    rs = rs[::2]
    err = {"permutation": [], "regression": []}
    rows = {"permutation": [], "regression": []}
    for r, rnd in enumerate(rs):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=16), rnd)
        for est, M in (("permutation", 64), ("regression", 24)):
            for k in range(6):
                phi, rw, _ = values(engine(st, est, M), rnd, seed=100 * r + k)
                err[est].append(((phi - exact) ** 2).mean())
                rows[est].append(rw)
    assert 3 * np.mean(rows["regression"]) <= np.mean(rows["permutation"])
    assert np.mean(err["regression"]) < np.mean(err["permutation"])


def test_stratified_reaches_64_permutations_error_with_a_third_of_the_rows():
    """The claim of "Shapley for less", on hard's greedy rounds against exact Shapley: one
    stratified cycle (16 permutations, 185 rows) errs less than 64 permutations (about 825)."""
    st, rs = rounds(6, policy="greedy", task="hard")
    rs = rs[::2]
    err = {"permutation": [], "stratified": []}
    rows = {"permutation": [], "stratified": []}
    for r, rnd in enumerate(rs):
        exact, _, _ = values(engine(st, "permutation", 1, exact_max=16), rnd)
        for est, M in (("permutation", 64), ("stratified", 16)):
            for k in range(4):
                phi, rw, _ = values(engine(st, est, M), rnd, seed=100 * r + k)
                err[est].append(((phi - exact) ** 2).mean())
                rows[est].append(rw)
    assert 3 * np.mean(rows["stratified"]) <= np.mean(rows["permutation"])
    assert np.mean(err["stratified"]) < np.mean(err["permutation"])


# --- the measurement and its table ----------------------------------------------------------------


def _script():
    spec = importlib.util.spec_from_file_location("shapley_estimators", ROOT / "experiments" / "shapley_estimators.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_to_reach_interpolates_log_log():
    se = _script()
    curve = [(4, 100.0, 0.4), (8, 200.0, 0.1)]
    rows, bound = se.rows_to_reach(curve, 0.2)
    assert bound == "=" and rows == pytest.approx(100 * 2**0.5)  # halfway in log error, halfway in log rows
    assert se.rows_to_reach(curve, 0.5) == (100.0, "<=")
    assert se.rows_to_reach(curve, 0.05) == (200.0, ">")


def test_strata_split_a_marginal_s_variance_where_it_comes_from():
    """Games with a known answer: additive (a marginal is the tenant's own value: no variance),
    additive plus a function of the coalition's size (all of it the common profile), and one
    where two tenants' marginals depend on whether the other is present (within coalitions, and
    a trend in the position that is theirs more than the others')."""
    se = _script()
    n = 5
    masks = np.arange(1 << n)
    bits = (masks[:, None] >> np.arange(n)) & 1
    own = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
    additive = bits @ own
    v = se.strata(additive)
    assert {k: v[k] for k in ("profile", "tenant_x_position", "within", "within_top", "pairwise")} == dict.fromkeys(
        ("profile", "tenant_x_position", "within", "within_top", "pairwise"), 0.0
    )
    assert v["by_position"] == [0.0] * n
    sized = additive + np.array([0.0, 0, 0, 1, 3, 6])[bits.sum(1)]  # crowding once 3 are present
    v = se.strata(sized)
    assert v["profile"] > 0 and v["tenant_x_position"] == pytest.approx(0, abs=1e-12) and v["within"] == pytest.approx(0, abs=1e-12)
    paired = additive + 2.0 * bits[:, 0] * bits[:, 1]  # tenants 0 and 1 gain together: with whom, and a trend in k
    v = se.strata(paired)
    assert v["within"] > 0 and v["tenant_x_position"] > v["profile"] > 0
    assert v["pairwise"] == pytest.approx(1.0)  # a pairwise game explains all of its within-coalition variance
    assert np.mean(v["by_position"]) == pytest.approx(v["within"])
    trio = additive + 2.0 * bits[:, 0] * bits[:, 1] * bits[:, 2]  # only the three together: not pairwise
    assert 0.0 < se.strata(trio)["pairwise"] < 0.9


def test_the_docs_table_is_the_committed_data_rendered():
    se = _script()
    data = json.loads(DATA.read_text())
    text = DOC.read_text()
    start, end = (text.index(m) for m in MARKERS)
    assert se.render(data) in text[start:end]
    start, end = (text.index(m) for m in STRATA_MARKERS)
    assert se.render_strata(data) in text[start:end]
    assert [s["N"] for s in data["scenarios"] if "strata" in s] == [n for _, n, _ in se.SCENARIOS if n <= se.EXACT_UP_TO]
    assert data["command"] in text
    assert not data["settings"]["quick"]
    assert [(s["task"], s["N"], s["policy"]) for s in data["scenarios"]] == list(se.SCENARIOS)
    for s in data["scenarios"]:
        assert (s["reference"] == "exact") == (s["N"] <= se.EXACT_UP_TO)
        for e in s["estimators"].values():
            assert [p["M"] for p in e["curve"]] == list(se.GRID[: len(e["curve"])])


def test_the_script_runs_and_writes_its_table(tmp_path):
    out = tmp_path / "s.json"
    data = _script().main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(data))
    assert [s["N"] for s in data["scenarios"]] == [6, 16]
    for s in data["scenarios"]:
        assert set(s["estimators"]) == set(SHAPLEY_ESTIMATORS) and s["target"]["rows"] > 0

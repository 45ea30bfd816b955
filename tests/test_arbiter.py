"""Arbiter invariants (hypothesis) and mechanism examples."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from fleet_marl.kernel import KernelStatic, arbiter
from tests.conftest import make_config


def test_waterfill_known_answer():
    # capacity 10 among requests 2, 8, 8 -> 2, 4, 4 (max-min fair)
    x = arbiter.waterfill(np.array([[2, 8, 8]]), np.ones((1, 3)), np.array([10]), np.zeros(3))
    assert x.tolist() == [[2, 4, 4]]
    # weights 1:3 over capacity 8, large requests -> 2, 6
    x = arbiter.waterfill(np.array([[100, 100]]), np.array([[1.0, 3.0]]), np.array([8]), np.zeros(2))
    assert x.tolist() == [[2, 6]]
    # leftover GPU goes by the tie-break draw: 3 equal tenants, capacity 4
    x = arbiter.waterfill(np.array([[4, 4, 4]]), np.ones((1, 3)), np.array([4]), np.array([0.9, 0.1, 0.5]))
    assert x.tolist() == [[1, 2, 1]]


@settings(max_examples=300, deadline=None)
@given(
    caps=hst.lists(hst.integers(0, 20), min_size=1, max_size=9),
    capacity=hst.integers(0, 60),
    weights=hst.lists(hst.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0]), min_size=9, max_size=9),
    seed=hst.integers(0, 2**31 - 1),
)
def test_waterfill_invariants(caps, capacity, weights, seed):
    T = len(caps)
    c = np.array([caps])
    w = np.array([weights[:T]])
    tb = np.random.default_rng(seed).random(T)
    x = arbiter.waterfill(c, w, np.array([capacity]), tb)
    assert (x >= 0).all() and (x <= c).all()
    assert x.sum() == min(capacity, c.sum())


@settings(max_examples=300, deadline=None)
@given(
    caps=hst.lists(hst.integers(0, 20), min_size=2, max_size=9),
    capacity=hst.integers(0, 60),
    seed=hst.integers(0, 2**31 - 1),
)
def test_maxmin_removing_a_tenant_never_lowers_another(caps, capacity, seed):
    T = len(caps)
    c = np.array(caps)
    tb = np.random.default_rng(seed).random(T)
    rows = np.tile(c, (T + 1, 1))
    rows[1:][np.eye(T, dtype=bool)] = 0  # row 1 + i: tenant i removed
    x = arbiter.waterfill(rows, np.ones((T + 1, T)), np.full(T + 1, capacity), tb)
    for i in range(T):
        others = np.arange(T) != i
        assert (x[1 + i, others] >= x[0, others]).all(), (caps, capacity, i, x[0], x[1 + i])


@pytest.mark.parametrize("mechanism", ["proportional", "maxmin", "priority", "auction"])
@settings(max_examples=60, deadline=None)
@given(seed=hst.integers(0, 2**31 - 1))
def test_allocation_never_exceeds_nodes_or_requests(mechanism, seed):
    st = KernelStatic.from_config(make_config(n_tenants=5, nodes=("h100-sxm", "a100-80gb", "h100-sxm"), mechanism=mechanism))
    rng = np.random.default_rng(seed)
    B = 16
    req = rng.integers(0, 20, (B, st.T))
    bid = rng.choice([0.5, 1.0, 2.0], (B, st.T))
    alloc, mult = arbiter.clear(st, req, bid, rng.random(st.T))
    assert (alloc <= req).all() and (alloc >= 0).all()
    gon = arbiter.place(st, alloc)
    assert (gon.sum(-1) == alloc).all()  # every granted GPU is placed
    assert (gon.sum(1) <= st.gpus_per_node).all()  # no node over-allocated
    for q, cap in enumerate(st.pool_capacity):
        assert (alloc[:, st.pool == q].sum(-1) <= cap).all()
        # a tenant only sits on nodes of its own GPU type
    assert (gon[:, :, :] * (st.pool[:, None] != st.node_pool[None, :])).sum() == 0
    # prices never exceed the bid where the mechanism charges bids
    if mechanism in ("proportional", "auction"):
        assert (mult <= bid + 1e-12)[alloc > 0].all()


def test_priority_serves_higher_priority_first():
    st = KernelStatic.from_config(make_config(n_tenants=3, nodes=("h100-sxm",), mechanism="priority"))
    # priorities are 1, 2, 3 (make_config): tenant 2 first, then 1, then 0
    alloc, mult = arbiter.clear(st, np.array([[8, 8, 6]]), np.ones((1, 3)), np.zeros(3))
    assert alloc.tolist() == [[0, 2, 6]]
    assert (mult == 1.0).all()


def test_auction_uniform_clearing_price():
    st = KernelStatic.from_config(make_config(n_tenants=3, nodes=("h100-sxm",), mechanism="auction"))
    bid = np.array([[2.0, 1.5, 0.75]])
    alloc, mult = arbiter.clear(st, np.array([[4, 6, 8]]), bid, np.zeros(3))
    assert alloc.tolist() == [[4, 4, 0]]
    # the highest bid not fully served is tenant 1's 1.5: everyone served pays 1.5
    assert mult[0, 0] == mult[0, 1] == 1.5
    # below the reserve price (0.5) a bid gets nothing
    alloc, _ = arbiter.clear(st, np.array([[1, 1, 1]]), np.array([[0.25, 1.0, 1.0]]), np.zeros(3))
    assert alloc[0, 0] == 0


def test_placement_packs_onto_few_nodes():
    st = KernelStatic.from_config(make_config(n_tenants=3, nodes=("h100-sxm",) * 3))
    gon = arbiter.place(st, np.array([[8, 4, 4]]))
    assert (gon > 0).sum(-1).tolist() == [[1, 1, 1]]


def test_best_fit_avoids_needless_splits():
    # 5, 3, 5, 3 GPUs on two 8-GPU nodes: 5+3 | 5+3, nobody split (a contiguous layout splits one 5)
    st = KernelStatic.from_config(make_config(n_tenants=4, nodes=("h100-sxm",) * 2))
    gon = arbiter.place(st, np.array([[5, 3, 5, 3]]))
    assert (gon > 0).sum(-1).tolist() == [[1, 1, 1, 1]]
    assert gon.sum(1).tolist() == [[8, 8]]
    # 12 GPUs must span two nodes; the 4 left fit beside it
    gon = arbiter.place(st, np.array([[12, 4, 0, 0]]))
    assert (gon > 0).sum(-1).tolist() == [[2, 1, 0, 0]]

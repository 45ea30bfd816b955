"""Arbiter invariants (hypothesis) and mechanism examples, on the compiled round: the
water-filling rule directly, clearing and placement through ``kernel.evaluate``."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from fleet_marl import catalog
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, clearing, evaluate, mechanisms
from tests.conftest import make_config


def waterfill(caps, weights, capacity, tiebreak):
    """``clearing.waterfill`` on each row of ``caps`` (B, T); ``weights`` None: equal."""
    caps = np.asarray(caps, np.int64)
    B, T = caps.shape
    out = np.empty_like(caps)
    for b in range(B):
        w = np.ones(T) if weights is None else np.asarray(weights, np.float64)[b]
        scratch = [np.empty(T), np.empty(T), np.empty(T, np.int64), np.empty(T)]
        clearing.waterfill(caps[b], w, weights is None, int(capacity[b]), np.asarray(tiebreak, np.float64), out[b], *scratch, np.zeros(T))
    return out


def arbitrate(st, req, bid, tiebreak):
    """``(alloc, price multiplier, gpus_on_node)`` of the round for requests ``req`` (B, T) and
    bids (B, T): BF16 everywhere, batch 1, budgets that never bind."""
    req = np.asarray(req)
    B, T = req.shape
    acts = Actions(
        gpus=req,
        bid=np.asarray(bid, np.float64),
        precision=np.full((B, T, catalog.N_GROUPS), catalog.PRECISION_CODE["bf16"]),
        batch=np.ones((B, T), np.int64),
    )
    s0 = RoundState.initial(st)
    state = dataclasses.replace(s0, budget_left=np.full(T, 1e300))
    out = evaluate(st, acts, state, Draws(arrivals=np.zeros(T), tiebreak=np.asarray(tiebreak, np.float64)))
    return out.alloc, out.price / st.list_price, out.gpus_on_node


def static(n_tenants, nodes, mechanism="maxmin", max_gpus=8):
    cfg = make_config(n_tenants=n_tenants, nodes=nodes, mechanism=mechanism)
    cfg = dataclasses.replace(cfg, tenants=tuple(dataclasses.replace(t, max_gpus=max_gpus) for t in cfg.tenants))
    return KernelStatic.from_config(cfg)


def test_waterfill_known_answer():
    # capacity 10 among requests 2, 8, 8 -> 2, 4, 4 (max-min fair)
    x = waterfill(np.array([[2, 8, 8]]), np.ones((1, 3)), np.array([10]), np.zeros(3))
    assert x.tolist() == [[2, 4, 4]]
    # weights 1:3 over capacity 8, large requests -> 2, 6
    x = waterfill(np.array([[100, 100]]), np.array([[1.0, 3.0]]), np.array([8]), np.zeros(2))
    assert x.tolist() == [[2, 6]]
    # leftover GPU goes by the tie-break draw: 3 equal tenants, capacity 4
    x = waterfill(np.array([[4, 4, 4]]), np.ones((1, 3)), np.array([4]), np.array([0.9, 0.1, 0.5]))
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
    x = waterfill(c, w, np.array([capacity]), tb)
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
    x = waterfill(rows, None, np.full(T + 1, capacity), tb)
    for i in range(T):
        others = np.arange(T) != i
        assert (x[1 + i, others] >= x[0, others]).all(), (caps, capacity, i, x[0], x[1 + i])


@pytest.mark.parametrize("mechanism", ["proportional", "maxmin", "priority", "auction"])
@settings(max_examples=60, deadline=None)
@given(seed=hst.integers(0, 2**31 - 1))
def test_allocation_never_exceeds_nodes_or_requests(mechanism, seed):
    st = static(5, ("h100-sxm", "a100-80gb", "h100-sxm"), mechanism, max_gpus=20)
    rng = np.random.default_rng(seed)
    B = 16
    req = rng.integers(0, 20, (B, st.T))
    bid = rng.choice([0.5, 1.0, 2.0], (B, st.T))
    alloc, mult, gon = arbitrate(st, req, bid, rng.random(st.T))
    assert (alloc <= req).all() and (alloc >= 0).all()
    assert (gon.sum(-1) == alloc).all()  # every granted GPU is placed
    assert (gon.sum(1) <= st.gpus_per_node).all()  # no node over-allocated
    for q, cap in enumerate(st.pool_capacity):
        assert (alloc[:, st.pool == q].sum(-1) <= cap).all()
        # a tenant only sits on nodes of its own GPU type
    assert (gon[:, :, :] * (st.pool[:, None] != st.node_pool[None, :])).sum() == 0
    # prices never exceed the bid where the mechanism charges bids or a clearing price
    if mechanisms.mechanism(mechanism).afford_at_bid:
        assert (mult <= bid + 1e-12)[alloc > 0].all()


def test_priority_serves_higher_priority_first():
    st = static(3, ("h100-sxm",), "priority")
    # priorities are 1, 2, 3 (make_config): tenant 2 first, then 1, then 0
    alloc, mult, _ = arbitrate(st, np.array([[8, 8, 6]]), np.ones((1, 3)), np.zeros(3))
    assert alloc.tolist() == [[0, 2, 6]]
    assert (mult == 1.0).all()


def test_auction_uniform_clearing_price():
    st = static(3, ("h100-sxm",), "auction")
    bid = np.array([[2.0, 1.5, 0.75]])
    alloc, mult, _ = arbitrate(st, np.array([[4, 6, 8]]), bid, np.zeros(3))
    assert alloc.tolist() == [[4, 4, 0]]
    # the highest bid not fully served is tenant 1's 1.5: everyone served pays 1.5
    assert mult[0, 0] == mult[0, 1] == 1.5
    # below the reserve price (0.5) a bid gets nothing
    alloc, _, _ = arbitrate(st, np.array([[1, 1, 1]]), np.array([[0.25, 1.0, 1.0]]), np.zeros(3))
    assert alloc[0, 0] == 0


def test_placement_packs_onto_few_nodes():
    st = static(3, ("h100-sxm",) * 3)
    _, _, gon = arbitrate(st, np.array([[8, 4, 4]]), np.ones((1, 3)), np.zeros(3))
    assert (gon > 0).sum(-1).tolist() == [[1, 1, 1]]


def test_best_fit_avoids_needless_splits():
    # 5, 3, 5, 3 GPUs on two 8-GPU nodes: 5+3 | 5+3, nobody split (a contiguous layout splits one 5)
    st = static(4, ("h100-sxm",) * 2, max_gpus=16)
    _, _, gon = arbitrate(st, np.array([[5, 3, 5, 3]]), np.ones((1, 4)), np.zeros(4))
    assert (gon > 0).sum(-1).tolist() == [[1, 1, 1, 1]]
    assert gon.sum(1).tolist() == [[8, 8]]
    # 12 GPUs must span two nodes; the 4 left fit beside it
    _, _, gon = arbitrate(st, np.array([[12, 4, 0, 0]]), np.ones((1, 4)), np.zeros(4))
    assert (gon > 0).sum(-1).tolist() == [[2, 1, 0, 0]]

"""Placement that persists (``CouplingSpec.persistent_placement``): a tenant keeps its nodes from
round to round, grows where there is room, shrinks off its least-used nodes, and a removal row
moves nobody it did not free room for; without the switch every round is placed afresh."""

import dataclasses

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.config import CouplingSpec
from fleet_marl.kernel import Actions, Draws, KernelInputError, KernelStatic, RoundState, evaluate, evaluate_counterfactuals
from tests.conftest import make_config

BF16 = catalog.PRECISION_CODE["bf16"]


def _static(persist: bool, n_tenants=3, nodes=("h100-sxm",) * 3) -> KernelStatic:
    cfg = make_config(n_tenants=n_tenants, nodes=nodes, rack_power_cap_w=1e6)
    return KernelStatic.from_config(dataclasses.replace(cfg, coupling=CouplingSpec(persistent_placement=persist)))


def _round(st, gpus, prev_placement, prev_alloc=None):
    T = st.T
    acts = Actions(
        gpus=np.array(gpus, np.int64),
        bid=np.ones(T),
        precision=np.full((T, catalog.N_GROUPS), BF16, np.int64),
        batch=np.ones(T, np.int64),
    )
    pp = np.array(prev_placement, np.int64)
    s = dataclasses.replace(
        RoundState.initial(st), prev_placement=pp, prev_alloc=pp.sum(-1) if prev_alloc is None else np.array(prev_alloc, np.int64)
    )
    return evaluate(st, acts, s, Draws.expected(st))


def test_a_tenant_keeps_the_nodes_it_held():
    # tenant 0 holds 4 GPUs of node 2; afresh, best fit would move it to node 0 (all nodes empty)
    prev = [[0, 0, 4], [0, 0, 0], [0, 0, 0]]
    kept = _round(_static(True), [4, 0, 0], prev)
    assert kept.gpus_on_node[0].tolist() == [0, 0, 4] and not kept.restarted[0]
    afresh = _round(_static(False), [4, 0, 0], prev)
    assert afresh.gpus_on_node[0].tolist() == [4, 0, 0]


def test_a_tenant_that_grows_keeps_its_nodes_and_one_that_shrinks_leaves_its_least_used_first():
    st = _static(True)
    # tenant 0: 4 on node 0 and 2 on node 1; tenant 1: 6 on node 1 (node 1 is full)
    prev = [[4, 2, 0], [0, 6, 0], [0, 0, 0]]
    grown = _round(st, [8, 6, 0], prev)  # its 2 more go to the fullest node with room: node 0
    assert grown.gpus_on_node[0].tolist() == [6, 2, 0]
    assert grown.gpus_on_node[1].tolist() == [0, 6, 0] and grown.restarted[0] and not grown.restarted[1]
    shrunk = _round(st, [4, 6, 0], prev)
    assert shrunk.gpus_on_node[0].tolist() == [4, 0, 0]  # gave up node 1 (its 2), kept node 0 (its 4)
    assert shrunk.nodes_spanned[0] == 1


def test_new_tenants_take_the_free_room_around_the_kept_ones():
    st = _static(True)
    prev = [[5, 0, 0], [0, 5, 0], [0, 0, 0]]
    out = _round(st, [5, 5, 8], prev)
    assert out.gpus_on_node[0].tolist() == [5, 0, 0] and out.gpus_on_node[1].tolist() == [0, 5, 0]
    assert out.gpus_on_node[2].tolist() == [0, 0, 8]
    frag = _round(st, [5, 5, 6], [[5, 0, 0], [0, 5, 0], [0, 0, 0]])
    assert frag.gpus_on_node[2].sum() == 6 and frag.nodes_spanned[2] == 1  # node 2 is empty: one node
    # with 4 of node 2 kept too, a newcomer of 6 fits on no node: it spans the free room (3 + 3)
    prev3 = [[5, 0, 4], [0, 5, 4], [0, 0, 0]]
    spread = _round(st, [9, 9, 6], prev3)
    assert spread.gpus_on_node[2].tolist() == [3, 3, 0] and spread.nodes_spanned[2] == 2


def test_a_removal_row_moves_nobody_it_did_not_free_room_for():
    st = _static(True)
    prev = np.array([[0, 4, 0], [0, 0, 6], [2, 0, 0]])
    acts = Actions(
        gpus=np.array([4, 6, 2], np.int64),
        bid=np.ones(3),
        precision=np.full((3, catalog.N_GROUPS), BF16, np.int64),
        batch=np.ones(3, np.int64),
    )
    s = dataclasses.replace(RoundState.initial(st), prev_placement=prev, prev_alloc=prev.sum(-1))
    rows = evaluate_counterfactuals(st, acts, s, Draws.expected(st))
    for i in range(3):
        for t in range(3):
            if t != i:
                assert rows.gpus_on_node[1 + i, t].tolist() == rows.gpus_on_node[0, t].tolist(), (i, t)
    # afresh, a removal reshuffles the others (best fit into the freed room)
    st0 = _static(False)
    moved = evaluate_counterfactuals(st0, acts, dataclasses.replace(s, prev_placement=None), Draws.expected(st0))
    assert any((moved.gpus_on_node[1 + i, t] != moved.gpus_on_node[0, t]).any() for i in range(3) for t in range(3) if t != i)


def test_the_env_carries_the_placement_over_and_keeps_it_while_the_grant_holds():
    from fleet_marl.environment import FleetParallelEnv

    cfg = dataclasses.replace(make_config(n_tenants=3, nodes=("h100-sxm",) * 3), coupling=CouplingSpec(persistent_placement=True))
    env = FleetParallelEnv(config=cfg)
    env.reset(seed=0)
    acts = {a: env.action_space(a).sample() for a in env.agents}  # one fixed joint action, repeated
    seen = []
    for _ in range(4):
        env.step(acts)
        seen.append(np.array(env.round_state.prev_placement))
    assert seen[0].sum() > 0
    # the same grants every round: the same placement every round
    for s in seen[1:]:
        held_same = s.sum(-1) == seen[0].sum(-1)
        assert np.array_equal(s[held_same], seen[0][held_same])


def test_a_bad_prev_placement_is_refused_naming_the_field():
    st = _static(True)
    over = np.zeros((3, 3), np.int64)
    over[0, 0], over[1, 0] = 6, 6  # 12 GPUs on a node of 8
    with pytest.raises(KernelInputError, match="prev_placement"):
        _round(st, [1, 1, 1], over)
    with pytest.raises(KernelInputError, match="prev_placement"):
        _round(st, [1, 1, 1], -np.ones((3, 3), np.int64), prev_alloc=[0, 0, 0])
    other = KernelStatic.from_config(
        dataclasses.replace(
            make_config(n_tenants=2, nodes=("h100-sxm", "a100-80gb"), rack_power_cap_w=1e6),
            coupling=CouplingSpec(persistent_placement=True),
        )
    )
    wrong_pool = np.zeros((2, 2), np.int64)
    wrong_pool[0, 1] = 2  # tenant 0 is an H100 tenant; node 1 is an A100 node
    with pytest.raises(KernelInputError, match="GPU type"):
        _round(other, [1, 1], wrong_pool)

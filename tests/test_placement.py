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


# --- restarts that span rounds, migrations and lost work (docs/model.md section 12.3) ------------


def _trainer(persist: bool, n_tenants=1, nodes=("h100-sxm",), interval=0.0, **cluster_kw) -> KernelStatic:
    """Tenant 0 trains llama-3.1-8b (a 96 GB checkpoint: 12 bytes a parameter); tenant 1, if any, serves."""
    cfg = make_config(n_tenants=n_tenants, nodes=nodes, rack_power_cap_w=1e6, **cluster_kw)
    tenants = list(cfg.tenants)
    tenants[0] = dataclasses.replace(tenants[0], workload=dataclasses.replace(tenants[0].workload, checkpoint_interval_s=interval))
    return KernelStatic.from_config(dataclasses.replace(cfg, tenants=tuple(tenants), coupling=CouplingSpec(persistent_placement=persist)))


def _acts(st, gpus):
    return Actions(
        gpus=np.array(gpus, np.int64),
        bid=np.ones(st.T),
        precision=np.full((st.T, catalog.N_GROUPS), BF16, np.int64),
        batch=np.ones(st.T, np.int64),
    )


def _ckpt_s(st, n, nodes=1):
    """Seconds to read or write tenant 0's checkpoint on ``n`` GPUs over ``nodes`` nodes (section 7)."""
    return 12.0 * st.params[0].sum() / min(n * st.load_gpu_bps, nodes * st.load_node_bps)


def test_a_restart_of_one_and_a_half_rounds_idles_one_round_and_half_the_next():
    base = _trainer(True)
    R = base.round_seconds
    # the node's loaders slowed so that the restart (30 s fixed + the load) takes 1.5 rounds
    node_gbs = 12.0 * base.params[0].sum() / (1.5 * R - base.restart_seconds) / 1e9
    st = _trainer(True, checkpoint_load_gbs_per_node=node_gbs, checkpoint_load_gbs_per_gpu=100.0)
    s, d, a = RoundState.initial(st), Draws.expected(st), _acts(st, [8])
    one = evaluate(st, a, s, d)
    assert one.restarted[0] and one.restart_s[0] == R and one.progress_tokens[0] == 0.0
    assert one.restart_pending_s[0] == pytest.approx(0.5 * R, rel=1e-12)
    s2 = dataclasses.replace(one.next_state(), temp_c=s.temp_c)  # at the inlet temperature, as round 3
    two = evaluate(st, a, s2, d)
    assert not two.restarted[0] and two.restart_s[0] == pytest.approx(0.5 * R, rel=1e-12) and two.restart_pending_s[0] == 0.0
    three = evaluate(st, a, dataclasses.replace(two.next_state(), temp_c=s.temp_c), d)
    assert three.restart_s[0] == 0.0
    assert two.progress_tokens[0] == pytest.approx(0.5 * three.progress_tokens[0], rel=1e-9) and two.progress_tokens[0] > 0
    # without the switch the restart is cut at the round's end: nothing is carried over
    off = _trainer(False, checkpoint_load_gbs_per_node=node_gbs, checkpoint_load_gbs_per_gpu=100.0)
    first = evaluate(off, a, RoundState.initial(off), d)
    assert first.restart_s[0] == R and first.restart_pending_s[0] == 0.0
    second = evaluate(off, a, dataclasses.replace(first.next_state(), temp_c=s.temp_c), d)
    assert second.restart_s[0] == 0.0 and second.progress_tokens[0] == pytest.approx(three.progress_tokens[0], rel=1e-9)


def _held(st, gpus_on_node0, since=100.0, unsaved=1e9):
    pp = np.zeros((st.T, st.K), np.int64)
    pp[0, 0] = gpus_on_node0
    return dataclasses.replace(
        RoundState.initial(st),
        prev_placement=pp,
        prev_alloc=pp.sum(-1),
        since_ckpt_s=np.full(st.T, since) * (np.arange(st.T) == 0),
        unsaved_tokens=np.full(st.T, unsaved) * (np.arange(st.T) == 0),
    )


def test_a_preempted_trainer_loses_its_work_since_the_last_checkpoint():
    st = _trainer(True, n_tenants=2)  # a server arrives and asks for the node: max-min halves it
    s = _held(st, 8)
    out = evaluate(st, _acts(st, [8, 8]), s, Draws.expected(st))
    assert out.alloc.tolist() == [4, 4] and out.restarted[0]
    assert out.lost_tokens[0] == 1e9 and out.lost_s[0] == 100.0 and out.lost_tokens[1] == 0.0
    trained = out.progress_tokens[0] + 1e9
    assert trained > 0 and out.remaining_next[0] == pytest.approx(s.remaining_tokens[0] + 1e9 - trained, rel=1e-12)
    # a preemption pays no save: the fixed part and the load on its 4 GPUs
    assert out.restart_s[0] == pytest.approx(st.restart_seconds + _ckpt_s(st, 4), rel=1e-12)
    # its clock restarts from the checkpoint it reloaded: only this round's training since
    run_s = st.round_seconds - out.restart_s[0]
    assert out.since_ckpt_s[0] == pytest.approx(run_s, rel=1e-12) and out.unsaved_tokens[0] == pytest.approx(trained, rel=1e-12)
    # the switch off: nothing is lost
    off = _trainer(False, n_tenants=2)
    o2 = evaluate(off, _acts(off, [8, 8]), _held(off, 8), Draws.expected(off))
    assert o2.lost_tokens[0] == 0.0 and o2.since_ckpt_s[0] == 0.0 and o2.progress_tokens[0] > 0
    assert o2.remaining_next[0] == s.remaining_tokens[0] - o2.progress_tokens[0]


def test_a_planned_shrink_pays_the_save_and_loses_nothing():
    st = _trainer(True)
    R = st.round_seconds
    out = evaluate(st, _acts(st, [4]), _held(st, 8), Draws.expected(st))  # it asks for 4 of its 8
    assert out.alloc[0] == 4 and out.restarted[0] and out.lost_tokens[0] == 0.0
    # the save (96 GB at the node's 3.7 GB/s) and the load after it: 30 + 26 + 26 s, past the round
    total = st.restart_seconds + 2 * _ckpt_s(st, 4)
    assert total > R and out.restart_s[0] == R and out.restart_pending_s[0] == pytest.approx(total - R, rel=1e-12)
    # growing from nothing pays no save
    fresh = evaluate(st, _acts(st, [4]), RoundState.initial(st), Draws.expected(st))
    assert fresh.restart_s[0] == pytest.approx(st.restart_seconds + _ckpt_s(st, 4), rel=1e-12) and fresh.restart_pending_s[0] == 0.0


def test_a_change_during_a_restart_begins_a_new_one_and_an_unchanged_grant_carries_it_on():
    st = _trainer(True)
    s = dataclasses.replace(_held(st, 8, since=0.0, unsaved=0.0), restart_left_s=np.array([20.0]))
    kept = evaluate(st, _acts(st, [8]), s, Draws.expected(st))
    assert not kept.restarted[0] and kept.restart_s[0] == 20.0 and kept.restart_pending_s[0] == 0.0
    shrunk = evaluate(st, _acts(st, [4]), s, Draws.expected(st))  # planned, mid-restart: no save, a new load
    assert shrunk.restarted[0] and shrunk.restart_s[0] == pytest.approx(st.restart_seconds + _ckpt_s(st, 4), rel=1e-12)


def test_a_same_count_move_restarts_under_persistent_placement():
    st = _trainer(True, nodes=("h100-sxm",) * 2)
    # last round's placement shows 6 GPUs of node 0 and 2 of node 1 held; it is counted 6 and
    # keeps the 6 of node 0: its GPUs changed (the 2 of node 1 are gone), as when a caller moves it
    pp = np.zeros((st.T, st.K), np.int64)
    pp[0] = [6, 2]
    s = dataclasses.replace(_held(st, 0), prev_placement=pp, prev_alloc=np.array([6]))
    out = evaluate(st, _acts(st, [6]), s, Draws.expected(st))
    assert out.alloc[0] == 6 and out.gpus_on_node[0].tolist() == [6, 0]
    assert out.restarted[0] and out.lost_tokens[0] == 1e9 and out.restart_s[0] > 0
    same = dataclasses.replace(s, prev_placement=np.array([[6, 0]]))
    stay = evaluate(st, _acts(st, [6]), same, Draws.expected(st))
    assert not stay.restarted[0] and stay.restart_s[0] == 0.0 and stay.lost_tokens[0] == 0.0
    off = _trainer(False, nodes=("h100-sxm",) * 2)
    assert not evaluate(off, _acts(off, [6]), s, Draws.expected(off)).restarted[0]


def test_a_checkpoint_interval_resets_the_clock_at_each_write():
    st = _trainer(True, interval=25.0)
    s = _held(st, 8, since=10.0, unsaved=5e8)
    out = evaluate(st, _acts(st, [8]), s, Draws.expected(st))
    assert not out.restarted[0]
    R = st.round_seconds  # 10 + 60 s of training: writes at 25 and 50, 20 s since the last
    assert out.since_ckpt_s[0] == pytest.approx(10.0 + R - 50.0, rel=1e-12)
    assert out.unsaved_tokens[0] == pytest.approx(out.progress_tokens[0] * (10.0 + R - 50.0) / R, rel=1e-12)
    none = evaluate(_trainer(True), _acts(st, [8]), _held(st, 8, since=10.0, unsaved=5e8), Draws.expected(st))
    assert none.since_ckpt_s[0] == 10.0 + R and none.unsaved_tokens[0] == pytest.approx(5e8 + none.progress_tokens[0], rel=1e-12)


def test_the_env_carries_a_restart_over_and_reports_it():
    from fleet_marl.environment import FleetParallelEnv

    cfg = make_config(n_tenants=1, nodes=("h100-sxm",), rack_power_cap_w=1e6, checkpoint_load_gbs_per_node=0.5)
    cfg = dataclasses.replace(cfg, coupling=CouplingSpec(persistent_placement=True))
    env = FleetParallelEnv(config=cfg)
    env.reset(seed=0)
    act = np.array(env.default_action_index[0])
    act[0] = 8  # all 8 GPUs of the node
    _, _, _, _, infos = env.step({"tenant_0": act})
    pending = infos["tenant_0"]["restart_pending_s"]
    assert pending > 0 and env.round_state.restart_left_s[0] == pending  # 96 GB at 0.5 GB/s: past the round
    obs, _, _, _, infos = env.step({"tenant_0": act})
    assert infos["tenant_0"]["restart_s"] == pytest.approx(min(pending, env.kernel_static.round_seconds))

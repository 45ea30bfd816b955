"""Gang and layout constraints (``CouplingSpec.gang``, docs/model.md section 12.4): a trainer uses
whole tensor-parallel groups inside each node, a server one replica inside its fullest node at a
degree vLLM accepts; the GPUs it cannot use idle (idle power only) and are paid for; with the
switch off every granted GPU is used, as before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.config import ClusterSpec, ConfigError, CouplingSpec, FleetConfig, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate
from fleet_marl.kernel.gang import replica_degree
from tests import oracle
from tests.oracle_gang import usable_on_nodes

BF16 = catalog.PRECISION_CODE["bf16"]


def _static(gang=True, tp=4, server="llama-3.1-8b", nodes=3, persist=True) -> KernelStatic:
    """A TP-``tp`` Llama-3.1-8B trainer and a ``server`` on ``nodes`` H100 nodes of 8 GPUs, in one
    rack whose cap never binds, placement persisting (so a test sets where each tenant sits)."""
    tenants = (
        TenantSpec(kind="train", model="llama-3.1-8b", max_gpus=16, tensor_parallel=tp, workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="serve", model=server, max_gpus=8, workload=WorkloadSpec(prompt_tokens=512, output_tokens=128, rate=2.0)),
    )
    cfg = FleetConfig(
        cluster=ClusterSpec(gpu_types=("h100-sxm",) * nodes, nodes_per_rack=nodes, rack_power_cap_w=1e6),
        tenants=tenants,
        coupling=CouplingSpec(gang=gang, persistent_placement=persist),
    )
    return KernelStatic.from_config(cfg)


def _round(st, placement):
    """One round in which each tenant asks for, and keeps, the GPUs of ``placement`` (T, K)."""
    pp = np.array(placement, np.int64)
    acts = Actions(
        gpus=pp.sum(-1), bid=np.ones(st.T), precision=np.full((st.T, catalog.N_GROUPS), BF16, np.int64), batch=np.ones(st.T, np.int64)
    )
    state = dataclasses.replace(RoundState.initial(st), prev_placement=pp, prev_alloc=pp.sum(-1))
    out = evaluate(st, acts, state, Draws.expected(st))
    assert out.gpus_on_node.tolist() == pp.tolist()  # the placement the test meant
    want = oracle.evaluate(st, acts, state, Draws.expected(st))
    assert want.usable_gpus.tolist() == out.usable_gpus.tolist()
    np.testing.assert_allclose(want.tokens_per_s, out.tokens_per_s, rtol=1e-9)
    np.testing.assert_allclose(want.node_power_w, out.node_power_w, rtol=1e-9)
    return out


@pytest.mark.parametrize(
    ("trainer", "uses"),
    [
        ([6, 0, 0], 4),  # one whole group of 4 on the node; 2 GPUs idle
        ([4, 4, 0], 8),  # a group on each node, data parallel across
        ([3, 3, 0], 0),  # no node holds a whole group: nothing runs
        ([8, 5, 0], 12),  # 2 groups + 1 group; 1 GPU idle
    ],
)
def test_a_trainer_uses_whole_tensor_parallel_groups_inside_each_node(trainer, uses):
    out = _round(_static(), [trainer, [0, 0, 0]])
    assert out.alloc[0] == sum(trainer) and out.usable_gpus[0] == uses
    assert (out.tokens_per_s[0] > 0) == (uses > 0)


@pytest.mark.parametrize(
    ("server", "model", "uses"),
    [
        ([0, 0, 3], "llama-3.1-8b", 2),  # 32 heads: 3 does not divide them
        ([0, 2, 1], "llama-3.1-8b", 2),  # one replica inside one node: its 2 there
        ([0, 4, 4], "llama-3.1-8b", 4),  # not across nodes
        ([0, 0, 8], "llama-3.1-8b", 8),
        ([0, 0, 8], "qwen2.5-7b", 4),  # 28 heads, 4 KV heads: 7 divides the heads but not the KV heads
        ([0, 0, 7], "qwen2.5-14b", 4),  # 40 heads, 8 KV heads: 7 and 6 fail the heads, 5 the KV heads
    ],
)
def test_a_server_runs_one_replica_inside_its_fullest_node(server, model, uses):
    out = _round(_static(server=model), [[0, 0, 0], server])
    assert out.alloc[1] == sum(server) and out.usable_gpus[1] == uses


def test_replica_degree_follows_vllms_checks():
    assert [replica_degree(m, 32, 8) for m in range(9)] == [0, 1, 2, 2, 4, 4, 4, 4, 8]
    assert [replica_degree(m, 28, 4) for m in range(9)] == [0, 1, 2, 2, 4, 4, 4, 4, 4]
    assert [replica_degree(m, 12, 12) for m in range(9)] == [0, 1, 2, 3, 4, 4, 6, 6, 6]  # GPT-2: MHA, 12 heads
    assert [replica_degree(m, 14, 2) for m in range(9)] == [0, 1, 2, 2, 2, 2, 2, 2, 2]  # Qwen2.5-0.5B


def test_idle_gpus_are_paid_for_and_draw_idle_power_only():
    st = _static()
    out = _round(st, [[6, 0, 0], [0, 0, 0]])  # TP 4 on 6 GPUs: 4 run, 2 idle
    h100 = catalog.gpu("h100-sxm")
    hours = st.round_seconds / 3600.0
    assert out.spend[0] == pytest.approx(6 * h100.price_per_hour * hours)  # every granted GPU
    assert out.throttle[0] == 1.0
    assert out.node_power_w[0] == pytest.approx(8 * h100.idle_w + 4 * (h100.tdp_w - h100.idle_w))
    assert out.node_power_w[1] == pytest.approx(8 * h100.idle_w)
    ungang = _round(_static(gang=False), [[6, 0, 0], [0, 0, 0]])
    assert ungang.usable_gpus[0] == 6 and ungang.spend[0] == pytest.approx(out.spend[0])
    assert ungang.node_power_w[0] == pytest.approx(8 * h100.idle_w + 6 * (h100.tdp_w - h100.idle_w))
    # 4 GPUs do a step's work that 6 did: the same per-GPU batch, 4 / 6 of the tokens, about
    assert 0.6 < out.tokens_per_s[0] / ungang.tokens_per_s[0] < 0.7
    assert out.mem_weights[0] == pytest.approx(ungang.mem_weights[0] * 6 / 4)  # FSDP shards over the GPUs that run
    assert out.utility[0] < ungang.utility[0]
    none = _round(st, [[3, 3, 0], [0, 0, 0]])
    assert none.usable_gpus[0] == 0 and none.tokens_per_s[0] == 0 and none.progress_tokens[0] == 0
    assert none.spend[0] == pytest.approx(6 * h100.price_per_hour * hours) and none.utility[0] < 0
    assert not none.oom[0] and not none.vetoed[0]
    assert none.node_power_w[:2] == pytest.approx([8 * h100.idle_w] * 2)


def test_fragmentation_costs_a_newcomer_its_gpus():
    """With placement persisting, a newcomer granted 8 GPUs on 3 + 5 free ones uses 4 of them
    (TP 4); on an empty node it would use all 8."""
    st = _static(tp=4, server="llama-3.1-8b", nodes=2)
    pp = np.array([[0, 0], [5, 3]], np.int64)  # the server holds 5 + 3 (e.g. kept from before)
    acts = Actions(
        gpus=np.array([8, 8]), bid=np.ones(2), precision=np.full((2, catalog.N_GROUPS), BF16, np.int64), batch=np.ones(2, np.int64)
    )
    state = dataclasses.replace(RoundState.initial(st), prev_placement=pp, prev_alloc=pp.sum(-1))
    out = evaluate(st, acts, state, Draws.expected(st))
    assert out.gpus_on_node[0].tolist() == [3, 5] and out.usable_gpus[0] == 4  # 0 + 4
    assert out.usable_gpus[1] == 4  # the server's replica: 4 of its 5 on node 0 (5 does not divide 32)
    fresh = evaluate(st, acts, RoundState.initial(st), Draws.expected(st))
    assert fresh.usable_gpus.tolist() == [8, 8]


def test_switched_off_the_layout_changes_nothing():
    """Without ``coupling.gang`` a trainer's tensor-parallel degree is not read: the outcome is
    the same as with degree 1, bit for bit, and every granted GPU is used."""
    placements = [[[6, 0, 0], [0, 2, 1]], [[3, 3, 0], [0, 0, 3]], [[8, 5, 0], [0, 0, 7]]]
    for pp in placements:
        a, b = _round(_static(gang=False, tp=4), pp), _round(_static(gang=False, tp=1), pp)
        for f in dataclasses.fields(a):
            assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
        assert a.usable_gpus.tolist() == a.alloc.tolist()


def test_the_oracle_reads_the_same_layout():
    st = _static(server="qwen2.5-7b")
    gon = np.array([[[6, 0, 0], [0, 2, 1]], [[3, 5, 0], [0, 3, 3]]], np.int64)
    assert usable_on_nodes(st, gon).tolist() == [[[4, 0, 0], [0, 2, 0]], [[0, 4, 0], [0, 2, 0]]]


@pytest.mark.parametrize("seed", range(3))
def test_engine_agrees_with_the_oracle_with_gang_on(seed):
    """Random rounds, fresh to extreme states, every tenant's degree drawn, the switch on."""
    from tests.conftest import make_config
    from tests.test_oracle import agree_on_random_rounds

    rng = np.random.default_rng(seed)
    cfg = make_config(n_tenants=6, nodes=("h100-sxm", "a100-80gb", "h100-sxm", "h100-sxm"), rack_power_cap_w=9000.0, nodes_per_rack=2)
    tenants = tuple(
        dataclasses.replace(t, tensor_parallel=int(rng.choice([d for d in (1, 2, 4, 8) if catalog.model(t.model).heads % d == 0])))
        if t.kind == "train"
        else t
        for t in cfg.tenants
    )
    idle = False
    for persist in (False, True):
        cfg = dataclasses.replace(
            cfg, tenants=tenants, coupling=CouplingSpec(gang=True, persistent_placement=persist, contention=bool(seed % 2))
        )
        out = agree_on_random_rounds(KernelStatic.from_config(cfg), rng, 12, 12, f"gang seed {seed}")
        assert (out.usable_gpus <= out.alloc).all()
        idle = idle or (out.usable_gpus < out.alloc).any()
    assert idle  # the layouts left some granted GPUs idle


@pytest.mark.parametrize(
    ("tenant", "cluster", "field", "text"),
    [
        (dict(tensor_parallel=3), {}, "tensor_parallel", "a power of two"),
        (dict(tensor_parallel=64), {}, "tensor_parallel", "a power of two that divides the 32 attention heads"),
        (dict(model="qwen2.5-0.5b", tensor_parallel=4), {}, "tensor_parallel", "14 attention heads"),
        (dict(kind="serve", tensor_parallel=2), {}, "tensor_parallel", "1 for a serving tenant"),
        (dict(tensor_parallel=8), dict(gpus_per_node=4), "tenants[0].tensor_parallel", "at most gpus_per_node (4)"),
        (dict(tensor_parallel=0), {}, "tensor_parallel", "an integer in [1, 1024]"),
    ],
)
def test_a_bad_degree_is_named(tenant, cluster, field, text):
    with pytest.raises(ConfigError) as e:
        FleetConfig(cluster=ClusterSpec(**cluster), tenants=(TenantSpec(**tenant),))
    msg = str(e.value)
    assert field in msg and str(tenant["tensor_parallel"]) in msg and text in msg, msg

"""Contention (``coupling.contention``, docs/model.md section 12.1): the topology as data (the
ClusterSpec fields, the catalog's reference designs and their checks), the compiled stage
against the numpy oracle (hypothesis-drawn scenarios with the switch on), known answers for
the shared leaf uplinks and the shared storage, the switch's no-op cases, and two multi-leaf
trainers whose difference reward is not their local reward because they slow each other."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hst

import fleet_marl
from fleet_marl import catalog, policies
from fleet_marl.config import ClusterSpec, ConfigError, CouplingSpec, FleetConfig, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate, evaluate_counterfactuals, stage1
from tests import oracle, oracle_contention, strategies
from tests.test_oracle import FIELDS, agree_on_random_rounds, assert_agree

BF16 = catalog.PRECISION_CODE["bf16"]


def _two_trainers(contention=True, oversubscription=4.0, gpus=20, storage=None, model="llama-3.1-8b", nodes=6):
    """Two trainers of ``gpus`` GPUs each on ``nodes`` H100 nodes, two nodes a rack and a leaf:
    best-fit decreasing puts the first on nodes 0-2 and the second on nodes 3-5 at 20 GPUs, so
    both cross leaf 1 (nodes 2 and 3)."""
    cl = ClusterSpec(
        gpu_types=("h100-sxm",) * nodes,
        nodes_per_rack=2,
        uplink_oversubscription=oversubscription,
        storage_gbs=storage,
        rack_power_cap_w=1e6,
    )
    ts = tuple(
        TenantSpec(kind="train", model=model, gpu_type="h100-sxm", max_gpus=64, workload=WorkloadSpec(seq_len=4096)) for _ in range(2)
    )
    return FleetConfig(cluster=cl, tenants=ts, coupling=CouplingSpec(contention=contention))


def _round(st, gpus=(20, 20), prev=None, batch=1):
    T = st.T
    acts = Actions(gpus=np.array(gpus), bid=np.ones(T), precision=np.full((T, catalog.N_GROUPS), BF16), batch=np.full(T, batch))
    state = RoundState(
        prev_alloc=np.array(gpus if prev is None else prev),
        temp_c=np.full(st.K, st.ambient_c),
        queue=np.zeros(T),
        remaining_tokens=np.full(T, 1e15),
        budget_left=np.full(T, 1e9),
    )
    draws = Draws(arrivals=np.zeros(T), tiebreak=np.linspace(0.1, 0.9, T))
    return acts, state, draws


# --- topology as data ---------------------------------------------------------------------------


def test_cluster_topology_fields_are_checked_with_the_field_named():
    for kw, field in (
        (dict(uplink_oversubscription=0.5), "uplink_oversubscription"),
        (dict(uplink_oversubscription=float("inf")), "uplink_oversubscription"),
        (dict(nodes_per_leaf=0), "nodes_per_leaf"),
        (dict(nodes_per_leaf=1.5), "nodes_per_leaf"),
        (dict(storage_gbs=0.0), "storage_gbs"),
        (dict(storage_gbs=-3.0), "storage_gbs"),
    ):
        with pytest.raises(ConfigError, match=field):
            ClusterSpec(**kw)
    with pytest.raises(ConfigError, match="checkpoint_interval_s = -1.0"):
        WorkloadSpec(checkpoint_interval_s=-1.0)
    assert ClusterSpec().leaf_nodes == ClusterSpec().nodes_per_rack  # one leaf a rack by default
    assert ClusterSpec(nodes_per_leaf=3).leaf_nodes == 3


def test_every_reference_topology_builds_a_cluster_with_its_sources():
    """Each design of ``catalog/topologies.yaml`` has sources, a catalog GPU, and builds the
    ClusterSpec it describes, by ``from_topology`` and by a config's ``topology:`` key."""
    designs = catalog.topologies()
    assert {"dgx-h100-superpod-su", "azure-nd-h100-v5", "meta-llama3-24k", "crux-a100-testbed"} <= set(designs)
    for name, topo in designs.items():
        assert topo.source and all(isinstance(s, str) and len(s) > 20 for s in topo.source), name
        cl = ClusterSpec.from_topology(name, nodes=5)
        assert cl.gpu_types == (topo.gpu_type,) * 5 and cl.leaf_nodes == topo.nodes_per_leaf
        assert cl.uplink_oversubscription == topo.uplink_oversubscription and cl.storage_gbs == topo.storage_gbs
        assert ClusterSpec.from_topology(name).num_nodes == topo.nodes
        text = yaml.safe_dump(
            {
                "cluster": {"topology": name, "gpu_types": [topo.gpu_type] * 5},
                "tenants": [{"model": "llama-3.1-8b", "gpu_type": topo.gpu_type}],
            }
        )
        cfg = FleetConfig.from_dict(yaml.safe_load(text))
        assert cfg.cluster == dataclasses.replace(cl, gpu_types=(topo.gpu_type,) * 5)
    meta = ClusterSpec.from_topology("meta-llama3-24k", nodes=768)
    assert (meta.leaf_nodes * meta.gpus_per_node, meta.uplink_oversubscription, meta.storage_gbs) == (3072, 7.0, 2000.0)
    assert ClusterSpec.from_topology("meta-llama3-24k", nodes=2, rack_power_cap_w=9e3).rack_power_cap_w == 9e3


def test_unknown_topologies_and_fields_are_errors_naming_them():
    with pytest.raises(ConfigError, match="topology = 'dgx-a100'.*meta-llama3-24k"):
        ClusterSpec.from_topology("dgx-a100")
    with pytest.raises(ConfigError, match="cluster.topology"):
        FleetConfig.from_dict({"cluster": {"topology": "nope"}, "tenants": [{"model": "llama-3.1-8b", "gpu_type": "h100-sxm"}]})
    with pytest.raises(ConfigError, match="uplinks"):
        ClusterSpec.from_topology("azure-nd-h100-v5", uplinks=3)
    with pytest.raises(ConfigError, match="nodes"):
        ClusterSpec.from_topology("azure-nd-h100-v5", nodes=0)
    with pytest.raises(catalog.CatalogError, match="unknown topology"):
        catalog.topology("nope")


def test_leaf_uplinks_are_the_leafs_nic_bandwidth_over_the_oversubscription():
    cl = ClusterSpec(gpu_types=("h100-sxm",) * 5 + ("l40s",) * 2, nodes_per_rack=2, nodes_per_leaf=3, uplink_oversubscription=4.0)
    st = KernelStatic.from_config(FleetConfig(cluster=cl, tenants=(TenantSpec(model="llama-3.1-8b"),)))
    np.testing.assert_array_equal(st.node_leaf, [0, 0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(st.node_rack, [0, 0, 1, 1, 2, 2, 3])
    h100, l40s = 8 * 50e9, 8 * min(catalog.gpu("l40s").interconnect_gbs, 50.0) * 1e9  # each GPU's NIC, at most its link
    np.testing.assert_allclose(st.leaf_uplink_bps, np.array([3 * h100] * 3 + [2 * h100 + l40s] * 3 + [l40s]) / 4.0)
    assert (
        st.storage_bps == np.inf
        and KernelStatic.from_config(FleetConfig(cluster=dataclasses.replace(cl, storage_gbs=2.5))).storage_bps == 2.5e9
    )


# --- the stage against the oracle ---------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(cfg=strategies.fleet_configs(), seed=hst.integers(0, 2**31 - 1), rows=hst.integers(1, 8))
def test_drawn_scenarios_with_contention_agree_with_the_oracle(cfg, seed, rows):
    cfg = dataclasses.replace(cfg, coupling=dataclasses.replace(cfg.coupling, contention=True))
    st = KernelStatic.from_config(cfg)
    rng = np.random.default_rng(seed)
    agree_on_random_rounds(st, rng, rows, int(rng.integers(1, 3 * cfg.cluster.gpus_per_node + 1)), "contention", calm=(rows + 1) // 2)


@pytest.mark.parametrize("oversubscription", [1.0, 7.0, 16.0])
@pytest.mark.parametrize("storage", [None, 1.0])
def test_crossing_trainers_and_restarts_agree_with_the_oracle(oversubscription, storage):
    """Many rows of scenarios where trainers do cross leaves and restart together (the drawn
    ones reach it only sometimes): nine nodes of three leaves, four trainers and a server."""
    cl = ClusterSpec(
        gpu_types=("h100-sxm",) * 9, nodes_per_rack=3, uplink_oversubscription=oversubscription, storage_gbs=storage, rack_power_cap_w=1e6
    )
    ts = tuple(
        TenantSpec(kind="train", model=m, gpu_type="h100-sxm", max_gpus=40)
        for m in ("llama-3.1-8b", "mistral-7b", "qwen2.5-0.5b", "llama-3.1-8b")
    )
    ts += (TenantSpec(kind="serve", model="llama-3.1-8b", gpu_type="h100-sxm", max_gpus=8),)
    st = KernelStatic.from_config(FleetConfig(cluster=cl, tenants=ts, coupling=CouplingSpec(contention=True)))
    out = agree_on_random_rounds(st, np.random.default_rng(7), 24, 24, "crossing", calm=12)
    assert (out.link_load > 0).any() and (out.slowdown > 1).any() == (oversubscription > 1.0)


# --- known answers ------------------------------------------------------------------------------


def test_two_trainers_on_a_shared_leaf_slow_each_other_as_the_rule_says():
    """Both cross leaf 1; each sees its own link rate plus the other's mean load there: the
    slowdown and link load by hand from the uncontended step (docs/model.md section 12.1)."""
    base = KernelStatic.from_config(_two_trainers(contention=False))
    st = KernelStatic.from_config(_two_trainers(oversubscription=4.0))
    alone = evaluate(base, *_round(base))
    out = evaluate(st, *_round(st))
    np.testing.assert_array_equal(out.gpus_on_node, [[8, 8, 4, 0, 0, 0], [0, 0, 0, 8, 8, 4]])
    n, nodes, seq = 20.0, 3.0, 4096.0
    d = min(450e9, n / nodes * 50e9)  # the ring's link rate: 20/3 GPUs a node's NICs, under NVLink
    comm = stage1(st, np.full((2, catalog.N_GROUPS), BF16)).comm_bytes * (n - 1) / n / d
    step = n * seq / alone.tokens_per_s  # batch 1
    mean = comm / step * d  # no restart: the whole round
    capacity = 2 * 8 * 50e9 / 4.0  # leaf 1: two nodes' NICs over 4
    s = np.maximum((d + mean[::-1]) / capacity, 1.0)  # its own rate plus the other's mean load
    slowed = step + 0.5 * comm * (s - 1.0)
    np.testing.assert_allclose(out.slowdown, slowed / step, rtol=1e-12)
    np.testing.assert_allclose(out.tokens_per_s, alone.tokens_per_s * step / slowed, rtol=1e-12)
    # the most loaded leaf each crosses: leaf 1 (both), over leaf 0's or 2's (one each)
    np.testing.assert_allclose(out.link_load, mean.sum() / capacity, rtol=1e-12)
    assert (out.slowdown > 1.05).all()
    # non-blocking: the leaf carries both rings at full rate
    flat = evaluate(KernelStatic.from_config(_two_trainers(oversubscription=1.0)), *_round(st))
    np.testing.assert_array_equal(flat.slowdown, [1.0, 1.0])
    np.testing.assert_array_equal(flat.tokens_per_s, alone.tokens_per_s)


def test_more_oversubscription_never_speeds_a_crossing_trainer():
    rates = [
        evaluate(st, *_round(st)).tokens_per_s[0]
        for st in (KernelStatic.from_config(_two_trainers(oversubscription=o)) for o in (1, 2, 4, 8, 16))
    ]
    assert all(a >= b for a, b in itertools.pairwise(rates)) and rates[-1] < rates[0]


def test_restarts_share_the_storage_max_min_fair():
    """Two trainers restart together on a 2 GB/s storage: each alone would read at its nodes'
    rate (3 x 3.7 GB/s); together they split 2 GB/s equally until the smaller finishes, whose
    share then goes to the other (qwen2.5-0.5b vs llama-3.1-8b checkpoints)."""
    cfg = _two_trainers(storage=2.0, oversubscription=1.0)
    cfg = dataclasses.replace(
        cfg,
        tenants=(cfg.tenants[0], dataclasses.replace(cfg.tenants[1], model="qwen2.5-0.5b")),
        cluster=dataclasses.replace(cfg.cluster, round_seconds=3600.0),
    )
    st = KernelStatic.from_config(cfg)
    out = evaluate(st, *_round(st, prev=(0, 0)))
    ckpt = 12.0 * st.params.sum(-1)  # fp32 master and Adam's two moments
    small, big = ckpt[1], ckpt[0]
    t_small = small / 1e9  # 1 GB/s each
    t_big = t_small + (big - small) / 2e9  # then the whole 2 GB/s
    np.testing.assert_allclose(out.restart_s, [30.0 + t_big, 30.0 + t_small], rtol=1e-12)
    # one restart alone reads at its own rate (3 nodes x 3.7 GB/s > 2 GB/s: the storage)
    alone = evaluate(st, *_round(st, prev=(0, 20)))
    np.testing.assert_allclose(alone.restart_s, [30.0 + big / 2e9, 0.0], rtol=1e-12)
    # unlimited storage: today's restart, and the oracle's loads agree on a harder case
    free = KernelStatic.from_config(dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, storage_gbs=None)))
    off = KernelStatic.from_config(dataclasses.replace(cfg, coupling=CouplingSpec()))
    np.testing.assert_array_equal(evaluate(free, *_round(free, prev=(0, 0))).restart_s, evaluate(off, *_round(off, prev=(0, 0))).restart_s)
    got = oracle_contention.load_seconds(6.0, np.array([4.0, 30.0, 12.0, 0.0]), np.array([1.0, 10.0, 10.0, 5.0]))
    # 1, 2.5, 2.5 GB/s until the 12 GB one ends at 4.8 s (the 4 GB one at 4 s first): by hand
    t1 = 4.0  # the 4 GB load at 1 GB/s; meanwhile the others get 2.5 each: 10 GB each
    t2 = t1 + (12.0 - 10.0) / 3.0  # then 3 GB/s each
    t3 = t2 + (30.0 - 10.0 - 2.0) / 6.0  # then the whole 6 GB/s, at most its cap of 10
    np.testing.assert_allclose(got, [t1, t3, t2, 0.0], rtol=1e-12)


def test_checkpoint_writes_cost_their_time_and_share_the_storage():
    """A trainer checkpointing every ``I`` seconds trains ``I / (I + w)`` of its time, ``w`` its
    checkpoint (12 bytes a parameter) at its nodes' rate; two writers on a storage narrower than
    one's rate slow each other's writes by the other's mean rate; no interval, no cost."""
    cfg = _two_trainers(oversubscription=1.0)
    every = (600.0, 0.0)
    cfg = dataclasses.replace(
        cfg,
        tenants=tuple(
            dataclasses.replace(t, workload=dataclasses.replace(t.workload, checkpoint_interval_s=e))
            for t, e in zip(cfg.tenants, every, strict=True)
        ),
    )
    none = KernelStatic.from_config(dataclasses.replace(cfg, tenants=_two_trainers().tenants))
    st = KernelStatic.from_config(cfg)
    base, out = evaluate(none, *_round(none)), evaluate(st, *_round(st))
    ckpt = 12.0 * st.params.sum(-1)[0]
    rate = min(20 * 1.56e9, 3 * 3.7e9)  # 20 GPUs' loaders, 3 nodes
    w = ckpt / rate
    np.testing.assert_allclose(out.tokens_per_s, base.tokens_per_s * np.array([600.0 / (600.0 + w), 1.0]), rtol=1e-12)
    np.testing.assert_array_equal(out.slowdown, base.slowdown)  # a step's time is unchanged
    # both write every 600 s onto 5 GB/s: each sees its own rate plus the other's mean
    both = dataclasses.replace(
        cfg,
        tenants=tuple(dataclasses.replace(t, workload=dataclasses.replace(t.workload, checkpoint_interval_s=600.0)) for t in cfg.tenants),
        cluster=dataclasses.replace(cfg.cluster, storage_gbs=5.0),
    )
    st2 = KernelStatic.from_config(both)
    two = evaluate(st2, *_round(st2))
    s = (rate + w / (600.0 + w) * rate) / 5e9
    np.testing.assert_allclose(two.tokens_per_s, base.tokens_per_s * 600.0 / (600.0 + s * w), rtol=1e-12)
    assert_agree(two, oracle.evaluate(st2, *_round(st2)))


def test_with_nothing_shared_the_switch_changes_nothing():
    """Contention on, but every tenant inside one leaf and no storage limit: every field as
    with the switch off (the goldens hold the switch-off round to its digests)."""
    for gpus, prev in (((12, 16), (12, 16)), ((12, 16), (0, 4))):
        on = KernelStatic.from_config(_two_trainers(nodes=4))
        off = KernelStatic.from_config(_two_trainers(contention=False, nodes=4))
        a, b = evaluate(on, *_round(on, gpus, prev)), evaluate(off, *_round(off, gpus, prev))
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert_agree(a, oracle.evaluate(on, *_round(on, gpus, prev)))


# --- coupling -----------------------------------------------------------------------------------


def test_two_crossing_trainers_have_a_difference_reward_apart_from_their_local_one():
    """On an oversubscribed cluster each trainer's removal speeds the other up: its difference
    reward ``G - G_{-i}`` (the kernel's counterfactual rows) falls short of its local reward
    ``u_i`` by what it costs the other; with the switch off the two are equal."""
    gaps = {}
    for contention in (False, True):
        st = KernelStatic.from_config(_two_trainers(contention=contention, oversubscription=8.0))
        acts, state, draws = _round(st)
        one = evaluate_counterfactuals(st, acts, state, draws)
        g, g_without = one.welfare[0], one.welfare[1:]
        local = one.utility[0]
        gaps[contention] = (g - g_without) - local
    np.testing.assert_allclose(gaps[False], 0.0, atol=1e-12)
    assert (gaps[True] < -0.05 * np.abs(evaluate(st, *_round(st)).utility)).all(), gaps


def test_through_the_env_fair_share_play_has_the_two_trainers_slow_each_other():
    """The public API: the ParallelEnv on the two-trainer cluster at 1:8 with every scheme
    computed, played by ``fair_share`` (24 GPUs each: both cross the middle leaf). With the
    switch on the infos show each slowed and its difference reward below its local reward; with
    it off the two are equal and nobody is slowed."""
    for contention in (False, True):
        env = fleet_marl.parallel_env(config=_two_trainers(contention=contention, oversubscription=8.0), compute_all=True)
        pol = policies.make("fair_share", env)
        obs, infos = env.reset(seed=0)
        for _ in range(3):
            obs, _, _, _, infos = env.step(pol.act(obs, infos))
            for info in infos.values():
                gap = info["reward_local"] - info["reward_difference"]
                if contention:
                    assert info["slowdown"] > 1.1 and info["link_load"] > 0 and gap > 0.01 * info["reward_local"], info
                else:
                    assert info["slowdown"] == 1.0 and gap == pytest.approx(0.0, abs=1e-12), info


def test_the_oracles_storage_schedule_ends_two_tied_loads_together():
    """Two equal loads finish together even when rounding leaves one's bytes at or below zero
    while its time rounds above the other's (the oracle reported it finished at 0 s: found on
    a coupled revision of ``hard``'s counterfactual rows, two identical trainers restarting together)."""
    size = np.array([49783752225.47945, 9124692677.179739, 9124692677.179739])
    caps = np.array([12894186006.35415, 11481179900.419714, 11481179900.419714])
    finish = oracle_contention.load_seconds(2555406076.8672643, size, caps)
    assert finish[1] == finish[2] > 0 and finish[0] > finish[1]

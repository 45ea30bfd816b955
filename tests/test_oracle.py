"""The compiled round (``fleet_marl.kernel.engine``) agrees with the independent numpy oracle
(``tests/oracle.py``) to 1e-9: on hypothesis-generated inputs of every mechanism and safety
mode; on whole scenarios drawn field by field (``tests/strategies.py``), where every config
field the round reads varies (a test fails when one does not, and another holds the fields
left out to never reaching the round); on every catalog model trained and served on every
catalog GPU type; with each config field shown to change the round's outcome in both; and on
whole episodes of every task, where the env runs once on the engine and once with the oracle
in its place."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as hst

import fleet_marl
from fleet_marl import credit
from fleet_marl.config import MECHANISMS, ClusterSpec, CouplingSpec, FleetConfig, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, Outcome, RoundState, evaluate, evaluate_counterfactuals, evaluate_welfare
from fleet_marl.tasks import TASKS
from tests import oracle, strategies
from tests.conftest import make_config, random_actions

FIELDS = [f.name for f in dataclasses.fields(Outcome)]


def assert_agree(a, b, where=""):
    """Integer and boolean fields equal; float fields within 1e-9 (relative, or absolute below 1)."""
    for name in FIELDS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and x.dtype == y.dtype, (where, name, x.shape, y.shape, x.dtype, y.dtype)
        if x.dtype.kind in "biu":
            np.testing.assert_array_equal(x, y, err_msg=f"{where} {name}")
        else:
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9, err_msg=f"{where} {name}")


def random_placement(st, rng, rows):
    """A random placement last round (rows, T, K): each GPU of each node held by a random tenant
    of its pool, or by nobody."""
    pp = np.zeros((rows, st.T, st.K), np.int64)
    for k in range(st.K):
        mine = np.flatnonzero(st.pool == st.node_pool[k])
        holder = rng.integers(-1, len(mine), (rows, st.gpus_per_node))
        for j, t in enumerate(mine):
            pp[:, t, k] = (holder == j).sum(-1)
    return pp


def agree_on_random_rounds(st, rng, rows, max_gpus, where="", batches=None, calm=0):
    """``rows`` random rounds of ``st`` (actions, states from fresh to extreme, request lengths)
    on the engine and the oracle, every tenant present and a random subset; the counterfactual
    rows of the first; the welfare-only rows of ``evaluate_welfare``. ``batches``: the batch
    sizes to request (default: ``random_actions``' 1-32); the first ``calm`` rows start at the
    inlet temperature with budget and work to spare. Returns the engine's outcome with every
    tenant present."""
    acts = random_actions(st, rng, rows, max_gpus=max_gpus)
    if batches is not None:
        acts = dataclasses.replace(acts, batch=rng.choice(batches, acts.batch.shape))
    # states from fresh to extreme: hot or tripped nodes, huge budgets and jobs, long queues
    state = RoundState(
        prev_alloc=rng.integers(0, 9, (rows, st.T)),
        temp_c=rng.uniform(st.ambient_c - 5.0, st.critical_temp_c + 8.0, (rows, st.K)),
        queue=rng.choice([0.0, 10.0, 1e6], (rows, st.T)) * rng.random((rows, st.T)),
        remaining_tokens=rng.choice([0.0, 1e6, 1e12, 1e300], (rows, st.T)),
        budget_left=rng.choice([0.0, 1.0, 50.0, 1e300], (rows, st.T)) * rng.random((rows, st.T)),
        prev_placement=random_placement(st, rng, rows) if rng.random() < 0.75 else None,
    )
    if rng.random() < 0.75:  # restarts under way, training since the last checkpoint (persistent placement)
        state = dataclasses.replace(
            state,
            restart_left_s=rng.choice([0.0, 0.0, 20.0, 5000.0], (rows, st.T)) * rng.random((rows, st.T)),
            since_ckpt_s=rng.choice([0.0, 100.0, 1e4], (rows, st.T)) * rng.random((rows, st.T)),
            unsaved_tokens=rng.choice([0.0, 1e6, 1e12], (rows, st.T)) * rng.random((rows, st.T)),
        )
    if calm:
        state.temp_c[:calm], state.budget_left[:calm], state.remaining_tokens[:calm] = st.ambient_c, 1e300, 1e12
    lengths = {}
    if rng.random() < 0.5:  # a replayed trace's lengths per row; else the config's means
        lengths = dict(
            prompt_tokens=rng.choice([0.0, 30.0, 2000.0, 8000.0], (rows, st.T)),
            output_tokens=rng.choice([1.0, 27.0, 211.0, 4000.0], (rows, st.T)),
        )
    draws = Draws(arrivals=rng.poisson(100, (rows, st.T)).astype(float), tiebreak=rng.random(st.T), **lengths)
    present = rng.random((rows, st.T)) < 0.75
    outs = []
    for p in (None, present):
        outs.append(evaluate(st, acts, state, draws, p))
        assert_agree(outs[-1], oracle.evaluate(st, acts, state, draws, p), f"{where} present={p is not None}")
    one = type(acts)(acts.gpus[0], acts.bid[0], acts.precision[0], acts.batch[0])
    s0 = RoundState(*(None if getattr(state, f.name) is None else getattr(state, f.name)[0] for f in dataclasses.fields(state)))
    d0 = Draws(draws.arrivals[0], draws.tiebreak, **{k: v[0] for k, v in lengths.items()})
    cf = np.ones((st.T + 1, st.T), bool)
    cf[1:] = ~np.eye(st.T, dtype=bool)
    assert_agree(evaluate_counterfactuals(st, one, s0, d0), oracle.evaluate(st, one, s0, d0, cf), f"{where} counterfactuals")
    # the welfare-only rows of evaluate_welfare: the same welfare, the whole outcome of every k-th row
    keep = rng.random(rows) < 0.5
    full, welfare = evaluate_welfare(st, acts, state, draws, present, full=keep)
    want = oracle.evaluate(st, acts, state, draws, present)
    np.testing.assert_allclose(welfare, want.welfare, rtol=1e-9, atol=1e-9)
    assert_agree(full, Outcome(**{f: getattr(want, f)[keep] for f in FIELDS}), f"{where} full rows")
    return outs[0]


@settings(max_examples=60, deadline=None)
@given(
    seed=hst.integers(0, 2**31 - 1),
    mechanism=hst.sampled_from(MECHANISMS),
    safety=hst.sampled_from(["project", "veto"]),
    n=hst.integers(1, 9),
    nodes=hst.sampled_from([("h100-sxm",), ("h100-sxm", "h100-sxm"), ("h100-sxm", "a100-80gb", "h100-sxm"), ("a100-80gb",) * 5]),
    cap=hst.sampled_from([3000.0, 9000.0, 1e6]),
    rows=hst.integers(1, 24),
)
def test_engine_agrees_with_the_oracle(seed, mechanism, safety, n, nodes, cap, rows):
    st = KernelStatic.from_config(
        make_config(n_tenants=n, nodes=nodes, mechanism=mechanism, safety=safety, rack_power_cap_w=cap, nodes_per_rack=2)
    )
    rng = np.random.default_rng(seed)
    agree_on_random_rounds(st, rng, rows, int(rng.integers(1, 20)), f"{mechanism} {safety}")


@settings(max_examples=40, deadline=None)
@given(cfg=strategies.fleet_configs(), seed=hst.integers(0, 2**31 - 1), rows=hst.integers(1, 12))
def test_every_config_field_agrees_with_the_oracle(cfg, seed, rows):
    """Scenarios drawn field by field (``tests/strategies.py``: every GPU type and model,
    ``gpus_per_node``, ``comm_overlap``, ``mfu``, ``mbu``, restart, memory, thermal and power
    settings, FlashAttention and activation checkpointing per tenant, every mechanism)."""
    st = KernelStatic.from_config(cfg)
    rng = np.random.default_rng(seed)
    gpus = int(rng.integers(1, 3 * cfg.cluster.gpus_per_node + 1))
    out = agree_on_random_rounds(st, rng, rows, gpus, "drawn config", batches=[1, 1, 2, 4, 32], calm=(rows + 1) // 2)
    # what the draws reached (calm rows first), in hypothesis' statistics (--hypothesis-show-statistics)
    running = out.tokens_per_s > 0
    train = st.is_train & running
    overlap = cfg.cluster.comm_overlap
    event(
        f"comm_overlap {'0' if overlap == 0 else '1' if overlap == 1 else 'in (0, 1)'}, multi-GPU training runs: {(train & (out.alloc > 1)).any()}"
    )
    event(
        f"checkpointed training runs: {(train & st.checkpointing).any()}; training without FlashAttention runs: {(train & ~st.flash).any()}"
    )
    event(f"serving runs: {(running & ~st.is_train).any()}; restarted: {out.restarted.any()}; OOM: {out.oom.any()}")
    event(f"throttled: {(running & (out.throttle < 1)).any()}; tripped: {out.tripped.any()}")


def _leaves(obj, path=""):
    """``(path, value)`` of every field of a config, tenants' fields under ``tenants.``."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _leaves(getattr(obj, f.name), f"{path}.{f.name}" if path else f.name)
    elif path == "tenants":
        for t in obj:
            yield from _leaves(t, path)
    else:
        yield path, obj


#: The config fields the round never reads (``KernelStatic.from_config`` leaves them out), each
#: with another valid value: the arrival process and trace replay (they make the round's
#: ``Draws``, which the oracle tests draw directly), the bid levels (actions carry bids as
#: multipliers), credit assignment and the fairness detector (both read the round's outcome).
NOT_IN_ROUND = {
    "tenants.workload.pattern": "bursty",
    "tenants.workload.trace": "trace.csv",
    "tenants.workload.burst_factor": 2.0,
    "tenants.workload.burst_fraction": 0.5,
    "tenants.workload.burst_rounds": 2.0,
    "tenants.workload.burst_shared": True,
    "tenants.workload.diurnal_amplitude": 0.1,
    "tenants.workload.diurnal_period_s": 3600.0,
    "tenants.workload.trace_offset_s": 10.0,
    "tenants.workload.trace_speedup": 2.0,
    "tenants.workload.trace_shards": 3,
    "tenants.workload.trace_shard": 2,  # (of 3 shards)
    "arbiter.bid_levels": (1.0, 2.0),
    "reward.scheme": "shapley",
    "reward.mixed_weight": 0.2,
    "reward.shapley_samples": 8,
    "reward.compute_all": False,
    "reward.degenerate_floor": 0.5,
    "reward.starvation_penalty": 1.0,
    "fairness.starvation_fraction": 0.2,
    "fairness.starvation_rounds": 5,
    "fairness.hoard_share": 0.5,
}


def _replace_path(cfg, path, value):
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(cfg, **{head: value})
    if head == "tenants":
        return dataclasses.replace(cfg, tenants=tuple(_replace_path(t, rest, value) for t in cfg.tenants))
    return dataclasses.replace(cfg, **{head: _replace_path(getattr(cfg, head), rest, value)})


@pytest.mark.parametrize("path", sorted(NOT_IN_ROUND))
def test_fields_outside_the_round_leave_it_unchanged(path):
    """What ``NOT_IN_ROUND`` says: changing the field leaves every array of the scenario the
    round and the oracle read as it was."""
    base = make_config(n_tenants=3)
    if path == "tenants.workload.trace_shard":
        base = _replace_path(base, "tenants.workload.trace_shards", 3)
    changed = _replace_path(base, path, NOT_IN_ROUND[path])
    assert dict(_leaves(changed))[path] != dict(_leaves(base))[path]
    a, b = KernelStatic.from_config(base), KernelStatic.from_config(changed)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, tuple) and x and isinstance(x[0], np.ndarray):
            assert all(np.array_equal(u, v) for u, v in zip(x, y, strict=True)), f.name
        else:
            assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name


def test_the_strategy_varies_every_field_that_reaches_the_round():
    """Every config field the round reads takes at least two values over the scenarios
    ``strategies.fleet_configs`` draws; a field added to the specs fails here until it is drawn
    (or listed in ``NOT_IN_ROUND``, which the test above holds to its word)."""
    seen: dict[str, set] = {}

    @settings(max_examples=60, deadline=None, database=None)
    @given(cfg=strategies.fleet_configs())
    def collect(cfg):
        for path, value in _leaves(cfg):
            seen.setdefault(path, set()).add(value)

    collect()
    assert set(NOT_IN_ROUND) <= set(seen)  # (no stale names)
    fixed = sorted(p for p, v in seen.items() if len(v) < 2 and p not in NOT_IN_ROUND)
    assert not fixed, f"config fields that reach the round but never vary in strategies.fleet_configs: {fixed}"
    models = seen["tenants.model"]
    gpus = {g for types in seen["cluster.gpu_types"] for g in types}
    assert models == set(fleet_marl.catalog.models()) and gpus == set(fleet_marl.catalog.gpus())


#: One cluster per GPU type, each with its own gpus_per_node and comm_overlap, holding every
#: model as three tenants: training with FlashAttention, training checkpointed without it, serving.
SWEEP = tuple(zip(strategies.GPU_TYPES, (2, 4, 8, 1, 3, 16), (0.0, 0.3, 1.0, 0.5, 0.8, 0.6), strict=False))
VARIANTS = (("train", False, True), ("train", True, False), ("serve", False, True))


def _sweep_config(gpu, gpn, overlap):
    tenants = []
    for model in strategies.MODELS:
        ctx = fleet_marl.catalog.model(model).max_seq
        for kind, ckpt, flash in VARIANTS:
            wl = WorkloadSpec(seq_len=min(2048, ctx), prompt_tokens=512, output_tokens=128, rate=5.0)
            tenants.append(
                TenantSpec(
                    kind=kind, model=model, gpu_type=gpu, max_gpus=64, flash_attention=flash, activation_checkpointing=ckpt, workload=wl
                )
            )
    cluster = ClusterSpec(
        gpu_types=(gpu,) * 3,
        gpus_per_node=gpn,
        comm_overlap=overlap,
        mfu=0.6,
        mbu=0.8,
        restart_seconds=12.0,
        usable_memory_fraction=0.95,
        rack_power_cap_w=1e6,
    )
    return FleetConfig(cluster=cluster, tenants=tuple(tenants))


def test_every_model_on_every_gpu_type_agrees_with_the_oracle():
    """Every catalog model, trained (with FlashAttention; checkpointed without it) and served, on
    every catalog GPU type, alone on one GPU and on the whole pool (across nodes of 1-16 GPUs,
    ``comm_overlap`` 0, 1 and in between), in BF16 and in the lowest precision each allows:
    the engine agrees with the oracle, and the sweep reaches every branch it is meant to."""
    ran = set()  # (model, kind, gpu) that ran
    reached = set()
    for gpu, gpn, overlap in SWEEP:
        st = KernelStatic.from_config(_sweep_config(gpu, gpn, overlap))
        T, G = st.T, fleet_marl.catalog.N_GROUPS
        P = fleet_marl.catalog.PRECISION_CODE
        low = np.full((T, G), P["bf16"])  # the lowest each allows on attention and MLP: fp8 trains, int4 serves
        low[:, 1:3] = np.where(st.is_train, P["fp8"] if st.supported[0, P["fp8"]] else P["bf16"], P["int4"])[:, None]
        rows = []
        for t in range(T):
            for n in (1, int(st.pool_capacity[0])):
                for prec in (np.full((T, G), P["bf16"]), low):
                    gpus = np.zeros(T, np.int64)
                    gpus[t] = n
                    rows.append((gpus, prec, t))
        B = len(rows)
        acts = Actions(
            gpus=np.stack([r[0] for r in rows]), bid=np.ones((B, T)), precision=np.stack([r[1] for r in rows]), batch=np.full((B, T), 4)
        )
        state = RoundState(
            prev_alloc=np.zeros((B, T), np.int64),
            temp_c=np.full((B, st.K), 30.0),
            queue=np.zeros((B, T)),
            remaining_tokens=np.full((B, T), 1e12),
            budget_left=np.full((B, T), 1e6),
        )
        draws = Draws(arrivals=np.full((B, T), 50.0), tiebreak=np.linspace(0, 1, T))
        out = evaluate(st, acts, state, draws)
        assert_agree(out, oracle.evaluate(st, acts, state, draws), gpu)
        for b, (_, _, t) in enumerate(rows):
            if out.tokens_per_s[b, t] <= 0:
                continue
            model, (kind, ckpt, flash) = strategies.MODELS[t // 3], VARIANTS[t % 3]
            ran.add((model, kind, gpu))
            if out.nodes_spanned[b, t] > 1:
                reached.add(("across nodes of", gpn))
                if kind == "train" and out.multi_gpu_efficiency[b, t] < 1:
                    reached.add(("FSDP traffic not all hidden at comm_overlap", overlap))
            if ckpt and not flash:
                reached.add("checkpointed training without FlashAttention")
            if out.restarted[b, t]:
                reached.add("restart")
            if out.projected[b, t]:
                reached.add("batch projected")
            if (out.precision[b, t, 1:3] != P["bf16"]).all():
                reached.add(("low precision", kind))
    models = set(strategies.MODELS)
    for kind in ("train", "serve"):
        assert {m for m, k, _ in ran if k == kind} == models, kind  # every model runs somewhere
        assert {g for _, k, g in ran if k == kind} == set(strategies.GPU_TYPES), kind  # every GPU type runs something
    # comm_overlap 0 (the compiled branch for hide == 1) and strictly between 0 and 1
    overlaps = {x[1] for x in reached if isinstance(x, tuple) and x[0].startswith("FSDP")}
    assert 0.0 in overlaps and any(0 < o < 1 for o in overlaps), overlaps
    assert {("across nodes of", gpn) for _, gpn, _ in SWEEP} <= reached
    want = {
        "checkpointed training without FlashAttention",
        "restart",
        "batch projected",
        ("low precision", "train"),
        ("low precision", "serve"),
    }
    assert want <= reached, want - reached


def _two_tenants(cluster=None, a=None, a_wl=None, b=None, b_wl=None, **top):
    """A training tenant (Llama-3.1-8B, 6 GPUs over two nodes of 4) beside a serving one
    (Qwen2.5-7B, 2 GPUs), with fields overridden by keyword."""
    cl = dict(gpu_types=("h100-sxm", "h100-sxm"), gpus_per_node=4, nodes_per_rack=2, rack_power_cap_w=20_000.0)
    ta = dict(kind="train", model="llama-3.1-8b", max_gpus=8)
    tb = dict(kind="serve", model="qwen2.5-7b", max_gpus=8)
    wa = dict(seq_len=2048)
    wb = dict(prompt_tokens=1024, output_tokens=256, rate=20.0)
    for d, o in ((cl, cluster), (ta, a), (wa, a_wl), (tb, b), (wb, b_wl)):
        d.update(o or {})
    tenants = (TenantSpec(**ta, workload=WorkloadSpec(**wa)), TenantSpec(**tb, workload=WorkloadSpec(**wb)))
    return FleetConfig(cluster=ClusterSpec(**cl), tenants=tenants, **top)


#: (the field changed, the outcome field that must change with it)
REACHES = [
    (dict(cluster=dict(comm_overlap=0.0)), "tokens_per_s"),
    (dict(cluster=dict(comm_overlap=1.0)), "tokens_per_s"),
    (dict(cluster=dict(mfu=0.5)), "tokens_per_s"),
    (dict(cluster=dict(mbu=0.3)), "tokens_per_s"),
    (dict(cluster=dict(network_gbs_per_gpu=5.0)), "tokens_per_s"),
    (dict(cluster=dict(gpus_per_node=8)), "nodes_spanned"),
    (dict(cluster=dict(restart_seconds=5.0)), "progress_tokens"),
    (dict(cluster=dict(checkpoint_load_gbs_per_gpu=0.2)), "progress_tokens"),
    (dict(cluster=dict(checkpoint_load_gbs_per_node=0.2)), "progress_tokens"),
    (dict(cluster=dict(round_seconds=120.0)), "progress_tokens"),
    (dict(cluster=dict(usable_memory_fraction=0.5)), "mem_capacity"),
    (dict(cluster=dict(rack_power_cap_w=4_000.0)), "rack_power_w"),
    (dict(cluster=dict(nodes_per_rack=1)), "rack_power_w"),  # one rack of two nodes -> two racks
    (dict(cluster=dict(ambient_c=35.0)), "temp_next"),
    (dict(cluster=dict(thermal_rise_at_tdp_c=70.0)), "temp_next"),
    (dict(cluster=dict(thermal_tau_s=5.0)), "temp_next"),
    (dict(cluster=dict(throttle_temp_c=40.0, critical_temp_c=90.0)), "throttle"),
    (dict(cluster=dict(throttle_temp_c=45.0, critical_temp_c=50.0)), "throttle"),
    (dict(cluster=dict(gpu_types=("a100-80gb", "a100-80gb")), a=dict(gpu_type="a100-80gb"), b=dict(gpu_type="a100-80gb")), "tokens_per_s"),
    (dict(a=dict(model="mistral-7b")), "mem_weights"),
    (dict(a=dict(flash_attention=False)), "mem_activations"),
    (dict(a=dict(activation_checkpointing=True)), "mem_activations"),
    (dict(a=dict(activation_checkpointing=True)), "tokens_per_s"),
    (dict(a=dict(max_gpus=2)), "requested"),
    (dict(a=dict(priority=3.0)), "utility"),
    (dict(a=dict(budget=100.0)), "utility"),
    (dict(a_wl=dict(seq_len=4096)), "mem_activations"),
    (dict(b_wl=dict(prompt_tokens=4000)), "tokens_per_s"),
    (dict(b_wl=dict(output_tokens=16)), "tokens_per_s"),
    (dict(b_wl=dict(slo_tpot_s=1e-3)), "slo_good"),
    (dict(b_wl=dict(slo_ttft_s=1e-3)), "slo_good"),
    (dict(b_wl=dict(rate=5.0)), "value"),
    (dict(b_wl=dict(kv_cache_dtype="fp8")), "mem_kv_cache"),
    (dict(reward=dict(cost_weight=3.0)), "utility"),
    (dict(max_cycles=10), "utility"),
    (dict(coupling=CouplingSpec(queueing=True)), "ttft_p99_s"),  # the server's queue (docs/model.md section 12.2)
    (dict(coupling=CouplingSpec(persistent_placement=True)), "since_ckpt_s"),  # the checkpoint clock (section 12.3)
    (dict(coupling=CouplingSpec(gang=True), a=dict(tensor_parallel=4)), "usable_gpus"),  # TP groups of 4 on 4 + 2 GPUs (section 12.4)
]


@pytest.mark.parametrize(
    ("change", "field"),
    REACHES,
    ids=[
        ",".join(
            f"{k}.{n}={v}" if isinstance(d, dict) else f"{k}={d}"
            for k, d in c.items()
            for n, v in (d.items() if isinstance(d, dict) else [(k, d)])
        )
        + f"-{f}"
        for c, f in REACHES
    ],
)
def test_each_config_field_reaches_the_round(change, field):
    """Changing one config field changes the compiled round's outcome where the model says it
    should, and the oracle follows it: the field reaches both."""
    from fleet_marl.config import RewardSpec

    change, top = dict(change), {}
    if "reward" in change:
        top["reward"] = RewardSpec(**change.pop("reward"))
    if "max_cycles" in change:
        top["max_cycles"] = change.pop("max_cycles")
    outs = []
    for cfg in (_two_tenants(), _two_tenants(**change, **top)):
        st = KernelStatic.from_config(cfg)
        acts = Actions(gpus=np.array([6, 2]), bid=np.ones(2), precision=np.full((2, 5), 1), batch=np.array([2, 8]))
        state = RoundState(
            prev_alloc=np.array([0, 2]),
            temp_c=np.full(st.K, 60.0),
            queue=np.zeros(2),
            remaining_tokens=np.array([1e12, 0.0]),
            budget_left=np.array([1e4, 1e4]),
        )
        draws = Draws(arrivals=np.array([0.0, 300.0]), tiebreak=np.array([0.1, 0.2]))
        out = evaluate(st, acts, state, draws)
        assert_agree(out, oracle.evaluate(st, acts, state, draws), str(change))
        if not outs:  # the base: both run, the server within its SLO
            assert (out.tokens_per_s > 0).all() and out.slo_good[1] > 0 and (out.throttle == 1).all()
        outs.append(np.asarray(getattr(out, field)))
    base, changed = outs
    assert base.shape != changed.shape or not np.array_equal(base, changed), (change, field, base, changed)


def _oracle_welfare(st, actions, state, draws, present=None, *, full=None):
    out = oracle.evaluate(st, actions, state, draws, present)
    keep = slice(None) if full is None else np.asarray(full)
    return Outcome(**{f: getattr(out, f)[keep] for f in FIELDS}), out.welfare


def _engine_and_oracle_episodes(make_env, seed, monkeypatch, record):
    """One episode of ``make_env()`` on the engine, then one with the oracle in the credit
    engine's place, from ``seed`` with the same random masked actions: ``record(env, step)`` of
    each step, per run."""
    runs = []
    for use_oracle in (False, True):
        if use_oracle:
            monkeypatch.setattr(credit, "evaluate_welfare", _oracle_welfare)
        env = make_env()
        obs, infos = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        steps = []
        while env.agents:
            acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in env.agents}
            out = env.step(acts)
            infos = out[4]
            steps.append(record(env, out))
        runs.append(steps)
    assert len(runs[0]) == len(runs[1]) > 5
    return runs


@pytest.mark.parametrize("scheme", ["difference", "shapley"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_whole_episodes_agree_with_the_oracle(task, scheme, monkeypatch):
    """Every task, one episode on the engine and one with the oracle in the credit engine's
    place, same seed and actions: the same allocations, flags and terminations; rewards and
    observations within 1e-9."""
    runs = _engine_and_oracle_episodes(
        lambda: fleet_marl.parallel_env(task=task, reward_scheme=scheme), 5, monkeypatch, lambda env, out: (*out, env.state())
    )
    for (o0, r0, t0, u0, i0, s0), (o1, r1, t1, u1, i1, s1) in zip(*runs, strict=True):
        assert t0 == t1 and u0 == u1
        np.testing.assert_allclose(s1, s0, atol=1e-6)
        for a in r0:
            assert r1[a] == pytest.approx(r0[a], rel=1e-9, abs=1e-9)
            for key in ("alloc", "requested", "oom", "vetoed", "starved", "throttled", "degenerate"):
                assert i1[a][key] == i0[a][key], (a, key)
            for k, v in i0[a].items():
                if k.startswith("reward_"):
                    assert i1[a][k] == pytest.approx(v, rel=1e-9, abs=1e-9), (a, k)
            np.testing.assert_allclose(o1[a], o0[a], atol=1e-6)


@pytest.mark.parametrize("mode", [False, "full", "selective"])
def test_checkpointing_modes_agree_with_the_oracle(mode):
    # every training tenant under one activation-checkpointing mode, the engine against the oracle
    base = make_config(n_tenants=6, nodes=("h100-sxm", "a100-80gb", "h100-sxm"))
    tenants = tuple(dataclasses.replace(t, activation_checkpointing=mode) if t.kind == "train" else t for t in base.tenants)
    st = KernelStatic.from_config(dataclasses.replace(base, tenants=tenants))
    rng = np.random.default_rng(7)
    acts = random_actions(st, rng, 16)
    state = RoundState(
        prev_alloc=rng.integers(0, 9, (16, st.T)),
        temp_c=rng.uniform(20, 60, (16, st.K)),
        queue=np.zeros((16, st.T)),
        remaining_tokens=np.full((16, st.T), 1e12),
        budget_left=np.full((16, st.T), 1e6),
    )
    draws = Draws(arrivals=rng.poisson(100, (16, st.T)).astype(float), tiebreak=rng.random(st.T))
    assert_agree(evaluate(st, acts, state, draws), oracle.evaluate(st, acts, state, draws), f"checkpointing={mode}")


def test_a_persistent_placement_episode_agrees_with_the_oracle(monkeypatch):
    """An episode with restarts that span rounds, preemptions and checkpoints
    (``coupling.persistent_placement`` and ``contention``, docs/model.md section 12.3), on the
    engine and with the oracle in the credit engine's place: the same allocations, rewards, the
    carried state and the new infos; the episode reaches a pending restart and a lost job's work."""
    from fleet_marl.environment import FleetParallelEnv

    base = make_config(n_tenants=6, nodes=("h100-sxm", "h100-sxm"), rack_power_cap_w=1e6, checkpoint_load_gbs_per_node=1.0)
    tenants = tuple(
        dataclasses.replace(t, workload=dataclasses.replace(t.workload, checkpoint_interval_s=25.0)) if t.kind == "train" else t
        for t in base.tenants
    )
    cfg = dataclasses.replace(base, tenants=tenants, max_cycles=12, coupling=CouplingSpec(persistent_placement=True, contention=True))
    runs = _engine_and_oracle_episodes(
        lambda: FleetParallelEnv(config=cfg), 0, monkeypatch, lambda env, out: (out[1], out[4], dataclasses.asdict(env.round_state), out[0])
    )
    pending = lost = 0.0
    for (r0, i0, s0, o0), (r1, i1, s1, o1) in zip(*runs, strict=True):
        for a in r0:
            assert r1[a] == pytest.approx(r0[a], rel=1e-9, abs=1e-9)
            assert i1[a]["alloc"] == i0[a]["alloc"] and i1[a]["restarted"] == i0[a]["restarted"]
            for k in ("restart_s", "restart_pending_s", "lost_tokens"):
                assert i1[a][k] == pytest.approx(i0[a][k], rel=1e-9, abs=1e-9), (a, k)
            np.testing.assert_allclose(o1[a], o0[a], atol=1e-6)
            pending, lost = max(pending, i0[a]["restart_pending_s"]), max(lost, i0[a]["lost_tokens"])
        for k in ("restart_left_s", "since_ckpt_s", "unsaved_tokens", "remaining_tokens"):
            np.testing.assert_allclose(s1[k], s0[k], rtol=1e-9, atol=1e-6, err_msg=k)
    assert pending > 0 and lost > 0

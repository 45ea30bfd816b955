"""The round kernel: batch == loop, counterfactual rows, safety verdicts, bad input."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from fleet_marl import catalog
from fleet_marl.kernel import Actions, Draws, KernelInputError, KernelStatic, RoundState, evaluate, evaluate_counterfactuals
from tests.conftest import make_config, random_actions

P = catalog.PRECISION_CODE
FIELDS = [f.name for f in dataclasses.fields(__import__("fleet_marl.kernel", fromlist=["Outcome"]).Outcome)]


def row(a: Actions, i: int) -> Actions:
    return Actions(a.gpus[i], a.bid[i], a.precision[i], a.batch[i])


@pytest.mark.parametrize("mechanism", ["proportional", "maxmin", "priority", "auction"])
@pytest.mark.parametrize("safety", ["project", "veto"])
@settings(max_examples=15, deadline=None)
@given(seed=hst.integers(0, 2**31 - 1))
def test_batched_equals_loop(mechanism, safety, seed):
    st = KernelStatic.from_config(
        make_config(n_tenants=5, nodes=("h100-sxm", "a100-80gb", "h100-sxm"), mechanism=mechanism, safety=safety, rack_power_cap_w=9000.0)
    )
    rng = np.random.default_rng(seed)
    B = 12
    acts = random_actions(st, rng, B)
    state = RoundState(
        prev_alloc=rng.integers(0, 6, (B, st.T)),
        temp_c=rng.uniform(25, 95, (B, st.K)),
        queue=rng.uniform(0, 300, (B, st.T)),
        remaining_tokens=rng.uniform(0, 1e8, (B, st.T)),
        budget_left=rng.uniform(0, 50, (B, st.T)),
    )
    draws = Draws(arrivals=rng.poisson(100, st.T).astype(float), tiebreak=rng.random(st.T))
    batched = evaluate(st, acts, state, draws)
    for i in range(B):
        s_i = RoundState(*(None if getattr(state, f.name) is None else getattr(state, f.name)[i] for f in dataclasses.fields(state)))
        single = evaluate(st, row(acts, i), s_i, draws)
        for name in FIELDS:
            a, b = getattr(batched, name), getattr(single, name)
            a = a[i]
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(
    seed=hst.integers(0, 2**31 - 1),
    mechanism=hst.sampled_from(["proportional", "maxmin", "priority", "auction"]),
    safety=hst.sampled_from(["project", "veto"]),
)
def test_counterfactual_rows_equal_separate_evaluations(seed, mechanism, safety):
    st = KernelStatic.from_config(make_config(n_tenants=4, mechanism=mechanism, safety=safety))
    rng = np.random.default_rng(seed)
    acts = random_actions(st, rng)
    state, draws = RoundState.initial(st), Draws.sample(st, rng)
    cf = evaluate_counterfactuals(st, acts, state, draws)
    assert cf.welfare.shape == (st.T + 1,)
    for name in FIELDS:  # every field has one row per counterfactual
        assert getattr(cf, name).shape[0] == st.T + 1, name
    full = evaluate(st, acts, state, draws)
    assert cf.welfare[0] == pytest.approx(full.welfare, abs=1e-12)
    for i in range(st.T):
        present = np.ones(st.T, bool)
        present[i] = False
        alone = evaluate(st, acts, state, draws, present=present[None])
        assert cf.welfare[1 + i] == pytest.approx(alone.welfare[0], abs=1e-12)
        assert cf.alloc[1 + i, i] == 0 and cf.utility[1 + i, i] == 0


def test_removed_tenant_gpus_return_to_the_pool():
    st = KernelStatic.from_config(make_config(n_tenants=3, nodes=("h100-sxm",)))
    a = Actions(gpus=[8, 8, 8], bid=[1.0] * 3, precision=np.full((3, 5), P["bf16"]), batch=[1, 8, 1])
    cf = evaluate_counterfactuals(st, a, RoundState.initial(st), Draws.expected(st))
    assert cf.alloc[0].sum() == 8
    for i in range(3):
        assert cf.alloc[1 + i].sum() == 8  # the pool is still fully used without tenant i


def test_same_noise_in_every_row():
    st = KernelStatic.from_config(make_config(n_tenants=2))
    a = Actions(gpus=[0, 4], bid=[1.0, 1.0], precision=np.full((2, 5), P["bf16"]), batch=[1, 16])
    d = Draws(arrivals=np.array([0.0, 77.0]), tiebreak=np.array([0.3, 0.6]))
    cf = evaluate_counterfactuals(st, a, RoundState.initial(st), d)
    # serving tenant 1 sees the same demand in the grand row and in "tenant 0 removed"
    assert cf.served[0, 1] == cf.served[1, 1]


def test_inputs_are_not_mutated(st, state, draws):
    rng = np.random.default_rng(0)
    a = random_actions(st, rng, 4)
    copies = [np.array(x, copy=True) for x in (a.gpus, a.bid, a.precision, a.batch, state.temp_c, state.budget_left)]
    evaluate(st, a, state, draws)
    for before, after in zip(copies, (a.gpus, a.bid, a.precision, a.batch, state.temp_c, state.budget_left), strict=False):
        np.testing.assert_array_equal(before, after)


# --- safety ----------------------------------------------------------------------------------


def _one(st, prec, gpus=8, batch=1, **state_kw):
    T = st.T
    a = Actions(
        gpus=[gpus] + [0] * (T - 1), bid=[1.0] * T, precision=np.array([prec] + [[P["bf16"]] * 5] * (T - 1)), batch=[batch] + [1] * (T - 1)
    )
    s = RoundState.initial(st)
    s = dataclasses.replace(s, **state_kw)
    return evaluate(st, a, s, Draws.expected(st))


def test_fp8_on_embedding_is_projected_or_vetoed():
    bad = [P["fp8"], P["fp8"], P["fp8"], P["bf16"], P["bf16"]]
    proj = _one(KernelStatic.from_config(make_config(n_tenants=2, safety="project")), bad)
    assert proj.unsafe_numerics[0] and proj.projected[0] and not proj.vetoed[0]
    assert proj.precision[0].tolist() == [P["bf16"], P["fp8"], P["fp8"], P["bf16"], P["bf16"]]
    assert proj.progress_tokens[0] > 0
    veto = _one(KernelStatic.from_config(make_config(n_tenants=2, safety="veto")), bad)
    assert veto.vetoed[0] and veto.progress_tokens[0] == 0
    assert veto.spend[0] > 0  # the GPUs were held and paid for


def test_oom_runs_nothing_and_project_lowers_the_batch():
    cfg = make_config(n_tenants=2, safety="veto")
    st = KernelStatic.from_config(cfg)
    out = _one(st, [P["bf16"]] * 5, gpus=1, batch=64)
    assert out.oom[0] and out.progress_tokens[0] == 0 and out.mem_total[0] > out.mem_capacity[0]
    st = KernelStatic.from_config(make_config(n_tenants=2, safety="project"))
    out = _one(st, [P["bf16"]] * 5, gpus=8, batch=64)
    assert out.projected[0] and 1 <= out.batch[0] < 64 and out.mem_total[0] <= out.mem_capacity[0]
    assert out.progress_tokens[0] > 0


def test_rack_power_cap_throttles():
    free = _one(KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6)), [P["bf16"]] * 5, gpus=16)
    capped = _one(KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=6000.0)), [P["bf16"]] * 5, gpus=16)
    assert not free.power_throttled[0] and capped.power_throttled[0]
    assert capped.rack_power_w.max() <= 6000.0 + 1e-6
    assert 0 < capped.throttle[0] < 1
    assert capped.progress_tokens[0] == pytest.approx(free.progress_tokens[0] * capped.throttle[0], rel=1e-9)


def test_thermal_model_heats_throttles_and_trips():
    st = KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6))
    cool = _one(st, [P["bf16"]] * 5, gpus=8)
    # first-order step response toward ambient + rise at full power
    t_ss = st.ambient_c + st.thermal_rise_at_tdp_c
    expect = t_ss + (st.ambient_c - t_ss) * np.exp(-st.round_seconds / st.thermal_tau_s)
    assert cool.temp_next[0] == pytest.approx(expect)
    hot_inlet = KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6, ambient_c=42.0))  # 42 + 47 > 87
    warm = _one(hot_inlet, [P["bf16"]] * 5, gpus=8, temp_c=np.array([88.0, 42.0]))
    assert warm.thermal_throttled[0] and 0 < warm.throttle[0] < 1
    trip = _one(hot_inlet, [P["bf16"]] * 5, gpus=8, temp_c=np.array([150.0, 42.0]))
    assert trip.tripped[0] and trip.progress_tokens[0] == 0


def test_budget_caps_the_request_and_spend():
    st = KernelStatic.from_config(make_config(n_tenants=2))
    price_round = st.list_price[0] * st.round_seconds / 3600
    out = _one(st, [P["bf16"]] * 5, gpus=8, budget_left=np.array([3.5 * price_round, 100.0]))
    assert out.alloc[0] == 3 and out.budget_next[0] >= 0


def test_restart_costs_time():
    st = KernelStatic.from_config(make_config(n_tenants=2))
    kept = _one(st, [P["bf16"]] * 5, gpus=8, prev_alloc=np.array([8, 0]))
    moved = _one(st, [P["bf16"]] * 5, gpus=8, prev_alloc=np.array([4, 0]))
    assert moved.restarted[0] and not kept.restarted[0]
    # the fixed part plus the checkpoint (fp32 master + Adam: 12 B a parameter) read by 8 GPU
    # loaders on one node, capped by the node's rate (docs/model.md section 7)
    restart = st.restart_seconds + 12.0 * st.params[0].sum() / min(8 * st.load_gpu_bps, st.load_node_bps)
    lost = min(restart / st.round_seconds, 1.0)
    assert 0 < lost < 1
    assert moved.progress_tokens[0] == pytest.approx(kept.progress_tokens[0] * (1 - lost))


def _restart_lost(model, kind="train", gpus=8, prec="bf16", nodes=("h100-sxm",), **cluster_kw):
    """Seconds of a 60 s round a restarted tenant of ``model`` loses on ``gpus`` GPUs (a second,
    idle tenant keeps the config valid)."""
    from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec, WorkloadSpec

    wl = WorkloadSpec(seq_len=1024, prompt_tokens=512, output_tokens=128, rate=2.0)
    ts = (TenantSpec(kind=kind, model=model, max_gpus=gpus, workload=wl), TenantSpec(model="gpt2", workload=wl))
    st = KernelStatic.from_config(FleetConfig(cluster=ClusterSpec(gpu_types=nodes, **cluster_kw), tenants=ts))
    pm = [P["bf16"], P[prec], P[prec], P["bf16"], P["bf16"]]
    kept = _one(st, pm, gpus=gpus, prev_alloc=np.array([gpus, 0]))
    moved = _one(st, pm, gpus=gpus, prev_alloc=np.array([0, 0]))
    assert moved.restarted[0] and not kept.restarted[0]
    rate = kept.progress_tokens[0] if kind == "train" else kept.served[0]
    after = moved.progress_tokens[0] if kind == "train" else moved.served[0]
    return st.round_seconds * (1 - after / rate), st


def test_restart_grows_with_the_checkpoint_and_its_loaders():
    """A restart costs the fixed init plus the checkpoint over the load rate: a 7B trainer loses
    more of its round than a 0.5B one; spread over two nodes it reads twice as fast; a server
    reads its weights at their precision, so FP8 weights restart faster than BF16."""
    small, st = _restart_lost("qwen2.5-0.5b")
    big, _ = _restart_lost("qwen2.5-7b")
    ckpt = 12.0 * catalog.model("qwen2.5-7b").total_params
    assert big == pytest.approx(st.restart_seconds + ckpt / st.load_node_bps, rel=1e-6)
    assert st.restart_seconds < small < big < st.round_seconds
    two, _ = _restart_lost("qwen2.5-7b", gpus=16, nodes=("h100-sxm", "h100-sxm"))
    assert two == pytest.approx(st.restart_seconds + ckpt / (2 * st.load_node_bps), rel=1e-6)
    one_gpu, _ = _restart_lost("qwen2.5-0.5b", gpus=1)  # one loader: the per-GPU rate binds
    assert one_gpu == pytest.approx(st.restart_seconds + 12.0 * catalog.model("qwen2.5-0.5b").total_params / st.load_gpu_bps, rel=1e-6)
    bf16, _ = _restart_lost("llama-3.1-8b", kind="serve", gpus=1)
    fp8, _ = _restart_lost("llama-3.1-8b", kind="serve", gpus=1, prec="fp8")
    assert fp8 < bf16
    # a restart longer than the round leaves none of it
    slow, _ = _restart_lost("qwen2.5-7b", checkpoint_load_gbs_per_node=0.5)
    assert slow == pytest.approx(st.round_seconds)


# --- bad input ---------------------------------------------------------------------------------


def _base(st):
    T = st.T
    return dict(gpus=np.full(T, 2), bid=np.ones(T), precision=np.full((T, 5), P["bf16"]), batch=np.ones(T, int))


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("gpus", lambda T: np.array([-1] + [1] * (T - 1)), r"actions\.gpus\[0\] = -1: expected an integer in \[0, 1000000\]"),
        ("gpus", lambda T: np.array([1.5] + [1.0] * (T - 1)), r"actions\.gpus\[0\] = 1\.5: expected an integer"),
        ("gpus", lambda T: np.ones(T + 1, int), r"actions\.gpus: shape .*expected"),
        ("gpus", lambda T: np.array([1e30] + [1.0] * (T - 1)), r"actions\.gpus\[0\] = 1e\+30: expected an integer in"),
        ("bid", lambda T: np.array([1e308] + [1.0] * (T - 1)), r"actions\.bid\[0\] = 1e\+308: expected a bid multiplier in"),
        ("bid", lambda T: np.array([np.nan] + [1.0] * (T - 1)), r"actions\.bid\[0\] = nan: expected a finite number"),
        ("bid", np.zeros, r"actions\.bid\[0\] = 0\.0: expected a bid multiplier in \(0, 1e\+06\]"),
        ("precision", lambda T: np.full((T, 4), 1), r"actions\.precision: shape"),
        ("precision", lambda T: np.full((T, 5), 9), r"actions\.precision\[0, 0\] = 9: expected a precision code"),
        ("batch", lambda T: np.zeros(T, int), r"actions\.batch\[0\] = 0: expected an integer in \[1, 1000000\]"),
        ("batch", lambda T: np.array(["a"] * T), r"actions\.batch: dtype"),
    ],
)
def test_bad_actions_name_the_field(st, state, draws, field, value, match):
    kw = _base(st)
    kw[field] = value(st.T)
    with pytest.raises(KernelInputError, match=match):
        evaluate(st, Actions(**kw), state, draws)


def test_unsupported_precision_is_an_error_naming_tenant_and_gpu():
    st = KernelStatic.from_config(make_config(n_tenants=2, nodes=("a100-80gb",)))
    kw = _base(st)
    kw["precision"] = kw["precision"].copy()
    kw["precision"][1, 2] = P["fp8"]
    with pytest.raises(KernelInputError, match=r"tenant 1, group mlp: a100-80gb does not support fp8"):
        evaluate(st, Actions(**kw), RoundState.initial(st), Draws.expected(st))
    # the search-friendly mode vetoes it instead
    out = evaluate(st, Actions(**kw), RoundState.initial(st), Draws.expected(st), on_invalid="veto")
    assert out.vetoed[1] and not out.vetoed[0]
    for name in FIELDS:
        assert np.isfinite(np.asarray(getattr(out, name), float)).all(), name


def test_weight_only_precision_in_training_is_an_error(st, state, draws):
    kw = _base(st)
    kw["precision"] = kw["precision"].copy()
    kw["precision"][0, 2] = P["int4"]  # tenant 0 trains
    with pytest.raises(KernelInputError, match=r"int4 is weight-only \(serving only\) and tenant 0 trains"):
        evaluate(st, Actions(**kw), state, draws)


def test_bad_state_and_draws(st, state, draws):
    a = Actions(**_base(st))
    with pytest.raises(KernelInputError, match=r"state\.temp_c\[1\] = nan"):
        evaluate(st, a, dataclasses.replace(state, temp_c=np.array([30.0, np.nan])), draws)
    with pytest.raises(KernelInputError, match=r"draws\.arrivals\[0\] = -1\.0"):
        evaluate(st, a, state, Draws(arrivals=-np.ones(st.T), tiebreak=np.zeros(st.T)))
    with pytest.raises(KernelInputError, match=r"present: .*expected bool"):
        evaluate(st, a, state, draws, present=np.ones((2, st.T + 1), bool))
    with pytest.raises(KernelInputError, match=r"state\.temp_c\[0\] = -1e\+300: expected a temperature"):
        evaluate(st, a, dataclasses.replace(state, temp_c=np.array([-1e300, 30.0])), draws)
    # batch shapes that do not broadcast name every field's leading shape
    b3 = Actions(np.ones((3, st.T), int), np.ones((3, st.T)), np.ones((3, st.T, 5), int), np.ones((3, st.T), int))
    with pytest.raises(KernelInputError, match=r"leading \(batch\) shapes do not broadcast: actions\.gpus \(3,\).*state\.queue \(2,\)"):
        evaluate(st, b3, dataclasses.replace(state, queue=np.zeros((2, st.T))), draws)


def test_outputs_do_not_alias_inputs():
    st = KernelStatic.from_config(make_config(n_tenants=2, safety="veto"))
    a = Actions(np.array([2, 2]), np.ones(2), np.ones((2, 5), np.int64), np.array([1, 4]))
    out = evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    a.batch[0] = 99
    assert out.batch[0] == 1
    assert all(getattr(out, n).flags.writeable for n in FIELDS)


@settings(max_examples=10, deadline=None)
@given(seed=hst.integers(0, 2**31 - 1))
def test_batched_counterfactuals_equal_one_call_per_env(seed):
    st = KernelStatic.from_config(make_config(n_tenants=3))
    rng = np.random.default_rng(seed)
    B = 4
    acts = random_actions(st, rng, B)
    state = dataclasses.replace(RoundState.initial(st), queue=rng.uniform(0, 50, (B, st.T)))
    draws = Draws(arrivals=rng.poisson(100, (B, st.T)).astype(float), tiebreak=rng.random(st.T))
    cf = evaluate_counterfactuals(st, acts, state, draws)
    assert cf.welfare.shape == (B, st.T + 1)
    for b in range(B):
        s_b = dataclasses.replace(state, queue=state.queue[b])
        one = evaluate_counterfactuals(st, row(acts, b), s_b, Draws(draws.arrivals[b], draws.tiebreak))
        for name in FIELDS:
            a, c = getattr(cf, name), getattr(one, name)
            np.testing.assert_allclose(a[b], c, rtol=1e-12, atol=1e-12, err_msg=name)


def test_priority_cannot_be_bought_with_a_big_bid():
    st = KernelStatic.from_config(make_config(n_tenants=2, nodes=("h100-sxm",), mechanism="priority"))
    # priorities 1 and 2 (make_config): tenant 1 first whatever tenant 0 bids
    a = Actions([8, 8], [1e6, 0.5], np.ones((2, 5), np.int64), [1, 1])
    out = evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    assert out.alloc.tolist() == [0, 8]


def test_spend_never_exceeds_budget():
    st = KernelStatic.from_config(make_config(n_tenants=2))
    unit = st.list_price[0] * st.round_seconds / 3600
    for budget in (unit * (1 - 1e-10), unit, 3 * unit * (1 + 1e-12), 0.0):
        out = _one(st, [P["bf16"]] * 5, gpus=8, budget_left=np.array([budget, 100.0]))
        assert out.spend[0] <= budget and out.budget_next[0] >= 0


@pytest.mark.parametrize("safety", ["project", "veto"])
def test_stage1_by_group_equals_the_whole_map_computation(safety):
    """The engine sums per-group tables; the oracle computes stage 1 on whole precision maps
    (every one of the P**G maps here): the same numbers, to the last bit."""
    from fleet_marl.kernel import engine
    from tests import oracle

    st = KernelStatic.from_config(make_config(n_tenants=5, nodes=("h100-sxm", "a100-80gb"), safety=safety))
    G, P_ = catalog.N_GROUPS, catalog.N_PRECISIONS
    maps = (np.arange(P_**G)[:, None] // P_ ** np.arange(G)) % P_  # (P**G, G)
    direct = oracle.tenant_terms(st, np.broadcast_to(maps[:, None, :], (maps.shape[0], st.T, G)), project=safety == "project")
    invalid = oracle.invalid_precision(st, np.broadcast_to(maps[:, None, :], (maps.shape[0], st.T, G)))
    tf, ti, tg = st.packed[:3]
    run = np.empty(G, np.int64)
    names = (
        "unsafe",
        "invalid",
        "weights",
        "grads",
        "master",
        "optimizer",
        "per_seq_local",
        "per_seq_sharded",
        "time_per_token",
        "kv_read_per_seq",
        "comm_bytes",
        "kv_heads",
        "head_time_per_token",
        "dequant_bytes",
    )
    for m in range(0, maps.shape[0], 7):  # every 7th map: all codes of every group appear
        for t in range(st.T):
            got = dict(
                zip(
                    names,
                    engine.tenant_terms(tf, ti, tg, t, maps[m], safety == "project", st.mfu, run, st.prompt_tokens[t], st.output_tokens[t]),
                    strict=False,
                )
            )
            assert run.tolist() == direct.precision[m, t].tolist()
            assert got["invalid"] == invalid[m, t]
            for name in names:
                if name != "invalid":
                    want = np.broadcast_to(getattr(direct, name), direct.unsafe.shape)[m, t]
                    assert got[name] == want or (np.isnan(want) and np.isnan(got[name])), (name, m, t, got[name], want)


def test_node_past_shutdown_at_the_start_stays_off():
    st = KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6))
    out = _one(st, [P["bf16"]] * 5, gpus=8, temp_c=np.array([500.0, 25.0]))
    assert out.tripped[0] and out.progress_tokens[0] == 0


def test_next_state_chains_rounds():
    st = KernelStatic.from_config(make_config(n_tenants=2))
    a = Actions([8, 4], [1.0, 1.0], np.ones((2, 5), np.int64), [1, 16])
    out = evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    nxt = out.next_state()
    assert (nxt.prev_alloc == out.alloc).all() and (nxt.budget_left == out.budget_next).all()
    again = evaluate(st, a, nxt, Draws.expected(st))
    assert not again.restarted.any()  # same allocation: no restart the second round
    assert again.remaining_next[0] < out.remaining_next[0]


def test_batched_initial_state_and_draws():
    st = KernelStatic.from_config(make_config(n_tenants=3))
    s = RoundState.initial(st, batch=5)
    d = Draws.sample(st, np.random.default_rng(0), batch=5)
    assert s.temp_c.shape == (5, st.K) and d.arrivals.shape == (5, st.T)
    out = evaluate(st, random_actions(st, np.random.default_rng(1), 5), s, d)
    assert out.welfare.shape == (5,) and out.mem_capacity.shape == (5, st.T)
    assert out.row(2).alloc.shape == (st.T,)


def test_the_docs_search_example_runs(capsys):
    """docs/kernel.md's "Scoring many configurations" block: 100,000 candidates in one call."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "kernel.md").read_text()
    section = text[text.index("## Scoring many configurations") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns: dict = {}
    exec(compile(code, "docs/kernel.md", "exec"), ns)
    out, best = ns["out"], ns["best"]
    assert out.welfare.shape == (100_000,) and out.welfare[best] == out.welfare.max()
    assert out.vetoed.any()  # fp8 on the A100s is vetoed, not an error
    assert capsys.readouterr().out.startswith("best welfare ")


def test_request_lengths_price_serving():
    """Draws.prompt_tokens / output_tokens (a replayed trace's lengths) replace the config's
    means: longer prompts make prefill slower and the KV cache bigger; fewer output tokens mean
    fewer generated tokens per request. Trainers do not read them; bad lengths are errors."""
    st = KernelStatic.from_config(make_config(n_tenants=2, safety="veto"))  # tenant 1 serves
    a = Actions(np.array([2, 2]), np.ones(2), np.full((2, 5), catalog.PRECISIONS.index("bf16")), np.array([1, 4]))
    base = Draws.expected(st)
    default = evaluate(st, a, RoundState.initial(st), base)
    same = evaluate(
        st, a, RoundState.initial(st), dataclasses.replace(base, prompt_tokens=st.prompt_tokens, output_tokens=st.output_tokens)
    )
    assert float(same.welfare) == float(default.welfare)
    long_prompts = evaluate(st, a, RoundState.initial(st), dataclasses.replace(base, prompt_tokens=st.prompt_tokens * 8))
    assert long_prompts.mem_kv_cache[1] > default.mem_kv_cache[1] and long_prompts.tokens_per_s[1] < default.tokens_per_s[1]
    assert long_prompts.mem_total[0] == default.mem_total[0] and long_prompts.tokens_per_s[0] == default.tokens_per_s[0]
    with pytest.raises(KernelInputError, match=r"draws\.output_tokens\[1\] = 0\.0: expected a mean token count in \[1, 1e9\]"):
        evaluate(st, a, RoundState.initial(st), dataclasses.replace(base, output_tokens=np.array([5.0, 0.0])))


@pytest.mark.parametrize("prompt, output", [(1000, 200), (3000, 2000), (5000, 300)])
def test_sliding_window_caps_the_kv_cache_and_its_read(prompt, output):
    """Mistral-7B-v0.1's 4096-token window (docs/model.md section 4): a sequence keeps the K and V of
    at most 4096 tokens, and a decode step reads the mean of min(P + x, 4096) over its output;
    Llama-3.1-8B has the same KV geometry (32 layers, 8 KV heads of 128) and no window. The
    kernel agrees with the oracle on each case (before, within and past the window)."""
    from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec, WorkloadSpec
    from tests import oracle

    wl = WorkloadSpec(prompt_tokens=prompt, output_tokens=output, rate=1.0)
    cfg = FleetConfig(
        cluster=ClusterSpec(gpu_types=("h100-sxm",)),
        tenants=(TenantSpec(kind="serve", model="mistral-7b", workload=wl), TenantSpec(kind="serve", model="llama-3.1-8b", workload=wl)),
    )
    st = KernelStatic.from_config(cfg)
    a = Actions(gpus=[1, 1], bid=[1.0, 1.0], precision=np.full((2, 5), P["bf16"]), batch=[1, 1])
    out = evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    kv_tok = 2 * 32 * 8 * 128 * 2  # 131,072 B per token for both
    assert out.mem_kv_cache[0] == pytest.approx(min(prompt + output, 4096) * kv_tok)
    assert out.mem_kv_cache[1] == pytest.approx((prompt + output) * kv_tok)
    assert (out.mem_kv_cache[0] < out.mem_kv_cache[1]) == (prompt + output > 4096)
    xs = np.linspace(0.0, output, 200_001)  # the mean context a decode step reads, numerically
    mean_ctx = np.minimum(prompt + xs, 4096).mean()
    terms = oracle.tenant_terms(st, np.full((2, 5), P["bf16"]), True)
    assert terms.kv_read_per_seq[0] == pytest.approx(mean_ctx * kv_tok, rel=1e-4)
    oracle_out = oracle.evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    np.testing.assert_allclose(out.mem_kv_cache, oracle_out.mem_kv_cache, rtol=1e-12)
    np.testing.assert_allclose(out.tokens_per_s, oracle_out.tokens_per_s, rtol=1e-9)


def test_sliding_window_caps_the_attention_flops():
    """Each query attends to at most the window: Mistral's attention FLOPs per token stop growing
    at 4096 tokens of context; Llama-3.1-8B's keep growing (Kaplan et al.'s 2 L ctx d_attn)."""
    from fleet_marl.kernel import cost

    m, ll = catalog.model("mistral-7b"), catalog.model("llama-3.1-8b")
    att = cost.ATT
    assert cost.forward_flops_per_token(m, 16384)[att] == cost.forward_flops_per_token(m, 4096)[att]
    assert cost.forward_flops_per_token(m, 2048)[att] < cost.forward_flops_per_token(m, 4096)[att]
    grow = cost.forward_flops_per_token(ll, 16384)[att] - cost.forward_flops_per_token(ll, 4096)[att]
    assert grow == pytest.approx(2.0 * 32 * (16384 - 4096) * 32 * 128)


def test_explicit_head_dim_runs_through_the_kernel_as_in_the_oracle():
    """Qwen3-0.6B's head_dim 128 (not hidden / heads = 64) sizes its KV cache, its attention FLOPs
    and its q projection; kernel and oracle agree for a trainer and a server."""
    from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec, WorkloadSpec
    from tests import oracle

    wl = WorkloadSpec(seq_len=2048, prompt_tokens=1024, output_tokens=256, rate=1.0)
    cfg = FleetConfig(
        cluster=ClusterSpec(gpu_types=("h100-sxm",)),
        tenants=(TenantSpec(kind="train", model="qwen3-0.6b", workload=wl), TenantSpec(kind="serve", model="qwen3-0.6b", workload=wl)),
    )
    st = KernelStatic.from_config(cfg)
    assert st.kv_dim.tolist() == [8 * 128, 8 * 128]
    a = Actions(gpus=[4, 4], bid=[1.0, 1.0], precision=np.full((2, 5), P["bf16"]), batch=[2, 8])
    out = evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    assert out.mem_kv_cache[1] == pytest.approx(8 * (1024 + 256) * (2 * 28 * 8 * 128 * 2) / 4)
    want = oracle.evaluate(st, a, RoundState.initial(st), Draws.expected(st))
    for f in ("mem_total", "mem_activations", "mem_kv_cache", "tokens_per_s", "progress_tokens", "served"):
        np.testing.assert_allclose(getattr(out, f), getattr(want, f), rtol=1e-9, err_msg=f)


def test_thermal_slowdown_holds_the_max_operating_temperature():
    """docs/model.md section 6: in a 45 C hall (hard's) a node at TDP would reach 45 + 47 = 92 C;
    its GPUs slow just enough to end the round at 87 C instead of tripping, and the clock that
    does it follows from the power model (dynamic power goes with the cube of the clock)."""
    st = KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6, ambient_c=45.0))
    out = _one(st, [P["bf16"]] * 5, gpus=8, temp_c=np.array([87.0, 45.0]))
    assert out.thermal_throttled[0] and not out.tripped[0]
    assert out.temp_next[0] == pytest.approx(st.throttle_temp_c)
    decay = np.exp(-st.round_seconds / st.thermal_tau_s)
    hold = (st.throttle_temp_c - 87.0 * decay) / (1 - decay)  # the steady state that ends at 87 C
    g = st.gpus_per_node
    share = ((hold - st.ambient_c) / st.thermal_rise_at_tdp_c * g * st.tdp_w[0] - g * st.idle_w[0]) / (g * (st.tdp_w[0] - st.idle_w[0]))
    f = share ** (1 / 3)  # the share of dynamic power that holds 87 C is the clock cubed
    assert out.throttle[0] == pytest.approx(f) and 0.9 < f < 1
    cool = _one(st, [P["bf16"]] * 5, gpus=4, temp_c=np.array([45.0, 45.0]))  # half a node: 45 + 47 x 0.56 < 87
    assert not cool.thermal_throttled[0] and cool.throttle[0] == 1.0
    # a cooling failure: even idle the node would end past shutdown (60 + 300 x 680 / 5600 = 96 C), so it trips
    failed = KernelStatic.from_config(make_config(n_tenants=2, rack_power_cap_w=1e6, ambient_c=60.0, thermal_rise_at_tdp_c=300.0))
    out = _one(failed, [P["bf16"]] * 5, gpus=8, temp_c=np.array([60.0, 60.0]))
    assert out.tripped[0] and out.progress_tokens[0] == 0


def test_server_latency_is_that_of_the_load_it_carries():
    """A server's capacity is its roofline at its whole batch; its TTFT and TPOT are those of the
    requests it really has in flight (load x batch, at least 1): a light load meets a TPOT target
    that its full batch would miss, a load past its capacity does not."""
    from fleet_marl.kernel import engine, stage1

    cfg = make_config(n_tenants=2)
    st = KernelStatic.from_config(cfg)
    t, batch = 1, 256
    tt = stage1(st, np.full((st.T, 5), P["bf16"]))
    job, hw, terms = engine.tenant_groups(st, tt, t)
    rate, _, _, _, full = engine.roofline(job, hw, terms, 8, batch, 1)
    one = engine.roofline(job, hw, terms, 8, 1, 1)[4]
    assert one < full
    serve = dataclasses.replace(cfg.tenants[t], workload=dataclasses.replace(cfg.tenants[t].workload, slo_tpot_s=0.5 * (one + full)))
    st = KernelStatic.from_config(dataclasses.replace(cfg, tenants=(cfg.tenants[0], serve)))
    acts = Actions(gpus=[0, 8], bid=[1.0, 1.0], precision=np.full((2, 5), P["bf16"]), batch=[1, batch])
    light, heavy = Draws.expected(st), Draws.expected(st)
    assert light.arrivals[t] < 0.02 * rate * st.round_seconds  # a light load: a few of the 256 in flight
    heavy = dataclasses.replace(heavy, arrivals=np.array([0.0, 2.0 * rate * st.round_seconds]))
    out_light = evaluate(st, acts, RoundState.initial(st), light)
    out_heavy = evaluate(st, acts, RoundState.initial(st), heavy)
    assert out_light.slo_attainment[t] == 1.0 and out_light.slo_good[t] == light.arrivals[t]
    assert out_heavy.served[t] > 0 and out_heavy.slo_good[t] == 0.0


def test_reused_input_buffers_leave_earlier_outcomes_alone_and_are_per_thread():
    """Packing reuses each thread's input buffers (kernel/packing.py): an outcome stays what it
    was after later calls of the same shape, calls from several threads at once give what one
    thread gives, and a batch whose inputs pass REUSE_MAX_BYTES is not held."""
    import threading

    from fleet_marl.kernel import packing

    cfg = make_config(mechanism="proportional")
    st = KernelStatic.from_config(cfg)
    rng = np.random.default_rng(5)
    state, draws = RoundState.initial(st), Draws.expected(st)
    batches = [random_actions(st, rng, 64) for _ in range(6)]
    first = evaluate(st, batches[0], state, draws)
    kept = (first.welfare.copy(), first.alloc.copy(), first.utility.copy())
    singles = [evaluate(st, a, state, draws).welfare.copy() for a in batches]
    np.testing.assert_array_equal(first.welfare, kept[0])  # later calls wrote into the same input buffers, not into it
    np.testing.assert_array_equal(first.alloc, kept[1])
    np.testing.assert_array_equal(first.utility, kept[2])
    got: dict[int, list] = {}

    def worker(i):
        got[i] = [evaluate(st, batches[(i + k) % 6], state, draws).welfare.copy() for k in range(12)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i, res in got.items():
        for k, w in enumerate(res):
            np.testing.assert_array_equal(w, singles[(i + k) % 6])
    rows = packing.REUSE_MAX_BYTES // (8 * (len(packing.layout.II) + len(packing.layout.IF)) * st.T) + 1
    big = random_actions(st, rng, int(rows))
    evaluate(st, big, state, draws)
    held = packing._BUFFERS.held
    assert held[0][0] != rows and sum(b.nbytes for b in held[1:]) <= packing.REUSE_MAX_BYTES

"""The compiled round (``fleet_marl.kernel.engine``) agrees with the independent numpy oracle
(``tests/oracle.py``) to 1e-9: on hypothesis-generated inputs of every mechanism and safety
mode, and on whole episodes of every task, where the env runs once on the engine and once
with the oracle in its place."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

import fleet_marl
from fleet_marl import credit
from fleet_marl.config import MECHANISMS
from fleet_marl.kernel import Draws, KernelStatic, Outcome, RoundState, evaluate, evaluate_counterfactuals, evaluate_welfare
from fleet_marl.tasks import TASKS
from tests import oracle
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
    st = KernelStatic.from_config(make_config(n_tenants=n, nodes=nodes, mechanism=mechanism, safety=safety, rack_power_cap_w=cap, nodes_per_rack=2))
    rng = np.random.default_rng(seed)
    acts = random_actions(st, rng, rows, max_gpus=int(rng.integers(1, 20)))
    # states from fresh to extreme: hot or tripped nodes, huge budgets and jobs, long queues
    state = RoundState(
        prev_alloc=rng.integers(0, 9, (rows, st.T)),
        temp_c=rng.uniform(20, 100, (rows, st.K)),
        queue=rng.choice([0.0, 10.0, 1e6], (rows, st.T)) * rng.random((rows, st.T)),
        remaining_tokens=rng.choice([0.0, 1e6, 1e12, 1e300], (rows, st.T)),
        budget_left=rng.choice([0.0, 1.0, 50.0, 1e300], (rows, st.T)) * rng.random((rows, st.T)),
    )
    lengths = {}
    if rng.random() < 0.5:  # a replayed trace's lengths per row; else the config's means
        lengths = dict(prompt_tokens=rng.choice([0.0, 30.0, 2000.0, 8000.0], (rows, st.T)), output_tokens=rng.choice([1.0, 27.0, 211.0, 4000.0], (rows, st.T)))
    draws = Draws(arrivals=rng.poisson(100, (rows, st.T)).astype(float), tiebreak=rng.random(st.T), **lengths)
    present = rng.random((rows, st.T)) < 0.75
    for p in (None, present):
        assert_agree(evaluate(st, acts, state, draws, p), oracle.evaluate(st, acts, state, draws, p), f"{mechanism} {safety} present={p is not None}")
    one = type(acts)(acts.gpus[0], acts.bid[0], acts.precision[0], acts.batch[0])
    s0 = RoundState(*(getattr(state, f.name)[0] for f in dataclasses.fields(state)))
    d0 = Draws(draws.arrivals[0], draws.tiebreak, **{k: v[0] for k, v in lengths.items()})
    cf = np.ones((st.T + 1, st.T), bool)
    cf[1:] = ~np.eye(st.T, dtype=bool)
    assert_agree(evaluate_counterfactuals(st, one, s0, d0), oracle.evaluate(st, one, s0, d0, cf), "counterfactuals")
    # the welfare-only rows of evaluate_welfare: the same welfare, the whole outcome of every k-th row
    keep = rng.random(rows) < 0.5
    full, welfare = evaluate_welfare(st, acts, state, draws, present, full=keep)
    want = oracle.evaluate(st, acts, state, draws, present)
    np.testing.assert_allclose(welfare, want.welfare, rtol=1e-9, atol=1e-9)
    assert_agree(full, Outcome(**{f: getattr(want, f)[keep] for f in FIELDS}), "full rows")


def _oracle_welfare(st, actions, state, draws, present=None, *, full=None):
    out = oracle.evaluate(st, actions, state, draws, present)
    keep = slice(None) if full is None else np.asarray(full)
    return Outcome(**{f: getattr(out, f)[keep] for f in FIELDS}), out.welfare


@pytest.mark.parametrize("scheme", ["difference", "shapley"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_whole_episodes_agree_with_the_oracle(task, scheme, monkeypatch):
    """Every task, one episode on the engine and one with the oracle in the credit engine's
    place, same seed and actions: the same allocations, flags and terminations; rewards and
    observations within 1e-9."""
    runs = []
    for use_oracle in (False, True):
        if use_oracle:
            monkeypatch.setattr(credit, "evaluate_welfare", _oracle_welfare)
        env = fleet_marl.parallel_env(task=task, reward_scheme=scheme)
        obs, infos = env.reset(seed=5)
        rng = np.random.default_rng(5)
        steps = []
        while env.agents:
            acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in env.agents}
            obs, rew, term, trunc, infos = env.step(acts)
            steps.append((obs, rew, term, trunc, infos, env.state()))
        runs.append(steps)
    assert len(runs[0]) == len(runs[1]) > 5
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

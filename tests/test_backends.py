"""The numba backend agrees with numpy (the reference) to 1e-9; it falls back to numpy with a
one-line warning when numba is missing; the backend is a validated config field."""

from __future__ import annotations

import dataclasses
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

import fleet_marl
from fleet_marl.config import ConfigError, FleetConfig
from fleet_marl.kernel import BackendWarning, Draws, KernelStatic, RoundState, evaluate, evaluate_counterfactuals, numba_available, resolve_backend
from tests.conftest import make_config, random_actions

needs_numba = pytest.mark.skipif(not numba_available(), reason="numba is not installed (pip install 'fleet-marl[fast]')")
FIELDS = [f.name for f in dataclasses.fields(fleet_marl.kernel.Outcome)]


def assert_agree(a, b, where=""):
    """Integer and boolean fields equal; float fields within 1e-9 (relative, or absolute below 1)."""
    for name in FIELDS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and x.dtype == y.dtype, (where, name, x.shape, y.shape, x.dtype, y.dtype)
        if x.dtype.kind in "biu":
            np.testing.assert_array_equal(x, y, err_msg=f"{where} {name}")
        else:
            np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-9, err_msg=f"{where} {name}")


@needs_numba
@settings(max_examples=40, deadline=None)
@given(
    seed=hst.integers(0, 2**31 - 1),
    mechanism=hst.sampled_from(["proportional", "maxmin", "priority", "auction"]),
    safety=hst.sampled_from(["project", "veto"]),
    n=hst.integers(1, 9),
    nodes=hst.sampled_from([("h100-sxm",), ("h100-sxm", "h100-sxm"), ("h100-sxm", "a100-80gb", "h100-sxm"), ("a100-80gb",) * 5]),
    cap=hst.sampled_from([3000.0, 9000.0, 1e6]),
    rows=hst.integers(1, 24),
)
def test_numba_agrees_with_numpy(seed, mechanism, safety, n, nodes, cap, rows):
    cfg = make_config(n_tenants=n, nodes=nodes, mechanism=mechanism, safety=safety, rack_power_cap_w=cap, nodes_per_rack=2)
    st = KernelStatic.from_config(cfg)
    fast = dataclasses.replace(st, backend="numba")
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
    draws = Draws(arrivals=rng.poisson(100, (rows, st.T)).astype(float), tiebreak=rng.random(st.T))
    present = rng.random((rows, st.T)) < 0.75
    for p in (None, present):
        assert_agree(evaluate(st, acts, state, draws, p), evaluate(fast, acts, state, draws, p), f"{mechanism} {safety} present={p is not None}")
    one = type(acts)(acts.gpus[0], acts.bid[0], acts.precision[0], acts.batch[0])
    s0 = RoundState(*(getattr(state, f.name)[0] for f in dataclasses.fields(state)))
    d0 = Draws(draws.arrivals[0], draws.tiebreak)
    assert_agree(evaluate_counterfactuals(st, one, s0, d0), evaluate_counterfactuals(fast, one, s0, d0), "counterfactuals")
    # beyond the term table (many tenants) stage 1 is computed directly: same answer
    assert_agree(evaluate(st, acts, state, draws), evaluate(dataclasses.replace(fast, term_table=None), acts, state, draws), "no table")


@needs_numba
@pytest.mark.parametrize("task", ["medium", "hard"])
def test_numba_env_episode_matches_numpy(task):
    """A whole episode on each backend, same seed and actions: the same allocations and flags,
    rewards within 1e-9."""
    envs = [fleet_marl.parallel_env(task=task, backend=b) for b in ("numpy", "numba")]
    assert envs[1].kernel_static.backend == "numba"
    outs = [e.reset(seed=3) for e in envs]
    rng = np.random.default_rng(3)
    steps = 0
    while envs[0].agents:
        assert envs[0].agents == envs[1].agents
        infos = outs[0][-1]
        acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in envs[0].agents}
        outs = [e.step(acts) for e in envs]
        (o0, r0, t0, u0, i0), (o1, r1, t1, u1, i1) = outs
        assert t0 == t1 and u0 == u1
        for a in r0:
            assert r1[a] == pytest.approx(r0[a], rel=1e-9, abs=1e-9)
            assert i1[a]["alloc"] == i0[a]["alloc"] and i1[a]["oom"] == i0[a]["oom"] and i1[a]["starved"] == i0[a]["starved"]
            for s, v in i0[a]["rewards"].items():
                assert i1[a]["rewards"][s] == pytest.approx(v, rel=1e-9, abs=1e-9), (a, s)
            np.testing.assert_allclose(o1[a], o0[a], atol=1e-6)
        steps += 1
    assert steps > 10


def test_missing_numba_falls_back_to_numpy_with_one_line_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now raises ImportError
    assert not numba_available()
    with pytest.warns(BackendWarning) as caught:
        assert resolve_backend("numba") == "numpy"
    msg = str(caught[0].message)
    assert "\n" not in msg and "numba" in msg and "fleet-marl[fast]" in msg and "numpy" in msg
    with pytest.warns(BackendWarning):
        env = fleet_marl.parallel_env(task="tiny", backend="numba")
    assert env.kernel_static.backend == "numpy"
    obs, infos = env.reset(seed=0)
    env.step({a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents})


def test_numpy_backend_never_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_backend("numpy") == "numpy"
        KernelStatic.from_config(make_config(n_tenants=2))


def test_backend_is_a_validated_config_field():
    with pytest.raises(ConfigError, match=r"backend = 'cuda': expected one of 'numpy', 'numba'"):
        FleetConfig(backend="cuda")
    with pytest.raises(ConfigError, match=r"backend = 'jax'"):
        fleet_marl.parallel_env(task="tiny", backend="jax")
    with pytest.raises(ValueError, match=r"backend = 'cuda': expected one of 'numpy', 'numba'"):
        resolve_backend("cuda")
    cfg = FleetConfig(backend="numba")
    assert FleetConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["backend"] == "numba"

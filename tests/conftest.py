"""Shared fixtures: small scenarios built from the public config API."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fleet_marl.config import ArbiterSpec, ClusterSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState

pytest_plugins = ["tests.skip_check"]  # FLEET_MARL_STRICT_SKIPS=1 (.ci/run): an unlisted skip fails the session

#: The cases of parametrized core tests that ``make test-fast`` leaves to ``make test`` (marked
#: ``slow`` at collection): per test, the parts of a case's id ("hard" in "hard-dict-flat", or a
#: whole id) that make it slow: the longer tasks (hard, medium, trace_code), the hindsight policy
#: (it replays each round's futures), the dict observations (flat is the default), two of the
#: turn orders. The other cases stay fast; tests/test_fast_suite.py checks that every entry still
#: matches a case on each side.
SLOW_CASES = {
    "tests/test_env_api.py::test_api": {"hard", "trace_code", "dict"},
    "tests/test_env_api.py::test_aec_seed": {"hard", "trace_code", "dict"},
    "tests/test_env_api.py::test_render": {"hard", "trace_code", "dict"},
    "tests/test_env_api.py::test_observations_inside_space_and_float32": {"hard", "trace_code"},
    "tests/test_env_api.py::test_full_episode_is_identical_in_two_processes": {"medium"},
    "tests/test_oracle.py::test_whole_episodes_agree_with_the_oracle": {"hard", "medium"},
    "tests/test_policies.py::test_every_policy_is_legal_over_a_full_episode": {"hard", "medium"},
    "tests/test_policies.py::test_planner_beats_random_by_a_clear_margin_and_heuristics_solve_every_task": {"hard", "medium", "trace_code"},
    "tests/test_policies.py::test_aec_loop_matches_the_parallel_loop": {"hindsight"},
    "tests/test_policies.py::test_policies_read_the_mask_from_dict_observations": {"hindsight"},
    "tests/test_sequential.py::test_api": {"hard", "dict"},
    "tests/test_sequential.py::test_seed": {"hard", "medium"},
    "tests/test_sequential.py::test_render": {"hard", "medium", "trace_code"},
    "tests/test_sequential.py::test_every_policy_is_legal_under_the_sequential_protocol": {"hindsight", "medium"},
    "tests/test_sequential.py::test_full_episode_is_deterministic": {"rotating", "priority"},
    "tests/test_tasks.py::test_heat_binds_in_hard_once_its_rack_cap_is_raised_to_the_tdp_sum": {"planner"},
}


def slow_case(item: pytest.Item) -> bool:
    """Whether SLOW_CASES names this case of a parametrized test."""
    callspec = getattr(item, "callspec", None)
    parts = SLOW_CASES.get(f"{item.nodeid.split('::')[0]}::{getattr(item, 'originalname', item.name)}")
    return bool(parts and callspec) and bool(parts & {callspec.id, *re.split(r"[-/]", callspec.id)})


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        if slow_case(item):
            item.add_marker(pytest.mark.slow)


MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b", "gpt2"]


def make_config(n_tenants=4, nodes=("h100-sxm", "h100-sxm"), mechanism="maxmin", safety="project", **cluster_kw) -> FleetConfig:
    pools = list(dict.fromkeys(nodes))
    tenants = []
    for i in range(n_tenants):
        kind = "train" if i % 2 == 0 else "serve"
        model = MODELS[i % len(MODELS)]
        wl = WorkloadSpec(seq_len=1024 if model == "gpt2" else 2048, prompt_tokens=512, output_tokens=128, rate=2.0)
        tenants.append(TenantSpec(kind=kind, model=model, gpu_type=pools[i % len(pools)], max_gpus=8, priority=1.0 + i % 3, workload=wl))
    return FleetConfig(
        cluster=ClusterSpec(gpu_types=tuple(nodes), **cluster_kw),
        tenants=tuple(tenants),
        arbiter=ArbiterSpec(mechanism=mechanism),
        safety=SafetySpec(mode=safety),
    )


def random_actions(st: KernelStatic, rng: np.random.Generator, B: int | None = None, max_gpus: int = 12) -> Actions:
    """Random valid actions: precisions drawn from what each tenant's GPU and kind allow."""
    from fleet_marl import catalog

    lead = () if B is None else (B,)
    T, G = st.T, catalog.N_GROUPS
    prec = np.empty(lead + (T, G), np.int64)
    for t in range(T):
        ok = [p for p in range(catalog.N_PRECISIONS) if st.supported[t, p] and not (st.is_train[t] and catalog.WEIGHT_ONLY[p])]
        prec[..., t, :] = rng.choice(ok, size=lead + (G,))
    return Actions(
        gpus=rng.integers(0, max_gpus + 1, size=lead + (T,)),
        bid=rng.choice([0.5, 0.75, 1.0, 1.5, 2.0], size=lead + (T,)),
        precision=prec,
        batch=rng.integers(1, 33, size=lead + (T,)),
    )


@pytest.fixture
def cfg():
    return make_config()


@pytest.fixture
def st(cfg):
    return KernelStatic.from_config(cfg)


@pytest.fixture
def state(st):
    return RoundState.initial(st)


@pytest.fixture
def draws(st):
    return Draws.expected(st)


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory):
    """One local Ray for the whole test session (2 CPUs, no dashboard, auth off)."""
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()

"""The outside-client matrix of issue 32 (docs/environment.md, "Outside clients"): every client
x obs_mode x mask_layout x a small and a large task (tiny, hard) either runs a rollout past two
episode ends with finite rewards and every action allowed by its masks (illegal_action="raise":
a masked choice is an ActionError), or is refused when it is built, with an error that names a
combination that works. The CleanRL example's cells play its policy on the ParallelEnv; the
other clients' are tests/client_harness.py's. Also: the docs' table is the matrix's, and the
clients' bench runs."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fleet_marl
from tests.client_harness import CLIENTS, ENDS, MASK_LAYOUTS, OBS_MODES, TASKS, Cell, cells, markdown, run_cell, scenario

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "cleanrl_ppo.py"
#: The adapters of this package: a refused cell is the constructor's own error.
ADAPTERS = {
    "sb3_vecenv": lambda **kw: __import__("fleet_marl.clients.sb3", fromlist=["x"]).FleetSB3VecEnv(num_clusters=1, **kw),
    "pufferlib_native": lambda **kw: __import__("fleet_marl.clients.pufferlib", fromlist=["x"]).FleetPufferEnv(num_clusters=1, **kw),
    "benchmarl": lambda **kw: __import__("fleet_marl.clients.benchmarl", fromlist=["x"]).FleetMenuEnv(num_envs=1, **kw),
}


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


@functools.cache
def cell(client: str, task: str, obs_mode: str, mask_layout: str) -> Cell:
    return run_cell(client, task, obs_mode, mask_layout)


@pytest.mark.parametrize("key", cells(), ids="-".join)
def test_cell_runs_past_two_episode_ends_or_is_refused_naming_a_working_combination(key):
    client, task, obs_mode, mask_layout = key
    c = cell(*key)
    assert c.ok, c
    if c.status == "refused":
        assert f"obs_mode={obs_mode!r}" in c.message and "use obs_mode=" in c.message
        if client in ADAPTERS:  # the adapter's constructor refuses with the same error
            with pytest.raises(ValueError) as err:
                ADAPTERS[client](task=task, obs_mode=obs_mode, mask_layout=mask_layout)
            assert str(err.value) == c.message
    else:
        assert c.ends >= ENDS and c.rewards_finite and c.agent_steps > 0


def test_every_client_runs_somewhere_and_each_refusal_names_a_combination_that_runs():
    for name in CLIENTS:
        mine = {(o, m): cell(name, "tiny", o, m) for o in OBS_MODES for m in MASK_LAYOUTS}
        assert mine["flat", "flat"].status == "runs", name  # the defaults every client takes
        for c in mine.values():
            if c.status == "refused":
                advice = c.message.rsplit("use ", 1)[1]
                named = [
                    (o, m) for (o, m) in mine if f"obs_mode={o!r}" in advice and (f"mask_layout={m!r}" in advice or "either" in advice)
                ]
                assert named and any(mine[k].status == "runs" for k in named), (name, c.message)


def test_the_docs_table_is_the_matrix():
    results = [cell(*key) for key in cells()]
    table = markdown(results)
    docs = (ROOT / "docs" / "environment.md").read_text()
    for row in table.splitlines()[2:]:
        assert row in docs, f"docs/environment.md's 'Outside clients' table lacks (or differs from) the row\n{row}"


@pytest.mark.parametrize(
    "client,obs_mode,mask_layout",
    [
        ("torchrl_wrapper", "flat", "dims"),
        ("torchrl_wrapper", "dict", "flat"),
        ("torchrl_wrapper_mask", "flat", "dims"),
        ("sb3_supersuit", "dict", "flat"),
    ],
)
def test_a_refused_third_party_cell_does_fail_without_the_refusal(client, obs_mode, mask_layout):
    """The refusals of the wrappers of the ParallelEnv are needed: built anyway, the wrapper
    fails (so a refused cell is never one that works)."""
    from tests.client_runs import RUNS

    with pytest.raises(Exception):  # noqa: B017 (each wrapper fails its own way: ValueError, TypeError, AssertionError)
        RUNS[client](scenario("tiny", obs_mode, mask_layout), ENDS, 10, np.random.default_rng(0))


# --- the CleanRL example (experiments/cleanrl_ppo.py) --------------------------------------------


def _cleanrl():
    spec = importlib.util.spec_from_file_location("cleanrl_ppo_matrix", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cleanrl_ppo_matrix"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("obs_mode", OBS_MODES)
@pytest.mark.parametrize("mask_layout", MASK_LAYOUTS)
def test_cleanrl_example_policy_plays_every_cell(task, obs_mode, mask_layout):
    """The script's actor (trained on the vector env's flat masks) as its grader policy
    (GreedyPolicy, which reads either obs_mode and mask_layout) plays two episodes."""
    mod = _cleanrl()
    env = fleet_marl.parallel_env(**scenario(task, obs_mode, mask_layout))
    venv = fleet_marl.vector_env(num_envs=1, task=task)
    agent = mod.Agent(len(env.possible_agents), 34, venv.state_space.shape[-1], venv.nvec_max, 16, 1, "local", False)
    policy = mod.GreedyPolicy(env, agent)
    ends = steps = 0
    for seed in range(ENDS):
        obs, infos = env.reset(seed=seed)
        policy.reset(seed)
        while env.agents:
            obs, rew, _term, _trunc, infos = env.step(policy.act(obs, infos))  # illegal_action="raise": a masked choice raises
            steps += 1
            assert all(np.isfinite(r) for r in rew.values())
        ends += 1
    assert ends == ENDS and steps == ENDS * 3


def test_importing_the_clients_packages_loads_no_client_or_torch():
    code = (
        "import sys, fleet_marl.clients, fleet_marl.clients.base, fleet_marl.clients.benchmarl, tests.client_harness; "
        "print([m for m in ('torch', 'stable_baselines3', 'pufferlib', 'benchmarl', 'torchrl', 'ray') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out == "[]"


# --- the bench ------------------------------------------------------------------------------------


def test_clients_bench_measures_every_route_and_the_ratios():
    from fleet_marl.studies.bench.routes import TARGETS, measure_clients

    report = measure_clients(task="tiny", clusters=4, steps=3, repeats=1)
    rates = report["agent_steps_per_s"]
    assert set(rates) == {
        "vector_env",
        "sb3_supersuit",
        "sb3_vecenv",
        "pufferlib_emulation",
        "pufferlib_native",
        "torchrl_wrapper",
        "torchrl_native",
        "torchrl_serial",
        "torchrl_parallel",
        "rllib_env",
        "rllib_vector",
    }
    assert all(np.isfinite(v) and v > 0 for v in rates.values())
    assert set(report["ratios"]) == set(TARGETS) == set(report["met"])
    assert report["ratios"]["sb3_vecenv_over_supersuit"] == pytest.approx(rates["sb3_vecenv"] / rates["sb3_supersuit"])

"""The outside-client matrix of issue 32 (docs/environment.md, "Outside clients"): every client
x obs_mode x mask_layout x its tasks (a small and a large one, tiny and hard; every registered
task for TorchRL's PettingZooWrapper over the ParallelEnv and both AEC forms) either runs a
rollout past two episode ends with finite rewards and every action allowed by its masks
(illegal_action="raise": a masked choice is an ActionError), or is refused when it is built,
with an error that names a combination that works (tests/client_harness.py). Also: the docs'
table is rendered from the matrix's committed data, which is what the matrix plays now, and
the clients' bench runs."""

from __future__ import annotations

import functools
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import fleet_marl
from fleet_marl.environment import ActionError
from fleet_marl.studies import client_matrix
from tests.client_harness import CLIENTS, ENDS, MASK_LAYOUTS, OBS_MODES, Cell, cells, data, run_cell, scenario
from tests.client_runs import FORMS, masked_choices

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
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


def test_the_docs_data_is_the_matrix_and_the_table_is_its_rendering():
    """docs/data/client_matrix.json holds what the matrix plays now (refresh it with
    python -m tests.client_harness --docs), and docs/environment.md's table is its rendering."""
    live = data([cell(*key) for key in cells()])
    committed = client_matrix.load(ROOT)
    assert committed is not None, f"no {client_matrix.DATA}: run python -m tests.client_harness --docs"
    assert committed["clients"] == live["clients"], "the matrix's clients changed: run python -m tests.client_harness --docs"
    assert committed["cells"] == live["cells"], "a cell's verdict changed: run python -m tests.client_harness --docs"
    assert client_matrix.block(committed) in (ROOT / client_matrix.DOC).read_text()


@pytest.mark.parametrize("client,obs_mode,mask_layout", [("sb3_supersuit", "dict", "flat"), ("sb3_supersuit", "dict", "dims")])
def test_a_refused_third_party_cell_does_fail_without_the_refusal(client, obs_mode, mask_layout):
    """The refusals of the wrappers of the ParallelEnv are needed: built anyway, the wrapper
    fails (so a refused cell is never one that works)."""
    from tests.client_runs import RUNS

    with pytest.raises(Exception):  # noqa: B017 (each wrapper fails its own way: ValueError, TypeError, AssertionError)
        RUNS[client](scenario("tiny", obs_mode, mask_layout), ENDS, 10, np.random.default_rng(0))


# --- TorchRL's PettingZooWrapper: its masks are the env's -----------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("obs_mode,mask_layout", [("flat", "dims"), ("dict", "flat")])
def test_torchrl_wrapper_masks_are_what_keeps_its_actions_legal(form, obs_mode, mask_layout):
    """The wrapper's cells run because TorchRL draws within the env's masks: its
    ("tenant_i" or "tenant", "action_mask") is the env's mask (flat), and actions drawn
    ignoring it take masked choices, which the env (illegal_action="raise") refuses."""
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    opts = scenario("easy", obs_mode, mask_layout)
    pz = fleet_marl.parallel_env(**opts) if form == "parallel" else fleet_marl.env(protocol=form, **opts)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PettingZoo in TorchRL is tested using version")
        env = PettingZooWrapper(pz, use_mask=form != "parallel", seed=0)
    td = env.reset()
    u = pz.unwrapped
    for group, agents in env.group_map.items():
        for k, a in enumerate(agents):
            if form == "parallel" or a == pz.agent_selection:
                want = np.concatenate(u.action_mask(a)) if mask_layout == "dims" else u.action_mask(a)
                np.testing.assert_array_equal(td[group, "action_mask"][k].numpy(), want.astype(bool))
    # an action drawn ignoring the mask that tenant_0 (the first to act in every form) is handed
    nvec, first = u.nvec[0], next(iter(env.group_map))
    uniform = torch.stack([torch.randint(0, int(n), (200,)) for n in nvec], -1)  # (200, 8) over every choice
    bad = masked_choices(
        uniform[:, None].numpy(), np.broadcast_to(td[first, "action_mask"][0].numpy(), (200, 1, int(nvec.sum()))), nvec[None]
    )
    assert bad.any()
    for group, agents in env.group_map.items():
        td[group, "action"] = uniform[bad[:, 0]][:1].expand(len(agents), -1).clone()
    with pytest.raises(ActionError, match="a choice the action mask allows"):
        env.step(td)


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

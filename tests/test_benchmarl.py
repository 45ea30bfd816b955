"""fleet_marl.clients.benchmarl: fleet_marl as a BenchMARL task (benchmarl 1.5.2 on torchrl 0.14; issue
32). The menu env's specs and its mapping to the vector env's actions and masks; partial resets
as the collector makes them; MAPPO, IPPO, MASAC and QMIX each run a short experiment from
BenchMARL's own configs, with a masked choice an error; the task's config; refusals."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from fleet_marl.clients.benchmarl import DEFAULT_FIELDS, TASK_DEFAULTS, FleetMenuEnv, FleetTask, FleetTaskClass
from fleet_marl.clients.benchmarl.run import ALGORITHMS, run_experiment
from fleet_marl.environment import ACTION_FIELDS
from fleet_marl.environment.vector import FleetVectorEnv
from fleet_marl.errors import MissingExtra

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("obs_mode", ["flat", "dict"])
def test_menu_env_specs_and_a_rollout_past_episode_ends(obs_mode):
    env = FleetMenuEnv(num_envs=3, task="tiny", obs_mode=obs_mode, max_cycles=3, illegal_action="raise")
    check_env_specs(env)
    assert env.menu_size == 45 and env.action_spec["agents", "action"].shape == (3, 2)
    td = env.rollout(8, break_when_any_done=False)  # rand_action follows the menu mask: a masked entry would raise
    assert int(td["next", "done"].sum()) == 2 * 3 and torch.isfinite(td["next", "agents", "reward"]).all()
    assert ("agents", "mask_features") in td.keys(True) if obs_mode == "dict" else ("agents", "mask_features") not in td.keys(True)


def test_menu_entries_are_the_vector_envs_actions_and_masks():
    env = FleetMenuEnv(num_envs=2, task="easy", action_fields=("gpus", "bid_level", "batch_level"))
    assert env.menu_size == 9 * 5 * 9
    ref = FleetVectorEnv(2, "easy")
    _, infos = ref.reset(seed=0)
    entries = np.array([[0, 1, 44, 404], [200, 3, 9, 100]])
    full = env.actions(entries)
    for b, t in np.ndindex(entries.shape):
        g, bid, batch = env.menu[entries[b, t]]
        assert full[b, t, [0, 1, 7]].tolist() == [g, bid, batch]
    untouched = [i for i, f in enumerate(ACTION_FIELDS) if f not in ("gpus", "bid_level", "batch_level")]
    assert (full[..., untouched] == env.actions(np.zeros_like(entries))[..., untouched]).all()  # the tenants' default precisions
    flat = infos["action_mask"].copy()
    flat[0, 0, 3:9] = False  # tenant_0 of cluster 0 cannot pay for 3 GPUs or more
    menu = env.menu_mask(flat)
    assert menu.shape == (2, 4, 405)
    gpus = env.menu[:, 0]
    assert (menu[0, 0] == (gpus < 3)).all() and menu[1].all()


def test_partial_resets_hand_out_the_next_episode_as_the_collector_asks():
    env = FleetMenuEnv(num_envs=2, task="tiny", max_cycles=2, seed=0)
    td = env.reset()
    td["agents", "action"] = torch.zeros(2, 2, dtype=torch.long)
    for _ in range(2):
        out = env.step(td)["next"]
    assert out["done"].all()
    fresh = env.reset(out.empty().set("_reset", torch.tensor([[True], [False]])))  # cluster 0 first, then 1
    assert fresh["agents", "observation"].shape == (2, 2, 34)
    with pytest.raises(RuntimeError, match="whose episode ended"):
        env.step(td)  # cluster 1 has not been reset yet
    env.reset(out.empty().set("_reset", torch.tensor([[False], [True]])))
    env.step(td)
    with pytest.raises(RuntimeError, match="partial reset of clusters \\[0\\] that did not end"):
        env.reset(out.empty().set("_reset", torch.tensor([[True], [False]])))


@pytest.mark.parametrize("algorithm", ["mappo", "ippo", "masac", "qmix"])
def test_benchmarl_algorithms_run_on_the_task_from_their_own_configs(algorithm):
    """Two iterations of each algorithm from BenchMARL's YAML configs (the budget cut): the
    collector's batches pass episode ends, every reward is finite, and every action was allowed
    by the menu mask (illegal_action="raise" makes a masked choice an ActionError)."""
    task = FleetTask.TINY.get_task(config={"max_cycles": 3, "overrides": {"illegal_action": "raise"}})
    seen = run_experiment(task, algorithm, iterations=2, frames=32, n_envs=4)
    assert seen["batches"] == 2 and seen["frames"] == 64 and seen["ends"] >= 2 * 8 and seen["rewards_finite"]


def test_a_large_task_and_dict_observations_run_too():
    task = FleetTask.HARD.get_task(
        config={"max_cycles": 3, "obs_mode": "dict", "overrides": {"illegal_action": "raise", "reward_scheme": "global"}}
    )
    seen = run_experiment(task, "mappo", iterations=1, frames=16, n_envs=4)
    assert seen["ends"] >= 4 and seen["agent_steps"] == 16 * 16 and seen["rewards_finite"]


def test_task_config():
    task = FleetTask.EASY.get_task()  # no YAML in benchmarl's folder: the defaults
    assert isinstance(task, FleetTaskClass) and task.config == TASK_DEFAULTS and task.env_name() == "fleet_marl"
    assert task.env_kwargs() == {"task": "easy", "obs_mode": "flat", "mask_layout": "flat", "action_fields": DEFAULT_FIELDS}
    assert task.supports_discrete_actions() and not task.supports_continuous_actions()
    with pytest.raises(ValueError, match="unknown keys \\['horizon'\\]"):
        FleetTask.EASY.get_task(config={"horizon": 3})
    with pytest.raises(ValueError, match="discrete actions"):
        task.get_env_fun(4, True, 0, "cpu")
    with pytest.raises(ValueError, match="use obs_mode='flat', mask_layout='flat'"):
        FleetTask.TINY.get_task(config={"mask_layout": "dims"}).get_env_fun(4, False, 0, "cpu")  # refused when the experiment is built
    assert set(ALGORITHMS) >= {"mappo", "ippo", "masac", "qmix"}


def test_task_config_from_a_yaml_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("max_cycles: 5\nreward_scheme: global\n")
    task = FleetTask.TINY.get_from_yaml(str(path))
    assert task.env_kwargs()["max_cycles"] == 5 and task.env_kwargs()["reward_scheme"] == "global"


def test_refused_combinations_name_a_working_one():
    with pytest.raises(ValueError, match="use obs_mode='dict', mask_layout='flat'"):
        FleetMenuEnv(num_envs=1, task="tiny", obs_mode="dict", mask_layout="dims")
    with pytest.raises(ValueError, match="needs 'gpus'"):
        FleetMenuEnv(num_envs=1, task="tiny", action_fields=("bid_level",))
    with pytest.raises(ValueError, match="a menu of 1265625 entries"):
        FleetMenuEnv(num_envs=1, task="tiny", action_fields=ACTION_FIELDS)


def test_the_extra_and_the_no_deps_install_are_named_when_benchmarl_is_missing(monkeypatch):
    import fleet_marl.clients.benchmarl as adapter

    for name in [m for m in sys.modules if m in ("benchmarl", "fleet_marl.clients.benchmarl.task") or m.startswith("benchmarl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "benchmarl", None)
    with pytest.raises(MissingExtra, match=r"pip install --no-deps benchmarl==1\.5\.2.*needs the \[benchmarl\] extra"):
        adapter.FleetTask

"""fleet_marl.clients.sb3: the vector env as an SB3 VecEnv (issue 32). Its slots are the vector env's
tenants bit for bit; masks in infos (both layouts) and action_masks(); a tenant that leaves
early is done once, its slot dead until the cluster ends; MaskablePPO and PPO train on it with
masked choices an error; refused combinations name a working one."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import fleet_marl
from fleet_marl import catalog
from fleet_marl.clients.sb3 import FleetSB3VecEnv
from fleet_marl.config import FleetConfig
from fleet_marl.environment.vector import FleetVectorEnv, sample_masked
from fleet_marl.errors import MissingExtra
from fleet_marl.tasks import task_dict

pytestmark = pytest.mark.slow

#: tenant_1 goes broke after one round of 4 GPUs at a high bid; tenant_0 plays on to the horizon
BROKE = np.array([4, 3, 1, 1, 1, 1, 1, 3])


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def h100_rounds(cfg: dict, n: float) -> float:
    """USD of ``n`` H100 GPU-rounds at list price in scenario ``cfg``: from the catalog's price and
    the round length, so a budget meant to run out stays meant to when the prices change (a
    hard-coded $0.50 bought one round of 4 GPUs at $6.88 per GPU-hour, two at Modal's $3.9492;
    issue 30)."""
    return n * catalog.gpu("h100-sxm").price_per_hour * FleetConfig.from_dict(cfg).cluster.round_seconds / 3600.0


def uneven(max_cycles: int = 4) -> dict:
    cfg = task_dict("tiny")
    cfg["tenants"][1]["budget"] = h100_rounds(cfg, 4.35)  # a round of 4 GPUs leaves 0.35 of a GPU-round: broke
    cfg["max_cycles"] = max_cycles
    return cfg


def test_slots_are_the_vector_envs_tenants_bit_for_bit():
    venv = FleetSB3VecEnv(num_clusters=3, task="easy", seed=5, max_cycles=4)
    ref = FleetVectorEnv(3, "easy", max_cycles=4, compute_all=False)
    obs, infos = ref.reset(seed=5)
    assert venv.num_envs == 12 and venv.action_space.nvec.tolist() == ref.nvec_max.tolist()
    assert np.array_equal(venv.reset(), obs.reshape(12, -1))
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(9):  # past two episode ends
        before = infos["alive"].reshape(12)
        acts = sample_masked(infos["action_mask"], ref.mask_offsets, rng)
        obs, rew, term, trunc, infos = ref.step(acts)
        o, r, d, _ = venv.step(acts.reshape(12, -1))
        alive = infos["alive"].reshape(12)
        assert np.array_equal(o[alive], obs.reshape(12, -1)[alive]) and not o[~alive].any()
        assert np.array_equal(r, rew.reshape(12).astype(np.float32))
        assert np.array_equal(d[before], (term | trunc).reshape(12)[before])  # a tenant's slot is done when it leaves
        assert np.array_equal(venv.action_masks(), infos["action_mask"].reshape(12, -1))
        ends += int(infos["_final"].sum())
    assert ends >= 6


@pytest.mark.parametrize("layout", ["flat", "dims"])
def test_masks_in_infos_in_their_layout_and_action_masks(layout):
    venv = FleetSB3VecEnv(num_clusters=2, task="tiny", mask_layout=layout, seed=0)
    venv.reset()
    flat = venv.action_masks()
    assert flat.shape == (4, 48) and flat.dtype == bool
    assert venv.env_method("action_masks", indices=[1])[0].tolist() == flat[1].tolist()  # MaskablePPO's call
    assert venv.has_attr("action_masks")
    for i, info in enumerate(venv.reset_infos):
        m = info["action_mask"]
        if layout == "flat":
            assert np.array_equal(m, flat[i])
        else:
            assert isinstance(m, tuple) and [len(d) for d in m] == [9, 5, 5, 5, 5, 5, 5, 9]
            assert np.array_equal(np.concatenate(m), flat[i])
    assert not flat[:, 9 + 5 + 3 : 9 + 5 + 5].any()  # INT8/INT4 masked for the trainers (precision.embedding)


def test_a_tenant_that_leaves_early_is_done_once_then_dead_until_its_cluster_ends():
    venv = FleetSB3VecEnv(num_clusters=1, config=uneven(4), seed=0)
    ref = FleetVectorEnv(1, config=uneven(4), compute_all=False)
    _ref_obs, _ = ref.reset(seed=0)
    venv.reset()
    acts = np.stack([BROKE, BROKE])
    obs, rew, dones, infos = venv.step(acts)
    r_obs, r_rew, r_term, _, _r_infos = ref.step(acts[None])
    assert dones.tolist() == [False, True] and r_term[0, 1]
    assert not infos[1]["TimeLimit.truncated"] and infos[1]["episode"] == {"r": pytest.approx(float(r_rew[0, 1])), "l": 1}
    assert np.array_equal(infos[1]["terminal_observation"], r_obs[0, 1])  # its last observation
    assert not infos[1]["alive"] and np.all(obs[1] == 0) and venv.action_masks()[1].all()  # dead: zeros, every choice allowed
    for _ in range(2):
        obs, rew, dones, infos = venv.step(acts)
        assert dones.tolist() == [False, False] and rew[1] == 0 and np.all(obs[1] == 0) and "episode" not in infos[1]
    obs, rew, dones, infos = venv.step(acts)  # the horizon: tenant_0 truncated, the dead slot closed, the cluster starts anew
    assert dones.tolist() == [True, True]
    assert infos[0]["TimeLimit.truncated"] and infos[0]["episode"]["l"] == 4
    assert "episode" not in infos[1] and np.all(infos[1]["terminal_observation"] == 0)
    assert infos[0]["alive"] and infos[1]["alive"] and np.all(obs[1] > -1) and obs[1].any()  # a fresh episode: both live
    for _ in range(3):
        r_obs, *_ = ref.step(acts[None])
    assert np.array_equal(obs, r_obs[0])  # the first observation of the next episode, as the vector env's autoreset gives it


def test_seed_then_reset_is_the_vector_envs_seeding():
    venv = FleetSB3VecEnv(num_clusters=2, task="easy")
    seeds = venv.seed(11)
    assert seeds == [11] * 4 + [12] * 4  # each slot's cluster seed
    ref, _ = FleetVectorEnv(2, "easy").reset(seed=11)
    assert np.array_equal(venv.reset(), ref.reshape(8, -1))


def test_maskable_ppo_trains_with_masked_choices_an_error():
    """sb3-contrib's MaskablePPO reads action_masks(); with illegal_action="raise" a choice the
    mask forbids is an ActionError, so two PPO iterations through episode ends check the masks."""
    from sb3_contrib import MaskablePPO

    venv = FleetSB3VecEnv(num_clusters=4, task="tiny", max_cycles=5, illegal_action="raise")
    model = MaskablePPO("MlpPolicy", venv, n_steps=16, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=2 * 16 * venv.num_envs)
    assert model.num_timesteps == 256
    eps = list(model.ep_info_buffer)
    assert len(eps) >= 16 and all(np.isfinite(e["r"]) and e["l"] == 5 for e in eps)  # 8 slots x 6 episode ends, each reported
    obs = venv.reset()
    actions, _ = model.predict(obs, action_masks=venv.action_masks(), deterministic=True)
    assert actions.shape == (8, 8)
    venv.step(actions)  # allowed by the masks (illegal_action="raise")


def test_ppo_multi_input_policy_on_dict_observations():
    from stable_baselines3 import PPO

    venv = FleetSB3VecEnv(num_clusters=2, task="tiny", max_cycles=3, obs_mode="dict")
    obs = venv.reset()
    assert set(obs) == {"observation", "action_mask"} and obs["observation"].shape == (4, 34) and obs["action_mask"].shape == (4, 48)
    assert np.array_equal(obs["action_mask"].astype(bool), venv.action_masks())
    PPO("MultiInputPolicy", venv, n_steps=8, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(32)


def test_refused_combinations_name_a_working_one():
    with pytest.raises(ValueError, match="use obs_mode='dict', mask_layout='flat'"):
        FleetSB3VecEnv(num_clusters=1, task="tiny", obs_mode="dict", mask_layout="dims")
    with pytest.raises(ValueError, match="obs_mode = 'image'"):
        FleetSB3VecEnv(num_clusters=1, task="tiny", obs_mode="image")
    with pytest.raises(ValueError, match="mask_layout = 'tuple'"):
        FleetSB3VecEnv(num_clusters=1, task="tiny", mask_layout="tuple")


def test_the_extra_is_named_when_sb3_is_missing(monkeypatch):
    monkeypatch.delitem(sys.modules, "fleet_marl.clients.sb3")  # imported above: import it afresh
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(MissingExtra, match=r"fleet_marl.clients.sb3 needs the \[sb3\] extra: pip install 'fleet-marl\[sb3\]'"):
        importlib.import_module("fleet_marl.clients.sb3")


def test_importing_the_clients_package_loads_no_sb3_or_torch():
    code = "import sys, fleet_marl.clients, fleet_marl.clients.base; print([m for m in ('torch', 'stable_baselines3') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_the_array_step_is_what_sb3_sees():
    """No PettingZoo dicts: the VecEnv steps the vector env once per step_wait."""
    venv = FleetSB3VecEnv(num_clusters=8, task="medium")
    calls = []
    step = venv.venv.step
    venv.venv.step = lambda a: calls.append(a.shape) or step(a)
    venv.reset()
    venv.step(np.zeros((venv.num_envs, 8), np.int64))
    assert calls == [(8, 8, 8)] and isinstance(fleet_marl.vector_env(num_envs=1, task="tiny"), FleetVectorEnv)

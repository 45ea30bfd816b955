"""fleet_marl.clients.pufferlib: the vector env as a native PufferLib env (issue 32). It writes the
vector env's step into PufferLib's buffers (its own, or the slices pufferlib.vector's Serial and
Multiprocessing backends hand it); dead rows as PufferLib's emulation marks them; the mask in
the observation with obs_mode="dict"; seeds that never overlap across envs; refusals that name
a working combination; PettingZooPufferEnv over the ParallelEnv as the reference."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pufferlib
import pufferlib.vector
import pytest

import fleet_marl
from fleet_marl import catalog
from fleet_marl.clients.pufferlib import FleetPufferEnv
from fleet_marl.config import FleetConfig
from fleet_marl.environment.vector import FleetVectorEnv, sample_masked
from fleet_marl.errors import MissingExtra
from fleet_marl.tasks import task_dict

pytestmark = pytest.mark.slow

BROKE = np.array([4, 3, 1, 1, 1, 1, 1, 3])  # tenant_1 of uneven() goes broke after one round of it


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


def test_native_make_returns_the_env_and_its_buffers_hold_the_vector_step():
    env = pufferlib.vector.make(
        FleetPufferEnv, backend=pufferlib.PufferEnv, env_kwargs={"num_clusters": 3, "task": "easy", "max_cycles": 3}
    )
    assert isinstance(env, FleetPufferEnv) and env.num_agents == 12 and not env.emulated
    ref = FleetVectorEnv(3, "easy", max_cycles=3, compute_all=False)
    r_obs, infos = ref.reset(seed=0)
    obs, _ = env.reset(seed=0)
    assert obs is env.observations and np.array_equal(obs, r_obs.reshape(12, -1))
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(7):
        acts = sample_masked(infos["action_mask"], ref.mask_offsets, rng)
        r_obs, rew, term, trunc, infos = ref.step(acts)
        obs, rewards, terminals, truncations, stats = env.step(acts.reshape(12, -1))
        assert np.array_equal(obs, r_obs.reshape(12, -1)) and np.array_equal(rewards, rew.reshape(12).astype(np.float32))
        assert np.array_equal(terminals, term.reshape(12)) and np.array_equal(truncations, trunc.reshape(12)) and env.masks.all()
        assert np.array_equal(env.action_masks(), infos["action_mask"].reshape(12, -1))
        if infos["_final"].any():
            ends += 1
            assert stats and np.isclose(stats[0]["welfare"], infos["episode"]["welfare"][infos["_final"]].mean())
        else:
            assert stats == []
    assert ends == 2


def test_a_dead_row_is_marked_as_pufferlibs_emulation_marks_an_absent_agent():
    env = FleetPufferEnv(num_clusters=1, config=uneven(4), seed=0)
    env.reset()
    acts = np.stack([BROKE, BROKE])
    env.step(acts)
    assert env.terminals.tolist() == [False, True] and env.masks.tolist() == [True, True]  # it left at this step
    for _ in range(2):
        obs, rew, term, _, _ = env.step(acts)
        assert not obs[1].any() and rew[1] == 0 and term[1] and not env.masks[1] and env.masks[0]
        assert env.action_masks()[1].all()
    obs, _, term, trunc, stats = env.step(acts)  # the horizon: the cluster starts its next episode in the same step
    assert trunc[0] and env.masks.all() and obs[1].any() and len(stats) == 1


@pytest.mark.parametrize("layout", ["flat", "dims"])
def test_masks_from_action_masks_in_either_layout(layout):
    env = FleetPufferEnv(num_clusters=2, task="tiny", mask_layout=layout, seed=0)
    env.reset()
    m = env.action_masks()
    if layout == "dims":
        assert isinstance(m, tuple) and [d.shape for d in m] == [(4, n) for n in (9, 5, 5, 5, 5, 5, 5, 9)]
    else:
        assert m.shape == (4, 48) and m.dtype == bool


def test_obs_mode_dict_carries_the_flat_mask_in_the_observation():
    env = FleetPufferEnv(num_clusters=2, task="tiny", obs_mode="dict", seed=0)
    obs, _ = env.reset()
    assert env.single_observation_space.shape == (34 + 48,) and obs.shape == (4, 82)
    assert np.array_equal(obs[:, 34:].astype(bool), env.action_masks())


@pytest.mark.parametrize("backend", ["Serial", "Multiprocessing"])
def test_pufferlib_vector_backends_run_several_envs_into_shared_buffers(backend):
    vec = pufferlib.vector.make(
        FleetPufferEnv,
        backend=getattr(pufferlib.vector, backend),
        num_envs=2,
        num_workers=2,
        env_kwargs={"num_clusters": 2, "task": "tiny", "max_cycles": 3, "obs_mode": "dict", "illegal_action": "raise"},
    )
    try:
        obs, _ = vec.reset(seed=3)
        assert obs.shape == (8, 82)
        first = obs.copy()
        rng = np.random.default_rng(0)
        offsets = np.concatenate(([0], np.cumsum([9, 5, 5, 5, 5, 5, 5, 9])))
        done = 0
        for _ in range(7):
            obs, rew, _term, trunc, _ = vec.step(sample_masked(obs[:, 34:] > 0, offsets, rng))  # masks from the observation
            assert np.isfinite(rew).all()
            done += int(trunc.all())
        assert done == 2
    finally:
        vec.close()
    # env i is seeded 3 + i, so its clusters are (3 + i) * 2 + b: env 0 -> 6, 7; env 1 -> 8, 9 (no overlap)
    ref, _ = FleetVectorEnv(4, "tiny", max_cycles=3).reset(seed=6)
    assert np.array_equal(first[:, :34], ref.reshape(8, -1))


def test_refused_combinations_name_a_working_one():
    with pytest.raises(ValueError, match="use obs_mode='dict', mask_layout='flat'"):
        FleetPufferEnv(num_clusters=1, task="tiny", obs_mode="dict", mask_layout="dims")
    with pytest.raises(ValueError, match="obs_mode = 'image'"):
        FleetPufferEnv(num_clusters=1, task="tiny", obs_mode="image")


def test_the_extra_and_the_no_deps_install_are_named_when_pufferlib_is_missing(monkeypatch):
    monkeypatch.delitem(sys.modules, "fleet_marl.clients.pufferlib")  # imported above: import it afresh
    monkeypatch.setitem(sys.modules, "pufferlib", None)
    with pytest.raises(MissingExtra, match=r"pip install --no-deps pufferlib-core==3\.0\.23.*needs the \[pufferlib\] extra"):
        importlib.import_module("fleet_marl.clients.pufferlib")


def test_pettingzoo_puffer_env_over_the_parallel_env_is_the_reference():
    """PufferLib's emulation of the ParallelEnv steps the same episode (its observations, the
    first round's rewards) as the native env with one cluster and the same seed."""
    from pufferlib.emulation import PettingZooPufferEnv

    emu = PettingZooPufferEnv(env=fleet_marl.parallel_env(task="tiny", compute_all=False))
    native = FleetPufferEnv(num_clusters=1, task="tiny")
    emu.reset(seed=4)
    obs, _ = native.reset(seed=4)
    assert np.array_equal(emu.observations, obs)
    acts = np.zeros((2, 8), np.int32)
    emu.step(acts)
    native.step(acts)
    assert np.array_equal(emu.observations, native.observations) and np.array_equal(emu.rewards, native.rewards)

"""The vector env: B clusters equal B parallel envs seeded s..s+B-1, step by step, bit for
bit (autoreset included); agents that left keep their slot; bad actions are clear errors that
change nothing; masks, state and seeds."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import fleet_marl
from fleet_marl.environment import ActionError, scheme_rewards
from fleet_marl.environment.spaces import N_ACT, N_OBS


def _mask_pick(mask_dims, b, t, rng):
    return np.array([rng.choice(np.flatnonzero(m[b, t])) for m in mask_dims], np.int64)


@pytest.mark.parametrize(
    "task,scheme,B", [("tiny", "difference", 3), ("medium", "shapley", 2), ("trace", "difference_default", 2), ("hard", "global", 2)]
)
def test_vector_clusters_equal_parallel_envs_bit_for_bit(task, scheme, B):
    """Two episodes of each cluster (the second after an automatic reset): observations,
    rewards of every scheme, terminations, truncations, alive and state equal exactly."""
    kw = dict(task=task, reward_scheme=scheme, max_cycles=12)
    venv = fleet_marl.vector_env(num_envs=B, **kw)
    envs = [fleet_marl.parallel_env(**kw) for _ in range(B)]
    vobs, vinfos = venv.reset(seed=7)
    pouts = [e.reset(seed=7 + b) for b, e in enumerate(envs)]
    rng = np.random.default_rng(0)
    episodes = np.zeros(B, int)
    steps = 0
    while episodes.min() < 2:
        for b, (e, (pobs, pinfos)) in enumerate(zip(envs, pouts, strict=False)):
            for a in e.agents:
                i = e.agent_index[a]
                assert np.array_equal(vobs[b, i], pobs[a]), (b, a, steps)
                assert np.array_equal(
                    np.concatenate(pinfos[a]["action_mask"]).astype(bool),
                    np.concatenate(
                        [m[b, i, : len(pm)] for m, pm in zip(vinfos["action_mask_dims"], pinfos[a]["action_mask"], strict=False)]
                    ),
                )
            assert np.array_equal(venv.state()[b], e.state())
            assert vinfos["alive"][b].tolist() == [a in e.agents for a in e.possible_agents]
        acts = np.zeros((B, venv.num_agents, N_ACT), np.int64)
        for b in range(B):
            for i in range(venv.num_agents):
                acts[b, i] = _mask_pick(vinfos["action_mask_dims"], b, i, rng)
        vobs, vrew, vterm, vtrunc, vinfos = venv.step(acts)
        for b, e in enumerate(envs):
            pacts = {a: acts[b, e.agent_index[a]] for a in e.agents}
            pobs, prew, pterm, ptrunc, pinfos = e.step(pacts)
            for a in pacts:
                i = e.agent_index[a]
                assert vrew[b, i] == prew[a] and vterm[b, i] == pterm[a] and vtrunc[b, i] == ptrunc[a]
                for k, v in scheme_rewards(pinfos[a]).items():
                    assert vinfos["rewards"][k][b, i] == v, (k, b, a)
                assert vinfos["alloc"][b, i] == pinfos[a]["alloc"] and vinfos["starved"][b, i] == pinfos[a]["starved"]
                assert vinfos["fair_share"][b, i] == pinfos[a]["fair_share"]  # also after an automatic reset of b
                assert vinfos["starvation_streak"][b, i] == pinfos[a]["starvation_streak"]
                if (pterm[a] or ptrunc[a]) and not e.agents:
                    assert vinfos["_final"][b]
                    assert vinfos["episode"]["return"][b, i] == e.episode_reports[a]["return"]
            if vinfos["_final"][b]:
                assert not e.agents
                for a in pacts:
                    assert np.array_equal(vinfos["final_obs"][b, e.agent_index[a]], pobs[a])
                assert np.array_equal(vinfos["final_state"][b], e.state())
                episodes[b] += 1
                pouts[b] = e.reset()  # the vector env's autoreset continues the generators
            else:
                assert e.agents
                pouts[b] = (pobs, pinfos)
            dead = [i for i, a in enumerate(e.possible_agents) if a not in pacts]
            assert all(vrew[b, i] == 0 and not vterm[b, i] and not vtrunc[b, i] for i in dead)
        steps += 1
    assert steps >= 20


def test_agents_that_left_keep_their_slot_and_their_actions_are_ignored():
    cfg = fleet_marl.tasks.task_dict("tiny")
    cfg["tenants"][1]["budget"] = 0.5  # tenant_1 goes broke within a few rounds (a GPU-round costs about 0.11 USD)
    venv = fleet_marl.vector_env(num_envs=2, config=cfg)
    obs, infos = venv.reset(seed=1)
    rng = np.random.default_rng(1)
    left = False
    for _ in range(10):
        acts = venv.sample_actions(infos, rng)
        gone = ~infos["alive"]
        acts[gone] = 10**6  # garbage for agents that left: ignored, not an error
        obs, rew, term, trunc, infos = venv.step(acts)
        if gone.any():
            left = True
            assert (rew[gone] == 0).all() and not term[gone].any() and not trunc[gone].any()
            assert (obs[gone][:, 1] == 0).all()  # the alive feature
            b, t = np.argwhere(gone)[0]
            assert infos["action_mask"][b, t, : venv.nvec[t, 0]].all()  # all allowed
    assert left


def test_bad_actions_name_cluster_tenant_and_field_and_change_nothing():
    venv = fleet_marl.vector_env(num_envs=3, task="easy")
    obs, infos = venv.reset(seed=0)
    acts = venv.sample_actions(infos, np.random.default_rng(0))
    before = pickle.dumps((venv._s, [r.bit_generator.state for r in venv._rngs]))
    bad = acts.copy()
    bad[2, 1, 3] = 99
    with pytest.raises(
        ActionError, match=r"cluster 2, tenant_1: action\[3\] \(precision.attention\) = 99: expected an integer in \[0, 4\]"
    ):
        venv.step(bad)
    with pytest.raises(ActionError, match=r"actions: shape = \(3, 4\): expected \(3, 4, 8\)"):
        venv.step(acts[..., 0])
    with pytest.raises(ActionError, match=r"actions: dtype"):
        venv.step(acts.astype(object))
    frac = acts.astype(float)
    frac[0, 0, 0] = 0.5
    with pytest.raises(ActionError, match=r"cluster 0, tenant_0: action\[0\] \(gpus\) = 0.5: expected an integer"):
        venv.step(frac)
    assert pickle.dumps((venv._s, [r.bit_generator.state for r in venv._rngs])) == before
    strict = fleet_marl.vector_env(num_envs=2, task="medium", illegal_action="raise")
    _obs, infos = strict.reset(seed=0)
    acts = strict.sample_actions(infos, np.random.default_rng(0))
    a100 = int(np.flatnonzero(~strict._core.masks.prec_legal[:, 2])[0])  # a tenant on a GPU without FP8
    acts[1, a100, 2] = 2
    with pytest.raises(
        ActionError, match=rf"cluster 1, tenant_{a100}: action\[2\] \(precision.embedding\) = 2: expected a choice the action mask allows"
    ):
        strict.step(acts)
    with pytest.raises(RuntimeError, match="before reset"):
        fleet_marl.vector_env(num_envs=1, task="tiny").step(np.zeros((1, 2, 8), int))


def test_masks_state_seeds_and_spaces():
    venv = fleet_marl.vector_env(num_envs=4, task="medium")
    obs, infos = venv.reset(seed=[3, 5, 3, 9])
    assert obs.shape == (4, venv.num_agents, N_OBS) and obs.dtype == np.float32 and ((obs >= 0) & (obs <= 1)).all()
    assert np.array_equal(obs[0], obs[2]) and venv.state().shape == venv.state_space.shape
    mask = infos["action_mask"]
    assert mask.dtype == bool and mask.shape == (4, venv.num_agents, int(venv.nvec_max.sum()))
    dims = infos["action_mask_dims"]
    assert len(dims) == N_ACT and np.array_equal(np.concatenate(dims, axis=-1), mask)
    for t in range(venv.num_agents):  # nothing beyond a tenant's own range is allowed
        assert not dims[0][:, t, venv.nvec[t, 0] :].any()
    acts = venv.sample_actions(infos, np.random.default_rng(0))
    assert venv.single_action_space.contains(acts[0]) and venv.observation_space.contains(obs)
    with pytest.raises(ValueError, match="seed"):
        venv.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="num_envs = 0"):
        fleet_marl.vector_env(num_envs=0, task="tiny")
    with pytest.raises(ValueError, match="obs_mode"):
        fleet_marl.vector_env(num_envs=1, task="tiny", obs_mode="dict")


def test_the_round_vector_env_plays_the_simultaneous_protocol_and_vector_env_picks_the_form():
    """FleetVectorEnv(protocol='sequential') is refused by name and points to the per-turn form;
    vector_env(protocol='sequential') builds that form; a bad protocol or a turn_order without
    the sequential protocol is the same ConfigError as for the other forms; 'simultaneous' is accepted."""
    from fleet_marl.config import ConfigError

    with pytest.raises(ValueError, match=r"protocol = 'sequential': FleetVectorEnv steps .* fleet_marl\.vector_env\(protocol='sequential'"):
        fleet_marl.FleetVectorEnv(num_envs=2, task="tiny", protocol="sequential")
    seq = fleet_marl.vector_env(num_envs=2, task="tiny", protocol="sequential", turn_order="rotating")
    assert type(seq).__name__ == "FleetSequentialVectorEnv" and seq.turn_order == "rotating"
    with pytest.raises(ConfigError, match="turn_order = 'rotating'"):
        fleet_marl.vector_env(num_envs=2, task="tiny", turn_order="rotating")
    with pytest.raises(ConfigError, match="protocol = 'turns'"):
        fleet_marl.vector_env(num_envs=2, task="tiny", protocol="turns")
    venv = fleet_marl.vector_env(num_envs=2, task="tiny", protocol="simultaneous")
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (2, 2, 34)

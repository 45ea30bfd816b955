"""The sequential protocol for learners: the per-turn vector env (bit for bit the AEC env), the
re-layout of turns into rounds, TorchRL training under it, and the protocol study's trained rows."""

from __future__ import annotations

import numpy as np
import pytest

import fleet_marl
from fleet_marl.config import ConfigError
from fleet_marl.environment import ActionError, FleetSequentialVectorEnv


def _skip_dead(e):
    """Play the AEC env's dead steps; the observation of the agent whose turn it is (None: episode over)."""
    while e.agents:
        o, _, t, tr, _ = e.last()
        if not (t or tr):
            return o
        e.step(None)
    return None


def _play_both(task: str, order: str, B: int = 3, seed: int = 5, episodes: int = 2) -> tuple[int, int]:
    """Play ``episodes`` episodes per cluster of the per-turn vector env and of B AEC envs with the
    same seeds and actions, asserting every turn's observation and state, every round's rewards,
    terminations and truncations, and the final observations are the same bits. Returns
    (turns, inactive turn slots)."""
    venv = fleet_marl.vector_env(num_envs=B, task=task, protocol="sequential", turn_order=order)
    aecs = [fleet_marl.env(task=task, protocol="sequential", turn_order=order) for _ in range(B)]
    obs, infos = venv.reset(seed=seed)
    for b, e in enumerate(aecs):
        e.reset(seed=seed + b)
    rng = np.random.default_rng(1)
    done = np.zeros(B, int)
    turns = inactive = 0
    while done.min() < episodes:
        acts = venv.sample_actions(infos, rng)
        state = venv.state()
        for b, e in enumerate(aecs):
            if not infos["active"][b]:
                inactive += 1
                continue
            o = _skip_dead(e)
            if o is None:  # the vector env started the next episode in the step that ended this one
                e.reset()
                o = _skip_dead(e)
            assert e.agent_selection == f"tenant_{infos['agent'][b]}"
            assert np.array_equal(o, obs[b]), (task, order, turns, b)
            assert np.array_equal(e.unwrapped.state(), state[b])
            e.step(acts[b])
        obs, rew, term, trunc, infos = venv.step(acts)
        turns += 1
        assert infos["round_end"] == (turns % venv.num_agents == 0)
        if not infos["round_end"]:
            assert not rew.any() and not term.any() and not trunc.any()
            continue
        for b, e in enumerate(aecs):
            u = e.unwrapped
            for a, i in u.agent_index.items():
                if a in u.rewards:
                    assert (rew[b, i], term[b, i], trunc[b, i]) == (u.rewards[a], u.terminations[a], u.truncations[a])
                else:  # left in an earlier round
                    assert (rew[b, i], term[b, i], trunc[b, i]) == (0.0, False, False)
            if infos["_final"][b]:
                while e.agents:  # each agent's last observation, at its dead step, is the final one
                    a = e.agent_selection
                    o, _, t, tr, _ = e.last()
                    assert (t or tr) and np.array_equal(o, infos["final_obs"][b, u.agent_index[a]])
                    e.step(None)
                done[b] += 1
    return turns, inactive


@pytest.mark.parametrize("order", ["fixed", "rotating", "random", "priority"])
def test_the_per_turn_vector_env_is_the_aec_env_bit_for_bit(order):
    turns, _ = _play_both("tiny", order)
    assert turns == 2 * 2 * 25  # 2 episodes of 25 rounds of 2 turns


@pytest.mark.parametrize("order", ["rotating", "random"])
def test_bit_for_bit_also_when_tenants_leave_mid_episode(order):
    """On ``trace`` random actions drive tenants out before the horizon: their turn slots go
    inactive (after the live ones) and the live tenants' places are the AEC env's."""
    _, inactive = _play_both("trace", order, B=2, episodes=1)
    assert inactive > 0


def test_a_rejected_turn_changes_nothing_and_names_the_cluster_tenant_and_field():
    venv = fleet_marl.vector_env(num_envs=2, task="tiny", protocol="sequential", turn_order="rotating")
    obs, infos = venv.reset(seed=0)
    acts = venv.sample_actions(infos, np.random.default_rng(0))
    bad = acts.copy()
    bad[1, 0] = 99
    with pytest.raises(ActionError, match=r"cluster 1, tenant_0: action\[0\] \(gpus\) = 99"):
        venv.step(bad)
    with pytest.raises(ActionError, match=r"shape = \(2, 2, 8\): expected \(2, 8\)"):
        venv.step(np.zeros((2, 2, 8), np.int64))
    assert venv.turn == 0 and np.array_equal(venv.observations()[np.arange(2), infos["agent"]], obs)
    obs2, *_ = venv.step(acts)
    assert venv.turn == 1
    # the second tenant sees the first one's claim
    claimed = fleet_marl.environment.SEQUENTIAL_OBS_INDEX["claimed"]
    assert (obs2[:, claimed] > 0).tolist() == (acts[:, 0] > 0).tolist()


def test_bad_protocol_and_turn_order_are_named():
    with pytest.raises(ConfigError, match="turn_order = 'alphabetical'"):
        fleet_marl.vector_env(num_envs=2, task="tiny", protocol="sequential", turn_order="alphabetical")
    with pytest.raises(ValueError, match="protocol = 'simultaneous': FleetSequentialVectorEnv plays protocol='sequential'"):
        FleetSequentialVectorEnv(2, "tiny", protocol="simultaneous")

"""The k-round difference of a recorded vector rollout (``fleet_marl.environment.horizon``), the
reward a learner trains on with ``credit_horizon: k``: with k = 1 it is the env's ``difference``
reward bit for bit; with k > 1 it is the measurement tool's D^k (``fleet_marl.studies.credit_horizon``,
the oracle) of the same episodes, bit for bit, over several episodes a cluster and across a suite
task's scenarios; the same seed gives the same values; bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

import fleet_marl
from fleet_marl.environment.horizon import Recorder, check_horizon, k_round_difference, shaped, window_ends
from fleet_marl.environment.scenario_vector import make_vector_env
from fleet_marl.studies import credit_horizon as ch
from fleet_marl.suite import scenarios


class Replay:
    """A policy that plays one cluster's recorded actions (gpus 0 and the first choices once they run out)."""

    def __init__(self, env, actions):
        self.env, self.actions, self.u = env, actions, 0

    def reset(self, seed=None):
        pass

    def act(self, obs, infos):
        a = self.actions[self.u] if self.u < len(self.actions) else np.zeros_like(self.actions[0])
        self.u += 1
        return {ag: a[self.env.agent_index[ag]] for ag in self.env.agents}


def record(task: str, steps: int, seed: int = 5, num_envs: int = 3, **overrides) -> tuple:
    """A vector rollout of random legal actions, recorded: (venv, recorder, actions (W, B, T, 8), rewards (W, B, T))."""
    venv = make_vector_env(num_envs, task, reward_scheme="difference", **overrides)
    rec = Recorder(venv)
    _, infos = venv.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions, rewards = [], []
    for _ in range(steps):
        a = venv.sample_actions(infos, rng)
        _, r, _, _, infos = rec.step(venv, a)
        actions.append(a)
        rewards.append(r)
    return venv, rec, np.array(actions), np.array(rewards)


def oracle(env_of, seeds, actions: np.ndarray, k: int, variant: str, count: int) -> np.ndarray:
    """(count, B, T) the tool's D^k of the same episodes: cluster b replayed in a ParallelEnv
    (``env_of(b)``) reset with ``seeds[b]``, its later episodes continuing its generators (as the
    vector env's autoreset does)."""
    W, B, T, _ = actions.shape
    out = np.full((count, B, T), np.nan)
    for b in range(B):
        env = env_of(b)
        cs = ch.branch_static(env)
        u, seed = 0, seeds[b]
        while u < count:
            ep = ch.play(env, Replay(env, list(actions[u:, b])), seed)
            seed = None
            E = len(ep.welfare)
            D = ch.differences(cs, ep, k, variant)["D"][:, :, k - 1]
            n = min(E, count - u)
            out[u : u + n, b] = D[:n]
            u += E
    return out


@pytest.mark.parametrize(("task", "overrides"), [("capped_rack", {}), ("hard", {}), ("easy", {"arbiter": {"mechanism": "auction"}})])
def test_one_round_is_the_envs_difference_reward_bit_for_bit(task, overrides):
    """With k = 1 the relabelled rewards are the rewards the env returned, shaped (the
    degenerate floor) and 0 for tenants out of their episode, over episode ends and resets."""
    _, rec, _, rewards = record(task, 9, max_cycles=4, **overrides)
    got = rec.rewards(1)
    assert got.shape == rewards.shape
    np.testing.assert_array_equal(got, rewards)


@pytest.mark.parametrize("variant", ["sits_out", "withdrawn"])
@pytest.mark.parametrize("task", ["capped_rack", "hard", "tiny"])
def test_k_rounds_are_the_measurement_tools_differences(task, variant):
    """D^k of the record equals the tool's D^k of the same episodes (the tool is the oracle),
    bit for bit, for windows inside an episode and windows its end cuts (max_cycles 5: each
    cluster plays three episodes in 14 steps; tiny: tenants that never leave)."""
    k, W = 4, 14
    _, rec, actions, _ = record(task, W, max_cycles=5)
    got = rec.differences(k, variant)
    count = W - k + 1
    want = oracle(
        lambda b: fleet_marl.parallel_env(task=task, reward_scheme="difference", max_cycles=5), [5, 6, 7], actions, k, variant, count
    )
    np.testing.assert_array_equal(got, want)
    if task != "tiny":  # a coupled task: the rounds after t do count
        live = ~np.isnan(got)
        assert np.abs(got - rec.differences(1, variant, count))[live].max() > 0


def test_a_suite_task_is_relabelled_per_scenario():
    """A suite task's vector env spreads its clusters over train scenarios (each its own core):
    each cluster's D^k is the tool's on its scenario, and k = 1 is the env's reward."""
    k, W = 3, 8
    _, rec, actions, rewards = record("power_n8", W, num_envs=4, scenarios=2, max_cycles=6)
    np.testing.assert_array_equal(rec.rewards(1), rewards)
    configs = [cfg for _, cfg in scenarios("power_n8", range(2), "train")]
    env_of = lambda b: fleet_marl.parallel_env(config=configs[b // 2], reward_scheme="difference", max_cycles=6)  # noqa: E731
    want = oracle(env_of, [5, 6, 7, 8], actions, k, "sits_out", W - k + 1)
    np.testing.assert_array_equal(rec.differences(k), want)


def test_the_same_seed_gives_the_same_rewards_and_chunks_change_nothing():
    a = record("capped_rack", 8, max_cycles=5)[1]
    b = record("capped_rack", 8, max_cycles=5)[1]
    ra = a.rewards(3)
    np.testing.assert_array_equal(ra, b.rewards(3))
    np.testing.assert_array_equal(ra, a.rewards(3, chunk=5))  # 5 branch rows at a time: the same sums


def test_drop_keeps_the_record_of_the_steps_still_to_relabel():
    """Relabelling in two pieces (as the learner does, k - 1 steps behind) gives the values of one piece."""
    venv, rec, actions, _ = record("capped_rack", 12, max_cycles=5)
    whole = rec.rewards(3)  # steps 0 .. 9
    rec.drop(6)
    np.testing.assert_array_equal(rec.rewards(3), whole[6:])


def test_shaping_floors_degenerate_strategies_and_zeroes_tenants_not_live():
    D = np.array([[[2.0, -1.0, np.nan]]])
    live = np.array([[[True, True, False]]])
    deg = np.array([[[True, True, False]]])
    np.testing.assert_array_equal(shaped(D, live, deg, 0.01), [[[0.01, -1.0, 0.0]]])


def test_windows_stop_at_the_episode_end_and_not_past_the_record():
    ended = np.array([[False, False], [True, False], [False, False], [False, False]])  # (W 4, B 2)
    np.testing.assert_array_equal(window_ends(ended, 3, 2), [[2, 3], [1, 3]])
    with pytest.raises(ValueError, match="step 2: its 3-round window runs past the 4 recorded steps in cluster 0"):
        window_ends(ended, 3, 3)


@pytest.mark.parametrize(
    ("k", "variant", "match"),
    [
        (0, "sits_out", "credit_horizon = 0"),
        (True, "sits_out", "credit_horizon = True"),
        (2.0, "sits_out", "credit_horizon = 2.0"),
        (2, "both", "credit_branch = 'both'"),
    ],
)
def test_a_bad_horizon_or_branch_is_named(k, variant, match):
    with pytest.raises(ValueError, match=match):
        check_horizon(k, variant)
    with pytest.raises(ValueError, match=match):
        k_round_difference(
            None, [], np.zeros((1, 1, 1, 8), np.int64), np.ones((1, 1, 1), bool), np.zeros((1, 1)), np.zeros((1, 1), bool), k, variant
        )


def test_the_vector_env_core_state_is_a_copy():
    venv = fleet_marl.vector_env(num_envs=2, task="tiny")
    with pytest.raises(RuntimeError, match="core_state"):
        venv.core_state()
    _, infos = venv.reset(seed=0)
    s = venv.core_state()
    venv.step(venv.sample_actions(infos, np.random.default_rng(0)))
    assert s.round.tolist() == [0, 0] and venv.rounds.tolist() == [1, 1]

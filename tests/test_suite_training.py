"""Training and grading on the suite's scenarios: ScenarioVectorEnv, FleetTorchEnv over a suite
task's train scenarios, and the grader's splits."""

from __future__ import annotations

import numpy as np
import pytest

import fleet_marl
from fleet_marl import suite
from fleet_marl.environment.scenario_vector import ScenarioVectorEnv, make_vector_env
from fleet_marl.environment.vector import FleetVectorEnv


def test_a_scenario_vector_env_is_its_scenarios_bit_for_bit():
    cfgs = [suite.scenario("power_n4", k) for k in range(3)]
    sv = ScenarioVectorEnv(7, cfgs, reward_scheme="difference")
    assert sv.sizes == [3, 2, 2] and sv.num_envs == 7
    subs = [FleetVectorEnv(b, config=c, reward_scheme="difference") for b, c in zip(sv.sizes, cfgs, strict=True)]
    obs, infos = sv.reset(seed=10)
    parts = [e.reset(seed=list(range(10 + a, 10 + a + b))) for e, a, b in zip(subs, sv.starts[:-1], sv.sizes, strict=True)]
    np.testing.assert_array_equal(obs, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(infos["action_mask"], np.concatenate([p[1]["action_mask"] for p in parts]))
    rng, ended = np.random.default_rng(0), 0
    for _ in range(110):  # power's episodes are 50 rounds: two end in every cluster
        a = sv.sample_actions(infos, rng)
        obs, rew, term, trunc, infos = sv.step(a)
        parts = [e.step(a[s : s + b]) for e, s, b in zip(subs, sv.starts[:-1], sv.sizes, strict=True)]
        for j, got in enumerate((obs, rew, term, trunc)):
            np.testing.assert_array_equal(got, np.concatenate([p[j] for p in parts]))
        np.testing.assert_array_equal(infos["welfare"], np.concatenate([p[4]["welfare"] for p in parts]))
        np.testing.assert_array_equal(sv.state(), np.concatenate([e.state() for e in subs]))
        if "final_obs" in infos:
            ended += 1
            assert infos["final_obs"].shape == obs.shape and infos["episode"]["welfare"].shape == (7,)
            for p, s, b in zip(parts, sv.starts[:-1], sv.sizes, strict=True):
                if "episode" in p[4]:
                    np.testing.assert_array_equal(infos["episode"]["welfare"][s : s + b], p[4]["episode"]["welfare"])
    assert ended >= 2


def test_a_rejected_step_changes_no_scenario():
    sv = ScenarioVectorEnv(4, [suite.scenario("scarce_n4", k) for k in range(2)])
    _, infos = sv.reset(seed=0)
    before = sv.state().copy()
    bad = sv.sample_actions(infos, np.random.default_rng(0))
    bad[3, 0, 0] = 99  # a GPU count past the mask, in the second scenario's clusters
    with pytest.raises(fleet_marl.ActionError):
        sv.step(bad)
    np.testing.assert_array_equal(sv.state(), before)
    assert (sv.rounds == 0).all()


def test_scenarios_must_share_their_shapes():
    with pytest.raises(ValueError, match=r"configs\[1\]"):
        ScenarioVectorEnv(4, [suite.scenario("power_n4", 0), suite.scenario("power_n8", 0)])
    with pytest.raises(ValueError, match="at least one cluster per scenario"):
        ScenarioVectorEnv(1, [suite.scenario("power_n4", k) for k in range(2)])


def test_a_learner_steps_a_suite_tasks_train_scenarios():
    v = make_vector_env(8, task="storm_n4", scenarios=4)
    assert isinstance(v, ScenarioVectorEnv) and len(v.envs) == 4
    assert [e.config for e in v.envs] == [fleet_marl.parallel_env(config=suite.scenario("storm_n4", k)).config for k in range(4)]
    assert len(make_vector_env(64, task="storm_n4").envs) == suite.TRAIN_SCENARIOS
    assert isinstance(make_vector_env(4, task="easy"), FleetVectorEnv)
    with pytest.raises(ValueError, match="only a suite task"):
        make_vector_env(4, task="easy", scenarios=2)
    # a suite task's name as a task is its train scenario 0 (the shapes of all)
    assert fleet_marl.parallel_env(task="storm_n4").config == fleet_marl.parallel_env(config=suite.scenario("storm_n4", 0)).config


def test_torchrl_env_over_the_train_scenarios():
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from fleet_marl.torchrl import FleetTorchEnv

    env = FleetTorchEnv(num_envs=6, task="power_n4", scenarios=3, seed=0)
    check_env_specs(env)
    td = env.rollout(4)
    assert td["next", "agents", "reward"].shape == (6, 4, 4, 1)


def test_the_grader_plays_a_splits_scenarios():
    from fleet_marl.evaluation import evaluate
    from fleet_marl.evaluation.suite_grade import evaluate_suite

    ev = evaluate("power_n4", "fair_share", episodes=2, seed=1, overrides={"split": "train"}, progress=False, hindsight=False)
    assert ev.seeds == [suite.env_seed(1, "train"), suite.env_seed(2, "train")]
    # each scenario is its own config: the same policy's episode on scenario 1 is the one a plain env plays
    env = fleet_marl.parallel_env(config=suite.scenario("power_n4", 1))
    from fleet_marl.evaluation.loading import load_policy
    from fleet_marl.evaluation.runner import run_episode

    alone = run_episode(env, load_policy("fair_share", env), suite.env_seed(1, "train"))
    assert ev.episodes[0].welfare == alone.welfare
    both = evaluate_suite("power_n4", "fair_share", splits=("train", "heldout"), episodes=2, seed=1, progress=False, hindsight=False)
    assert both["train"].welfare.tolist() == ev.welfare.tolist()
    assert both["heldout"].seeds == [suite.env_seed(1, "heldout"), suite.env_seed(2, "heldout")]
    assert both["heldout"].welfare.tolist() != ev.welfare.tolist()
    with pytest.raises(Exception, match="split"):
        evaluate("power_n4", "fair_share", episodes=1, overrides={"split": "test"}, progress=False, hindsight=False)

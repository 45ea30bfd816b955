"""The k-round difference (``fleet_marl.studies.credit_horizon``): its one-round term is the env's
``difference`` reward, its branches replay the env's own round, the rounds after carry what a
tenant's removal left behind, and the same seed gives the same values."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fleet_marl
from fleet_marl.environment import core
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.studies import credit_horizon as ch


def _episode(task: str, policy: str, seed: int, **overrides) -> tuple:
    env = fleet_marl.parallel_env(**ch.scenario(task), **overrides)
    return env, ch.play(env, load_policy(policy, env), seed)


@pytest.mark.parametrize(("task", "policy"), [("capped_rack", "fair_share"), ("hard", "planner"), ("easy_x8_auction", "fair_share")])
def test_one_round_is_the_envs_difference_reward(task, policy):
    """The oracle: D^1 of both branches equals ``infos[agent]["reward_difference"]`` of an env
    computing every scheme, bit for bit, on every live tenant-round."""
    env, ep = _episode(task, policy, 3, compute_all=True, max_cycles=6)
    assert len(ep.welfare) == 6 and np.isfinite(ep.d1[ep.live]).all()
    cs = ch.branch_static(env)
    for variant in ch.VARIANTS:
        D = ch.differences(cs, ep, 2, variant)["D"]
        np.testing.assert_array_equal(D[:, :, 0], ep.d1)


def test_a_copy_of_the_core_state_replays_the_episode_and_leaves_the_env_alone():
    """``env.core_state()`` stepped by the env's round with the actions played reproduces every
    later round's welfare; stepping it changes nothing in the env."""
    env, ep = _episode("capped_rack", "fair_share", 0, max_cycles=8)
    cs = ch.branch_static(env)
    s = ep.states[2].take([0, 0])  # two copies of round 2's start
    for u in range(2, 8):
        r = core.step(cs, s, np.broadcast_to(ep.actions[u], (2, *ep.actions[u].shape)), [None, None])
        core.finish(s, r)
        assert r.credit.welfare.tolist() == [ep.welfare[u]] * 2
    assert int(ep.states[2].round[0]) == 2 and ep.states[2].live[0].tolist() == ep.live[2].tolist()
    env.reset(seed=0)
    before = env.core_state()
    core.step(cs, before.take([0]), np.zeros((1, *ep.actions[0].shape), np.int64), [None])
    assert env.round == 0 and int(before.round[0]) == 0


def test_rounds_after_the_first_change_the_credit_and_the_same_seed_gives_the_same_values():
    """On capped_rack (restarts, the rack's power and heat carry over) D^k differs from D^1 for
    k > 1 under both branches, and a second run from the same seed gives the same arrays."""
    runs = []
    for _ in range(2):
        env, ep = _episode("capped_rack", "planner", 1, max_cycles=12)
        cs = ch.branch_static(env)
        runs.append({v: ch.differences(cs, ep, 4, v)["D"] for v in ch.VARIANTS})
    for variant in ch.VARIANTS:
        D = runs[0][variant]
        np.testing.assert_array_equal(D, runs[1][variant])
        live = ~np.isnan(D[:, :, 0])
        assert np.abs(D[:, :, 3] - D[:, :, 0])[live].max() > 1e-3 * np.abs(D[:, :, 0])[live].max()
    # sitting out one round is not being out for four: the branches differ too
    assert not np.array_equal(runs[0]["withdrawn"][:, :, 3], runs[0]["sits_out"][:, :, 3])


def test_a_window_stops_at_the_episodes_end():
    env, ep = _episode("tiny", "fair_share", 0, max_cycles=5)
    D = ch.differences(ch.branch_static(env), ep, 8, "withdrawn")["D"]
    E = len(ep.welfare)
    # the last round's window holds one round: every horizon keeps D^1
    np.testing.assert_array_equal(D[E - 1, :, 7], D[E - 1, :, 0])


def test_spearman_ranks_ties_at_their_mean():
    assert ch.spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert ch.spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    # ranks (1.5, 1.5, 3) against (1, 2, 3): 1.5 / sqrt(1.5 * 2)
    assert ch.spearman(np.array([5.0, 5.0, 7.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1.5 / np.sqrt(3.0))
    assert ch.spearman(np.array([2.0, 2.0, 2.0]), np.array([1.0, 2.0, 3.0])) is None


def test_compare_counts_sign_agreement_and_leaves_out_rounds_too_small_to_rank():
    nan = np.nan
    D = np.array(
        [
            [[1.0, 2.0], [2.0, 1.0], [3.0, -3.0]],  # ranks reversed in part, one sign flips
            [[1.0, 1.5], [nan, nan], [2.0, 2.5]],  # two live tenants: no Spearman
        ]
    )
    c = ch.compare(D, 2)
    assert c["rounds"] == 1 and c["sign"] == pytest.approx(4 / 5)
    assert c["share"] == pytest.approx((1 + 1 + 6 + 0.5 + 0.5) / (1 + 2 + 3 + 1 + 2))
    assert c["spearman"] == pytest.approx(ch.spearman(np.array([1.0, 2.0, 3.0]), np.array([2.0, 1.0, -3.0])))


def test_a_bad_variant_is_named():
    env, ep = _episode("tiny", "fair_share", 0, max_cycles=2)
    with pytest.raises(ValueError, match="variant = 'both'"):
        ch.branches(ch.branch_static(env), ep, ep.held, 0, 2, "both")


def test_the_command_prints_the_tables_and_the_verdicts(capsys):
    assert ch.main(["--tasks", "easy", "--policies", "fair_share", "--episodes", "1", "--horizons", "2"]) == 0
    out = capsys.readouterr().out
    assert "| easy | fair_share | 2 |" in out and "Verdict" in out
    with pytest.raises(SystemExit):
        ch.main(["--tasks", "easy", "--episodes", "0"])


def test_the_committed_data_says_what_the_doc_says():
    """The saved rows cover every task and policy at every horizon, D^1 matched the env's reward
    exactly in every row, and the doc's block is rendered from them (the publisher's test checks
    the file)."""
    data = json.loads((ch.checkout_root("test") / ch.DATA).read_text())
    rows = data["rows"]
    assert {(r["task"], r["policy"]) for r in rows} == {(t, p) for t in ch.TASKS for p in ch.POLICIES}
    for r in rows:
        for v in ch.VARIANTS:
            assert r[v]["d1_max_error"] == 0.0
            assert list(r[v]["horizons"]) == [str(k) for k in ch.HORIZONS]
    text = (ch.checkout_root("test") / ch.DOC).read_text()
    assert ch.render(data) in text


def test_a_suite_task_plays_a_train_scenario_an_episode():
    """A suite row's episode e is the task's train scenario seed + e, reset with that scenario's
    seed; a built-in task's episodes are its one scenario with seeds seed + e."""
    from fleet_marl import suite

    eps = ch.episodes_of("power_n8", 2, 3)
    assert [s for _, s in eps] == [suite.env_seed(s, "train") for s in (2, 3, 4)]
    assert [o["config"] for o, _ in eps] == [suite.scenario("power_n8", s, "train") for s in (2, 3, 4)]
    assert eps[0][0]["config"] != eps[1][0]["config"]
    assert ch.episodes_of("hard", 2, 2) == [({"task": "hard"}, 2), ({"task": "hard"}, 3)]
    assert set(ch.SUITE_TASKS) <= set(suite.SUITE) and set(ch.TASKS) == set(ch.BUILTIN_TASKS) | set(ch.SUITE_TASKS)

"""The sequential protocol for learners: the per-turn vector env (bit for bit the AEC env), the
re-layout of turns into rounds, TorchRL training under it, and the protocol study's trained rows."""

from __future__ import annotations

import numpy as np
import pytest

import fleet_marl
from fleet_marl.config import ConfigError
from fleet_marl.environment import ActionError, FleetSequentialVectorEnv
from fleet_marl.tasks import TURN_ORDERS

pytestmark = pytest.mark.slow


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


@pytest.mark.parametrize("order", TURN_ORDERS)
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


# --- TorchRL ------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")

from fleet_marl.evaluation import evaluate  # noqa: E402
from fleet_marl.evaluation.loading import PolicyError  # noqa: E402
from fleet_marl.torchrl import GROUP  # noqa: E402
from fleet_marl.torchrl.policy import build_networks, turn_logits  # noqa: E402
from fleet_marl.torchrl.sequential import TurnCollector, turns_to_rounds  # noqa: E402
from fleet_marl.torchrl.train import Learner, TorchRLTrainConfig, train  # noqa: E402
from fleet_marl.training import TrainConfigError  # noqa: E402

SEQ = {"protocol": "sequential", "turn_order": "rotating"}


def test_turns_to_rounds_against_hand_built_data():
    # 2 clusters, 2 rounds, 3 tenants; each turn's value is 100 * cluster + 10 * round + tenant
    agent = torch.tensor([[0, 1, 2, 1, 2, 0], [2, 0, 1, 0, 2, 1]])
    B, RN = agent.shape
    x = torch.tensor([[100 * b + 10 * (t // 3) + int(agent[b, t]) for t in range(RN)] for b in range(B)])
    out = turns_to_rounds(x, agent, 3)
    assert out.shape == (2, 2, 3)
    assert out.tolist() == [[[0, 1, 2], [10, 11, 12]], [[100, 101, 102], [110, 111, 112]]]
    # trailing feature axes move with their turn
    feats = torch.stack([x, -x], -1)
    assert torch.equal(turns_to_rounds(feats, agent, 3), torch.stack([out, -out], -1))
    with pytest.raises(ValueError, match=r"cluster 1, round 0: turn slots hold tenants \[2, 2, 1\]"):
        turns_to_rounds(x, torch.tensor([[0, 1, 2, 1, 2, 0], [2, 2, 1, 0, 2, 1]]), 3)
    with pytest.raises(ValueError, match="6 turns per cluster: expected a multiple of the 4 tenants"):
        turns_to_rounds(x, agent, 4)


@pytest.mark.parametrize(
    "sharing,agent_id", [("shared", True), ("shared", False), ("mappo", True), ("per_tenant", False), ("per_kind", True)]
)
def test_turn_logits_are_the_tenants_rows_of_the_full_network(sharing, agent_id):
    torch.manual_seed(0)
    N, F, nvec = 3, 40, [9, 5, 5, 5, 5, 5, 5, 9]
    actor, _, _ = build_networks(
        sharing, N, F, 10, nvec, ["train", "serve", "train"], [16], "relu", autoregressive=False, agent_id=agent_id
    )
    obs, agent = torch.rand(5, F), torch.tensor([0, 2, 1, 1, 0])
    full = actor(torch.rand(5, N, F).index_put_((torch.arange(5), agent), obs))
    assert torch.allclose(turn_logits(actor, obs, agent, N), full[torch.arange(5), agent], atol=1e-6)


def test_the_collector_lays_each_tenants_turn_out_in_its_round():
    """On tiny with the rotating order, tenant r % 2 claims first in round r: its observation in
    the batch has place 0, the other's place 1; each next observation is the following round's."""
    tc = TorchRLTrainConfig(task="tiny", num_envs=3, rollout=4, hidden=[8], env=SEQ)
    learner = Learner(tc, tc.signature())
    col = TurnCollector(tc, learner.actor_net, learner.nvec, batches=2)
    col.set_seed(0)
    first, second = list(col)
    place = fleet_marl.environment.SEQUENTIAL_OBS_INDEX["position"]
    for td, r0 in ((first, 0), (second, 4)):
        assert td.batch_size == (3, 4) and td[GROUP].batch_size == (3, 4, 2)
        obs = td[GROUP, "observation"]
        for r in range(4):
            first_mover = (r0 + r) % 2
            assert obs[:, r, first_mover, place].tolist() == [0.0] * 3 and obs[:, r, 1 - first_mover, place].tolist() == [1.0] * 3
        assert torch.equal(td["next", GROUP, "observation"][:, :3], obs[:, 1:])
        assert td[GROUP, "mask"].all() and not td["next", "done"].any()
    # the last round's next observation is the first round of the next batch
    assert torch.equal(first["next", GROUP, "observation"][:, 3], second[GROUP, "observation"][:, 0])


def test_train_under_the_sequential_protocol_and_grade_on_the_aec_env(tmp_path):
    tc = TorchRLTrainConfig(
        task="tiny",
        iterations=2,
        num_envs=8,
        rollout=10,
        epochs=1,
        minibatch=40,
        hidden=[16],
        collector="sync",
        eval_interval=2,
        eval_episodes=1,
        final_episodes=1,
        checkpoint_interval=0,
        out=str(tmp_path),
        env=SEQ,
    )
    assert tc.run_name == "tiny-shared-local-sequential-torchrl"
    res = train(tc, progress=False)
    assert res.agent_steps == 2 * 8 * 10 * 2 and res.rows[-1]["eval_welfare"] != ""
    assert "PPO torchrl (shared, local)" in res.table
    meta = (res.run_dir / "checkpoint" / "fleet_marl_torchrl.json").read_text()
    assert '"protocol": "sequential"' in meta and '"obs_dim": 40' in meta
    ev = evaluate("tiny", str(res.run_dir), episodes=2, progress=False, overrides=SEQ)  # the AEC loop, turn by turn
    assert len(ev.episodes) == 2 and np.isfinite(ev.welfare).all()
    with pytest.raises(PolicyError, match="trained with protocol = 'sequential' and this environment plays protocol = 'simultaneous'"):
        evaluate("tiny", str(res.run_dir), episodes=1, progress=False)


def test_bad_protocol_and_turn_order_in_the_training_config_are_named():
    with pytest.raises(TrainConfigError, match=r"env = .*turn_order = 'alphabetical': expected one of 'fixed', 'rotating'"):
        TorchRLTrainConfig(task="tiny", env={"protocol": "sequential", "turn_order": "alphabetical"}).check()
    with pytest.raises(TrainConfigError, match=r"env = .*protocol = 'turns'"):
        TorchRLTrainConfig(task="tiny", env={"protocol": "turns"}).check()
    with pytest.raises(TrainConfigError, match=r"turn_order = 'rotating': expected no turn_order with protocol='simultaneous'"):
        TorchRLTrainConfig(task="tiny", env={"turn_order": "rotating"}).check()


def test_async_collection_under_the_sequential_protocol_runs_in_a_worker(tmp_path):
    tc = TorchRLTrainConfig(
        task="tiny",
        iterations=2,
        num_envs=4,
        rollout=5,
        epochs=1,
        minibatch=20,
        hidden=[8],
        collector="async",
        eval_interval=0,
        final_episodes=0,
        out=str(tmp_path),
        env=SEQ,
    )
    res = train(tc, progress=False)
    assert res.iterations == 2 and all(np.isfinite(float(r["policy_loss"])) for r in res.rows)


def test_the_protocol_study_adds_a_trained_row_per_protocol(tmp_path, capsys):
    from fleet_marl.evaluation import make_env, run_episode
    from fleet_marl.studies import protocols

    small = dict(
        task="tiny",
        iterations=1,
        num_envs=4,
        rollout=5,
        epochs=1,
        minibatch=20,
        hidden=[8],
        collector="sync",
        eval_interval=0,
        final_episodes=0,
        out=str(tmp_path),
    )
    sim = str(train(TorchRLTrainConfig(**small), progress=False).run_dir)
    seq = str(train(TorchRLTrainConfig(**small, env=SEQ), progress=False).run_dir)
    rows = protocols.study(["tiny"], ["random"], [0, 1], runs={"simultaneous": sim, "sequential": seq})
    assert [(r["policy"], r["protocol"]) for r in rows] == [
        ("random", "simultaneous"),
        ("random", "sequential"),
        ("trained", "simultaneous"),
        ("trained", "sequential"),
    ]
    # graded as the grader grades: the same episodes, on the same seeds as the references
    env = make_env("tiny", protocol="sequential", turn_order="rotating")
    from fleet_marl.evaluation.loading import load_policy

    w = [run_episode(env, load_policy(seq, env), s).welfare for s in (0, 1)]
    assert rows[3]["welfare"][0] == pytest.approx(np.mean(w), rel=1e-9)
    assert rows[3]["delta_welfare"] is not None and "| tiny | trained | sequential |" in protocols.markdown(rows)
    # refused by name: a run under the other protocol, on another task, two tasks, an unknown protocol
    with pytest.raises(protocols.StudyError, match=r"--run simultaneous=.*trained with protocol = 'sequential'"):
        protocols.check_runs(["tiny"], {"simultaneous": seq})
    with pytest.raises(protocols.StudyError, match=r"--run sequential=.*trained on task 'tiny'"):
        protocols.check_runs(["easy"], {"sequential": seq})
    with pytest.raises(protocols.StudyError, match=r"tasks = \['tiny', 'easy'\]: expected one task"):
        protocols.check_runs(["tiny", "easy"], {"sequential": seq})
    with pytest.raises(SystemExit):
        protocols.main(["--tasks", "tiny", "--run", f"turns={seq}"])
    assert "protocol = 'turns': expected one of simultaneous, sequential" in capsys.readouterr().err
    # --policies with no names: the trained rows alone; with no --run either, or an unknown name: refused by name
    assert (
        protocols.main(["--tasks", "tiny", "--seeds", "1", "--policies", "--run", f"simultaneous={sim}", "--run", f"sequential={seq}"]) == 0
    )
    out = capsys.readouterr().out
    assert "| tiny | trained | simultaneous |" in out and "| tiny | trained | sequential |" in out and "| tiny | random |" not in out
    for argv, message in (
        (["--policies"], "nothing to play"),
        (["--policies", "random", "dealer"], "--policies dealer: expected names from"),
    ):
        with pytest.raises(SystemExit):
            protocols.main(["--tasks", "tiny", *argv])
        assert message in capsys.readouterr().err

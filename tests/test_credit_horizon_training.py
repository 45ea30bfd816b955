"""Training on the k-round difference (``credit_horizon`` of ``TorchRLTrainConfig``,
``fleet_marl.torchrl.relabel``): the learner trains k − 1 steps behind the collector on batches
whose rewards are the measurement tool's D^k of the episodes collected (the oracle), shaped as the
env shapes ``difference``; k = 1 records and relabels nothing; runs reproduce and resume bit for
bit; a bad value is an error naming the field."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import fleet_marl
import fleet_marl.torchrl.train as torchrl_train
from fleet_marl.environment.horizon import Recorder
from fleet_marl.torchrl import Learner, TorchRLTrainConfig
from fleet_marl.torchrl.env import GROUP
from fleet_marl.torchrl.loop import Loop
from fleet_marl.torchrl.train import train
from fleet_marl.training import TrainConfigError
from tests.test_horizon import oracle


def config(**changes) -> TorchRLTrainConfig:
    base = dict(
        task="capped_rack",
        reward_scheme="difference",
        credit_horizon=3,
        env={"max_cycles": 6},
        iterations=3,
        max_minutes=0,
        num_envs=3,
        rollout=5,
        epochs=1,
        minibatch=15,
        hidden=[8],
        seed=4,
        eval_interval=0,
        final_episodes=0,
        checkpoint_interval=0,
    )
    return TorchRLTrainConfig(**{**base, **changes})


def trained_batches(tc: TorchRLTrainConfig) -> tuple[list, Loop]:
    """The batches the learner was handed (copies), and the loop (closed)."""
    learner = Learner(tc, tc.signature())
    seen = []
    update = learner.update
    learner.update = lambda data: (seen.append(data.clone()), update(data))[1]
    loop = Loop(tc, learner)
    list(loop)
    loop.close()
    return seen, loop


@pytest.mark.slow
def test_the_learner_trains_k_minus_1_steps_behind_on_the_tools_k_round_differences():
    """Three batches of 5 steps with k = 3: the learner gets 3, 5, 5 steps, consecutive (the
    held-back steps first), and each step's reward is D^3 of the tool on the episodes the
    collector played (replayed from the actions in the batches), floored where the env floors."""
    tc = config()
    seen, loop = trained_batches(tc)
    assert [d.shape[1] for d in seen] == [3, 5, 5]
    assert loop.relabel is not None and loop.relabel.tail is not None and loop.relabel.tail.shape[1] == 2
    steps = torch.cat([*seen, loop.relabel.tail], dim=1)  # every collected step, in order
    going = ~steps.get(("next", "done"))[:, :-1, 0]  # consecutive: each step starts where the last one ended, but at a reset
    assert going.sum() < going.numel()
    nxt, obs = steps.get(("next", GROUP, "observation"))[:, :-1], steps.get((GROUP, "observation"))[:, 1:]
    assert torch.equal(obs[going], nxt[going])
    actions = steps.get((GROUP, "action")).numpy().transpose(1, 0, 2, 3)  # (W, B, T, 8)
    trained = torch.cat(seen, dim=1).get(("next", GROUP, "reward"))[..., 0].numpy().transpose(1, 0, 2)  # (13, B, T)
    count = trained.shape[0]
    seeds = [tc.seed + b for b in range(tc.num_envs)]
    D = oracle(
        lambda b: fleet_marl.parallel_env(task="capped_rack", reward_scheme="difference", max_cycles=6),
        seeds,
        actions,
        3,
        "sits_out",
        count,
    )
    # the degenerate flags and who was live, from the same actions replayed in a vector env
    venv = fleet_marl.vector_env(num_envs=tc.num_envs, task="capped_rack", reward_scheme="difference", max_cycles=6)
    rec = Recorder(venv)
    venv.reset(seed=tc.seed)
    for a in actions:
        rec.step(venv, a)
    live = np.stack([s.live for s in rec.steps[:count]])
    degenerate = np.stack([s.degenerate for s in rec.steps[:count]])
    want = np.where(live, np.where(degenerate, np.minimum(D, 0.01), D), 0.0).astype(np.float32)
    np.testing.assert_array_equal(trained, want)
    assert np.isfinite(D[live]).all() and (degenerate & live).sum() < live.sum()


@pytest.mark.slow
def test_k_1_records_and_relabels_nothing():
    seen, loop = trained_batches(config(credit_horizon=1))
    assert loop.relabel is None and loop.env is not None and loop.env.recorder is None
    assert [d.shape[1] for d in seen] == [5, 5, 5]


def learning_rows(run_dir) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: r[k] for k in ("iteration", "policy_loss", "vf_loss", "entropy", "kl_approx", "welfare")} for r in csv.DictReader(f)]


@pytest.mark.slow
def test_a_run_reproduces_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    """The same config twice gives the same metrics and weights; a run stopped after its
    checkpoint at iteration 2 and resumed continues the uninterrupted one (the held-back steps
    are in the checkpoint)."""
    base = dict(iterations=4, checkpoint_interval=2, out=str(tmp_path))
    a = train(config(name="a", **base), progress=False)
    b = train(config(name="b", **base), progress=False)
    assert learning_rows(a.run_dir) == learning_rows(b.run_dir) and learning_rows(a.run_dir)[-1]["policy_loss"] != ""
    save = torchrl_train._save

    def killed_after_2(loop, run_dir, tc, sig, it, *rest):
        out = save(loop, run_dir, tc, sig, it, *rest)
        if it == 2:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(torchrl_train, "_save", killed_after_2)
    with pytest.raises(KeyboardInterrupt):
        train(config(name="cut", **base), progress=False)
    monkeypatch.setattr(torchrl_train, "_save", save)
    resumed = train(config(name="cut", **base), resume=str(tmp_path / "cut"), progress=False)
    assert resumed.notes == [] and learning_rows(resumed.run_dir) == learning_rows(a.run_dir)
    ca, cb = (torch.load(r / "checkpoint" / "model.pt", weights_only=True) for r in (a.run_dir, resumed.run_dir))
    assert all(torch.equal(ca["actor"][k], cb["actor"][k]) for k in ca["actor"])
    assert a.run_dir.name == "a" and config().run_name == "capped_rack-shared-difference_k3-torchrl"


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"credit_horizon": 0}, "credit_horizon = 0: expected an integer from 1"),
        ({"credit_horizon": 6}, "credit_horizon = 6: expected an integer from 1 .* to rollout = 5"),
        ({"credit_horizon": True}, "credit_horizon = True"),
        ({"credit_horizon": "3"}, "credit_horizon = '3'"),
        ({"credit_branch": "both"}, "credit_branch = 'both': expected one of 'sits_out', 'withdrawn'"),
        ({"reward_scheme": "local"}, "reward_scheme = 'local': expected 'difference' with credit_horizon = 3"),
        ({"collector": "async"}, "credit_horizon = 3: expected 1 unless collector: sync, collectors: 1"),
        ({"env": {"protocol": "sequential"}}, "credit_horizon = 3: expected 1 unless"),
    ],
)
def test_a_bad_credit_horizon_is_named(changes, match):
    with pytest.raises(TrainConfigError, match=match):
        config(**changes).check()
    with pytest.raises(TrainConfigError, match=match):
        TorchRLTrainConfig.from_dict({**config().to_dict(), **changes})


@pytest.mark.slow
def test_the_cost_command_prints_its_table(capsys):
    """``python -m fleet_marl.studies.credit_horizon_cost`` at toy size: a row per horizon, k = 1
    the baseline (1.00x, no relabelling); a bad setting is refused."""
    from fleet_marl.studies import credit_horizon_cost as cost

    args = ["--tasks", "tiny", "--num-envs", "4", "--rollout", "3", "--iterations", "1", "--repeats", "1", "--horizons", "1,2"]
    assert cost.main(args) == 0
    out = capsys.readouterr().out
    assert "| tiny | 1 |" in out and "| 1.00x | 0 % |" in out and "| tiny | 2 |" in out
    with pytest.raises(SystemExit):
        cost.main(["--iterations", "0"])


def test_the_committed_cost_says_what_the_doc_says():
    """The saved training cost covers power_n8 and hard at k = 1, 2, 4, k = 1 is the baseline, and
    docs/credit_horizon.md's block is rendered from it."""
    import json

    from fleet_marl.studies import credit_horizon_cost as cost
    from fleet_marl.studies.publish import checkout_root

    root = checkout_root("test")
    data = json.loads((root / cost.DATA).read_text())
    assert [r["task"] for r in data["rows"]] == list(cost.TASKS)
    for r in data["rows"]:
        assert list(r["horizons"]) == [str(k) for k in cost.HORIZONS]
        assert r["horizons"]["1"]["slowdown"] == 1.0 and r["horizons"]["1"]["relabel_share"] == 0.0
        assert all(len(run["cpu_s"]) == data["settings"]["iterations"] for c in r["horizons"].values() for run in c["runs"])
    assert cost.render(data) in (root / "docs/credit_horizon.md").read_text()

"""The TorchRL engine reproduces its runs (issue 33): the same config, seed and code give a
bit-identical metrics.csv (learning columns) and checkpoint with the sync collector; a run
resumed from its checkpoint continues the uninterrupted one bit for bit; nothing that learns
reads the clock (``max_minutes`` is a cap that says when it binds); ``--collectors K`` and
``--device`` train, and the paths that cannot reproduce say so."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

import fleet_marl.torchrl.train as torchrl_train
from fleet_marl.cli import main as cli_main
from fleet_marl.torchrl.config import TorchRLTrainConfig
from fleet_marl.torchrl.train import train
from fleet_marl.training import TrainConfigError

pytestmark = pytest.mark.slow

#: The columns of metrics.csv that learning writes (the others are the clock's).
LEARNING = (
    "iteration",
    "env_steps",
    "agent_steps",
    "episodes",
    "lr",
    "welfare",
    "eval_welfare",
    "score",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl_approx",
    "clip_fraction",
    "explained_variance",
)


def learning_rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: r[k] for k in LEARNING} for r in csv.DictReader(f)]


def assert_same_checkpoint(a: Path, b: Path) -> None:
    ca, cb = (torch.load(p / "checkpoint" / "model.pt", weights_only=True) for p in (a, b))
    for part in ("actor", "critic"):
        assert ca[part].keys() == cb[part].keys()
        for k in ca[part]:
            assert torch.equal(ca[part][k], cb[part][k]), (part, k)
    sa, sb = ca["optim"]["state"], cb["optim"]["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])


def tiny(tmp_path, name, **changes) -> TorchRLTrainConfig:
    base = dict(
        task="tiny",
        iterations=6,
        max_minutes=0,
        num_envs=8,
        rollout=10,
        epochs=2,
        minibatch=40,
        hidden=[16],
        seed=3,
        collector="sync",
        eval_interval=2,
        eval_episodes=1,
        final_episodes=0,
        checkpoint_interval=3,
        out=str(tmp_path),
        name=name,
    )
    return TorchRLTrainConfig(**{**base, **changes})


def test_fleet_marl_train_twice_gives_the_same_run_bit_for_bit(tmp_path, capsys):
    """The issue's reproduction: `fleet-marl train --task tiny --iterations 3 --seed 3` twice
    (the default collector, sync)."""
    for name in ("a", "b"):
        code = cli_main(
            [
                "train",
                "--task",
                "tiny",
                "--iterations",
                "3",
                "--seed",
                "3",
                "--num-envs",
                "16",
                "--final-episodes",
                "0",
                "--out",
                str(tmp_path),
                "--name",
                name,
                "--no-progress",
            ]
        )
        assert code == 0, capsys.readouterr().err
    a, b = learning_rows(tmp_path / "a"), learning_rows(tmp_path / "b")
    assert len(a) == 3 and a == b and a[-1]["policy_loss"] != ""
    assert_same_checkpoint(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("protocol", ["simultaneous", "sequential"])
def test_a_resumed_run_continues_the_uninterrupted_one_bit_for_bit(tmp_path, monkeypatch, protocol):
    """A run killed after its checkpoint at iteration 3 and resumed matches the run that was
    never stopped: metrics.csv (graded iterations included) and the final checkpoint. The
    checkpoint holds the weights, the optimizer, torch's generator and the episodes in progress."""
    env = {"protocol": "sequential"} if protocol == "sequential" else {}
    whole = train(tiny(tmp_path, "whole", env=env), progress=False)

    save = torchrl_train._save

    def killed_after_3(loop, run_dir, tc, sig, it, *rest):
        out = save(loop, run_dir, tc, sig, it, *rest)
        if it == 3:
            raise KeyboardInterrupt  # as if the process were killed right after this checkpoint
        return out

    monkeypatch.setattr(torchrl_train, "_save", killed_after_3)
    with pytest.raises(KeyboardInterrupt):
        train(tiny(tmp_path, "cut", env=env), progress=False)
    monkeypatch.setattr(torchrl_train, "_save", save)
    assert len(learning_rows(tmp_path / "cut")) == 3
    resumed = train(tiny(tmp_path, "cut", env=env), resume=str(tmp_path / "cut"), progress=False)
    assert resumed.notes == [] and resumed.iterations == 6
    rows = learning_rows(tmp_path / "whole")
    assert len(rows) == 6 and rows == learning_rows(tmp_path / "cut")
    assert sum(r["welfare"] != "" for r in rows) >= 2 and rows[1]["eval_welfare"] != ""  # episodes ended and were graded
    assert_same_checkpoint(whole.run_dir, resumed.run_dir)


def test_the_time_cap_stops_a_run_says_so_and_resuming_finishes_it_as_if_never_capped(tmp_path, capsys):
    """max_minutes is a safety cap, not a budget the learning reads: the learning rate anneals
    over the iterations, a capped run says it was capped, and resuming it gives the uncapped run."""
    capped = train(tiny(tmp_path, "capped", max_minutes=1e-9), progress=False)  # any iteration passes it
    assert capped.iterations == 1 and len(capped.notes) == 1
    assert "stopped by the max_minutes cap" in capped.notes[0] and "after 1 of 6 iterations" in capped.notes[0]
    full = train(tiny(tmp_path, "full"), progress=False)
    lrs = [float(r["lr"]) for r in learning_rows(full.run_dir)]
    assert lrs == pytest.approx([1e-3 * (1 - i / 6) for i in range(6)])  # (it - 1) / iterations, whatever the clock says
    train(tiny(tmp_path, "capped"), resume=str(capped.run_dir), progress=False)
    assert learning_rows(capped.run_dir) == learning_rows(full.run_dir)
    assert_same_checkpoint(capped.run_dir, full.run_dir)
    # the command prints the note
    code = cli_main(
        [
            "train",
            "--task",
            "tiny",
            "--iterations",
            "4",
            "--num-envs",
            "8",
            "--max-minutes",
            "1e-9",
            "--final-episodes",
            "0",
            "--out",
            str(tmp_path),
            "--name",
            "cli",
            "--no-progress",
        ]
    )
    assert code == 0 and "note: stopped by the max_minutes cap" in capsys.readouterr().out


def test_k_sync_collectors_reproduce_and_async_ones_train(tmp_path):
    """--collectors 2: TorchRL's multi-process collectors. Sync: two worker processes of 4
    clusters each, the same run twice; a resumed run starts fresh episodes and says so. Async
    trains (not reproducibly)."""
    a = train(tiny(tmp_path, "a", iterations=3, collectors=2, checkpoint_interval=0), progress=False)
    b = train(tiny(tmp_path, "b", iterations=3, collectors=2, checkpoint_interval=0), progress=False)
    assert learning_rows(a.run_dir) == learning_rows(b.run_dir) and a.env_steps == 3 * 8 * 10
    assert_same_checkpoint(a.run_dir, b.run_dir)
    more = train(tiny(tmp_path, "a", iterations=4, collectors=2), resume=str(a.run_dir), progress=False)
    assert more.iterations == 4 and "fresh episodes" in more.notes[0] and "not bit-identical" in more.notes[0]
    c = train(tiny(tmp_path, "c", iterations=3, collectors=2, collector="async", checkpoint_interval=0), progress=False)
    assert c.iterations == 3 and all(r["policy_loss"] != "" for r in learning_rows(c.run_dir))


def test_collectors_and_device_are_checked_by_name(tmp_path, capsys):
    with pytest.raises(TrainConfigError, match="collectors = 3: expected a divisor of num_envs = 8"):
        tiny(tmp_path, "x", collectors=3).check()
    with pytest.raises(TrainConfigError, match="collectors = 2: expected 1 under the sequential protocol"):
        tiny(tmp_path, "x", collectors=2, env={"protocol": "sequential"}).check()
    with pytest.raises(TrainConfigError, match="device = 'gpu'"):
        tiny(tmp_path, "x", device="gpu").check()
    code = cli_main(["train", "--engine", "rllib", "--collectors", "2", "--out", str(tmp_path)])
    assert code == 2 and "--collectors is an option of --engine torchrl" in capsys.readouterr().err


def test_device_cuda_trains_the_learner_on_the_gpu_or_is_refused_by_name(tmp_path, capsys):
    """--device cuda: the learner on the GPU (the env and collection on CPU) where torch has
    CUDA; without it, exit code 2 and an error naming the option, before anything trains."""
    argv = [
        "train",
        "--engine",
        "torchrl",
        "--device",
        "cuda",
        "--task",
        "tiny",
        "--iterations",
        "2",
        "--num-envs",
        "8",
        "--final-episodes",
        "1",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    code = cli_main(argv)
    captured = capsys.readouterr()
    if torch.cuda.is_available():
        assert code == 0, captured.err
        assert "trained tiny-shared-local-torchrl with TorchRL: 2 iterations" in captured.out
    else:
        assert code == 2 and "--device cuda: no CUDA device here" in captured.err and "use --device cpu" in captured.err
        assert not (tmp_path / "tiny-shared-local-torchrl").exists()


def test_help_says_which_collector_reproduces(capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "NOT reproducible" in text and "bit-identical" in text and "--collectors K" in text and "--device DEV" in text

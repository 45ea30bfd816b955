"""experiments/cleanrl_ppo.py, the CleanRL-style single-file PPO on the vector env: run for real,
briefly, on ``tiny``; its masked distribution; its greedy policy under the grader."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fleet_marl
from fleet_marl.evaluation import evaluate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "cleanrl_ppo.py"


def _module():
    spec = importlib.util.spec_from_file_location("cleanrl_ppo", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cleanrl_ppo"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The script run as a user runs it: a few updates on tiny, then graded on 3 seeds."""
    d = tmp_path_factory.mktemp("cleanrl")
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--task",
        "tiny",
        "--total-steps",
        "1536",
        "--num-envs",
        "16",
        "--num-steps",
        "32",
        "--update-epochs",
        "2",
        "--eval-episodes",
        "3",
        "--eval-every",
        "2",
        "--reward-scheme",
        "difference",
        "--norm-obs",
        "--critic",
        "state",
        "--save",
        str(d / "model.pt"),
        "--json",
        str(d / "run.json"),
    ]
    env = {**os.environ, "FLEET_MARL_CACHE": str(d / "cache")}
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, json.loads((d / "run.json").read_text()), d / "model.pt", d / "cache"


def test_the_script_trains_and_prints_a_graded_welfare(trained):
    out, run, _, _ = trained
    assert run["updates"] == 3 and run["env_steps"] == 3 * 16 * 32 and run["agent_steps"] == 2 * run["env_steps"]
    assert run["losses_finite"] and all(np.isfinite(v) for v in run["final_losses"].values())
    assert run["agent_steps_per_s"] > 0
    g = run["grade"]
    assert np.isfinite(g["welfare_mean"]) and len(g["welfare"]) == 3 and 0.0 <= g["score"] <= 1.0
    assert g["illegal"] == 0  # the greedy actions were all allowed by the masks (and the grader checked each one)
    assert "graded (greedy, seeds 0..2): welfare" in out and "agent-steps/s end to end" in out
    assert any(h["greedy_welfare"] is not None and np.isfinite(h["greedy_welfare"]) for h in run["history"])


def test_the_saved_policy_plays_the_same_episodes_in_both_envs(trained, monkeypatch):
    # the greedy policy on the parallel env (the grader's path) and on the vector env (the quick
    # evaluation during training) play the same episodes for the same seeds
    _, run, model, cache = trained
    monkeypatch.setenv("FLEET_MARL_CACHE", str(cache))
    mod = _module()
    ev = evaluate("tiny", lambda env: mod.load(str(model), env), episodes=3, seed=0, progress=False)
    np.testing.assert_allclose(ev.welfare, run["grade"]["welfare"])
    agent = mod.load(str(model), fleet_marl.parallel_env(task="tiny")).agent
    np.testing.assert_allclose(mod.greedy_welfare(agent, "tiny", 3, 0), ev.welfare, rtol=1e-9)


def test_masked_multicategorical_never_picks_a_forbidden_choice():
    mod = _module()
    venv = fleet_marl.vector_env(num_envs=8, task="easy", compute_all=False)
    _, infos = venv.reset(seed=0)
    layout = mod.Layout(venv.nvec_max)
    mask = torch.from_numpy(infos["action_mask"]).reshape(-1, venv.mask_size).clone()
    mask[::2, : int(venv.nvec_max[0])] = False
    mask[::2, 1] = True  # only 1 GPU allowed on every other row
    logits = torch.randn(mask.shape[0], venv.mask_size) * 5
    logits[:, 0] = 100.0  # the favourite choice, forbidden on those rows
    d = mod.MaskedMultiCategorical(logits, mask, layout)
    for a in [d.sample() for _ in range(20)] + [d.mode()]:
        flat = torch.as_tensor(layout.offsets[:-1]) + a  # each dimension's choice as a flat column
        assert bool(mask.gather(1, flat).all())
        assert (a[::2, 0] == 1).all()
    assert torch.isfinite(d.entropy()).all() and torch.isfinite(d.log_prob(d.sample())).all()
    # the actions are accepted by the env as they are
    venv.step(d.sample().reshape(8, venv.num_agents, -1).numpy())


def test_tenants_that_leave_are_left_out_of_the_loss():
    # tiny with budgets that run out within a few rounds: tenants leave mid-episode, clusters
    # reset on the same step; training runs on the live agents' samples only, losses finite
    from fleet_marl.tasks import task_dict

    tenants = task_dict("tiny")["tenants"]
    for t in tenants:
        t["budget"] = 1.0
    mod = _module()
    args = mod.Args(
        task="tiny",
        env=json.dumps({"tenants": tenants}),
        total_steps=512,
        num_envs=16,
        num_steps=16,
        update_epochs=1,
        eval_every=1,
        eval_seeds=4,
        grade=False,
        log_every=1e9,
        time_limit=0,
    )
    run = mod.main(args)
    assert run["updates"] == 2 and run["losses_finite"]
    assert 0.5 < run["live_share"] < 1.0  # some samples were of agents that had left, and only those were dropped
    assert np.isfinite(run["held_out_welfare"]) and "grade" not in run

"""RLlib training: every config builder trains, the metrics reach the results, checkpoints
restore to the same actions, masking holds over whole episodes, ``train()`` writes its outputs
and resumes, and a run on a ``ray start`` cluster through ``--address``.

One Ray for the session (the ``ray_session`` fixture); short runs; generous timeouts; nothing
here asserts on wall-clock time.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

import torch  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402

import fleet_marl  # noqa: E402
from fleet_marl.evaluation import evaluate, reference_episodes  # noqa: E402
from fleet_marl.rllib.config import TrainConfig, build  # noqa: E402
from fleet_marl.rllib.env import FleetRLlibEnv, credit_timing, fleet_envs  # noqa: E402
from fleet_marl.rllib.evaluation import algorithm_policy, take_grades  # noqa: E402
from fleet_marl.rllib.policy import ModulePolicy  # noqa: E402
from tests import servers  # noqa: E402

SMALL = dict(train_batch_size=200, minibatch_size=100, num_epochs=1, eval_interval=0, hidden=[32, 32])
ROOT = Path(__file__).resolve().parents[1]


def small(**kw) -> TrainConfig:
    return TrainConfig(**{**SMALL, **kw})


@pytest.mark.parametrize(
    "task, sharing, obs_mode, n_modules, envs, vector",
    [
        ("tiny", "shared", "dict", 1, 8, True),
        ("tiny", "per_tenant", "dict", 2, 8, True),
        ("easy", "per_kind", "dict", 2, 2, True),  # 100 rounds a cluster per iteration: episodes end
        ("tiny", "mappo", "dict", 1, 8, True),
        ("tiny", "shared", "flat", 1, 8, True),
        ("tiny", "shared", "dict", 1, 1, False),  # the per-cluster env (RLlib's SyncVectorMultiAgentEnv)
        ("tiny", "mappo", "dict", 1, 2, False),  # two sub-envs per runner: the callback reads the right one
    ],
)
def test_each_builder_builds_and_trains_two_iterations(ray_session, task, sharing, obs_mode, n_modules, envs, vector):
    tc = small(task=task, sharing=sharing, obs_mode=obs_mode, reward_scheme="difference", num_envs_per_env_runner=envs, vector=vector)
    algo = build(tc).build_algo()
    try:
        algo.train()
        r2 = algo.train()
        assert r2["training_iteration"] == 2
        assert r2["num_env_steps_sampled_lifetime"] >= 2 * tc.train_batch_size
        learners = {k for k in r2["learners"] if k != "__all_modules__"}
        assert len(learners) == n_modules
        for mid in learners:  # every module was updated
            assert np.isfinite(r2["learners"][mid]["policy_loss"]) and r2["learners"][mid]["num_module_steps_trained"] > 0
        er = r2["env_runners"]
        for key in (
            "fleet/welfare",
            "fleet/jain",
            "fleet/max_starvation_streak",
            "fleet/oom",
            "fleet/veto",
            "fleet/throttle",
            "fleet/degenerate",
            "fleet/illegal",
        ):
            assert key in er, key
        # the grader's formula on the training welfare, every iteration
        seeds = [0, 1, 2]
        rand = np.mean([e.welfare for e in reference_episodes(task, "random", seeds)])
        ref = np.mean([e.welfare for e in reference_episodes(task, "planner", seeds)])
        assert er["fleet/score_train"] == pytest.approx(max((er["fleet/welfare"] - rand) / (ref - rand), 0.0))
        if obs_mode == "dict":
            assert er["fleet/illegal"] == 0  # masked: never a masked choice
        if sharing == "mappo":
            mod = algo.learner_group._learner.module["shared"]
            assert isinstance(mod.central_vf, torch.nn.Module)
            # the critic never travels to the env runners
            assert not any("central_vf" in k for k in mod.get_state(inference_only=True))
            assert any("central_vf" in k for k in mod.get_state())
        # the reward seconds and steps of the envs the local runner steps (the study's cost figure):
        # B clusters of the vector env (the default), or one FleetParallelEnv per sub-env
        seconds, steps = credit_timing(algo)
        if tc.vector:
            assert algo.env_runner.env.num_envs == tc.num_envs_per_env_runner
            assert steps == algo.env_runner.env.steps_taken == r2["num_env_steps_sampled_lifetime"] and seconds > 0.0
        else:
            envs = fleet_envs(algo.env_runner.env)
            assert len(envs) == tc.num_envs_per_env_runner
            assert steps == sum(e.steps_taken for e in envs) > 0 and seconds > 0.0
        assert not [k for k in vars(algo) if k.startswith("_fleet")]  # nothing of ours on RLlib's object
    finally:
        algo.stop()


def test_grader_score_is_in_the_results(ray_session):
    algo = build(small(task="tiny", eval_interval=1, eval_episodes=1)).build_algo()
    try:
        ev = algo.train()["evaluation"]
        assert take_grades(algo) is None  # on_evaluate_end took the grader's figures
        assert not [k for k in vars(algo) if k.startswith("_fleet")]
    finally:
        algo.stop()
    assert 0.0 <= ev["fleet/score"] <= 1.0
    for k in ("fleet/eval_welfare", "fleet/eval_jain", "fleet/eval_starvation_events", "fleet/eval_degenerate"):
        assert np.isfinite(ev[k])
    assert ev["fleet/eval_illegal"] == 0


def _greedy(module, obs) -> np.ndarray:
    batch = {k: torch.as_tensor(np.asarray(v)[None]) for k, v in obs.items()}
    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    return module.get_inference_action_dist_cls().from_logits(logits).to_deterministic().sample()[0].numpy()


@pytest.mark.parametrize("sharing", ["shared", "mappo"])
def test_checkpoint_restores_the_same_actions(ray_session, tmp_path, sharing):
    from ray.rllib.algorithms.algorithm import Algorithm

    from fleet_marl.rllib.train import _save

    tc = small(task="tiny", sharing=sharing)
    algo = build(tc).build_algo()
    algo.train()
    env = FleetRLlibEnv(tc.env_config())
    obs, _ = env.reset(seed=11)
    observations = []
    for _ in range(10):  # observations from several rounds, not only the first
        observations.append(obs)
        obs, *_ = env.step({a: env.par_env.default_action_index[i] for i, a in enumerate(env.agents)})
    before = [_greedy(algo.get_module("shared"), o[a]) for o in observations for a in o]
    ck = _save(algo, tmp_path, tc, 1, 200)
    algo.stop()
    assert json.loads((ck / "fleet_marl.json").read_text())["signature"]["sharing"] == sharing
    restored = Algorithm.from_checkpoint(str(ck))
    try:
        after = [_greedy(restored.get_module("shared"), o[a]) for o in observations for a in o]
        assert restored.iteration == 1
    finally:
        restored.stop()
    for b, a in zip(before, after, strict=False):
        np.testing.assert_array_equal(b, a)
    # the standalone policy (no Algorithm) plays the same greedy actions on the plain env
    plain = fleet_marl.parallel_env(task="tiny")
    obs, infos = plain.reset(seed=11)
    pol = ModulePolicy.from_checkpoint(ck, plain)
    acts = pol.act(obs, infos)
    for i, a in enumerate(plain.possible_agents):
        np.testing.assert_array_equal(acts[a], before[i])


def test_masking_never_emits_a_masked_action_over_full_episodes(ray_session):
    """Greedy and sampled actions of a masking module (untrained: its raw logits are arbitrary)
    are legal in every round of whole episodes; the unmasked module is not (so the check bites)."""
    results = {}
    for obs_mode in ("dict", "flat"):
        tc = small(task="easy", obs_mode=obs_mode)
        algo = build(tc).build_algo()
        module = algo.get_module("shared")
        algo.stop()
        env = FleetRLlibEnv(tc.env_config())
        illegal = 0
        decisions = 0
        for seed, explore in ((0, False), (1, True), (2, True)):
            obs, _ = env.reset(seed=seed)
            torch.manual_seed(seed)
            while env.agents:
                acts = {}
                for a in env.agents:
                    o = obs[a]
                    batch = {
                        Columns.OBS: {k: torch.as_tensor(np.asarray(v)[None]) for k, v in o.items()}
                        if isinstance(o, dict)
                        else torch.as_tensor(o[None])
                    }
                    with torch.no_grad():
                        if explore:
                            logits = module.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS]
                            act = module.get_exploration_action_dist_cls().from_logits(logits).sample()[0].numpy()
                        else:
                            logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
                            act = module.get_inference_action_dist_cls().from_logits(logits).to_deterministic().sample()[0].numpy()
                    mask = env.par_env.action_mask(a)
                    illegal += any(not mask[k][act[k]] for k in range(len(mask)))
                    decisions += 1
                    acts[a] = act
                obs, *_ = env.step(acts)
        results[obs_mode] = (illegal, decisions)
    assert results["dict"][0] == 0 and results["dict"][1] > 500
    assert results["flat"][0] > 0  # without masking, random weights do pick masked choices


def test_train_writes_outputs_and_resumes(ray_session, tmp_path):
    from fleet_marl.rllib.train import COLUMNS, train

    tc = small(task="tiny", iterations=2, eval_interval=2, eval_episodes=1, checkpoint_interval=1, out=str(tmp_path), name="run")
    res = train(tc, progress=False, final_episodes=2)
    run = tmp_path / "run"
    assert res.run_dir == run and res.checkpoint == run / "checkpoint"
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["iteration"]) for r in rows] == [1, 2] and list(rows[0]) == [c for c, _ in COLUMNS]
    assert rows[1]["score"] != "" and rows[0]["score"] == ""  # graded on iteration 2 only
    assert float(rows[1]["env_steps"]) >= 400
    assert (run / "learning_curve.png").stat().st_size > 10_000
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").iterdir())
    table = (run / "results.md").read_text()
    for name in ("PPO (shared, mixed)", "fair_share", "planner", "random"):
        assert name in table
    assert json.loads((run / "checkpoint" / "fleet_marl.json").read_text())["iteration"] == 2
    assert not (run / "checkpoint.tmp").exists()
    # the same run again is refused unless resumed or overwritten
    from fleet_marl.rllib.config import TrainConfigError

    with pytest.raises(TrainConfigError, match="already holds a run; pass --resume"):
        train(tc, progress=False, final_episodes=0)
    # resume: continues at iteration 3 and appends to the CSV
    res2 = train(tc.replace(iterations=3), resume=str(run), progress=False, final_episodes=0)
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    assert float(rows[2]["env_steps"]) > float(rows[1]["env_steps"])
    meta = json.loads((res2.checkpoint / "fleet_marl.json").read_text())
    assert meta["iteration"] == 3 and meta["seconds"] > float(rows[1]["time_s"])
    assert float(rows[2]["time_s"]) > float(rows[1]["time_s"])  # the clock carries over the restore
    # the run folder is a policy for fleet-marl evaluate
    ev = evaluate("tiny", str(run), episodes=1, progress=False)
    assert ev.episodes[0].illegal == 0


def test_a_relative_checkpoint_path_loads(ray_session, tmp_path, monkeypatch):
    from fleet_marl.rllib.train import _save

    tc = small(task="tiny")
    algo = build(tc).build_algo()
    try:
        _save(algo, tmp_path / "rel", tc, 0, 0)
    finally:
        algo.stop()
    monkeypatch.chdir(tmp_path)
    ev = evaluate("tiny", "rel", episodes=1, progress=False)  # the run folder, relative
    assert ev.episodes[0].rounds > 0


@pytest.mark.timeout(1200)
def test_train_on_a_ray_start_cluster_through_address(tmp_path):
    """ray start --head on 127.0.0.1, fleet-marl train --address against it, then stop it (only
    the process group we started: never `ray stop`, which kills every Ray on the machine)."""
    bindir = Path(sys.executable).parent
    import shutil
    import tempfile

    port = servers.free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    temp = tempfile.mkdtemp(prefix="fr-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    head = subprocess.Popen(
        [
            str(bindir / "ray"),
            "start",
            "--head",
            "--block",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "1",
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            "--temp-dir",
            temp,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        cfg = tmp_path / "cluster.yaml"  # graded in-training too, so the grader runs with a remote env runner
        cfg.write_text(
            "task: tiny\niterations: 2\ntrain_batch_size: 200\nminibatch_size: 100\nnum_epochs: 1\neval_interval: 1\neval_episodes: 1\n"
            "num_envs_per_env_runner: 4\n"
        )  # 50 rounds a cluster per iteration: tiny's episodes (25) end in each
        cmd = [
            str(bindir / "fleet-marl"),
            "train",
            "--address",
            f"127.0.0.1:{port}",
            "--config",
            str(cfg),
            "--num-env-runners",
            "1",
            "--final-episodes",
            "1",
            "--out",
            str(tmp_path / "runs"),
            "--name",
            "cluster",
            "--no-progress",
            "--json",
        ]
        deadline = time.time() + 120
        while True:  # the head takes a few seconds to come up
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
            if r.returncode == 0 or time.time() > deadline or "no Ray cluster found" not in r.stderr:
                break
            time.sleep(3)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout)
        assert out["env_steps"] >= 400 and Path(out["checkpoint"], "fleet_marl.json").is_file()
        rows = list(csv.DictReader(Path(out["run_dir"], "metrics.csv").read_text().splitlines()))
        assert len(rows) == 2 and all(r["score"] != "" and r["welfare"] != "" for r in rows)  # sampled remotely, graded on the driver
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.communicate()
        shutil.rmtree(temp, ignore_errors=True)
    assert head.returncode is not None


def test_address_without_a_cluster_says_how_to_start_one(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    port = servers.free_port()
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "fleet-marl"),
            "train",
            "--address",
            f"127.0.0.1:{port}",
            "--task",
            "tiny",
            "--iterations",
            "1",
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    assert "ray start --head" in r.stderr


# --- the policy's plays (experiments/greedy_vs_sampled.py) ---------------------------------------


def test_module_policy_explore_samples_legal_reproducible_actions(ray_session):
    """``explore=True`` samples from the policy's distribution: legal in every round (the mask
    gives masked choices probability 0), the same for the same reset seed, not the greedy play."""
    tc = small(task="easy")
    algo = build(tc).build_algo()
    try:
        env = fleet_marl.parallel_env(task="easy")

        def play(explore, seed):
            pol = algorithm_policy(algo, env, explore=explore)
            obs, infos = env.reset(seed=0)
            pol.reset(seed)
            taken = []
            while env.agents:
                acts = pol.act(obs, infos)
                for a, x in acts.items():
                    mask = env.action_mask(a)
                    assert all(mask[k][x[k]] for k in range(len(mask))), (a, x)
                taken.append({a: x.tolist() for a, x in acts.items()})
                obs, _, _, _, infos = env.step(acts)
            return taken

        first, again, other = play(True, 1), play(True, 1), play(True, 2)
        greedy = play(False, 1)
    finally:
        algo.stop()
    assert first == again and first not in (other, greedy)
    # untrained logits are near uniform: sampled bids use every level, greedy ones at most a few
    bids = {x[1] for step in first for x in step.values()}
    assert len(bids) == 5


def test_greedy_vs_sampled_script_measures_both_plays(ray_session):
    import importlib.util

    spec = importlib.util.spec_from_file_location("greedy_vs_sampled", ROOT / "experiments" / "greedy_vs_sampled.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    study = mod.Setup(mechanism="auction", max_cycles=20)
    algo = build(small(task="easy", env=study.env(2))).build_algo()
    try:
        greedy, again = (mod.measure(algo, 2, study, False, 2) for _ in range(2))
        sampled = mod.measure(algo, 2, study, True, 2)
    finally:
        algo.stop()
    assert greedy == again  # greedy play and the grader's seeds: reproducible
    assert sampled != greedy
    for m in (greedy, sampled):
        assert 0.0 <= m["top_bid"] <= 1.0 and 0.0 <= m["request"] <= 8.0 and m["demand"] >= 0.0
        assert m["starvation"] >= 0.0 and 0.0 <= m["oversubscribed"] <= 1.0


# --- the sequential protocol: turn-based episodes -----------------------------------------------


def test_sequential_protocol_trains_one_iteration_and_the_grader_grades_it(ray_session, tmp_path, capsys):
    """``fleet-marl train --engine rllib`` on a config whose env has ``protocol: sequential``
    trains turn-based episodes (40-feature observations, one claim per env step); ``fleet-marl
    evaluate --policy RUN --protocol sequential`` grades the run through the AEC loop, and the
    simultaneous protocol refuses it by name."""
    import yaml

    from fleet_marl.cli import main
    from fleet_marl.evaluation import PolicyError

    cfg = {
        **SMALL,
        "task": "tiny",
        "iterations": 1,
        "final_episodes": 1,
        "eval_interval": 1,
        "eval_episodes": 1,
        "env": {"protocol": "sequential", "turn_order": "rotating"},
        "out": str(tmp_path),
        "name": "seq",
    }
    (tmp_path / "seq.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", "--engine", "rllib", "--config", str(tmp_path / "seq.yaml"), "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    run = tmp_path / "seq"
    meta = json.loads((run / "checkpoint" / "fleet_marl.json").read_text())
    assert meta["signature"]["obs_dim"] == 40 and meta["train_config"]["env"]["protocol"] == "sequential"
    assert out["env_steps"] >= SMALL["train_batch_size"]
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert rows[0]["welfare"] != ""  # whole episodes were played
    assert rows[0]["score"] != "" and rows[0]["eval_illegal"] != "" and float(rows[0]["eval_illegal"]) == 0  # graded in training (AEC loop)
    ours = out["evaluations"][0]
    assert ours["protocol"] == "sequential" and ours["turn_order"] == "rotating"
    # the trained modules read 40 features
    module = ModulePolicy.from_checkpoint(run / "checkpoint", fleet_marl.env(task="tiny", protocol="sequential")).modules["shared"]
    assert module.observation_space["observations"].shape == (40,)
    # the grader, from the command line, under the sequential protocol
    assert (
        main(
            [
                "evaluate",
                "--task",
                "tiny",
                "--policy",
                str(run),
                "--protocol",
                "sequential",
                "--turn-order",
                "rotating",
                "--episodes",
                "2",
                "--json",
            ]
        )
        == 0
    )
    graded = json.loads(capsys.readouterr().out)
    graded = graded[0] if isinstance(graded, list) else graded
    assert graded["protocol"] == "sequential" and graded["episodes"] == 2
    ev = evaluate("tiny", str(run), episodes=1, overrides={"protocol": "sequential"}, progress=False)
    assert ev.episodes[0].rounds > 0 and ev.episodes[0].illegal == 0
    with pytest.raises(PolicyError, match="trained with protocol = 'sequential'.*--protocol sequential"):
        evaluate("tiny", str(run), episodes=1, progress=False)


def test_sequential_protocol_trains_with_every_sharing_scheme(ray_session):
    """Turn-based episodes reach every module: per-tenant modules each learn from their own
    turns, MAPPO's critic reads the sequential protocol's longer state."""
    for sharing, n_modules in (("per_tenant", 2), ("mappo", 1)):
        tc = small(task="tiny", sharing=sharing, env={"protocol": "sequential"})
        algo = build(tc).build_algo()
        try:
            r = algo.train()
            learners = {k for k in r["learners"] if k != "__all_modules__"}
            assert len(learners) == n_modules
            for mid in learners:
                assert np.isfinite(r["learners"][mid]["policy_loss"]) and r["learners"][mid]["num_module_steps_trained"] > 0
            assert r["env_runners"]["fleet/illegal"] == 0 and "fleet/welfare" in r["env_runners"]
            if sharing == "mappo":
                mod = algo.learner_group._learner.module["shared"]
                assert mod._dict_space["state"].shape == fleet_marl.env(task="tiny", protocol="sequential").unwrapped.state_space.shape
        finally:
            algo.stop()

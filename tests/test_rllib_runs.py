"""RLlib runs end to end: the ``--max-minutes`` cap stops an RLlib run as it stops a TorchRL
one; a checkpoint restored in a fresh Algorithm, and in a fresh process through
``fleet-marl evaluate`` with nothing but the checkpoint folder, grades as the algorithm did at
the end of training (ray-project/ray issue 44475 reports restored checkpoints grading
differently); and tenants that are truncated get their final observation and reward, through
the per-cluster ``MultiAgentEnv``, RLlib's own env runner over it and the array env runner,
every episode's returns equal to the rewards the env handed out.

One Ray for the session (the ``ray_session`` fixture); short runs; generous timeouts; nothing
here asserts on wall-clock time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner  # noqa: E402

from fleet_marl.evaluation import evaluate  # noqa: E402
from fleet_marl.rllib.config import TrainConfig, build  # noqa: E402
from fleet_marl.rllib.env import FleetRLlibEnv  # noqa: E402
from fleet_marl.rllib.evaluation import algorithm_policy  # noqa: E402
from fleet_marl.rllib.runner import FleetEnvRunner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(train_batch_size=400, minibatch_size=200, num_epochs=2, eval_interval=0, hidden=[32, 32])
#: the seeds of the graded episodes below
SEEDS = 4
#: short episodes, so that every sample below runs through truncations
CYCLES = 6


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-m", "fleet_marl.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


# --- the time budget ------------------------------------------------------------------------------


def test_max_minutes_stops_an_rllib_run_after_the_iteration_that_passes_it(ray_session, tmp_path, capsys):
    """``fleet-marl train --engine rllib --max-minutes M`` (refused before): the run stops after
    the iteration that passes M minutes, checkpoints and grades that iteration, and says so."""
    from fleet_marl.cli import main

    (tmp_path / "c.yaml").write_text(json.dumps({**SMALL, "task": "tiny", "iterations": 50, "final_episodes": 1}))
    argv = ["train", "--engine", "rllib", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path), "--name", "capped"]
    code = main([*argv, "--max-minutes", "1e-9", "--no-progress"])  # any iteration passes it
    out = capsys.readouterr().out
    assert code == 0 and "note: stopped by the max_minutes cap (1e-09 min of wall time) after 1 of 50 iterations" in out
    run = tmp_path / "capped"
    meta = json.loads((run / "checkpoint" / "fleet_marl.json").read_text())
    assert meta["iteration"] == 1 and meta["train_config"]["max_minutes"] == 1e-9
    assert len((run / "metrics.csv").read_text().splitlines()) == 2  # the header and one iteration
    assert "stopped by the max_minutes cap" in (run / "results.md").read_text()
    # resumed without the cap (0: none), it trains on to the iterations asked for
    code = main(["train", "--engine", "rllib", "--resume", str(run), "--iterations", "3", "--max-minutes", "0", "--no-progress"])
    assert code == 0 and "3 iterations" in capsys.readouterr().out
    assert json.loads((run / "checkpoint" / "fleet_marl.json").read_text())["iteration"] == 3
    # a bad value names the field
    assert main([*argv, "--max-minutes", "-1", "--overwrite"]) == 2
    assert "max_minutes = -1.0: expected a number in [0.0, 1000000.0]" in capsys.readouterr().err


# --- a restored checkpoint grades as the end of training did -----------------------------------------


@pytest.fixture(scope="module")
def trained(ray_session, tmp_path_factory):
    """A short easy run, graded by the algorithm's own modules at its end on seeds 0..SEEDS-1,
    then checkpointed: (the run folder, the task, that evaluation's summary)."""
    from fleet_marl.rllib.train import _save

    out = tmp_path_factory.mktemp("trained")
    tc = TrainConfig(**{**SMALL, "task": "easy", "reward_scheme": "local", "train_batch_size": 1000, "minibatch_size": 500})
    algo = build(tc).build_algo()
    try:
        for _ in range(3):
            algo.train()
        live = evaluate("easy", lambda env: algorithm_policy(algo, env), episodes=SEEDS, seed=0, progress=False, hindsight=False)
        _save(algo, out / "run", tc, 3, 3000)
    finally:
        algo.stop()
    return out / "run", live.summary()


def _within_the_spread(restored: dict, live: dict) -> None:
    """The restored policy's mean welfare lies within the live one's seed spread (one standard
    deviation over the seeds), and, greedy play being deterministic, each seed's welfare is the same."""
    assert restored["seeds"] == live["seeds"] == list(range(SEEDS))
    assert abs(restored["welfare_mean"] - live["welfare_mean"]) <= live["welfare_std"]
    np.testing.assert_allclose(restored["welfare"], live["welfare"], rtol=1e-9)


def test_a_checkpoint_restored_in_a_fresh_algorithm_grades_as_training_ended(trained):
    from ray.rllib.algorithms.algorithm import Algorithm

    run, live = trained
    algo = Algorithm.from_checkpoint(str(run / "checkpoint"))
    try:
        restored = evaluate("easy", lambda env: algorithm_policy(algo, env), episodes=SEEDS, seed=0, progress=False, hindsight=False)
    finally:
        algo.stop()
    _within_the_spread(restored.summary(), live)


def test_evaluate_grades_an_rllib_run_from_its_checkpoint_alone_in_a_fresh_process(trained, tmp_path):
    """``fleet-marl evaluate --policy`` given only the checkpoint folder, copied away from its
    run (no config, metrics or Ray of the run): the same grades as the end of training."""
    run, live = trained
    alone = tmp_path / "elsewhere" / "ckpt"
    shutil.copytree(run / "checkpoint", alone)
    r = _cli("evaluate", "--task", "easy", "--policy", str(alone), "--episodes", str(SEEDS), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _within_the_spread(json.loads(r.stdout), live)
    # on another task the checkpoint is refused by name, not played
    r = _cli("evaluate", "--task", "medium", "--policy", str(alone), "--episodes", "1", cwd=tmp_path)
    assert r.returncode == 2 and "error:" in r.stderr and "easy" in r.stderr


# --- truncation: every tenant's last observation and reward ------------------------------------------


def _flagged(term: dict, trunc: dict) -> set:
    return {a for a in term if a != "__all__" and (term[a] or trunc.get(a))}


def test_the_multi_agent_env_hands_truncated_tenants_their_final_observation_and_reward():
    """Stepping ``FleetRLlibEnv`` to its horizon: on the truncation step every tenant that acted
    gets an observation, a reward and its truncated flag, ``__all__`` is set, and each tenant's
    summed rewards are the parallel env's on the same seed and actions."""
    env = FleetRLlibEnv({"task": "easy", "max_cycles": CYCLES, "reward_scheme": "difference"})
    plain = FleetRLlibEnv({"task": "easy", "max_cycles": CYCLES, "reward_scheme": "difference"}).par_env
    obs, _ = env.reset(seed=3)
    plain.reset(seed=int(np.random.SeedSequence([3, 0]).generate_state(1)[0]))  # the wrapper mixes in the worker index
    sums: dict = defaultdict(float)
    want: dict = defaultdict(float)
    steps = 0
    while True:
        acts = {a: env.par_env.default_action_index[env.par_env.agent_index[a]] for a in env.agents}
        obs, rew, term, trunc, _ = env.step(acts)
        _, r_plain, *_ = plain.step(acts)
        steps += 1
        for a, r in rew.items():
            sums[a] += r
        for a, r in r_plain.items():
            want[a] += r
        if trunc["__all__"] or term["__all__"]:
            break
    assert steps == CYCLES and trunc["__all__"] and not term["__all__"]
    assert set(obs) == set(rew) == set(acts) == _flagged(term, trunc)  # everyone who acted: obs, reward, flag
    assert all(trunc[a] for a in acts) and all(o["observations"].shape == (34,) for o in obs.values())
    assert dict(sums) == pytest.approx(dict(want)) and any(v != 0 for v in sums.values())


class _Counted(FleetRLlibEnv):
    """``FleetRLlibEnv`` that keeps, per finished episode, the rewards it handed each tenant."""

    finished: ClassVar[list[dict]] = []

    def reset(self, *, seed=None, options=None):
        self._sums: dict = defaultdict(float)
        return super().reset(seed=seed, options=options)

    def step(self, action_dict):
        out = super().step(action_dict)
        for a, r in out[1].items():
            self._sums[a] += r
        if out[2]["__all__"] or out[3]["__all__"]:
            type(self).finished.append(dict(self._sums))
        return out


def _check_episodes(episodes, handed: list[dict]) -> None:
    """Every finished episode ends with every tenant's last step: one observation more than its
    actions (its final one), a reward for each action (the last included) and its truncated flag;
    the episodes' returns are the env's summed rewards (as multisets: clusters end in any order).
    RLlib 2.60's ``MultiAgentEpisode.add_env_step`` also marks the episode, and each tenant on its
    last step, terminated once every tenant is done, truncated or not (docs/training.md, "Time
    limits"); the array runner builds its episodes the same way."""
    done = [e for e in episodes if e.is_done]
    assert len(done) >= 2 and all(e.is_truncated and e.is_terminated for e in done)
    got = []
    for e in done:
        assert len(e) == CYCLES and len(e.agent_episodes) == 4  # easy's four tenants, all to the horizon
        for sa in e.agent_episodes.values():
            obs = sa.get_observations()
            assert len(obs["observations"]) == len(sa.get_actions()) + 1 == CYCLES + 1  # the final observation
            assert len(sa.get_rewards()) == CYCLES and sa.is_truncated  # the final reward, and the flag
        got.append({str(a): float(sum(sa.get_rewards())) for a, sa in e.agent_episodes.items()})
        assert e.get_return() == pytest.approx(sum(got[-1].values()))

    def key(d: dict) -> tuple:
        return tuple(round(d[a], 4) for a in sorted(d))

    left = Counter(map(key, handed))
    assert len(handed) >= len(got) and not Counter(map(key, got)) - left  # each return is an episode the env played


def test_rllibs_env_runner_records_truncated_tenants_final_step(ray_session):
    """RLlib's own ``MultiAgentEnvRunner`` over ``FleetRLlibEnv`` (``vector: false``)."""
    tc = TrainConfig(**{**SMALL, "task": "easy", "vector": False, "num_envs_per_env_runner": 2, "env": {"max_cycles": CYCLES}})
    config = build(tc).environment(_Counted, env_config=tc.env_config(), disable_env_checking=True)
    _Counted.finished = []
    runner = MultiAgentEnvRunner(config=config)
    try:
        episodes = runner.sample(num_episodes=4, explore=True)
    finally:
        runner.stop()
    _check_episodes(episodes, _Counted.finished)


def test_the_array_env_runner_records_truncated_tenants_final_step(ray_session):
    """``FleetEnvRunner`` over the vector env (what ``--engine rllib`` samples by default): the
    rewards the vector env's steps hand out, summed per cluster and episode, are the returns."""
    tc = TrainConfig(**{**SMALL, "task": "easy", "num_envs_per_env_runner": 3, "env": {"max_cycles": CYCLES}})
    runner = FleetEnvRunner(config=build(tc))
    env = runner.fleet_env
    play = env.step_frame
    sums = np.zeros((3, len(env.possible_agents)))
    handed: list[dict] = []

    def step_frame(actions):
        r, illegal, final, nxt, ended = play(actions)
        sums[:] += np.where(r.live, r.reward, 0.0)  # the reward of every tenant that acted this round
        for b in np.flatnonzero(ended):
            handed.append({a: float(sums[b, i]) for i, a in enumerate(env.possible_agents)})
            sums[b] = 0.0
        return r, illegal, final, nxt, ended

    env.step_frame = step_frame  # type: ignore[method-assign]
    try:
        episodes = runner.sample(num_episodes=3, explore=True)
    finally:
        runner.stop()
    _check_episodes(episodes, handed)

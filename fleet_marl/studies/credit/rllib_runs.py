"""The runs of the credit-assignment study on the RLlib engine (``fleet-marl compare --engine rllib``).

The study's one design (:class:`~fleet_marl.studies.credit.torchrl_design.Study`), with the
TorchRL runs' keys, grader and CSV columns (:mod:`~fleet_marl.studies.credit.rows`).
:func:`train_config` makes a run's RLlib :class:`~fleet_marl.rllib.config.TrainConfig` from the
settings the TorchRL run's config is made from (``Study.train_config``), field by field where
both engines have the field (:data:`FIELDS`):

- the task and env overrides (``study.env``; the ``shapley`` arm's sampled permutations), the
  reward scheme and sharing of the arm (``study.arm``), the seed, the hidden layers, the epochs,
  the learning rate, the entropy coefficient; γ, λ, the clip and the critic's coefficient are
  both engines' defaults;
- **the budget**: the driver's env runner (``num_env_runners = 0``) steps ``num_envs(N)``
  clusters as arrays (``num_envs_per_env_runner``) and an iteration is ``train_batch_size =
  num_envs(N) x rollout`` env steps, so RLlib's ``auto`` rollout fragment is ``rollout`` steps
  of every cluster and each iteration samples exactly the TorchRL iteration's env steps; with
  the study's iterations, a run's env-step budget is ``study.env_steps(part, N)`` exactly;
- ``minibatch`` is ``minibatch_size``, the same number in another unit: RLlib counts a
  module's agent steps where TorchRL counts cluster steps of every tenant, so RLlib takes N
  times more (and smaller) gradient steps per epoch with a shared module (RLlib's PPO requires
  ``minibatch_size <= train_batch_size``, in env steps, which rules out N times larger ones);
- not mapped (the RLlib engine has no such setting; its own apply): the learning rate's
  annealing, the gradient-norm clip, the activation (RLlib's modules use tanh), the tenant's
  one-hot index in a shared network, the centralized critic's layers; RLlib's KL penalty and
  value-loss clip, which TorchRL's loss has not, stay. The learner is on CPU:
  ``device`` other than ``cpu`` is refused (:func:`check`).

:func:`train_and_grade` trains with RLlib's ``Algorithm.train()`` (what ``fleet-marl train
--engine rllib`` calls) and grades the greedy policy (the algorithm's modules,
:func:`~fleet_marl.rllib.evaluation.algorithm_policy`) with the grader at ``study.eval_at(part)``
on the study's episodes. The columns mean what they mean on TorchRL, but for two: an
iteration's training welfare is RLlib's ``fleet/welfare``, its running mean over the episodes
so far (``train_welfare`` averages it over the iterations since the last graded point, so it is
smoother than TorchRL's), and ``agent_steps`` is RLlib's count of the tenant steps it sampled.
``credit_seconds`` is the env's credit engine in the env runner, as on TorchRL.

:func:`run_all` runs the missing runs as Ray tasks of one CPU, ``jobs`` at a time, on a Ray
this process starts once (:data:`RAY_CPUS` CPUs, no dashboard) and keeps for its later studies;
each finished run is stored as it arrives (:class:`~fleet_marl.studies.credit.torchrl_runs.Session`).
Ray, torch and RLlib are imported only when runs run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleet_marl.evaluation import evaluate, reference_episodes
from fleet_marl.rllib.config import TrainConfig
from fleet_marl.studies.credit import rows
from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.credit.torchrl_runs import Session
from fleet_marl.studies.store import StudyError

#: The CPUs of the Ray that :func:`run_all` starts (when this process runs none yet): at most that many runs at once.
RAY_CPUS = 2
#: The TorchRL run config's fields (``Study.train_config``) that a run's RLlib config has too: TorchRL field -> RLlib field.
FIELDS = {
    "task": "task",
    "reward_scheme": "reward_scheme",
    "sharing": "sharing",
    "env": "env",
    "iterations": "iterations",
    "seed": "seed",
    "num_envs": "num_envs_per_env_runner",
    "epochs": "num_epochs",
    "minibatch": "minibatch_size",
    "lr": "lr",
    "gamma": "gamma",
    "lmbda": "lambda_",
    "clip": "clip_param",
    "entropy_coeff": "entropy_coeff",
    "critic_coeff": "vf_loss_coeff",
    "hidden": "hidden",
}
#: The distributions whose versions a session records in ``sessions.csv``.
DISTS = ("fleet_marl", "torch", "ray")


def check(study: Study, jobs: int | None, address: str | None) -> None:
    """Refuse what the RLlib runs do not do, before the study folder is touched."""
    if address is not None:
        raise StudyError(
            f"--address {address!r}: the study's RLlib runs train on this machine's Ray; a cluster runs the TorchRL runs "
            "(leave out --engine rllib)"
        )
    if study.device != "cpu":
        raise StudyError(f"--device {study.device!r}: the study's RLlib runs learn on cpu; leave out --device")
    if jobs is not None and jobs > RAY_CPUS:
        raise StudyError(f"--jobs {jobs}: the study's RLlib runs are Ray tasks of one CPU on a Ray of {RAY_CPUS} CPUs; give --jobs 1 or 2")


def train_config(study: Study, key: tuple) -> TrainConfig:
    """The RLlib :class:`~fleet_marl.rllib.config.TrainConfig` of the run ``key`` (see the module docstring), checked."""
    part, setting, n, _arm, seed = key
    scheme, sharing = study.arm(key)
    task, env = study.env(part, setting, n)
    if scheme == "shapley":
        env["shapley_samples"] = study.shapley_samples
    B = study.num_envs(n)
    tc = TrainConfig(
        task=task,
        reward_scheme=scheme,
        sharing=sharing,
        env=env,
        iterations=study.iterations_of(part),
        seed=seed,
        num_env_runners=0,
        num_envs_per_env_runner=B,
        vector=True,
        train_batch_size=B * study.rollout,
        minibatch_size=max(1, B * study.rollout // study.minibatches),
        num_epochs=study.epochs,
        lr=study.lr,
        entropy_coeff=study.entropy_coeff,
        hidden=list(study.hidden),
        eval_interval=0,
        checkpoint_interval=0,
        out=str(Path(study.out) / "unused"),
        name="-".join(map(str, key)),
    )
    tc.check(f"the run {'/'.join(map(str, key))}")
    return tc


def train_and_grade(tc: TrainConfig, eval_at: list[int], episodes: int) -> tuple[dict, list[dict]]:
    """Train ``tc`` (no files) and grade at the iterations ``eval_at`` (the last must be
    ``tc.iterations``) on grader seeds 0 .. episodes - 1. Returns (the run's measures, one
    curve row per graded iteration)."""
    import torch  # torch: only in a run

    from fleet_marl.rllib.config import build  # Ray (when building): only in a run
    from fleet_marl.rllib.env import credit_timing  # Ray: only in a run
    from fleet_marl.rllib.evaluation import algorithm_policy  # Ray: only in a run
    from fleet_marl.rllib.train import flatten, quiet, row_of  # Ray: only in a run

    if not eval_at or eval_at[-1] != tc.iterations:
        raise ValueError(f"eval_at = {eval_at!r}: expected iterations ending with the last, {tc.iterations}")
    quiet()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    algo = build(tc).build_algo()
    curve: list[dict] = []
    eval_seconds = 0.0
    welfare_since: list[float] = []
    ev = None
    row: dict[str, Any] = {}
    try:
        for it in range(1, tc.iterations + 1):
            row = row_of(flatten(algo.train()))
            if row["welfare"] != "":
                welfare_since.append(float(row["welfare"]))
            if it in eval_at:
                te = time.perf_counter()
                ev = evaluate(
                    tc.task,
                    lambda env: algorithm_policy(algo, env),
                    episodes=episodes,
                    seed=0,
                    overrides=dict(tc.env),
                    progress=False,
                    hindsight=False,  # a learning curve's points need the score only
                )
                eval_seconds += time.perf_counter() - te
                curve.append(rows.point(it, row["env_steps"], row["agent_steps"], welfare_since, ev, time.perf_counter() - t0))
                welfare_since = []
        credit_seconds, _ = credit_timing(algo)
    finally:
        algo.stop()
        with contextlib.suppress(OSError):  # the empty folder RLlib makes under ~/ray_results for every Algorithm
            os.rmdir(algo.logdir)
    seconds = time.perf_counter() - t0
    assert ev is not None  # eval_at ends with the last iteration: the run was graded there
    return rows.result(tc.iterations, row["env_steps"], row["agent_steps"], ev, seconds, eval_seconds, credit_seconds), curve


def run_one(study: Study, key: tuple) -> tuple[dict, list[dict]]:
    """Train and grade the run ``key``; returns its results row and its curve rows."""
    res, curve = train_and_grade(train_config(study, key), study.eval_at(key[0]), study.episodes)
    return rows.study_row(study, key, res, curve)


def run_caught(args: tuple) -> tuple[tuple, tuple | str]:
    """:func:`run_one` in a Ray task: ``(key, (row, curve))``, or ``(key, message)`` when the run failed."""
    study, key = args
    return rows.caught(run_one, study, key)


def start_ray() -> None:
    """Start Ray in this process (:data:`RAY_CPUS` CPUs, no dashboard, no token auth, no usage
    stats, the workers' lines kept off the progress bars), unless it runs already."""
    import ray  # Ray: only when the study runs

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        ray.init(num_cpus=RAY_CPUS, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)


def run_all(study: Study, out: Path, todo: list[tuple], jobs: int, progress: bool) -> None:
    """The runs ``todo`` of ``study`` as Ray tasks of one CPU, ``jobs`` at a time, each appended
    to the CSVs of ``out`` as it finishes, and this session's row of ``sessions.csv``."""
    import ray  # Ray: only when the study runs

    # the grader's references once per setting, before the runs need them: its seeds, and the
    # three of the training score RLlib's callbacks report (fleet_marl.rllib.callbacks)
    seeds = list(range(max(study.episodes, 3)))
    refs = [(*study.env(*r), name) for r in sorted({k[:3] for k in todo}) for name in ("random", "planner")]
    for task, overrides, name in tqdm(refs, desc="references (random, planner)", unit="setting", disable=not progress, leave=False):
        reference_episodes(task, name, seeds, overrides, progress=None)
    start_ray()
    session = Session(out, jobs, DISTS)
    try:
        session.run_on_ray(ray.remote(num_cpus=1, max_retries=0)(run_caught), study, todo, jobs, "runs (RLlib)", progress)
    finally:
        session.close()


__all__ = ["DISTS", "FIELDS", "RAY_CPUS", "check", "run_all", "run_caught", "run_one", "start_ray", "train_and_grade", "train_config"]

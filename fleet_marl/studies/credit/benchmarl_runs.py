"""The value-decomposition arms of the credit-assignment study: QMIX and VDN through BenchMARL.

=========  =====================================================================================
arm        what it is
=========  =====================================================================================
``qmix``   BenchMARL's QMIX (Rashid et al. 2018): per-tenant Q-networks (one, shared) mixed by a
           monotonic network conditioned on the state, trained on the team's reward
``vdn``    BenchMARL's VDN (Sunehag et al. 2018): the team's Q-value as the sum of the tenants'
=========  =====================================================================================

Both learn the credit assignment from the team's reward: the env's reward scheme is ``global``
(every live tenant's reward is the team's, G minus the starvation penalty), and BenchMARL's
value-decomposition algorithms train on the mean of the tenants' rewards (a departed tenant's
slot counts 0). Each tenant picks an entry of the menu of ``gpus`` x ``bid_level`` (45 entries;
its other fields at its defaults: :class:`~fleet_marl.clients.benchmarl.env.FleetMenuEnv`),
where the PPO arms choose every field.

:func:`run_one` trains a run (:func:`fleet_marl.clients.benchmarl.train.train`: BenchMARL's own
YAML configs) on the run's env (``study.env``: a suite task's clusters over its first train
scenarios, as the PPO arms') with the PPO arms' env-step budget at its n
(``study.env_steps(part, n)``: ``iterations`` iterations of ``num_envs(n) x rollout`` frames, a
frame one env step) and seed, and grades it exactly as
:func:`~fleet_marl.studies.credit.torchrl_runs.train_and_grade` grades a PPO run: the greedy
policy (:class:`~fleet_marl.clients.benchmarl.policy.GreedyMenuPolicy`) by the grader at the
iterations ``study.eval_at(part)`` (the curve; the hindsight reference at the last), then
``study.grading(key)["final"]`` (the suite study's train split), into the same columns. BenchMARL
and torch are imported only in a run.
"""

from __future__ import annotations

import time
from typing import Any

from fleet_marl.evaluation import evaluate
from fleet_marl.studies.credit import rows
from fleet_marl.studies.credit.torchrl_design import Study

#: The engine that trains these arms.
ENGINE = "benchmarl"
#: The value-decomposition arms: arm -> (reward scheme, algorithm); the algorithm is the row's ``sharing``.
VALUE_ARMS = {"qmix": ("global", "qmix"), "vdn": ("global", "vdn")}


def run_one(study: Study, key: tuple) -> tuple[dict, list[dict]]:
    """Train and grade the run ``key`` of a value-decomposition arm (see the module docstring);
    its results row (the design's columns) and its curve rows."""
    import torch  # torch: only in a run

    from fleet_marl.clients.benchmarl.train import train  # BenchMARL: only in a run

    part, setting, n, arm, seed = key
    scheme, algorithm = VALUE_ARMS[arm]
    task, env = study.env(part, setting, n)
    grading = study.grading(key)
    grader_env = dict(grading.get("overrides", env))
    hindsight, final = bool(grading.get("hindsight", False)), grading.get("final")
    eval_at, iterations = study.eval_at(part), study.iterations_of(part)
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    clock = {"wall": 0.0, "cpu": 0.0}

    def play(trained: Any, changes: dict, with_hindsight: bool) -> Any:
        te, ce = time.perf_counter(), time.process_time()
        try:
            return evaluate(
                task,
                lambda e: trained.policy(e),  # noqa: PLW0108 -- the grader takes a function (inspect.isfunction), not a bound method
                episodes=study.episodes,
                seed=0,
                overrides={**grader_env, **changes},
                progress=False,
                hindsight=with_hindsight,
            )
        finally:
            clock["wall"] += time.perf_counter() - te
            clock["cpu"] += time.process_time() - ce

    curve: list[dict] = []
    since: list[float] = []
    last: dict[str, Any] = {}

    def on_iteration(iteration: int, env_steps: int, trained: Any, welfare: list[float]) -> None:
        since.extend(welfare)
        if iteration in eval_at:
            ev = play(trained, {}, hindsight and iteration == iterations)
            curve.append(rows.point(iteration, env_steps, env_steps * n, list(since), ev, time.perf_counter() - t0))
            since.clear()
            last["ev"] = ev

    trained = train(
        task, algorithm, iterations, study.num_envs(n), study.rollout, seed, scheme, env, on_iteration, getattr(study, "device", "cpu")
    )
    if trained.iterations != iterations or "ev" not in last or curve[-1]["iteration"] != iterations:
        raise RuntimeError(f"{'/'.join(map(str, key))}: BenchMARL ran {trained.iterations} of {iterations} iterations")
    ev = last["ev"]
    extra = final(ev, lambda changes, h: play(trained, changes, h)) if final is not None else {}
    seconds = time.perf_counter() - t0
    result = rows.result(iterations, trained.env_steps, trained.env_steps * n, ev, seconds, clock["wall"], trained.credit_seconds)
    result.update(cpu_seconds=round(time.process_time() - c0, 2), eval_cpu_seconds=round(clock["cpu"], 2))
    if hindsight:
        result.update(rows.hindsight(ev))
    result.update(extra)
    return rows.study_row(study, key, result, curve)


__all__ = ["ENGINE", "VALUE_ARMS", "run_one"]

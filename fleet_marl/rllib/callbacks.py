"""``FleetCallbacks``: fleet_marl's episode metrics in RLlib's results (and so in TensorBoard).

Per finished training episode (``on_episode_end``, on the env runners), logged as per-iteration
means under ``result["env_runners"]``:

=================================  ===============================================================
``fleet/welfare``                  the episode's welfare (sum over rounds and tenants of utility)
``fleet/jain``                     Jain's index of the tenants' service (allocation / fair share)
``fleet/max_starvation_streak``    the longest starvation streak of any tenant (max over episodes)
``fleet/starvation_events``        times a tenant became starved
``fleet/oom`` ``fleet/veto``       tenant-rounds out of memory / vetoed by the safety check
``fleet/throttle``                 tenant-rounds power- or heat-throttled
``fleet/degenerate``               tenant-rounds flagged by the degenerate-strategy detector
``fleet/illegal``                  masked choices the env had to veto or cap (0 with masking)
=================================  ===============================================================

Per iteration (``on_train_result``, on the driver): ``fleet/score_train``, the grader's formula
``max((W - W_random) / (W_planner - W_random), 0)`` applied to this iteration's
``fleet/welfare``, with the random and planner references' mean welfare on the grader's seeds
``0 .. evaluation_duration - 1`` (3 without evaluation). It is cheap (the references are
computed once and cached) but measures the sampled training policy on the training episodes'
seeds; ``fleet/score`` below is the grader's own evaluation of the greedy policy.

Every ``evaluation_interval`` iterations (``TrainConfig.eval_interval``), the grader plays the
current greedy policy (:func:`fleet_marl.rllib.evaluation.grade`) and ``on_evaluate_end`` adds
its figures to the evaluation results, under ``result["evaluation"]``: ``fleet/score`` (the grader's score),
``fleet/eval_welfare``, ``fleet/eval_jain``, ``fleet/eval_starvation_events``,
``fleet/eval_degenerate`` and ``fleet/eval_illegal``.
"""

from __future__ import annotations

import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback

from fleet_marl.evaluation import RANDOM, REFERENCE, episode_means, reference_episodes, score
from fleet_marl.rllib.env import fleet_envs
from fleet_marl.rllib.evaluation import grader_task, take_grades

EPISODE_METRICS = ("welfare", "jain", "max_starvation_streak", "starvation_events", "oom", "veto", "throttle", "degenerate", "illegal")
EVAL_METRICS = ("score", "eval_welfare", "eval_jain", "eval_starvation_events", "eval_degenerate", "eval_illegal")


class FleetCallbacks(RLlibCallback):
    """Logs :data:`EPISODE_METRICS` per episode and the grader's :data:`EVAL_METRICS`.

    RLlib makes one instance per env runner and one for the driver's ``Algorithm``; the
    driver's keeps the references of ``fleet/score_train`` (computed once, on the first
    result)."""

    def __init__(self):
        super().__init__()
        self.references: tuple[float, float] | None = None  # (random, planner) mean welfare
        self._references_done = False  # the score is undefined (None) on some tasks

    def on_episode_end(self, *, episode, metrics_logger=None, env=None, env_index=0, prev_episode_chunks=None, **kwargs):
        if metrics_logger is None or env is None:
            return
        # the vector env resets a finished sub-env on its next step, so it still holds this episode
        summary = env.summary(env_index) if hasattr(env, "summary") else fleet_envs(env)[env_index].fairness
        log = metrics_logger.log_value
        log("fleet/welfare", float(summary.welfare), reduce="mean")
        log("fleet/jain", float(summary.jain), reduce="mean")
        log("fleet/max_starvation_streak", int(summary.max_streak.max()), reduce="max")
        log("fleet/starvation_events", int(summary.starvation_events.sum()), reduce="mean")
        for k in ("oom", "veto", "throttle", "degenerate"):
            log(f"fleet/{k}", int(np.sum(summary.counts[k])), reduce="mean")
        illegal = 0
        for chunk in [episode, *(prev_episode_chunks or [])]:
            for sa in chunk.agent_episodes.values():
                illegal += sum(bool(i.get("illegal")) for i in sa.get_infos())
        log("fleet/illegal", illegal, reduce="mean")

    def on_train_result(self, *, algorithm, result: dict, **kwargs):
        welfare = (result.get("env_runners") or {}).get("fleet/welfare")
        if welfare is None:
            return
        if not self._references_done:  # once per algorithm
            self.references, self._references_done = reference_welfare(algorithm), True
        if self.references is not None:
            result["env_runners"]["fleet/score_train"] = score(float(welfare), *self.references)

    def on_evaluate_end(self, *, algorithm, evaluation_metrics: dict | None = None, **kwargs):
        # the grader's figures of this evaluation (fleet_marl.rllib.evaluation.grade), if it ran;
        # RLlib returns this dict from evaluate() and puts it under result["evaluation"]
        extra = take_grades(algorithm)
        if extra and evaluation_metrics is not None:
            evaluation_metrics.update(extra)


def reference_welfare(algorithm) -> tuple[float, float] | None:
    """(random, planner) mean welfare on the grader's seeds for the algorithm's task, or None
    when the score is undefined there (the planner does not beat random)."""
    task, overrides = grader_task(algorithm.config.env_config)
    n = int(algorithm.config.evaluation_duration) if algorithm.config.evaluation_interval else 3
    seeds = list(range(n))
    rand = episode_means(reference_episodes(task, RANDOM, seeds, overrides))["welfare"]
    ref = episode_means(reference_episodes(task, REFERENCE, seeds, overrides))["welfare"]
    return (rand, ref) if ref > rand else None

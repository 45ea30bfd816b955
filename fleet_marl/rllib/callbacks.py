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

Every ``evaluation_interval`` iterations (``TrainConfig.eval_interval``), the grader plays the
current greedy policy (:func:`fleet_marl.rllib.evaluation.grade`) and ``on_evaluate_end`` adds
its figures to the evaluation results, under ``result["evaluation"]``: ``fleet/score`` (the grader's score),
``fleet/eval_welfare``, ``fleet/eval_jain``, ``fleet/eval_starvation_events``,
``fleet/eval_degenerate`` and ``fleet/eval_illegal``.
"""

from __future__ import annotations

import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback

EPISODE_METRICS = ("welfare", "jain", "max_starvation_streak", "starvation_events", "oom", "veto", "throttle", "degenerate", "illegal")
EVAL_METRICS = ("score", "eval_welfare", "eval_jain", "eval_starvation_events", "eval_degenerate", "eval_illegal")


class FleetCallbacks(RLlibCallback):
    """Logs :data:`EPISODE_METRICS` per episode and the grader's :data:`EVAL_METRICS`."""

    def on_episode_end(self, *, episode, metrics_logger=None, env=None, env_index=0, prev_episode_chunks=None, **kwargs):
        if metrics_logger is None or env is None:
            return
        # the vector env resets a finished sub-env on its next step, so it still holds this episode
        fleet = env.envs[env_index].unwrapped.par_env
        tr = fleet.tracker
        log = metrics_logger.log_value
        log("fleet/welfare", float(tr.welfare_sum), reduce="mean")
        log("fleet/jain", float(tr.jain_index()), reduce="mean")
        log("fleet/max_starvation_streak", int(tr.max_streak.max()), reduce="max")
        log("fleet/starvation_events", int(tr.starvation_events.sum()), reduce="mean")
        for k in ("oom", "veto", "throttle", "degenerate"):
            log(f"fleet/{k}", int(np.sum(tr.counts[k])), reduce="mean")
        illegal = 0
        for chunk in [episode, *(prev_episode_chunks or [])]:
            for sa in chunk.agent_episodes.values():
                illegal += sum(bool(i.get("illegal")) for i in sa.get_infos())
        log("fleet/illegal", illegal, reduce="mean")

    def on_evaluate_end(self, *, algorithm, evaluation_metrics: dict | None = None, **kwargs):
        # the grader's figures of this evaluation (fleet_marl.rllib.evaluation.grade), if it ran;
        # RLlib returns this dict from evaluate() and puts it under result["evaluation"]
        extra = getattr(algorithm, "_fleet_eval", None)
        algorithm._fleet_eval = None
        if extra and evaluation_metrics is not None:
            evaluation_metrics.update(extra)

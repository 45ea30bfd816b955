"""The grader inside RLlib: ``grade`` is the ``custom_evaluation_function`` of every config
:func:`fleet_marl.rllib.config.build` makes.

Every ``evaluation_interval`` iterations it plays the current greedy policy
(:class:`~fleet_marl.rllib.policy.ModulePolicy` over the algorithm's modules) with
:func:`fleet_marl.evaluation.evaluate` on seeds ``0 .. evaluation_duration - 1`` of the
training task, against the random and planner references on the same seeds.
``FleetCallbacks.on_evaluate_end`` adds its figures to the evaluation results, which RLlib puts
under ``result["evaluation"]``: ``fleet/score``, ``fleet/eval_welfare``, ``fleet/eval_jain``,
``fleet/eval_starvation_events``, ``fleet/eval_degenerate``, ``fleet/eval_illegal``.

RLlib 2.60 replaces what a ``custom_evaluation_function`` returns with its own metrics store's
evaluation results, so ``grade`` leaves its figures here, keyed by the algorithm (weakly: an
algorithm that is gone takes them along), until ``on_evaluate_end`` takes them
(:func:`take_grades`). Nothing is stored on RLlib's objects.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from fleet_marl.evaluation import episode_means, evaluate
from fleet_marl.rllib.env import WRAPPER_KEYS
from fleet_marl.rllib.policy import ModulePolicy
from fleet_marl.tasks import SHORTCUTS

REWARD_ONLY = tuple(k for k, (section, _) in SHORTCUTS.items() if section == "reward")
#: algorithm -> the figures of its last ``grade`` not yet taken by ``on_evaluate_end``
_GRADES: WeakKeyDictionary = WeakKeyDictionary()


def algorithm_policy(algorithm, env, explore: bool = False):
    """A :class:`ModulePolicy` over ``algorithm``'s current modules, for ``env`` (greedy, or
    sampled with ``explore``)."""
    multi = algorithm.config.policy_mapping_fn
    ids = list(algorithm.config.policies)
    modules = {mid: algorithm.get_module(mid) for mid in ids}
    obs_mode = algorithm.config.env_config.get("obs_mode", "dict")
    return ModulePolicy(env, modules, lambda a: multi(a, None), obs_mode, explore)


def grader_task(env_config: dict) -> tuple[str, dict]:
    """(task, overrides) of the grader for an ``env_config``."""
    cfg = dict(env_config)
    task = cfg.pop("task", "easy")
    overrides = {k: v for k, v in cfg.items() if k not in WRAPPER_KEYS and k not in REWARD_ONLY}
    return task, overrides


def grade(algorithm, eval_env_runner_group=None):
    """RLlib ``custom_evaluation_function``: (metrics, env steps, agent steps)."""
    task, overrides = grader_task(algorithm.config.env_config)
    episodes = int(algorithm.config.evaluation_duration)
    ev = evaluate(
        task,
        lambda env: algorithm_policy(algorithm, env),
        episodes=episodes,
        seed=0,
        overrides=overrides,
        progress=False,
        hindsight=False,  # RLlib's periodic evaluation reports the score; the final evaluation the gap
    )
    eps = ev.episodes
    means = episode_means(eps)
    metrics = {
        "fleet/score": ev.score,
        "fleet/eval_welfare": float(ev.welfare.mean()),
        **{f"fleet/eval_{k}": means[k] for k in ("jain", "starvation_events", "degenerate", "illegal")},
    }
    _GRADES[algorithm] = metrics  # for FleetCallbacks.on_evaluate_end (see the module docstring)
    steps = int(sum(e.rounds for e in eps))
    agent_steps = int(sum(r["rounds"] for e in eps for r in e.agents.values()))
    return metrics, steps, agent_steps


def take_grades(algorithm) -> dict | None:
    """The figures of ``algorithm``'s last :func:`grade`, once (None if none is waiting)."""
    return _GRADES.pop(algorithm, None)


__all__ = ["algorithm_policy", "grade", "grader_task", "take_grades"]

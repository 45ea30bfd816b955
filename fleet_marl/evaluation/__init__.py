"""Evaluation: play a policy on a task for a list of seeds and grade it against the references.

=====================  ====================================================================
module                 what it owns
=====================  ====================================================================
``loading``            policy specs -> policy objects; the ``PolicyLoader`` plug-in hook
``runner``             one episode, every action checked (``run_episode``, ``Episode``, ``episode_means``)
``reference``          the ``random``, ``planner`` and ``hindsight`` reference episodes, cached on disk
``open_loop``          the ``open_loop`` baseline's policy spec (and table files), ``fleet-marl open-loop``
``suite_open_loop``    the ``open_loop`` baseline on a suite task: one table searched on its train scenarios
``score``              the score and ``evaluate`` (``fleet-marl evaluate``)
``baselines``          every reference policy on every task (``fleet-marl baselines``)
``demo``               one rendered episode (``fleet-marl demo``)
``command``            the ``evaluate`` command
=====================  ====================================================================

>>> from fleet_marl.evaluation import evaluate
>>> ev = evaluate("tiny", "precision_expert", episodes=2, progress=False)
>>> round(ev.score, 2)
1.0

This layer sits on the env and the reference policies; it knows no RLlib (trained checkpoints
arrive through a loader plug-in that ``fleet_marl.rllib`` declares).
"""

from fleet_marl.evaluation import open_loop  # registers the open_loop policy loader
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader, load_policy, loaders, register_loader, source_name
from fleet_marl.evaluation.reference import HINDSIGHT, OPEN_LOOP, RANDOM, REFERENCE, code_version, data_version, reference_episodes
from fleet_marl.evaluation.runner import EVENTS, Episode, episode_means, make_env, run_episode
from fleet_marl.evaluation.score import Evaluation, GraderError, evaluate, score

__all__ = [
    "EVENTS",
    "HINDSIGHT",
    "OPEN_LOOP",
    "RANDOM",
    "REFERENCE",
    "Episode",
    "Evaluation",
    "GraderError",
    "PolicyError",
    "PolicyLoader",
    "code_version",
    "data_version",
    "episode_means",
    "evaluate",
    "load_policy",
    "loaders",
    "make_env",
    "open_loop",
    "reference_episodes",
    "register_loader",
    "run_episode",
    "score",
    "source_name",
]

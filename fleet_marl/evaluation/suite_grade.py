"""The grader on the credit-assignment suite (:mod:`fleet_marl.suite`): a policy's score on each
of a suite task's splits (train, held-out, shifted) at once.

:func:`fleet_marl.evaluation.evaluate` grades one split of a suite task (``overrides={"split":
...}``, default ``"heldout"``): scenario ``s`` of the split is its own config
(:func:`fleet_marl.suite.scenario`), played once with the env seed
:func:`fleet_marl.suite.env_seed`; the references (``random``, ``planner``, ``hindsight``) play the
same scenarios and seeds, so a split's score and gap are the grader's, pooled over its scenarios
(the mean welfare against the references' means). A policy trained on a task's train scenarios
is graded on its held-out ones with the same call: the scenarios of a task share their spaces.
"""

from __future__ import annotations

from fleet_marl import suite
from fleet_marl.evaluation.score import Evaluation, evaluate


def evaluate_suite(task: str, policy, splits=tuple(suite.SPLITS), episodes: int = 10, seed: int = 0, **kw) -> dict[str, Evaluation]:
    """``{split: Evaluation}`` of ``policy`` on scenarios ``seed .. seed + episodes - 1`` of each of suite task ``task``'s ``splits``."""
    overrides = dict(kw.pop("overrides", None) or {})
    return {split: evaluate(task, policy, episodes, seed, {**overrides, "split": split}, **kw) for split in splits}


__all__ = ["evaluate_suite"]

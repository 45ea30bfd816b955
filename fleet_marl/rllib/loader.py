"""The grader's loader of ``fleet-marl train --engine rllib`` checkpoints: a policy spec that is
a run folder or its ``checkpoint/`` folder (one holding the ``fleet_marl.json`` sidecar) plays
the trained modules greedily (:class:`~fleet_marl.rllib.policy.ModulePolicy`).

Registered as the ``rllib`` entry point of the group ``fleet_marl.policy_loaders`` in
``pyproject.toml``, so :func:`fleet_marl.evaluation.load_policy` finds it without importing
this adapter. Importing this module imports no Ray; loading a checkpoint does.
"""

from __future__ import annotations

from typing import Any

from fleet_marl.errors import require
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.training import check_trained_on, engine_loader
from fleet_marl.training.engines import ENGINES

#: The RLlib engine's checkpoints (named in the registry of engines): ``fleet_marl.json`` next to RLlib's checkpoint files.
ENGINE = ENGINES["rllib"].checkpoints
SIDECAR = ENGINE.sidecar
checkpoint_folder = ENGINE.checkpoint_folder


def load(spec: str, env: Any) -> Any:
    """The greedy policy of the checkpoint ``spec`` on ``env``, after checking that the
    checkpoint learned this env's agents, action spaces and scenario."""
    folder = ENGINE.find(spec)
    check_trained_on(spec, ENGINE.read_sidecar(folder), env)
    require(("ray.rllib", "torch"), "rllib", f"grading the trained run {spec}")
    from fleet_marl.rllib.policy import ModulePolicy  # Ray and torch: only when a checkpoint is loaded

    try:
        return ModulePolicy.from_checkpoint(folder, env)
    except Exception as exc:
        raise PolicyError(spec, f"failed to load the checkpoint: {type(exc).__name__}: {exc}") from exc


LOADER = engine_loader("rllib", load, "a fleet-marl train --engine rllib run folder or checkpoint")

__all__ = ["ENGINE", "LOADER", "SIDECAR", "checkpoint_folder", "load"]

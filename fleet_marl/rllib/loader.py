"""The grader's loader of ``fleet-marl train`` checkpoints: a policy spec that is a run folder
or its ``checkpoint/`` folder (one holding the ``fleet_marl.json`` sidecar) plays the trained
modules greedily (:class:`~fleet_marl.rllib.policy.ModulePolicy`).

Registered as the ``rllib`` entry point of the group ``fleet_marl.policy_loaders`` in
``pyproject.toml``, so :func:`fleet_marl.evaluation.load_policy` finds it without importing
this adapter. Importing this module imports no Ray; loading a checkpoint does.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet_marl.errors import require
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader
from fleet_marl.evaluation.runs import check_trained_on

#: The sidecar ``fleet-marl train`` writes next to RLlib's checkpoint files.
SIDECAR = "fleet_marl.json"


def checkpoint_folder(spec: str) -> Path | None:
    """The checkpoint folder ``spec`` names (the run folder or its ``checkpoint/``), or None."""
    folder = Path(spec)
    if not folder.is_dir():
        return None
    for f in (folder, folder / "checkpoint"):
        if (f / SIDECAR).is_file():
            return f
    return None


def load(spec: str, env):
    """The greedy policy of the checkpoint ``spec`` on ``env``, after checking that the
    checkpoint learned this env's agents, action spaces and scenario."""
    folder = checkpoint_folder(spec)
    meta = json.loads((folder / SIDECAR).read_text())
    check_trained_on(spec, meta, env)
    require(("ray.rllib", "torch"), "rllib", f"grading the trained run {spec}")
    from fleet_marl.rllib.policy import ModulePolicy  # Ray and torch: only when a checkpoint is loaded

    try:
        return ModulePolicy.from_checkpoint(folder, env)
    except Exception as exc:
        raise PolicyError(spec, f"failed to load the checkpoint: {type(exc).__name__}: {exc}") from exc


LOADER = PolicyLoader(
    name="rllib",
    accepts=lambda spec: checkpoint_folder(spec) is not None,
    load=load,
    description="a fleet-marl train run folder or checkpoint",
)

__all__ = ["LOADER", "SIDECAR", "checkpoint_folder", "load"]

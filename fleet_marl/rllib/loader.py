"""The grader's loader of ``fleet-marl train`` checkpoints: a policy spec that is a run folder
or its ``checkpoint/`` folder (one holding the ``fleet_marl.json`` sidecar) plays the trained
modules greedily (:class:`~fleet_marl.rllib.policy.ModulePolicy`).

Registered as the ``rllib`` entry point of the group ``fleet_marl.policy_loaders`` in
``pyproject.toml``, so :func:`fleet_marl.evaluation.load_policy` finds it without importing
this adapter. Importing this module imports no Ray; loading a checkpoint does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fleet_marl.errors import require
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader, fleet_env_or_none
from fleet_marl.tasks import make_config

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
    sig = meta.get("signature", {})
    fe = fleet_env_or_none(env)
    if fe is not None:
        want = {"possible_agents": list(fe.possible_agents), "nvec": fe.nvec.max(0).tolist()}
        for k, v in want.items():
            if sig.get(k) != v:
                raise PolicyError(spec, f"the checkpoint was trained on task {sig.get('task')!r} with {k} = {sig.get(k)!r}; this environment has {v!r}. Evaluate it on its own task")
        trained = meta.get("train_config", {})
        if trained:  # the scenario it learned, rewards and fairness detectors aside, must be the one being played
            cfg, _ = make_config(trained.get("task"), None, **trained.get("env", {}))
            same = dataclasses.replace(cfg, reward=fe.config.reward, fairness=fe.config.fairness) == fe.config
            if not same:
                raise PolicyError(spec, f"the checkpoint was trained on task {trained.get('task')!r} with env overrides {trained.get('env', {})!r}, "
                                        "and this environment's scenario differs; evaluate it with the same overrides, e.g. "
                                        f"evaluate({trained.get('task')!r}, {spec!r}, overrides={trained.get('env', {})!r})")
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

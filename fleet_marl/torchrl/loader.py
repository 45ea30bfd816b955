"""The grader's loader of ``fleet-marl train --engine torchrl`` runs: a policy spec that is a run
folder or its ``checkpoint/`` folder holding ``fleet_marl_torchrl.json`` plays the trained actor
greedily (:class:`~fleet_marl.torchrl.policy.TrainedPolicy`).

Registered as the ``torchrl`` entry point of the group ``fleet_marl.policy_loaders`` in
``pyproject.toml``. Importing this module imports no torch; loading a checkpoint does.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet_marl.errors import require
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader
from fleet_marl.evaluation.runs import TrainConfigError, check_trained_on

#: The sidecar ``fleet-marl train --engine torchrl`` writes next to ``model.pt``.
SIDECAR = "fleet_marl_torchrl.json"


def checkpoint_folder(spec: str | Path) -> Path | None:
    """The checkpoint folder ``spec`` names (the run folder or its ``checkpoint/``), or None."""
    folder = Path(spec)
    if not folder.is_dir():
        return None
    for f in (folder, folder / "checkpoint"):
        if (f / SIDECAR).is_file():
            return f
    return None


def read_sidecar(folder: Path) -> dict:
    try:
        return json.loads((folder / SIDECAR).read_text())
    except (OSError, ValueError) as exc:
        raise TrainConfigError(
            f"{folder}: cannot read {SIDECAR} ({exc}); is this a fleet-marl train --engine torchrl checkpoint?"
        ) from None


def load(spec: str, env, explore: bool = False):
    """The greedy policy of the run ``spec`` on ``env``, after checking that it learned this
    env's agents, action spaces and scenario."""
    folder = checkpoint_folder(spec)
    meta = read_sidecar(folder)
    sig = meta.get("signature", {})
    check_trained_on(spec, meta, env)
    require(("torch", "torchrl", "tensordict"), "torchrl", f"grading the trained run {spec}")
    import torch  # only when a checkpoint is loaded

    from fleet_marl.torchrl.policy import TrainedPolicy, build_networks  # torch and TorchRL: only when a run is loaded

    try:
        actor, _, _ = build_networks(
            sig["sharing"],
            len(sig["possible_agents"]),
            sig["obs_dim"],
            sig["state_dim"],
            sig["nvec"],
            sig["kinds"],
            sig["hidden"],
            sig.get("activation", "tanh"),
            sig.get("autoregressive", False),
            sig.get("agent_id", False),
        )
        actor.load_state_dict(torch.load(folder / "model.pt", weights_only=True)["actor"])
    except Exception as exc:
        raise PolicyError(spec, f"cannot load the trained actor from {folder / 'model.pt'}: {exc}") from None
    return TrainedPolicy(env, actor, sig["nvec"], explore=explore)


LOADER = PolicyLoader(
    name="torchrl",
    accepts=lambda spec: checkpoint_folder(spec) is not None,
    load=load,
    description="a fleet-marl train --engine torchrl run folder or its checkpoint/ folder",
)

__all__ = ["LOADER", "SIDECAR", "TrainConfigError", "checkpoint_folder", "load", "read_sidecar"]

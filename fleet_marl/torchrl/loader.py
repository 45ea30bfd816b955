"""The grader's loader of ``fleet-marl train --engine torchrl`` runs: a policy spec that is a run
folder or its ``checkpoint/`` folder holding ``fleet_marl_torchrl.json`` plays the trained actor
greedily (:class:`~fleet_marl.torchrl.policy.TrainedPolicy`).

Registered as the ``torchrl`` entry point of the group ``fleet_marl.policy_loaders`` in
``pyproject.toml``. Importing this module imports no torch; loading a checkpoint does.
"""

from __future__ import annotations

from typing import Any

from fleet_marl.errors import require
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.training import check_trained_on, engine_loader
from fleet_marl.training.engines import ENGINES

#: The TorchRL engine's checkpoints (named in the registry of engines): ``fleet_marl_torchrl.json`` next to ``model.pt``.
ENGINE = ENGINES["torchrl"].checkpoints
SIDECAR = ENGINE.sidecar
checkpoint_folder = ENGINE.checkpoint_folder


def load(spec: str, env: Any, explore: bool = False) -> Any:
    """The greedy policy of the run ``spec`` on ``env``, after checking that it learned this
    env's agents, action spaces and scenario."""
    folder = ENGINE.find(spec)
    meta = ENGINE.read_sidecar(folder)
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
        raise PolicyError(spec, f"cannot load the trained actor from {folder / 'model.pt'}: {exc}") from exc
    return TrainedPolicy(env, actor, sig["nvec"], explore=explore)


LOADER = engine_loader("torchrl", load, "a fleet-marl train --engine torchrl run folder or its checkpoint/ folder")

__all__ = ["ENGINE", "LOADER", "SIDECAR", "checkpoint_folder", "load"]

"""fleet_marl on TorchRL (the ``[torchrl]`` extra; ``docs/training.md``, "TorchRL").

=====================================  ==========================================================
``FleetTorchEnv``                      the vector env as a batched TorchRL ``EnvBase``
                                       (``env.py``): ``batch_size=[B]``, one agent group
``MaskedMultiCategorical``             the masked action distribution (``distribution.py``)
``build_networks``, ``TrainedPolicy``  the actor and critic of each sharing scheme
                                       (``networks.py``), and a trained actor as a grader
                                       policy (``policy.py``)
``TorchRLTrainConfig``                 a run's config (``config.py``)
``train``, ``Learner``                 IPPO/MAPPO on TorchRL's collector, GAE and
                                       ``ClipPPOLoss``: ``fleet-marl train --engine torchrl``
                                       (``train.py``)
``TurnCollector``, ``turns_to_rounds`` the sequential protocol: the actor called once per turn,
                                       the batch laid out per tenant and round (``sequential.py``)
=====================================  ==========================================================

Modules without lazy names: ``command`` (the torchrl engine of ``fleet-marl train``) and
``loader`` (the grader's loader of torchrl runs, declared as an entry point in
``pyproject.toml``). Names are imported lazily: ``import fleet_marl.torchrl`` imports no torch.
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    "FleetTorchEnv": "env",
    "GROUP": "env",
    "MaskedMultiCategorical": "distribution",
    "build_networks": "networks",
    "TrainedPolicy": "policy",
    "SHARING": "networks",
    "TorchRLTrainConfig": "config",
    "train": "train",
    "Learner": "train",
    "TurnCollector": "sequential",
    "AsyncTurnCollector": "sequential",
    "turns_to_rounds": "sequential",
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)


__all__ = [
    "GROUP",
    "SHARING",
    "AsyncTurnCollector",
    "FleetTorchEnv",
    "Learner",
    "MaskedMultiCategorical",
    "TorchRLTrainConfig",
    "TrainedPolicy",
    "TurnCollector",
    "build_networks",
    "train",
    "turns_to_rounds",
]  # the lazy names of _NAMES

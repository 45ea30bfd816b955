"""fleet_marl with RLlib (ray 2.60, new API stack, PPO).

=====================================  ==========================================================
``FleetVectorMultiAgentEnv``           B clusters of the vector env as one RLlib
                                       ``VectorMultiAgentEnv`` (``vector.py``)
``FleetEnvRunner``                     RLlib's env runner over it, sampling as arrays
                                       (``runner.py``; what ``fleet-marl train`` samples with)
``FleetRLlibEnv``                      the env as an RLlib ``MultiAgentEnv`` (``env.py``);
                                       turn-based with ``protocol="sequential"``
``register()``                         registers ``"fleet_marl"`` (dict obs) and
                                       ``"fleet_marl_flat"`` with Ray Tune
``MaskedPPOTorchRLModule``             PPO module with action masking (``modules.py``)
``CentralCriticPPOTorchRLModule``      masked actor + critic on ``env.state()`` (MAPPO)
``FusedMultiCategorical``              their action distribution, in one table
                                       (``distribution.py``)
``FleetPPOTorchLearner``               PPO's learner, the same loss in fewer operations
                                       (``learner.py``)
``FleetCallbacks``                     welfare, fairness and event metrics (``callbacks.py``)
``TrainConfig``, ``build``             run configs and the ``PPOConfig`` builder (``config.py``)
``ModulePolicy``                       trained modules as a grader policy (``policy.py``)
``grade``                              the grader as RLlib's ``custom_evaluation_function``
                                       (``evaluation.py``)
``train``, ``init_ray``                the loop behind ``fleet-marl train`` (``train.py``)
=====================================  ==========================================================

Modules without lazy names: ``command`` (the ``train`` command of the CLI's table) and
``loader`` (the grader's loader of ``fleet-marl train`` checkpoints, declared as an entry
point in ``pyproject.toml``).

This is the adapter only: the credit-assignment study that trains with it lives in
:mod:`fleet_marl.studies`. Names are imported lazily: ``import fleet_marl.rllib`` does not
import Ray. See ``docs/training.md``.
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    "FleetRLlibEnv": "env",
    "FleetVectorMultiAgentEnv": "vector",
    "FleetEnvRunner": "runner",
    "FusedMultiCategorical": "distribution",
    "FleetPPOTorchLearner": "learner",
    "register": "env",
    "ENV_NAMES": "env",
    "MaskedPPOTorchRLModule": "modules",
    "CentralCriticPPOTorchRLModule": "modules",
    "FleetCallbacks": "callbacks",
    "TrainConfig": "config",
    "TrainConfigError": "config",
    "build": "config",
    "ModulePolicy": "policy",
    "SHARING": "sharing",
    "grade": "evaluation",
    "train": "train",
    "init_ray": "train",
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)


__all__ = [
    "ENV_NAMES",
    "SHARING",
    "CentralCriticPPOTorchRLModule",
    "FleetCallbacks",
    "FleetEnvRunner",
    "FleetPPOTorchLearner",
    "FleetRLlibEnv",
    "FleetVectorMultiAgentEnv",
    "FusedMultiCategorical",
    "MaskedPPOTorchRLModule",
    "ModulePolicy",
    "TrainConfig",
    "TrainConfigError",
    "build",
    "grade",
    "init_ray",
    "register",
    "train",
]  # the lazy names of _NAMES

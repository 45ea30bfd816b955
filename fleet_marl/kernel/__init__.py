"""The batched kernel: one scheduling round for many rows at once. No PettingZoo or Ray.

>>> from fleet_marl.config import FleetConfig
>>> from fleet_marl.kernel import KernelStatic, RoundState, Draws, Actions, evaluate
>>> st = KernelStatic.from_config(FleetConfig())
>>> acts = Actions(gpus=[[8, 8]], bid=[[1.0, 1.0]], precision=[[[1] * 5, [1] * 5]], batch=[[1, 64]])
>>> out = evaluate(st, acts, RoundState.initial(st), Draws.expected(st))
>>> out.alloc.tolist()
[[8, 8]]

Modules, each importing only the ones before it: ``jit`` (numba's options, numpy's pairwise
sum, small sorts), ``mechanisms`` (the arbiter's mechanisms as data, from
``fleet_marl.config.mechanisms``, and their codes), ``activations`` (the bytes per token a
training tenant's blocks keep for the backward pass, by checkpointing mode and loss), ``constants``
(the cost model's constants, each with its source), ``flops`` (a model's work per token by layer
group), ``cost`` (stage 1: bytes, FLOPs, the tables by layer group), ``layout`` (the packed arrays and their columns); the round's stages, each
compiled: ``clearing``, ``placement``, ``tenant_cost`` (stage 1 and the roofline), ``safety``
(numerics and memory), ``power_heat``, ``outcome`` (progress, service, money, utility); then
``engine`` (the round: the stages in order, per batch row), ``types`` (the array containers),
``static`` (:class:`KernelStatic`), ``checks`` (the input checks), ``packing`` (inputs and
outputs as arrays) and ``api`` (``evaluate``, ``evaluate_welfare``,
``evaluate_counterfactuals``, ``stage1``). The round is written once, in those stages;
``tests/oracle.py`` is an independent numpy version the tests compare it with.
"""

from fleet_marl.kernel.api import evaluate, evaluate_counterfactuals, evaluate_welfare, stage1
from fleet_marl.kernel.checks import KernelInputError, check_actions, check_draws, check_state
from fleet_marl.kernel.jit import numpy_sum
from fleet_marl.kernel.mechanisms import Mechanism, register_mechanism
from fleet_marl.kernel.static import KernelStatic
from fleet_marl.kernel.types import Actions, Draws, Outcome, RoundState, Stage1

__all__ = [
    "Actions",
    "Draws",
    "KernelInputError",
    "KernelStatic",
    "Mechanism",
    "Outcome",
    "RoundState",
    "Stage1",
    "check_actions",
    "check_draws",
    "check_state",
    "evaluate",
    "evaluate_counterfactuals",
    "evaluate_welfare",
    "numpy_sum",
    "register_mechanism",
    "stage1",
]

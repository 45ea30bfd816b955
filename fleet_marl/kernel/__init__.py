"""The batched kernel: one scheduling round for many rows at once. No PettingZoo or Ray.

>>> from fleet_marl.config import FleetConfig
>>> from fleet_marl.kernel import KernelStatic, RoundState, Draws, Actions, evaluate
>>> st = KernelStatic.from_config(FleetConfig())
>>> acts = Actions(gpus=[[8, 8]], bid=[[1.0, 1.0]], precision=[[[1] * 5, [1] * 5]], batch=[[1, 64]])
>>> out = evaluate(st, acts, RoundState.initial(st), Draws.expected(st))
>>> out.alloc.tolist()
[[8, 8]]

Modules, each importing only the ones before it: ``mechanisms`` (the arbiter's registry and
compiled clearing rules), ``cost`` (stage 1: bytes, FLOPs, the tables by layer group), ``safety`` (input
checks), ``engine`` (the compiled round: arbiter, placement, safety, cost, outcome),
``types`` (the array containers), ``static`` (:class:`KernelStatic`) and ``outcome``
(``evaluate``, ``evaluate_counterfactuals``, the checks). The round is written once, in
``engine``; ``tests/oracle.py`` is an independent numpy version the tests compare it with.
"""

from fleet_marl.kernel.engine import numpy_sum
from fleet_marl.kernel.outcome import (
    check_actions,
    check_draws,
    check_state,
    evaluate,
    evaluate_counterfactuals,
    evaluate_welfare,
    stage1,
)
from fleet_marl.kernel.safety import KernelInputError
from fleet_marl.kernel.static import KernelStatic
from fleet_marl.kernel.types import Actions, Draws, Outcome, RoundState, Stage1

__all__ = [
    "Actions",
    "Draws",
    "KernelInputError",
    "KernelStatic",
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
    "stage1",
]

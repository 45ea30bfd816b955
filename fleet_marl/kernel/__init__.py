"""The batched kernel: pure numpy, no PettingZoo or Ray.

>>> from fleet_marl.config import FleetConfig
>>> from fleet_marl.kernel import KernelStatic, RoundState, Draws, Actions, evaluate
>>> st = KernelStatic.from_config(FleetConfig())
>>> acts = Actions(gpus=[[8, 8]], bid=[[1.0, 1.0]], precision=[[[1] * 5, [1] * 5]], batch=[[1, 64]])
>>> out = evaluate(st, acts, RoundState.initial(st), Draws.expected(st))
>>> out.alloc.tolist()
[[8, 8]]

Modules: ``cost`` (bytes, FLOPs, roofline), ``arbiter`` (mechanisms, placement, prices),
``safety`` (numerics, power cap, heat), ``outcome`` (one round, counterfactual rows),
``backend`` (numpy or numba) and ``fast`` (the numba coupled stage, imported only when used).
"""

from fleet_marl.kernel.backend import BACKENDS, BackendWarning, numba_available, resolve_backend
from fleet_marl.kernel.outcome import (
    check_actions,
    check_draws,
    check_state,
    evaluate,
    evaluate_counterfactuals,
)
from fleet_marl.kernel.safety import KernelInputError
from fleet_marl.kernel.types import Actions, Draws, KernelStatic, Outcome, RoundState

__all__ = [
    "BACKENDS",
    "Actions",
    "BackendWarning",
    "Draws",
    "KernelInputError",
    "KernelStatic",
    "Outcome",
    "RoundState",
    "check_actions",
    "check_draws",
    "check_state",
    "evaluate",
    "evaluate_counterfactuals",
    "numba_available",
    "resolve_backend",
]

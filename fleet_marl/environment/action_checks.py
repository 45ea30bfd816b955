"""The checks of a step's actions: :class:`ActionError` (a bad action, naming the agent and the
field), :func:`check_indices` (the (B, T, 8) actions of live tenants, compiled), :func:`parse_action`
(one action's dtype, shape and range, which needs no episode state: the env and the remote client
share it), :func:`check_agent` and :func:`departed` (the agents an action names).
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

from fleet_marl.environment.fields import ACTION_FIELDS, N_ACT, PREC
from fleet_marl.errors import ClientError, short_repr


class ActionError(ClientError):
    """A bad action. ``agent`` and ``field`` name what was wrong; the step changed nothing."""

    def __init__(self, agent: Any, field: str, value: Any, expected: str):
        self.agent, self.field, self.value, self.expected = agent, field, value, expected
        name = str(agent) if len(str(agent)) <= 80 else short_repr(agent, 80)
        super().__init__(f"{name}: {field} = {short_repr(value)}: expected {expected}")


#: The outcomes of :func:`check_indices`.
OK, NOT_INTEGER, OUT_OF_RANGE, NOT_ALLOWED = range(4)
_G = PREC.stop - PREC.start
assert PREC.start == 2


@nb.njit(cache=True, nogil=True)
def check_indices(a, live, nvec, default_index, prec_legal, min_unit, budget, stop_at_illegal, idx, illegal):
    """Check the (B, T, 8) actions of live tenants in three passes, as the errors are ranked
    (not an integer, out of range, not allowed by the mask), each in C order; fill ``idx``
    (the defaults for tenants not live) and ``illegal`` (B, T). Returns ``(code, b, t, k)`` of
    the first error, or ``(OK, -1, -1, -1)``."""
    B, T, A = a.shape
    G = _G  # the precision dims are 2 .. 2 + G
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    x = a[b, t, k]
                    if not (x == np.floor(x) and np.isfinite(x * 1.0)):
                        return NOT_INTEGER, b, t, k
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    if a[b, t, k] < 0 or a[b, t, k] >= nvec[t, k]:
                        return OUT_OF_RANGE, b, t, k
    first = -1
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    idx[b, t, k] = int(a[b, t, k])
            else:
                for k in range(A):
                    idx[b, t, k] = default_index[t, k]
            bad_gpus = live[b, t] and idx[b, t, 0] * min_unit[t] > budget[b, t]
            bad_g = -1
            if live[b, t]:
                for g in range(G):
                    if not prec_legal[t, idx[b, t, 2 + g]]:
                        bad_g = g
                        break
            illegal[b, t] = bad_gpus or bad_g >= 0
            if illegal[b, t] and first < 0:
                first = b * T + t
                k_first = 0 if bad_gpus else 2 + bad_g
    if first >= 0 and stop_at_illegal:
        return NOT_ALLOWED, first // T, first % T, k_first
    return OK, -1, -1, -1


def parse_action(a: str, act, nvec: np.ndarray) -> np.ndarray:
    """One agent's action as 8 int64 indices, or an :class:`ActionError` naming the bad
    field: an integer (or integral float) array of shape (8,) within ``nvec``."""
    try:
        arr = np.asarray(act) if act is not None else None
    except (ValueError, TypeError, OverflowError):  # ragged nested lists, an int too large for any dtype
        raise ActionError(a, "action", act, f"an integer array of shape ({N_ACT},) from action_space('{a}')") from None
    if arr is None or arr.dtype in (object, bool) or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ActionError(a, "action", act, f"an integer array of shape ({N_ACT},) from action_space('{a}')")
    if arr.shape != (N_ACT,):
        raise ActionError(a, "action.shape", arr.shape, f"({N_ACT},): {', '.join(ACTION_FIELDS)}")
    if np.issubdtype(arr.dtype, np.floating):
        for k in range(N_ACT):
            if not np.isfinite(arr[k]) or arr[k] != np.round(arr[k]):
                raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", float(arr[k]), "an integer")
    bad = (arr < 0) | (arr >= nvec)
    if bad.any():
        k = int(np.argmax(bad))
        raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", arr[k].item(), f"an integer in [0, {nvec[k] - 1}]")
    return arr.astype(np.int64)


def check_agent(a, agent_index: dict, agents: list[str], live: set) -> int:
    """The index of agent ``a``, or an :class:`ActionError` if it is unknown or finished (the
    check of one action; ``step()`` drops the actions of agents that finished before it
    checks the rest, see :func:`departed`)."""
    if a not in agent_index:
        raise ActionError(a, "agent", a, f"a live agent, one of {', '.join(agents)}")
    if a not in live:
        raise ActionError(
            a, "agent", a, f"a live agent; {a} has finished (PettingZoo: finished agents take no action). Live: {', '.join(agents)}"
        )
    return agent_index[a]


def departed(actions: dict, agent_index: dict, live: set) -> dict:
    """``actions`` without those of agents that already left the episode (known agents not
    in ``live``): PettingZoo clients such as TorchRL's ``PettingZooWrapper(use_mask=True)``
    send an action for every agent, every step. Unknown names stay, for the check to name."""
    if len(actions) == len(live) and live.issuperset(actions):
        return actions
    return {a: v for a, v in actions.items() if a in live or a not in agent_index}


__all__ = ["NOT_ALLOWED", "NOT_INTEGER", "OK", "OUT_OF_RANGE", "ActionError", "check_agent", "check_indices", "departed", "parse_action"]

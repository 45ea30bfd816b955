"""The infos of a step of the ParallelEnv: the keys every agent's info carries, in order (each
computed scheme's reward, ``REWARD_PREFIX + scheme``, then ``INFO_KEYS``; no ``action_mask`` with
``obs_mode="dict"``, whose observation holds the mask), their values after ``reset()``
(``RESET_VALUES``; :func:`info_layout` gives both for an env), :class:`AgentInfo` (one agent's
info, whose missing ``reward_<scheme>`` says how to ask for it) and :func:`scheme_rewards`.
"""

from __future__ import annotations

from fleet_marl.config import REWARD_SCHEMES

#: The flags of the kernel's outcome every step's infos carry, and every info key after the
#: rewards (``REWARD_PREFIX + scheme`` for each computed scheme come first), in order.
FLAG_KEYS = ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted")
#: The figures of the kernel's outcome every step's infos carry after the flags: a server's TTFT
#: median and 99th percentile over the round's served requests (0 for a trainer; with
#: ``coupling.queueing`` on they include the queue's wait, docs/model.md section 12.2).
OUTCOME_KEYS = ("ttft_p50_s", "ttft_p99_s")
#: What sharing the cluster cost each tenant this round, after ``OUTCOME_KEYS``, with any
#: coupling switch on or off (``observer.TenantCoupling``): the step-time factor from the shared
#: links' contention (1 unslowed), the offered load over capacity of the most loaded shared link it
#: crossed (0: none), the seconds lost to a restart, its tightest rack's power headroom ((cap -
#: power) / cap), a server's TTFT p99 over its TTFT SLO (0 for a trainer), the seconds of its
#: restart still ahead at the round's end and the tokens a preemption lost (both 0 without
#: ``coupling.persistent_placement``, docs/model.md section 12.3).
COUPLING_KEYS = ("slowdown", "link_load", "restart_s", "power_headroom", "ttft_p99_over_slo", "restart_pending_s", "lost_tokens")
INFO_KEYS = (
    "utility",
    "welfare",
    "requested",
    "alloc",
    "throttled",
    "starved",
    "starvation_streak",
    "fair_share",
    "degenerate",
    "lowest_precision",
    "hoarding",
    "illegal",
    "illegal_fields",
    "action_mask",
    *FLAG_KEYS,
    *OUTCOME_KEYS,
    *COUPLING_KEYS,
)
#: Each computed scheme's reward is ``infos[agent][REWARD_PREFIX + scheme]``.
REWARD_PREFIX = "reward_"
#: The info values after ``reset()`` (no round played yet), in ``INFO_KEYS`` order;
#: ``illegal_fields`` and ``action_mask`` are filled per agent.
_BEFORE_FLAGS = (0.0, 0.0, 0, 0, False, False, 0, 0.0, False, False, False, False, None, None)
RESET_VALUES = _BEFORE_FLAGS + (False,) * len(FLAG_KEYS) + (0.0,) * len(OUTCOME_KEYS) + (0.0,) * len(COUPLING_KEYS)


def info_layout(schemes: tuple[str, ...], with_mask: bool = True) -> tuple[tuple[str, ...], dict]:
    """(the info keys in order, their values after ``reset()``) of an env computing ``schemes``:
    each scheme's reward, then ``INFO_KEYS``, ``action_mask`` left out unless ``with_mask``
    (``obs_mode="flat"``; with ``"dict"`` the mask is in the observation only, PettingZoo's
    convention, which TorchRL's ``PettingZooWrapper`` needs: it takes the mask out of the
    observation and would find a second one in the infos, with no spec). ``illegal_fields``
    and ``action_mask`` are None here: the env fills them per agent."""
    pairs = [(REWARD_PREFIX + k, 0.0) for k in schemes] + list(zip(INFO_KEYS, RESET_VALUES, strict=True))
    pairs = [(k, v) for k, v in pairs if with_mask or k != "action_mask"]
    return tuple(k for k, _ in pairs), dict(pairs)


class AgentInfo(dict):
    """One agent's infos: a plain ``dict`` whose missing ``reward_<scheme>`` key says which
    schemes the env computes and how to ask for the others (``compute_all``)."""

    def __missing__(self, key):
        if isinstance(key, str) and key.startswith(REWARD_PREFIX) and key[len(REWARD_PREFIX) :] in REWARD_SCHEMES:
            raise KeyError(
                f"{key!r}: this env computes {', '.join(scheme_rewards(self)) or 'no scheme'}; build it with compute_all=True to "
                f"report every scheme, or with reward_scheme={key[len(REWARD_PREFIX) :]!r}"
            )
        raise KeyError(key)


def scheme_rewards(info: dict) -> dict[str, float]:
    """``{scheme: reward}`` of one agent's info: its ``reward_<scheme>`` entries, in order."""
    n = len(REWARD_PREFIX)
    return {k[n:]: v for k, v in info.items() if k.startswith(REWARD_PREFIX)}


__all__ = [
    "COUPLING_KEYS",
    "FLAG_KEYS",
    "INFO_KEYS",
    "OUTCOME_KEYS",
    "RESET_VALUES",
    "REWARD_PREFIX",
    "AgentInfo",
    "info_layout",
    "scheme_rewards",
]

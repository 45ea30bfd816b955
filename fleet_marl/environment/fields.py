"""The action and observation fields of ``fleet_v0``: ``ACTION_FIELDS`` names the 8 dimensions of
each tenant's ``MultiDiscrete`` action (``BATCH_LEVELS`` the batch sizes ``batch_level`` selects,
``PREC`` the precision dimensions), ``OBS_FIELDS`` the observation features (their normalizations
are in :mod:`fleet_marl.environment.observations`), ``CLAIM_FIELDS`` the sequential protocol's,
``COUPLING_FIELDS`` those of a scenario with a coupling switch on (:func:`coupled`;
:func:`obs_fields` gives an env's columns in order); :func:`decode_actions` turns action indices
into the kernel's ``Actions``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel import Actions

#: Batch sizes selectable by ``batch_level``. 256 is vLLM's default ``max_num_seqs``.
BATCH_LEVELS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], dtype=np.int64)
ACTION_FIELDS = ("gpus", "bid_level") + tuple(f"precision.{g}" for g in catalog.GROUPS) + ("batch_level",)
N_ACT = len(ACTION_FIELDS)
#: The precision dimensions of an action (one per layer group).
PREC = slice(2, 2 + catalog.N_GROUPS)
OBS_MODES = ("flat", "dict")
ILLEGAL_ACTION = ("veto", "raise")
#: The layouts of the action mask (the env option ``mask_layout``): ``"dims"``, a tuple of 8
#: int8 arrays, one per action dimension (gymnasium's ``MultiDiscrete.sample(mask=...)``);
#: ``"flat"``, one int8 vector of length ``sum(nvec)``, the 8 concatenated in action order.
MASK_LAYOUTS = ("dims", "flat")

#: Observation features, in order, with their meaning (all in [0, 1]).
OBS_FIELDS: tuple[tuple[str, str], ...] = (
    ("is_serve", "1 for a serving tenant, 0 for a trainer"),
    ("alive", "1 while the tenant is in the episode"),
    ("round", "rounds played / max_cycles"),
    ("budget_left", "budget left / episode budget"),
    ("job_left", "train: tokens left in the current job / job_tokens (0 between jobs); serve: 0"),
    ("jobs_waiting", "train: jobs queued behind the current one, n / (n + 1); serve: 0"),
    ("queue", "serve: requests waiting, q / (q + m) with m the mean arrivals per round; train: 0"),
    ("arrivals", "serve: requests that arrived last round, a / (a + m); train: 0"),
    ("held", "GPUs held last round / max_gpus"),
    ("granted", "GPUs granted / GPUs requested last round (1 if nothing was requested)"),
    ("price", "price paid per GPU-hour last round / (list price x highest bid level)"),
    ("value", "work value last round, v / (v + 1) (docs/model.md sec. 8)"),
    ("utility", "utility last round, 0.5 + 0.5 tanh(u)"),
    ("slo", "serve: share of last round's arrivals served within the SLO; train: 0"),
    ("oom", "1 if last round's config did not fit in memory"),
    ("vetoed", "1 if last round's config was refused by the safety check"),
    ("unsafe", "1 if last round's precision map was numerically unsafe"),
    ("throttle", "1 - clock factor last round (0 = full speed)"),
    ("restarted", "1 if last round's allocation changed and the job restarted"),
    ("memory", "bytes per GPU / usable bytes per GPU last round, clipped to 1"),
    ("starvation", "starvation streak / starvation_rounds, clipped to 1"),
    ("fair_share", "max-min fair share of its pool / max_gpus"),
    ("pool_free", "GPUs of its pool not granted last round / pool capacity"),
    ("pool_demand", "GPUs requested from its pool last round / capacity, x / (x + 1)"),
    ("pool_price", "mean price multiplier paid in its pool last round / highest bid level"),
    ("temperature", "hottest node of its pool, (T - ambient) / (critical - ambient), clipped"),
    ("rack_power", "highest rack power last round / rack cap, clipped to 1"),
    ("alive_share", "live tenants / all tenants"),
    ("fp8", "1 if its GPU type supports FP8"),
    ("gpu_memory", "memory of its GPU type / 141 GB (H200)"),
    ("model_size", "log10(parameters) / 12"),
    ("priority", "p / (p + 1)"),
    ("max_gpus", "max_gpus / pool capacity"),
    ("burn_rate", "cost of max_gpus for a round at list price / (budget / max_cycles), x / (x + 1)"),
)
N_OBS = len(OBS_FIELDS)
#: Index of each observation feature by name.
OBS_INDEX = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}

#: The features every observation ends with when a coupling switch of the scenario is on
#: (:func:`coupled`: any of ``config.coupling``'s switches; docs/model.md section 12): what the
#: tenant paid for sharing the cluster last round, after ``OBS_FIELDS`` (and after
#: ``CLAIM_FIELDS`` under the sequential protocol, so every other column keeps its index). All
#: in [0, 1]; before the first round 0, but ``power_headroom`` 1. With every switch off the
#: observation has none of them (the spaces of the uncoupled tasks are unchanged).
COUPLING_FIELDS: tuple[tuple[str, str], ...] = (
    ("slowdown", "1 - 1 / (step-time factor from the contention on the shared links it crossed last round): 0 unslowed"),
    ("link_load", "offered load / capacity of the most loaded shared link it crossed last round, x / (x + 1) (0: none)"),
    ("power_headroom", "(rack cap - rack power last round) / rack cap of the tightest rack it ran on (not running: of its pool's racks)"),
    (
        "restart_lost",
        "seconds of last round lost to a restart, plus the restart's seconds still ahead and (persistent placement) the training "
        "a preemption lost, / round_seconds, at most 1 (1: the restart took the whole round)",
    ),
    ("ttft_tail", "serve: TTFT p99 last round / its TTFT SLO, x / (x + 1) (0.5 at the SLO); train: 0"),
)
N_COUPLING = len(COUPLING_FIELDS)
#: Index of each coupling feature by name, counted from the first coupling column (the
#: observation's column ``n_features - N_COUPLING + i``; :func:`obs_fields` names every column).
COUPLING_INDEX = {name: i for i, (name, _) in enumerate(COUPLING_FIELDS)}

#: The features the sequential protocol (``fleet_marl.env(protocol="sequential")``) appends
#: to every observation, after ``OBS_FIELDS``: the claims made this round by the tenants
#: before it in the turn order, on its own pool (the GPU type it runs on, the only pool it can
#: be granted GPUs from), and its place in the order. All in [0, 1].
CLAIM_FIELDS: tuple[tuple[str, str], ...] = (
    ("claimed", "GPUs requested from its pool this round by the tenants before it / pool capacity, x / (x + 1)"),
    ("unclaimed", "GPUs of its pool the tenants before it left unrequested this round / pool capacity (0 once they ask for all)"),
    ("claimed_bid", "GPU-weighted mean bid multiplier of those requests / highest bid level (0 when none)"),
    ("claimants", "tenants before it this round that asked its pool for GPUs / tenants of its pool"),
    ("after_in_pool", "live tenants of its pool whose turn comes after its own this round / tenants of its pool"),
    ("position", "its place in this round's order / (tenants in the order - 1): 0 first, 1 last (0 when alone)"),
)
N_CLAIM = len(CLAIM_FIELDS)
#: Index of each feature of a sequential observation by name: ``OBS_FIELDS`` then ``CLAIM_FIELDS``.
SEQUENTIAL_OBS_INDEX = {name: i for i, (name, _) in enumerate(OBS_FIELDS + CLAIM_FIELDS)}


def coupled(config) -> bool:
    """Whether the scenario ``config`` (a ``FleetConfig``) turns on any coupling switch of
    ``config.coupling``: then every observation ends with ``COUPLING_FIELDS``."""
    c = config.coupling
    return any(getattr(c, f.name) is True for f in dataclasses.fields(c))


def obs_fields(coupled_: bool, sequential: bool = False) -> tuple[tuple[str, str], ...]:
    """The columns of an observation, in order, with their meanings: ``OBS_FIELDS``, then
    ``CLAIM_FIELDS`` under the sequential protocol, then ``COUPLING_FIELDS`` when a coupling
    switch is on (``coupled_``)."""
    return OBS_FIELDS + (CLAIM_FIELDS if sequential else ()) + (COUPLING_FIELDS if coupled_ else ())


def has_claims(n_features: int) -> bool:
    """Whether an observation of ``n_features`` columns holds the sequential protocol's
    ``CLAIM_FIELDS`` (at ``SEQUENTIAL_OBS_INDEX``): 40 or 45 columns, not 34 or 39."""
    return n_features - N_OBS in (N_CLAIM, N_CLAIM + N_COUPLING)


# the four layouts' lengths differ, so an observation's length says which it is (has_claims)
assert N_COUPLING not in (0, N_CLAIM)


def decode_actions(idx: np.ndarray, bid_levels: np.ndarray) -> Actions:
    """The kernel's :class:`~fleet_marl.kernel.Actions` of (..., T, 8) action indices."""
    return Actions(
        gpus=idx[..., 0].copy(),
        bid=bid_levels[idx[..., 1]],
        precision=idx[..., PREC].copy(),
        batch=BATCH_LEVELS[idx[..., -1]],
    )


__all__ = [
    "ACTION_FIELDS",
    "BATCH_LEVELS",
    "CLAIM_FIELDS",
    "COUPLING_FIELDS",
    "COUPLING_INDEX",
    "ILLEGAL_ACTION",
    "MASK_LAYOUTS",
    "N_ACT",
    "N_CLAIM",
    "N_COUPLING",
    "N_OBS",
    "OBS_FIELDS",
    "OBS_INDEX",
    "OBS_MODES",
    "PREC",
    "SEQUENTIAL_OBS_INDEX",
    "coupled",
    "decode_actions",
    "has_claims",
    "obs_fields",
]

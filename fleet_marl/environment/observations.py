"""The ``state()`` vector of ``fleet_v0`` and its inverse; the observation API's one import place.

Forward: :class:`Observer` (``observer.py``) turns the state of B clusters into the (B, T, ``N_OBS``) float32
matrices of observation rows (``OBS_FIELDS``, all in [0, 1]); :func:`state_vector` appends each node's
temperature and each rack's power. The normalizations (``normalize.py``), one per feature:

* ratios to a scale -- ``held = GPUs / max_gpus``, ``budget_left = budget / episode budget``,
  ``job_left = tokens / job_tokens``, ``temperature = (T - ambient) / (critical - ambient)``;
* :func:`squash` ``x / (x + m)`` for unbounded counts -- ``jobs_waiting`` (m = 1), ``queue``
  and ``arrivals`` (m = the tenant's mean arrivals per round, at least 1), ``value``;
* everything is clipped to [0, 1] and stored as float32.

Inverse: :func:`observed_round` rebuilds, from a ``state()`` vector alone, what it encodes
of the round ahead: the live tenants, the kernel :class:`~fleet_marl.kernel.RoundState`
(GPUs held, node temperatures, serving queues, budgets, tokens left in each trainer's job)
and last round's serving arrivals. It is exact up to float32 rounding and clipping (a node
above the critical temperature reads as critical; counts are rounded where they are counts).
``FleetParallelEnv.observed_round()`` calls it; so does the remote env, which has only the
server's state vector. The planner (``fleet_marl.policies.planner``) plans from it.

The sequential protocol's claim features are ``claims.py``'s (:func:`claim_features`). This
module re-exports the observer's, the claims' and the normalizations' public names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_marl.environment.claims import claim_features
from fleet_marl.environment.fields import N_OBS, OBS_INDEX
from fleet_marl.environment.normalize import mean_arrivals, squash, unsquash
from fleet_marl.environment.observer import Ahead, LastRound, Observer, ObsScene
from fleet_marl.kernel import RoundState

_O = OBS_INDEX


def state_vector(st, obs_matrix: np.ndarray, temp_c: np.ndarray, rack_power_w: np.ndarray | None) -> np.ndarray:
    """The ``state()`` vector: the observation rows (their ``OBS_FIELDS``), then each node's
    temperature ``(T - ambient) / (critical - ambient)`` and each rack's power / cap (None:
    before the first round, 0), all clipped to [0, 1], float32; rows with ``COUPLING_FIELDS``
    (a coupling switch on) put those columns last, every tenant's after the racks, so the
    vector starts the same either way. With leading (B,) axes on every input (``obs_matrix``
    (B, T, F), ``temp_c`` (B, K), ``rack_power_w`` (B, R)) it returns (B, S)."""
    lead = obs_matrix.shape[:-2]
    temp = (temp_c - st.ambient_c) / (st.critical_temp_c - st.ambient_c)
    rack = rack_power_w / st.rack_power_cap_w if rack_power_w is not None else np.zeros(lead + (st.n_racks,))
    parts = [obs_matrix[..., :N_OBS].reshape(lead + (-1,)), np.clip(temp, 0, 1), np.clip(rack, 0, 1)]
    if obs_matrix.shape[-1] > N_OBS:
        parts.append(obs_matrix[..., N_OBS:].reshape(lead + (-1,)))
    return np.concatenate(parts, axis=-1).astype(np.float32)


@dataclass(frozen=True)
class ObservedRound:
    """What a ``state()`` vector says of the round ahead (:func:`observed_round`).

    ``live`` (T,) bool; ``state`` the kernel RoundState; ``arrivals`` (T,) last round's
    serving arrivals (0 for trainers and before the first round); ``jobs_waiting`` (T,) each
    trainer's jobs queued behind the current one; ``rows`` (T, N_OBS) the observation rows.
    """

    live: np.ndarray
    state: RoundState
    arrivals: np.ndarray
    jobs_waiting: np.ndarray
    rows: np.ndarray


def observed_round(st, s: np.ndarray, include_queued_jobs: bool = False) -> ObservedRound:
    """The inverse of :func:`state_vector` for the scenario ``st`` (a KernelStatic).

    ``state.prev_alloc`` is ``held x max_gpus`` rounded; ``temp_c`` the node temperatures;
    ``queue`` the serving queues (0 for trainers); ``budget_left`` the budgets;
    ``remaining_tokens`` the tokens left in each trainer's current job (0 for servers), plus,
    with ``include_queued_jobs``, ``job_tokens`` for each job queued behind it (the trainer's
    whole known work, as the planner counts it)."""
    T = st.T
    rows = s[: T * N_OBS].reshape(T, N_OBS).astype(np.float64)
    temp = s[T * N_OBS : T * N_OBS + st.K].astype(np.float64)
    live = rows[:, _O["alive"]] > 0.5
    mean = mean_arrivals(st)
    waiting = np.rint(unsquash(rows[:, _O["jobs_waiting"]]))
    queued = waiting if include_queued_jobs else 0.0
    state = RoundState(
        prev_alloc=np.rint(rows[:, _O["held"]] * st.max_gpus).astype(np.int64),
        temp_c=st.ambient_c + temp * (st.critical_temp_c - st.ambient_c),
        queue=np.where(st.is_train, 0.0, mean * unsquash(rows[:, _O["queue"]])),
        remaining_tokens=np.where(st.is_train, (rows[:, _O["job_left"]] + queued) * st.job_tokens, 0.0),
        budget_left=rows[:, _O["budget_left"]] * st.budget,
    )
    arrivals = np.where(st.is_train, 0.0, mean * unsquash(rows[:, _O["arrivals"]]))
    return ObservedRound(live=live, state=state, arrivals=arrivals, jobs_waiting=np.where(st.is_train, waiting, 0.0), rows=rows)


__all__ = [
    "Ahead",
    "LastRound",
    "ObsScene",
    "ObservedRound",
    "Observer",
    "claim_features",
    "mean_arrivals",
    "observed_round",
    "squash",
    "state_vector",
    "unsquash",
]

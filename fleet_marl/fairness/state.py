"""The fairness detector's state for B clusters (:class:`FairnessState`) and its record of a
round (:func:`record`): the event counts, the welfare, the completed waits and the Themis ratios
of the jobs that finished (the queues themselves are the env core's)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import numba as nb
import numpy as np

#: numba's options for the detector's compiled loops: cached on disk, no GIL, numpy's division semantics
jit = nb.njit(cache=True, nogil=True, error_model="numpy")


COUNTS = ("oom", "veto", "throttle", "degenerate")


class RoundFairness(NamedTuple):
    """What :func:`detect` found this round, each (B, T)."""

    starved: np.ndarray  # bool: starved now
    lowest_precision: np.ndarray  # bool: the lowest-precision degenerate strategy
    hoarding: np.ndarray  # bool: the hoarding degenerate strategy
    streak: np.ndarray  # int64: consecutive short rounds so far

    @property
    def degenerate(self) -> np.ndarray:
        """(B, T) bool: either degenerate strategy."""
        return self.lowest_precision | self.hoarding


class QueueRound(NamedTuple):
    """What one round of B clusters did in the queues (the env core's queue step): the waits
    it completed, in the order they completed, and the jobs it finished."""

    wait_at: np.ndarray  # (N, 3) int64 [cluster, tenant, rounds waited] of each completed wait
    wait_n: np.ndarray  # (N,) float64 the requests that waited that long (1.0 for a job started)
    finished: np.ndarray  # (M, 3) int64 [cluster, tenant, rounds taken] of each finished job


@dataclass
class FairnessState:
    """The fairness detector's state for B clusters of T tenants over episodes of at most
    ``n`` rounds (arrays written by :func:`detect` and :func:`record`, read through
    :func:`summary`).

    ``waits`` (B, T, n + 1) holds the completed waits by rounds waited (requests served,
    jobs started); ``rho`` (B, T, n) each finished job's Themis ratio, ``rho_n`` how many.
    """

    streak: np.ndarray  # (B, T) int64 consecutive short rounds
    max_streak: np.ndarray  # (B, T) int64
    starved: np.ndarray  # (B, T) bool
    starvation_events: np.ndarray  # (B, T) int64 times a tenant became starved
    alloc_sum: np.ndarray  # (B, T) float64 GPUs granted, summed over rounds with work
    fair_sum: np.ndarray  # (B, T) float64 fair shares, summed over the same rounds
    counts: np.ndarray  # (len(COUNTS), B, T) int64 tenant-rounds per event
    welfare_sum: np.ndarray  # (B,) float64
    waits: np.ndarray  # (B, T, n + 1) float64
    rho: np.ndarray  # (B, T, n) float64
    rho_n: np.ndarray  # (B, T) int64

    @staticmethod
    def zeros(B: int, T: int, n: int) -> FairnessState:
        i, f = np.int64, np.float64
        return FairnessState(
            streak=np.zeros((B, T), i),
            max_streak=np.zeros((B, T), i),
            starved=np.zeros((B, T), bool),
            starvation_events=np.zeros((B, T), i),
            alloc_sum=np.zeros((B, T), f),
            fair_sum=np.zeros((B, T), f),
            counts=np.zeros((len(COUNTS), B, T), i),
            welfare_sum=np.zeros(B, f),
            waits=np.zeros((B, T, n + 1), f),
            rho=np.zeros((B, T, n), f),
            rho_n=np.zeros((B, T), i),
        )

    def take(self, rows) -> FairnessState:
        """A new state of the clusters ``rows`` (indices into B; repeats allowed), copied."""
        return FairnessState(**{f.name: getattr(self, f.name)[(slice(None), rows) if f.name == "counts" else rows] for f in fields(self)})

    def reset(self, clusters: np.ndarray) -> None:
        """Zero the state of the ``clusters`` (indices or a (B,) mask)."""
        for f in fields(self):
            a = getattr(self, f.name)
            if f.name == "counts":
                a[:, clusters] = 0
            else:
                a[clusters] = 0


def record(fs: FairnessState, live, welfare, events, queues: QueueRound, rounds_alone) -> None:
    """Record the round of B clusters after it was played: its welfare (B,); each live tenant's
    ``events``, one (B, T) bool per name of ``COUNTS`` (oom, veto, throttle, degenerate); the
    waits the queues completed and, for each job that finished, its Themis ratio, rounds taken
    over ``rounds_alone`` (T,) (a tenant whose job could not run alone gets none)."""
    for k, flag in enumerate(events):
        fs.counts[k] += live & flag
    fs.welfare_sum += welfare
    _record_queues(queues.wait_at, queues.wait_n, queues.finished, rounds_alone, fs.waits, fs.rho, fs.rho_n)


@jit
def _record_queues(wait_at, wait_n, finished, rounds_alone, waits, rho, rho_n):
    """Add the completed waits to the histograms ``waits``, in order; append each finished
    job's Themis ratio to ``rho``."""
    for k in range(wait_n.shape[0]):
        waits[wait_at[k, 0], wait_at[k, 1], wait_at[k, 2]] += wait_n[k]
    for k in range(finished.shape[0]):
        b, i = finished[k, 0], finished[k, 1]
        alone = rounds_alone[i]
        if 0 < alone < np.inf:
            rho[b, i, rho_n[b, i]] = finished[k, 2] / alone
            rho_n[b, i] += 1


__all__ = ["COUNTS", "FairnessState", "QueueRound", "RoundFairness", "jit", "record"]

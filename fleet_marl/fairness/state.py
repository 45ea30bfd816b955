"""The fairness detector's state for B clusters (:class:`FairnessState`) and the per-round
updates the env core writes it with: the event counts, the FIFO of waiting requests, job waits
and Themis ratios."""

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


@dataclass
class FairnessState:
    """The fairness detector's state for B clusters of T tenants over episodes of at most
    ``n`` rounds (arrays written by the env core, read through :func:`summary`).

    ``queue_born`` / ``queue_left`` hold each serving tenant's FIFO of waiting requests (one
    entry per arrival round, the requests of that round still waiting), ``queue_head`` and
    ``queue_tail`` its bounds; ``waits`` (B, T, n + 1) the completed waits by rounds waited;
    ``rho`` (B, T, n) each finished job's Themis ratio, ``rho_n`` how many.
    """

    streak: np.ndarray  # (B, T) int64 consecutive short rounds
    max_streak: np.ndarray  # (B, T) int64
    starved: np.ndarray  # (B, T) bool
    starvation_events: np.ndarray  # (B, T) int64 times a tenant became starved
    alloc_sum: np.ndarray  # (B, T) float64 GPUs granted, summed over rounds with work
    fair_sum: np.ndarray  # (B, T) float64 fair shares, summed over the same rounds
    counts: np.ndarray  # (len(COUNTS), B, T) int64 tenant-rounds per event
    welfare_sum: np.ndarray  # (B,) float64
    queue_born: np.ndarray  # (B, T, n) int64
    queue_left: np.ndarray  # (B, T, n) float64
    queue_head: np.ndarray  # (B, T) int64
    queue_tail: np.ndarray  # (B, T) int64
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
            queue_born=np.zeros((B, T, n), i),
            queue_left=np.zeros((B, T, n), f),
            queue_head=np.zeros((B, T), i),
            queue_tail=np.zeros((B, T), i),
            waits=np.zeros((B, T, n + 1), f),
            rho=np.zeros((B, T, n), f),
            rho_n=np.zeros((B, T), i),
        )

    def reset(self, clusters: np.ndarray) -> None:
        """Zero the state of the ``clusters`` (indices or a (B,) mask)."""
        for f in fields(self):
            a = getattr(self, f.name)
            if f.name == "counts":
                a[:, clusters] = 0
            else:
                a[clusters] = 0


def record_round(fs: FairnessState, welfare, live, oom, vetoed, throttled, degenerate) -> None:
    """Count the round of B clusters: its welfare (B,), and each live tenant's events (``COUNTS``)."""
    for k, flag in enumerate((oom, vetoed, throttled, degenerate)):
        fs.counts[k] += live & flag
    fs.welfare_sum += welfare


@jit
def serve_round(t, serving, arrivals, served, born, left, head, tail, waits):
    """FIFO accounting of serving requests for B clusters in round ``t`` (per cluster):
    this round's arrivals join the queue, then ``served`` requests leave from the front; each
    records its wait in whole rounds. ``serving`` (B, T) bool; the rest the FairnessState's
    queue arrays."""
    B, T = serving.shape
    for b in range(B):
        for i in range(T):
            if not serving[b, i] or not (arrivals[b, i] > 0 or served[b, i] > 0):
                continue
            if arrivals[b, i] > 0:
                born[b, i, tail[b, i]] = t[b]
                left[b, i, tail[b, i]] = arrivals[b, i]
                tail[b, i] += 1
            rest = served[b, i]
            while rest > 1e-9 and head[b, i] < tail[b, i]:
                h = head[b, i]
                n = left[b, i, h]
                take = min(n, rest)
                waits[b, i, t[b] - born[b, i, h]] += take
                rest -= take
                if take >= n - 1e-9:
                    head[b, i] += 1
                else:
                    left[b, i, h] = n - take


def job_started(fs: FairnessState, b: int, i: int, wait_rounds: int) -> None:
    fs.waits[b, i, wait_rounds] += 1.0


def job_finished(fs: FairnessState, b: int, i: int, rounds_taken: float, rounds_alone: float) -> None:
    if 0 < rounds_alone < np.inf:
        fs.rho[b, i, fs.rho_n[b, i]] = rounds_taken / rounds_alone
        fs.rho_n[b, i] += 1


__all__ = ["COUNTS", "FairnessState", "RoundFairness", "jit", "job_finished", "job_started", "record_round", "serve_round"]

"""Fairness: fair shares, starvation, degenerate strategies and the episode report.

The package re-exports every public name of its modules: :mod:`~fleet_marl.fairness.state`
(the state and its per-round updates), :mod:`~fleet_marl.fairness.shares` (fair shares),
:mod:`~fleet_marl.fairness.detector` (starvation and degenerate strategies) and
:mod:`~fleet_marl.fairness.report` (the summary).

Pure numpy over tenant arrays (agent-ID dicts live only in ``fleet_marl.environment``). The
detector's knobs are :class:`~fleet_marl.config.FairnessSpec` (config key ``fairness:``).

* **Fair share** ``f_i``: the max-min fair (water-filling) split of the tenant's GPU pool among
  the live tenants that have work, each capped at its ``max_gpus`` (Bertsekas and Gallager,
  *Data Networks*, 1992, sec. 6.5.2).
* **Starvation**: a tenant with work that asks for GPUs is *short* in a round when its grant
  is below ``starvation_fraction * min(f_i, request_i)``; after ``starvation_rounds``
  consecutive short rounds it is *starved*, and stays so until a round is not short.
* **Degenerate strategies** (their reward is overridden to ``degenerate_floor``):
  ``lowest_precision`` -- asking for GPUs with every layer group at the tenant's lowest legal
  precision, when that precision has fewer than 16 bits; ``hoarding`` -- holding more than
  ``hoard_share`` of the GPUs of its pool (the part of the cluster it can use) while another
  tenant is starved.
* **State**: :class:`FairnessState` holds the detector's arrays for B clusters (streaks,
  sums, event counts, the histogram of completed waits, Themis ratios); the env core enters
  it twice per round: :func:`detect` before the rewards are shaped (the verdicts), then
  :func:`record` once the round is played (its events, welfare, and the waits and finished
  jobs of the core's queues, :class:`QueueRound`). :func:`fair_shares` are the detector's input.
* **Summary**: :func:`summary` is the one read API -- a frozen :class:`FairnessSummary` of one
  cluster's episode so far; the env's ``env.episode_reports[agent]``
  (:meth:`FairnessSummary.episode_report`), the OpenEnv fairness report and the RLlib
  callbacks are built from it. Its figures: welfare, Jain's index ``(sum x)^2 / (n sum x^2)`` over normalized service
  ``x_i = sum_t alloc_i / sum_t f_i`` (Jain, Chiu and Hawe 1984), the longest starvation
  streak, Themis finish-time fairness ``rho = T_shared / T_independent`` per finished training
  job (Mahajan et al., NSDI 2020), the p99 queue wait and event counts.
"""

from __future__ import annotations

from fleet_marl.fairness.detector import detect, lowest_precision
from fleet_marl.fairness.report import FairnessSummary, jain, summary
from fleet_marl.fairness.shares import fair_shares
from fleet_marl.fairness.state import COUNTS, FairnessState, QueueRound, RoundFairness, record

__all__ = [
    "COUNTS",
    "FairnessState",
    "FairnessSummary",
    "QueueRound",
    "RoundFairness",
    "detect",
    "fair_shares",
    "jain",
    "lowest_precision",
    "record",
    "summary",
]

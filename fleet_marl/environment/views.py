"""The public read-only views of ``FleetParallelEnv`` on its episode (a mixin of the env).

Render, the OpenEnv views, the planner, benchmarks and tests read the episode through these,
never through the env's private state. Arrays are read-only views: copy before writing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from fleet_marl import fairness
from fleet_marl.checks import is_integer
from fleet_marl.environment import core, observations
from fleet_marl.kernel import Draws, RoundState


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.setflags(write=False)
    return v


class EnvViews:
    """``round``, ``last_outcome``, ``last_credit``, ``fairness``, ``episode_reports``,
    ``node_temperatures``, ``round_state``, ``arrival_schedule``, ``round_draws()``, ``observed_round()`` and
    ``core_state()``
    (``FleetParallelEnv`` provides the state)."""

    if TYPE_CHECKING:  # what the env that mixes this in provides
        from fleet_marl.credit import Credit
        from fleet_marl.environment.state import EnvState
        from fleet_marl.kernel import KernelStatic

        kernel_static: KernelStatic
        _s: EnvState
        _core: core.CoreStatic
        _reports: dict[str, dict]
        _last_credit: Credit | None

        def state(self) -> np.ndarray: ...
        def _need_reset(self, what: str) -> None: ...

    def observed_round(self, state_vector: np.ndarray | None = None, include_queued_jobs: bool = False) -> observations.ObservedRound:
        """What ``state_vector`` (default: ``state()``) says of the round ahead: live tenants,
        the kernel RoundState, last round's serving arrivals (the inverse of the observation
        normalization, :func:`fleet_marl.environment.observations.observed_round`)."""
        return observations.observed_round(self.kernel_static, self.state() if state_vector is None else state_vector, include_queued_jobs)

    @property
    def round(self) -> int:
        """Rounds played in this episode."""
        return int(self._s.round[0])

    @property
    def last_outcome(self):
        """The kernel's :class:`~fleet_marl.kernel.Outcome` of the last round (None before the first step)."""
        return self._last_credit.outcome if self._last_credit is not None else None

    @property
    def last_credit(self):
        """The :class:`~fleet_marl.credit.Credit` of the last round: its outcome, welfare and
        every computed scheme's rewards, with the starvation penalty and before the degenerate
        floor (``infos[agent]["reward_<scheme>"]``; None before the first step)."""
        return self._last_credit

    @property
    def fairness(self):
        """The episode's fairness so far: :func:`fleet_marl.fairness.summary` as of this round,
        with the p99 waits (queued requests and jobs counted as waiting until now). The env
        core writes the detector's state; everyone else reads this."""
        self._need_reset("fairness")
        s = self._s
        return fairness.summary(s.fairness, 0, int(s.round[0]), s.pending[0], self.kernel_static.round_seconds, s.waiting[0])

    @property
    def episode_reports(self) -> dict[str, dict]:
        """``{agent: report}`` for the agents that have finished this episode, each report
        made on the step the agent finished (:meth:`fleet_marl.fairness.FairnessSummary.episode_report`:
        welfare, return, rounds, jain, starvation, event counts, p99 waits, rho, ...; see
        docs/environment.md). Empty after ``reset()``; a new dict each call. (Not an info key:
        every info key is a number or a fixed-shape array in every step and after ``reset()``.)"""
        self._need_reset("episode_reports")
        return dict(self._reports)

    @property
    def node_temperatures(self) -> np.ndarray:
        """(K,) each node's GPU temperature now, in °C (read-only)."""
        self._need_reset("node_temperatures")
        return _read_only(self._s.temp_c[0])

    @property
    def round_state(self) -> RoundState:
        """The kernel :class:`~fleet_marl.kernel.RoundState` the next step starts from (GPUs
        held, node temperatures, serving queues, tokens left in each trainer's job, budgets;
        read-only arrays)."""
        self._need_reset("round_state")
        s = self._s.round_state()
        return RoundState(
            **{f.name: _read_only(np.asarray(getattr(s, f.name))[0]) for f in dataclasses.fields(s) if getattr(s, f.name) is not None}
        )

    @property
    def arrival_schedule(self) -> np.ndarray:
        """(max_cycles, T) the episode's arrivals per round, drawn at reset: requests for a
        server, training jobs for a trainer (read-only). The simulator's ground truth, for
        tests and analysis: a policy that reads it sees the future."""
        self._need_reset("arrival_schedule")
        return _read_only(self._s.schedule[0])

    def core_state(self) -> core.EnvState:
        """A copy of the episode's array-core state (:class:`~fleet_marl.environment.core.EnvState`,
        one cluster) as the next step starts from it: every array copied, so that stepping it
        with :func:`fleet_marl.environment.core.step` plays the rounds this env would and changes
        nothing here. For tools that branch an episode (``fleet_marl.studies.credit_horizon``)."""
        self._need_reset("core_state")
        return self._s.take([0])

    def round_draws(self, r: int | None = None) -> Draws:
        """The kernel :class:`~fleet_marl.kernel.Draws` of round ``r`` (default: the round
        ahead, ``round``), exactly as the env will hand them to the kernel if the tenants live
        now are still live then: their serving arrivals, the tie-breaks, a replayed trace's
        request lengths ((T,) arrays). The simulator's ground truth, like ``arrival_schedule``: a
        policy that reads it sees the future (the ``hindsight`` reference does, on purpose)."""
        self._need_reset("round_draws")
        now = self.round
        r = now if r is None else r
        if not is_integer(r) or not now <= r < self._core.max_cycles:
            raise ValueError(f"round_draws: r = {r!r}: expected a round from {now} (the round ahead) to {self._core.max_cycles - 1}")
        _, _, d = core.round_draws(self._core, self._s, np.array([r]), self._s.live)
        lengths = [None if v is None else _read_only(np.asarray(v)[0]) for v in (d.prompt_tokens, d.output_tokens)]
        return Draws(_read_only(d.arrivals[0]), _read_only(d.tiebreak[0]), *lengths)


__all__ = ["EnvViews"]

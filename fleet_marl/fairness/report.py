"""The one read API of the fairness state: :func:`summary`, a frozen :class:`FairnessSummary`
of one cluster's episode so far, and the episode report built from it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet_marl.fairness.state import COUNTS, FairnessState


def jain(x: np.ndarray) -> float:
    """Jain's fairness index of the non-negative values ``x``; 1.0 for no values or all zeros."""
    x = np.asarray(x, np.float64)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * (x * x).sum()))


@dataclass(frozen=True)
class FairnessSummary:
    """One cluster's episode fairness so far (:func:`summary`); arrays are (T,) copies.

    ``welfare`` is the welfare summed over the rounds recorded; ``jain`` Jain's index of the
    ``service`` of the tenants that had a fair share; ``service`` GPU-rounds granted / fair
    share (1.0 where the tenant never had one); ``streak`` and ``starved`` the current
    starvation streak and state; ``max_streak`` the longest streak; ``starvation_events``
    the times a tenant became starved; ``counts`` tenant-rounds per event (``COUNTS``: oom,
    veto, throttle, degenerate); ``rho`` the mean Themis finish-time fairness of each
    tenant's finished jobs (None without one) and ``jobs_done`` their number; ``waits`` the
    completed waits (wait in rounds -> requests or jobs); ``p99_wait_s`` the 99th percentile
    wait in seconds, or None unless ``summary(now=..., round_seconds=...)`` was asked for it.
    """

    welfare: float
    jain: float
    service: np.ndarray
    streak: np.ndarray
    starved: np.ndarray
    max_streak: np.ndarray
    starvation_events: np.ndarray
    counts: dict[str, np.ndarray]
    rho: tuple[float | None, ...]
    jobs_done: np.ndarray
    waits: tuple[dict[int, float], ...]
    p99_wait_s: np.ndarray | None = None

    def episode_report(self, i: int, agent_return: float, utility_sum: float, rounds: int) -> dict:
        """Tenant ``i``'s ``env.episode_reports[agent]`` (docs/environment.md): the summary's
        figures for ``i`` plus its return, utility and rounds played. Needs ``p99_wait_s``."""
        if self.p99_wait_s is None:
            raise ValueError(
                "episode_report: a summary with p99_wait_s (summary(now=..., queued_jobs=..., round_seconds=..., queued_requests=...))"
            )
        return {
            "welfare": float(self.welfare),
            "return": float(agent_return),
            "utility": float(utility_sum),
            "rounds": int(rounds),
            "jain": self.jain,
            "service": float(self.service[i]),
            "max_starvation_streak": int(self.max_streak[i]),
            "starvation_events": int(self.starvation_events[i]),
            "rho": self.rho[i],
            "jobs_done": int(self.jobs_done[i]),
            "p99_wait_s": float(self.p99_wait_s[i]),
            "oom": int(self.counts["oom"][i]),
            "veto": int(self.counts["veto"][i]),
            "throttle": int(self.counts["throttle"][i]),
            "degenerate": int(self.counts["degenerate"][i]),
        }


def p99_wait_s(waits: np.ndarray, now: int, queued_requests: np.ndarray, queued_jobs: np.ndarray, round_seconds: float) -> float:
    """99th percentile wait in seconds, counting the requests still queued at ``now`` and the
    jobs queued (``queued_requests`` and ``queued_jobs``: counts per arrival round) as having
    waited until now (a lower bound on their wait). A job that arrived in round b could start
    in round b + 1."""
    w = waits.copy()
    rs = np.flatnonzero(queued_requests)
    w[now - rs] += queued_requests[rs]  # one arrival round per wait: each entry added once
    rs = np.flatnonzero(queued_jobs)
    np.add.at(w, now - rs - 1, np.floor(queued_jobs[rs]))  # whole jobs, added at once (a job-by-job loop cost O(jobs))
    keys = np.flatnonzero(w)
    if keys.size == 0:
        return 0.0
    cum = np.cumsum(w[keys])
    return float(keys[np.searchsorted(cum, 0.99 * cum[-1])] * round_seconds)


def summary(
    fs: FairnessState,
    b: int,
    now: int | None = None,
    queued_jobs: np.ndarray | None = None,
    round_seconds: float = 0.0,
    queued_requests: np.ndarray | None = None,
) -> FairnessSummary:
    """Cluster ``b``'s fairness so far. With ``now`` (rounds played), ``p99_wait_s`` is filled
    in, counting each tenant's requests and jobs still queued (``queued_requests`` and
    ``queued_jobs`` (T, n), counts by arrival round, the env core's queues) as having waited
    until ``now``."""
    if now is not None and not round_seconds > 0:
        raise ValueError(
            f"summary: round_seconds = {round_seconds!r}: the p99 wait (asked for by now = {now}) needs the round length in seconds > 0"
        )
    T = fs.streak.shape[1]
    fair_sum, alloc_sum = fs.fair_sum[b], fs.alloc_sum[b]
    seen = fair_sum > 0
    service = np.ones(T)
    service[seen] = alloc_sum[seen] / fair_sum[seen]
    p99 = None
    if now is not None:
        p99 = np.array(
            [
                p99_wait_s(
                    fs.waits[b, i],
                    now,
                    np.zeros(0) if queued_requests is None else queued_requests[i],
                    np.zeros(0, np.int64) if queued_jobs is None else queued_jobs[i],
                    round_seconds,
                )
                for i in range(T)
            ]
        )
    return FairnessSummary(
        welfare=float(fs.welfare_sum[b]),
        jain=jain(alloc_sum[seen] / fair_sum[seen]),
        service=service,
        streak=fs.streak[b].copy(),
        starved=fs.starved[b].copy(),
        max_streak=fs.max_streak[b].copy(),
        starvation_events=fs.starvation_events[b].copy(),
        counts={k: fs.counts[j, b].copy() for j, k in enumerate(COUNTS)},
        rho=tuple(float(np.mean(fs.rho[b, i, : fs.rho_n[b, i]])) if fs.rho_n[b, i] else None for i in range(T)),
        jobs_done=fs.rho_n[b].copy(),
        waits=tuple({int(k): float(fs.waits[b, i, k]) for k in np.flatnonzero(fs.waits[b, i])} for i in range(T)),
        p99_wait_s=p99,
    )


__all__ = ["FairnessSummary", "jain", "p99_wait_s", "summary"]

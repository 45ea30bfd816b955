"""What a session commits the server to: one rule, :func:`work`, that estimates a step's cost
on any scenario with any opponent, and :func:`check_work`, which refuses a reset whose step is
over ``ServerLimits.max_work``. The server's views call it on every scenario a reset builds
(:class:`fleet_marl.openenv.base.SessionEnv`); ``experiments/server_costs.py`` times the estimate
against the real cost."""

from __future__ import annotations

from dataclasses import dataclass

from fleet_marl.config import ConfigError, FleetConfig
from fleet_marl.credit import computed_schemes, rows_per_round
from fleet_marl.kernel.work import kernel_work
from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.policies import POLICIES


@dataclass(frozen=True)
class Work:
    """What a session on one scenario commits the server to, in the kernel's row-columns
    (:func:`fleet_marl.kernel.work.kernel_work`; ``experiments/server_costs.py`` times one on
    the machine it runs on): ``env`` for the round itself (the grand coalition and
    every counterfactual row of the schemes it computes: removals, defaults, Shapley's
    coalitions), ``opponents`` for the reference policy that plays the other tenants (its
    ``work``: nothing for a heuristic's steps once its fit tables are filled, a search for the
    planner and hindsight), ``step`` their sum, and ``episode`` a step's times the rounds."""

    env: int
    opponents: int
    rounds: int

    @property
    def step(self) -> int:
        return self.env + self.opponents

    @property
    def episode(self) -> int:
        return self.step * self.rounds


def work(cfg: FleetConfig, opponents: str | None = None) -> Work:
    """The :class:`Work` of a session on ``cfg`` with ``opponents`` (a ``fleet_marl.policies``
    name; None: the multi view, no opponents). One rule for every opponent, present or future:
    each policy states its own cost (``BasePolicy.work``)."""
    T, N = len(cfg.tenants), cfg.cluster.num_nodes
    schemes = computed_schemes(cfg.reward.scheme, cfg.reward.compute_all)
    env = kernel_work(rows_per_round(T, schemes, cfg.reward.shapley_samples, cfg.reward.shapley_estimator), T, N)
    opp = 0 if opponents is None else POLICIES[opponents].work(cfg)
    return Work(env=env, opponents=opp, rounds=cfg.max_cycles)


def check_work(cfg: FleetConfig, limits: ServerLimits, opponents: str | None = None) -> Work:
    """The scenario's :class:`Work`, or a ``ConfigError`` when one step of it is over
    ``limits.max_work``, naming ``opponents`` when they push it over and the scenario otherwise."""
    w = work(cfg, opponents)
    if w.step <= limits.max_work:
        return w
    unit = "row-columns (docs/llm_agents.md, Security)"
    if w.env <= limits.max_work:
        raise ConfigError(
            "opponents",
            opponents,
            f"opponents whose step fits this server's limit of {limits.max_work:,} {unit} (--max-work): "
            f"{opponents}'s plan costs {w.opponents:,} on this scenario, the round {w.env:,}; use a cheaper opponent "
            "(precision_expert, fair_share, greedy, bidder, random) or a smaller scenario (fewer tenants, nodes or max_gpus)",
        )
    raise ConfigError(
        "config",
        f"a scenario whose round costs {w.env:,}",
        f"at most {limits.max_work:,} {unit} a step (this server's limit, --max-work): fewer tenants or nodes, "
        "fewer reward.shapley_samples, or compute_all = false",
    )


__all__ = ["Work", "check_work", "work"]

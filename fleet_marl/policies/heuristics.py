"""Per-agent reference policies: each tenant decides from its own observation and mask.

=================  =========================================================================
policy             what each tenant does
=================  =========================================================================
random             a uniform choice in every action dimension among what the mask allows
greedy             the most GPUs the mask allows, the highest bid, FP32 (the most accurate
                   precision) on every group, the largest batch that fits
fair_share         its max-min fair share of GPUs (``fair_share`` feature), at list price,
                   BF16 on every group, the largest batch that fits
precision_expert   its fair share (at least the fewest GPUs that hold the model; none if
                   the model fits on no count the mask allows), at list price; BF16 on embeddings, attention, norms and head, FP8 on the MLP where
                   the GPU supports it; the largest batch that fits
bidder             budget-aware: paces spending over the rounds left, bids higher the longer
                   its backlog and the more budget it has to spare, asks for nothing without
                   work; precision_expert's precision map and batch
=================  =========================================================================

"The largest batch that fits" is asked of the batched kernel (:class:`~fleet_marl.policies.base.FitTable`).

Under the sequential protocol (``fleet_marl.env(protocol="sequential")``) the policies that
ask for a share read the claims made before their turn (:class:`~fleet_marl.policies.base.ClaimsSoFar`):

* ``fair_share`` and ``precision_expert`` ask for no more than the tenants before them left of
  their pool (:func:`sequential_share`). (Taking the rest as the last of a pool cost welfare:
  the GPUs cost more than the throughput they add.) In self-play their fair shares fit, so the
  cap binds only beside tenants that ask for more;
* ``bidder`` pays the lowest winning bid when it is the last of its pool and its ask fits in
  what is left (nobody can contest it); when the claims before it leave too little, it asks
  for what is left, or its fair share if that is more (which max-min protects).

``random`` and ``greedy`` ignore the claims by design; ``planner`` plans every tenant jointly,
so its claims never contend.
"""

from __future__ import annotations

import math

import numpy as np

from fleet_marl.policies.base import BF16, FP32, OBS, BasePolicy, ClaimsSoFar, split


class RandomPolicy(BasePolicy):
    """Uniform over the choices the action mask allows, dimension by dimension."""

    name = "random"

    def act_one(self, observation, agent, info=None):
        _, mask = split(observation, agent, info, self.env)
        return np.array([self.rng.choice(np.flatnonzero(m)) for m in mask], np.int64)


class GreedyPolicy(BasePolicy):
    """Asks for as much as it can, at the most accurate precision."""

    name = "greedy"

    def act_one(self, observation, agent, info=None):
        _, mask = split(observation, agent, info, self.env)
        i = self.index(agent)
        prec = self.precision_map(i, mask, {}, fallback="fp32" if mask[2][FP32] else "bf16")
        return self.action(i, self.legal_max(mask[0]), self.legal_max(mask[1]), prec)


def fair_gpus(obs: np.ndarray, max_gpus: int) -> int:
    """The fair-share feature back in GPUs, rounded down (a fractional share is not a GPU)."""
    return math.floor(float(obs[OBS["fair_share"]]) * max_gpus + 1e-3)


def sequential_share(fair: int, claims: ClaimsSoFar | None) -> int:
    """A fair share ``fair`` (GPUs) adjusted to the claims before the tenant's turn: no more
    than they left of its pool. ``claims`` None (the simultaneous protocol): ``fair``."""
    if claims is None:
        return fair
    return min(fair, claims.left)


class FairSharePolicy(BasePolicy):
    """Asks for its fair share (sequential: of what the claims before it left), in BF16
    everywhere, at list price."""

    name = "fair_share"

    def act_one(self, observation, agent, info=None):
        obs, mask = split(observation, agent, info, self.env)
        i = self.index(agent)
        max_gpus = int(self.env.kernel_static.max_gpus[i])
        gpus = self.clip_gpus(sequential_share(fair_gpus(obs, max_gpus), self.claims_so_far(obs, i)), mask[0])
        prec = self.precision_map(i, mask, {})
        return self.action(i, gpus, self.bid_index(1.0), prec)


#: precision_expert's map: FP8 only on the MLP's GEMMs, everything else in BF16.
EXPERT_MAP = {"embedding": "bf16", "attention": "bf16", "mlp": "fp8", "norm": "bf16", "head": "bf16"}


class PrecisionExpertPolicy(BasePolicy):
    """BF16 on embeddings, norms, head and attention; FP8 on the MLP where the GPU supports
    it; the largest batch that fits; its fair share of GPUs (at least enough to hold the model)."""

    name = "precision_expert"

    def gpus_for(self, i: int, obs: np.ndarray, mask: tuple, prec: np.ndarray) -> int:
        """Its fair share (sequential: of what the claims before it left, :func:`sequential_share`),
        raised to the fewest GPUs that hold the model; 0 if none can."""
        max_gpus = int(self.env.kernel_static.max_gpus[i])
        return self.holding(i, sequential_share(fair_gpus(obs, max_gpus), self.claims_so_far(obs, i)), mask[0], prec)

    def act_one(self, observation, agent, info=None):
        obs, mask = split(observation, agent, info, self.env)
        i = self.index(agent)
        prec = self.precision_map(i, mask, EXPERT_MAP)
        return self.action(i, self.gpus_for(i, obs, mask, prec), self.bid_index(1.0), prec)


class BidderPolicy(PrecisionExpertPolicy):
    """Budget-aware bidding.

    * **Backlog** ``b`` in [0, 1]: a trainer's ``0.5 + 0.5 * jobs_waiting`` while it has a job,
      a server's ``max(queue, arrivals)``; 0 without work, and then it asks for nothing.
    * **Pace** ``p = budget share left / time share left``: above 1 it can afford to spend
      faster than evenly, below 1 it must slow down.
    * **Bid** the level nearest ``b * min(p, 1) * (highest level)``, never below the lowest
      level that can win.
    * **GPUs**: as many as ``b`` times the GPUs its even-paced budget per round buys at the
      most it would pay (``Mechanism.price_at_most``: the bid where the mechanism charges
      bids or a clearing price, list price otherwise), at least its fair share when the pace
      allows it (p >= 1); then raised to the fewest GPUs that hold its model, within the mask,
      or 0 when the mask does not allow that many.
    * **Claims** (sequential protocol): last of its pool with an ask that fits in what the
      tenants before it left -> the lowest winning bid (nobody can contest it); an ask that does
      not fit -> cut to what is left, or to its fair share if that is more. (Outbidding the
      claims before it instead cost welfare: 297 against 346 on medium, 225 against 395 on
      hard, 3 seeds; the two rules above gave 370 and 624.)
    """

    name = "bidder"

    def act_one(self, observation, agent, info=None):
        obs, mask = split(observation, agent, info, self.env)
        i = self.index(agent)
        env, st = self.env, self.env.kernel_static
        prec = self.precision_map(i, mask, EXPERT_MAP)
        if st.is_train[i]:
            backlog = 0.5 + 0.5 * float(obs[OBS["jobs_waiting"]]) if obs[OBS["job_left"]] > 0 else 0.0
        else:
            backlog = max(float(obs[OBS["queue"]]), float(obs[OBS["arrivals"]]), 0.0)
        low = self.lowest_winning_bid()
        if backlog <= 0.0:
            return self.action(i, 0, low, prec, 0)
        budget_left = float(obs[OBS["budget_left"]]) * float(st.budget[i])
        rounds_left = max(env.max_cycles * (1.0 - float(obs[OBS["round"]])), 1.0)
        time_left = rounds_left / env.max_cycles
        pace = (budget_left / float(st.budget[i])) / time_left
        levels = env.bid_levels
        want = backlog * min(pace, 1.0) * levels[-1]
        bid = max(int(np.argmin(np.abs(levels - want))), low)
        # what a GPU-round costs at most: the bid where the mechanism charges bids or a
        # clearing price (at most the bid), else list price
        paid = st.mechanism.price_at_most(float(levels[bid]))
        unit = float(st.list_price[i]) * paid * st.round_seconds / 3600.0
        per_round = budget_left / rounds_left
        gpus = math.floor(backlog * per_round / unit)
        fair = fair_gpus(obs, int(st.max_gpus[i]))
        if pace >= 1.0:
            gpus = max(gpus, fair)
        gpus = min(gpus, int(st.max_gpus[i]))
        claims = self.claims_so_far(obs, i)
        if claims is not None and gpus > 0:
            if gpus <= claims.left:
                if claims.after == 0:  # nobody after it can contest the pool: pay the least that wins
                    bid = low
            else:  # the tenants before it left too little: ask for what is left, or its fair share if more
                gpus = max(claims.left, min(fair, gpus))
        gpus = self.holding(i, gpus, mask[0], prec)
        return self.action(i, gpus, bid, prec)


__all__ = [
    "BF16",
    "EXPERT_MAP",
    "BidderPolicy",
    "FairSharePolicy",
    "GreedyPolicy",
    "PrecisionExpertPolicy",
    "RandomPolicy",
    "fair_gpus",
    "sequential_share",
]

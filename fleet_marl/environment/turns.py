"""The sequential protocol's round on arrays for B clusters: the turn order, the turn slots, the
claims collected and the claim features, written once.

:class:`Turns` is what both forms of the protocol play: the per-turn vector env
(:class:`~fleet_marl.environment.FleetSequentialVectorEnv`, B clusters, one turn slot per array
step) and the AEC env (:class:`~fleet_marl.environment.FleetSequentialEnv`, B = 1). Each round
the registered turn order (:mod:`fleet_marl.config.turn_orders`) orders every tenant of every
cluster; the live tenants take the first slots, in that order, and those that left the last
ones (no place in the order). A claim is recorded at its tenant's row; the round clears in the
adapters, through the simultaneous protocol's round, on :attr:`Turns.joint`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fleet_marl.config.turn_orders import TurnRound, turn_order
from fleet_marl.environment.claims import claim_features
from fleet_marl.environment.spaces import N_ACT

#: Columns per tenant that the protocol's ``state()`` appends to the simultaneous protocol's state vector.
STATE_CLAIM_COLUMNS = ("claimed", "gpus", "bid", "position")


class Turns:
    """The protocol's round state of B clusters of N tenants (the arrays are the core's; the
    adapters read them, and write them only through the methods).

    ``order`` (B, N) int64 the tenant of each turn slot (the live ones first, in turn order, then
    those that left), ``position`` (B, N) int64 each tenant's place in this round's order (-1:
    not in it), ``n_live`` (B,) tenants in the order, ``joint`` (B, N, 8) this round's claims
    (action indices; 0 where none), ``claimed`` (B, N) bool, ``turn`` the turn slot (the same in
    every cluster: a round starts in every cluster at once)."""

    def __init__(self, num_envs: int, static, bid_levels: np.ndarray, order: str):
        self.num_envs, self.num_agents = num_envs, int(static.T)
        self.static = static
        self.bid_levels = bid_levels
        self.top_bid = float(bid_levels[-1])
        self.turn_order = turn_order(order)
        B, T = self.num_envs, self.num_agents
        self.order = np.zeros((B, T), np.int64)
        self.position = np.full((B, T), -1, np.int64)
        self.n_live = np.zeros(B, np.int64)
        self.joint = np.zeros((B, T, N_ACT), np.int64)
        self.claimed = np.zeros((B, T), bool)
        self.turn = 0
        self.rngs: list[np.random.Generator] | None = None
        self._features: np.ndarray | None = None  # (B, N, N_CLAIM) cache, dropped on every change

    # --- the round --------------------------------------------------------------------------------

    def seed(self, seeds: Sequence[int | None]) -> None:
        """Each cluster's generator of the order: the third child of its reset seed (the round
        engine spawns the first two for the arrivals and the credit draws), so the order never
        shifts their draws (None: fresh entropy)."""
        self.rngs = [np.random.default_rng(np.random.SeedSequence(s).spawn(3)[2]) for s in seeds]

    def start(self, clusters: np.ndarray, rounds: np.ndarray, alive: np.ndarray) -> None:
        """A new round in ``clusters`` (C,): ``rounds`` (C,) the rounds each has played, ``alive``
        (C, N) its live tenants. Orders them by the turn order, clears the claims, turn slot 0."""
        assert self.rngs is not None  # seed() comes first: reset() seeds before the first round
        T = self.num_agents
        alive = np.asarray(alive, bool)
        r = TurnRound(np.asarray(rounds, np.int64), alive, np.asarray(self.static.priority), [self.rngs[b] for b in clusters])
        seq = np.asarray(self.turn_order.order(r), np.int64)
        if seq.shape != alive.shape or (len(seq) and not (np.sort(seq, 1) == np.arange(T)).all()):
            raise ValueError(
                f"turn order {self.turn_order.name!r} gave {seq.shape} {seq.tolist()}: expected a permutation of the {T} tenants "
                f"per cluster, shape {alive.shape}"
            )
        live = np.take_along_axis(alive, seq, 1)
        order = np.take_along_axis(seq, np.argsort(~live, axis=1, kind="stable"), 1)  # live first, each part in turn order
        n = live.sum(1)
        pos = np.full((len(clusters), T), -1, np.int64)
        k = np.broadcast_to(np.arange(T), pos.shape)
        np.put_along_axis(pos, order, np.where(k < n[:, None], k, -1), 1)
        self.order[clusters], self.position[clusters], self.n_live[clusters] = order, pos, n
        self.joint[clusters] = 0
        self.claimed[clusters] = False
        self._features = None
        self.turn = 0

    @property
    def agent(self) -> np.ndarray:
        """(B,) the tenant of the current turn slot in each cluster (a copy)."""
        return self.order[:, self.turn].copy()

    @property
    def active(self) -> np.ndarray:
        """(B,) bool the current slot's tenant is live (its claim counts)."""
        return self.turn < self.n_live

    def claim(self, clusters: np.ndarray, tenants: np.ndarray, idx: np.ndarray) -> None:
        """Record the claims ``idx`` (C, 8) action indices of ``tenants`` (C,) in ``clusters`` (C,)."""
        self.joint[clusters, tenants] = idx
        self.claimed[clusters, tenants] = True
        self._features = None

    def advance(self) -> None:
        """The next turn slot."""
        self.turn += 1

    # --- what the tenants see ---------------------------------------------------------------------

    def features(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Every tenant's ``CLAIM_FIELDS`` now, (B, N, N_CLAIM), from the claims made before its
        place on its pool (:func:`~fleet_marl.environment.claims.claim_features`); ``rows``
        (B,): only those tenants' rows, (B, N_CLAIM) (the same bits)."""
        if rows is None and self._features is not None:
            return self._features
        out = claim_features(
            self.static,
            self.top_bid,
            self.position,
            np.where(self.claimed, self.joint[..., 0], 0),
            self.bid_levels[self.joint[..., 1]],
            self.claimed,
            rows=rows,
        )
        if rows is None:
            self._features = out
        return out

    def empty_features(self) -> np.ndarray:
        """(B, N, N_CLAIM) the claim features outside any order (after an episode's last round)."""
        B, T = self.num_envs, self.num_agents
        none = np.full((B, T), -1, np.int64)
        return claim_features(self.static, self.top_bid, none, np.zeros((B, T)), np.zeros((B, T)), np.zeros((B, T), bool))

    def state_columns(self) -> np.ndarray:
        """(B, N * 4) float32 :data:`STATE_CLAIM_COLUMNS` per tenant: claimed (0/1), GPUs /
        max_gpus, bid / highest level, place / (tenants in the order - 1), clipped to [0, 1]."""
        B, T = self.num_envs, self.num_agents
        extra = np.zeros((B, T, len(STATE_CLAIM_COLUMNS)))
        c = self.claimed
        extra[..., 0] = c
        extra[..., 1] = np.where(c, self.joint[..., 0] / self.static.max_gpus, 0.0)
        extra[..., 2] = np.where(c, self.bid_levels[self.joint[..., 1]] / self.bid_levels[-1], 0.0)
        extra[..., 3] = np.where(self.position >= 0, self.position / np.maximum(self.n_live[:, None] - 1, 1), 0.0)
        return np.clip(extra, 0.0, 1.0).reshape(B, len(STATE_CLAIM_COLUMNS) * T).astype(np.float32)


__all__ = ["STATE_CLAIM_COLUMNS", "Turns"]

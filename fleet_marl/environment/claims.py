"""The claim features of the sequential protocol: each tenant's ``CLAIM_FIELDS`` from the
claims made before it in the round's order, on its pool (:func:`claim_features`)."""

from __future__ import annotations

import numpy as np

from fleet_marl.environment.fields import CLAIM_FIELDS, N_CLAIM
from fleet_marl.environment.normalize import squash

_CI = {name: k for k, (name, _) in enumerate(CLAIM_FIELDS)}


def claim_features(
    st, top_bid: float, position: np.ndarray, gpus: np.ndarray, bid: np.ndarray, claimed: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """(..., T, N_CLAIM) float32: each tenant's ``CLAIM_FIELDS`` (the sequential protocol) from the
    round's claims so far, for any leading batch axes (the sequential protocol's array core,
    ``environment.turns.Turns``, passes B clusters, (B, T); B = 1 under the AEC env). ``position`` (..., T) int64 each tenant's place in
    this round's order (-1: not in it), ``gpus`` (..., T) GPUs requested and ``bid`` (..., T) bid
    multipliers of the claims made, ``claimed`` (..., T) bool who has claimed; ``top_bid`` the
    highest bid level. A tenant's features count only the claims of tenants before it in the
    order, on its pool. ``rows`` (...,) int64: only these tenants' rows, (..., N_CLAIM) (the
    tenant whose turn it is in each cluster). Every sum is over the last axis of a (..., I, T)
    array, element by element the same operations, so a row has the same bits whatever the
    batch and whether it was asked for alone."""
    pos = np.asarray(position, np.int64)
    inside = pos >= 0
    lead = pos.shape[:-1]
    pool_n = (st.pool[:, None] == st.pool[None, :]).sum(1).astype(np.float64)  # (T,) tenants of each tenant's pool
    if rows is None:
        ri = np.broadcast_to(np.arange(st.T), lead + (st.T,))  # (..., I) the rows asked for: all
    else:
        ri = np.asarray(rows, np.int64)[..., None]  # (..., 1)
    pos_i = np.take_along_axis(pos, ri, -1)  # (..., I)
    inside_i = pos_i >= 0
    pool_i = st.pool[ri]
    same = pool_i[..., :, None] == st.pool  # (..., I, T): j on i's pool
    # (..., i, j): j claimed before i, on i's pool
    before = same & (np.asarray(claimed, bool) & inside)[..., None, :] & (pos[..., None, :] < pos_i[..., :, None])
    g_j = np.asarray(gpus, np.float64)
    g = np.where(before, g_j[..., None, :], 0.0).sum(-1)
    paid = np.where(before, (g_j * np.asarray(bid, np.float64))[..., None, :], 0.0).sum(-1)
    cap = st.pool_capacity[pool_i].astype(np.float64)
    n_i = pool_n[ri]
    n = inside.sum(-1, keepdims=True)  # (..., 1) tenants in the order
    out = np.zeros(ri.shape + (N_CLAIM,))
    out[..., _CI["claimed"]] = squash(g / cap, 1.0)
    out[..., _CI["unclaimed"]] = np.maximum(cap - g, 0.0) / cap
    out[..., _CI["claimed_bid"]] = np.where(g > 0, paid / np.maximum(g, 1.0) / top_bid, 0.0)
    out[..., _CI["claimants"]] = (before & (np.asarray(gpus) > 0)[..., None, :]).sum(-1) / n_i
    after = same & inside[..., None, :] & (pos[..., None, :] > pos_i[..., :, None])
    out[..., _CI["after_in_pool"]] = np.where(inside_i, after.sum(-1) / n_i, 0.0)
    out[..., _CI["position"]] = np.where(inside_i, pos_i / np.maximum(n - 1, 1), 0.0)
    out = np.clip(out, 0.0, 1.0).astype(np.float32)
    return out if rows is None else out[..., 0, :]


__all__ = ["claim_features"]

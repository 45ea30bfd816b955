"""The static facts of a scenario the env derives once: the cheapest GPU-round each tenant
can buy, each tenant's documented default action, and each trainer's job time alone."""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.environment.spaces import BATCH_LEVELS, N_ACT, PREC, decode_actions
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate, stage1
from fleet_marl.kernel.cost import CKPT_TRAIN_BYTES
from fleet_marl.kernel.tenant_cost import fitting_batch, restart_time


def cheapest_gpu_round(st, bid_levels: np.ndarray) -> np.ndarray:
    """(T,) the cheapest GPU-round each tenant can buy: the budget is checked at the most a
    served tenant pays (``Mechanism.price_at_most``: its bid, or list price, as the mechanism
    charges) at the lowest bid that can win (``Mechanism.lowest_winning_level``: the lowest
    level, or with a reserve the lowest at or above it)."""
    m = st.mechanism
    pay_low = m.price_at_most(float(bid_levels[m.lowest_winning_level(bid_levels, st.reserve_price)]))
    return st.list_price * pay_low * (st.round_seconds / 3600.0)


def default_action(st, bid_levels: np.ndarray, prec_legal: np.ndarray) -> tuple[np.ndarray, Actions]:
    """Each tenant's default action ``c_i`` (docs/environment.md), as (T, 8) indices and
    decoded: its static fair share of its pool (capacity // tenants on the pool), raised to
    the fewest GPUs that hold its model if the share cannot, within [1, max_gpus]; the bid
    level nearest list price; BF16 on every group; and the largest batch level that fits there."""
    T = st.T
    per_pool = np.bincount(st.pool, minlength=len(st.pools))
    share = st.pool_capacity[st.pool] // per_pool[st.pool]
    bid_idx = int(np.argmin(np.abs(bid_levels - 1.0)))
    bf16 = catalog.PRECISION_CODE["bf16"]
    prec = np.where(prec_legal[:, bf16], bf16, catalog.PRECISION_CODE["fp32"])
    precision = np.repeat(prec[:, None], catalog.N_GROUPS, axis=1).astype(np.int64)
    terms = stage1(st, precision)

    def fit(t: int, n: int) -> float:
        return fitting_batch(
            terms.weights[t],
            terms.grads[t],
            terms.master[t],
            terms.optimizer[t],
            terms.per_seq_local[t],
            terms.per_seq_sharded[t],
            terms.kv_heads[t],
            n,
            st.mem_bytes[t],
        )

    # the fewest GPUs that hold one sequence, for models too big for the fair share
    least = np.array([next((n for n in range(1, int(st.max_gpus[t]) + 1) if fit(t, n) >= 1), st.max_gpus[t]) for t in range(T)])
    gpus = np.clip(np.maximum(share, least), 1, st.max_gpus).astype(np.int64)
    fitted = np.array([fit(t, int(gpus[t])) for t in range(T)])
    level = np.maximum(np.searchsorted(BATCH_LEVELS, fitted, side="right") - 1, 0)
    idx = np.zeros((T, N_ACT), np.int64)
    idx[:, 0] = gpus
    idx[:, 1] = bid_idx
    idx[:, PREC] = precision
    idx[:, -1] = level
    return idx, decode_actions(idx, bid_levels)


def job_rounds_alone(st, default_actions: Actions) -> np.ndarray:
    """Themis ``T_independent`` in rounds: a trainer's job alone on its default action from
    a standing start (the first round loses its restart time, ``tenant_cost.restart_time`` on
    the default action's GPUs and nodes, as every job's first round does in the shared run),
    nodes at ambient. inf where it cannot run, and for servers."""
    T = st.T
    d = default_actions
    state = RoundState.initial(st)
    state = RoundState(
        prev_alloc=d.gpus.copy(), temp_c=state.temp_c, queue=state.queue, remaining_tokens=np.full(T, np.inf), budget_left=np.full(T, 1e300)
    )
    out = evaluate(st, d, state, Draws.expected(st), np.eye(T, dtype=bool), validate=False)
    rate = np.diagonal(out.tokens_per_s)
    nodes = np.diagonal(out.nodes_spanned)
    ckpt = CKPT_TRAIN_BYTES * st.params.sum(-1)
    restart = np.array(
        [restart_time(st.restart_seconds, ckpt[t], int(d.gpus[t]), int(nodes[t]), st.load_gpu_bps, st.load_node_bps) for t in range(T)]
    )
    with np.errstate(divide="ignore"):  # a restart longer than the round costs the round (as in the kernel)
        seconds = np.minimum(restart, st.round_seconds) + st.job_tokens / rate
        return np.where(st.is_train & (rate > 0), seconds / st.round_seconds, np.inf)


__all__ = ["cheapest_gpu_round", "default_action", "job_rounds_alone"]

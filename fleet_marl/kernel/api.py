"""One scheduling round, batched: the kernel's public calls (:func:`evaluate`,
:func:`evaluate_welfare`, :func:`evaluate_counterfactuals`, :func:`stage1`). Their inputs are
checked in :mod:`~fleet_marl.kernel.checks` and packed for the compiled round
(:mod:`~fleet_marl.kernel.engine`) in :mod:`~fleet_marl.kernel.packing`.

The kernel runs in two stages (their equations and sources are in ``docs/model.md``):

1. per-tenant terms that depend only on a tenant's own action (bytes, FLOPs, numerics), sums
   of per-layer-group tables built once per scenario (``cost.stage1_tables``);
2. the coupled stage over the rows of a ``present`` mask, compiled
   (:mod:`fleet_marl.kernel.engine`, its stages in their own modules): the arbiter re-runs with
   absent tenants' GPUs back in the pool, then placement, memory, throughput, power, heat,
   progress, money, utility and welfare.

``evaluate_counterfactuals`` evaluates the grand coalition and every "tenant i removed" row
in ONE call, so the environment gets ``G(z)`` and every ``G(z_-i)`` together. Random draws are
inputs, so every row sees the same noise.

Utility of tenant i (docs/model.md section 8)::

    u_i = priority_i * value_i - cost_weight * spend_i / (budget_i / max_cycles)
    value_i = trained tokens / (ref tokens/s x round)      (train)
            = requests served within SLO / mean arrivals   (serve)
    G = sum_i u_i over present tenants
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from fleet_marl import catalog
from fleet_marl.kernel import engine, layout, tenant_cost
from fleet_marl.kernel.checks import KernelInputError, checked, leads
from fleet_marl.kernel.packing import ALL_PRESENT, lead_shape, no_placement, one_row, outcome_of_flat, outcome_of_packed, pack, zeros_row
from fleet_marl.kernel.static import KernelStatic
from fleet_marl.kernel.types import Actions, Draws, Outcome, RoundState, Stage1


def evaluate(
    st: KernelStatic,
    actions: Actions,
    state: RoundState,
    draws: Draws,
    present: np.ndarray | None = None,
    *,
    validate: bool = True,
    on_invalid: str = "raise",
) -> Outcome:
    """Evaluate one round for every batch row.

    Every field of ``actions``, ``state``, ``draws`` and ``present`` ((..., T) bool, default
    all True) has a leading (batch) shape; the leading shapes broadcast to the result's. A
    tenant absent from a row asks for nothing, is granted nothing and counts 0 in that row's
    welfare. ``on_invalid='veto'`` turns an unsupported precision into a veto of that tenant
    instead of an error (useful when searching configurations). ``validate=False`` skips the
    input checks (for callers that have checked already).
    """
    if validate:
        actions, state, draws, present = checked(st, actions, state, draws, present, on_invalid)
    if one_row(actions, state, draws, present):
        return _round_one(st, actions, state, draws, present)
    out, _ = evaluate_welfare(st, actions, state, draws, present)
    return out


def evaluate_welfare(
    st: KernelStatic,
    actions: Actions,
    state: RoundState,
    draws: Draws,
    present: np.ndarray | None = None,
    *,
    full: np.ndarray | None = None,
) -> tuple[Outcome, np.ndarray]:
    """``(outcome, welfare)``: the welfare of every row (the inputs' leading shape), and the
    whole outcome of the rows where ``full`` (a bool mask over the rows of a leading shape
    ``(B,)``; default: every row, with the inputs' leading shape). Inputs are not checked.
    Credit assignment uses it: the grand coalition's outcome, and only the welfare of each
    counterfactual row."""
    if full is None and one_row(actions, state, draws, present):
        out = _round_one(st, actions, state, draws, present)
        return out, out.welfare
    lead = lead_shape(actions, state, draws, present)
    B = int(np.prod(lead)) if lead else 1
    if full is None:
        out_index = np.arange(B, dtype=np.int64)
    else:
        full = np.asarray(full, bool)
        if full.shape != (B,) or len(lead) != 1:
            raise KernelInputError(f"full: shape {full.shape}; expected ({B},), a mask over rows of a leading shape (B,), not {lead}")
        out_index = np.where(full, np.cumsum(full) - 1, -1).astype(np.int64)
    ins_i, ins_f, temp, pgon = pack(st, actions, state, draws, present, lead, B)
    T, K = st.T, st.K
    nb = int(out_index.max(initial=-1)) + 1
    out_f = np.empty((len(layout.OF), nb, T))
    out_i = np.empty((len(layout.OI), nb, T), np.int64)
    out_b = np.empty((len(layout.OB), nb, T), np.bool_)
    gon = np.empty((nb, T, K), np.int64)
    out_k = np.empty((2, nb, K))
    rack = np.empty((nb, st.n_racks))
    welfare = np.empty(B)
    engine.round_rows(*st.packed, ins_i, ins_f, temp, pgon, out_index, out_f, out_i, out_b, gon, out_k, rack, welfare)
    if full is not None:
        return outcome_of_packed(out_f, out_i, out_b, gon, out_k, rack, welfare[full], (nb,)), welfare
    out = outcome_of_packed(out_f, out_i, out_b, gon, out_k, rack, welfare, lead)
    return out, out.welfare


def evaluate_counterfactuals(
    st: KernelStatic, actions: Actions, state: RoundState, draws: Draws, *, validate: bool = True, on_invalid: str = "raise"
) -> Outcome:
    """Rows: 0 = every tenant present; 1 + i = tenant i removed.

    Without a batch axis the result has leading shape ``(T + 1,)`` and
    ``G(z) - G(z_-i) = out.welfare[0] - out.welfare[1 + i]`` is tenant i's difference reward.
    With inputs of leading shape ``(B,)`` (for example B vectorised environments) the result has
    leading shape ``(B, T + 1)``: ``out.welfare[:, :1] - out.welfare[:, 1:]``.
    """
    present = np.ones((st.T + 1, st.T), dtype=bool)
    present[1:] = ~np.eye(st.T, dtype=bool)
    if validate:
        actions, state, draws, _ = checked(st, actions, state, draws, None, on_invalid)
    lead = np.broadcast_shapes(*leads(actions, state, draws, None).values())
    if len(lead) > 1:
        raise KernelInputError(f"leading (batch) shape {lead}: expected () or (B,) for counterfactual rows")
    if lead:  # a row axis goes between the batch axis and the tenants

        def add_row_axis(obj):
            kw = {}
            for f in fields(obj):
                if getattr(obj, f.name) is None:  # a Draws' lengths left to the config
                    continue
                v = np.asarray(getattr(obj, f.name))
                tail = 2 if (type(obj) is Actions and f.name == "precision") or f.name == "prev_placement" else 1
                kw[f.name] = np.expand_dims(v, v.ndim - tail) if v.ndim > tail else v
            return type(obj)(**kw)

        actions, state, draws = add_row_axis(actions), add_row_axis(state), add_row_axis(draws)
        present = present[None]
    return evaluate(st, actions, state, draws, present, validate=False)


def stage1(st: KernelStatic, precision: np.ndarray, *, project: bool | None = None, prompt_tokens=None, output_tokens=None) -> Stage1:
    """Stage 1 of each tenant under its precision map ``precision`` (T, G), as the round
    computes it (``tenant_cost.tenant_terms``); ``project`` defaults to the scenario's safety mode,
    the request lengths ((T,) each) to each tenant's configured means."""
    prec = np.asarray(precision, np.int64)
    if prec.shape != (st.T, catalog.N_GROUPS):
        raise KernelInputError(f"precision: shape {prec.shape}; expected ({st.T}, {catalog.N_GROUPS})")
    prompt = st.prompt_tokens if prompt_tokens is None else np.broadcast_to(np.asarray(prompt_tokens, np.float64), (st.T,))
    output = st.output_tokens if output_tokens is None else np.broadcast_to(np.asarray(output_tokens, np.float64), (st.T,))
    tf, ti, tg = st.packed[:3]
    run = np.empty_like(prec)
    rows = [
        tenant_cost.tenant_terms(tf, ti, tg, t, prec[t], not st.veto if project is None else project, st.mfu, run[t], prompt[t], output[t])
        for t in range(st.T)
    ]
    return Stage1(run, *(np.array(col) for col in zip(*rows, strict=True)))


def _round_one(st, actions: Actions, state: RoundState, draws: Draws, present) -> Outcome:
    """The Outcome of one row of inputs that pass ``packing.one_row``, in one compiled call. The
    outputs are three flat buffers, one per dtype (``packing.outcome_of_flat`` views them as fields)."""
    T, K, R = st.T, st.K, st.n_racks
    flat = (np.empty(_NOF * T + 2 * K + R + 1), np.empty(_NOI * T + T * K, np.int64), np.empty(_NOB * T, np.bool_), T, K, R)
    prompt, output = draws.prompt_tokens, draws.output_tokens
    engine.round_one(
        *st.packed,
        actions.gpus,
        actions.batch,
        state.prev_alloc,
        ALL_PRESENT[T] if present is None else present,
        actions.precision,
        actions.bid,
        state.queue,
        state.remaining_tokens,
        state.budget_left,
        draws.arrivals,
        draws.tiebreak,
        st.prompt_tokens if prompt is None else prompt,
        st.output_tokens if output is None else output,
        state.temp_c,
        no_placement((T, K))[0] if state.prev_placement is None else state.prev_placement,
        *(zeros_row(T) if v is None else v for v in (state.restart_left_s, state.since_ckpt_s, state.unsaved_tokens)),
        flat[0],
        flat[1],
        flat[2],
    )
    return outcome_of_flat(flat)


_NOF, _NOI, _NOB = len(layout.OF), len(layout.OI), len(layout.OB)


__all__ = ["evaluate", "evaluate_counterfactuals", "evaluate_welfare", "stage1"]

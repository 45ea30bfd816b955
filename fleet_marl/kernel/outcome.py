"""One scheduling round, batched: arbiter -> safety -> cost -> outcome -> utility and welfare.

The kernel runs in two stages (``DESIGN.md`` section 5):

1. per-tenant terms that depend only on a tenant's own action (bytes, FLOPs, numerics), once
   per action row: ``cost.tenant_terms``;
2. the coupled stage over the rows of a ``present`` mask: the arbiter re-runs with absent
   tenants' GPUs back in the pool, then memory, throughput, power, heat, progress, money,
   utility and welfare.

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
from fleet_marl.kernel import arbiter, cost, safety
from fleet_marl.kernel.safety import KernelInputError
from fleet_marl.kernel.types import Actions, Draws, KernelStatic, Outcome, RoundState

_AFFORD_AT_BID = (arbiter.PROPORTIONAL, arbiter.AUCTION)
MAX_COUNT = 1_000_000  # largest GPU count, batch or previous allocation accepted
MAX_BID = 1e6  # largest bid multiplier accepted (a million times list price)


def _field(name: str, value, dtype, tail: tuple[int, ...], integer: bool = False, lo=None, hi=None, what: str = "") -> np.ndarray:
    """Check one array: numeric, finite, trailing shape ``tail``, integer-valued if asked, in
    ``[lo, hi]``; return a copy of dtype ``dtype`` (outputs never alias the caller's arrays)."""
    try:
        a = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise KernelInputError(f"{name}: cannot be read as an array ({exc})") from None
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise KernelInputError(f"{name}: dtype {a.dtype} is not numeric; expected {np.dtype(dtype).name}")
    if a.ndim < len(tail) or a.shape[a.ndim - len(tail):] != tail:
        want = "(..., " + ", ".join(map(str, tail)) + ")"
        raise KernelInputError(f"{name}: shape {a.shape}; expected {want}")
    if np.issubdtype(a.dtype, np.floating):
        bad = ~np.isfinite(a)
        if bad.any():
            i = tuple(int(x) for x in np.argwhere(bad)[0])
            raise KernelInputError(f"{name}[{', '.join(map(str, i))}] = {a[i]}: expected a finite number")
        if integer:
            frac = a != np.round(a)
            if frac.any():
                i = tuple(int(x) for x in np.argwhere(frac)[0])
                raise KernelInputError(f"{name}[{', '.join(map(str, i))}] = {a[i]}: expected an integer")
    _range(name, a, lo, hi, what)  # before the cast, so the message shows the value given
    return np.array(a, dtype=dtype, copy=True)


def _range(name: str, a: np.ndarray, lo=None, hi=None, what: str = "") -> None:
    bad = np.zeros(a.shape, bool)
    if lo is not None:
        bad |= a < lo
    if hi is not None:
        bad |= a > hi
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise KernelInputError(f"{name}[{', '.join(map(str, i))}] = {a[i]}: expected {what}")


def check_actions(st: KernelStatic, actions: Actions, on_invalid: str = "raise") -> Actions:
    """Validate and convert ``actions``; raise :class:`KernelInputError` naming the field.

    Shapes: gpus, bid, batch (..., T); precision (..., T, G), with equal leading shapes.
    """
    T, G = st.T, catalog.N_GROUPS
    gpus = _field("actions.gpus", actions.gpus, np.int64, (T,), True, 0, MAX_COUNT, f"an integer in [0, {MAX_COUNT}]")
    bid = _field("actions.bid", actions.bid, np.float64, (T,), False, np.nextafter(0.0, 1.0), MAX_BID, f"a bid multiplier in (0, {MAX_BID:g}]")
    prec = _field("actions.precision", actions.precision, np.int64, (T, G), True, 0, catalog.N_PRECISIONS - 1, f"a precision code in [0, {catalog.N_PRECISIONS - 1}] ({', '.join(catalog.PRECISIONS)})")
    batch = _field("actions.batch", actions.batch, np.int64, (T,), True, 1, MAX_COUNT, f"an integer in [1, {MAX_COUNT}]")
    lead = {gpus.shape[:-1], bid.shape[:-1], prec.shape[:-2], batch.shape[:-1]}
    if len(lead) != 1:
        raise KernelInputError(
            f"actions: leading batch shapes differ: gpus {gpus.shape}, bid {bid.shape}, "
            f"precision {prec.shape}, batch {batch.shape}; expected gpus/bid/batch (..., {T}) and precision (..., {T}, {G})"
        )
    if on_invalid not in ("raise", "veto"):
        raise KernelInputError(f"on_invalid = {on_invalid!r}: expected 'raise' or 'veto'")
    if on_invalid == "raise" and safety.invalid_precision(st, prec).any():
        raise KernelInputError(safety.explain_invalid(st, prec))
    return Actions(gpus=gpus, bid=bid, precision=prec, batch=batch)


def check_state(st: KernelStatic, state: RoundState) -> RoundState:
    T, K = st.T, st.K
    big = 1e300
    kw = {
        "prev_alloc": _field("state.prev_alloc", state.prev_alloc, np.int64, (T,), True, 0, MAX_COUNT, f"an integer in [0, {MAX_COUNT}]"),
        "temp_c": _field("state.temp_c", state.temp_c, np.float64, (K,), False, -273.15, 1e4, "a temperature in [-273.15, 1e4] C"),
        "queue": _field("state.queue", state.queue, np.float64, (T,), False, 0, 1e18, "a request count in [0, 1e18]"),
        "remaining_tokens": _field("state.remaining_tokens", state.remaining_tokens, np.float64, (T,), False, 0, big, "a token count >= 0"),
        "budget_left": _field("state.budget_left", state.budget_left, np.float64, (T,), False, 0, big, "an amount of USD >= 0"),
    }
    return RoundState(**kw)


def check_draws(st: KernelStatic, draws: Draws) -> Draws:
    arrivals = _field("draws.arrivals", draws.arrivals, np.float64, (st.T,), False, 0, 1e18, "a request count in [0, 1e18]")
    tiebreak = _field("draws.tiebreak", draws.tiebreak, np.float64, (st.T,))
    return Draws(arrivals=arrivals, tiebreak=tiebreak)


def _leads(actions: Actions, state: RoundState, draws: Draws, present) -> dict[str, tuple]:
    out = {f"actions.{f.name}": np.shape(getattr(actions, f.name))[: -2 if f.name == "precision" else -1] for f in fields(actions)}
    out.update({f"state.{f.name}": np.shape(getattr(state, f.name))[:-1] for f in fields(state)})
    out.update({f"draws.{f.name}": np.shape(getattr(draws, f.name))[:-1] for f in fields(draws)})
    if present is not None:
        out["present"] = np.shape(present)[:-1]
    return out


def _check_leading(actions, state, draws, present) -> None:
    leads = _leads(actions, state, draws, present)
    try:
        np.broadcast_shapes(*leads.values())
    except ValueError:
        shown = ", ".join(f"{k} {v}" for k, v in leads.items())
        raise KernelInputError(
            f"leading (batch) shapes do not broadcast: {shown}; expected each to be () or the same batch shape"
        ) from None


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

    actions: fields with leading shape (B1,) or none; present: (B, T) bool (default all True),
    where B1 is 1 or B. A tenant absent from a row asks for nothing, is granted nothing and
    counts 0 in that row's welfare. ``on_invalid='veto'`` turns an unsupported precision into
    a veto of that tenant instead of an error (useful when searching configurations).
    ``validate=False`` skips input checks (for callers that have checked already).
    """
    if validate:
        actions = check_actions(st, actions, on_invalid)
        state = check_state(st, state)
        draws = check_draws(st, draws)
        if present is not None:
            p = np.asarray(present)
            if p.dtype != bool or p.ndim < 1 or p.shape[-1] != st.T:
                raise KernelInputError(f"present: dtype {p.dtype}, shape {p.shape}; expected bool (..., {st.T})")
        _check_leading(actions, state, draws, present)
    if st.backend == "numba":
        from fleet_marl.kernel import fast  # numba: the optional [fast] extra, loaded only for this backend

        return fast.evaluate(st, actions, state, draws, present)
    if st.term_table is not None:
        terms, invalid = cost.lookup_terms(st.term_table, actions.precision)
    else:
        terms = cost.tenant_terms(st, actions.precision, project=not st.veto)
        invalid = safety.invalid_precision(st, actions.precision)
    return _stage2(st, actions, terms, invalid, state, draws, present)


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
        actions = check_actions(st, actions, on_invalid)
        state, draws = check_state(st, state), check_draws(st, draws)
        _check_leading(actions, state, draws, None)
    lead = np.broadcast_shapes(*_leads(actions, state, draws, None).values())
    if len(lead) > 1:
        raise KernelInputError(f"leading (batch) shape {lead}: expected () or (B,) for counterfactual rows")
    if lead:  # a row axis goes between the batch axis and the tenants
        def add_row_axis(obj):
            kw = {}
            for f in fields(obj):
                v = np.asarray(getattr(obj, f.name))
                tail = 2 if (type(obj) is Actions and f.name == "precision") else 1
                kw[f.name] = np.expand_dims(v, v.ndim - tail) if v.ndim > tail else v
            return type(obj)(**kw)

        actions, state, draws = add_row_axis(actions), add_row_axis(state), add_row_axis(draws)
        present = present[None]
    return evaluate(st, actions, state, draws, present, validate=False, on_invalid=on_invalid)


def _lead_shape(actions: Actions, state: RoundState, draws: Draws, present) -> tuple[int, ...]:
    shapes = [
        np.shape(actions.gpus)[:-1],
        np.shape(state.prev_alloc)[:-1], np.shape(state.temp_c)[:-1], np.shape(state.queue)[:-1],
        np.shape(state.remaining_tokens)[:-1], np.shape(state.budget_left)[:-1],
        np.shape(draws.arrivals)[:-1], np.shape(draws.tiebreak)[:-1],
    ]
    if present is not None:
        shapes.append(np.shape(present)[:-1])
    distinct = set(shapes)
    if len(distinct) == 1:
        return shapes[0]
    distinct.discard(())
    return distinct.pop() if len(distinct) == 1 else np.broadcast_shapes(*shapes)


def _row_view(lead: tuple[int, ...], B: int):
    """A function giving an input as (B, *tail), or something that broadcasts to it, without
    copying when it can (``lead`` is the broadcast leading shape, B its size)."""
    flat = len(lead) <= 1

    def rows(a, tail):
        a = np.asarray(a)
        if flat and a.shape[: a.ndim - len(tail)] in ((), (1,), (B,)):
            return a
        return np.broadcast_to(a, lead + tail).reshape((B,) + tail)

    return rows


def _stage2(st, actions: Actions, terms, invalid, state: RoundState, draws: Draws, present) -> Outcome:
    T = st.T
    lead = _lead_shape(actions, state, draws, present)
    B = int(np.prod(lead)) if lead else 1
    rows = _row_view(lead, B)

    gpus = rows(actions.gpus, (T,))
    bid = rows(actions.bid, (T,))
    batch_req = rows(actions.batch, (T,))
    pres = np.ones((B, T), bool) if present is None else np.broadcast_to(rows(present, (T,)), (B, T))
    G = catalog.N_GROUPS
    tg = terms.precision.ndim
    terms = type(terms)(*(rows(x, (T, G) if x.ndim == tg else (T,)) for x in terms))
    invalid = rows(invalid, (T,))
    prev = rows(state.prev_alloc, (T,))
    temp0 = rows(state.temp_c, (st.K,))
    queue = rows(state.queue, (T,))
    remaining = rows(state.remaining_tokens, (T,))
    budget = rows(state.budget_left, (T,))
    arrivals = rows(draws.arrivals, (T,))
    tiebreak = rows(draws.tiebreak, (T,))

    # --- arbiter -------------------------------------------------------------------------
    hours = st.round_seconds / 3600.0
    pay_mult = bid if st.mechanism in _AFFORD_AT_BID else 1.0
    unit = st.list_price * pay_mult * hours  # USD per GPU for the round, at most
    afford = np.floor(np.maximum(budget, 0.0) / unit)
    afford = np.where(afford * unit > budget, afford - 1, afford)  # never overspend by rounding
    request = np.where(pres, np.minimum(np.minimum(gpus, st.max_gpus), afford), 0).astype(np.int64)
    request = arbiter.admissible(st, request, bid)
    alloc, mult = arbiter.clear(st, request, bid, tiebreak)
    gon = arbiter.place(st, alloc)
    nodes = (gon > 0).sum(-1)
    has = alloc > 0
    restarted = (alloc != prev) & has

    # --- safety: numerics and memory ------------------------------------------------------
    train = st.is_train
    if st.veto:
        batch = batch_req
        mem = cost.memory_per_gpu(terms, alloc, batch)
        oom = (mem.total > st.mem_bytes) & has
        vetoed = (terms.unsafe | invalid) & has
        projected = np.zeros((B, T), bool)
    else:
        fit = cost.largest_fitting_batch(terms, alloc, st.mem_bytes)
        batch = np.maximum(np.minimum(batch_req, fit), 1).astype(np.int64)
        oom = (fit < 1) & has
        vetoed = invalid & has
        projected = (terms.unsafe | (batch < batch_req)) & has & ~oom & ~vetoed
        mem = cost.memory_per_gpu(terms, alloc, batch)
    running = has & ~oom & ~vetoed

    # --- cost: throughput ------------------------------------------------------------------
    thr = cost.throughput(st, terms, alloc, batch, nodes)
    avail = st.round_seconds - st.restart_seconds * restarted
    demand = queue + arrivals
    capacity = thr.work_rate * avail
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(train, 1.0, np.where(capacity > 0, np.minimum(demand / capacity, 1.0), 0.0))
    activity = np.where(running, busy, 0.0)

    # --- safety: power and heat -------------------------------------------------------------
    pt = safety.power_thermal(st, gon, activity, temp0)
    running &= ~pt.tripped
    f = np.where(running, pt.factor, 0.0)

    # --- outcome ----------------------------------------------------------------------------
    work = np.where(running, thr.work_rate * f * avail, 0.0)  # train tokens, serve requests this round
    progress = np.where(train, np.minimum(remaining, work), 0.0)
    served = np.where(train, 0.0, np.minimum(demand, work))
    with np.errstate(divide="ignore", invalid="ignore"):
        on_time = (thr.tpot_s / f <= st.slo_tpot_s) & (thr.ttft_s / f <= st.slo_ttft_s) & running
    fresh = np.minimum(np.maximum(served - queue, 0.0), arrivals)
    good = np.where(on_time & ~train, fresh, 0.0)
    attain = np.where(arrivals > 0, good / np.where(arrivals > 0, arrivals, 1.0), 1.0)
    spend = alloc * st.list_price * mult * hours
    ref = st.ref_rate * st.round_seconds
    value = np.where(ref > 0, np.where(train, progress, good) / np.where(ref > 0, ref, 1.0), 0.0)
    utility = np.where(pres, st.priority * value - st.cost_weight * spend / st.spend_norm, 0.0)

    out = Outcome(
        requested=request,
        alloc=alloc,
        gpus_on_node=gon,
        nodes_spanned=nodes,
        price=st.list_price * mult,
        restarted=restarted,
        precision=terms.precision if terms.precision.shape == (B, T, G) else np.broadcast_to(terms.precision, (B, T, G)).copy(),
        batch=batch if batch.shape == (B, T) else np.broadcast_to(batch, (B, T)).copy(),
        unsafe_numerics=terms.unsafe & has,
        projected=projected,
        vetoed=vetoed,
        oom=oom,
        tripped=pt.tripped,
        throttle=np.where(running, pt.factor, 0.0),
        power_throttled=pt.power_throttled & running,
        thermal_throttled=pt.thermal_throttled & running,
        mem_weights=mem.weights,
        mem_grads=mem.grads,
        mem_master=mem.master,
        mem_optimizer=mem.optimizer,
        mem_activations=mem.activations,
        mem_kv_cache=mem.kv_cache,
        mem_total=mem.total,
        mem_capacity=np.repeat(st.mem_bytes[None], B, axis=0),
        tokens_per_s=thr.tokens_per_s * f,
        multi_gpu_efficiency=np.where(alloc > 0, thr.efficiency, 0.0),
        progress_tokens=progress,
        served=served,
        slo_good=good,
        slo_attainment=attain,
        queue_next=np.where(train, 0.0, demand - served),
        remaining_next=remaining - progress,
        spend=spend,
        budget_next=budget - spend,
        value=value,
        utility=utility,
        welfare=utility.sum(-1),
        node_power_w=pt.node_power_w,
        rack_power_w=pt.rack_power_w,
        temp_next=pt.temp_next,
    )
    return out if lead == (B,) else _shape(out, lead)


def _shape(out: Outcome, lead: tuple[int, ...]) -> Outcome:
    """Every field is (B, ...) with B = prod(lead); give it the leading shape ``lead``."""
    return Outcome(**{f.name: getattr(out, f.name).reshape(lead + getattr(out, f.name).shape[1:]) for f in fields(out)})


__all__ = ["check_actions", "check_draws", "check_state", "evaluate", "evaluate_counterfactuals"]

"""One scheduling round, batched: the kernel's public API, its input checks, and the packing
of its inputs and outputs for the compiled round.

The kernel runs in two stages (``DESIGN.md`` section 5):

1. per-tenant terms that depend only on a tenant's own action (bytes, FLOPs, numerics), sums
   of per-layer-group tables built once per scenario (``cost.stage1_tables``);
2. the coupled stage over the rows of a ``present`` mask, compiled
   (:mod:`fleet_marl.kernel.engine`): the arbiter re-runs with absent tenants' GPUs back in
   the pool, then memory, throughput, power, heat, progress, money, utility and welfare.

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
from fleet_marl.kernel import engine, safety
from fleet_marl.kernel.safety import KernelInputError
from fleet_marl.kernel.static import KernelStatic
from fleet_marl.kernel.types import Actions, Draws, Outcome, RoundState, Stage1

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
    if a.ndim < len(tail) or a.shape[a.ndim - len(tail) :] != tail:
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
    bid = _field(
        "actions.bid", actions.bid, np.float64, (T,), False, np.nextafter(0.0, 1.0), MAX_BID, f"a bid multiplier in (0, {MAX_BID:g}]"
    )
    prec = _field(
        "actions.precision",
        actions.precision,
        np.int64,
        (T, G),
        True,
        0,
        catalog.N_PRECISIONS - 1,
        f"a precision code in [0, {catalog.N_PRECISIONS - 1}] ({', '.join(catalog.PRECISIONS)})",
    )
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
    lengths = {}
    for name, lo in (("prompt_tokens", 0.0), ("output_tokens", 1.0)):
        v = getattr(draws, name)
        if v is not None:
            lengths[name] = _field(f"draws.{name}", v, np.float64, (st.T,), False, lo, 1e9, f"a mean token count in [{lo:g}, 1e9]")
    return Draws(arrivals=arrivals, tiebreak=tiebreak, **lengths)


def _leads(actions: Actions, state: RoundState, draws: Draws, present) -> dict[str, tuple]:
    out = {f"actions.{f.name}": np.shape(getattr(actions, f.name))[: -2 if f.name == "precision" else -1] for f in fields(actions)}
    out.update({f"state.{f.name}": np.shape(getattr(state, f.name))[:-1] for f in fields(state)})
    out.update({f"draws.{f.name}": np.shape(getattr(draws, f.name))[:-1] for f in fields(draws) if getattr(draws, f.name) is not None})
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

    Every field of ``actions``, ``state``, ``draws`` and ``present`` ((..., T) bool, default
    all True) has a leading (batch) shape; the leading shapes broadcast to the result's. A
    tenant absent from a row asks for nothing, is granted nothing and counts 0 in that row's
    welfare. ``on_invalid='veto'`` turns an unsupported precision into a veto of that tenant
    instead of an error (useful when searching configurations). ``validate=False`` skips the
    input checks (for callers that have checked already).
    """
    if validate:
        actions, state, draws, present = _checked(st, actions, state, draws, present, on_invalid)
    if _one_row(actions, state, draws, present):
        return _evaluate_one(st, actions, state, draws, present)
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
    if full is None and _one_row(actions, state, draws, present):
        out = _evaluate_one(st, actions, state, draws, present)
        return out, out.welfare
    lead = _lead_shape(actions, state, draws, present)
    B = int(np.prod(lead)) if lead else 1
    if full is None:
        out_index = np.arange(B, dtype=np.int64)
    else:
        full = np.asarray(full, bool)
        if full.shape != (B,) or len(lead) != 1:
            raise KernelInputError(f"full: shape {full.shape}; expected ({B},), a mask over rows of a leading shape (B,), not {lead}")
        out_index = np.where(full, np.cumsum(full) - 1, -1).astype(np.int64)
    ins_i, ins_f, temp = _pack(st, actions, state, draws, present, lead, B)
    T, K = st.T, st.K
    nb = int(out_index.max(initial=-1)) + 1
    out_f = np.empty((len(engine.OF), nb, T))
    out_i = np.empty((len(engine.OI), nb, T), np.int64)
    out_b = np.empty((len(engine.OB), nb, T), np.bool_)
    gon = np.empty((nb, T, K), np.int64)
    out_k = np.empty((2, nb, K))
    rack = np.empty((nb, st.n_racks))
    welfare = np.empty(B)
    engine.evaluate_rows(*st.packed, ins_i, ins_f, temp, out_index, out_f, out_i, out_b, gon, out_k, rack, welfare)
    if full is not None:
        return _unpack(out_f, out_i, out_b, gon, out_k, rack, welfare[full], (nb,)), welfare
    out = _unpack(out_f, out_i, out_b, gon, out_k, rack, welfare, lead)
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
        actions, state, draws, _ = _checked(st, actions, state, draws, None, on_invalid)
    lead = np.broadcast_shapes(*_leads(actions, state, draws, None).values())
    if len(lead) > 1:
        raise KernelInputError(f"leading (batch) shape {lead}: expected () or (B,) for counterfactual rows")
    if lead:  # a row axis goes between the batch axis and the tenants

        def add_row_axis(obj):
            kw = {}
            for f in fields(obj):
                if getattr(obj, f.name) is None:  # a Draws' lengths left to the config
                    continue
                v = np.asarray(getattr(obj, f.name))
                tail = 2 if (type(obj) is Actions and f.name == "precision") else 1
                kw[f.name] = np.expand_dims(v, v.ndim - tail) if v.ndim > tail else v
            return type(obj)(**kw)

        actions, state, draws = add_row_axis(actions), add_row_axis(state), add_row_axis(draws)
        present = present[None]
    return evaluate(st, actions, state, draws, present, validate=False)


def stage1(st: KernelStatic, precision: np.ndarray, *, project: bool | None = None, prompt_tokens=None, output_tokens=None) -> Stage1:
    """Stage 1 of each tenant under its precision map ``precision`` (T, G), as the round
    computes it (``engine.tenant_terms``); ``project`` defaults to the scenario's safety mode,
    the request lengths ((T,) each) to each tenant's configured means."""
    prec = np.asarray(precision, np.int64)
    if prec.shape != (st.T, catalog.N_GROUPS):
        raise KernelInputError(f"precision: shape {prec.shape}; expected ({st.T}, {catalog.N_GROUPS})")
    prompt = st.prompt_tokens if prompt_tokens is None else np.broadcast_to(np.asarray(prompt_tokens, np.float64), (st.T,))
    output = st.output_tokens if output_tokens is None else np.broadcast_to(np.asarray(output_tokens, np.float64), (st.T,))
    tf, ti, tg = st.packed[:3]
    run = np.empty_like(prec)
    rows = [
        engine.tenant_terms(tf, ti, tg, t, prec[t], not st.veto if project is None else project, st.mfu, run[t], prompt[t], output[t])
        for t in range(st.T)
    ]
    return Stage1(run, *(np.array(col) for col in zip(*rows)))


def _checked(st, actions, state, draws, present, on_invalid):
    actions = check_actions(st, actions, on_invalid)
    state = check_state(st, state)
    draws = check_draws(st, draws)
    if present is not None:
        p = np.asarray(present)
        if p.dtype != bool or p.ndim < 1 or p.shape[-1] != st.T:
            raise KernelInputError(f"present: dtype {p.dtype}, shape {p.shape}; expected bool (..., {st.T})")
    _check_leading(actions, state, draws, present)
    return actions, state, draws, present


class _AllPresent(dict):
    def __missing__(self, T):
        self[T] = np.ones(T, bool)
        self[T].setflags(write=False)
        return self[T]


_ALL_PRESENT = _AllPresent()  # T -> (T,) True, read-only
_I64, _F64, _BOOL = np.dtype(np.int64), np.dtype(np.float64), np.dtype(bool)


def _one_row(actions: Actions, state: RoundState, draws: Draws, present) -> bool:
    """Are the inputs one row without a batch axis, as arrays of the compiled round's dtypes
    (what :func:`check_actions` and friends return)? Then ``engine.evaluate_one`` takes them.
    (Dtypes are compared by identity: an equal dtype that is another object takes the general path.)"""
    g, n, pa, prec = actions.gpus, actions.batch, state.prev_alloc, actions.precision
    bid, q, rem, bud, arr, tie, temp = (
        actions.bid,
        state.queue,
        state.remaining_tokens,
        state.budget_left,
        draws.arrivals,
        draws.tiebreak,
        state.temp_c,
    )
    if not (
        type(g)
        is type(n)
        is type(pa)
        is type(prec)
        is type(bid)
        is type(q)
        is type(rem)
        is type(bud)
        is type(arr)
        is type(tie)
        is type(temp)
        is np.ndarray
    ):
        return False
    p, o = draws.prompt_tokens, draws.output_tokens
    return (
        g.ndim == n.ndim == pa.ndim == bid.ndim == q.ndim == rem.ndim == bud.ndim == arr.ndim == tie.ndim == temp.ndim == prec.ndim - 1 == 1
        and g.dtype is n.dtype is pa.dtype is prec.dtype is _I64
        and bid.dtype is q.dtype is rem.dtype is bud.dtype is arr.dtype is tie.dtype is temp.dtype is _F64
        and (present is None or (type(present) is np.ndarray and present.ndim == 1 and present.dtype is _BOOL))
        and (p is None or (type(p) is np.ndarray and p.ndim == 1 and p.dtype is _F64))
        and (o is None or (type(o) is np.ndarray and o.ndim == 1 and o.dtype is _F64))
    )


def _evaluate_one(st, actions: Actions, state: RoundState, draws: Draws, present) -> Outcome:
    """The Outcome of one row of inputs that pass :func:`_one_row`, in one compiled call. The
    outputs are three flat buffers, one per dtype (:func:`_unflatten` views them as fields)."""
    T, K, R = st.T, st.K, st.n_racks
    flat = (np.empty(_NOF * T + 2 * K + R + 1), np.empty(_NOI * T + T * K, _I64), np.empty(_NOB * T, np.bool_), T, K, R)
    prompt, output = draws.prompt_tokens, draws.output_tokens
    engine.evaluate_one(
        *st.packed,
        actions.gpus,
        actions.batch,
        state.prev_alloc,
        _ALL_PRESENT[T] if present is None else present,
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
        flat[0],
        flat[1],
        flat[2],
    )
    out = object.__new__(_Packed)
    out.__dict__["_flat"] = flat
    return out


def _unflatten(flat) -> tuple:
    """The packed outputs ``(out_f, out_i, out_b, gon, out_k, rack, welfare)`` of one row, as
    views of :func:`_evaluate_one`'s flat buffers (the layout ``engine.evaluate_one`` writes)."""
    f, i, b, T, K, R = flat
    nf, ni = _NOF * T, _NOI * T
    return (
        f[:nf].reshape(_NOF, T),
        i[:ni].reshape(_NOI, T),
        b.reshape(_NOB, T),
        i[ni:].reshape(T, K),
        f[nf : nf + 2 * K].reshape(2, K),
        f[nf + 2 * K : nf + 2 * K + R],
        f[nf + 2 * K + R :].reshape(()),
    )


_NOF, _NOI, _NOB = len(engine.OF), len(engine.OI), len(engine.OB)


def _lead_shape(actions: Actions, state: RoundState, draws: Draws, present) -> tuple[int, ...]:
    # the env's calls: every field an array with one leading axis, of one length or 1 (broadcast)
    arrays = (
        actions.gpus,
        actions.bid,
        actions.batch,
        state.prev_alloc,
        state.temp_c,
        state.queue,
        state.remaining_tokens,
        state.budget_left,
        draws.arrivals,
        draws.tiebreak,
    )
    extra = [v for v in (draws.prompt_tokens, draws.output_tokens, present) if v is not None]
    if all(type(a) is np.ndarray and a.ndim == 2 for a in arrays) and all(type(v) is np.ndarray and v.ndim == 2 for v in extra):
        p = actions.precision
        if type(p) is np.ndarray and p.ndim == 3:
            lengths = {a.shape[0] for a in arrays} | {v.shape[0] for v in extra} | {p.shape[0]}
            if len(lengths) == 1 or (len(lengths) == 2 and 1 in lengths):
                return (max(lengths),)
    shapes = [
        np.shape(actions.gpus)[:-1],
        np.shape(actions.bid)[:-1],
        np.shape(actions.precision)[:-2],
        np.shape(actions.batch)[:-1],
        np.shape(state.prev_alloc)[:-1],
        np.shape(state.temp_c)[:-1],
        np.shape(state.queue)[:-1],
        np.shape(state.remaining_tokens)[:-1],
        np.shape(state.budget_left)[:-1],
        np.shape(draws.arrivals)[:-1],
        np.shape(draws.tiebreak)[:-1],
    ] + [np.shape(v)[:-1] for v in (draws.prompt_tokens, draws.output_tokens) if v is not None]
    if present is not None:
        shapes.append(np.shape(present)[:-1])
    distinct = set(shapes)
    if len(distinct) == 1:
        return shapes[0]
    distinct.discard(())
    return distinct.pop() if len(distinct) == 1 else np.broadcast_shapes(*shapes)


def _pack(st, actions: Actions, state: RoundState, draws: Draws, present, lead: tuple[int, ...], B: int):
    """The compiled round's inputs ``(ins_i, ins_f, temp)`` (``engine`` module doc)."""
    T = st.T
    flat = len(lead) <= 1

    def put(dst, x, tail):
        if flat:
            dst[...] = x  # (T,), (1, T) and (B, T) broadcast as they are
        else:
            dst[...] = np.broadcast_to(x, lead + tail).reshape((B,) + tail)

    ins_i = np.empty((len(engine.II), B, T), np.int64)
    ins_f = np.empty((len(engine.IF), B, T))
    temp = np.empty((B, st.K))
    put(ins_i[engine.I_GPUS], actions.gpus, (T,))
    put(ins_i[engine.I_BATCH], actions.batch, (T,))
    put(ins_i[engine.I_PREV], state.prev_alloc, (T,))
    put(ins_i[engine.I_PRES], True if present is None else present, (T,))
    prec = np.asarray(actions.precision)  # (..., T, G) -> (G, 1 or B, T)
    prec = prec.reshape((-1,) + prec.shape[-2:]) if flat else np.broadcast_to(prec, lead + prec.shape[-2:]).reshape((B,) + prec.shape[-2:])
    ins_i[engine.I_PREC :] = prec.transpose(2, 0, 1)  # (B, T, G) -> (G, B, T)
    put(ins_f[engine.F_BID], actions.bid, (T,))
    put(ins_f[engine.F_QUEUE], state.queue, (T,))
    put(ins_f[engine.F_REMAIN], state.remaining_tokens, (T,))
    put(ins_f[engine.F_BUDGET], state.budget_left, (T,))
    put(ins_f[engine.F_ARR], draws.arrivals, (T,))
    put(ins_f[engine.F_TIE], draws.tiebreak, (T,))
    put(ins_f[engine.F_PROMPT], st.prompt_tokens if draws.prompt_tokens is None else draws.prompt_tokens, (T,))
    put(ins_f[engine.F_OUT], st.output_tokens if draws.output_tokens is None else draws.output_tokens, (T,))
    put(temp, state.temp_c, (st.K,))
    return ins_i, ins_f, temp


def _unpack(out_f, out_i, out_b, gon, out_k, rack, welfare, lead: tuple[int, ...]) -> Outcome:
    """The :class:`Outcome` of leading shape ``lead`` over the compiled round's outputs: its
    fields are views of them, made on first access (:class:`_Packed`)."""
    B = welfare.shape[0]
    if lead != (B,):
        out_f, out_i, out_b, out_k = (a.reshape(a.shape[:1] + lead + a.shape[2:]) for a in (out_f, out_i, out_b, out_k))
        gon, rack, welfare = (a.reshape(lead + a.shape[1:]) for a in (gon, rack, welfare))
    out = object.__new__(_Packed)
    out.__dict__["_packed"] = (out_f, out_i, out_b, gon, out_k, rack, welfare)
    return out


_OI_NAMES = engine.OI[: engine.OI_PREC]


def _group_floats(p) -> dict:
    return dict(zip(engine.OF, p[0]))


def _group_ints(p) -> dict:
    d = dict(zip(_OI_NAMES, p[1]))
    d["precision"] = p[1][engine.OI_PREC :].transpose(tuple(range(1, p[1].ndim)) + (0,))  # (G, *lead, T) -> (*lead, T, G)
    return d


def _group_flags(p) -> dict:
    return dict(zip(engine.OB, p[2]))


def _group_nodes(p) -> dict:
    return {"gpus_on_node": p[3], "node_power_w": p[4][0], "temp_next": p[4][1], "rack_power_w": p[5], "welfare": p[6]}


def _field_groups() -> dict:
    """Field name -> the function making the views of its group (floats, ints, flags, nodes)."""
    groups = {}
    for fn, names in (
        (_group_floats, engine.OF),
        (_group_ints, _OI_NAMES + ("precision",)),
        (_group_flags, engine.OB),
        (_group_nodes, ("gpus_on_node", "node_power_w", "temp_next", "rack_power_w", "welfare")),
    ):
        groups.update(dict.fromkeys(names, fn))
    assert set(groups) == {f.name for f in fields(Outcome)}, "every Outcome field has a place in the packed outputs"
    return groups


class _Packed(Outcome):
    """An :class:`Outcome` over the compiled round's packed outputs (``_packed``): its fields
    are views made the first time one of their group (floats, ints, flags, node outputs) is
    read, so that building one costs almost nothing whichever fields the caller reads. Behaves
    as an Outcome in every other way."""

    __slots__ = ()
    _groups = _field_groups()

    def __getattr__(self, name):  # only called for fields not read yet: makes the views of the field's group
        group = _Packed._groups.get(name)
        d = self.__dict__
        packed = d.get("_packed")
        if packed is None and "_flat" in d:  # one row from _evaluate_one: its buffers as the packed outputs
            packed = d["_packed"] = _unflatten(d["_flat"])
        if group is None or packed is None:
            raise AttributeError(f"'Outcome' object has no attribute {name!r}")
        for k, v in group(packed).items():
            d.setdefault(k, v)
        return d[name]

    def row(self, i: int) -> Outcome:
        """One batch row (of a leading (B,) outcome), itself over views of the packed outputs."""
        d = self.__dict__
        if "_packed" not in d:
            return super().row(i)
        f, oi, ob, gon, k, rack, w = d["_packed"]
        out = object.__new__(_Packed)
        out.__dict__["_packed"] = (f[:, i], oi[:, i], ob[:, i], gon[i], k[:, i], rack[i], w[i])
        return out


__all__ = ["check_actions", "check_draws", "check_state", "evaluate", "evaluate_counterfactuals", "evaluate_welfare", "stage1"]

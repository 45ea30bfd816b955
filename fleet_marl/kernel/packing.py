"""The compiled round's inputs and outputs as arrays: a round's :class:`Actions`,
:class:`RoundState` and :class:`Draws` packed into the rows ``engine.round_rows`` reads
(:func:`pack`, of the leading shape :func:`lead_shape` finds), and the :class:`Outcome` over
the packed outputs it writes (:func:`outcome_of`, or :func:`outcome_of_flat` over the three
flat buffers of ``engine.round_one``), whose fields are views made on first access. The
layouts are :mod:`fleet_marl.kernel.layout`'s."""

from __future__ import annotations

import threading
from dataclasses import fields

import numpy as np

from fleet_marl.kernel import layout
from fleet_marl.kernel.types import Actions, Draws, Outcome, RoundState


class _AllPresent(dict):
    def __missing__(self, T):
        self[T] = np.ones(T, bool)
        self[T].setflags(write=False)
        return self[T]


ALL_PRESENT = _AllPresent()  # T -> (T,) True, read-only
_I64, _F64, _BOOL = np.dtype(np.int64), np.dtype(np.float64), np.dtype(bool)


def one_row(actions: Actions, state: RoundState, draws: Draws, present) -> bool:
    """Are the inputs one row without a batch axis, as arrays of the compiled round's dtypes
    (what ``checks.check_actions`` and friends return)? Then ``engine.round_one`` takes them.
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
    p, o, pp = draws.prompt_tokens, draws.output_tokens, state.prev_placement
    carried = (state.restart_left_s, state.since_ckpt_s, state.unsaved_tokens)
    return (
        g.ndim == n.ndim == pa.ndim == bid.ndim == q.ndim == rem.ndim == bud.ndim == arr.ndim == tie.ndim == temp.ndim == prec.ndim - 1 == 1
        and g.dtype is n.dtype is pa.dtype is prec.dtype is _I64
        and bid.dtype is q.dtype is rem.dtype is bud.dtype is arr.dtype is tie.dtype is temp.dtype is _F64
        and (present is None or (type(present) is np.ndarray and present.ndim == 1 and present.dtype is _BOOL))
        and (p is None or (type(p) is np.ndarray and p.ndim == 1 and p.dtype is _F64))
        and (o is None or (type(o) is np.ndarray and o.ndim == 1 and o.dtype is _F64))
        and (pp is None or (type(pp) is np.ndarray and pp.ndim == 2 and pp.dtype is _I64 and pp.flags.c_contiguous))
        and all(v is None or (type(v) is np.ndarray and v.ndim == 1 and v.dtype is _F64) for v in carried)
    )


def _unflatten(flat) -> tuple:
    """The packed outputs ``(out_f, out_i, out_b, gon, out_k, rack, welfare)`` of one row, as
    views of the flat buffers ``engine.round_one`` writes (:func:`outcome_of_flat`)."""
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


_NOF, _NOI, _NOB = len(layout.OF), len(layout.OI), len(layout.OB)


def lead_shape(actions: Actions, state: RoundState, draws: Draws, present) -> tuple[int, ...]:
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
    extra = [
        v
        for v in (draws.prompt_tokens, draws.output_tokens, present, state.restart_left_s, state.since_ckpt_s, state.unsaved_tokens)
        if v is not None
    ]
    pp = state.prev_placement
    if all(type(a) is np.ndarray and a.ndim == 2 for a in arrays) and all(type(v) is np.ndarray and v.ndim == 2 for v in extra):
        p = actions.precision
        if type(p) is np.ndarray and p.ndim == 3 and (pp is None or (type(pp) is np.ndarray and pp.ndim == 3)):
            lengths = {a.shape[0] for a in arrays} | {v.shape[0] for v in extra} | {p.shape[0]}
            if pp is not None:
                lengths.add(pp.shape[0])
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
    ] + [
        np.shape(v)[:-1]
        for v in (draws.prompt_tokens, draws.output_tokens, state.restart_left_s, state.since_ckpt_s, state.unsaved_tokens)
        if v is not None
    ]
    if present is not None:
        shapes.append(np.shape(present)[:-1])
    if pp is not None:
        shapes.append(np.shape(pp)[:-2])
    distinct = set(shapes)
    if len(distinct) == 1:
        return shapes[0]
    distinct.discard(())
    return distinct.pop() if len(distinct) == 1 else np.broadcast_shapes(*shapes)


#: Each thread's input buffers, reused from call to call (the compiled round only reads them, and
#: no output is a view of them): a batch of a thousand rows packs megabytes, which glibc serves
#: with fresh ``mmap`` pages on every call otherwise, and faulting them in cost a quarter to a third of
#: a 1024-row evaluation (``docs/benchmarks.md``). Batches whose inputs pass ``REUSE_MAX_BYTES``
#: get fresh buffers, so that one huge call does not hold its memory.
_BUFFERS = threading.local()
REUSE_MAX_BYTES = 32 << 20


def _input_buffers(B: int, T: int, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    key = (B, T, K)
    held = getattr(_BUFFERS, "held", None)
    if held is not None and held[0] == key:
        return held[1], held[2], held[3]
    bufs = (np.empty((len(layout.II), B, T), np.int64), np.empty((len(layout.IF), B, T)), np.empty((B, K)))
    if sum(b.nbytes for b in bufs) <= REUSE_MAX_BYTES:
        _BUFFERS.held = (key, *bufs)
    return bufs


def pack(st, actions: Actions, state: RoundState, draws: Draws, present, lead: tuple[int, ...], B: int):
    """The compiled round's inputs ``(ins_i, ins_f, temp, pgon)`` (the ``layout`` module doc), the
    first three in this thread's reused buffers: valid until the thread's next ``pack`` of the
    same shape. ``pgon`` is last round's placement, (1, T, K) when one for every row (zeros
    when the state does not track it), else (B, T, K)."""
    T = st.T
    flat = len(lead) <= 1

    def put(dst, x, tail):
        if flat:
            dst[...] = x  # (T,), (1, T) and (B, T) broadcast as they are
        else:
            dst[...] = np.broadcast_to(x, lead + tail).reshape((B,) + tail)

    ins_i, ins_f, temp = _input_buffers(B, T, st.K)
    put(ins_i[layout.I_GPUS], actions.gpus, (T,))
    put(ins_i[layout.I_BATCH], actions.batch, (T,))
    put(ins_i[layout.I_PREV], state.prev_alloc, (T,))
    put(ins_i[layout.I_PRES], True if present is None else present, (T,))
    prec = np.asarray(actions.precision)  # (..., T, G) -> (G, 1 or B, T)
    prec = prec.reshape((-1,) + prec.shape[-2:]) if flat else np.broadcast_to(prec, lead + prec.shape[-2:]).reshape((B,) + prec.shape[-2:])
    ins_i[layout.I_PREC :] = prec.transpose(2, 0, 1)  # (B, T, G) -> (G, B, T)
    put(ins_f[layout.F_BID], actions.bid, (T,))
    put(ins_f[layout.F_QUEUE], state.queue, (T,))
    put(ins_f[layout.F_REMAIN], state.remaining_tokens, (T,))
    put(ins_f[layout.F_BUDGET], state.budget_left, (T,))
    put(ins_f[layout.F_ARR], draws.arrivals, (T,))
    put(ins_f[layout.F_TIE], draws.tiebreak, (T,))
    put(ins_f[layout.F_PROMPT], st.prompt_tokens if draws.prompt_tokens is None else draws.prompt_tokens, (T,))
    put(ins_f[layout.F_OUT], st.output_tokens if draws.output_tokens is None else draws.output_tokens, (T,))
    for row, v in ((layout.F_RLEFT, state.restart_left_s), (layout.F_SINCE, state.since_ckpt_s), (layout.F_UNSAVED, state.unsaved_tokens)):
        put(ins_f[row], 0.0 if v is None else v, (T,))
    put(temp, state.temp_c, (st.K,))
    return ins_i, ins_f, temp, prev_placement(st, state.prev_placement, lead, B)


def prev_placement(st, pp, lead: tuple[int, ...], B: int) -> np.ndarray:
    """Last round's placement as the compiled round reads it: (1, T, K) when every row shares
    one (zeros when ``pp`` is None: nothing is kept), else (B, T, K); int64, C-ordered."""
    tail = (st.T, st.K)
    if pp is None:
        return no_placement(tail)
    pp = np.asarray(pp)
    if pp.ndim == 2 or np.prod(pp.shape[:-2], dtype=np.int64) == 1:
        return np.ascontiguousarray(pp.reshape((1,) + tail), np.int64)
    return np.ascontiguousarray(np.broadcast_to(pp, lead + tail).reshape((B,) + tail), np.int64)


class _ZerosRow(dict):
    def __missing__(self, T):
        self[T] = np.zeros(T)
        self[T].setflags(write=False)
        return self[T]


zeros_row = _ZerosRow().__getitem__  # T -> (T,) float64 zeros, read-only: a state field left None


class _NoPlacement(dict):
    def __missing__(self, tail):
        self[tail] = np.zeros((1,) + tail, np.int64)
        self[tail].setflags(write=False)
        return self[tail]


no_placement = _NoPlacement().__getitem__  # (T, K) -> (1, T, K) zeros, read-only: nothing held


def outcome_of_packed(out_f, out_i, out_b, gon, out_k, rack, welfare, lead: tuple[int, ...]) -> Outcome:
    """The :class:`Outcome` of leading shape ``lead`` over the compiled round's outputs: its
    fields are views of them, made on first access (:class:`_Packed`)."""
    B = welfare.shape[0]
    if lead != (B,):
        out_f, out_i, out_b, out_k = (a.reshape(a.shape[:1] + lead + a.shape[2:]) for a in (out_f, out_i, out_b, out_k))
        gon, rack, welfare = (a.reshape(lead + a.shape[1:]) for a in (gon, rack, welfare))
    out = object.__new__(_Packed)
    out.__dict__["_packed"] = (out_f, out_i, out_b, gon, out_k, rack, welfare)
    return out


_OI_NAMES = layout.OI[: layout.OI_PREC]


def _group_floats(p) -> dict:
    return dict(zip(layout.OF, p[0], strict=True))


def _group_ints(p) -> dict:
    d = dict(zip(_OI_NAMES, p[1], strict=False))  # the precision rows after them are one field
    d["precision"] = p[1][layout.OI_PREC :].transpose(tuple(range(1, p[1].ndim)) + (0,))  # (G, *lead, T) -> (*lead, T, G)
    return d


def _group_flags(p) -> dict:
    return dict(zip(layout.OB, p[2], strict=True))


def _group_nodes(p) -> dict:
    return {"gpus_on_node": p[3], "node_power_w": p[4][0], "temp_next": p[4][1], "rack_power_w": p[5], "welfare": p[6]}


def _field_groups() -> dict:
    """Field name -> the function making the views of its group (floats, ints, flags, nodes)."""
    groups = {}
    for fn, names in (
        (_group_floats, layout.OF),
        (_group_ints, _OI_NAMES + ("precision",)),
        (_group_flags, layout.OB),
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
        if packed is None and "_flat" in d:  # one row from engine.round_one: its buffers as the packed outputs
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


def outcome_of_flat(flat) -> Outcome:
    """The :class:`Outcome` of one row over ``(flat_f, flat_i, flat_b, T, K, R)``, the three flat
    buffers ``engine.round_one`` wrote (:func:`_unflatten` views them as fields)."""
    out = object.__new__(_Packed)
    out.__dict__["_flat"] = flat
    return out


__all__ = ["ALL_PRESENT", "lead_shape", "one_row", "outcome_of_flat", "outcome_of_packed", "pack", "zeros_row"]

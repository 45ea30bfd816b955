"""The kernel's input checks: :class:`KernelInputError` and the checks of a round's actions,
state and draws (:func:`check_actions`, :func:`check_state`, :func:`check_draws`, and
:func:`checked`, all of them with the leading shapes). Each names the field, the index, the
value and what was expected; each returns copies in the compiled round's dtypes."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from fleet_marl import catalog
from fleet_marl.errors import ClientError
from fleet_marl.kernel import safety
from fleet_marl.kernel.static import KernelStatic
from fleet_marl.kernel.types import Actions, Draws, RoundState


class KernelInputError(ClientError):
    """Bad input to the kernel. The message names the field, the index, the value and what
    was expected."""


MAX_COUNT = 1_000_000  # largest GPU count, batch or previous allocation accepted
MAX_BID = 1e6  # largest bid multiplier accepted (a million times list price)


def _field(name: str, value, dtype, tail: tuple[int, ...], integer: bool = False, lo=None, hi=None, what: str = "") -> np.ndarray:
    """Check one array: numeric, finite, trailing shape ``tail``, integer-valued if asked, in
    ``[lo, hi]``; return a copy of dtype ``dtype`` (outputs never alias the caller's arrays)."""
    try:
        a = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - np.asarray runs the input's own __array__ code, which may raise anything  # pragma: no cover
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
    for name, what in (
        ("restart_left_s", "seconds >= 0"),
        ("since_ckpt_s", "seconds >= 0"),
        ("unsaved_tokens", "a token count >= 0"),
    ):
        if getattr(state, name) is not None:
            kw[name] = _field(f"state.{name}", getattr(state, name), np.float64, (T,), False, 0, big, what)
    if state.prev_placement is not None:
        gpn = st.gpus_per_node
        kw["prev_placement"] = _field(
            "state.prev_placement", state.prev_placement, np.int64, (T, K), True, 0, gpn, f"a GPU count in [0, {gpn}] (GPUs per node)"
        )
        held = kw["prev_placement"].sum(-2)  # (..., K): no node holds more GPUs than it has
        if (held > gpn).any():
            i = tuple(int(x) for x in np.argwhere(held > gpn)[0])
            raise KernelInputError(
                f"state.prev_placement: node {i[-1]} holds {held[i]} GPUs over the tenants{' at batch index ' + str(i[:-1]) if i[:-1] else ''}; "
                f"expected at most {gpn} (GPUs per node)"
            )
        pool_of = st.node_pool[None, :] != st.pool[:, None]  # (T, K): nodes outside the tenant's pool
        if (kw["prev_placement"] * pool_of).any():
            i = tuple(int(x) for x in np.argwhere(kw["prev_placement"] * pool_of)[0])
            raise KernelInputError(
                f"state.prev_placement{list(i)} = {kw['prev_placement'][i]}: expected 0 (node {i[-1]} is not of tenant {i[-2]}'s GPU type)"
            )
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


def leads(actions: Actions, state: RoundState, draws: Draws, present) -> dict[str, tuple]:
    """Each input field's leading (batch) shape, by its name."""
    out = {f"actions.{f.name}": np.shape(getattr(actions, f.name))[: -2 if f.name == "precision" else -1] for f in fields(actions)}
    out.update(
        {
            f"state.{f.name}": np.shape(getattr(state, f.name))[: -2 if f.name == "prev_placement" else -1]
            for f in fields(state)
            if getattr(state, f.name) is not None
        }
    )
    out.update({f"draws.{f.name}": np.shape(getattr(draws, f.name))[:-1] for f in fields(draws) if getattr(draws, f.name) is not None})
    if present is not None:
        out["present"] = np.shape(present)[:-1]
    return out


def _check_leading(actions, state, draws, present) -> None:
    shapes = leads(actions, state, draws, present)
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        shown = ", ".join(f"{k} {v}" for k, v in shapes.items())
        raise KernelInputError(
            f"leading (batch) shapes do not broadcast: {shown}; expected each to be () or the same batch shape"
        ) from None


def checked(st: KernelStatic, actions: Actions, state: RoundState, draws: Draws, present, on_invalid: str):
    """The checked ``(actions, state, draws, present)`` of one call: every field, and the leading shapes."""
    actions = check_actions(st, actions, on_invalid)
    state = check_state(st, state)
    draws = check_draws(st, draws)
    if present is not None:
        p = np.asarray(present)
        if p.dtype != bool or p.ndim < 1 or p.shape[-1] != st.T:
            raise KernelInputError(f"present: dtype {p.dtype}, shape {p.shape}; expected bool (..., {st.T})")
    _check_leading(actions, state, draws, present)
    return actions, state, draws, present


__all__ = ["MAX_BID", "MAX_COUNT", "KernelInputError", "check_actions", "check_draws", "check_state", "checked", "leads"]

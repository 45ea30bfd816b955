"""A tenant's action as readable JSON: what an LLM writes, and how it is parsed and checked.

This module is core (numpy only; no PettingZoo, no OpenEnv), so ``fleet_marl`` exports
:func:`parse_tenant_action` for people who write their own rollout functions. The OpenEnv
single-tenant view (``fleet_marl.openenv``, docs/llm_agents.md) uses the same functions.

The JSON object (every field required, no other field allowed)::

    {"request_gpus": 4, "bid": "high", "batch": 32,
     "precision": {"embed": "bf16", "attn": "bf16", "mlp": "fp8", "norm": "bf16", "head": "bf16"}}

=================  ==============================================================================
field              values
=================  ==============================================================================
``request_gpus``   an integer in ``[0, max_gpus]`` (the GPUs asked for this round)
``bid``            a bid name (``lowest``, ``low``, ``list``, ``high``, ``highest`` for the default
                   five ``bid_levels`` 0.5, 0.75, 1.0, 1.5, 2.0 x list price; ``x<multiplier>``,
                   e.g. ``"x1.25"``, for other levels)
``batch``          one of ``BATCH_LEVELS``: 1, 2, 4, ..., 256 (sequences per GPU for a trainer,
                   concurrent sequences for a server)
``precision``      one precision for every group (``"bf16"``) or an object with exactly the keys
                   ``embed``, ``attn``, ``mlp``, ``norm``, ``head``; values ``fp32``, ``bf16``,
                   ``fp8``, ``int8``, ``int4``
=================  ==============================================================================

Parsing (:func:`parse_tenant_action`): the text may be at most ``MAX_CHARS`` (65,536)
characters; the JSON object starts at the first ``{`` in the text, and prose or code fences
around it are ignored; it is then validated strictly. :func:`to_indices` maps a parsed action
onto an environment's ``MultiDiscrete`` layout and :func:`check_mask` checks it against the
tenant's action mask. Every problem is a :class:`TextActionError` whose message names the
field, the value and what was expected, e.g. ``precision.mlp = 'fp4': expected one of fp32,
bf16, fp8, int8, int4``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.errors import ClientError, short_repr

#: The longest text the parser reads, in characters (64 KiB).
MAX_CHARS = 65_536
#: Batch sizes selectable by ``batch_level`` (the same as ``fleet_marl.environment.BATCH_LEVELS``).
BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Readable layer-group keys, in ``catalog.GROUPS`` order.
GROUP_KEYS: tuple[str, ...] = ("embed", "attn", "mlp", "norm", "head")
GROUP_OF_KEY = dict(zip(GROUP_KEYS, catalog.GROUPS, strict=True))
FIELDS: tuple[str, ...] = ("request_gpus", "bid", "batch", "precision")
#: The default ``arbiter.bid_levels`` and their names.
DEFAULT_BID_LEVELS: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0)
_DEFAULT_BID_NAMES = ("lowest", "low", "list", "high", "highest")
#: Bid levels as the functions take them: a sequence, or an env's ``bid_levels`` array.
BidLevels = Sequence[float] | np.ndarray

assert len(GROUP_KEYS) == catalog.N_GROUPS


class TextActionError(ClientError):
    """A tenant action text that cannot be used. ``field`` names where (``input`` for the text
    itself), ``value`` what was there and ``expected`` what would do; the message is
    ``"<field> = <value>: expected <expected>"`` (or ``"<field>: <problem>"`` for ``input``)."""

    def __init__(self, field: str, value: Any, expected: str, message: str | None = None):
        self.field, self.value, self.expected = field, value, expected
        super().__init__(message or f"{field} = {short_repr(value, 60)}: expected {expected}")


def bid_names(bid_levels: BidLevels = DEFAULT_BID_LEVELS) -> tuple[str, ...]:
    """The name of each bid level: the five words for the default levels, else ``x<level>``."""
    levels = tuple(float(b) for b in bid_levels)
    if levels == DEFAULT_BID_LEVELS:
        return _DEFAULT_BID_NAMES
    return tuple(f"x{b:g}" for b in levels)


@dataclass(frozen=True)
class TenantAction:
    """A parsed, validated tenant action (readable values, not indices)."""

    request_gpus: int
    bid: str
    batch: int
    precision: dict  # group key (embed, attn, ...) -> precision name

    def to_dict(self) -> dict:
        return {"request_gpus": self.request_gpus, "bid": self.bid, "batch": self.batch, "precision": dict(self.precision)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def extract_json_object(text: str) -> dict:
    """The JSON object that starts at the first ``{`` of ``text`` (prose and code fences
    around it are ignored). Raises :class:`TextActionError` on field ``input``."""
    if not isinstance(text, str):
        raise TextActionError("input", type(text).__name__, "a string", f"input: a {type(text).__name__}; expected a string")
    if len(text) > MAX_CHARS:
        raise TextActionError(
            "input", len(text), f"at most {MAX_CHARS} characters", f"input: {len(text)} characters; expected at most {MAX_CHARS}"
        )
    start = text.find("{")
    if start < 0:
        raise TextActionError(
            "input",
            text,
            "one JSON object",
            "input: no JSON object found; expected one JSON object such as "
            '{"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}',
        )
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise TextActionError(
            "input", text[start : start + 40], "valid JSON", f"input: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise TextActionError("input", text[start : start + 40], "valid JSON", "input: invalid JSON: nested too deeply") from None
    except ValueError:  # an integer literal of more digits than Python converts
        raise TextActionError(
            "input", text[start : start + 40], "valid JSON", "input: invalid JSON: a number too long to convert"
        ) from None
    return obj


def _key(name: str) -> str:
    """A field name as a message shows it: itself, or cut (an unknown key can be of any length)."""
    return name if len(name) <= 60 else short_repr(name, 60)


def _int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TextActionError(field, value, "an integer")
    if isinstance(value, float):
        if not np.isfinite(value) or value != int(value):
            raise TextActionError(field, value, "an integer")
        value = int(value)
    return int(value)


def validate_action_object(obj: Any, bid_levels: BidLevels = DEFAULT_BID_LEVELS, max_gpus: int | None = None) -> TenantAction:
    """Validate a decoded JSON value strictly: exactly the four fields, each of its type and
    range (``max_gpus`` bounds ``request_gpus`` when given)."""
    if not isinstance(obj, dict):
        raise TextActionError("input", obj, "a JSON object")
    unknown = [k for k in obj if k not in FIELDS]
    if unknown:
        raise TextActionError(
            _key(unknown[0]),
            obj[unknown[0]],
            f"no such field; the fields are {', '.join(FIELDS)}",
            f"{_key(unknown[0])}: unknown field; expected only {', '.join(FIELDS)}",
        )
    missing = [k for k in FIELDS if k not in obj]
    if missing:
        raise TextActionError(missing[0], None, "a value", f"{missing[0]}: missing; expected all of {', '.join(FIELDS)}")
    gpus = _int("request_gpus", obj["request_gpus"])
    hi = max_gpus if max_gpus is not None else None
    if gpus < 0 or (hi is not None and gpus > hi):
        raise TextActionError("request_gpus", gpus, f"an integer in [0, {hi}]" if hi is not None else "an integer >= 0")
    names = bid_names(bid_levels)
    bid = obj["bid"]
    if not isinstance(bid, str) or bid.strip().lower() not in names:
        raise TextActionError("bid", bid, f"one of {', '.join(names)}")
    batch = _int("batch", obj["batch"])
    if batch not in BATCH_SIZES:
        raise TextActionError("batch", batch, f"one of {', '.join(map(str, BATCH_SIZES))}")
    prec = obj["precision"]
    choices = ", ".join(catalog.PRECISIONS)
    if isinstance(prec, str):
        p = prec.strip().lower()
        if p not in catalog.PRECISION_CODE:
            raise TextActionError("precision", prec, f"one of {choices}, or an object with keys {', '.join(GROUP_KEYS)}")
        precision = dict.fromkeys(GROUP_KEYS, p)
    elif isinstance(prec, dict):
        bad = [k for k in prec if k not in GROUP_KEYS]
        if bad:
            raise TextActionError(
                f"precision.{_key(bad[0])}",
                prec[bad[0]],
                f"no such group; the groups are {', '.join(GROUP_KEYS)}",
                f"precision.{_key(bad[0])}: unknown field; expected only {', '.join(GROUP_KEYS)}",
            )
        gone = [k for k in GROUP_KEYS if k not in prec]
        if gone:
            raise TextActionError(
                f"precision.{gone[0]}", None, "a value", f"precision.{gone[0]}: missing; expected all of {', '.join(GROUP_KEYS)}"
            )
        precision = {}
        for k in GROUP_KEYS:
            v = prec[k]
            if not isinstance(v, str) or v.strip().lower() not in catalog.PRECISION_CODE:
                raise TextActionError(f"precision.{k}", v, f"one of {choices}")
            precision[k] = v.strip().lower()
    else:
        raise TextActionError("precision", prec, f"one of {choices}, or an object with keys {', '.join(GROUP_KEYS)}")
    return TenantAction(request_gpus=gpus, bid=bid.strip().lower(), batch=batch, precision=precision)


def parse_tenant_action(text: str, bid_levels: BidLevels = DEFAULT_BID_LEVELS, max_gpus: int | None = None) -> TenantAction:
    """Parse a model's answer into a :class:`TenantAction`.

    >>> a = parse_tenant_action('Sure! ```json\\n{"request_gpus": 4, "bid": "high", "batch": 32, "precision": "bf16"}\\n```')
    >>> a.request_gpus, a.bid, a.precision["mlp"]
    (4, 'high', 'bf16')

    The JSON object starts at the first ``{``; the text is at most ``MAX_CHARS`` characters.
    Pass the env's ``bid_levels`` and the tenant's ``max_gpus`` to check against a scenario
    (:func:`to_indices` and :func:`check_mask` finish the job). Raises
    :class:`TextActionError`.
    """
    return validate_action_object(extract_json_object(text), bid_levels, max_gpus)


def to_indices(action: TenantAction, bid_levels: BidLevels = DEFAULT_BID_LEVELS) -> np.ndarray:
    """The ``(8,)`` int64 ``MultiDiscrete`` indices of ``action`` (``ACTION_FIELDS`` order)."""
    out = np.empty(2 + catalog.N_GROUPS + 1, np.int64)
    out[0] = action.request_gpus
    out[1] = bid_names(bid_levels).index(action.bid)
    for g, k in enumerate(GROUP_KEYS):
        out[2 + g] = catalog.PRECISION_CODE[action.precision[k]]
    out[-1] = BATCH_SIZES.index(action.batch)
    return out


def from_indices(idx: Sequence[int] | np.ndarray, bid_levels: BidLevels = DEFAULT_BID_LEVELS) -> TenantAction:
    """The readable form of ``MultiDiscrete`` indices (the inverse of :func:`to_indices`)."""
    idx = [int(v) for v in idx]
    return TenantAction(
        request_gpus=idx[0],
        bid=bid_names(bid_levels)[idx[1]],
        batch=BATCH_SIZES[idx[-1]],
        precision={k: catalog.PRECISIONS[idx[2 + g]] for g, k in enumerate(GROUP_KEYS)},
    )


def check_mask(indices: np.ndarray, mask: Sequence[np.ndarray]) -> None:
    """Raise :class:`TextActionError` for the first choice the action mask forbids."""
    gm = np.asarray(mask[0])
    g = int(indices[0])
    if g >= gm.size or not gm[g]:
        most = int(np.flatnonzero(gm)[-1]) if gm.any() else 0
        raise TextActionError("request_gpus", g, f"at most {most} (masked: the budget left pays for no more)")
    for gi, k in enumerate(GROUP_KEYS):
        m = np.asarray(mask[2 + gi])
        p = int(indices[2 + gi])
        if not m[p]:
            ok = [catalog.PRECISIONS[j] for j in np.flatnonzero(m)]
            raise TextActionError(
                f"precision.{k}", catalog.PRECISIONS[p], f"one of {', '.join(ok)} (masked: the tenant's GPU or job kind forbids it)"
            )


def action_json_schema(
    bid_levels: BidLevels = DEFAULT_BID_LEVELS, max_gpus: int | None = None, precisions: Sequence[str] | None = None
) -> dict:
    """The JSON Schema of a tenant action (``max_gpus`` and the allowed ``precisions`` narrow it
    to one tenant)."""
    precs = list(precisions) if precisions is not None else list(catalog.PRECISIONS)
    gpus: dict = {"type": "integer", "minimum": 0, "description": "GPUs requested this round"}
    if max_gpus is not None:
        gpus["maximum"] = int(max_gpus)
    one = {"type": "string", "enum": precs}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "TenantAction",
        "type": "object",
        "additionalProperties": False,
        "required": list(FIELDS),
        "properties": {
            "request_gpus": gpus,
            "bid": {
                "type": "string",
                "enum": list(bid_names(bid_levels)),
                "description": "bid level, as multipliers of the list price: "
                + ", ".join(f"{n}={b:g}" for n, b in zip(bid_names(bid_levels), bid_levels, strict=True)),
            },
            "batch": {
                "type": "integer",
                "enum": list(BATCH_SIZES),
                "description": "train: sequences per GPU per step; serve: concurrent sequences",
            },
            "precision": {
                "oneOf": [
                    one,
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": list(GROUP_KEYS),
                        "properties": dict.fromkeys(GROUP_KEYS, one),
                    },
                ],
                "description": "one precision for every layer group, or one per group",
            },
        },
    }


__all__ = [
    "BATCH_SIZES",
    "DEFAULT_BID_LEVELS",
    "FIELDS",
    "GROUP_KEYS",
    "MAX_CHARS",
    "TenantAction",
    "TextActionError",
    "action_json_schema",
    "bid_names",
    "check_mask",
    "extract_json_object",
    "from_indices",
    "parse_tenant_action",
    "to_indices",
    "validate_action_object",
]

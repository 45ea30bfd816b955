"""The request traces of LLM serving: what their readers return (:class:`RequestTrace`,
:class:`AzureTrace`, and :class:`BurstGPTTrace` with BurstGPT's own columns) and the parsers of
the two request formats, azure and burstgpt (the table of formats is
:mod:`fleet_marl.traces.readers`'s). Each parser takes ``(path, mtime_ns, size)``, is cached on
it and returns read-only arrays in arrival order.
"""

from __future__ import annotations

import functools
from array import array
from dataclasses import dataclass

import numpy as np

from fleet_marl.traces.fields import TraceError, check_int, check_number, check_order, csv_rows, frozen_array, timestamp_ns

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: BurstGPT v1.1 (``BurstGPT_1.csv``) and the later files with session columns.
BURSTGPT_HEADERS = (
    ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
    ("Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"),
)
BURSTGPT_LOG_TYPES = ("Conversation log", "API log")


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """LLM inference requests, one entry per request, in arrival order."""

    path: str
    format: str  # the key of FORMATS that parsed it
    time_s: np.ndarray  # (requests,) float64 arrival time in seconds (the zero is the format's)
    context_tokens: np.ndarray  # (requests,) int64 prompt tokens
    generated_tokens: np.ndarray  # (requests,) int64 output tokens


class AzureTrace(RequestTrace):
    """An Azure LLM inference trace (2023 or 2024): ``time_s`` since the first row."""


@dataclass(frozen=True, eq=False, kw_only=True)
class BurstGPTTrace(RequestTrace):
    """A BurstGPT trace: ``time_s`` is the ``Timestamp`` column, seconds from 0:00 of day one."""

    models: tuple[str, ...]  # the Model names, in order of first appearance
    model: np.ndarray  # (requests,) int64 index into ``models``
    conversation: np.ndarray  # (requests,) bool: Log Type is 'Conversation log' (else 'API log')


# --- azure ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_azure(path: str, mtime_ns: int, size: int) -> AzureTrace:
    """Azure LLM inference trace, 2023 (naive timestamps, 7 fractional digits) or 2024
    (``+00:00`` offset, up to 6 digits); ``time_s`` is since the first row."""
    _, rows = csv_rows(path, (AZURE_HEADER,))
    stamps, ctx, gen = array("q"), array("q"), array("q")
    for line, (stamp, context, generated) in rows:
        ns = timestamp_ns(path, line, "TIMESTAMP", stamp, "2023-11-16 18:15:46.6805900")
        if stamps and ns < stamps[-1]:
            raise TraceError(path, line, "TIMESTAMP", stamp, "a timestamp >= the previous row's: rows in arrival order")
        stamps.append(ns)
        ctx.append(check_int(path, line, "ContextTokens", context, 1))
        gen.append(check_int(path, line, "GeneratedTokens", generated, 0))
    t = np.asarray(stamps, dtype=np.int64)
    return AzureTrace(path, "azure", frozen_array((t - t[0]) / 1e9, np.float64), frozen_array(ctx, np.int64), frozen_array(gen, np.int64))


# --- burstgpt -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def parse_burstgpt(path: str, mtime_ns: int, size: int) -> BurstGPTTrace:
    """BurstGPT (HPMLL/BurstGPT): ``Request tokens`` are the context, ``Response tokens`` the
    generated tokens (0 for a failed request, kept: it still arrived). ``Total tokens`` is
    checked to be an integer; ``Session ID`` and ``Elapsed time`` are not read."""
    header, rows = csv_rows(path, BURSTGPT_HEADERS)
    col = {c: i for i, c in enumerate(header)}
    at, mo, req, resp, tot, log = (col[c] for c in ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"))
    times, ctx, gen, model = array("d"), array("q"), array("q"), array("q")
    conversation = bytearray()
    models: dict[str, int] = {}
    prev = 0.0
    for line, row in rows:
        t = check_number(path, line, "Timestamp", row[at], "seconds from 0:00 of day one")
        check_order(path, line, "Timestamp", row[at], t, prev, "arrival")
        prev = t
        if not row[mo]:
            raise TraceError(path, line, "Model", row[mo], "a model name such as 'ChatGPT' or 'GPT-4'")
        ctx.append(check_int(path, line, "Request tokens", row[req], 0))
        gen.append(check_int(path, line, "Response tokens", row[resp], 0))
        check_int(path, line, "Total tokens", row[tot], 0)
        if row[log] not in BURSTGPT_LOG_TYPES:
            raise TraceError(path, line, "Log Type", row[log], f"one of {', '.join(map(repr, BURSTGPT_LOG_TYPES))}")
        times.append(t)
        model.append(models.setdefault(row[mo], len(models)))
        conversation.append(row[log] == BURSTGPT_LOG_TYPES[0])
    return BurstGPTTrace(
        path,
        "burstgpt",
        frozen_array(times, np.float64),
        frozen_array(ctx, np.int64),
        frozen_array(gen, np.int64),
        models=tuple(models),
        model=frozen_array(model, np.int64),
        conversation=frozen_array(np.frombuffer(bytes(conversation), dtype=bool), bool),
    )


__all__ = [
    "AZURE_HEADER",
    "BURSTGPT_HEADERS",
    "BURSTGPT_LOG_TYPES",
    "AzureTrace",
    "BurstGPTTrace",
    "RequestTrace",
    "parse_azure",
    "parse_burstgpt",
]

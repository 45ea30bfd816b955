"""What every trace parser checks a file with: :class:`TraceError`, the checks of one field
(integers, numbers, timestamps), the rows of a CSV file and the items of a JSON list, each
check naming the file, line, column and value it refused (``path:line: column = value:
expected ...``). The parsers of the formats are :mod:`fleet_marl.traces.job_traces` and
:mod:`fleet_marl.traces.request_traces`.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Iterator
from datetime import date

import numpy as np
from numpy.typing import DTypeLike

_INT = re.compile(r"[+-]?\d+")
_NUM = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{0,9}))?(?:([+-])(\d{2}):(\d{2}))?")
_WS = re.compile(r"[ \t\r\n]*")
_INT64_MAX = np.iinfo(np.int64).max
_EPOCH_DAY = date(1970, 1, 1).toordinal()


class TraceError(ValueError):
    """A trace file has a bad row. ``line`` is 1-based: a CSV header is line 1, a JSON job is
    the line its object starts on. The message is ``path:line: column = value: expected ...``."""

    def __init__(self, path: str, line: int, column: str, value: object, expected: str):
        self.path, self.line, self.column, self.value, self.expected = str(path), line, column, value, expected
        super().__init__(f"{path}:{line}: {column} = {value!r}: expected {expected}")


def frozen_array(values: object, dtype: DTypeLike) -> np.ndarray:
    """``values`` as a read-only array of ``dtype``."""
    a = np.asarray(values, dtype=dtype)
    a.setflags(write=False)
    return a


def check_int(path: str, line: int, column: str, s: str, lo: int) -> int:
    """The integer ``s``, which must be >= ``lo`` and fit an int64."""
    if not _INT.fullmatch(s) or int(s) < lo:
        raise TraceError(path, line, column, s, f"an integer >= {lo}")
    if int(s) > _INT64_MAX:
        raise TraceError(path, line, column, s, f"an integer <= {_INT64_MAX}")
    return int(s)


def check_number(path: str, line: int, column: str, s: str, what: str) -> float:
    """A finite number >= 0; ``what`` says what the column holds, for the error."""
    if not _NUM.fullmatch(s) or not math.isfinite(float(s)) or float(s) < 0:
        raise TraceError(path, line, column, s, f"a number >= 0 ({what})")
    return float(s)


def check_order(path: str, line: int, column: str, s: str, now: float, prev: float, what: str) -> None:
    """Refuse a row whose time ``now`` is earlier than the previous row's ``prev`` (rows in ``what`` order)."""
    if now < prev:
        raise TraceError(path, line, column, s, f"a time >= the previous row's ({prev:g}): rows in {what} order")


@functools.lru_cache(maxsize=4096)
def _day(y: int, mo: int, d: int) -> int:
    """Days from 1970-01-01 (ValueError for a day that does not exist)."""
    return date(y, mo, d).toordinal() - _EPOCH_DAY


def timestamp_ns(path: str, line: int, column: str, s: str, example: str) -> int:
    """Nanoseconds since 1970-01-01 UTC of 'YYYY-MM-DD HH:MM:SS[.fffffffff][+HH:MM]' (no
    offset: taken as written), for years 1970-2261 (the range of int64 nanoseconds)."""
    m = _STAMP.fullmatch(s)
    if m is None:
        raise TraceError(path, line, column, s, f"a timestamp like {example!r}")
    try:
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        oh, om = (int(m.group(9)), int(m.group(10))) if m.group(8) else (0, 0)
        if not 1970 <= y <= 2261 or h > 23 or mi > 59 or sec > 59 or oh > 23 or om > 59:
            raise ValueError
        secs = _day(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec
    except ValueError:
        raise TraceError(path, line, column, s, f"a timestamp like {example!r}") from None
    offset = (oh * 3600 + om * 60) * (-1 if m.group(8) == "-" else 1)
    return (secs - offset) * 10**9 + int((m.group(7) or "").ljust(9, "0"))


def csv_rows(
    path: str, headers: tuple[tuple[str, ...], ...], headerless: bool = False
) -> tuple[tuple[str, ...], Iterator[tuple[int, list[str]]]]:
    """The file's header (one of ``headers``) and an iterator of (line, fields) of each data
    row, which checks that the row has the header's number of fields. With ``headerless`` a
    file whose first line is a data row of ``headers[0]``'s width is read as one without a
    header. The file stays open until the iterator is exhausted or dropped."""
    fh = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - the iterator returned closes it, after this call returns
    try:
        reader = csv.reader(fh)
        first = next(reader, None)
        pending: list[tuple[int, list[str]]] = []
        if first is not None and tuple(first) in headers:
            header = tuple(first)
        elif headerless and first is not None and len(first) == len(headers[0]):
            header, pending = headers[0], [(1, first)]
        else:
            want = " or ".join(repr(",".join(h)) for h in headers)
            alt = f", or no header and rows of {len(headers[0])} fields" if headerless else ""
            raise TraceError(path, 1, "header", ",".join(first or []), f"exactly {want}{alt}")
    except BaseException:
        fh.close()
        raise

    def data_rows() -> Iterator[tuple[int, list[str]]]:
        with fh:
            n = 0
            for line, row in pending:
                n += 1
                yield line, row
            for row in reader:
                if len(row) != len(header):
                    raise TraceError(path, reader.line_num, "row", ",".join(row), f"{len(header)} fields ({','.join(header)})")
                n += 1
                yield reader.line_num, row
            if n == 0:
                raise TraceError(path, reader.line_num + 1, "row", "", "at least one data row after the header")

    return header, data_rows()


def _skip_space(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not JSON whitespace."""
    m = _WS.match(text, i)
    return i if m is None else m.end()  # the pattern matches the empty string: never None


def json_items(path: str) -> Iterator[tuple[int, object]]:
    """Yield (line, element) for each element of the JSON list that is the whole file."""
    with open(path, encoding="utf-8-sig") as fh:
        text = fh.read()
    dec = json.JSONDecoder()
    i = _skip_space(text, 0)
    if text[i : i + 1] != "[":
        raise TraceError(path, 1 + text.count("\n", 0, i), "file", text[i : i + 20], "a JSON list of jobs, starting with '['")
    i = _skip_space(text, i + 1)
    line, last, n = 1, 0, 0
    while text[i : i + 1] != "]":
        line += text.count("\n", last, i)
        last = i
        n += 1
        try:
            item, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise TraceError(path, e.lineno, "json", text[e.pos : e.pos + 20], f"valid JSON ({e.msg})") from None
        yield line, item
        i = _skip_space(text, i)
        if text[i : i + 1] == ",":
            i = _skip_space(text, i + 1)
        elif text[i : i + 1] != "]":
            raise TraceError(path, 1 + text.count("\n", 0, i), "json", text[i : i + 20], "',' or ']' after a job")
    if n == 0:
        raise TraceError(path, 1 + text.count("\n", 0, i), "file", "[]", "at least one job in the list")
    j = _skip_space(text, i + 1)
    if j < len(text):
        raise TraceError(path, 1 + text.count("\n", 0, j), "json", text[j : j + 20], "nothing after the list's ']'")


__all__ = ["TraceError", "check_int", "check_number", "check_order", "csv_rows", "frozen_array", "json_items", "timestamp_ns"]

"""The studies' resumable CSV store (and their one error class, :class:`StudyError`): one row per finished run, appended and synced as it
finishes, so a killed study loses at most the runs in flight.

:func:`read_rows` reads a study CSV, :func:`append` adds rows (the header when the file is
new), :func:`rewrite` replaces a file atomically, :func:`complete` tells a whole row from one
a kill cut short (its key columns and its last column are filled).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path


class StudyError(ValueError):
    """A bad study setting or output folder: names the option, the value and what to do."""


def read_rows(path: Path) -> list[dict]:
    """The rows of a study CSV (none if the file is missing)."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def append(path: Path, columns, rows: list[dict]) -> None:
    """Append ``rows`` (the header first when the file is new) and sync them to disk."""
    new = not path.is_file() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        if new:
            w.writeheader()
        w.writerows(rows)
        f.flush()
        os.fsync(f.fileno())


def rewrite(path: Path, columns, rows: list[dict]) -> None:
    """Replace ``path`` with ``rows`` (atomically: a kill leaves the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows({c: r.get(c, "") for c in columns} for r in rows)
    tmp.replace(path)


def complete(row: dict, keys, columns, key) -> bool:
    """False for a row cut short by a kill in the middle of a write: a key column or the last
    column is empty, or ``key(row)`` fails."""
    if any(row.get(c) in (None, "") for c in (*keys, columns[-1])):
        return False
    try:
        key(row)
    except (TypeError, ValueError):
        return False
    return True


__all__ = ["StudyError", "append", "complete", "read_rows", "rewrite"]

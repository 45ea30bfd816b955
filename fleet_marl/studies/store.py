"""The studies' resumable CSV store (and their one error class, :class:`StudyError`): one row per finished run, appended and synced as it
finishes, so a killed study loses at most the runs in flight.

:func:`read_rows` reads a study CSV, :func:`append` adds rows (the header when the file is
new), :func:`rewrite` replaces a file atomically, :func:`complete` tells a whole row from one
a kill cut short (its key columns and its last column are filled).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
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


def open_folder(out: Path, settings: dict, overwrite: bool, files: tuple[str, ...]) -> None:
    """Check a study folder and record ``settings`` in its ``study.json``: a folder holding a
    study with other settings, or foreign files, is refused (:class:`StudyError` naming
    ``--out`` and what to do). Nothing is deleted unless ``overwrite``, and then only ``files``
    and study.json, after every check passed."""
    meta = out / "study.json"
    if out.exists() and not out.is_dir():
        raise StudyError(f"--out {str(out)!r}: is a file; give a folder")
    if meta.is_file() and not overwrite:
        try:
            old = json.loads(meta.read_text())
        except ValueError:
            old = None
        if old != settings:
            keys = settings.keys() | old.keys() if isinstance(old, dict) else settings.keys()  # a key either side lacks differs too
            diff = sorted(k for k in keys if not isinstance(old, dict) or old.get(k) != settings.get(k))
            raise StudyError(
                f"--out {str(out)!r} holds a study with other settings (differs in: {', '.join(diff) or 'study.json unreadable'}); "
                "resume it with the same options, pass --overwrite to start again, or give another --out"
            )
    elif out.is_dir() and any(out.iterdir()) and not meta.is_file() and not overwrite:
        raise StudyError(f"--out {str(out)!r}: folder is not empty and holds no study.json; give an empty or new folder, or --overwrite")
    if overwrite:
        for name in ("study.json", *files):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(settings, indent=2) + "\n")


def resume(
    out: Path, result_columns, curve_columns, complete: Callable[[dict, tuple], bool], key: Callable[[dict], tuple], wanted: set
) -> set:
    """The keys of the runs in ``wanted`` already in ``results.csv``; drops the rows a kill cut
    short, and the curve rows of runs without a results row (killed before it was written)."""
    results = [r for r in read_rows(out / "results.csv") if complete(r, result_columns)]
    if (out / "results.csv").is_file():
        rewrite(out / "results.csv", result_columns, results)
    done = {key(r) for r in results} & wanted
    curves = [r for r in read_rows(out / "curves.csv") if complete(r, curve_columns) and key(r) in done]
    if (out / "curves.csv").is_file():
        rewrite(out / "curves.csv", curve_columns, curves)
    return done


__all__ = ["StudyError", "append", "complete", "open_folder", "read_rows", "resume", "rewrite"]

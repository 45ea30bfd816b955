"""The outside-client matrix's table in ``docs/environment.md`` ("The client matrix"), rendered
by the publisher (``fleet-marl docs``) from ``docs/data/client_matrix.json``.

The data is every cell of the matrix as the tests' harness played it (``python -m
tests.client_harness --docs`` runs the matrix, saves it with :func:`save` and publishes):
``{"command", "clients": [{"name", "what", "tasks"}], "cells": [{"client", "task", "obs_mode",
"mask_layout", "status", "message"}]}``, ``status`` ``"runs"`` or ``"refused"`` (``message``: the
refusal, which names a combination that runs). ``tests/test_client_matrix.py`` checks that the
committed cells are what the matrix plays now, and ``tests/test_docs_data.py`` that the table
is what they render.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DATA = "docs/data/client_matrix.json"
DOC = "docs/environment.md"
START = "<!-- client-matrix:start (written by fleet-marl docs from docs/data/client_matrix.json) -->"
END = "<!-- client-matrix:end -->"
#: The table's columns: (obs_mode, mask_layout).
COLUMNS = (("flat", "dims"), ("flat", "flat"), ("dict", "dims"), ("dict", "flat"))


def _verdict(cells: list[dict]) -> str:
    """One column of one client: "runs" when it ran on every task, else the combination its
    refusal names first ("FAILS" for a mix, which the tests never commit)."""
    if cells and all(c["status"] == "runs" for c in cells):
        return "runs"
    if cells and all(c["status"] == "refused" for c in cells):
        advice = re.search(r"use (obs_mode='\w+', mask_layout='\w+')", cells[0]["message"])
        return f"refused: use `{advice.group(1)}`" if advice else "refused"
    return "FAILS"


def table(data: dict) -> str:
    """The matrix as a markdown table: a row per client (the tasks it was played on), a column
    per ``obs_mode`` / ``mask_layout``."""
    head = "| client | tasks | " + " | ".join(f"`{o}` / `{m}`" for o, m in COLUMNS) + " |"
    lines = [head, "|---" * (len(COLUMNS) + 2) + "|"]
    for client in data["clients"]:
        mine = [c for c in data["cells"] if c["client"] == client["name"]]
        row = [_verdict([c for c in mine if (c["obs_mode"], c["mask_layout"]) == col]) for col in COLUMNS]
        tasks = ", ".join(client["tasks"])
        lines.append(f"| {client['what']} | {tasks} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def block(data: dict) -> str:
    """The table between its markers."""
    return f"{START}\n{table(data)}\n{END}"


def load(root: Path) -> dict | None:
    """The committed matrix under the checkout ``root`` (None when it has none)."""
    path = Path(root) / DATA
    return json.loads(path.read_text()) if path.is_file() else None


def save(root: Path, data: dict) -> Path:
    """Write the matrix's data under ``root`` (the publisher renders the table from it), a cell a line."""
    head = json.dumps({k: v for k, v in data.items() if k != "cells"}, indent=1)
    cells = ",\n".join("  " + json.dumps(c) for c in data["cells"])
    path = Path(root) / DATA
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head[: -len("\n}")] + ',\n "cells": [\n' + cells + "\n ]\n}\n")
    return path


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The table's block under ``root`` (none without the data), for the publisher."""
    data = load(root)
    return [] if data is None else [(DOC, START, END, block(data))]


__all__ = ["COLUMNS", "DATA", "DOC", "END", "START", "block", "blocks", "load", "save", "table"]

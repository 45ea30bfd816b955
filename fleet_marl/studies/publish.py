"""``fleet-marl docs``: every generated block of the README and ``docs/``, rendered from the data
committed under ``docs/data/``.

A generated block sits between two markers (``<!-- NAME:start -->`` and ``<!-- NAME:end -->``)
and is rendered from data alone; the text around it is the authors'. :data:`RENDERERS` names
the modules that render blocks, as strings (so that a command that saves data, such as
``python -m fleet_marl.studies.protocols --docs``, can call the publisher without a circle); each
has ``blocks(root) -> [(doc, start, end, text), ...]``:

==========================================  ========================================================
``fleet_marl.evaluation.baselines``         the baseline table (README, results.md) from
                                            ``docs/data/baselines.json``
``fleet_marl.studies.learned``              the learned rows (README, results.md, training.md)
                                            from ``docs/data/learned/``
``fleet_marl.studies.protocols``            results.md's protocol tables from ``docs/data/protocols/``
``fleet_marl.studies.credit.report``        the credit study's blocks of credit_assignment.md from
                                            ``docs/data/credit_study*/``
``fleet_marl.studies.credit.first_study``   the first study's blocks from ``docs/data/credit_assignment*/``
``fleet_marl.studies.manifest``             ``openenv.yaml``'s declared task count, from the task registry
``fleet_marl.studies.coupling_command``     environment.md's coupling table, from ``docs/data/coupling.json``
``fleet_marl.studies.client_matrix``        environment.md's client table, from ``docs/data/client_matrix.json``
``fleet_marl.studies.suite_command``        suite.md's coupling table, from ``docs/data/suite_coupling.json``
``fleet_marl.studies.credit_horizon``       credit_horizon.md's tables, from ``docs/data/credit_horizon.json``
==========================================  ========================================================

:func:`render` is what the docs should say, :func:`publish` writes it (only the files that
change), :func:`stale` names the files that differ (``fleet-marl docs --check``). A command that
makes new data saves it under ``docs/data/`` and then calls :func:`publish`: ``make baselines``,
``fleet-marl train --docs RUN``, ``fleet-marl compare --report --docs``. :func:`write_block` is
the one function that puts a block into a file.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_marl.errors import UsageError
from fleet_marl.training.config import checkout

#: The modules that render blocks, each with ``blocks(root)``.
RENDERERS = (
    "fleet_marl.evaluation.baselines",
    "fleet_marl.studies.learned",
    "fleet_marl.studies.protocols",
    "fleet_marl.studies.credit.report",
    "fleet_marl.studies.credit.first_study",
    "fleet_marl.studies.manifest",
    "fleet_marl.studies.coupling_command",
    "fleet_marl.studies.client_matrix",
    "fleet_marl.studies.credit_horizon",
    "fleet_marl.studies.suite_command",
)

EXAMPLES = """examples:
  fleet-marl docs            # render every generated block of README.md and docs/ from docs/data/
  fleet-marl docs --check    # exit 1, naming the files, when the docs differ from what their data renders

The data comes from the commands that make it: make baselines (docs/data/baselines.json),
fleet-marl train --docs RUN (docs/data/learned/), python -m fleet_marl.studies.protocols ... --docs
(docs/data/protocols/), fleet-marl compare --report --docs (docs/data/credit_study*/); each of them
calls this publisher after saving its data.
"""
DESCRIPTION = "Render every generated block of README.md and docs/ (tables, learned rows, study reports) from the data in docs/data/."


def write_block(path: Path, start: str, end: str, block: str) -> bool:
    """Put ``block`` (which begins with ``start`` and ends with ``end``) in place of the text
    between those markers in ``path``, or at its end when they are not there yet (the whole file
    when it is new); True when the file changed."""
    old = path.read_text() if path.is_file() else ""
    new = _replaced(old, start, end, block)
    if new == old:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    return True


def _replaced(old: str, start: str, end: str, block: str) -> str:
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if pattern.search(old):
        return pattern.sub(lambda _: block, old)
    return old.rstrip() + "\n\n" + block + "\n" if old else block + "\n"


def blocks(root: str | Path, renderers: tuple[str, ...] = RENDERERS) -> list[tuple[str, str, str, str]]:
    """Every block the data under ``root`` renders: (doc relative to ``root``, start marker, end marker, text)."""
    return [b for name in renderers for b in importlib.import_module(name).blocks(Path(root))]


def render(root: str | Path, renderers: tuple[str, ...] = RENDERERS) -> dict[Path, str]:
    """What each generated doc under ``root`` should say: path -> its text with every block rendered."""
    root = Path(root)
    out: dict[Path, str] = {}
    for doc, start, end, text in blocks(root, renderers):
        path = root / doc
        old = out[path] if path in out else (path.read_text() if path.is_file() else "")
        out[path] = _replaced(old, start, end, text)
    return out


def stale(root: str | Path, renderers: tuple[str, ...] = RENDERERS) -> list[Path]:
    """The docs under ``root`` that differ from what their data renders."""
    return [p for p, text in render(root, renderers).items() if not p.is_file() or p.read_text() != text]


def publish(root: str | Path, echo: Callable[..., Any] = print, renderers: tuple[str, ...] = RENDERERS) -> list[Path]:
    """Write every generated block under ``root`` from its data; returns the files that changed."""
    changed = []
    for path, text in render(root, renderers).items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    echo(f"updated {', '.join(str(p) for p in changed)}" if changed else "the docs already say what their data renders")
    return changed


def checkout_root(what: str) -> Path:
    """The source checkout to publish into, or a :class:`UsageError` naming ``what`` needed it."""
    root = checkout()
    if root is None:
        raise UsageError(f"{what}: this fleet_marl is not a source checkout (no README.md and docs/ to write)")
    return root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing: exit 1 naming the docs that differ from their data")
    parser.add_argument("--root", default=None, help="the checkout to render (default: the one this fleet_marl runs from)")


def run(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else checkout_root("fleet-marl docs")
    if args.check:
        bad = stale(root)
        for p in bad:
            print(f"{p}: differs from what its data renders; run 'fleet-marl docs'", file=sys.stderr)
        return 1 if bad else 0
    publish(root, echo=lambda m: print(m, file=sys.stderr))
    return 0


__all__ = [
    "DESCRIPTION",
    "EXAMPLES",
    "RENDERERS",
    "add_arguments",
    "blocks",
    "checkout_root",
    "publish",
    "render",
    "run",
    "stale",
    "write_block",
]

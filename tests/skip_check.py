"""A pytest plugin (``tests/conftest.py`` loads it): with ``FLEET_MARL_STRICT_SKIPS=1`` (``.ci/run``
sets it), a test skipped for a reason that ``tests/allowed_skips.txt`` does not list fails the
session. A broken extra (``[openenv]``, say) would otherwise skip whole modules and leave CI green.

``allowed_skips.txt``: one entry per line, ``<start of the skip reason> | <why it may skip>``;
``#`` starts a comment.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ALLOWED = Path(__file__).with_name("allowed_skips.txt")
STRICT_ENV = "FLEET_MARL_STRICT_SKIPS"


def allowed_reasons(path: Path = ALLOWED) -> list[str]:
    """The reason prefixes of ``path``; an entry without its why is an error."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        reason, sep, why = (x.strip() for x in line.partition("|"))
        if not sep or not reason or not why:
            raise pytest.UsageError(f"{path}:{n}: expected '<start of the skip reason> | <why it may skip>', got {line!r}")
        out.append(reason)
    return out


def skip_reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


_skipped: list[tuple[str, str]] = []


def pytest_runtest_logreport(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, skip_reason(report)))


def pytest_collectreport(report) -> None:  # a module skipped whole (importorskip at its top)
    if report.skipped:
        _skipped.append((report.nodeid, skip_reason(report)))


def pytest_sessionfinish(session, exitstatus) -> None:
    if os.environ.get(STRICT_ENV) != "1":
        return
    allowed = allowed_reasons()
    bad = [(node, reason) for node, reason in _skipped if not any(reason.startswith(a) for a in allowed)]
    if bad:
        lines = "\n".join(f"  {node}: {reason}" for node, reason in bad)
        print(
            f"\n{STRICT_ENV}=1: {len(bad)} test(s) skipped for a reason not in {ALLOWED.name}:\n{lines}\n"
            f"Fix what makes them skip (a missing extra: make install), or add the reason to {ALLOWED} with why it may skip."
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

"""What a command prints last: its report as JSON (``--json``), or as its own text.

>>> print_report({"welfare": 1.5}, True, print)
{
  "welfare": 1.5
}
0
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def print_report(report: Any, as_json: bool, show: Callable[[Any], None]) -> int:
    """Print ``report`` as indented JSON when ``as_json``, else ``show(report)``; returns the
    command's exit code, 0."""
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        show(report)
    return 0


__all__ = ["print_report"]

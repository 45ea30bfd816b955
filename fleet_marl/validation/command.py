"""``fleet-marl validate``: the cost model against published measurements, as a table or JSON.

Each measurement of ``measurements.yaml`` is listed with its source, hardware, model,
precision and setting, the kernel's prediction and the relative error; a measurement the
kernel cannot represent is listed with the reason. The summary gives the median and largest
error per quantity against the targets (``docs/validation.md``). The exit code is 0, or 1 with
``--check`` when a target is missed.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fleet_marl.errors import UsageError
from fleet_marl.validation.cases import GROUP_ORDER, QUANTITY_GROUP
from fleet_marl.validation.report import BY_FIELDS, breakdown, breakdown_table, table, validate

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError,)

EXAMPLES = """examples:
  fleet-marl validate
  fleet-marl validate --quantity "training memory"
  fleet-marl validate --quantity ttft_ms --json
  fleet-marl validate --summary --check
  fleet-marl validate --quantity "serving throughput" --by model,tp   # median error per model and TP degree
"""


def add_arguments(parser) -> None:
    choices = ", ".join([*GROUP_ORDER, *QUANTITY_GROUP])
    parser.add_argument("--quantity", default=None, help=f"only this quantity group or measured quantity: {choices}")
    parser.add_argument("--measurements", default=None, help="a measurements YAML in the shipped format (default: the shipped set)")
    parser.add_argument("--summary", action="store_true", help="print only the summary per quantity")
    parser.add_argument("--representable", action="store_true", help="leave out the measurements the kernel cannot represent")
    parser.add_argument("--json", action="store_true", help="print one JSON object (rows, summary, targets)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a quantity misses the targets")
    parser.add_argument(
        "--by",
        default=None,
        help=f"instead of the rows, the median error per quantity and these fields, comma-separated: {', '.join(BY_FIELDS)}",
    )


def _by(args) -> tuple[str, ...]:
    if args.by is None:
        return ()
    keys = tuple(k.strip() for k in args.by.split(","))
    bad = [k for k in keys if k not in BY_FIELDS]
    if bad or not keys:
        raise UsageError(f"--by {args.by!r}: expected comma-separated fields among {', '.join(BY_FIELDS)}")
    return keys


def _checked(args) -> None:
    if args.quantity is not None and args.quantity not in (*GROUP_ORDER, *QUANTITY_GROUP):
        raise UsageError(f"--quantity {args.quantity!r}: expected one of {', '.join([*GROUP_ORDER, *QUANTITY_GROUP])}")
    if args.measurements is not None:
        path = Path(args.measurements)
        if not path.is_file():
            raise UsageError(f"--measurements {args.measurements!r}: no such file")
        try:
            with open(path, encoding="utf-8") as fh:
                raw = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise UsageError(f"--measurements {args.measurements!r}: not valid YAML ({exc.__class__.__name__})") from exc
        if not isinstance(raw, list) or not all(isinstance(e, dict) and {"id", "quantity", "value"} <= set(e) for e in raw):
            raise UsageError(f"--measurements {args.measurements!r}: expected a list of entries with id, quantity and value")


def run(args) -> int:
    _checked(args)
    keys = _by(args)
    try:
        result = validate(args.measurements, args.quantity)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--measurements: an entry is malformed ({exc.__class__.__name__}: {exc})") from exc
    if args.representable:
        result["rows"] = [r for r in result["rows"] if r["representable"]]
    if keys:
        result["breakdown"] = breakdown(result["rows"], keys)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    elif keys:
        print(breakdown_table(result["breakdown"], keys))
    elif args.summary:
        print(table({**result, "rows": []}))
    else:
        print(table(result))
    missed = any(s.get("cases") and not s["meets_targets"] for s in result["summary"].values())
    missed = missed or bool(result["coupling"]["cases"] and not result["coupling"]["meets_targets"])
    return 1 if args.check and missed else 0

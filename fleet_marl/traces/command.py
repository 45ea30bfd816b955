"""``fleet-marl traces``: the public traces tenants replay.

``list`` prints the registry (:data:`fleet_marl.traces.TRACES`) as a table; ``fetch NAME``
downloads a full trace into the cache (:func:`fleet_marl.traces.download.fetch`), resuming a
broken download and checking its size and SHA-256.
"""

from __future__ import annotations

from pathlib import Path

from fleet_marl.errors import UsageError
from fleet_marl.traces.download import FetchError, fetch
from fleet_marl.traces.loading import read_trace
from fleet_marl.traces.locate import cache_dir
from fleet_marl.traces.registry import CACHE_ENV, DATA_DIR, TRACES, TRACES_ENV

#: User errors this command reports as ``error: ...`` (exit code 2): a failed download says
#: what to do about it.
ERRORS = (UsageError, FetchError)

DESCRIPTION = "The public traces tenants replay: the samples that ship with fleet_marl, and the full traces to fetch."

EXAMPLES = f"""examples:
  fleet-marl traces list
  fleet-marl traces fetch azure-code-2023
  fleet-marl traces fetch philly --dir /data/traces

A WorkloadSpec.trace (pattern "trace") names a file: a path, a file in ${TRACES_ENV}, a shipped
sample (for example pollux_workload-1.csv) or a registry name (its sample, else the fetched
file). Full traces go to ${CACHE_ENV}/traces (default ~/.cache/fleet_marl/traces) or --dir;
replay one by its file name, shown by 'fetch'. Licences and citations: docs/traces.md.
"""


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="action", required=True)
    ls = sub.add_parser("list", help="the known traces: sample, full size, licence, whether fetched")
    ls.add_argument("--dir", help=f"the folder fetched traces are in (default ${CACHE_ENV}/traces)")
    fe = sub.add_parser("fetch", help="download a full trace, verify it and unpack it")
    fe.add_argument("name", help=f"one of {', '.join(TRACES)}")
    fe.add_argument("--dir", help=f"download into this folder (default ${CACHE_ENV}/traces, now {cache_dir()})")


def human(n: int | None) -> str:
    """A byte count in decimal units ('4.8 kB', '1.1 GB'); '?' when unknown."""
    if n is None:
        return "?"
    x = float(n)
    for unit in ("B", "kB", "MB"):
        if x < 1000:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000
    return f"{x:.1f} GB"


def print_table(folder: Path) -> None:
    rows = [("name", "kind", "sample rows", "sample", "full", "licence", "fetched")]
    for t in TRACES.values():
        sample = t.sample_path
        rows.append(
            (
                t.name,
                t.kind,
                f"{len(read_trace(sample).time_s):,}" if sample else "-",
                human(sample.stat().st_size) if sample else "-",
                human(t.size),
                t.licence,
                "yes" if (folder / t.file).is_file() else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4}
    for r in rows:
        print("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip())
    print(f"\nsamples in {DATA_DIR}; fetched traces in {folder}")
    print("'?': the source pins no size. Fetch one with 'fleet-marl traces fetch NAME'.")


def run(args) -> int:
    folder = Path(args.dir).expanduser() if args.dir else cache_dir()
    if args.action == "list":
        print_table(folder)
        return 0
    if args.name not in TRACES:
        raise UsageError(f"traces fetch {args.name!r}: expected one of {', '.join(TRACES)}")
    info = TRACES[args.name]
    got = fetch(info, folder)
    print(f"{info.name}: {got.path} ({human(got.path.stat().st_size)}){'' if got.downloaded else ', already fetched'}")
    if not got.verified:
        print(f"not verified: {info.source} pins no size or checksum; the file's SHA-256 is {got.sha256}")
    ref = info.file if folder == cache_dir() else str(got.path)  # a bare name is looked up in the cache, not in --dir
    print(f"replay it with WorkloadSpec(pattern='trace', trace={ref!r}); licence {info.licence}, cite: {info.citation}")
    return 0


__all__ = ["DESCRIPTION", "ERRORS", "EXAMPLES", "add_arguments", "human", "print_table", "run"]

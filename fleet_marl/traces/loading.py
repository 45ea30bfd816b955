"""Reading a trace by path or name: :func:`read_trace` (any format, told apart by its first
line), one ``read_*`` per format, each the format's cached parser
(:mod:`fleet_marl.traces.readers`) on the file :func:`~fleet_marl.traces.locate.resolve_trace`
finds; and :func:`trace_stats`, a trace's summary figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from fleet_marl.traces.locate import resolve_trace
from fleet_marl.traces.readers import (
    FORMATS,
    AzureTrace,
    BurstGPTTrace,
    JobTrace,
    PolluxTrace,
    RequestTrace,
    parse_azure,
    parse_burstgpt,
    parse_helios,
    parse_pai,
    parse_philly,
    parse_pollux,
    sniff,
)


def _key(path: str | os.PathLike) -> tuple[str, int, int]:
    p = resolve_trace(path).resolve()
    st = p.stat()
    return str(p), st.st_mtime_ns, st.st_size


def read_trace(path: str | os.PathLike) -> JobTrace | RequestTrace:
    """Parse a trace of any format (told apart by its first line: :func:`readers.sniff`)."""
    key = _key(path)
    return FORMATS[sniff(key[0])].parse(*key)


_Trace = TypeVar("_Trace")


def _reader(parse: Callable[[str, int, int], _Trace], name: str, what: str) -> Callable[[str | os.PathLike], _Trace]:
    """The reader ``name`` of one format: its parser ``parse`` on a path or a trace name."""

    def read(path: str | os.PathLike) -> _Trace:
        return parse(*_key(path))

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"Parse and validate {what} (a path or a trace name)."
    return read


read_pollux: Callable[[str | os.PathLike], PolluxTrace] = _reader(parse_pollux, "read_pollux", "a Pollux job trace")
read_azure: Callable[[str | os.PathLike], AzureTrace] = _reader(parse_azure, "read_azure", "an Azure LLM inference trace, 2023 or 2024")
read_burstgpt: Callable[[str | os.PathLike], BurstGPTTrace] = _reader(parse_burstgpt, "read_burstgpt", "a BurstGPT trace")
read_philly = _reader(parse_philly, "read_philly", "Philly's ``cluster_job_log``")
read_pai = _reader(parse_pai, "read_pai", "Alibaba PAI 2020's ``pai_task_table.csv``")
read_helios = _reader(parse_helios, "read_helios", "a Helios ``cluster_log.csv``")


def trace_stats(path: str | os.PathLike) -> dict:
    """Summary figures of a trace; durations run from 0 to the last entry's time.

    Requests: ``requests``, ``duration_s``, ``rate_per_s``, ``mean_context_tokens``,
    ``mean_generated_tokens``. Jobs: ``jobs``, ``gpu_jobs`` (jobs asking for >= 1 GPU, the ones
    a training tenant replays), ``duration_s``, ``jobs_per_hour`` (of all jobs) and
    ``mean_gpus`` (over the GPU jobs).
    """
    tr = read_trace(path)
    dur = float(tr.time_s[-1])
    n = len(tr.time_s)
    per_s = n / dur if dur > 0 else float("nan")
    if isinstance(tr, RequestTrace):
        return {
            "requests": n,
            "duration_s": dur,
            "rate_per_s": per_s,
            "mean_context_tokens": float(tr.context_tokens.mean()),
            "mean_generated_tokens": float(tr.generated_tokens.mean()),
        }
    gpu = tr.gpus[tr.gpus >= 1]
    return {
        "jobs": n,
        "gpu_jobs": len(gpu),
        "duration_s": dur,
        "jobs_per_hour": per_s * 3600,
        "mean_gpus": float(gpu.mean()) if len(gpu) else float("nan"),
    }


__all__ = ["read_azure", "read_burstgpt", "read_helios", "read_pai", "read_philly", "read_pollux", "read_trace", "trace_stats"]

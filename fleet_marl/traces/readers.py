"""Parsers of public GPU-cluster and LLM-serving traces: one per format, each checking every row
and raising :class:`TraceError` (``file:line: column = value: expected ...``) at the first bad
one rather than skipping it.

=========  ========  ===================================================  ==============================
format     kind      file                                                 ``time_s``: seconds from
=========  ========  ===================================================  ==============================
pollux     jobs      CSV ``name,time,application,num_replicas,...``       the file's zero (``time``)
philly     jobs      JSON list of jobs (Philly's ``cluster_job_log``)     the earliest ``submitted_time``
pai        jobs      CSV ``pai_task_table`` (Alibaba PAI, header opt.)    the earliest task launch
helios     jobs      CSV ``job_id,user,vc,gpu_num,...,duration,queue``    the earliest ``submit_time``
azure      requests  CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``      the first row
burstgpt   requests  CSV ``Timestamp,[Session ID,...,]Model,...``         0:00 of day one (``Timestamp``)
=========  ========  ===================================================  ==============================

A job trace (:class:`JobTrace`) holds per job its submit time, the GPUs it asked for and its
run time; a request trace (:class:`RequestTrace`) holds per request its arrival time, context
(prompt) tokens and generated (output) tokens. Both are in arrival order: pollux, azure and
burstgpt files must already be (a row earlier than the one before it is an error); philly, pai
and helios are sorted, stably, by submit time. How each format's fields map onto these is in
docs/traces.md.

Each parser takes ``(path, mtime_ns, size)`` and is cached on it, so a changed file is read
again; the arrays it returns are read-only. Finding a file from a trace name is
:mod:`fleet_marl.traces.locate`'s job.

This module is the formats' table (:data:`FORMATS`, :func:`sniff`) and the one place to import
the readers from; the parsers live in :mod:`fleet_marl.traces.job_traces` (pollux, philly, pai,
helios) and :mod:`fleet_marl.traces.request_traces` (azure, burstgpt), over the field checks of
:mod:`fleet_marl.traces.fields`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleet_marl.traces.fields import TraceError
from fleet_marl.traces.job_traces import (
    HELIOS_HEADER,
    PAI_HEADER,
    POLLUX_APPLICATIONS,
    POLLUX_HEADER,
    JobTrace,
    PolluxTrace,
    parse_helios,
    parse_pai,
    parse_philly,
    parse_pollux,
)
from fleet_marl.traces.request_traces import (
    AZURE_HEADER,
    BURSTGPT_HEADERS,
    AzureTrace,
    BurstGPTTrace,
    RequestTrace,
    parse_azure,
    parse_burstgpt,
)


@dataclass(frozen=True)
class Format:
    """A trace format: its parser and how to recognise its files."""

    name: str
    kind: str  # "jobs" or "requests"
    title: str  # what the format is, for messages
    layout: str  # its header or file layout, for messages
    parse: Callable[[str, int, int], JobTrace | RequestTrace]


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("pollux", "jobs", "Pollux job trace", ",".join(POLLUX_HEADER), parse_pollux),
        Format("philly", "jobs", "Philly job log", "a JSON list of jobs (cluster_job_log)", parse_philly),
        Format(
            "pai", "jobs", "Alibaba PAI 2020 task table", ",".join(PAI_HEADER) + " (file pai_task_table*.csv, header optional)", parse_pai
        ),
        Format("helios", "jobs", "Helios job log", ",".join(HELIOS_HEADER), parse_helios),
        Format("azure", "requests", "Azure LLM inference trace", ",".join(AZURE_HEADER), parse_azure),
        Format("burstgpt", "requests", "BurstGPT trace", " or ".join(",".join(h) for h in BURSTGPT_HEADERS), parse_burstgpt),
    )
}
KIND_CLASS = {"jobs": JobTrace, "requests": RequestTrace}


def sniff(path: str) -> str:
    """The format of the file at ``path``, from its first line (a PAI task table without its
    header is recognised by its file name, ``pai_task_table*.csv``)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        first = fh.readline()
    if first.lstrip().startswith("["):
        return "philly"
    header = tuple(next(csv.reader([first]), []))
    for name, fmt_header in (("pollux", POLLUX_HEADER), ("azure", AZURE_HEADER), ("helios", HELIOS_HEADER), ("pai", PAI_HEADER)):
        if header == fmt_header:
            return name
    if header in BURSTGPT_HEADERS:
        return "burstgpt"
    if Path(path).name.startswith("pai_task_table"):
        return "pai"
    known = "; ".join(f"{f.layout} ({f.title})" for f in FORMATS.values())
    raise TraceError(path, 1, "header", ",".join(header), f"the first line of a known trace: {known}")


__all__ = [
    "AZURE_HEADER",
    "BURSTGPT_HEADERS",
    "FORMATS",
    "HELIOS_HEADER",
    "KIND_CLASS",
    "PAI_HEADER",
    "POLLUX_APPLICATIONS",
    "POLLUX_HEADER",
    "AzureTrace",
    "BurstGPTTrace",
    "Format",
    "JobTrace",
    "PolluxTrace",
    "RequestTrace",
    "TraceError",
    "parse_azure",
    "parse_burstgpt",
    "parse_helios",
    "parse_pai",
    "parse_philly",
    "parse_pollux",
    "sniff",
]

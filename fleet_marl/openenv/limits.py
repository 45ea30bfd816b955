"""What a client may ask of a served env: the server's limits, and the check of the scenario a
reset builds from a client's arguments.

A client's reset names a task and config overrides; every field whose cost grows without bound
(tenants, nodes, rounds, a tenant's GPUs, Shapley samples, arrival rates) has a server-side
limit, and a trace is named only by the registry (``fleet-marl traces list``), never by a path:
a served env opens no file a client names. docs/llm_agents.md ("Security") has the threat model.

>>> limits = ServerLimits(max_tenants=16)                    # the operator's choice
>>> check_overrides({"tenants": [{}] * 17}, limits)          # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
ConfigError: tenants = '17 tenants': expected at most 16 tenants (this server's limit, --max-tenants)

Needs no extra: the server (:mod:`fleet_marl.openenv.server`) and the views read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fleet_marl.config import ConfigError, FleetConfig
from fleet_marl.tasks import is_option, unknown_option
from fleet_marl.traces import TRACES, registry_file, registry_names
from fleet_marl.workloads import TRACE_KIND

#: The ``Host`` names a server bound to a loopback address answers by default (``fleet-marl
#: serve`` sets :attr:`ServerLimits.allowed_hosts` to them): a page elsewhere that resolves its
#: own name to 127.0.0.1 (DNS rebinding) is refused.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


@dataclass(frozen=True)
class ServerLimits:
    """The limits of one server; ``fleet-marl serve`` sets each with the option named in the
    comment. docs/llm_agents.md ("Security") says what each protects. The defaults admit every
    built-in task and the credit study's largest scenario (64 tenants on 32 nodes), keep one
    step within a few seconds on one core (``tests/test_openenv_security.py`` measures it), and
    hold the server within the 2,048 MB ``openenv.yaml`` declares whatever its clients send
    (``experiments/serve_capacity.py`` measures it)."""

    max_sessions: int = 128  # --max-sessions: live sessions of every kind, each counted once (experiments/serve_capacity.py)
    max_body_bytes: int = 256 << 10  # --max-body-bytes: an HTTP request body; a larger one gets 413, unread
    max_message_bytes: int = 256 << 10  # --max-message-bytes: one WebSocket message (an ego answer is at most 64 KiB of text)
    max_tenants: int = 64  # --max-tenants
    max_nodes: int = 64  # --max-nodes: cluster.gpu_types
    max_rounds: int = 1000  # --max-rounds: max_cycles (the episode's schedules are drawn at reset)
    max_gpus: int = 64  # --max-gpus: a tenant's max_gpus (the size of its action space and mask; the tasks use 8)
    max_shapley_samples: int = 64  # --max-shapley-samples: reward.shapley_samples (rows per step: samples x tenants)
    max_rate: float = 1e6  # --max-rate: a workload's arrival rate
    max_work: int = 8_000_000  # --max-work: one step's work, the round's and the opponents' (cost.work(); kernel row-columns)
    max_depth: int = 16  # nesting of a message's JSON (a config is 4 deep)
    max_bytes_per_s: int = 1 << 20  # --max-bytes-per-s: a WebSocket's messages are read at this pace at most (bursts of 4 messages)
    max_items: int = 10_000  # --max-items: JSON values in one message, counted before it is parsed (the largest config's reset: 783)
    http_session_idle_s: float = 60.0  # --http-session-idle: a session created over HTTP and not attached expires
    ws_idle_s: float = 900.0  # --ws-idle: a WebSocket that sends nothing for this long is closed
    max_connections: int = 256  # --max-connections: open TCP connections; one more closes the oldest idle one, else gets 503
    header_timeout_s: float = 10.0  # --header-timeout: a request's head (and a WebSocket's handshake) must arrive within it
    keep_alive_s: float = 5.0  # --keep-alive: an HTTP connection idle between requests is closed after it
    max_header_bytes: int = 8192  # --max-header-bytes: a request's line and headers together
    body_timeout_s: float = 10.0  # --body-timeout: an HTTP body must arrive within it (408 past it)
    max_bodies_bytes: int = 16 << 20  # --max-bodies-bytes: HTTP bodies held at once over every request (503 past it)
    allowed_hosts: tuple[str, ...] = ("*",)  # --allowed-host: Host header values answered ("*": any); serve: loopback names on loopback
    allowed_origins: tuple[str, ...] = ()  # --allowed-origin: browser Origins /ws accepts besides the server's own host ("*": any)
    allow_attach: bool = False  # --allow-attach: /ws?session_id=<id> may attach to a session created over HTTP

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "allow_attach":
                if not isinstance(v, bool):
                    raise ValueError(f"allow_attach = {v!r}: expected True or False")
            elif f.name in ("allowed_hosts", "allowed_origins"):
                if isinstance(v, str) or not isinstance(v, (tuple, list)) or not all(isinstance(x, str) and x.strip() for x in v):
                    raise ValueError(f"{f.name} = {v!r}: expected a tuple of non-empty strings")
                object.__setattr__(self, f.name, tuple(x.strip().lower() for x in v))
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):  # NaN fails v > 0
                raise ValueError(f"{f.name} = {v!r}: expected a finite number > 0")
            elif f.type == "int" and not isinstance(v, int):
                raise ValueError(f"{f.name} = {v!r}: expected an integer >= 1")


def _too_many(field: str, n: int, limit: int, what: str, option: str) -> ConfigError:
    return ConfigError(field, f"{n} {what}", f"at most {limit} {what} (this server's limit, {option})")


def check_overrides(config: Any, limits: ServerLimits) -> None:
    """Cheap checks of a client's raw ``config`` (overrides) before anything is built from it:
    list lengths that would make building the scenario itself expensive."""
    if not isinstance(config, dict):
        return  # the view names the bad type
    bad = next((k for k in config if not is_option(k)), None)
    if bad is not None:  # before anything walks the whole mapping
        raise unknown_option(bad, config[bad])
    tenants = config.get("tenants")
    if isinstance(tenants, (list, tuple)) and len(tenants) > limits.max_tenants:
        raise _too_many("tenants", len(tenants), limits.max_tenants, "tenants", "--max-tenants")
    cluster = config.get("cluster")
    nodes = cluster.get("gpu_types") if isinstance(cluster, dict) else None
    if isinstance(nodes, (list, tuple)) and len(nodes) > limits.max_nodes:
        raise _too_many("cluster.gpu_types", len(nodes), limits.max_nodes, "nodes", "--max-nodes")


def trace_values(data: Any) -> set[str]:
    """The ``workload.trace`` values of a FleetConfig mapping (a task's dict, a config's overrides)."""
    tenants = data.get("tenants") if isinstance(data, dict) else None
    out = set()
    for t in tenants if isinstance(tenants, (list, tuple)) else ():
        w = t.get("workload") if isinstance(t, dict) else None
        if isinstance(w, dict) and isinstance(w.get("trace"), str):
            out.add(w["trace"])
    return out


def check_config(cfg: FleetConfig, limits: ServerLimits, trusted_traces: Iterable[str] = ()) -> None:
    """Raise :class:`ConfigError` when the scenario ``cfg`` is over a limit, or names a trace that
    is not a registry trace this server has. ``trusted_traces`` are the values the operator's own
    task and config name (they are not a client's)."""
    if len(cfg.tenants) > limits.max_tenants:
        raise _too_many("tenants", len(cfg.tenants), limits.max_tenants, "tenants", "--max-tenants")
    if cfg.cluster.num_nodes > limits.max_nodes:
        raise _too_many("cluster.gpu_types", cfg.cluster.num_nodes, limits.max_nodes, "nodes", "--max-nodes")
    if cfg.max_cycles > limits.max_rounds:
        raise ConfigError("max_cycles", cfg.max_cycles, f"at most {limits.max_rounds} rounds (this server's limit, --max-rounds)")
    if cfg.reward.shapley_samples > limits.max_shapley_samples:
        raise ConfigError(
            "reward.shapley_samples",
            cfg.reward.shapley_samples,
            f"at most {limits.max_shapley_samples} (this server's limit, --max-shapley-samples)",
        )
    trusted, known = set(trusted_traces), set(registry_names())
    names = ", ".join(TRACES)
    for i, t in enumerate(cfg.tenants):
        if t.max_gpus > limits.max_gpus:
            raise ConfigError(f"tenants[{i}].max_gpus", t.max_gpus, f"at most {limits.max_gpus} (this server's limit, --max-gpus)")
        if t.workload.rate > limits.max_rate:
            raise ConfigError(
                f"tenants[{i}].workload.rate", t.workload.rate, f"at most {limits.max_rate:g} (this server's limit, --max-rate)"
            )
        trace = t.workload.trace
        if trace is None or (trace in trusted and trace not in known):
            continue  # the operator's own file (a path or a name of its default config), not a registry name
        if trace not in known:
            raise ConfigError(
                f"tenants[{i}].workload.trace",
                trace,
                f"a trace name of 'fleet-marl traces list' ({names}), not a path: a served env opens no file a client names",
            )
        info = next(info for info in TRACES.values() if trace in (info.name, info.file, info.sample))
        if info.kind != TRACE_KIND[t.kind]:
            fitting = ", ".join(n for n, other in TRACES.items() if other.kind == TRACE_KIND[t.kind])
            raise ConfigError(f"tenants[{i}].workload.trace", trace, f"a {TRACE_KIND[t.kind]} trace for a {t.kind} tenant ({fitting})")
        # a registry name -- a client's or a built-in task's own -- is read only from the registry's folders
        if Path(trace).exists() or Path(trace).is_symlink():
            raise ConfigError(
                f"tenants[{i}].workload.trace",
                trace,
                "a registry trace the server can read from its registry folders: a file of that name in the server's working "
                "directory would be read in its place (its operator removes it or starts the server in another folder)",
            )
        if registry_file(trace) is None:
            raise ConfigError(
                f"tenants[{i}].workload.trace",
                trace,
                "a trace this server has: its operator can fetch it with 'fleet-marl traces fetch' "
                f"(the shipped ones: {', '.join(n for n, info in TRACES.items() if info.sample)})",
            )


#: A JSON string (its escapes included), matched in one pass however long (the loop unrolled).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_OPEN, _CLOSE = np.zeros(256, np.int8), np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_CLOSE[[ord("]"), ord("}")]] = 1


def without_strings(text: str) -> str:
    """``text`` with every JSON string's content removed (``"..."`` becomes ``""``): what
    :func:`count_items` and :func:`json_depth` read, so a long answer's commas and brackets,
    which are text, are not counted. One regular expression in C: a millisecond a MiB or so."""
    return _JSON_STRING.sub('""', text) if '"' in text else text


def count_items(bare: str) -> int:
    """An upper bound on the JSON values of a text whose strings :func:`without_strings` removed:
    commas and opening brackets, counted without parsing."""
    return bare.count(",") + bare.count("[") + bare.count("{") + 1


def json_depth(bare: str) -> int:
    """The nesting depth of a JSON value whose strings :func:`without_strings` removed, from its
    brackets: a cumulative sum in C, whatever the text holds."""
    if bare.count("[") + bare.count("{") <= 1:
        return int("[" in bare or "{" in bare)
    b = np.frombuffer(bare.encode("utf-8", "surrogatepass"), np.uint8)
    return int(np.cumsum(_OPEN[b] - _CLOSE[b], dtype=np.int64).max(initial=0))


__all__ = [
    "LOOPBACK_HOSTS",
    "ServerLimits",
    "check_config",
    "check_overrides",
    "count_items",
    "json_depth",
    "trace_values",
    "without_strings",
]

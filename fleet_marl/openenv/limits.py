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

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from fleet_marl.config import ConfigError, FleetConfig
from fleet_marl.traces import TRACES, registry_file, registry_names
from fleet_marl.workloads import TRACE_KIND


@dataclass(frozen=True)
class ServerLimits:
    """The limits of one server; ``fleet-marl serve`` sets each with the option named in the
    comment. The defaults admit every built-in task and the credit study's largest scenario
    (64 tenants on 32 nodes) and keep the largest reset and a step of it within a second or so on
    one core (``tests/test_openenv_security.py`` measures it)."""

    max_sessions: int = 8  # --max-sessions: live sessions of every kind (WebSocket, HTTP), each counted once
    max_body_bytes: int = 1 << 20  # --max-body-bytes: an HTTP request body; a larger one gets 413, unread
    max_message_bytes: int = 1 << 20  # --max-message-bytes: one WebSocket message
    max_tenants: int = 64  # --max-tenants
    max_nodes: int = 64  # --max-nodes: cluster.gpu_types
    max_rounds: int = 1000  # --max-rounds: max_cycles (the episode's schedules are drawn at reset)
    max_gpus: int = 64  # --max-gpus: a tenant's max_gpus (the size of its action space and mask; the tasks use 8)
    max_shapley_samples: int = 64  # --max-shapley-samples: reward.shapley_samples (rows per step: samples x tenants)
    max_rate: float = 1e6  # --max-rate: a workload's arrival rate
    max_planner_work: int = 150_000  # --max-planner-work: the ego view's planner opponents (planner_work)
    max_depth: int = 16  # nesting of a message's JSON (a config is 4 deep)
    http_session_idle_s: float = 60.0  # --http-session-idle: a session created over HTTP and not attached expires
    ws_idle_s: float = 900.0  # --ws-idle: a WebSocket that sends nothing for this long is closed
    allow_attach: bool = False  # --allow-attach: /ws?session_id=<id> may attach to a session created over HTTP

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "allow_attach":
                if not isinstance(v, bool):
                    raise ValueError(f"allow_attach = {v!r}: expected True or False")
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
            continue  # the operator's own file
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
        if trace not in trusted and registry_file(trace) is None:
            raise ConfigError(
                f"tenants[{i}].workload.trace",
                trace,
                "a trace this server has: its operator can fetch it with 'fleet-marl traces fetch' "
                f"(the shipped ones: {', '.join(n for n, info in TRACES.items() if info.sample)})",
            )


#: Weight of a tenant in :func:`planner_work`: a server has five precision maps and up to nine
#: batch levels to try at each GPU count, a trainer few (its batch is the sequence's).
PLANNER_WEIGHT = {"serve": 2.0, "train": 0.25}


def planner_work(cfg: FleetConfig) -> int:
    """What one plan of the ``planner`` policy costs, in units of about 10 µs on one core:
    (tenants + nodes) x the sum over tenants of (``max_gpus`` + 1) x their weight (2 for a server,
    1/4 for a trainer). The planner tries every GPU count of every tenant, a server's with many
    more precision and batch choices, each candidate a kernel row over every tenant and node
    (``experiments/server_costs.py`` measures it: 7-10 µs a unit, so 150,000 units are 1.0-1.6 s)."""
    weights = sum((t.max_gpus + 1) * PLANNER_WEIGHT[t.kind] for t in cfg.tenants)
    return int((len(cfg.tenants) + cfg.cluster.num_nodes) * weights)


def check_opponents(opponents: str, cfg: FleetConfig, limits: ServerLimits) -> None:
    """Refuse opponents whose every step would cost more than the limits allow (the planner on
    a large scenario); a ``ValueError`` naming ``opponents``."""
    if opponents == "planner" and planner_work(cfg) > limits.max_planner_work:
        raise ValueError(
            f"opponents = 'planner': the planner's work on this scenario, {planner_work(cfg):,} ((tenants + nodes) x the "
            f"tenants' GPU counts, servers weighted 2, trainers 1/4), is over this server's limit of {limits.max_planner_work:,} (--max-planner-work); "
            "use another opponent or a smaller scenario"
        )


def check_depth(value: Any, limit: int) -> int | None:
    """The nesting depth of a JSON value if it is over ``limit``, else None (iterative: a deep
    value cannot exhaust the stack here)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return None


__all__ = ["ServerLimits", "check_config", "check_depth", "check_opponents", "check_overrides", "planner_work", "trace_values"]

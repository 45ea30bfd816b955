"""The cluster's spec: :class:`ClusterSpec`, its nodes by GPU type, racks, power cap, thermal
constants, round length, restart and checkpoint-load rates and efficiencies, and its topology
(leaf switches' uplink oversubscription, the shared storage's bandwidth); a spec can start from
a reference design of the catalog (``topology:``, :meth:`ClusterSpec.from_topology`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from fleet_marl import catalog
from fleet_marl.config.checks import ConfigError, _gpu_key, _int, _num, _tuple


@dataclass(frozen=True)
class ClusterSpec:
    """The shared cluster.

    Nodes are listed by GPU type; a rack holds ``nodes_per_rack`` consecutive nodes. Thermal
    constants drive a first-order model of each node's GPU temperature (docs/model.md §6).

    Topology (read when ``coupling.contention`` is on, docs/model.md §12.1): each GPU has its own
    NIC of ``network_gbs_per_gpu`` (rail-optimised); ``nodes_per_leaf`` consecutive nodes sit
    under full bisection below one leaf switch (or pod), whose uplinks to the rest of the
    cluster carry their GPUs' NIC bandwidth over ``uplink_oversubscription`` (1: non-blocking).
    ``nodes_per_leaf`` None means one leaf per rack (a top-of-rack switch). ``storage_gbs`` is
    the shared storage's bandwidth in GB/s that restarts' checkpoint loads share; None means no
    shared limit (each restart reads at its own loaders' and nodes' rates, as with the switch off).
    """

    gpu_types: tuple[str, ...] = ("h100-sxm", "h100-sxm")  # (node,) GPU type of each node
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    rack_power_cap_w: float = 16_000.0  # GPU power budget per rack (scenario choice)
    network_gbs_per_gpu: float = 50.0  # inter-node bandwidth per GPU, GB/s (400 Gb/s NDR)
    ambient_c: float = 25.0  # inlet air temperature (coolant supply temperature for liquid-cooled nodes)
    thermal_rise_at_tdp_c: float = 47.0  # steady-state rise over inlet of a node's hottest GPU at TDP (air-cooled HGX H100, measured)
    thermal_tau_s: float = 20.0  # first-order time constant
    throttle_temp_c: float = 87.0  # max operating temperature: clocks slow down above it
    critical_temp_c: float = 92.0  # shutdown temperature: the node trips and runs nothing
    round_seconds: float = 60.0  # one scheduling round
    restart_seconds: float = 30.0  # fixed part of a restart (process start, NCCL init), plus the checkpoint load below
    checkpoint_load_gbs_per_gpu: float = 1.56  # checkpoint read rate of one GPU's loader, GB/s (safetensors, Falcon-40B on 1 A100)
    checkpoint_load_gbs_per_node: float = 3.7  # checkpoint read rate of one node, GB/s (safetensors, BLOOM on 8 A100)
    usable_memory_fraction: float = 0.9  # of GPU memory usable by the job
    mfu: float = 0.78  # achieved share of the tensor-core peak in GEMMs (MFU is an output)
    mbu: float = 0.92  # share of HBM bandwidth of KV-cache reads and weight-only conversion (torchao, as the weights)
    comm_overlap: float = 0.5  # fraction of FSDP communication hidden behind compute (prefetch)
    uplink_oversubscription: float = 1.0  # a leaf's NIC bandwidth below over its uplinks' above (>= 1; 1 = non-blocking)
    nodes_per_leaf: int | None = None  # nodes under full bisection below one leaf switch or pod; None = one rack
    storage_gbs: float | None = None  # shared storage bandwidth, GB/s, for the whole cluster; None = no shared limit

    def __post_init__(self):
        _tuple(self, "gpu_types", _gpu_key, 1, 1024)
        _int(self, "gpus_per_node", 1, 64)
        _int(self, "nodes_per_rack", 1, 1024)
        _num(self, "rack_power_cap_w", 0.0, lo_open=True)
        _num(self, "network_gbs_per_gpu", 0.0, lo_open=True)
        _num(self, "ambient_c", -50.0, 60.0)
        _num(self, "thermal_rise_at_tdp_c", 0.0, lo_open=True)
        _num(self, "thermal_tau_s", 0.0, lo_open=True)
        _num(self, "throttle_temp_c", 0.0, 150.0)
        _num(self, "critical_temp_c", 0.0, 150.0)
        if self.critical_temp_c <= self.throttle_temp_c:
            raise ConfigError("critical_temp_c", self.critical_temp_c, f"a number > throttle_temp_c ({self.throttle_temp_c})")
        if self.throttle_temp_c <= self.ambient_c:
            raise ConfigError("throttle_temp_c", self.throttle_temp_c, f"a number > ambient_c ({self.ambient_c})")
        _num(self, "round_seconds", 0.0, lo_open=True)
        _num(self, "restart_seconds", 0.0)
        if self.restart_seconds > self.round_seconds:
            raise ConfigError("restart_seconds", self.restart_seconds, f"a number <= round_seconds ({self.round_seconds})")
        _num(self, "checkpoint_load_gbs_per_gpu", 0.0, lo_open=True)
        _num(self, "checkpoint_load_gbs_per_node", 0.0, lo_open=True)
        _num(self, "usable_memory_fraction", 0.0, 1.0, lo_open=True)
        _num(self, "mfu", 0.0, 1.0, lo_open=True)
        _num(self, "mbu", 0.0, 1.0, lo_open=True)
        _num(self, "comm_overlap", 0.0, 1.0)
        _num(self, "uplink_oversubscription", 1.0)
        if self.nodes_per_leaf is not None:
            _int(self, "nodes_per_leaf", 1, 1 << 20)
        if self.storage_gbs is not None:
            _num(self, "storage_gbs", 0.0, lo_open=True)

    @classmethod
    def migrate(cls, data: dict, path: str = "") -> dict:
        """``data`` (a ClusterSpec mapping) with a ``topology`` key replaced by the fields of
        that catalog reference design (:meth:`from_topology`); the mapping's own keys win."""
        if "topology" not in data:
            return data
        name = data["topology"]
        where = f"{path}.topology" if path else "topology"
        if not isinstance(name, str) or name not in catalog.topologies():
            raise ConfigError(where, name, f"one of the catalog's topologies ({', '.join(sorted(catalog.topologies()))})")
        base = catalog.topology(name).cluster_fields()
        return {**base, **{k: v for k, v in data.items() if k != "topology"}}

    @classmethod
    def from_topology(cls, name: str, nodes: int | None = None, **overrides: Any) -> ClusterSpec:
        """The cluster of the catalog's reference design ``name`` (``catalog/topologies.yaml``):
        its GPU type, GPUs per node, nodes per rack and per leaf, NIC bandwidth, uplink
        oversubscription and storage bandwidth, with ``nodes`` nodes (default: one leaf's) and
        any other field in ``overrides``."""
        if name not in catalog.topologies():
            raise ConfigError("topology", name, f"one of the catalog's topologies ({', '.join(sorted(catalog.topologies()))})")
        topo = catalog.topology(name)
        kw: dict[str, Any] = topo.cluster_fields()
        if nodes is not None:
            if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
                raise ConfigError("nodes", nodes, "a positive integer")
            kw["gpu_types"] = (topo.gpu_type,) * nodes
        known = {f.name for f in fields(cls)}
        for k, value in overrides.items():
            if k not in known:
                raise ConfigError(k, value, f"a known field of ClusterSpec (valid fields: {', '.join(sorted(known))})")
        kw.update(overrides)
        return cls(**kw)

    @property
    def num_nodes(self) -> int:
        return len(self.gpu_types)

    @property
    def pools(self) -> tuple[str, ...]:
        """GPU types present, in first-seen order. Each is a pool the arbiter clears."""
        return tuple(dict.fromkeys(self.gpu_types))

    @property
    def leaf_nodes(self) -> int:
        """Nodes under one leaf switch: ``nodes_per_leaf``, or a rack's."""
        return self.nodes_per_rack if self.nodes_per_leaf is None else self.nodes_per_leaf

    def capacity(self, gpu_type: str) -> int:
        return self.gpus_per_node * sum(t == gpu_type for t in self.gpu_types)


__all__ = ["ClusterSpec"]

"""The cluster's spec: :class:`ClusterSpec`, its nodes by GPU type, racks, power cap, thermal
constants, round length, restart and checkpoint-load rates and efficiencies."""

from __future__ import annotations

from dataclasses import dataclass

from fleet_marl.config.checks import ConfigError, _gpu_key, _int, _num, _tuple


@dataclass(frozen=True)
class ClusterSpec:
    """The shared cluster.

    Nodes are listed by GPU type; a rack holds ``nodes_per_rack`` consecutive nodes. Thermal
    constants drive a first-order model of each node's GPU temperature (docs/model.md §6).
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

    @property
    def num_nodes(self) -> int:
        return len(self.gpu_types)

    @property
    def pools(self) -> tuple[str, ...]:
        """GPU types present, in first-seen order. Each is a pool the arbiter clears."""
        return tuple(dict.fromkeys(self.gpu_types))

    def capacity(self, gpu_type: str) -> int:
        return self.gpus_per_node * sum(t == gpu_type for t in self.gpu_types)


__all__ = ["ClusterSpec"]

"""The scenario's spec: :class:`FleetConfig`, the cluster, the tenants and the rules, checked
together, and its dict / YAML round trip.

Each spec checks its fields in ``__post_init__`` (helpers in :mod:`fleet_marl.config.checks`); the
specs it is made of are one module per family, re-exported here: :mod:`~fleet_marl.config.cluster`
(``ClusterSpec``), :mod:`~fleet_marl.config.tenants` (``TenantSpec``, ``WorkloadSpec``) and
:mod:`~fleet_marl.config.rules` (``ArbiterSpec``, ``SafetySpec``, ``RewardSpec``, ``FairnessSpec``) and
:mod:`~fleet_marl.config.coupling` (``CouplingSpec``).
``FleetConfig`` loads the fairness knobs that moved from ``reward:`` to ``fairness:``
(``MOVED_TO_FAIRNESS``) with a ``DeprecationWarning`` naming the new key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fleet_marl import catalog
from fleet_marl.config.checks import ConfigError, _int, _tuple, deprecated, from_dict, to_dict
from fleet_marl.config.cluster import ClusterSpec
from fleet_marl.config.coupling import CouplingSpec
from fleet_marl.config.mechanisms import MECHANISMS
from fleet_marl.config.rules import REWARD_SCHEMES, ArbiterSpec, FairnessSpec, RewardSpec, SafetySpec
from fleet_marl.config.tenants import TenantSpec, WorkloadSpec
from fleet_marl.errors import short_repr

#: The most arrivals a tenant may expect in one round (``rate`` x ``round_seconds``, per hour for
#: trainers): 2^53, beyond which the Poisson draw's 64-bit count overflows and a float no longer
#: counts jobs one by one.
MAX_ARRIVALS_PER_ROUND = float(2**53)

#: Keys that moved from ``reward:`` (RewardSpec) to ``fairness:`` (FairnessSpec). The old
#: place still loads, with a ``DeprecationWarning``; a key given in both places is an error.
MOVED_TO_FAIRNESS = ("starvation_fraction", "starvation_rounds", "hoard_share")


@dataclass(frozen=True)
class FleetConfig:
    """The whole scenario: the cluster, the tenants and the rules."""

    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    tenants: tuple[TenantSpec, ...] = (TenantSpec(), TenantSpec(kind="serve"))
    arbiter: ArbiterSpec = field(default_factory=ArbiterSpec)
    safety: SafetySpec = field(default_factory=SafetySpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    fairness: FairnessSpec = field(default_factory=FairnessSpec)
    coupling: CouplingSpec = field(default_factory=CouplingSpec)
    max_cycles: int = 100

    def __post_init__(self):
        for name, cls in (
            ("cluster", ClusterSpec),
            ("arbiter", ArbiterSpec),
            ("safety", SafetySpec),
            ("reward", RewardSpec),
            ("fairness", FairnessSpec),
            ("coupling", CouplingSpec),
        ):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, getattr(self, name), f"a {cls.__name__}")

        def tenant(path, t):
            if not isinstance(t, TenantSpec):
                raise ConfigError(path, t, "a TenantSpec")
            return t

        _tuple(self, "tenants", tenant, 1, 4096)
        _int(self, "max_cycles", 1, 10_000_000)
        cl = self.cluster
        for r in range(0, cl.num_nodes, cl.nodes_per_rack):
            idle = sum(catalog.gpu(g).idle_w for g in cl.gpu_types[r : r + cl.nodes_per_rack]) * cl.gpus_per_node
            if cl.rack_power_cap_w <= idle:
                raise ConfigError(
                    "cluster.rack_power_cap_w",
                    cl.rack_power_cap_w,
                    f"a cap above the idle power of rack {r // cl.nodes_per_rack} ({idle:g} W), or nothing in it can ever run",
                )
        if self.arbiter.reserve_price > self.arbiter.bid_levels[-1]:
            raise ConfigError(
                "arbiter.reserve_price",
                self.arbiter.reserve_price,
                f"at most the highest bid level ({self.arbiter.bid_levels[-1]:g}), or no bid can ever win",
            )
        pools = self.cluster.pools
        for i, t in enumerate(self.tenants):
            per_round = t.workload.rate * self.cluster.round_seconds / (3600.0 if t.kind == "train" else 1.0)
            if per_round > MAX_ARRIVALS_PER_ROUND:
                raise ConfigError(
                    f"tenants[{i}].workload.rate",
                    t.workload.rate,
                    f"at most {MAX_ARRIVALS_PER_ROUND / self.cluster.round_seconds * (3600.0 if t.kind == 'train' else 1.0):g} "
                    f"with rounds of {self.cluster.round_seconds:g} s: at most {MAX_ARRIVALS_PER_ROUND:g} arrivals a round "
                    "(the arrival draw counts them in 64-bit integers)",
                )
            if t.tensor_parallel > self.cluster.gpus_per_node:
                raise ConfigError(
                    f"tenants[{i}].tensor_parallel",
                    t.tensor_parallel,
                    f"at most gpus_per_node ({self.cluster.gpus_per_node}): a tensor-parallel group sits inside one node",
                )
            if t.gpu_type not in pools:
                raise ConfigError(f"tenants[{i}].gpu_type", t.gpu_type, f"a GPU type present in the cluster: {', '.join(pools)}")

    # --- dict / YAML round trip ---------------------------------------------------------

    @classmethod
    def migrate(cls, data: dict, path: str = "") -> dict:
        """``data`` (a FleetConfig mapping) with the keys of ``MOVED_TO_FAIRNESS`` found under
        ``reward`` moved to ``fairness`` (a new dict; ``data`` is not changed), with a
        ``DeprecationWarning`` each; a key in both places is a :class:`ConfigError`. The
        ``backend`` key of fleet_marl 0.2 is dropped with a ``DeprecationWarning``: the kernel
        is always the compiled one now."""
        if "backend" in data:
            p = f"{path}." if path else ""
            deprecated(f"config key {p}backend is deprecated and ignored: the kernel is always compiled (numba) since fleet_marl 0.3")
            data = {k: v for k, v in data.items() if k != "backend"}
        reward = data.get("reward")
        moved = [k for k in MOVED_TO_FAIRNESS if isinstance(reward, dict) and k in reward]
        if not moved or not isinstance(reward, dict):  # (moved is empty unless reward is a dict)
            return data
        p = f"{path}." if path else ""
        fair = data.get("fairness")
        fair = {} if fair is None else fair
        data, reward = dict(data), dict(reward)
        fair = to_dict(fair) if isinstance(fair, FairnessSpec) else dict(fair) if isinstance(fair, dict) else fair
        if not isinstance(fair, dict):
            return data  # from_dict names the bad fairness field
        for k in moved:
            if k in fair:
                raise ConfigError(
                    f"{p}reward.{k}",
                    reward[k],
                    f"no value: {k} moved to {p}fairness.{k}, which is given too ({short_repr(fair[k])}); give it once, as fairness.{k}",
                )
            deprecated(
                f"config key {p}reward.{k} is deprecated: use {p}fairness.{k} (the fairness detector's knobs moved from RewardSpec to FairnessSpec)"
            )
            fair[k] = reward.pop(k)
        data["reward"], data["fairness"] = reward, fair
        return data

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FleetConfig:
        return from_dict(cls, data)

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_yaml(cls, source: str | Path) -> FleetConfig:
        """Load from a YAML file path, or from YAML text (anything containing a newline)."""
        if isinstance(source, Path) or "\n" not in str(source):
            text = Path(source).read_text(encoding="utf-8")
        else:
            text = str(source)
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ConfigError("<root>", data, "a mapping of FleetConfig fields")
        return cls.from_dict(data)


__all__ = [
    "MAX_ARRIVALS_PER_ROUND",
    "MECHANISMS",
    "MOVED_TO_FAIRNESS",
    "REWARD_SCHEMES",
    "ArbiterSpec",
    "ClusterSpec",
    "CouplingSpec",
    "FairnessSpec",
    "FleetConfig",
    "RewardSpec",
    "SafetySpec",
    "TenantSpec",
    "WorkloadSpec",
]

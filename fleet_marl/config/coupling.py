"""The couplings between tenants the model includes: :class:`CouplingSpec`.

Each switch turns on one mechanism through which a tenant's choices reach the others beyond the
arbiter's split of an oversubscribed pool (``docs/model.md`` section 12). Every switch is off by
default, which is the model of fleet_marl 0.4; a task turns on the ones it needs, and the
coupling report (``fleet-marl coupling``) measures what each contributes by turning it off.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet_marl.config.checks import _bool


@dataclass(frozen=True)
class CouplingSpec:
    """Which coupling mechanisms run.

    ``contention``: the links and the storage a tenant's collectives, checkpoint writes and
    restart loads cross are shared with the other tenants' flows on them (the cluster's
    topology: ``ClusterSpec``'s uplink oversubscription and storage bandwidth), and its step
    time grows with their load. ``queueing``: a server's requests queue when its load nears its
    capacity; its time to first token includes the wait, and its SLO attainment is the fraction
    of requests served within the SLO. ``persistent_placement``: a tenant keeps the nodes it
    ran on last round; a tenant that grows keeps them and takes the rest where there is room, one
    that shrinks gives up GPUs on its least-used nodes first, and only the GPUs nobody keeps are
    placed afresh (so a removal row moves nobody it did not free room for). ``gang``: a tenant
    runs on the GPUs of its grant its parallel layout can use, and the rest idle, paid for: a
    trainer's tensor-parallel groups of ``TenantSpec.tensor_parallel`` GPUs each sit inside one
    node, a server runs one tensor-parallel replica inside one node whose degree divides its
    model's attention heads (``docs/model.md`` section 12.4).
    """

    contention: bool = False
    queueing: bool = False
    persistent_placement: bool = False
    gang: bool = False

    def __post_init__(self):
        _bool(self, "contention")
        _bool(self, "queueing")
        _bool(self, "persistent_placement")
        _bool(self, "gang")


__all__ = ["CouplingSpec"]

"""What kernel calls cost, in one unit: a *row-column*, one batch row of one round over one
tenant or node (``experiments/server_costs.py`` times one on the machine it runs on).
A call of ``rows`` rows on a scenario of ``T`` tenants and ``N`` nodes costs
``rows * (T + N) + CALL_OVERHEAD``: the fixed part is what one call costs before its first row
(argument checks, packing, the compiled round's dispatch), which dominates the many small calls
of a search over a small scenario.

>>> kernel_work(rows=1, tenants=4, nodes=2)
3006
"""

from __future__ import annotations

#: Row-columns one kernel call costs before its first row (about 1 ms here: measured on the
#: planner's per-tenant calls over a 2-tenant scenario, experiments/server_costs.py).
CALL_OVERHEAD = 3000


def kernel_work(rows: int, tenants: int, nodes: int, calls: int = 1) -> int:
    """Row-columns of ``calls`` kernel calls evaluating ``rows`` rows in all on a scenario of
    ``tenants`` tenants and ``nodes`` nodes."""
    return int(rows) * (int(tenants) + int(nodes)) + int(calls) * CALL_OVERHEAD


__all__ = ["CALL_OVERHEAD", "kernel_work"]

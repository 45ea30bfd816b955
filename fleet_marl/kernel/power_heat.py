"""The round's power and heat stage, compiled (``docs/model.md`` section 6): each rack's power
cap and each node's first-order thermal model (:func:`power_heat`), then each tenant's clock
on the slowest node it runs on (:func:`throttle`).

* **Power**: each rack's GPU power is capped; over the cap every GPU in the rack is slowed by
  the same clock factor ``f`` so that idle + ``f^3`` x dynamic power = cap: dynamic power is
  ``C V^2 f`` and DVFS lowers the voltage with the clock (:data:`CLOCK_POWER_EXP`); a node's
  power at any clock factor is idle + ``f^3`` x its dynamic power.
* **Heat**: each node's GPU temperature follows a first-order model toward
  ``ambient + rise_at_tdp x P / TDP``; the GPUs' thermal slowdown lowers their clocks just
  enough that the round ends at the max operating temperature (a clock factor ``f_heat`` in
  [0, 1]; the node's clock ``f_cap x f_heat`` draws its cube of the dynamic power). A node that cannot stay below the shutdown temperature
  even idle trips and runs nothing (so does a node that starts the round at or above it).
"""

from __future__ import annotations

import numpy as np

from fleet_marl.kernel.jit import jit
from fleet_marl.kernel.layout import (
    N_FULL,
    N_HEAD,
    N_IDLE,
    N_RACK,
    O_THROTTLE,
    O_TPS,
    OB_PTHR,
    OB_TRIP,
    OB_TTHR,
    S_AMBIENT,
    S_CRIT,
    S_DECAY,
    S_RISE,
    S_SPAN,
    T_DYN,
)

#: Exponent of the clock in a GPU's dynamic power: ``P_dyn = C V^2 f`` and DVFS scales the voltage
#: with the clock, so ``P_dyn(f) = P_dyn(1) f^3`` (``docs/model.md`` section 6). Zeus's published
#: power-limit sweeps (You et al., NSDI 2023; ml-energy/zeus, ``summary_power_{a40,v100,rtx6000}.csv``)
#: agree: over 204 training runs capped between 60 % of the maximum limit and their uncapped draw,
#: the throughput this law predicts errs by a median of -1.0 to +1.6 % (mean |error| 2.1-2.6 %) for
#: any idle power from 0 to 60 W; the linear law ``idle + f x dynamic = cap`` errs by -10 to -16 %.
CLOCK_POWER_EXP = 3.0


@jit
def clock_power(f):
    """The share of its full-clock dynamic power a GPU draws at clock factor ``f``: ``f^3``."""
    return f * f * f


@jit
def cap_clock(headroom_w, dynamic_w):
    """The clock factor ``f`` under a power cap that leaves ``headroom_w`` above idle for
    ``dynamic_w`` of dynamic power at full clock: ``idle + f^3 x dynamic = cap``
    (:func:`clock_power`), clipped to [0, 1] (1 without dynamic power)."""
    return min(max(headroom_w / dynamic_w, 0.0), 1.0) ** (1.0 / CLOCK_POWER_EXP) if dynamic_w > 0 else 1.0


@jit
def power_heat(b, tf, nf, ni, sc, temp, activity, rg, t_nodes, n_nodes, node_dyn, rack_dyn, f_cap, f_heat, f_node, t_pred, dead, rk, rr):
    """Row ``b``'s node power and heat: each node's dynamic power from its tenants' activity on
    the GPUs they run there, ``rg`` (T, K) (with ``coupling.gang`` the ones their layouts use; an
    idle GPU draws only the idle power every node counts),
    its rack's cap factor ``f_cap``, its heat factor ``f_heat`` (the clock that ends the round at
    the max operating temperature, 1 if full clocks stay below it), ``t_pred`` the temperature
    the round would end at idle (a node trips when even that reaches shutdown), whether it was
    ``dead`` (at or past shutdown) at the start, its clock ``f_node``; the outputs ``rk`` (2, K)
    node power and next temperature, ``rr`` (R,) rack power."""
    ambient, rise, decay, crit, span = sc[S_AMBIENT], sc[S_RISE], sc[S_DECAY], sc[S_CRIT], sc[S_SPAN]
    K, R = node_dyn.shape[0], rr.shape[0]
    for k in range(K):
        node_dyn[k] = 0.0
    for t in range(activity.shape[0]):
        d = tf[t, T_DYN] * activity[t]
        for i in range(n_nodes[t]):
            k = t_nodes[t, i]
            node_dyn[k] += rg[t, k] * d
    for r in range(R):
        rack_dyn[r] = 0.0
    for k in range(K):
        rack_dyn[ni[k, N_RACK]] += node_dyn[k]
    for k in range(K):
        rd = rack_dyn[ni[k, N_RACK]]
        f_cap[k] = cap_clock(nf[k, N_HEAD], rd)
        t0 = temp[b, k]
        tss = ambient + rise * (nf[k, N_IDLE] + node_dyn[k] * clock_power(f_cap[k])) / nf[k, N_FULL]
        t_pred[k] = tss + (t0 - tss) * decay
        # the steady state that ends the round at the throttle point, the power that holds it and
        # the clock that draws it: idle + (f_cap f_heat)^3 x dynamic = hold
        tss_hold = (crit - span - t0 * decay) / (1.0 - decay)
        if t_pred[k] <= crit - span:
            fh = 1.0
        elif node_dyn[k] > 0 and f_cap[k] > 0:
            hold = (tss_hold - ambient) * nf[k, N_FULL] / rise
            fh = min(cap_clock(hold - nf[k, N_IDLE], node_dyn[k]) / f_cap[k], 1.0)
        else:
            fh = 0.0
        t_idle = ambient + rise * nf[k, N_IDLE] / nf[k, N_FULL]
        t_pred[k] = t_idle + (t0 - t_idle) * decay  # the coolest the round can end: idle
        dead[k] = t0 >= crit
        if dead[k]:  # a node already past shutdown stays off
            fh = 0.0
        f_heat[k] = fh
        f_node[k] = f_cap[k] * fh
        power = nf[k, N_IDLE] + node_dyn[k] * clock_power(f_node[k])
        rk[0, k] = power
        tss = ambient + rise * power / nf[k, N_FULL]
        rk[1, k] = tss + (t0 - tss) * decay
    for r in range(R):
        rr[r] = 0.0
    for k in range(K):
        rr[ni[k, N_RACK]] += rk[0, k]


@jit
def throttle(sc, t_nodes, n_nodes, f_node, f_cap, f_heat, t_pred, dead, running, rf, rb):
    """Each tenant's clock: the slowest of its nodes (1 without GPUs); a tenant on a node that
    trips runs nothing (``running`` becomes False). Writes its throttle (0 when not running),
    its trip, power- and thermal-throttle flags, and scales its tokens/s by the throttle."""
    crit = sc[S_CRIT]
    for t in range(running.shape[0]):
        fac = np.inf
        pthr = False
        tthr = False
        trip = False
        for i in range(n_nodes[t]):
            k = t_nodes[t, i]
            fac = min(fac, f_node[k])
            pthr = pthr or f_cap[k] < 1.0
            tthr = tthr or f_heat[k] < 1.0
            trip = trip or t_pred[k] >= crit or dead[k]
        if fac == np.inf:
            fac = 1.0
        run = running[t] and not trip
        running[t] = run
        f = fac if run else 0.0
        rb[OB_TRIP, t] = trip
        rf[O_THROTTLE, t] = f
        rb[OB_PTHR, t] = pthr and run
        rb[OB_TTHR, t] = tthr and run
        rf[O_TPS, t] = rf[O_TPS, t] * f


__all__ = ["CLOCK_POWER_EXP", "cap_clock", "clock_power", "power_heat", "throttle"]

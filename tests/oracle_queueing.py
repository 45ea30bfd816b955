"""The oracle of a server's queue (``coupling.queueing``, ``docs/model.md`` section 12.2), in numpy
over (B, T) arrays, written apart from ``fleet_marl.kernel.queueing``: the served requests'
waits (fluid backlog plus a stochastic wait), the good requests and the TTFT quantiles.

Model (the same as the kernel's, derived here again): a G/G/c slot queue (Sakasegawa's
approximation, Hopp and Spearman's VUT form, c = the batch) and DistServe's M/D/1 prefill queue,
each a wait that is zero with probability ``1 - P`` and else exponential, both merged into one
such wait by probability and mean, each mean capped by the round's horizon (a reflected
Brownian motion's mean over the round); a first-come-first-served fluid backlog on top.
"""

from __future__ import annotations

import numpy as np


def _horizon_requests(lam: np.ndarray, a: np.ndarray) -> np.ndarray:
    # mean of |B(t)| = sqrt(2 lam t / pi) for a Brownian motion of variance lam per second, averaged over t in [0, a]
    return 2.0 / 3.0 * np.sqrt(2.0 * lam * a / np.pi)


def stochastic(lam, mu, slots, d, a):
    """(P, m) of the merged wait, arrays; (0, 0) where nothing arrives."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = (lam > 0) & (mu > 0) & (a > 0)
        cap = np.where(ok, _horizon_requests(np.where(ok, lam, 0.0), np.where(ok, a, 0.0)), 0.0)
        u = np.where(ok, lam / mu, 0.0)
        below = u < 1.0
        expo = np.sqrt(2.0 * slots + 2.0) - 1.0
        p1 = np.where(below, np.exp(expo * np.log(np.where(u > 0, u, 1.0))) * (u > 0), 1.0)
        m1 = np.where(below, np.minimum(0.5 / (mu - lam), cap / mu), cap / mu)
        r = np.minimum(lam, mu) * d
        p2 = np.where(r < 1.0, r, 1.0)
        m2 = np.where(r < 1.0, np.minimum(0.5 * d / (1.0 - r), cap * d), cap * d)
        p = 1.0 - (1.0 - p1) * (1.0 - p2)
        m = np.where(p > 0, (p1 * m1 + p2 * m2) / np.where(p > 0, p, 1.0), 0.0)
    return np.where(ok, p, 0.0), np.where(ok, m, 0.0)


def fluid(q0, arrivals, mu, a, round_s):
    """Parts of the served requests: carried (count, lo, hi), new with a fluid wait (count, lo,
    hi) and new without one (count)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        live = (mu > 0) & (a > 0)
        back = np.where(live, q0 / mu, np.inf)  # seconds to serve the carried requests
        lam = np.where(live, arrivals / a, 0.0)
        rho = np.where(live, lam / mu, 0.0)
        reach = np.where((back < a) & (arrivals > 0), np.minimum(a, (a - back) / np.where(rho > 0, rho, 1.0)), 0.0)
        drain = np.where(rho < 1.0, back / (1.0 - rho), np.inf)  # when the backlog is gone
        t1 = np.minimum(drain, reach)
        w_end = back + (rho - 1.0) * t1
        carried = np.where(live, np.minimum(q0, mu * a), 0.0)
        hi1 = np.where(live, round_s + carried / np.where(live, mu, 1.0), round_s)
    n2 = np.where(live, lam * t1, 0.0)
    lo2 = np.where(live, np.minimum(back, w_end), 0.0)
    hi2 = np.where(live, np.maximum(back, w_end), 0.0)
    n3 = np.where(live, lam * (reach - t1), 0.0)
    return carried, round_s + 0.0 * carried, hi1, n2, lo2, hi2, n3


def _cdf_part(y, lo, hi, p, m):
    """P(U + W <= y), U uniform on [lo, hi] (a point if equal), W = 0 w.p. 1 - p, else Exp(mean m)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pos_m = (p > 0) & (m > 0)
        ms = np.where(pos_m, m, 1.0)
        point = np.where(pos_m, 1.0 - p * np.exp(-(y - lo) / ms), 1.0)
        width = hi - lo
        top = np.minimum(hi, y)
        frac = (top - lo) / np.where(width > 0, width, 1.0)
        # (1 / width) * integral_lo^top exp(-(y - u) / m) du
        integral = np.exp(-(y - top) / ms) * -np.expm1(-(top - lo) / ms) * ms / np.where(width > 0, width, 1.0)
        spread = np.where(pos_m, frac - p * integral, frac)
    return np.where(y < lo, 0.0, np.where(width > 0, spread, point))


def cdf(y, parts, p, m):
    n1, lo1, hi1, n2, lo2, hi2, n3 = parts
    total = n1 + n2 + n3
    s = n1 * _cdf_part(y, lo1, hi1, p, m) + n2 * _cdf_part(y, lo2, hi2, p, m) + n3 * _cdf_part(y, 0.0 * y, 0.0 * y, p, m)
    return s / np.where(total > 0, total, 1.0)


def quantile(q: float, parts, p, m, steps: int = 200):
    """The smallest wait y >= 0 with cdf(y) >= q, by bisection on every element at once."""
    lo = np.zeros_like(p)
    hi = np.ones_like(p)
    for _ in range(2000):  # grow the bracket until it holds the quantile
        short = cdf(hi, parts, p, m) < q
        if not short.any():
            break
        hi = np.where(short, 2.0 * hi, hi)
    at_zero = cdf(lo, parts, p, m) >= q
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        up = cdf(mid, parts, p, m) >= q
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return np.where(at_zero, 0.0, hi)


def prompt_work(throughput, st, terms, alloc, nodes, prompt, output):
    """One prompt's own work in a pass: the batch-1 TTFT at its prompt less that at an empty one."""
    ones = np.ones_like(alloc)
    with np.errstate(invalid="ignore"):
        full = throughput(st, terms, alloc, ones, nodes, prompt, output).ttft_s
        empty = throughput(st, terms, alloc, ones, nodes, np.zeros_like(prompt, dtype=np.float64), output).ttft_s
    return full - empty


def queue_outcome(st, ttft0, d, mu, slots, avail, queue, arrivals, tpot_ok, serving):
    """(good, ttft p50, ttft p99) of every server (``serving``) with the queue; elsewhere 0."""
    parts = fluid(queue, arrivals, mu, avail, st.round_seconds)
    served = parts[0] + parts[3] + parts[6]
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(avail > 0, arrivals / avail, 0.0)
    p, m = stochastic(lam, mu, slots, d, avail)
    some = serving & (served > 0)
    safe = tuple(np.where(some, x, 0.0) for x in parts[:6]) + (np.where(some, parts[6], 1.0),)
    p, m = np.where(some, p, 0.0), np.where(some, m, 0.0)
    good = np.where(some & tpot_ok, served * cdf(np.where(some, st.slo_ttft_s - ttft0, 0.0), safe, p, m), 0.0)
    p50 = np.where(some, ttft0 + quantile(0.5, safe, p, m), ttft0)
    p99 = np.where(some, ttft0 + quantile(0.99, safe, p, m), ttft0)
    return good, np.where(serving, p50, 0.0), np.where(serving, p99, 0.0)

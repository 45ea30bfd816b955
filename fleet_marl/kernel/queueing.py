"""A server's queue, compiled (``docs/model.md`` section 12.2): with ``coupling.queueing`` on, a
request's time to first token is the in-flight TTFT at the load carried (``roofline.serve_step``)
plus its wait in two queues, and the round's goodput is the requests served within the SLO.

* **Stochastic wait** (:func:`stochastic_wait`), below capacity: a request waits for one of the
  engine's ``c`` slots (its batch) in a G/G/c queue, Sakasegawa's approximation (Sakasegawa, "An
  approximation formula Lq = alpha rho^beta / (1 - rho)", Ann. Inst. Statist. Math. 29, 1977) in
  the G/G/c form of Hopp and Spearman's *Factory Physics* (the "VUT" equation:
  ``Wq = (ca^2 + ce^2) / 2 x u^(sqrt(2 (c + 1)) - 1) / (c (1 - u)) x te``), then for the prefill of
  its prompt, one prompt after another, in DistServe's M/D/1 queue (Zhong et al., OSDI 2024,
  eq. 1: ``Avg_TTFT = D + R D^2 / (2 (1 - R D))``), where ``D`` is the prompt's own work in a pass
  (:func:`prompt_seconds`). Arrivals are Poisson and the service deterministic within a round
  (``ca^2 = 1``, ``ce^2 = 0``). Each wait is zero with probability ``1 - P`` and else
  exponential (M/M/c's conditional wait; ``P = u^(sqrt(2 (c + 1)) - 1)`` for the slots, ``R D``
  for the prefill); the two are summed into one such mixture of the same probability of waiting
  and mean (:func:`combine`). A round of ``A`` seconds caps each queue at the mean that a
  reflected Brownian motion of the arrivals' variance ``lam`` per second reaches over it,
  averaged over the round, ``(2 / 3) sqrt(2 lam A / pi)`` requests (Harrison, *Brownian Motion
  and Stochastic Flow Systems*, 1985: ``E|B(t)| = sigma sqrt(2 t / pi)``), which keeps the wait
  finite and continuous at capacity.
* **Fluid backlog** (:func:`fluid_parts`), at and above capacity or with requests carried over:
  first come first served at the capacity ``mu``, the backlog ``Q0`` first; a request arriving
  at ``t`` waits ``max(0, Q0 / mu + (rho - 1) t)`` more, and a carried request has already waited
  the last round (``round_s``). What the round cannot serve stays in the queue (``queue_next``).
* **Goodput** (:func:`serve_queue`): the served requests whose TTFT is within the TTFT SLO (none
  when the decode step misses the TPOT SLO); the TTFT's median and 99th percentile over the
  served requests.
"""

from __future__ import annotations

import math

from fleet_marl.kernel.jit import jit, jit_inline
from fleet_marl.kernel.roofline import allreduce_seconds

#: ``(ca^2 + ce^2) / 2`` of both queues: Poisson arrivals (``ca^2 = 1``) and a deterministic
#: service (``ce^2 = 0``: a round's requests share its prompt and output lengths), as DistServe's
#: M/D/1 assumes.
VARIABILITY = 0.5
#: The most steps a TTFT quantile's search takes (each a Newton step or, failing that, a bisection).
QUANTILE_STEPS = 200


@jit_inline
def prompt_seconds(job, hw, terms, nf, nodes):
    """Seconds of one prompt's own work in a serving pass on ``nf`` GPUs over ``nodes`` nodes
    (the roofline's groups, ``roofline.serve_step``): its tokens' compute but the LM head's,
    its all-reduces' bytes, and the conversion of the weight-only weights that a pass of its
    length triggers; what its prefill adds to an empty pass (the weights are streamed anyway)."""
    if math.isinf(terms.time_per_token):
        return math.inf
    rep = terms.replicated_s * (1.0 - 1.0 / nf)
    t_prompt = (terms.time_per_token - terms.head_time_per_token) / nf + rep
    p = job.prompt_tokens
    d = p * t_prompt + allreduce_seconds(p, terms.comm_bytes, terms.tp_calls, nf, nodes, hw)
    d -= allreduce_seconds(0.0, terms.comm_bytes, terms.tp_calls, nf, nodes, hw)
    if terms.dequant_tokens > 0.0 and p >= terms.dequant_tokens:
        d += terms.dequant_bytes / nf / (hw.hbm_bw * hw.mbu)
    return d


@jit_inline
def horizon_length(lam, horizon_s):
    """Requests a queue holds on average over ``horizon_s`` seconds at capacity from empty: a
    reflected Brownian motion of variance ``lam`` per second, ``(2 / 3) sqrt(2 lam A / pi)``."""
    return (2.0 / 3.0) * math.sqrt(2.0 * lam * horizon_s / math.pi)


@jit_inline
def combine(p1, m1, p2, m2):
    """Two independent waits, each 0 with probability ``1 - p`` and else exponential of mean
    ``m``, as one of the same kind: waiting with probability ``1 - (1 - p1) (1 - p2)``, with
    the mean of the sum, ``p1 m1 + p2 m2``."""
    p = 1.0 - (1.0 - p1) * (1.0 - p2)
    w = p1 * m1 + p2 * m2
    return p, (w / p if p > 0.0 else 0.0)


@jit
def stochastic_wait(lam, mu, c, d, horizon_s):
    """``(P, m)``: a request's wait before its first token, 0 with probability ``1 - P`` and else
    exponential of mean ``m``, at ``lam`` arrivals/s on a server of capacity ``mu`` requests/s
    with ``c`` slots whose prompts take ``d`` seconds each, over ``horizon_s`` seconds (module doc).
    ``(0, 0)`` without arrivals."""
    if lam <= 0.0 or mu <= 0.0 or horizon_s <= 0.0:
        return 0.0, 0.0
    cap = horizon_length(lam, horizon_s)  # requests
    u = lam / mu
    if u < 1.0:
        p_slot = u ** (math.sqrt(2.0 * (c + 1.0)) - 1.0)
        m_slot = min(VARIABILITY / (mu - lam), cap / mu)
    else:
        p_slot, m_slot = 1.0, cap / mu
    r = min(lam, mu) * d  # the prompts' share of the engine's time
    if r < 1.0:
        p_pre, m_pre = r, min(VARIABILITY * d / (1.0 - r), cap * d)
    else:
        p_pre, m_pre = 1.0, cap * d
    return combine(p_slot, m_slot, p_pre, m_pre)


@jit
def fluid_parts(q0, arrivals, mu, avail_s, round_s):
    """The served requests in three parts, each ``(count, lo, hi)``: its fluid wait is uniform
    on ``[lo, hi]`` (``lo == hi``: all equal). First-come-first-served at ``mu`` requests/s over
    ``avail_s`` seconds, the ``q0`` carried requests first (they have waited ``round_s``
    already), then the ``arrivals``, spread evenly over the round, that the round reaches:
    those arriving while the backlog lasts, then the rest (no fluid wait)."""
    if mu <= 0.0 or avail_s <= 0.0:
        return 0.0, round_s, round_s, 0.0, 0.0, 0.0, 0.0
    n1 = min(q0, mu * avail_s)
    start = q0 / mu  # the backlog's service time
    lam = arrivals / avail_s
    rho = lam / mu
    t_s = 0.0  # arrivals before t_s are served this round
    if start < avail_s and arrivals > 0.0:
        t_s = min(avail_s, (avail_s - start) / rho)
    if rho >= 1.0:
        t1 = t_s
    else:
        t1 = min(start / (1.0 - rho), t_s)
    w1 = start + (rho - 1.0) * t1  # the wait of the last arrival with a fluid wait
    return n1, round_s, round_s + n1 / mu, lam * t1, min(start, w1), max(start, w1), lam * (t_s - t1)


@jit_inline
def part_cdf(y, lo, hi, p, m):
    """``(P(U + W <= y), its density)`` for ``U`` uniform on ``[lo, hi]`` (a point when equal)
    and ``W`` 0 with probability ``1 - p``, else exponential of mean ``m`` (the density is 0 at a
    jump: a point part without a stochastic wait)."""
    if y < lo:
        return 0.0, 0.0
    stoch = p > 0.0 and m > 0.0
    if hi <= lo:
        if not stoch:
            return 1.0, 0.0
        e = math.exp(-(y - lo) / m)
        return 1.0 - p * e, p / m * e
    if not stoch:
        return (min(hi, y) - lo) / (hi - lo), (1.0 / (hi - lo) if y <= hi else 0.0)
    if y <= hi:
        em1 = math.expm1(-(y - lo) / m)  # exp(-(y - lo) / m) - 1, without cancellation near lo
        return ((y - lo) + p * m * em1) / (hi - lo), (1.0 - p * (1.0 + em1)) / (hi - lo)
    # E[exp(-(y - U) / m)] over U, without cancellation when hi - lo is small
    tail = -math.exp(-(y - hi) / m) * math.expm1(-(hi - lo) / m) * m / (hi - lo)
    return 1.0 - p * tail, p * tail / m


@jit_inline
def served_cdf(y, n1, lo1, hi1, n2, lo2, hi2, n3, p, m):
    """``(the share of the served requests whose wait is at most y, its density)``: :func:`fluid_parts`'
    three parts, each with the stochastic wait ``(p, m)`` added (an empty part is skipped)."""
    c = d = 0.0
    if n1 > 0.0:
        g, h = part_cdf(y, lo1, hi1, p, m)
        c += n1 * g
        d += n1 * h
    if n2 > 0.0:
        g, h = part_cdf(y, lo2, hi2, p, m)
        c += n2 * g
        d += n2 * h
    if n3 > 0.0:
        g, h = part_cdf(y, 0.0, 0.0, p, m)
        c += n3 * g
        d += n3 * h
    n = n1 + n2 + n3
    return c / n, d / n


@jit_inline
def fluid_quantile(q, n1, lo1, hi1, n2, lo2, hi2, n3):
    """The ``q`` quantile of the fluid wait alone, as if its parts were in order (0, then the new
    requests', then the carried ones'): :func:`wait_quantile`'s first guess."""
    n = n1 + n2 + n3
    k = q * n
    if k <= n3:
        return 0.0
    if k <= n3 + n2:
        return lo2 + (k - n3) / n2 * (hi2 - lo2)
    return lo1 + (k - n3 - n2) / n1 * (hi1 - lo1)


@jit
def wait_quantile(q, n1, lo1, hi1, n2, lo2, hi2, n3, p, m, floor=0.0):
    """The smallest wait ``y`` with :func:`served_cdf` ``>= q``: in closed form when no request
    has a fluid wait, else by Newton's method on :func:`served_cdf` kept inside a bracket
    (Numerical Recipes' ``rtsafe``: a bisection step when Newton's would leave the bracket or
    not halve the step before last), to ``1e-13`` of the bracket's top. ``floor``: a wait known
    to be at most the quantile (a lower quantile's), the bracket's bottom."""
    z = m * math.log(p / (1.0 - q)) if p > 1.0 - q else 0.0  # each part's quantile is at most its top + z
    if n1 <= 0.0 and n2 <= 0.0:
        return z
    lo, hi = floor, max(hi1 if n1 > 0.0 else 0.0, hi2 if n2 > 0.0 else 0.0) + z
    if served_cdf(lo, n1, lo1, hi1, n2, lo2, hi2, n3, p, m)[0] >= q:
        return lo
    tol = 1e-13 * hi
    dx_old = dx = hi - lo
    guess = fluid_quantile(q, n1, lo1, hi1, n2, lo2, hi2, n3) + p * m  # the fluid's quantile plus the mean wait
    y = min(max(guess, lo), hi)
    gap, dens = served_cdf(y, n1, lo1, hi1, n2, lo2, hi2, n3, p, m)
    gap -= q
    for _ in range(QUANTILE_STEPS):
        if gap >= 0.0:
            hi = y
        else:
            lo = y
        if ((y - hi) * dens - gap) * ((y - lo) * dens - gap) > 0.0 or abs(2.0 * gap) > abs(dx_old * dens):
            dx_old, dx = dx, 0.5 * (hi - lo)
            y = lo + dx
        else:
            dx_old, dx = dx, gap / dens
            y -= dx
        if abs(dx) <= tol or hi - lo <= tol:
            break
        gap, dens = served_cdf(y, n1, lo1, hi1, n2, lo2, hi2, n3, p, m)
        gap -= q
    return y


@jit
def serve_queue(ttft0, d, mu, c, avail_s, q0, arrivals, round_s, slo_ttft, tpot_ok):
    """``(good, ttft p50, ttft p99)`` of a server this round with the queue: ``ttft0`` its
    in-flight TTFT at the load carried, ``d`` one prompt's work, ``mu`` its capacity
    (requests/s) with ``c`` slots, ``avail_s`` its seconds, ``q0`` requests carried over and
    ``arrivals`` new ones; ``good`` counts the served requests within ``slo_ttft`` when the
    decode meets its SLO (``tpot_ok``). With nothing served the quantiles are ``ttft0``."""
    n1, lo1, hi1, n2, lo2, hi2, n3 = fluid_parts(q0, arrivals, mu, avail_s, round_s)
    if n1 + n2 + n3 <= 0.0:
        return 0.0, ttft0, ttft0
    p, m = stochastic_wait(arrivals / avail_s, mu, c, d, avail_s)
    good = 0.0
    if tpot_ok:
        good = (n1 + n2 + n3) * served_cdf(slo_ttft - ttft0, n1, lo1, hi1, n2, lo2, hi2, n3, p, m)[0]
    w50 = wait_quantile(0.5, n1, lo1, hi1, n2, lo2, hi2, n3, p, m)
    w99 = wait_quantile(0.99, n1, lo1, hi1, n2, lo2, hi2, n3, p, m, w50)  # at least the median
    return good, ttft0 + w50, ttft0 + w99


__all__ = [
    "QUANTILE_STEPS",
    "VARIABILITY",
    "combine",
    "fluid_parts",
    "fluid_quantile",
    "horizon_length",
    "part_cdf",
    "prompt_seconds",
    "serve_queue",
    "served_cdf",
    "stochastic_wait",
    "wait_quantile",
]

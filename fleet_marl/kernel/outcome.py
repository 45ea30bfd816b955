"""The round's outcome stage, compiled (``docs/model.md`` section 8): each tenant's progress or
service, its money and its utility, from what it ran and how fast.

Let ``f`` be the tenant's throttle (0 when not running) and ``work = rate x f x seconds
available``. A trainer progresses ``min(tokens left, work)``; a server serves ``min(queue +
arrivals, work)``, of which the fresh requests count as good when its decode and prefill meet
its SLO at that clock. It spends ``GPUs x list price x price multiplier x hours``, and::

    u_i = priority_i * value_i - cost_weight * spend_i / (budget_i / max_cycles)
    value_i = trained tokens / (ref tokens/s x round)      (train)
            = requests served within SLO / mean arrivals   (serve)

(0 for an absent tenant). The welfare is the sum over tenants (``jit.numpy_sum``).
"""

from __future__ import annotations

import math

from fleet_marl.kernel.jit import jit
from fleet_marl.kernel.layout import (
    F_ARR,
    F_BUDGET,
    F_QUEUE,
    F_REMAIN,
    F_SINCE,
    F_UNSAVED,
    I_PRES,
    O_ATTAIN,
    O_BNEXT,
    O_GOOD,
    O_LOST,
    O_PROGRESS,
    O_QNEXT,
    O_RNEXT,
    O_SERVED,
    O_SINCE,
    O_SPEND,
    O_THROTTLE,
    O_TTFT50,
    O_TTFT99,
    O_UNSAVED,
    O_UTIL,
    O_VALUE,
    OB_RESTART,
    OI_BATCH,
    OI_USABLE,
    S_COSTW,
    S_PERSIST,
    S_QUEUEING,
    S_ROUND,
    T_CKPT_EVERY,
    T_NORM,
    T_PRICE,
    T_PRIO,
    T_REF,
    T_TPOT,
    T_TRAIN,
    T_TTFT,
)
from fleet_marl.kernel.queueing import prompt_seconds, serve_queue
from fleet_marl.kernel.tenant_cost import roofline_groups


@jit
def outcome(b, tf, ti, sc, ins_i, ins_f, running, work_rate, avail_s, prefill_a, t_dec_a, alloc, mult, rf, ri, rb, c_terms, n_nodes):
    """Row ``b``'s progress, service, money and utility of every tenant into ``rf``'s rows, from
    whether it runs (``running``), its throttle (``rf``'s throttle row), its work rate, seconds
    available, prefill and decode seconds (the throughput stage's scratch rows), its GPUs
    ``alloc`` and its price multiplier ``mult``. With ``coupling.queueing`` on, a server's good
    requests and TTFT quantiles come from its queue (``queueing.serve_queue``: its batch in
    ``ri``, one prompt's work from its roofline groups, ``c_terms``, the GPUs it uses in ``ri``
    and ``n_nodes``, the nodes they span). With ``coupling.persistent_placement`` on, a trainer's
    progress is net of the tokens a preemption lost (``rf``'s ``lost_tokens``, which it must train
    again), and its seconds and tokens since its last checkpoint go on (:func:`since_checkpoint`)."""
    round_s, cost_w, queueing, persist = sc[S_ROUND], sc[S_COSTW], sc[S_QUEUEING] != 0.0, sc[S_PERSIST] != 0.0
    hours = round_s / 3600.0
    for t in range(alloc.shape[0]):
        run = running[t]
        f = rf[O_THROTTLE, t]
        train = ti[t, T_TRAIN] != 0
        work = work_rate[t] * f * avail_s[t] if run else 0.0
        queue = ins_f[F_QUEUE, b, t]
        arrivals = ins_f[F_ARR, b, t]
        remaining = ins_f[F_REMAIN, b, t]
        demand = queue + arrivals
        if train and persist:
            lost = rf[O_LOST, t]
            trained = min(remaining + lost, work)
            progress = trained - lost
            served = 0.0
            since_checkpoint(b, t, tf, ins_f, rb, alloc, avail_s[t] if run else 0.0, trained, rf)
        elif train:
            progress = min(remaining, work)
            served = 0.0
        else:
            progress = 0.0
            served = min(demand, work)
        ttft = prefill_a[t] / f if (run and not train) else 0.0
        ttft99 = ttft
        if queueing and run and not train:  # the served requests within the SLO, and their TTFT's quantiles
            job, hw, terms = roofline_groups(b, t, tf, ti, sc, ins_f, c_terms)
            d = prompt_seconds(job, hw, terms, float(max(ri[OI_USABLE, t], 1)), n_nodes[t]) / f
            tpot_ok = t_dec_a[t] / f <= tf[t, T_TPOT]
            good, ttft, ttft99 = serve_queue(
                ttft, d, work_rate[t] * f, float(ri[OI_BATCH, t]), avail_s[t], queue, arrivals, round_s, tf[t, T_TTFT], tpot_ok
            )
        else:
            on_time = run and (t_dec_a[t] / f <= tf[t, T_TPOT]) and (prefill_a[t] / f <= tf[t, T_TTFT])
            fresh = min(max(served - queue, 0.0), arrivals)
            good = fresh if (on_time and not train) else 0.0
        spend = alloc[t] * tf[t, T_PRICE] * mult[t] * hours
        ref = tf[t, T_REF] * round_s
        value = ((progress if train else good) / ref) if ref > 0 else 0.0
        util = tf[t, T_PRIO] * value - cost_w * spend / tf[t, T_NORM] if ins_i[I_PRES, b, t] != 0 else 0.0
        rf[O_PROGRESS, t] = progress
        rf[O_SERVED, t] = served
        rf[O_GOOD, t] = good
        if queueing and not train:  # the share of the round's requests, carried and new
            rf[O_ATTAIN, t] = good / demand if demand > 0 else 1.0
        else:
            rf[O_ATTAIN, t] = good / arrivals if arrivals > 0 else 1.0
        rf[O_QNEXT, t] = 0.0 if train else demand - served
        rf[O_RNEXT, t] = remaining - progress
        rf[O_SPEND, t] = spend
        rf[O_BNEXT, t] = ins_f[F_BUDGET, b, t] - spend
        rf[O_VALUE, t] = value
        rf[O_UTIL, t] = util
        rf[O_TTFT50, t] = ttft
        rf[O_TTFT99, t] = ttft99
        if not (train and persist):
            rf[O_SINCE, t] = 0.0
            rf[O_UNSAVED, t] = 0.0


@jit
def since_checkpoint(b, t, tf, ins_f, rb, alloc, run_s, trained, rf):
    """Trainer ``t``'s seconds and tokens of training since its last checkpoint at the round's
    end (``rf``'s ``since_ckpt_s``, ``unsaved_tokens``): from 0 after a restart or without GPUs
    (it resumes from its checkpoint), else from the state's; then ``run_s`` seconds training
    ``trained`` tokens at an even rate, with a checkpoint written each ``I`` seconds of training
    (``checkpoint_every_s``; none when 0: it counts from the job's start or last restart)."""
    since, unsaved = ins_f[F_SINCE, b, t], ins_f[F_UNSAVED, b, t]
    if rb[OB_RESTART, t] or alloc[t] == 0:
        since, unsaved = 0.0, 0.0
    every = tf[t, T_CKPT_EVERY]
    k = since + run_s
    if every > 0.0 and k >= every and run_s > 0.0:
        since = k - every * math.floor(k / every)  # a checkpoint written this round: the tokens after it
        unsaved = trained * min(since, run_s) / run_s
    else:
        since = k
        unsaved += trained
    rf[O_SINCE, t] = since
    rf[O_UNSAVED, t] = unsaved


__all__ = ["outcome"]

"""A server's queue (``coupling.queueing``, docs/model.md section 12.2): the queueing formulas
against their published closed forms, the round's goodput and TTFT quantiles through the kernel,
and the coupling it adds (a trainer's power draw slowing a co-located server's queue)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.config import ArbiterSpec, ClusterSpec, CouplingSpec, FleetConfig, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate
from fleet_marl.kernel import queueing as qu

BF16 = catalog.PRECISION_CODE["bf16"]
LONG = 1e12  # a horizon that never caps a queue


def mean_wait(lam, mu, c, d, horizon=LONG):
    p, m = qu.stochastic_wait(lam, mu, float(c), d, horizon)
    return p * m


# --- the formulas --------------------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9, 0.99])
def test_one_slot_without_prefill_is_the_m_d_1_queue(rho):
    # DistServe (OSDI 2024) eq. 1's queueing term with D = 1 / mu: R D^2 / (2 (1 - R D))
    mu = 4.0
    lam = rho * mu
    d_serv = 1.0 / mu
    assert mean_wait(lam, mu, 1, 0.0) == pytest.approx(lam * d_serv**2 / (2.0 * (1.0 - lam * d_serv)), rel=1e-12)


@pytest.mark.parametrize("rho", [0.2, 0.6, 0.95])
def test_many_slots_leave_the_prefill_queue_alone(rho):
    # 2048 slots never fill below capacity: the wait is DistServe's M/D/1 for the prompts, D = d
    d, lam = 0.01, rho / 0.01
    assert mean_wait(lam, 1e9, 2048, d) == pytest.approx(lam * d * d / (2.0 * (1.0 - lam * d)), rel=1e-6)


def test_sakasegawa_slot_wait_for_c_slots():
    # Hopp and Spearman's G/G/c (VUT) form with ca^2 = 1, ce^2 = 0: 0.5 u^(sqrt(2(c+1)) - 1) / (c (1 - u)) te
    c, te, u = 8, 2.0, 0.8
    mu = c / te
    want = 0.5 * u ** (math.sqrt(2 * (c + 1)) - 1) / (c * (1 - u)) * te
    assert mean_wait(u * mu, mu, c, 0.0) == pytest.approx(want, rel=1e-12)


def test_the_wait_grows_with_the_load_and_is_continuous_at_capacity():
    mu, c, d, horizon = 10.0, 16, 0.02, 60.0
    rhos = np.linspace(0.05, 1.5, 600)
    waits = np.array([mean_wait(r * mu, mu, c, d, horizon) for r in rhos])
    assert (np.diff(waits) >= -1e-12).all()
    below, at = mean_wait((1 - 1e-9) * mu, mu, c, d, horizon), mean_wait(mu, mu, c, d, horizon)
    assert below == pytest.approx(at, rel=1e-6)
    # the horizon cap: a reflected Brownian motion's mean over the round, (2/3) sqrt(2 lam A / pi) requests
    assert at >= (2 / 3) * math.sqrt(2 * mu * horizon / math.pi) / mu


def test_mixture_cdf_against_numerical_integration():
    lo, hi, p, m = 0.3, 1.1, 0.7, 0.25
    for y in (0.2, 0.5, 1.0, 1.4, 3.0):
        u = np.linspace(lo, min(max(y, lo), hi), 200001)  # where U <= y: P(W <= y - U) = 1 - p exp(-(y - U) / m)
        want = np.trapezoid(1.0 - p * np.exp(-(y - u) / m), u) / (hi - lo)
        cdf, density = qu.part_cdf(y, lo, hi, p, m)
        assert cdf == pytest.approx(want, abs=1e-8)
        h = 1e-6  # the density is the CDF's derivative (away from the kinks at lo and hi)
        assert density == pytest.approx((qu.part_cdf(y + h, lo, hi, p, m)[0] - qu.part_cdf(y - h, lo, hi, p, m)[0]) / (2 * h), abs=1e-6)


def test_quantiles_invert_the_served_cdf():
    parts = qu.fluid_parts(40.0, 900.0, 12.0, 60.0, 60.0)
    p, m = 0.6, 0.3
    for q in (0.5, 0.9, 0.99):
        y = qu.wait_quantile(q, *parts, p, m)
        assert qu.served_cdf(y, *parts, p, m)[0] == pytest.approx(q, abs=1e-9)
        assert qu.served_cdf(y * (1 - 1e-6), *parts, p, m)[0] < q


def test_fluid_backlog_first_come_first_served():
    # 30 req/s offered on 20 req/s for 60 s with 100 carried: the carried first (5 s), then the
    # arrivals the round reaches; waits grow linearly as the backlog does
    n1, lo1, hi1, n2, lo2, hi2, n3 = qu.fluid_parts(100.0, 1800.0, 20.0, 60.0, 60.0)
    assert n1 == 100.0 and (lo1, hi1) == (60.0, 65.0)
    assert n1 + n2 + n3 == pytest.approx(20.0 * 60.0)  # what the round can serve
    assert n3 == 0.0 and lo2 == pytest.approx(5.0) and hi2 == pytest.approx(5.0 + 0.5 * (1100.0 / 30.0))
    # below capacity the backlog drains and later arrivals do not wait
    n1, _, _, n2, lo2, hi2, n3 = qu.fluid_parts(100.0, 600.0, 20.0, 60.0, 60.0)
    assert n1 + n2 + n3 == pytest.approx(700.0) and n3 > 0 and lo2 == pytest.approx(0.0) and hi2 == pytest.approx(5.0)


# --- through the kernel ---------------------------------------------------------------------


def server_config(queueing=True, cap=1e6, trainer=False, slo_ttft=2.0):
    tenants = [
        TenantSpec(
            kind="serve",
            model="llama-3.1-8b",
            gpu_type="h100-sxm",
            max_gpus=8,
            workload=WorkloadSpec(prompt_tokens=512, output_tokens=128, rate=1.0, slo_ttft_s=slo_ttft),
        )
    ]
    if trainer:
        tenants.insert(
            0, TenantSpec(kind="train", model="llama-3.1-8b", gpu_type="h100-sxm", max_gpus=4, workload=WorkloadSpec(seq_len=2048))
        )
    return FleetConfig(
        cluster=ClusterSpec(gpu_types=("h100-sxm",), rack_power_cap_w=cap),
        tenants=tuple(tenants),
        arbiter=ArbiterSpec(mechanism="maxmin"),
        coupling=CouplingSpec(queueing=queueing),
    )


def play(st, gpus, batch, arrivals, queue=None, prev=None):
    T = st.T
    acts = Actions(gpus=np.array(gpus), bid=np.ones(T), precision=np.full((T, catalog.N_GROUPS), BF16), batch=np.array(batch))
    state = RoundState.initial(st)
    state = dataclasses.replace(state, prev_alloc=np.array(gpus if prev is None else prev))
    if queue is not None:
        state = dataclasses.replace(state, queue=np.array(queue, np.float64))
    return evaluate(st, acts, state, Draws(arrivals=np.array(arrivals, np.float64), tiebreak=np.zeros(T)))


def capacity(st, gpus, batch):
    """Requests the server can serve in the round (one row with more arrivals than it takes)."""
    return float(play(st, gpus, batch, [0.0] * (st.T - 1) + [1e9]).served[-1])


def test_attainment_is_a_fraction_of_the_requests_and_quantiles_are_ordered():
    st = KernelStatic.from_config(server_config())
    cap = capacity(st, [1], [16])
    out = play(st, [1], [16], [0.9 * cap])
    p50, p99 = float(out.ttft_p50_s[0]), float(out.ttft_p99_s[0])
    off = play(KernelStatic.from_config(server_config(queueing=False)), [1], [16], [0.9 * cap])
    assert float(off.ttft_p50_s[0]) == float(off.ttft_p99_s[0]) < p50 < p99
    # an SLO between the median and the 99th percentile: between half and 99 % of them on time
    st_mid = KernelStatic.from_config(server_config(slo_ttft=0.5 * (p50 + p99)))
    mid = play(st_mid, [1], [16], [0.9 * cap])
    assert 0.5 < float(mid.slo_attainment[0]) < 0.99
    assert float(mid.slo_good[0]) == pytest.approx(float(mid.slo_attainment[0]) * 0.9 * cap)
    assert float(off.slo_attainment[0]) == 1.0  # without the queue: all or nothing


def test_carried_requests_count_as_late_unless_the_slo_exceeds_a_round():
    st = KernelStatic.from_config(server_config())
    out = play(st, [1], [16], [0.0], queue=[50.0])
    assert float(out.served[0]) == 50.0 and float(out.slo_good[0]) == 0.0 and float(out.ttft_p50_s[0]) > st.round_seconds
    lax = KernelStatic.from_config(server_config(slo_ttft=2 * st.round_seconds))
    assert float(play(lax, [1], [16], [0.0], queue=[50.0]).slo_good[0]) == pytest.approx(50.0)


def test_delaying_or_dropping_requests_never_raises_goodput():
    st = KernelStatic.from_config(server_config())
    cap = capacity(st, [2], [16])
    for load in (0.3, 0.8, 1.0, 1.4):
        arrivals = load * cap
        goods = [float(play(st, [2], [16], [arrivals], queue=[q]).slo_good[0]) for q in (0.0, 10.0, 100.0, 1000.0)]
        assert all(a >= b for a, b in itertools.pairwise(goods)), (load, goods)  # a backlog only delays
        by_gpus = [float(play(st, [n], [16], [arrivals]).slo_good[0]) for n in (1, 2, 4, 8)]
        assert all(a <= b + 1e-9 for a, b in itertools.pairwise(by_gpus)), (load, by_gpus)  # fewer GPUs never help
        for n, b in ((1, 4), (2, 16), (4, 64), (8, 8)):
            out = play(st, [n], [b], [arrivals])
            assert float(out.slo_good[0]) <= min(float(out.served[0]), arrivals) + 1e-9


def test_above_capacity_the_backlog_grows_and_so_does_the_ttft():
    st = KernelStatic.from_config(server_config())
    cap = capacity(st, [1], [16])
    loads = np.linspace(0.5, 1.5, 201)
    outs = [play(st, [1], [16], [x * cap]) for x in loads]
    p50 = np.array([float(o.ttft_p50_s[0]) for o in outs])
    backlog = np.array([float(o.queue_next[0]) for o in outs])
    assert (np.diff(p50) >= -1e-12).all() and p50[-1] > 10 * p50[0]
    assert (backlog[loads <= 1.0] < 1e-6 * cap).all() and (np.diff(backlog[loads > 1.0]) > 0).all()
    # continuous across capacity: no step larger than the steps around it
    steps = np.diff(p50)
    at = int(np.argmin(abs(loads - 1.0)))
    assert steps[at - 1 : at + 1].max() < 5 * np.median(steps[at - 10 : at + 10])


def test_a_trainers_power_draw_lowers_a_co_located_servers_attainment():
    # one node, one rack capped at 3 kW: the trainer's 4 GPUs push the rack over the cap, every GPU
    # of the rack slows (docs/model.md section 6), the server's capacity falls and, with the
    # queue, its requests wait longer: fewer within the SLO. Without the queue nothing changes.
    attain = {}
    for queueing in (False, True):
        st = KernelStatic.from_config(server_config(queueing=queueing, cap=3000.0, trainer=True))
        cap = capacity(st, [0, 1], [4, 16])
        for trainer in (0, 4):
            out = play(st, [trainer, 1], [4, 16], [0.0, 0.9 * cap])
            attain[queueing, trainer] = float(out.slo_attainment[1])
            assert bool(out.power_throttled[1]) == (trainer > 0)
    assert attain[False, 0] == attain[False, 4] == 1.0
    assert attain[True, 4] < attain[True, 0] - 0.1


def test_switched_off_the_outcome_is_todays():
    # the goldens (tests/test_golden.py) pin every field bit for bit with the switch off; here the
    # two quantiles are the running TTFT and the attainment is all or nothing
    st = KernelStatic.from_config(server_config(queueing=False))
    cap = capacity(st, [1], [16])
    for load in (0.2, 0.9, 1.3):
        out = play(st, [1], [16], [load * cap])
        assert float(out.ttft_p50_s[0]) == float(out.ttft_p99_s[0])
        assert float(out.slo_attainment[0]) in (0.0, 1.0) or load > 1.0


@pytest.mark.parametrize("seed", range(3))
def test_engine_agrees_with_the_oracle_with_the_queue_on(seed):
    # besides the hypothesis-drawn configs of tests/test_oracle.py (which draw the switch): random
    # rounds from fresh to extreme states (backlogs, arrivals far above capacity, restarts,
    # throttled racks) with the queue on, every field to 1e-9, counterfactual rows included
    from tests.conftest import make_config
    from tests.test_oracle import agree_on_random_rounds

    cfg = dataclasses.replace(make_config(n_tenants=4, rack_power_cap_w=9000.0, nodes_per_rack=2), coupling=CouplingSpec(queueing=True))
    out = agree_on_random_rounds(KernelStatic.from_config(cfg), np.random.default_rng(seed), 12, 8, "queueing")
    serving = ~KernelStatic.from_config(cfg).is_train
    assert (out.ttft_p99_s[:, serving] >= out.ttft_p50_s[:, serving]).all()

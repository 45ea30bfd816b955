"""``fleet-marl validate``'s contention-slowdown cases (docs/model.md section 12.1, docs/validation.md):
Crux's (SIGCOMM 2024) GPT and BERT sharing two ToR switches' uplinks, predicted through the
kernel's round with ``coupling.contention`` on, the co-runners present and absent; MCCS's
(SIGCOMM 2024) nccl-tests all-reduces side by side under two leaves, predicted through the
kernel's contention stage with ECMP's expected hashing imbalance."""

from __future__ import annotations

import copy
import dataclasses
from statistics import median

import numpy as np
import pytest

from fleet_marl.validation import cases, report
from fleet_marl.validation import predict_contention as pc

CRUX = "https://doi.org/10.1145/3651890.3672239"
MCCS = "https://github.com/phoenix-dataplane/mCCS"


@pytest.fixture(scope="module")
def contention_cases():
    return [c for c in cases.load() if c.quantity == "contention_slowdown"]


@pytest.fixture(scope="module")
def crux_cases(contention_cases):
    return [c for c in contention_cases if c.source == CRUX]


@pytest.fixture(scope="module")
def mccs_cases(contention_cases):
    return [c for c in contention_cases if c.source == MCCS]


def _with(c, **cluster):
    """Case ``c`` with ClusterSpec fields of its scenario overridden (``cluster`` of its block)."""
    entry = copy.deepcopy(c.extra["entry"])
    entry["contention"]["cluster"] = {**(entry["contention"].get("cluster") or {}), **cluster}
    return dataclasses.replace(c, extra={**c.extra, "entry": entry})


def _batches(c, gpt, bert):
    entry = copy.deepcopy(c.extra["entry"])
    for job in entry["contention"]["jobs"]:
        job["batch"] = gpt if job["name"] == "gpt" else bert
    return dataclasses.replace(c, extra={**c.extra, "entry": entry})


def test_the_cases_load_with_their_scenarios(contention_cases, crux_cases, mccs_cases):
    assert len(contention_cases) >= 4 and len(crux_cases) == 2 and len(mccs_cases) == 3
    for c in contention_cases:
        assert c.group == "contention slowdown" and c.representable and c.value > 1.0
        assert c.source in (CRUX, MCCS)
        sc = c.extra["entry"]["contention"]
        assert sc["job"] in {j["name"] for j in sc["jobs"]} and sc["topology"] == "crux-a100-testbed"
        for job in sc["jobs"]:
            cases.arch(job.get("model", c.model))  # a catalog model or a published architecture
    for c in mccs_cases:
        assert c.extra["entry"]["contention"]["benchmark"] == "allreduce"
    by_id = {c.id: c for c in contention_cases}
    assert by_id["crux_gpt64_with_bert16_iteration"].value == pytest.approx(1.70 / 1.53, abs=1e-3)
    assert by_id["crux_bert16_with_gpt64_throughput"].value == pytest.approx(1.0 / (1.0 - 0.077), abs=1e-4)
    # the artifact's bus bandwidths: alone 5.6545 GB/s, beside the others (the trials' means)
    assert by_id["mccs_allreduce4_with_two_allreduce2_busbw"].value == pytest.approx(5.6545 / 2.9736, abs=1e-4)
    assert by_id["mccs_allreduce4_with_allreduce4_blue_busbw"].value == pytest.approx(5.6545 / 3.9511, abs=1e-4)
    assert by_id["mccs_allreduce4_with_allreduce4_red_busbw"].value == pytest.approx(5.6545 / 3.9510, abs=1e-4)


def test_published_architectures_have_their_published_sizes():
    # GPT-3 Medium (24 layers, 1024 wide) is "350M" (Brown et al. 2020, Table 2.1); BERT-large "340M"
    assert cases.arch("crux-gpt3-24l-1024h").total_params == pytest.approx(350e6, rel=0.03)
    assert cases.arch("bert-large").total_params == pytest.approx(340e6, rel=0.03)


def test_each_case_within_35_percent_and_the_group_median(contention_cases):
    out = report.validate(quantity="contention slowdown")
    rows = out["rows"]
    assert len(rows) == len(contention_cases)
    errs = [abs(r["error"]) for r in rows]
    med_target, case_target = report.GROUP_TARGETS["contention slowdown"]
    assert max(errs) <= case_target
    assert median(errs) <= med_target
    assert out["summary"]["contention slowdown"]["median_abs_error"] == pytest.approx(median(errs))


def test_without_the_co_runners_or_the_switch_the_slowdown_is_one(contention_cases):
    for c in contention_cases:
        tight = _with(c, uplink_oversubscription=16.0)  # uplinks that bind, so 1 is not trivial
        assert pc.slowdown(tight)[0] > 1.0
        assert pc.slowdown(tight, co_runners=False)[0] == 1.0
        assert pc.slowdown(tight, contention=False)[0] == 1.0
        assert pc.slowdown(c, co_runners=False)[0] == 1.0
        assert pc.slowdown(c, contention=False)[0] == 1.0


def test_the_ratio_is_the_kernels_step_time_factor_shared_over_alone(contention_cases):
    """Where the ToR uplinks bind (16:1), the predicted slowdown is the round's own ``slowdown``
    of the measured job beside its co-runner over its ``slowdown`` alone (the same uncontended
    step), and tighter uplinks never slow it less."""
    for c in contention_cases:
        ratios = []
        for over in (8.0, 16.0, 32.0):
            ratio, setting = pc.slowdown(_with(c, uplink_oversubscription=over))
            assert ratio == pytest.approx(setting["kernel_slowdown"] / setting["kernel_slowdown_alone"], rel=1e-12)
            assert setting["link_load"] > 0.0
            ratios.append(ratio)
        assert ratios[0] <= ratios[1] <= ratios[2] and ratios[2] > 1.01


def test_at_the_testbeds_uplinks_the_assumed_batches_do_not_matter(crux_cases):
    """The testbed's ToR carries 6 x 8 x 12.5 GB/s / 4 = 150 GB/s; GPT's ring crosses it at
    100 GB/s and BERT's mean load adds under 50: the kernel predicts no slowdown for any of the
    unpublished batches (the entries' notes)."""
    for c in crux_cases:
        for gpt, bert in ((1, 1), (4, 8), (8, 32), (16, 2)):
            assert pc.slowdown(_batches(c, gpt, bert))[0] == 1.0


def test_a_job_placed_other_than_published_is_an_error(contention_cases):
    c = contention_cases[0]
    entry = copy.deepcopy(c.extra["entry"])
    entry["contention"]["jobs"][0]["placement"] = {0: 8, 12: 8}
    with pytest.raises(ValueError, match="node 12 of 12"):
        pc.slowdown(dataclasses.replace(c, extra={**c.extra, "entry": entry}))
    entry = copy.deepcopy(c.extra["entry"])
    entry["contention"]["job"] = "resnet"
    with pytest.raises(ValueError, match="resnet"):
        pc.slowdown(dataclasses.replace(c, extra={**c.extra, "entry": entry}))
    np.testing.assert_array_equal(pc.scenario(c)[2].prev_placement.sum(1), [64, 16])


def test_ecmp_factor_is_the_expected_most_loaded_uplink_over_the_mean():
    assert pc.ecmp_factor(3, 1) == 1.0  # one uplink: no imbalance
    assert pc.ecmp_factor(2, 2) == pytest.approx(1.5)  # (2,0) half the time, (1,1) the other
    assert pc.ecmp_factor(4, 2) == pytest.approx((2 * 4 + 8 * 3 + 6 * 2) / 16 / 2)
    assert pc.ecmp_factor(6, 2) == pytest.approx((2 * 6 + 12 * 5 + 30 * 4 + 20 * 3) / 64 / 3)
    assert pc.ecmp_factor(8, 2) < pc.ecmp_factor(4, 2)  # more flows hash more evenly
    with pytest.raises(ValueError):
        pc.ecmp_factor(0, 2)


def _without_ecmp(c):
    entry = copy.deepcopy(c.extra["entry"])
    del entry["contention"]["ecmp"]
    return dataclasses.replace(c, extra={**c.extra, "entry": entry})


def test_the_benchmarks_are_the_contention_stages_ring_factor(mccs_cases):
    """Each all-reduce runs unslowed alone; beside the others its ring factor is the stage's
    ``(d_i + sum_j L_j) / C`` with every ring asking its GPU's 6.25 GB/s all the time and the
    leaf's 12.5 GB/s uplinks taken at 12.5 / ecmp_factor; without the hashing (the mean field)
    setting 3's two rings exactly fill the uplinks (1.0) and setting 2's three ask 1.5 times them."""
    for c in mccs_cases:
        sc = c.extra["entry"]["contention"]
        ratio, setting = pc.slowdown(c)
        assert setting["kernel_slowdown_alone"] == 1.0
        cap = 12.5 / pc.ecmp_factor(sc["ecmp"]["flows"], sc["ecmp"]["uplinks"])
        assert setting["leaf_uplink_gbs"] == pytest.approx(cap)
        assert ratio == pytest.approx(len(sc["jobs"]) * 6.25 / cap, rel=1e-9)
        mean_field = pc.slowdown(_without_ecmp(c))[0]
        assert mean_field == pytest.approx(len(sc["jobs"]) * 6.25 / 12.5 if len(sc["jobs"]) * 6.25 > 12.5 else 1.0)
        # the message's size cancels (a ring's time alone and beside the others scale alike)
        entry = copy.deepcopy(c.extra["entry"])
        entry["contention"]["message_bytes"] = 1 << 20
        assert pc.slowdown(dataclasses.replace(c, extra={**c.extra, "entry": entry}))[0] == pytest.approx(ratio, rel=1e-12)


def test_an_unknown_benchmark_is_an_error(mccs_cases):
    c = mccs_cases[0]
    entry = copy.deepcopy(c.extra["entry"])
    entry["contention"]["benchmark"] = "alltoall"
    with pytest.raises(ValueError, match="alltoall"):
        pc.slowdown(dataclasses.replace(c, extra={**c.extra, "entry": entry}))

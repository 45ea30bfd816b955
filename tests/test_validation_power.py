"""``fleet-marl validate``'s power-capped throughput cases (docs/model.md sections 6 and 12.5,
docs/validation.md): NVIDIA's MLPerf Inference MaxQ runs (a per-GPU power limit) over the same
systems' MaxP runs, predicted by the round's power-to-clock relation (validation/predict_power.py)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import yaml

from fleet_marl import catalog
from fleet_marl.kernel.power_heat import cap_clock
from fleet_marl.validation import cases, report
from fleet_marl.validation import predict as pr
from fleet_marl.validation import predict_power as pp

PATH = Path(cases.PATH).parent / "measurements_power.yaml"
GROUP = "power-capped throughput"


@pytest.fixture(scope="module")
def rows():
    return report.validate(quantity=GROUP)


@pytest.fixture(scope="module")
def power_cases():
    return [c for c in cases.load() if c.quantity == "power_capped_throughput_ratio"]


def test_the_cases_load_from_their_own_file_with_both_published_numbers(power_cases):
    assert PATH in cases.shipped_paths()
    raw = yaml.safe_load(PATH.read_text(encoding="utf-8"))
    assert {e["id"] for e in raw} == {c.id for c in power_cases}
    rep = [c for c in power_cases if c.representable]
    assert len(rep) >= 8 and {c.gpu for c in rep} == {"h100-sxm", "h200"}
    for e in raw:
        pc = e["power_capped"]
        assert e["value"] == pytest.approx(round(pc["capped"] / pc["default"], 4), abs=1e-4)  # the quotient of the two published numbers
        assert e["source"]["repo"].startswith("mlcommons/inference_results_v") and len(e["source"]["commit"]) == 40
    for c in rep:
        g = catalog.gpu(c.gpu)
        assert 0 < c.power_limit_w < g.tdp_w and 0 < c.value < 1
        assert c.extra["entry"]["serving"]["batch_size"] == c.batch


def test_gpt_j_matches_its_published_parameter_count():
    # EleutherAI/gpt-j-6b model card: "n_parameters | 6,053,381,344"
    assert cases.arch("gpt-j-6b").total_params == pytest.approx(6_053_381_344, rel=0.01)


def test_each_case_within_35pct_and_the_group_median_within_15pct(rows):
    errs = [abs(r["error"]) for r in rows["rows"] if "error" in r]
    assert len(errs) >= 8
    median, case = report.GROUP_TARGETS[GROUP]
    assert max(errs) <= case
    s = rows["summary"][GROUP]
    assert s["median_abs_error"] <= median and s["meets_targets"]


def test_the_predictor_is_the_registered_coupled_one(power_cases):
    assert pr.COUPLED_PREDICTORS["power_capped_throughput_ratio"] == "fleet_marl.validation.predict_power:predict"
    c = next(c for c in power_cases if c.representable)
    assert pr.predict(c)[0] == pp.predict(c)[0]


def test_at_the_tdp_the_ratio_is_one(power_cases):
    c = next(c for c in power_cases if c.representable)
    tdp = catalog.gpu(c.gpu).tdp_w
    for limit in (tdp, tdp + 100.0, 0.0):  # 0: no limit, the TDP
        ratio, setting = pp.predict(dataclasses.replace(c, power_limit_w=limit))
        assert ratio == pytest.approx(1.0) and setting["clock"] == pytest.approx(1.0)


def test_the_ratio_is_the_rounds_clock_and_falls_with_the_limit(power_cases):
    c = next(c for c in power_cases if c.representable and c.gpu == "h100-sxm")
    g = catalog.gpu(c.gpu)
    # a known answer: an H100 (85 W idle, 700 W TDP) at 450 W runs at ((450 - 85) / 615)^(1/3) = 0.8404
    ratio, setting = pp.predict(dataclasses.replace(c, power_limit_w=450.0))
    assert ratio == pytest.approx(((450.0 - g.idle_w) / (g.tdp_w - g.idle_w)) ** (1.0 / 3.0))
    assert ratio == pytest.approx(0.8404, abs=1e-4) and setting["at_limit"] < setting["at_tdp"]
    limits = [200.0, 300.0, 400.0, 500.0, 600.0, 700.0]
    ratios = [pp.predict(dataclasses.replace(c, power_limit_w=lim))[0] for lim in limits]
    assert all(a < b for a, b in itertools.pairwise(ratios)) and ratios[-1] == pytest.approx(1.0)
    assert ratios == pytest.approx([float(cap_clock(lim - g.idle_w, g.tdp_w - g.idle_w)) for lim in limits])


def test_the_roofline_diagnostic_slows_less_than_the_clock(rows):
    # the validation roofline slows only a pass's FLOPs under a limit (predict._static), so its ratio
    # lies between the clock and 1; the measured ratios lie at or below the clock (docs/validation.md)
    for r in rows["rows"]:
        if "setting" in r:
            s = r["setting"]
            assert s["clock"] < s["roofline_ratio"] < 1.0
            assert r["measured"] <= s["clock"] + 1e-9


def test_a_training_case_is_throttled_by_the_same_clock():
    # torchtitan's Grand Teton H100 rows publish a 500 W limit: as a ratio case, the step's throughput
    # with it over without it is the round's clock at 500 W
    c = next(c for c in cases.load() if c.quantity == "train_tokens_per_s_per_gpu" and c.power_limit_w and c.representable)
    assert pp.throughput_quantity(c) == pp.TRAIN
    ratio, setting = pp.predict(dataclasses.replace(c, quantity="power_capped_throughput_ratio"))
    assert ratio == pytest.approx(pr.clock(c)) and ratio < 1.0 and setting["roofline_ratio"] == pytest.approx(ratio)

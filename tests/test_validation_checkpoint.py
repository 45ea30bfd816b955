"""The checkpoint and restart time cases (``fleet_marl/validation/measurements_checkpoint.yaml``) and
their predictor (``validation/predict_checkpoint.py``): the cases load, each is within issue 47's
35 %, the group's median holds, and the predictor gives the kernel's answers by hand."""

from __future__ import annotations

import dataclasses
from statistics import median

import pytest

from fleet_marl.config import ClusterSpec
from fleet_marl.validation import predict_checkpoint as pc
from fleet_marl.validation.cases import arch, load
from fleet_marl.validation.predict import COUPLED_PREDICTORS, predict

GROUP = "checkpoint and restart time"
PATH = str(pc.__file__).replace("predict_checkpoint.py", "measurements_checkpoint.yaml")


def _cases():
    return [c for c in load(PATH) if c.group == GROUP]


def _case(case_id: str):
    return next(c for c in _cases() if c.id == case_id)


def test_cases_load_and_are_sourced():
    cases = _cases()
    shown = [c for c in cases if c.representable]
    assert len(shown) >= 6
    assert {c.quantity for c in shown} == {"checkpoint_write_s", "restart_s"}
    assert all(c.quantity in COUPLED_PREDICTORS for c in cases)
    for c in cases:
        assert c.source and c.value > 0, c.id
        if c.representable:  # issue 47's rule: a case only with the storage's bandwidth stated
            assert pc.block(c).get("storage_gbs"), c.id
            assert pc.part(c) in pc.PARTS[c.quantity]
        else:
            assert c.reason, c.id
    # the shipped set reads this file too
    assert {c.id for c in cases} <= {c.id for c in load()}


@pytest.mark.parametrize("case_id", [c.id for c in _cases() if c.representable])
def test_each_case_within_35_percent(case_id):
    c = _case(case_id)
    value, setting = predict(c)
    assert abs(value / c.value - 1.0) <= 0.35, (c.id, value, c.value)
    assert setting["gpus"] == c.gpus


def test_group_median():
    """The group's median |error| (19.9 % when written; issue 47's target for it is 15 %, missed:
    docs/validation.md says why) does not grow."""
    errs = [abs(predict(c)[0] / c.value - 1.0) for c in _cases() if c.representable]
    assert median(errs) <= 0.20


def test_checkpoint_bytes_are_twelve_per_parameter():
    c = _case("dlrover-megatron-gpt1.5b-nas-save-torch")
    assert pc.checkpoint_bytes(c) == pytest.approx(12.0 * arch(c.model).total_params, rel=1e-9)


def test_storage_bound_by_hand():
    """MT-NLG's 530B parameters at 12 bytes over GEMINI's 20 Gb/s: 12 N / 2.5e9 seconds."""
    c = _case("gemini-mtnlg-530b-remote-20gbps")
    value, setting = predict(c)
    assert value == pytest.approx(12.0 * arch("mt-nlg-530b").total_params / 2.5e9, rel=1e-9)
    assert setting["storage_gbs"] == 2.5


def test_doubling_storage_halves_a_storage_bound_load_and_save():
    cl = ClusterSpec()
    ckpt, n, nodes, s = 18.7e9, 16, 2, 0.1e9  # DLRover's NAS: the storage binds (2 x 3.7 GB/s >> 0.1)
    for f in (pc.load_seconds, pc.write_seconds):
        one, two = f(ckpt, n, nodes, cl, s), f(ckpt, n, nodes, cl, 2 * s)
        assert one == pytest.approx(ckpt / s, rel=1e-9)
        assert two == pytest.approx(one / 2, rel=1e-9)


def test_loaders_bind_when_storage_is_fast():
    """With the storage faster than the loaders, the load and the save run at min(n x per GPU,
    nodes x per node) (the kernel's restart_time), whatever the storage."""
    cl = ClusterSpec()
    ckpt = 96.4e9
    for n, nodes in ((1, 1), (8, 1), (32, 4)):
        rate = min(n * cl.checkpoint_load_gbs_per_gpu, nodes * cl.checkpoint_load_gbs_per_node) * 1e9
        for storage in (float("inf"), 1e13):
            assert pc.load_seconds(ckpt, n, nodes, cl, storage) == pytest.approx(ckpt / rate, rel=1e-9)
            assert pc.write_seconds(ckpt, n, nodes, cl, storage) == pytest.approx(ckpt / rate, rel=1e-9)


def test_restart_adds_the_fixed_part():
    c = _case("dlrover-megatron-gpt1.5b-nas-load-torch")
    entry = dict(c.extra["entry"])
    entry["checkpoint"] = dict(entry["checkpoint"], part="restart")
    restart = dataclasses.replace(c, extra=dict(c.extra, entry=entry))
    assert predict(restart)[0] == pytest.approx(predict(c)[0] + ClusterSpec().restart_seconds, rel=1e-12)


def test_bad_part_is_refused():
    c = _case("gemini-mtnlg-530b-remote-20gbps")
    entry = dict(c.extra["entry"], checkpoint=dict(c.extra["entry"]["checkpoint"], part="load"))
    with pytest.raises(ValueError, match="checkpoint.part"):
        predict(dataclasses.replace(c, extra=dict(c.extra, entry=entry)))


def test_extra_models_match_their_published_parameter_counts():
    assert arch("mt-nlg-530b").total_params == pytest.approx(530e9, rel=0.01)  # Smith et al. 2022: 530B
    assert arch("megatron-gpt-1.5b").total_params == pytest.approx(1.5e9, rel=0.05)  # DLRover's table: "1.5B"

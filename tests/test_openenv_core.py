"""The core side of the OpenEnv feature, without the extra: the text-action parser
(``fleet_marl.parse_tenant_action``), that ``import fleet_marl`` loads no OpenEnv/FastAPI, and
that ``fleet-marl serve`` without the extra says how to install it."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fleet_marl
from fleet_marl.environment import ACTION_FIELDS, BATCH_LEVELS
from fleet_marl.openenv import text_action as ta

GOOD = {
    "request_gpus": 4,
    "bid": "high",
    "batch": 32,
    "precision": {"embed": "bf16", "attn": "bf16", "mlp": "fp8", "norm": "bf16", "head": "bf16"},
}


def error_of(text, **kw) -> str:
    with pytest.raises(ta.TextActionError) as exc:
        ta.parse_tenant_action(text, **kw)
    return str(exc.value)


def test_parse_takes_the_first_object_through_prose_and_fences():
    text = "Let me think.\nI'll ask for four GPUs.\n```json\n" + json.dumps(GOOD) + "\n```\nThat should work {not json}."
    a = fleet_marl.parse_tenant_action(text)
    assert a.to_dict() == GOOD
    assert ta.parse_tenant_action(json.dumps({**GOOD, "precision": "BF16"})).precision == dict.fromkeys(ta.GROUP_KEYS, "bf16")


def test_indices_round_trip_in_the_env_layout():
    a = ta.parse_tenant_action(json.dumps(GOOD))
    idx = ta.to_indices(a)
    assert len(idx) == len(ACTION_FIELDS)
    assert idx.tolist() == [4, 3, 1, 1, 2, 1, 1, int(np.flatnonzero(BATCH_LEVELS == 32)[0])]
    assert ta.from_indices(idx) == a
    assert tuple(BATCH_LEVELS.tolist()) == ta.BATCH_SIZES


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "no json here",
            'input: no JSON object found; expected one JSON object such as {"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}',
        ),
        (
            '{"request_gpus": 4, "bid": "high",',
            "input: invalid JSON at line 1 column 35: Expecting property name enclosed in double quotes",
        ),
        (json.dumps({**GOOD, "gpus": 3}), "gpus: unknown field; expected only request_gpus, bid, batch, precision"),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "batch"}),
            "batch: missing; expected all of request_gpus, bid, batch, precision",
        ),
        (json.dumps({**GOOD, "request_gpus": 9}), "request_gpus = 9: expected an integer in [0, 8]"),
        (json.dumps({**GOOD, "request_gpus": 2.5}), "request_gpus = 2.5: expected an integer"),
        (json.dumps({**GOOD, "request_gpus": True}), "request_gpus = True: expected an integer"),
        (json.dumps({**GOOD, "bid": "max"}), "bid = 'max': expected one of lowest, low, list, high, highest"),
        (json.dumps({**GOOD, "batch": 48}), "batch = 48: expected one of 1, 2, 4, 8, 16, 32, 64, 128, 256"),
        (
            json.dumps({**GOOD, "precision": {**GOOD["precision"], "mlp": "fp4"}}),
            "precision.mlp = 'fp4': expected one of fp32, bf16, fp8, int8, int4",
        ),
        (
            json.dumps({**GOOD, "precision": {**GOOD["precision"], "lm_head": "bf16"}}),
            "precision.lm_head: unknown field; expected only embed, attn, mlp, norm, head",
        ),
        (json.dumps({**GOOD, "precision": {"embed": "bf16"}}), "precision.attn: missing; expected all of embed, attn, mlp, norm, head"),
        (
            "[1, 2]",
            'input: no JSON object found; expected one JSON object such as {"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}',
        ),
    ],
)
def test_bad_answers_name_the_field_the_value_and_the_expectation(text, expected):
    assert error_of(text, max_gpus=8) == expected


def test_oversized_input_is_refused_before_parsing():
    text = json.dumps(GOOD) + " " * ta.MAX_CHARS
    assert error_of(text) == f"input: {len(text)} characters; expected at most 65536"
    assert ta.parse_tenant_action(json.dumps(GOOD).ljust(ta.MAX_CHARS)).request_gpus == 4  # exactly the limit is fine


def test_mask_check_names_the_masked_choice():
    env = fleet_marl.parallel_env(task="tiny")
    env.reset(seed=0)
    mask = env.action_mask("tenant_0")  # a trainer: INT8/INT4 are weight-only formats, masked
    idx = ta.to_indices(ta.parse_tenant_action(json.dumps({**GOOD, "precision": {**GOOD["precision"], "attn": "int8"}})))
    with pytest.raises(ta.TextActionError) as exc:
        ta.check_mask(idx, mask)
    assert str(exc.value) == "precision.attn = 'int8': expected one of fp32, bf16, fp8 (masked: the tenant's GPU or job kind forbids it)"
    gm = np.array(mask[0]).copy()
    gm[3:] = 0
    with pytest.raises(ta.TextActionError, match=r"request_gpus = 4: expected at most 2 \(masked"):
        ta.check_mask(ta.to_indices(ta.parse_tenant_action(json.dumps(GOOD))), (gm, *mask[1:]))
    ta.check_mask(ta.to_indices(ta.parse_tenant_action(json.dumps(GOOD))), mask)  # legal: no error


def test_bid_names_follow_the_scenario_levels():
    assert ta.bid_names() == ("lowest", "low", "list", "high", "highest")
    assert ta.bid_names((0.8, 1.0, 1.25)) == ("x0.8", "x1", "x1.25")
    a = ta.parse_tenant_action(json.dumps({**GOOD, "bid": "x1.25"}), bid_levels=(0.8, 1.0, 1.25))
    assert ta.to_indices(a, (0.8, 1.0, 1.25))[1] == 2


def test_json_schema_accepts_the_documented_example_and_forbids_extras():
    jsonschema = pytest.importorskip("jsonschema")
    schema = ta.action_json_schema(max_gpus=8)
    jsonschema.validate(GOOD, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**GOOD, "extra": 1}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**GOOD, "request_gpus": 9}, schema)


def test_core_import_loads_no_openenv_fastapi_or_server():
    code = (
        "import sys, fleet_marl, fleet_marl.cli, fleet_marl.openenv.command; fleet_marl.parse_tenant_action; "
        "env = fleet_marl.parallel_env(task='tiny'); env.reset(seed=0); fleet_marl.cli.build_parser(); "
        "print(','.join(m for m in ('fleet_marl.openenv.app', 'openenv', 'fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the core imported {out}"


def test_serve_without_the_extra_prints_how_to_install(tmp_path):
    # a meta-path blocker in sitecustomize makes 'openenv' (and so fleet_marl.openenv) unimportable
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent("""
        import sys
        class _Block:
            def find_spec(self, name, path=None, target=None):
                if name == "openenv" or name.startswith("openenv."):
                    raise ImportError("No module named 'openenv' (blocked by the test)")
                return None
        sys.meta_path.insert(0, _Block())
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-m", "fleet_marl.cli", "serve", "--port", "1"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "pip install 'fleet-marl[openenv]'" in r.stderr
    assert "fleet-marl serve needs the optional 'openenv' extra" in r.stderr
    # and the subpackage itself says the same when a server name is used; its text-action
    # parser needs no extra
    code = "import fleet_marl.openenv as o; o.make_app"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "pip install 'fleet-marl[openenv]'" in r.stderr
    code = f"from fleet_marl.openenv.text_action import parse_tenant_action; print(parse_tenant_action({json.dumps(json.dumps(GOOD))}).request_gpus)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "4", r.stderr

import dataclasses

import pytest
import yaml

from fleet_marl.config import ClusterSpec, ConfigError, FleetConfig, TenantSpec, WorkloadSpec
from tests.conftest import make_config


def test_round_trip_dict_and_yaml(tmp_path):
    cfg = make_config(n_tenants=3, nodes=("h100-sxm", "a100-80gb"))
    assert FleetConfig.from_dict(cfg.to_dict()) == cfg
    path = tmp_path / "c.yaml"
    cfg.to_yaml(path)
    assert FleetConfig.from_yaml(path) == cfg
    assert FleetConfig.from_yaml(cfg.to_yaml()) == cfg
    # the YAML is plain: safe_load reads it
    assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ClusterSpec().gpus_per_node = 4


@pytest.mark.parametrize(
    "data, field",
    [
        ({"cluster": {"gpus_per_node": -1}}, "cluster.gpus_per_node"),
        ({"cluster": {"gpus_per_node": 2.5}}, "cluster.gpus_per_node"),
        ({"cluster": {"rack_power_cap_w": float("nan")}}, "cluster.rack_power_cap_w"),
        ({"cluster": {"gpu_types": ["h100"]}}, "cluster.gpu_types[0]"),
        ({"cluster": {"critical_temp_c": 80.0}}, "cluster.critical_temp_c"),
        ({"tenants": [{"model": "llama-9"}]}, "tenants[0].model"),
        ({"tenants": [{"kind": "infer"}]}, "tenants[0].kind"),
        ({"tenants": [{"gpu_type": "l4"}]}, "tenants[0].gpu_type"),
        ({"tenants": [{"workload": {"seq_len": 1.5}}]}, "tenants[0].workload.seq_len"),
        ({"tenants": [{"budget": -3}]}, "tenants[0].budget"),
        ({"tenants": []}, "tenants"),
        ({"arbiter": {"mechanism": "lottery"}}, "arbiter.mechanism"),
        ({"arbiter": {"bid_levels": [2.0, 1.0]}}, "arbiter.bid_levels"),
        ({"reward": {"scheme": "vcg"}}, "reward.scheme"),
        ({"safety": {"mode": "ignore"}}, "safety.mode"),
        ({"max_cycles": 0}, "max_cycles"),
    ],
)
def test_bad_values_name_the_field_value_and_range(data, field):
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict(data)
    assert e.value.field == field
    msg = str(e.value)
    assert msg.startswith(field + " = ") and "expected" in msg


@pytest.mark.parametrize(
    "data, field",
    [
        ({"clusterr": {}}, "clusterr"),
        ({"cluster": {"gpus": 8}}, "cluster.gpus"),
        ({"tenants": [{"workload": {"rps": 3}}]}, "tenants[0].workload.rps"),
    ],
)
def test_unknown_keys_are_an_error(data, field):
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict(data)
    assert e.value.field == field
    assert "valid fields" in str(e.value)


def test_context_limits_checked_against_the_model():
    with pytest.raises(ConfigError, match="context of gpt2"):
        TenantSpec(model="gpt2", workload=WorkloadSpec(seq_len=4096))
    with pytest.raises(ConfigError, match="context of gpt2"):
        TenantSpec(kind="serve", model="gpt2", workload=WorkloadSpec(prompt_tokens=1000, output_tokens=100))


def test_trace_pattern_needs_a_path():
    with pytest.raises(ConfigError) as e:
        WorkloadSpec(pattern="trace")
    assert e.value.field == "trace"


def test_ints_normalised_from_integral_floats():
    c = ClusterSpec(gpus_per_node=8.0)
    assert c.gpus_per_node == 8 and isinstance(c.gpus_per_node, int)


def test_scenarios_where_nothing_can_run_are_rejected():
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict({"cluster": {"rack_power_cap_w": 100.0}})
    assert e.value.field == "cluster.rack_power_cap_w" and "idle power" in str(e.value)
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict({"arbiter": {"mechanism": "auction", "reserve_price": 10.0}})
    assert e.value.field == "arbiter.reserve_price"

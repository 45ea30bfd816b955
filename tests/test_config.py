import dataclasses
from pathlib import Path

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


# --- FairnessSpec: the fairness detector's knobs moved out of RewardSpec (issue 16) ----------------


def test_every_name_still_imports_from_fleet_marl_config():
    from fleet_marl import config

    for name in config.__all__:
        assert getattr(config, name) is not None
    assert config.FleetConfig().fairness == config.FairnessSpec()
    assert not {"starvation_fraction", "starvation_rounds", "hoard_share"} & set(config.RewardSpec.__dataclass_fields__)
    assert {"degenerate_floor", "starvation_penalty"} <= set(config.RewardSpec.__dataclass_fields__)  # reward shaping stays


def test_fairness_spec_checks_its_fields():
    from fleet_marl.config import FairnessSpec

    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict({"fairness": {"hoard_share": 1.5}})
    assert e.value.field == "fairness.hoard_share"
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict({"fairness": {"starvation_rounds": 0}})
    assert e.value.field == "fairness.starvation_rounds"
    with pytest.raises(ConfigError, match="a FairnessSpec"):
        FleetConfig(fairness={"hoard_share": 0.2})
    cfg = FleetConfig.from_dict({"fairness": {"hoard_share": 0.2}})
    assert cfg.fairness == FairnessSpec(hoard_share=0.2) and FleetConfig.from_dict(cfg.to_dict()) == cfg


OLD = {"starvation_fraction": 0.4, "starvation_rounds": 5, "hoard_share": 0.2}


@pytest.mark.parametrize("key", sorted(OLD))
def test_old_reward_keys_load_with_a_deprecation_warning_naming_the_new_key(key, tmp_path):
    from fleet_marl.tasks import make_config

    want = FleetConfig.from_dict({"fairness": {key: OLD[key]}})
    with pytest.warns(DeprecationWarning, match=rf"reward\.{key} is deprecated: use fairness\.{key}"):
        assert FleetConfig.from_dict({"reward": {key: OLD[key], "scheme": "difference"}}) == want
    text = yaml.safe_dump({"reward": {key: OLD[key]}})
    with pytest.warns(DeprecationWarning, match=rf"fairness\.{key}"):
        assert FleetConfig.from_yaml(text) == want
    (tmp_path / "old.yaml").write_text(text)
    with pytest.warns(DeprecationWarning, match=rf"fairness\.{key}") as rec:
        assert FleetConfig.from_yaml(tmp_path / "old.yaml") == want
    assert rec[0].filename == __file__  # attributed to the caller, so the default filters show it
    with pytest.warns(DeprecationWarning, match=rf"fairness\.{key}"):
        cfg, _ = make_config("easy", reward={key: OLD[key]})
    assert getattr(cfg.fairness, key) == OLD[key] and cfg == make_config("easy", fairness={key: OLD[key]})[0]


def test_a_fairness_key_in_both_places_is_an_error():
    with pytest.raises(ConfigError) as e:
        FleetConfig.from_dict({"reward": {"hoard_share": 0.2}, "fairness": {"hoard_share": 0.3}})
    assert e.value.field == "reward.hoard_share" and "fairness.hoard_share" in str(e.value) and "once" in str(e.value)
    # different keys in the two places are fine (one warning for the old place)
    with pytest.warns(DeprecationWarning):
        cfg = FleetConfig.from_dict({"reward": {"hoard_share": 0.2}, "fairness": {"starvation_rounds": 4}})
    assert (cfg.fairness.hoard_share, cfg.fairness.starvation_rounds) == (0.2, 4)


def test_the_new_keys_load_without_a_warning():
    import warnings

    from fleet_marl.tasks import make_config

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        cfg = FleetConfig.from_dict({"reward": {"degenerate_floor": 0.0}, "fairness": dict(OLD)})
        assert cfg.fairness.starvation_rounds == 5 and cfg.reward.degenerate_floor == 0.0
        assert make_config("hard")[0].fairness.hoard_share == 0.2
        yaml_path = Path(__file__).resolve().parents[1] / "experiments" / "mixed_cluster.yaml"
        assert FleetConfig.from_yaml(yaml_path).fairness.starvation_rounds == 3


def test_an_old_fairness_override_replaces_the_tasks_value():
    """``hard`` sets fairness.hoard_share; an old-style reward.hoard_share override moves to
    fairness (with the warning) and wins, as an override should, instead of clashing."""
    from fleet_marl.tasks import make_config

    with pytest.warns(DeprecationWarning, match="fairness.hoard_share"):
        cfg, _ = make_config("hard", reward={"hoard_share": 0.3})
    assert cfg.fairness.hoard_share == 0.3
    assert make_config("hard")[0].fairness.hoard_share == 0.2


@pytest.mark.parametrize("field", ["checkpoint_load_gbs_per_gpu", "checkpoint_load_gbs_per_node"])
def test_checkpoint_load_rates_must_be_positive(field):
    """The restart's load rates (docs/model.md section 7): a rate of 0 would make every restart infinite."""
    with pytest.raises(ConfigError, match=rf"{field} = 0(\.0)?: expected"):
        ClusterSpec(**{field: 0.0})

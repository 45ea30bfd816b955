import dataclasses

import pytest

from fleet_marl import catalog

REQUIRED_GPUS = {"h100-sxm", "h200", "a100-80gb", "a100-40gb", "l40s", "l4"}
REQUIRED_MODELS = {"gpt2", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-0.5b", "qwen2.5-14b"}


def test_required_keys_present():
    assert set(catalog.gpus()) >= REQUIRED_GPUS
    assert set(catalog.models()) >= REQUIRED_MODELS


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_parameter_count_matches_published_within_1_percent(name):
    m = catalog.model(name)
    assert abs(m.total_params / m.published_params - 1) < 0.01, (m.total_params, m.published_params)


def test_exact_counts_for_known_architectures():
    # GPT-2 small as counted by GPT2LMHeadModel; Llama-3.1-8B: 8,030,261,248 (config.json arithmetic)
    assert catalog.model("gpt2").total_params == 124_439_808
    assert catalog.model("llama-3.1-8b").total_params == 8_030_261_248


def test_groups_sum_and_tied_head():
    m = catalog.model("qwen2.5-0.5b")
    pg = m.params_by_group
    assert set(pg) == set(catalog.GROUPS)
    assert pg["head"] == 0  # tied embeddings
    assert catalog.model("llama-3.1-8b").params_by_group["head"] == 128256 * 4096
    # GQA: k and v projections use kv_heads * head_dim columns
    l8 = catalog.model("llama-3.1-8b")
    assert pg and l8.params_by_group["attention"] == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)


def test_kv_bytes_per_token_formula():
    m = catalog.model("llama-3.1-8b")
    assert m.kv_bytes_per_token(2.0) == 2 * 32 * 8 * 128 * 2  # 131,072 bytes


@pytest.mark.parametrize("name", sorted(catalog.gpus()))
def test_every_gpu_number_has_a_source(name):
    g = catalog.gpu(name)
    assert g.source.startswith("NVIDIA") and "http" in g.source
    assert g.idle_source and g.price_source
    assert 0 < g.idle_w < g.tdp_w
    assert g.price_per_hour > 0
    assert g.tflops["fp32"] < g.tflops["bf16"]
    assert "all_reduce" in g.allreduce_source and len(g.allreduce_sweep) >= 6


def test_allreduce_fit_recovers_a_latency_bandwidth_line():
    # a sweep that is exactly t = 20 us + S / (100 GB/s) on 4 GPUs: the fit returns 20 us and
    # the bus bandwidth 100 x 2 (4 - 1) / 4 = 150 GB/s; rows outside 4 MiB .. 1 GiB do not count
    rows = [(s, s / (20e-6 + s / 100e9) / 1e9) for s in (2.0**k for k in range(22, 31))]
    rows += [(1024.0, 1e-3), (2.0**34, 1e-3)]  # nonsense outside the window
    g = dataclasses.replace(catalog.gpu("h100-sxm"), allreduce_sweep=tuple(rows), allreduce_gpus=4.0)
    lat, bus = g.allreduce_fit()
    assert lat == pytest.approx(20e-6, rel=1e-9) and bus == pytest.approx(150e9, rel=1e-9)


@pytest.mark.parametrize("name", sorted(catalog.gpus()))
def test_allreduce_line_follows_its_published_sweep(name):
    # the fitted line stays within 25 % of every published row it was drawn through, and its bus
    # bandwidth is what the sweep's largest message reached, within 15 % (NVLS on the H100 and
    # H200 beats the ring's wire rate; PCIe Gen4's is far below its 32 GB/s)
    g = catalog.gpu(name)
    lat, bus = g.allreduce_fit()
    n = g.allreduce_gpus
    lo, hi = catalog.ALLREDUCE_FIT_BYTES
    for size, algbw in g.allreduce_sweep:
        if lo <= size <= hi:
            assert (lat + 2 * (n - 1) / n * size / bus) / (size / (algbw * 1e9)) == pytest.approx(1.0, abs=0.25)
    peak = max(a for _, a in g.allreduce_sweep) * 1e9 * 2 * (n - 1) / n
    assert bus == pytest.approx(peak, rel=0.15)
    assert 10e-6 < lat < 100e-6
    assert g.nvlink == (g.interconnect_gbs > 64)


def test_bad_allreduce_sweep_names_the_field():
    with pytest.raises(ValueError, match=r"h100-sxm.allreduce_sweep"):
        raw = dict(catalog._load("gpus.yaml")["h100-sxm"].items())
        raw["allreduce_sweep"] = [[1024, -1.0]]
        catalog._build(catalog.GPUType, catalog._GPU_FIELDS, "h100-sxm", raw, "gpus.yaml")


def _at_least(a, b) -> bool:
    """GPU ``a`` is at least GPU ``b`` in everything a tenant buys: memory, HBM bandwidth, dense
    BF16 peak, GPU-to-GPU link and the precisions it runs."""
    return (
        a.memory_gb >= b.memory_gb  # nominal: CUDA reports 0.06 % less on the H100 than on the A100 80GB
        and a.bandwidth_tbs >= b.bandwidth_tbs
        and a.tflops["bf16"] >= b.tflops["bf16"]
        and a.interconnect_gbs >= b.interconnect_gbs
        and set(b.precisions) <= set(a.precisions)
    )


def test_a_stronger_part_never_costs_less_per_gpu_hour():
    """docs/model.md section 1: every price comes from one provider on one date, so a part at least as
    strong as another in every figure costs at least as much per GPU-hour (0.3 priced the H200
    at another provider, 0.65x the H100). The pairs this orders include H200 >= H100 >= A100
    80GB >= A100 40GB and L40S >= L4."""
    gpus = catalog.gpus()
    pairs = [(a, b) for a in gpus for b in gpus if a != b and _at_least(gpus[a], gpus[b])]
    assert {("h200", "h100-sxm"), ("h100-sxm", "a100-80gb"), ("a100-80gb", "a100-40gb"), ("l40s", "l4")} <= set(pairs)
    for a, b in pairs:
        assert gpus[a].price_per_hour >= gpus[b].price_per_hour, (a, gpus[a].price_per_hour, b, gpus[b].price_per_hour)


def test_every_price_comes_from_one_provider_on_one_date():
    """The rule behind the ordering: one price list (Modal's per-GPU-second rates, 2026-05),
    each price its per-second rate x 3600."""
    import re

    for name, g in catalog.gpus().items():
        assert g.price_source.startswith("Modal on-demand GPU price, "), name
        assert "https://modal.com/pricing as of 2026-05" in g.price_source, name
        per_s = float(re.search(r"([0-9.]+) USD per GPU-second", g.price_source).group(1))
        assert g.price_per_hour == pytest.approx(per_s * 3600, abs=5e-5), name


def test_fp8_only_on_hopper_and_ada():
    fp8 = {n for n, g in catalog.gpus().items() if g.supports("fp8")}
    assert fp8 == {"h100-sxm", "h200", "l40s", "l4"}


def test_unsafe_table():
    u = catalog.UNSAFE
    G, P = catalog.GROUPS.index, catalog.PRECISION_CODE
    assert u[G("embedding"), P["fp8"]] and u[G("norm"), P["fp8"]] and u[G("head"), P["fp8"]]
    assert not u[G("attention"), P["bf16"]] and not u[G("mlp"), P["fp8"]]
    assert not u[:, P["bf16"]].any() and not u[:, P["fp32"]].any()


def test_unknown_key_lists_valid_keys():
    with pytest.raises(catalog.CatalogError) as e:
        catalog.gpu("h100")
    assert "h100-sxm" in str(e.value) and "l4" in str(e.value)
    with pytest.raises(catalog.CatalogError) as e:
        catalog.model("llama-2")
    assert "llama-3.1-8b" in str(e.value)


def test_explicit_head_dim_and_sliding_window_from_config_json():
    """docs/model.md section 2: Qwen3-0.6B sets head_dim 128 (hidden / heads = 64), so its q
    projection is 16 x 128 = 2048 wide and its KV cache per token twice what h / a gives;
    Mistral-7B-v0.1 attends over a 4096-token sliding window; the others derive head_dim."""
    q3 = catalog.model("qwen3-0.6b")
    assert q3.head_dim == 128 != q3.hidden // q3.heads
    assert q3.kv_bytes_per_token(2.0) == 2 * 28 * 8 * 128 * 2  # 114,688 B, not 57,344
    # q 1024 x 2048, k and v 1024 x 1024, o 2048 x 1024 per layer; QK-norm 2 x 128 per layer
    assert q3.params_by_group["attention"] == 28 * (1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024)
    assert q3.params_by_group["norm"] == (2 * 28 + 1) * 1024 + 28 * 2 * 128
    assert q3.total_params == 596_049_920
    assert (q3.total_params - q3.params_by_group["embedding"]) / 1e9 == pytest.approx(0.44, abs=0.005)  # "0.44B non-embedding"
    m = catalog.model("mistral-7b")
    assert m.sliding_window == 4096 and m.kv_tokens(10_000) == 4096 and m.kv_tokens(1000) == 1000
    for name, arch in catalog.models().items():
        if name != "qwen3-0.6b":
            assert arch.head_dim == arch.hidden // arch.heads, name
        if name != "mistral-7b":
            assert arch.sliding_window is None and arch.kv_tokens(10**6) == 10**6, name


@pytest.mark.parametrize(
    "field, value", [("head_dim", 0), ("head_dim", 12.5), ("sliding_window", -1), ("sliding_window", True), ("qk_norm", "yes")]
)
def test_bad_head_dim_or_window_names_the_field(field, value):
    raw = dict(catalog._load("models.yaml")["mistral-7b"])
    raw[field] = value
    with pytest.raises(ValueError, match=rf"models.yaml: mistral-7b\.{field} = {value!r}: expected"):
        catalog._build(catalog.ModelArch, catalog._MODEL_FIELDS, "mistral-7b", raw, "models.yaml")

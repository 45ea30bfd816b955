"""Memory and throughput against hand-computed figures (docs/model.md sections 4 and 5)."""

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.kernel import cost
from fleet_marl.tools.estimate import single_tenant_static

P = catalog.PRECISION_CODE


def terms_for(model, mode, prec, gpus=8, seq=2048, out_tokens=256, ckpt=False):
    st = single_tenant_static(model, "h100-sxm", mode, gpus, 8, seq, out_tokens, ckpt)
    p = np.array([[[P[x] for x in prec]]]) if isinstance(prec, list) else np.full((1, 1, 5), P[prec])
    return st, cost.tenant_terms(st, p, project=False)


def test_bf16_weights_are_two_bytes_per_param():
    st, t = terms_for("llama-3.1-8b", "serve", "bf16")
    m = catalog.model("llama-3.1-8b")
    assert t.weights[0, 0] == 2 * m.total_params
    mem = cost.memory_per_gpu(t, np.array([[4]]), np.array([[1]]))
    assert mem.weights[0, 0] == pytest.approx(2 * m.total_params / 4, rel=1e-12)


def test_mixed_precision_adam_is_16_bytes_per_param_sharded():
    st, t = terms_for("mistral-7b", "train", "bf16")
    n = catalog.model("mistral-7b").total_params
    mem = cost.memory_per_gpu(t, np.array([[8]]), np.array([[1]]))
    fixed = mem.weights + mem.grads + mem.master + mem.optimizer
    assert fixed[0, 0] == pytest.approx(16 * n / 8, rel=1e-12)
    assert mem.master[0, 0] == pytest.approx(4 * n / 8) and mem.optimizer[0, 0] == pytest.approx(8 * n / 8)


def test_fp32_training_has_no_separate_master_copy():
    st, t = terms_for("gpt2", "train", "fp32", seq=1024)
    n = catalog.model("gpt2").total_params
    assert t.master[0, 0] == 0
    assert (t.weights + t.grads + t.optimizer)[0, 0] == 16 * n  # 4 + 4 + 8


def test_fp8_mlp_halves_mlp_weight_bytes():
    m = catalog.model("llama-3.1-8b")
    pg = m.params_by_group
    st, t = terms_for("llama-3.1-8b", "train", ["bf16", "bf16", "fp8", "bf16", "bf16"])
    assert t.weights[0, 0] == 2 * m.total_params - pg["mlp"]


def test_korthikanti_activations():
    # s b h L (34 + 5 a s / h) bytes without FlashAttention; 34 s b h L with it; 2 s b h L checkpointed
    m = catalog.model("gpt2")
    s, h, L, a = 1024, m.hidden, m.layers, m.heads
    from fleet_marl.config import FleetConfig, ClusterSpec, TenantSpec, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    def acts(**kw):
        cfg = FleetConfig(cluster=ClusterSpec(gpu_types=("h100-sxm",)), tenants=(TenantSpec(model="gpt2", workload=WorkloadSpec(seq_len=s), **kw),))
        st = KernelStatic.from_config(cfg)
        t = cost.tenant_terms(st, np.full((1, 1, 5), P["bf16"]), project=False)
        return cost.memory_per_gpu(t, np.array([[1]]), np.array([[3]])).activations[0, 0]

    assert acts(flash_attention=False) == pytest.approx(3 * s * h * L * (34 + 5 * a * s / h), rel=1e-12)
    assert acts() == pytest.approx(3 * s * h * L * 34, rel=1e-12)
    assert acts(activation_checkpointing=True) == pytest.approx(3 * s * h * L * 2, rel=1e-12)


def test_kv_cache_bytes_gqa_and_dtype():
    m = catalog.model("llama-3.1-8b")
    per_tok = 2 * m.layers * m.kv_heads * m.head_dim * 2  # bf16
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=1000, out_tokens=24)
    mem = cost.memory_per_gpu(t, np.array([[2]]), np.array([[10]]))
    assert mem.kv_cache[0, 0] == pytest.approx(10 * 1024 * per_tok / 2, rel=1e-12)
    # FP8 attention -> FP8 KV cache; INT4 weight-only keeps a BF16 cache
    _, t8 = terms_for("llama-3.1-8b", "serve", ["bf16", "fp8", "bf16", "bf16", "bf16"], seq=1000, out_tokens=24)
    _, t4 = terms_for("llama-3.1-8b", "serve", ["bf16", "int4", "int4", "bf16", "bf16"], seq=1000, out_tokens=24)
    assert t8.per_seq_sharded[0, 0] == pytest.approx(t.per_seq_sharded[0, 0] / 2)
    assert t4.per_seq_sharded[0, 0] == pytest.approx(t.per_seq_sharded[0, 0])


def test_training_flops_are_about_6n_per_token():
    m = catalog.model("llama-3.1-70b")
    f = cost.forward_flops_per_token(m, ctx=0)
    non_emb = m.total_params - m.params_by_group["embedding"]
    assert 3 * f.sum() == pytest.approx(6 * non_emb, rel=0.01)


def test_largest_fitting_batch_is_the_boundary():
    st, t = terms_for("llama-3.1-8b", "train", "bf16", seq=4096)
    n = np.array([[8]])
    b = int(cost.largest_fitting_batch(t, n, st.mem_bytes)[0, 0])
    fits = lambda k: cost.memory_per_gpu(t, n, np.array([[k]])).total[0, 0] <= st.mem_bytes[0]  # noqa: E731
    assert b >= 1 and fits(b) and not fits(b + 1)


def test_cross_node_is_slower_than_inside_a_node():
    st, t = terms_for("llama-3.1-8b", "train", "bf16", gpus=16)
    n, b = np.array([[8]]), np.array([[1]])
    one = cost.throughput(st, t, n, b, np.array([[1]]))
    two = cost.throughput(st, t, n, b, np.array([[2]]))
    assert two.work_rate[0, 0] < one.work_rate[0, 0]
    assert two.efficiency[0, 0] < one.efficiency[0, 0] <= 1.0


def test_fp8_faster_than_bf16_on_hopper_and_decode_is_memory_bound():
    st, tb = terms_for("llama-3.1-8b", "train", "bf16")
    _, tf = terms_for("llama-3.1-8b", "train", ["bf16", "fp8", "fp8", "bf16", "bf16"])
    n, b, k = np.array([[1]]), np.array([[1]]), np.array([[1]])
    assert cost.throughput(st, tf, n, b, k).work_rate[0, 0] > cost.throughput(st, tb, n, b, k).work_rate[0, 0]
    st, ts = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    thr = cost.throughput(st, ts, np.array([[1]]), np.array([[1]]), k)
    # at batch 1 a decode step reads every weight once: TPOT ~ bytes / (bandwidth * MBU)
    expect = (ts.weights[0, 0] + ts.kv_read_per_seq[0, 0]) / (st.bw[0] * st.mbu)
    assert thr.tpot_s[0, 0] == pytest.approx(expect, rel=1e-12)


def test_kv_cache_splits_over_at_most_kv_heads_gpus():
    # Qwen2.5-0.5B has 2 KV heads: on 8 GPUs each GPU still holds half the cache
    st, t = terms_for("qwen2.5-0.5b", "serve", "bf16", seq=512, out_tokens=128)
    two = cost.memory_per_gpu(t, np.array([[2]]), np.array([[4]])).kv_cache[0, 0]
    eight = cost.memory_per_gpu(t, np.array([[8]]), np.array([[4]])).kv_cache[0, 0]
    assert two == eight == pytest.approx(4 * t.per_seq_sharded[0, 0] / 2)

"""Memory and throughput against hand-computed figures (docs/model.md sections 4 and 5), on
the compiled round's own functions (``kernel.stage1``, ``engine.memory_per_gpu``,
``engine.fitting_batch``, ``engine.roofline``)."""

from typing import NamedTuple

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.kernel import cost, engine, stage1
from fleet_marl.tools.estimate import single_tenant_static

P = catalog.PRECISION_CODE


class Mem(NamedTuple):
    weights: float
    grads: float
    master: float
    optimizer: float
    activations: float
    kv_cache: float

    @property
    def total(self):
        return sum(self)


class Thr(NamedTuple):
    work_rate: float
    tokens_per_s: float
    efficiency: float
    ttft_s: float
    tpot_s: float


def terms_for(model, mode, prec, gpus=8, seq=2048, out_tokens=256, ckpt=False):
    st = single_tenant_static(model, "h100-sxm", mode, gpus, 8, seq, out_tokens, ckpt)
    p = np.array([[P[x] for x in prec]]) if isinstance(prec, list) else np.full((1, 5), P[prec])
    return st, stage1(st, p, project=False)


def memory_per_gpu(t, n, b) -> Mem:
    return Mem(*engine.memory_per_gpu(t.weights[0], t.grads[0], t.master[0], t.optimizer[0], t.per_seq_local[0], t.per_seq_sharded[0], t.kv_heads[0], n, b))


def fitting_batch(t, n, capacity) -> float:
    return engine.fitting_batch(t.weights[0], t.grads[0], t.master[0], t.optimizer[0], t.per_seq_local[0], t.per_seq_sharded[0], t.kv_heads[0], n, capacity)


def throughput(st, t, n, b, nodes) -> Thr:
    return Thr(*engine.roofline(
        bool(st.is_train[0]), bool(st.checkpointing[0]), st.seq_len[0], st.prompt_tokens[0], st.output_tokens[0], st.bw[0], st.intra_bw[0],
        st.inter_bw[0], st.mbu, st.comm_overlap, t.weights[0], t.time_per_token[0], t.kv_read_per_seq[0], t.comm_bytes[0], t.kv_heads[0], n, b, nodes,
    ))


def test_bf16_weights_are_two_bytes_per_param():
    st, t = terms_for("llama-3.1-8b", "serve", "bf16")
    m = catalog.model("llama-3.1-8b")
    assert t.weights == 2 * m.total_params
    mem = memory_per_gpu(t, 4, 1)
    assert mem.weights == pytest.approx(2 * m.total_params / 4, rel=1e-12)


def test_mixed_precision_adam_is_16_bytes_per_param_sharded():
    st, t = terms_for("mistral-7b", "train", "bf16")
    n = catalog.model("mistral-7b").total_params
    mem = memory_per_gpu(t, 8, 1)
    fixed = mem.weights + mem.grads + mem.master + mem.optimizer
    assert fixed == pytest.approx(16 * n / 8, rel=1e-12)
    assert mem.master == pytest.approx(4 * n / 8) and mem.optimizer == pytest.approx(8 * n / 8)


def test_fp32_training_has_no_separate_master_copy():
    st, t = terms_for("gpt2", "train", "fp32", seq=1024)
    n = catalog.model("gpt2").total_params
    assert t.master == 0
    assert (t.weights + t.grads + t.optimizer)[0] == 16 * n  # 4 + 4 + 8


def test_fp8_mlp_halves_mlp_weight_bytes():
    m = catalog.model("llama-3.1-8b")
    pg = m.params_by_group
    st, t = terms_for("llama-3.1-8b", "train", ["bf16", "bf16", "fp8", "bf16", "bf16"])
    assert t.weights == 2 * m.total_params - pg["mlp"]


def test_korthikanti_activations():
    # s b h L (34 + 5 a s / h) bytes without FlashAttention; 34 s b h L with it; 2 s b h L checkpointed
    m = catalog.model("gpt2")
    s, h, L, a = 1024, m.hidden, m.layers, m.heads
    from fleet_marl.config import FleetConfig, ClusterSpec, TenantSpec, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    def acts(**kw):
        cfg = FleetConfig(cluster=ClusterSpec(gpu_types=("h100-sxm",)), tenants=(TenantSpec(model="gpt2", workload=WorkloadSpec(seq_len=s), **kw),))
        st = KernelStatic.from_config(cfg)
        t = stage1(st, np.full((1, 5), P["bf16"]), project=False)
        return memory_per_gpu(t, 1, 3).activations

    assert acts(flash_attention=False) == pytest.approx(3 * s * h * L * (34 + 5 * a * s / h), rel=1e-12)
    assert acts() == pytest.approx(3 * s * h * L * 34, rel=1e-12)
    assert acts(activation_checkpointing=True) == pytest.approx(3 * s * h * L * 2, rel=1e-12)


def test_kv_cache_bytes_gqa_and_dtype():
    m = catalog.model("llama-3.1-8b")
    per_tok = 2 * m.layers * m.kv_heads * m.head_dim * 2  # bf16
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=1000, out_tokens=24)
    mem = memory_per_gpu(t, 2, 10)
    assert mem.kv_cache == pytest.approx(10 * 1024 * per_tok / 2, rel=1e-12)
    # FP8 attention -> FP8 KV cache; INT4 weight-only keeps a BF16 cache
    _, t8 = terms_for("llama-3.1-8b", "serve", ["bf16", "fp8", "bf16", "bf16", "bf16"], seq=1000, out_tokens=24)
    _, t4 = terms_for("llama-3.1-8b", "serve", ["bf16", "int4", "int4", "bf16", "bf16"], seq=1000, out_tokens=24)
    assert t8.per_seq_sharded == pytest.approx(t.per_seq_sharded / 2)
    assert t4.per_seq_sharded == pytest.approx(t.per_seq_sharded)


def test_training_flops_are_about_6n_per_token():
    m = catalog.model("llama-3.1-70b")
    f = cost.forward_flops_per_token(m, ctx=0)
    non_emb = m.total_params - m.params_by_group["embedding"]
    assert 3 * f.sum() == pytest.approx(6 * non_emb, rel=0.01)


def test_largest_fitting_batch_is_the_boundary():
    st, t = terms_for("llama-3.1-8b", "train", "bf16", seq=4096)
    n = 8
    b = int(fitting_batch(t, n, st.mem_bytes[0]))
    fits = lambda k: memory_per_gpu(t, n, k).total <= st.mem_bytes[0]  # noqa: E731
    assert b >= 1 and fits(b) and not fits(b + 1)


def test_cross_node_is_slower_than_inside_a_node():
    st, t = terms_for("llama-3.1-8b", "train", "bf16", gpus=16)
    n, b = 8, 1
    one = throughput(st, t, n, b, 1)
    two = throughput(st, t, n, b, 2)
    assert two.work_rate < one.work_rate
    assert two.efficiency < one.efficiency <= 1.0


def test_fp8_faster_than_bf16_on_hopper_and_decode_is_memory_bound():
    st, tb = terms_for("llama-3.1-8b", "train", "bf16")
    _, tf = terms_for("llama-3.1-8b", "train", ["bf16", "fp8", "fp8", "bf16", "bf16"])
    n, b, k = 1, 1, 1
    assert throughput(st, tf, n, b, k).work_rate > throughput(st, tb, n, b, k).work_rate
    st, ts = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    thr = throughput(st, ts, 1, 1, k)
    # at batch 1 a decode step reads every weight once: TPOT ~ bytes / (bandwidth * MBU)
    expect = (ts.weights + ts.kv_read_per_seq) / (st.bw[0] * st.mbu)
    assert thr.tpot_s == pytest.approx(expect, rel=1e-12)


def test_kv_cache_splits_over_at_most_kv_heads_gpus():
    # Qwen2.5-0.5B has 2 KV heads: on 8 GPUs each GPU still holds half the cache
    st, t = terms_for("qwen2.5-0.5b", "serve", "bf16", seq=512, out_tokens=128)
    two = memory_per_gpu(t, 2, 4).kv_cache
    eight = memory_per_gpu(t, 8, 4).kv_cache
    assert two == eight == pytest.approx(4 * t.per_seq_sharded / 2)

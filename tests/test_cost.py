"""Memory and throughput against hand-computed figures (docs/model.md sections 4 and 5), on
the compiled round's own functions (``kernel.stage1``, ``engine.memory_per_gpu``,
``engine.fitting_batch``, ``engine.roofline``)."""

from typing import NamedTuple

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.kernel import activations, cost, engine, stage1
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


def terms_for(model, mode, prec, gpus=8, seq=2048, out_tokens=256, ckpt=False, gpu="h100-sxm"):
    st = single_tenant_static(model, gpu, mode, gpus, 8, seq, out_tokens, ckpt)
    p = np.array([[P[x] for x in prec]]) if isinstance(prec, list) else np.full((1, 5), P[prec])
    return st, stage1(st, p, project=False)


def memory_per_gpu(t, n, b) -> Mem:
    return Mem(
        *engine.memory_per_gpu(
            t.weights[0], t.grads[0], t.master[0], t.optimizer[0], t.per_seq_local[0], t.per_seq_sharded[0], t.kv_heads[0], n, b
        )
    )


def fitting_batch(t, n, capacity) -> float:
    return engine.fitting_batch(
        t.weights[0], t.grads[0], t.master[0], t.optimizer[0], t.per_seq_local[0], t.per_seq_sharded[0], t.kv_heads[0], n, capacity
    )


def throughput(st, t, n, b, nodes) -> Thr:
    return Thr(*engine.tenant_roofline(st, t, 0, n, b, nodes))


def test_bf16_weights_are_two_bytes_per_param():
    _st, t = terms_for("llama-3.1-8b", "serve", "bf16")
    m = catalog.model("llama-3.1-8b")
    assert t.weights == 2 * m.total_params
    mem = memory_per_gpu(t, 4, 1)
    assert mem.weights == pytest.approx(2 * m.total_params / 4, rel=1e-12)


def test_mixed_precision_adam_is_16_bytes_per_param_sharded():
    _st, t = terms_for("mistral-7b", "train", "bf16")
    n = catalog.model("mistral-7b").total_params
    mem = memory_per_gpu(t, 8, 1)
    fixed = mem.weights + mem.grads + mem.master + mem.optimizer
    assert fixed == pytest.approx(16 * n / 8, rel=1e-12)
    assert mem.master == pytest.approx(4 * n / 8) and mem.optimizer == pytest.approx(8 * n / 8)


def test_fp32_training_has_no_separate_master_copy():
    _st, t = terms_for("gpt2", "train", "fp32", seq=1024)
    n = catalog.model("gpt2").total_params
    assert t.master == 0
    assert (t.weights + t.grads + t.optimizer)[0] == 16 * n  # 4 + 4 + 8


def test_fp8_training_keeps_bf16_weights_serving_halves_them():
    # FP8 recipes (Transformer Engine, torchao) keep BF16 weights and an FP32 master in training;
    # a served FP8 checkpoint stores 1 byte per weight
    m = catalog.model("llama-3.1-8b")
    pg = m.params_by_group
    fp8_mlp = ["bf16", "bf16", "fp8", "bf16", "bf16"]
    _, t = terms_for("llama-3.1-8b", "train", fp8_mlp)
    assert t.weights == 2 * m.total_params
    _, ts = terms_for("llama-3.1-8b", "serve", fp8_mlp)
    assert ts.weights == 2 * m.total_params - pg["mlp"]


def test_fp8_gemm_speedup_by_hand():
    # torchao's roofline: 3 GEMMs at 0.78 of peak; casts of input (6 B), grad output (6 B) and
    # weight (8 B) per element at 0.92 of HBM bandwidth. M, K, N = 4096, 8192, 16384 on an H100.
    g = catalog.gpu("h100-sxm")
    M, K, N = 4096, 8192, 16384
    bf = 6 * M * K * N / (989.4e12 * 0.78)
    f8 = 6 * M * K * N / (1978.9e12 * 0.78) + (6 * M * K + 6 * M * N + 8 * K * N) / (3.35e12 * 0.92)
    assert cost.linear_seconds(M, K, N, g, "bf16") == pytest.approx(bf, rel=1e-12)
    assert cost.linear_seconds(M, K, N, g, "fp8") == pytest.approx(f8, rel=1e-12)
    assert bf / f8 == pytest.approx(1.59, abs=0.01)
    # a small GEMM is slower in FP8: the casts outweigh the faster GEMM
    assert cost.linear_seconds(1024, 2048, 1024, g, "fp8") > cost.linear_seconds(1024, 2048, 1024, g, "bf16")


def test_activations_per_block_by_hand():
    # GPT-2 block (LayerNorm, MHA, GeLU MLP of 4h, no dropout), bytes per token at 16 bit: norms
    # 4h, attention 2h + 2(3h) + 2h = 10h, MLP 2h + 4(4h) = 18h -> 32h (Korthikanti's 34h less the
    # two dropout masks); after the blocks 4h + 12V (the eager loss's backward: the saved FP32
    # log-probabilities and two FP32 gradients); 5as more per block without FlashAttention;
    # checkpointed: 2h per block plus one block and the logits
    m = catalog.model("gpt2")
    s, h, L, a = 1024, m.hidden, m.layers, m.heads
    from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    def acts(**kw):
        cfg = FleetConfig(
            cluster=ClusterSpec(gpu_types=("h100-sxm",)), tenants=(TenantSpec(model="gpt2", workload=WorkloadSpec(seq_len=s), **kw),)
        )
        st = KernelStatic.from_config(cfg)
        t = stage1(st, np.full((1, 5), P["bf16"]), project=False)
        return memory_per_gpu(t, 1, 3).activations

    final = 4 * h + 12 * m.vocab
    assert acts(flash_attention=False) == pytest.approx(3 * s * (L * (32 * h + 5 * a * s) + final), rel=1e-12)
    assert acts() == pytest.approx(3 * s * (32 * h * L + final), rel=1e-12)
    assert acts(activation_checkpointing=True) == pytest.approx(3 * s * (2 * h * L + 32 * h + final), rel=1e-12)
    # Llama-3.1-8B (SwiGLU, GQA): norms 4h, attention 2h + 2(q + 2k) + 2q, MLP 2h + 8 ffn
    l8 = catalog.model("llama-3.1-8b")
    q, k = 4096, 1024
    assert activations.activation_bytes(l8) == (
        4 * 4096 + 2 * 4096 + 2 * (q + 2 * k) + 2 * q + 2 * 4096 + 8 * 14336,
        4 * 4096 + 12 * 128256,
    )
    # the loss by implementation: fused (2V logits + 2V gradient), torchtune's chunked (2V + 1V)
    assert activations.activation_bytes(l8, "fused")[1] == 4 * 4096 + 4 * 128256
    assert activations.activation_bytes(l8, "chunked")[1] == 4 * 4096 + 3 * 128256
    with pytest.raises(ValueError, match="loss"):
        activations.activation_bytes(l8, "fp32")


def test_selective_checkpointing_by_hand():
    # torchtitan's per-op policy on a Llama-3.1-8B block: the matmuls run q, k, v, o, w1 (gate),
    # w3 (up), w2 (down); it saves the 1st, 3rd, 5th and 7th (q, v, gate, down), the attention
    # output and its FP32 log-sum-exp, and the block's input; it recomputes k, o and up
    m = catalog.model("llama-3.1-8b")
    h, q, k, f, a = 4096, 4096, 1024, 14336, 32
    kept, share = activations.selective_checkpointing(m)
    assert kept == 2 * h + 2 * q + 2 * k + 2 * f + 2 * h + 2 * q + 4 * a
    assert share[cost.ATT] == pytest.approx((h * k + q * h) / (h * q + 2 * h * k + q * h), rel=1e-12)
    assert share[cost.MLP] == pytest.approx(1 / 3, rel=1e-12)
    assert share[cost.HEAD] == share[cost.EMB] == share[cost.NORM] == 0
    # GPT-2 (GeLU MLP: fc, proj): proj, the 6th matmul, is recomputed; fc's output is kept
    g = catalog.model("gpt2")
    kept_g, share_g = activations.selective_checkpointing(g)
    assert kept_g == 2 * 768 + 2 * 768 + 2 * 768 + 2 * 3072 + 2 * 768 + 4 * 12
    assert share_g[cost.MLP] == 0.5 and share_g[cost.ATT] == 0.5


def test_checkpointing_modes_order_memory_and_time():
    # selective keeps more than full and less than none, and recomputes less than full
    def run(mode):
        st, t = terms_for("llama-3.1-8b", "train", "bf16", seq=8192, ckpt=mode)
        return t.per_seq_local[0], throughput(st, t, 8, 1, 1).tokens_per_s

    (m0, r0), (m1, r1), (m2, r2) = run(False), run("full"), run("selective")
    assert m1 < m2 < m0 and r1 < r2 < r0
    assert run(True) == (m1, r1) and run("none") == (m0, r0)
    # selective by hand: 32 blocks keep act_sac, one block is recomputed in full, then the logits
    m = catalog.model("llama-3.1-8b")
    per_layer, final = activations.activation_bytes(m)
    assert m2 == pytest.approx(8192 * (32 * activations.selective_checkpointing(m)[0] + per_layer + final), rel=1e-12)


def test_activation_checkpointing_rejects_unknown_modes():
    from fleet_marl.config import ConfigError, TenantSpec

    for bad in ("partial", 1, None, "Full"):
        with pytest.raises(ConfigError, match="activation_checkpointing"):
            TenantSpec(activation_checkpointing=bad)


def test_kv_cache_bytes_gqa_and_dtype():
    m = catalog.model("llama-3.1-8b")
    per_tok = 2 * m.layers * m.kv_heads * m.head_dim * 2  # bf16
    _st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=1000, out_tokens=24)
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


def test_a_training_step_ends_with_the_optimizer_step():
    # Llama-3.1-8B (8,030,261,248 parameters) in BF16 with FP32 master, gradients and moments on 8
    # H100s: unfused AdamW with norm clipping moves 92 B per parameter (lerp 12, mul 8, addcmul 12,
    # weight decay 8, sqrt / div / add 24, addcdiv 16; clipping 12), on each GPU's eighth, at 0.92 of
    # 3.35 TB/s: 92 x 8,030,261,248 / 8 / 3.082e12 = 29.96 ms per step, whatever the batch
    st, t = terms_for("llama-3.1-8b", "train", "bf16")
    assert t.optimizer[0] == 8.0 * 8_030_261_248
    n, b = 8, 2
    with_opt = throughput(st, t, n, b, 1)
    without = Thr(*engine.tenant_roofline(st, t, 0, n, b, 1, optimizer=0.0))
    tokens = n * b * st.seq_len[0]
    assert tokens / with_opt.work_rate - tokens / without.work_rate == pytest.approx(92 * 8_030_261_248 / 8 / (3.35e12 * 0.92), rel=1e-9)
    # a step that accumulates over 4 batches pays a quarter per batch (the validation's grad_accum)
    quarter = Thr(*engine.tenant_roofline(st, t, 0, n, b, 1, optimizer=t.optimizer[0] / 4))
    assert tokens / quarter.work_rate - tokens / without.work_rate == pytest.approx(0.0299636614 / 4, rel=1e-8)


def test_a_ring_across_nodes_runs_on_every_nic_of_a_node():
    # 16 GPUs on 2 nodes: each node's 8 GPUs drive their 8 NICs at once, so the collective runs
    # at min(NVLink, 8 x 50 GB/s) per GPU, not at one NIC's 50 GB/s (stas00/ml-engineering,
    # network/README.md: the single-NIC model is "3.9x more than measured"); 4 GPUs per node
    # drive 4 NICs
    st, t = terms_for("llama-3.1-8b", "train", "bf16", gpus=16)
    b = 1
    comp = st.seq_len[0] * b * t.time_per_token[0]
    hide = 1.0 - st.comm_overlap
    for n, nodes in ((16, 2), (8, 2), (16, 4)):
        link = min(st.intra_bw[0], n / nodes * st.inter_bw[0])
        comm = t.comm_bytes[0] * (n - 1) / n / link
        opt = 92.0 * 8_030_261_248 / n / (3.35e12 * 0.92)  # the optimizer step (below)
        assert throughput(st, t, n, b, nodes).work_rate == pytest.approx(n * b * st.seq_len[0] / (comp + hide * comm + opt), rel=1e-12)
    assert st.inter_bw[0] == 50e9 and st.intra_bw[0] == 450e9  # H100: 8 NICs (400 GB/s) bind, not NVLink


def test_fp8_faster_than_bf16_on_hopper_and_decode_is_memory_bound():
    st, tb = terms_for("llama-3.1-8b", "train", "bf16")
    _, tf = terms_for("llama-3.1-8b", "train", ["bf16", "fp8", "fp8", "bf16", "bf16"])
    n, b, k = 1, 1, 1
    assert throughput(st, tf, n, b, k).work_rate > throughput(st, tb, n, b, k).work_rate
    st, ts = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    thr = throughput(st, ts, 1, 1, k)
    # at batch 1 a decode step reads every weight once: TPOT ~ bytes / (bandwidth * 0.92) and the
    # KV cache at MBU, plus the step's work on its 1 + 512 / 128 tokens (one decode token and its
    # prompt's share), its kernels' stalls and the serving engine's fixed overhead per step
    tau, head = ts.time_per_token[0], ts.head_time_per_token[0]
    # the step's FLOPs and elementwise traffic after the weights' stream: the decode token, and
    # 512 / 128 prompt tokens of which one in 512 runs the LM head
    flops = tau + (512.0 * (tau - head) + head) / 128.0
    fixed = cost.STEP_OVERHEAD_S + cost.kernel_stall_seconds(st)[0]
    expect = ts.stream_bytes[0] / (st.bw[0] * cost.CAST_BW_EFF) + ts.kv_read_per_seq[0] / (st.bw[0] * st.mbu) + flops + fixed
    assert thr.tpot_s == pytest.approx(expect, rel=1e-12)


def test_kv_cache_splits_over_at_most_kv_heads_gpus():
    # Qwen2.5-0.5B has 2 KV heads: on 8 GPUs each GPU still holds half the cache
    _st, t = terms_for("qwen2.5-0.5b", "serve", "bf16", seq=512, out_tokens=128)
    two = memory_per_gpu(t, 2, 4).kv_cache
    eight = memory_per_gpu(t, 8, 4).kv_cache
    assert two == eight == pytest.approx(4 * t.per_seq_sharded / 2)


def roofline_at(st, t, n, b, tp_calls) -> Thr:
    """The serving roofline on one node with a given number of all-reduces per forward pass."""
    job, hw, terms = engine.tenant_groups(st, t, 0)
    return Thr(*engine.roofline(job, hw, terms._replace(tp_calls=float(tp_calls), optimizer=0.0), n, b, 1))


def test_serve_elementwise_bytes_by_hand():
    # Llama-3.1-8B: h 4096, ffn 14336, q 32 x 128, k 8 x 128, 32 layers, BF16. Per block two fused
    # add + RMSNorms (4h values each), rotary on q and k in place (2(q + k)), SiluAndMul (3 ffn);
    # after the blocks the final norm (4h)
    per_block = 2 * 4 * 4096 + 2 * (4096 + 1024) + 3 * 14336
    assert cost.serve_elementwise_bytes(catalog.model("llama-3.1-8b")) == 2 * (32 * per_block + 4 * 4096) == 5_537_792
    # a GeLU MLP reads and writes ffn (GPT-2: h 768, ffn 3072, 12 heads of 64, 12 layers)
    gpt2 = 2 * (12 * (8 * 768 + 2 * (768 + 768) + 2 * 3072) + 4 * 768)
    assert cost.serve_elementwise_bytes(catalog.model("gpt2")) == gpt2
    # serving prices them (in the norm group) instead of training's saved-activation traffic
    st, _ = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    norm = cost.seconds_per_token_table(st)[0, cost.NORM, P["bf16"]] / st.mfu
    assert norm == pytest.approx(5_537_792 / (st.bw[0] * cost.CAST_BW_EFF), rel=1e-12)


def test_norms_run_whole_on_every_tensor_parallel_gpu():
    # the two fused add + RMSNorms of a block (4 h values each) and the final norm (4 h) act on
    # the full hidden state on each GPU of a tensor-parallel replica (vLLM's RMSNorm(hidden_size)
    # beside the parallel linear layers); Llama-3.1-70B: h 8,192, 80 layers, BF16
    m = catalog.model("llama-3.1-70b")
    assert cost.serve_replicated_bytes(m) == 2 * (80 * 8 * 8192 + 4 * 8192) == 10_551_296
    assert cost.serve_replicated_bytes(m) < cost.serve_elementwise_bytes(m)
    st, t = terms_for("llama-3.1-70b", "serve", "bf16", seq=512, out_tokens=128)
    rep = cost.replicated_seconds(st)[0]
    assert rep == pytest.approx(10_551_296 / (3.35e12 * 0.92), rel=1e-12)
    # on n GPUs a step of m tokens pays (1 - 1 / n) of them more than an even split would
    n, b = 4, 64
    m_tok = b * (1 + 512 / 128)
    job, hw, terms = engine.tenant_groups(st, t, 0, optimizer=0.0)
    assert terms.replicated_s == rep
    even = terms._replace(replicated_s=0.0)
    whole = Thr(*engine.roofline(job, hw, terms, n, b, 1))
    split = Thr(*engine.roofline(job, hw, even, n, b, 1))
    assert whole.tpot_s - split.tpot_s == pytest.approx(m_tok * rep * (1 - 1 / n), rel=1e-9)
    # one GPU runs them once either way; training replicates nothing
    assert Thr(*engine.roofline(job, hw, terms, 1, b, 1)) == Thr(*engine.roofline(job, hw, even, 1, b, 1))
    st_train, _ = terms_for("llama-3.1-70b", "train", "bf16")
    assert cost.replicated_seconds(st_train)[0] == 0.0


def test_int4_weights_carry_group_scales_and_zeros():
    # 0.5 B of packed weight + one 2-byte scale and one 4-bit zero per 128 weights (vLLM AWQ)
    assert catalog.PRECISION_BYTES[P["int4"]] == 0.5 + 2.5 / 128
    m = catalog.model("llama-3.1-8b")
    _, t = terms_for("llama-3.1-8b", "serve", ["bf16", "int4", "int4", "bf16", "bf16"])
    pg = m.params_by_group
    linear = pg["attention"] + pg["mlp"]
    assert t.weights[0] == pytest.approx(2.0 * (m.total_params - linear) + 0.51953125 * linear, rel=1e-12)


def test_tensor_parallel_pass_pays_its_allreduces_on_the_faster_path():
    # two all-reduces per layer on the critical path of every forward pass on > 1 GPU, each of
    # the pass's tokens' hidden states (h BF16 values); the engine takes the faster of NCCL's ring
    # (the line through the GPU type's published sweep) and, on NVLink, the custom one-shot
    # kernel (6 us, then each GPU reads its n - 1 peers' buffers over its link)
    st, t = terms_for("llama-3.1-70b", "serve", "bf16", seq=512, out_tokens=128)
    calls = cost.tp_allreduces(st)[0]
    assert calls == 2 * 80
    lat, bus = catalog.gpu("h100-sxm").allreduce_fit()
    assert (st.ar_lat[0], st.ar_bus[0], st.nvlink[0]) == (lat, bus, 1.0)
    n = 4
    for b, path in ((1, "custom"), (1024, "nccl")):
        m = b * (1 + 512 / 128)  # the step's decode tokens and its prompts' share
        size = m * 80 * 2 * 8192 * 2  # 2 L all-reduces of m x h BF16 values
        nccl = calls * lat + 2 * (n - 1) / n * size / bus
        custom = calls * 6e-6 + (n - 1) * size / 450e9
        assert (custom < nccl) == (path == "custom")
        # against the same bytes with no call's latency (0 calls: the faster path's bytes alone)
        slow, fast = roofline_at(st, t, n, b, calls), roofline_at(st, t, n, b, 0.0)
        bytes_only = min(2 * (n - 1) / n * size / bus, (n - 1) * size / 450e9)
        assert slow.tpot_s - fast.tpot_s == pytest.approx(min(nccl, custom) - bytes_only, rel=1e-9)
        assert slow.work_rate < fast.work_rate
    # one GPU has no all-reduce
    assert roofline_at(st, t, 1, 8, calls) == roofline_at(st, t, 1, 8, 0.0)
    # PCIe GPUs have no custom kernel: NCCL's line, latency and all, even for one token's pass
    st_l, t_l = terms_for("llama-3.1-70b", "serve", "bf16", seq=512, out_tokens=128, gpu="l40s")
    lat_l, bus_l = catalog.gpu("l40s").allreduce_fit()
    assert st_l.nvlink[0] == 0.0 and bus_l < 20e9
    size = 5 * 80 * 2 * 8192 * 2
    pcie = calls * lat_l + 2 * 7 / 8 * size / bus_l
    gap = roofline_at(st_l, t_l, 8, 1, calls).tpot_s - roofline_at(st_l, t_l, 8, 1, 0.0).tpot_s
    assert gap == pytest.approx(calls * lat_l, rel=1e-9) and pcie > calls * lat_l
    # training tenants carry none
    st_train, _ = terms_for("llama-3.1-70b", "train", "bf16")
    assert cost.tp_allreduces(st_train)[0] == 0.0


def test_every_forward_pass_stalls_at_its_kernels_boundaries():
    # Hazy Research's "No Bubbles": about 5 us of stalling per kernel; vLLM's Llama decoder layer
    # runs 10 kernels (2 fused add + norms, qkv, rotary, cache write, attention, o, gate_up,
    # SiluAndMul, down). Llama-3.1-8B: 32 x 10 x 5 us = 1.6 ms per forward pass
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    stall = cost.kernel_stall_seconds(st)[0]
    assert stall == pytest.approx(32 * 10 * 5e-6, rel=1e-12) == pytest.approx(1.6e-3, rel=1e-12)
    calls = cost.tp_allreduces(st)[0]
    for n, b in ((1, 1), (1, 64), (4, 16)):  # every GPU of the replica runs every kernel
        base = roofline_at(st, t, n, b, calls)
        job, hw, terms = engine.tenant_groups(st, t, 0)
        none = Thr(*engine.roofline(job, hw, terms._replace(tp_calls=calls, kernel_s=0.0, dequant_tokens=0.0, optimizer=0.0), n, b, 1))
        assert base.tpot_s - none.tpot_s == pytest.approx(stall, rel=1e-9)
        assert base.ttft_s - none.ttft_s == pytest.approx(stall * (1.0 + (1.0 - np.exp(1.0 - b)) * 0.5), rel=1e-9)
    st_train, _ = terms_for("llama-3.1-8b", "train", "bf16")
    assert cost.kernel_stall_seconds(st_train)[0] == 0.0


def test_a_pass_looks_up_its_embedding_rows_and_streams_the_rest():
    # an embedding lookup reads its tokens' rows; an untied table (Llama-3.1-8B: V = 128,256,
    # h = 4,096, BF16: 1.05 GB, 6.5 % of the weights) is not streamed, a tied one is (the LM head)
    m = catalog.model("llama-3.1-8b")
    _st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=512, out_tokens=128)
    assert not m.tied_embeddings
    assert t.stream_bytes[0] == pytest.approx(t.weights[0] - 2.0 * 128_256 * 4096, rel=1e-12)
    _, tied = terms_for("qwen2.5-0.5b", "serve", "bf16", seq=512, out_tokens=128)
    assert catalog.model("qwen2.5-0.5b").tied_embeddings and tied.stream_bytes[0] == tied.weights[0]
    # the memory still holds the whole table
    assert engine.memory_per_gpu(t.weights[0], 0.0, 0.0, 0.0, 0.0, 0.0, 8.0, 1, 1)[0] == t.weights[0]


def test_in_flight_step_carries_the_prompts_share():
    # a step carries b decode tokens and b P / O prompt tokens after streaming the weights once:
    # requests/s = b / (O t_dec), and a longer prompt makes every step (the TPOT) longer
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=2048, out_tokens=128)
    b = 32
    thr = roofline_at(st, t, 1, b, 0.0)
    w_read = t.stream_bytes[0] / (st.bw[0] * cost.CAST_BW_EFF)
    kv = b * t.kv_read_per_seq[0] / (st.bw[0] * st.mbu)
    tau, head = t.time_per_token[0], t.head_time_per_token[0]
    work = b * tau + b / 128 * (2048 * (tau - head) + head)  # a prompt's last token alone runs the LM head
    fixed = cost.STEP_OVERHEAD_S + cost.kernel_stall_seconds(st)[0]
    assert thr.tpot_s == pytest.approx(w_read + kv + work + fixed, rel=1e-12)
    assert thr.work_rate == pytest.approx(b / (128 * thr.tpot_s), rel=1e-12)
    st_short, t_short = terms_for("llama-3.1-8b", "serve", "bf16", seq=128, out_tokens=128)
    assert roofline_at(st_short, t_short, 1, b, 0.0).tpot_s < thr.tpot_s
    # batching amortises the weights' stream over the step's tokens, not the prompts' FLOPs: 32
    # requests at once serve more than 10x, less than 32x, one at a time
    one = roofline_at(st, t, 1, 1, 0.0).work_rate
    assert 10 * one < thr.work_rate < 32 * one


def test_ttft_waits_for_the_running_step():
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=467, out_tokens=256)
    w_read = t.stream_bytes[0] / (st.bw[0] * cost.CAST_BW_EFF)
    fixed = cost.STEP_OVERHEAD_S + cost.kernel_stall_seconds(st)[0]
    prefill = w_read + 467 * (t.time_per_token[0] - t.head_time_per_token[0]) + t.head_time_per_token[0] + fixed
    alone = roofline_at(st, t, 1, 1, 0.0)
    assert alone.ttft_s == pytest.approx(prefill, rel=1e-12)  # nothing else runs: no wait

    def others(thr, b):  # the other b - 1 requests' work in the step that carries the prompt
        return (thr.tpot_s - w_read - fixed) * (b - 1) / b

    busy = roofline_at(st, t, 1, 64, 0.0)
    # 63 others: the engine is busy (1 - e^-63 = 1), a new request waits half a step on average
    assert busy.ttft_s == pytest.approx(prefill + others(busy, 64) + 0.5 * busy.tpot_s, rel=1e-12)
    two = roofline_at(st, t, 1, 2, 0.0)
    assert two.ttft_s == pytest.approx(prefill + others(two, 2) + (1 - np.exp(-1.0)) * 0.5 * two.tpot_s, rel=1e-12)


def test_a_prompt_shares_its_step_with_the_running_requests():
    # in-flight batching runs a new prompt inside the next step, so its first token comes when
    # that step ends, after the running requests' decode tokens and KV reads: at a load the TTFT
    # grows by nearly a whole step's per-request work, not just the wait for the running step
    st, t = terms_for("llama-3.1-8b", "serve", "bf16", seq=467, out_tokens=256)
    b = 256
    thr = roofline_at(st, t, 1, b, 0.0)
    kv = b * t.kv_read_per_seq[0] / (st.bw[0] * st.mbu)
    tau, head = t.time_per_token[0], t.head_time_per_token[0]
    run = kv + b * tau + b / 256 * (467 * (tau - head) + head)  # the step less weights, stalls and 1 ms
    prefill = roofline_at(st, t, 1, 1, 0.0).ttft_s
    assert thr.ttft_s == pytest.approx(prefill + run * (b - 1) / b + 0.5 * thr.tpot_s, rel=1e-12)
    assert thr.ttft_s > prefill + thr.tpot_s  # more than the old prefill + a whole step's wait


def test_a_prompt_runs_the_lm_head_once():
    # engines compute logits for a prompt's last position only (vLLM's LogitsProcessor prunes the
    # hidden states to the sampled tokens), so a prefill pays the head once, a decode token once
    st, t = terms_for("qwen2.5-0.5b", "serve", "bf16", seq=1000, out_tokens=100)
    m = catalog.model("qwen2.5-0.5b")
    head = t.head_time_per_token[0]
    # the head: 2 V h FLOPs at the BF16 peak x the GEMM efficiency
    assert head == pytest.approx(2 * m.vocab * m.hidden / (st.peak[0, P["bf16"]] * st.mfu), rel=1e-12)
    assert 0.2 < head / t.time_per_token[0] < 0.35  # a quarter of a 0.5B model's work per token
    thr = roofline_at(st, t, 1, 1, 0.0)
    w_read = t.stream_bytes[0] / (st.bw[0] * cost.CAST_BW_EFF)
    fixed = cost.STEP_OVERHEAD_S + cost.kernel_stall_seconds(st)[0]
    assert thr.ttft_s == pytest.approx(w_read + 1000 * (t.time_per_token[0] - head) + head + fixed, rel=1e-12)


def test_kv_cache_format_follows_attention_unless_the_workload_fixes_it():
    from fleet_marl.config import ConfigError, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    # "auto": FP8 attention keeps an FP8 cache (TensorRT-LLM), weight-only a BF16 one
    fp8 = ["bf16", "fp8", "fp8", "bf16", "bf16"]
    st, t = terms_for("llama-3.1-8b", "serve", fp8, seq=1000, out_tokens=24)
    m = catalog.model("llama-3.1-8b")
    per_tok = 2 * m.layers * m.kv_heads * m.head_dim
    assert st.kv_cache_bytes[0] == 0.0 and t.per_seq_sharded[0] == 1024 * per_tok * 1.0
    # "bf16": vLLM's default keeps the checkpoint's BF16 cache under FP8 weights
    from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec

    wl = WorkloadSpec(prompt_tokens=1000, output_tokens=24, rate=1.0, kv_cache_dtype="bf16")
    tenant = TenantSpec(kind="serve", model="llama-3.1-8b", gpu_type="h100-sxm", max_gpus=8, workload=wl)
    st16 = KernelStatic.from_config(FleetConfig(cluster=ClusterSpec(gpu_types=("h100-sxm",)), tenants=(tenant,)))
    t16 = stage1(st16, np.array([[P[x] for x in fp8]]), project=False)
    assert st16.kv_cache_bytes[0] == 2.0
    assert t16.per_seq_sharded[0] == 2 * t.per_seq_sharded[0] and t16.kv_read_per_seq[0] == 2 * t.kv_read_per_seq[0]
    assert t16.weights[0] == t.weights[0]  # the weights stay FP8
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        WorkloadSpec(kv_cache_dtype="int4")


def test_weight_only_weights_converted_to_bf16_from_a_pass_size():
    from fleet_marl.config import ClusterSpec, ConfigError, FleetConfig, TenantSpec, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    # a weight-only group moves 4 more bytes per weight (BF16 written, read back by the GEMM) in a
    # pass of at least weight_only_dequant_tokens tokens (vLLM's AWQ layer: 256); 0 = never
    int8 = ["bf16", "int8", "int8", "bf16", "bf16"]
    m = catalog.model("llama-3.1-8b")
    linear = m.params_by_group["attention"] + m.params_by_group["mlp"]

    def static(dequant):
        wl = WorkloadSpec(prompt_tokens=32, output_tokens=2048, rate=1.0, weight_only_dequant_tokens=dequant)
        tenant = TenantSpec(kind="serve", model="llama-3.1-8b", gpu_type="h100-sxm", max_gpus=8, workload=wl)
        st = KernelStatic.from_config(FleetConfig(cluster=ClusterSpec(gpu_types=("h100-sxm",)), tenants=(tenant,)))
        return st, stage1(st, np.array([[P[x] for x in int8]]), project=False)

    st0, t0 = static(0)
    assert t0.dequant_bytes[0] == 4.0 * linear == cost.DEQUANT_BYTES * linear
    st, t = static(256)
    dq = t.dequant_bytes[0] / (st.bw[0] * st.mbu)
    for b, converts in ((1, False), (256, True)):  # a step carries b (1 + 32 / 2048) tokens
        fused, conv = roofline_at(st0, t0, 1, b, 0.0), roofline_at(st, t, 1, b, 0.0)
        assert conv.tpot_s - fused.tpot_s == pytest.approx(dq if converts else 0.0, abs=1e-12)
    # BF16 weights carry none
    _, tb = terms_for("llama-3.1-8b", "serve", "bf16")
    assert tb.dequant_bytes[0] == 0.0
    with pytest.raises(ConfigError, match="weight_only_dequant_tokens"):
        WorkloadSpec(weight_only_dequant_tokens=-1)


def test_gradients_and_activations_never_peak_together():
    # the backward frees activations as it writes gradients: the peak holds the larger of the two
    _, t = terms_for("qwen2.5-0.5b", "train", "bf16", gpus=1, seq=2048)
    mem = memory_per_gpu(t, 1, 2)
    assert engine.peak_bytes(*mem) == pytest.approx(mem.weights + mem.master + mem.optimizer + max(mem.grads, mem.activations), rel=1e-12)
    assert engine.peak_bytes(*mem) < mem.total
    # the largest batch that fits is set by the activations once the gradients fit; none when they do not
    cap = mem.weights + mem.master + mem.optimizer + 5.5 * t.per_seq_local[0]
    assert fitting_batch(t, 1, cap) == 5
    assert fitting_batch(t, 1, mem.weights + mem.master + mem.optimizer + 0.5 * mem.grads) == 0


def test_training_attention_on_hopper_runs_at_flashattention2s_share():
    # PyTorch's SDPA runs FlashAttention-2 on Hopper: 329.483 of 989.4 TFLOPS (pytorch/pytorch
    # #142132); elsewhere, and in serving engines, attention runs at ATTN_EFF
    assert cost.attention_efficiency("h100-sxm", True) == pytest.approx(329.483 / 989.4, rel=1e-12) == cost.ATTN_EFF_FA2_HOPPER
    assert cost.attention_efficiency("h200", True) == cost.ATTN_EFF_FA2_HOPPER
    assert cost.attention_efficiency("h100-sxm", False) == cost.attention_efficiency("a100-80gb", True) == cost.ATTN_EFF
    st, _ = terms_for("llama-3.1-8b", "train", "bf16", seq=8192)
    att = cost.seconds_per_token_table(st)[0, cost.ATT, cost.BF16]
    lin = 2.0 * st.params[0, cost.ATT] / st.peak[0, cost.BF16]
    scores = st.flops_fwd[0, cost.ATT] - 2.0 * st.params[0, cost.ATT]
    assert att == pytest.approx(lin + st.mfu * scores / (st.peak[0, cost.BF16] * cost.ATTN_EFF_FA2_HOPPER), rel=1e-12)


def test_flashattentions_backward_recomputes_the_scores():
    # without checkpointing a training step still runs FA's backward: 2.5 x the forward's
    # attention, 0.5 more than the step's 3 x forward counts; nothing else is recomputed
    st, _ = terms_for("llama-3.1-8b", "train", "bf16", seq=8192)
    rec = cost.recompute_seconds_table(st)[0, :, cost.BF16]
    scores = st.flops_fwd[0, cost.ATT] - 2.0 * st.params[0, cost.ATT]
    expect = (cost.FA_BWD_FACTOR - 2.0) * st.mfu * scores / (st.peak[0, cost.BF16] * st.attn_eff[0])
    assert rec[cost.ATT] == pytest.approx(expect, rel=1e-12) and expect > 0
    assert rec[[cost.EMB, cost.MLP, cost.NORM, cost.HEAD]].sum() == 0.0
    import dataclasses

    no_fa = dataclasses.replace(st, flash=np.array([False]))
    assert cost.recompute_seconds_table(no_fa)[0, :, cost.BF16].sum() == 0.0

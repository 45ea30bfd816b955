"""What ``KernelStatic.from_config`` derives from the catalog, and each tenant's reference rate,
against numbers worked out by hand from the published figures (the models' ``config.json``,
their checkpoints' parameter counts, the GPU datasheets) and the equations of docs/model.md.

The oracle (``tests/oracle.py``) reads these arrays as they are, so they are checked here, each
expected value computed in the test from the published numbers, never by calling the function
under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.config import ClusterSpec, FleetConfig, TenantSpec, WorkloadSpec
from fleet_marl.kernel import KernelStatic
from tests import oracle

EMB, ATT, MLP, NORM, HEAD = (catalog.GROUPS.index(g) for g in ("embedding", "attention", "mlp", "norm", "head"))
P = catalog.PRECISION_CODE

#: Parameters per layer group, by hand from each model's config.json (hidden h, layers L, heads a,
#: KV heads, head_dim d = h / a, ffn f, vocab V), and the checkpoint's published parameter count:
#: ``metadata.total_size`` of its ``model.safetensors.index.json`` / 2 bytes (BF16), or the sum of
#: the model's parameters where it ships as one file (GPT-2, Qwen2.5-0.5B).
BY_HAND = {
    # h 768, L 12, a 12, f 3072, V 50257, 1024 learned positions, LayerNorm, biases everywhere, tied head
    "gpt2": dict(
        embedding=50257 * 768 + 1024 * 768,  # 38,597,376 + 786,432 = 39,383,808
        attention=12 * (768 * 3 * 768 + 3 * 768 + 768 * 768 + 768),  # c_attn + bias, c_proj + bias: 2,362,368 a layer
        mlp=12 * (768 * 3072 + 3072 + 3072 * 768 + 768),  # c_fc + bias, c_proj + bias: 4,722,432 a layer
        norm=(2 * 12 + 1) * 2 * 768,  # two LayerNorms a block and the final one, weight + bias: 38,400
        head=0,
        published=124_439_808,  # GPT2LMHeadModel's parameters
    ),
    # h 4096, L 32, a 32, 8 KV heads (d 128: k, v 1024 wide), f 14336, V 128256, RMSNorm, no bias, untied
    "llama-3.1-8b": dict(
        embedding=128256 * 4096,  # 525,336,576
        attention=32 * (2 * 4096 * 4096 + 2 * 4096 * 1024),  # q, o + k, v: 41,943,040 a layer
        mlp=32 * 3 * 4096 * 14336,  # gate, up, down: 176,160,768 a layer
        norm=(2 * 32 + 1) * 4096,  # 266,240
        head=128256 * 4096,
        published=16_060_522_496 // 2,  # index total_size 16,060,522,496 B -> 8,030,261,248
    ),
    # h 8192, L 80, a 64, 8 KV heads (d 128: 1024 wide), f 28672, V 128256
    "llama-3.1-70b": dict(
        embedding=128256 * 8192,  # 1,050,673,152
        attention=80 * (2 * 8192 * 8192 + 2 * 8192 * 1024),  # 150,994,944 a layer
        mlp=80 * 3 * 8192 * 28672,  # 704,643,072 a layer
        norm=(2 * 80 + 1) * 8192,  # 1,318,912
        head=128256 * 8192,
        published=141_107_412_992 // 2,  # 70,553,706,496
    ),
    # Llama-3.1-8B's blocks with a vocabulary of 32000
    "mistral-7b": dict(
        embedding=32000 * 4096,  # 131,072,000
        attention=32 * (2 * 4096 * 4096 + 2 * 4096 * 1024),
        mlp=32 * 3 * 4096 * 14336,
        norm=(2 * 32 + 1) * 4096,
        head=32000 * 4096,
        published=14_483_464_192 // 2,  # 7,241,732,096
    ),
    # h 896, L 24, a 14 (d 64), 2 KV heads (128 wide), f 4864, V 151936, bias on q, k, v, tied head
    "qwen2.5-0.5b": dict(
        embedding=151936 * 896,  # 136,134,656
        attention=24 * (2 * 896 * 896 + 2 * 896 * 128 + 896 + 2 * 128),  # 1,836,160 a layer
        mlp=24 * 3 * 896 * 4864,  # 13,074,432 a layer
        norm=(2 * 24 + 1) * 896,  # 43,904
        head=0,
        published=494_032_768,  # Qwen2ForCausalLM's parameters
    ),
    # h 3584, L 28, a 28 (d 128), 4 KV heads (512 wide), f 18944, V 152064, bias on q, k, v
    "qwen2.5-7b": dict(
        embedding=152064 * 3584,  # 544,997,376
        attention=28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3584 + 2 * 512),  # 29,364,736 a layer
        mlp=28 * 3 * 3584 * 18944,  # 203,685,888 a layer
        norm=(2 * 28 + 1) * 3584,  # 204,288
        head=152064 * 3584,
        published=15_231_233_024 // 2,  # 7,615,616,512
    ),
    # h 5120, L 48, a 40 (d 128), 8 KV heads (1024 wide), f 13824, V 152064, bias on q, k, v
    "qwen2.5-14b": dict(
        embedding=152064 * 5120,  # 778,567,680
        attention=48 * (2 * 5120 * 5120 + 2 * 5120 * 1024 + 5120 + 2 * 1024),  # 62,921,728 a layer
        mlp=48 * 3 * 5120 * 13824,  # 212,336,640 a layer
        norm=(2 * 48 + 1) * 5120,  # 496,640
        head=152064 * 5120,
        published=29_540_067_328 // 2,  # 14,770,033,664
    ),
    # h 1024, L 28, a 16 with an explicit head_dim d 128 (q and o 2048 wide, twice h), 8 KV heads
    # (1024 wide), f 3072, V 151936, no bias, tied head; QK-norm: an RMSNorm of width d on q and on k
    "qwen3-0.6b": dict(
        embedding=151936 * 1024,  # 155,582,464
        attention=28 * (2 * 1024 * 2048 + 2 * 1024 * 1024),  # q, o + k, v: 6,291,456 a layer
        mlp=28 * 3 * 1024 * 3072,  # 9,437,184 a layer
        norm=(2 * 28 + 1) * 1024 + 28 * 2 * 128,  # 58,368 + the q and k norms 7,168 = 65,536
        head=0,
        published=596_049_920,  # Qwen3ForCausalLM's parameters (model card: 0.6B, 0.44B non-embedding)
    ),
}


def test_every_catalog_model_is_counted_by_hand():
    assert set(BY_HAND) == set(catalog.models())


def _static(*tenants: TenantSpec, **cluster) -> KernelStatic:
    pools = tuple(dict.fromkeys(t.gpu_type for t in tenants))
    cluster.setdefault("gpu_types", pools * 2)
    return KernelStatic.from_config(FleetConfig(cluster=ClusterSpec(**cluster), tenants=tenants))


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_parameters_by_group(name):
    """``KernelStatic.params`` (from ``ModelArch.params_by_group``) is the hand count, and the
    groups add up to the published checkpoint's parameter count exactly."""
    want = BY_HAND[name]
    st = _static(TenantSpec(model=name, workload=WorkloadSpec(seq_len=512)))
    assert st.params[0].tolist() == [want[g] for g in catalog.GROUPS]
    assert sum(want[g] for g in catalog.GROUPS) == want["published"]


def test_model_dimensions_and_forward_flops():
    """Forward FLOPs per token by group (docs/model.md §5: ``2 N_att + 2 L ctx a d``, ``2 N_mlp``,
    ``2 V h`` even when tied, 0 for lookups and norms) at ``ctx`` = the sequence length
    (training) or the mean prompt (serving); KV width ``kv_heads x d``."""
    st = _static(
        TenantSpec(kind="train", model="llama-3.1-8b", workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="serve", model="qwen2.5-0.5b", workload=WorkloadSpec(prompt_tokens=1000, output_tokens=100)),
    )
    l8, q05 = BY_HAND["llama-3.1-8b"], BY_HAND["qwen2.5-0.5b"]
    # Llama-3.1-8B at 2048: 2 x 1,342,177,280 + 2 x 32 x 2048 x 4096 = 2,684,354,560 + 536,870,912
    assert st.flops_fwd[0].tolist() == [0.0, 2 * l8["attention"] + 2 * 32 * 2048 * 4096, 2 * l8["mlp"], 0.0, 2 * 128256 * 4096]
    assert st.flops_fwd[0, ATT] == 3_221_225_472
    # Qwen2.5-0.5B at a 1000-token prompt; its tied head still costs 2 x 151936 x 896 = 272,269,312
    assert st.flops_fwd[1].tolist() == [0.0, 2 * q05["attention"] + 2 * 24 * 1000 * 14 * 64, 2 * q05["mlp"], 0.0, 272_269_312]
    assert st.layers.tolist() == [32, 24] and st.hidden.tolist() == [4096, 896] and st.heads.tolist() == [32, 14]
    assert st.kv_heads.tolist() == [8, 2] and st.kv_dim.tolist() == [8 * 128, 2 * 64]
    # 2,684,354,560 + 536,870,912 + 11,274,289,152 + 1,050,673,152 = 15.55 GFLOPs a token forward:
    # about 2N less the embedding lookup (2 x 7.50e9 = 15.0e9) plus the attention scores
    assert st.flops_fwd[0].sum() == 15_546_187_776


def test_linear_widths_and_activation_bytes():
    """The summed input and output widths of each group's linear layers (the elements an FP8
    recipe casts per token) and the activation bytes per token at 16 bit (docs/model.md §4)."""
    st = _static(
        TenantSpec(kind="train", model="llama-3.1-8b", workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="train", model="qwen2.5-0.5b", workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="train", model="gpt2", workload=WorkloadSpec(seq_len=1024)),
    )
    # Llama-3.1-8B: q, k, v read h and o reads q (3 x 4096 + 4096); they write q, k, v, h
    # (4096 + 2 x 1024 + 4096); gate and up read h, down reads f; gate and up write f, down h
    assert st.linear_in[0].tolist() == [0, 32 * (3 * 4096 + 4096), 32 * (2 * 4096 + 14336), 0, 4096]
    assert st.linear_out[0].tolist() == [0, 32 * (4096 + 2 * 1024 + 4096), 32 * (2 * 14336 + 4096), 0, 128256]
    # GPT-2's MLP: c_fc reads h and writes f, c_proj the other way round
    assert st.linear_in[2, MLP] == st.linear_out[2, MLP] == 12 * (768 + 3072)
    # saved per block: the two norms' inputs 2 x 2h, the q/k/v input 2h, q, k, v 2(q + 2k), the
    # attention output 2q; SwiGLU: its input 2h, gate, up, SiLU(gate), product 4 x 2f
    # Llama-3.1-8B: 16,384 + 8,192 + 2 (4096 + 2048) + 8,192 + 8,192 + 114,688 = 167,936
    # Qwen2.5-0.5B: 3,584 + 1,792 + 2 (896 + 256) + 1,792 + 1,792 + 38,912 = 50,176
    # GPT-2 (GeLU MLP: input 2h, GeLU in and out 2 x 2f): 3,072 + 1,536 + 2 (3 x 768) + 1,536 + 1,536 + 12,288 = 24,576 (32 h)
    assert st.act_layer.tolist() == [167_936, 50_176, 24_576]
    # after the blocks: final norm and head inputs 2 x 2h, BF16 logits 2V, FP32 log-probabilities 4V
    # after the blocks: final norm and head inputs 2 x 2h, and the eager loss's 12 V (BF16 logits, FP32
    # log-probabilities and the backward's two FP32 gradients: activations.LOSS_BYTES['eager'])
    assert st.act_final.tolist() == [4 * 4096 + 12 * 128256, 4 * 896 + 12 * 151936, 4 * 768 + 12 * 50257]


def test_gpu_arrays_from_the_datasheets():
    """Peaks by precision (weight-only formats at the BF16 peak, 0 where the GPU lacks the
    format), bytes, bandwidths, power and prices, from the datasheet and catalog figures."""
    st = _static(
        TenantSpec(kind="serve", model="qwen2.5-0.5b", gpu_type="h100-sxm", max_gpus=64, budget=300.0),
        TenantSpec(kind="serve", model="qwen2.5-0.5b", gpu_type="a100-80gb", max_gpus=3),
        TenantSpec(kind="train", model="gpt2", gpu_type="l4", activation_checkpointing=True, workload=WorkloadSpec(seq_len=1024)),
        gpu_types=("h100-sxm", "a100-80gb", "l4", "h100-sxm", "a100-80gb"),
        gpus_per_node=4,
        nodes_per_rack=2,
        usable_memory_fraction=0.9,
        network_gbs_per_gpu=50.0,
    )
    # H100 SXM dense TFLOPS (datasheet, with sparsity / 2): TF32 494.7, BF16 989.4, FP8 1978.9;
    # INT8 and INT4 weight-only run at the BF16 peak. A100: TF32 156, BF16 312, no FP8.
    assert st.peak[0].tolist() == [494.7e12, 989.4e12, 1978.9e12, 989.4e12, 989.4e12]
    assert st.peak[1].tolist() == [156e12, 312e12, 0.0, 312e12, 312e12]
    assert st.supported[1].tolist() == [True, True, False, True, True]
    # the bytes CUDA reports (deviceQuery) x the usable fraction 0.9
    assert st.mem_bytes.tolist() == pytest.approx([85_045_477_376 * 0.9, 85_100_068_864 * 0.9, 23_570_219_008 * 0.9], rel=1e-15)
    assert st.bw.tolist() == pytest.approx([3.35e12, 2.039e12, 0.300e12], rel=1e-15)
    # NVLink 450 / 300 GB/s a direction inside a node; PCIe 32 GB/s for the L4. Across nodes the
    # slower of that and the network's 50 GB/s per GPU
    assert st.intra_bw.tolist() == [450e9, 300e9, 32e9]
    assert st.inter_bw.tolist() == [50e9, 50e9, 32e9]
    assert st.tdp_w.tolist() == [700, 400, 72] and st.idle_w.tolist() == [85, 59, 16]
    # Modal's per-GPU-second list prices (2026-05) x 3600: H100 0.001097, A100 80GB 0.000694, L4 0.000222 $/s
    assert st.list_price.tolist() == pytest.approx([0.001097 * 3600, 0.000694 * 3600, 0.000222 * 3600], rel=1e-12)
    # pools in first-seen order; 2 H100 nodes and 2 A100 nodes of 4 GPUs, 1 L4 node
    assert st.pools == ("h100-sxm", "a100-80gb", "l4") and st.pool.tolist() == [0, 1, 2]
    assert st.pool_capacity.tolist() == [8, 8, 4] and st.node_pool.tolist() == [0, 1, 2, 0, 1]
    # a tenant asks for at most its pool's capacity
    assert st.max_gpus.tolist() == [8, 3, 4]  # 64 -> 8 H100s; 3; 8 -> 4 L4s
    # racks of 2 consecutive nodes: 0 0 1 1 2
    assert st.node_rack.tolist() == [0, 0, 1, 1, 2] and st.rack_of.tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1]]
    assert st.node_idle_w.tolist() == [85, 59, 16, 85, 59] and st.node_tdp_w.tolist() == [700, 400, 72, 700, 400]
    # a budget spread over max_cycles rounds (100): 300 / 100, 5000 / 100
    assert st.spend_norm.tolist() == [3.0, 50.0, 50.0]
    # checkpointing only where asked and only in training; FlashAttention by default
    assert st.checkpointing.tolist() == [False, False, True] and st.flash.all()


#: Dense tensor-core TFLOPS by precision (fp32 = TF32, bf16, fp8; the weight-only int8 and int4
#: run at the BF16 peak; 0 = no such format), HBM TB/s and GPU-to-GPU GB/s a direction, from
#: each datasheet (NVIDIA lists sparse figures, twice these, with an asterisk).
DATASHEETS = {
    "h100-sxm": ([494.7, 989.4, 1978.9, 989.4, 989.4], 3.35, 450),  # NVLink 900 GB/s both ways
    "h200": ([494.7, 989.4, 1978.9, 989.4, 989.4], 4.8, 450),
    "a100-80gb": ([156, 312, 0, 312, 312], 2.039, 300),  # NVLink 600 GB/s both ways; no FP8
    "a100-40gb": ([156, 312, 0, 312, 312], 1.555, 300),
    "l40s": ([183, 362.05, 733, 362.05, 362.05], 0.864, 32),  # PCIe Gen4 x16, 64 GB/s both ways
    "l4": ([60, 121, 242.5, 121, 121], 0.300, 32),
}


@pytest.mark.parametrize("gpu", sorted(DATASHEETS))
def test_peaks_and_links_of_every_gpu_type(gpu):
    assert set(DATASHEETS) == set(catalog.gpus())
    tflops, tbs, gbs = DATASHEETS[gpu]
    st = _static(TenantSpec(kind="serve", model="qwen2.5-0.5b", gpu_type=gpu))
    assert st.peak[0].tolist() == pytest.approx([x * 1e12 for x in tflops], rel=1e-15)
    assert st.supported[0].tolist() == [x > 0 for x in tflops]
    assert st.bw[0] == pytest.approx(tbs * 1e12, rel=1e-15) and st.intra_bw[0] == gbs * 1e9
    assert st.inter_bw[0] == min(gbs, 50) * 1e9  # the default network: 50 GB/s per GPU (400 Gb/s NDR)


def _tau_llama8b_h100(mfu: float, seq: int) -> float:
    """Seconds per forward token of Llama-3.1-8B in BF16 trained on an H100 (docs/model.md §5):
    GEMMs at the BF16 peak x ``mfu``, attention scores at FlashAttention-2's measured 329.483
    TFLOPS (a trainer on Hopper), elementwise traffic of 4 bytes per saved activation byte at
    0.92 of HBM bandwidth."""
    gemm = 2 * (1_342_177_280 + 5_637_144_576) + 2 * 128256 * 4096  # 13,958,643,712 + 1,050,673,152 = 15,009,316,864
    scores = 2 * 32 * seq * 4096  # 2 L ctx a d
    saved = 32 * 167_936 + (4 * 4096 + 12 * 128256)  # 5,373,952 + 1,555,456 = 6,929,408 bytes per token
    return gemm / (989.4e12 * mfu) + scores / 329.483e12 + 4 * saved / (3.35e12 * 0.92)


def test_reference_rate_by_hand():
    """docs/model.md §5: a trainer's reference rate is ``max_gpus / (3 tau_bf16)``, ideal BF16
    scaling with no communication or recomputation (checkpointing does not lower it); a
    server's is its mean arrival rate. The kernel's (``st.ref_rate``) and the oracle's own."""
    tau = _tau_llama8b_h100(0.78, 2048)
    # 15,009,316,864 / 771.732e12 + 536,870,912 / 329.483e12 + 27,717,632 / 3.082e12
    # = 19.449 us + 1.629 us + 8.993 us = 30.072 us a token
    assert tau == pytest.approx(30.072e-6, rel=1e-3)
    st = _static(
        TenantSpec(kind="train", model="llama-3.1-8b", max_gpus=8, workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="train", model="llama-3.1-8b", max_gpus=64, activation_checkpointing=True, workload=WorkloadSpec(seq_len=2048)),
        TenantSpec(kind="serve", model="llama-3.1-8b", workload=WorkloadSpec(rate=2.5)),
    )
    # 8 / (3 x 30.072 us) = 88,677 tokens/s; the second asks for 64 but its pool holds 2 x 8 = 16
    want = [8 / (3 * tau), 16 / (3 * tau), 2.5]
    assert want[0] == pytest.approx(88_677, rel=1e-3)
    np.testing.assert_allclose(st.ref_rate, want, rtol=1e-12)
    np.testing.assert_allclose(oracle.reference_rate(st), want, rtol=1e-12)
    # at half the GEMM efficiency only the GEMM term doubles: 38.898 + 1.629 + 8.993 us
    half = _static(TenantSpec(kind="train", model="llama-3.1-8b", max_gpus=8, workload=WorkloadSpec(seq_len=2048)), mfu=0.39)
    assert half.ref_rate[0] == pytest.approx(8 / (3 * _tau_llama8b_h100(0.39, 2048)), rel=1e-12)
    assert half.ref_rate[0] == pytest.approx(8 / (3 * 49.52e-6), rel=1e-3)


def test_reference_rate_of_a_tied_model_on_an_a100_by_hand():
    """Qwen2.5-0.5B (tied head, still a 2 V h matmul) trained at 2048 on 4 A100-80GB, MFU 0.78."""
    gemm = 2 * (44_067_840 + 313_786_368) + 2 * 151936 * 896  # 715,708,416 + 272,269,312 = 987,977,728
    scores = 2 * 24 * 2048 * 14 * 64  # 88,080,384
    saved = 24 * 50_176 + (4 * 896 + 12 * 151936)  # 1,204,224 + 1,826,816 = 3,031,040 bytes per token
    # 987,977,728 / 243.36e12 + 88,080,384 / 171.6e12 + 12,124,160 / 1.87588e12 = 4.060 + 0.513 + 6.463 us
    # (an A100 is not Hopper: attention at ATTN_EFF 0.55)
    tau = gemm / (312e12 * 0.78) + scores / (312e12 * 0.55) + 4 * saved / (2.039e12 * 0.92)
    assert tau == pytest.approx(11.036e-6, rel=1e-3)
    st = _static(TenantSpec(kind="train", model="qwen2.5-0.5b", gpu_type="a100-80gb", max_gpus=4, workload=WorkloadSpec(seq_len=2048)))
    assert st.ref_rate[0] == pytest.approx(4 / (3 * tau), rel=1e-12)  # 120,814 tokens/s
    assert st.ref_rate[0] == pytest.approx(120_814, rel=1e-3)
    assert oracle.reference_rate(st)[0] == pytest.approx(4 / (3 * tau), rel=1e-12)

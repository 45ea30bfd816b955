"""fleet-marl validate: the cost model against published measurements (docs/validation.md).

The targets of issue 30 are checked per quantity group: median absolute relative error and
every case. ``TARGET_MET`` lists the groups that meet them on this model; a group listed there
that regresses fails, and so does a group whose error grows past its recorded ceiling.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fleet_marl import catalog
from fleet_marl.cli import main
from fleet_marl.validation import cases, report

#: Ceilings on the median |error| per group on this model (the targets are 10 %; see
#: docs/validation.md for where each group stands).
CEILING = {
    "training throughput": 0.08,
    "training memory": 0.09,
    "serving throughput": 0.075,
    "TTFT": 0.105,
    "queueing latency": 0.16,
    "checkpoint and restart time": 0.20,  # 19.9 %: DLRover's NAS rows (docs/validation.md; target 15 %)
    "TPOT": 0.04,
    "FP8 GEMM speedup": 0.10,
    "power-capped throughput": 0.12,  # 10.9 %: MLPerf MaxQ/MaxP pairs, docs/validation.md
    "contention slowdown": 0.04,  # 3.9 %: Crux's pair and MCCS's three all-reduce runs (docs/validation.md)
}
#: Groups with fewer than four published cases, and why (none now).
MIN_CASES: dict[str, int] = {}
#: The groups that meet both of issue 30's targets on this model: median |error| <= 10 % and
#: every case within 30 %.
TARGET_MET = ("training throughput", "training memory", "TPOT", "FP8 GEMM speedup")


@pytest.fixture(scope="module")
def result():
    return report.validate()


def test_enough_measurements_each_with_a_source(result):
    rows = result["rows"]
    assert len(rows) >= 40
    assert sum(r["representable"] for r in rows) >= 40
    for r in rows:
        assert r["source"], r["id"]
        assert r["representable"] or r["reason"], r["id"]
        assert r["gpu"] in catalog.gpus()


def test_every_quantity_is_covered(result):
    for g, s in result["summary"].items():
        assert s["cases"] >= MIN_CASES.get(g, 4), g


def test_errors_within_recorded_ceilings(result):
    for g, s in result["summary"].items():
        assert s["median_abs_error"] <= CEILING[g], (g, s)


def test_groups_that_met_the_targets_keep_meeting_them(result):
    for g in TARGET_MET:
        s = result["summary"][g]
        assert s["median_abs_error"] <= 0.10, (g, s)
        errs = [abs(r["error"]) for r in result["rows"] if r["group"] == g and r["representable"]]
        assert errs and max(errs) <= 0.30, (g, max(errs))


def test_tensor_parallel_serving_rows_are_within_30_percent(result):
    # the 97 rows on 2-8 GPUs (TensorRT-LLM 0.17, Llama-3.1-70B on H100, H200, A100 and L40S):
    # before the all-reduce followed the published NCCL sweeps and the norms ran whole on every
    # GPU, TP 8 ran 33-82 % fast; a regression there fails here
    errs = [abs(r["error"]) for r in result["rows"] if r["group"] == "serving throughput" and r["representable"] and r["tp"] > 1]
    assert len(errs) >= 90 and max(errs) <= 0.30, max(errs)


def test_extra_models_match_their_published_parameter_counts():
    published = {"mpt-7b": 6.66e9, "mpt-70b": 64.86e9, "llama-2-7b": 6.74e9, "llama-2-70b": 68.98e9, "llama-3.2-3b": 3.21e9}
    for name, n in published.items():
        assert cases.arch(name).total_params == pytest.approx(n, rel=0.01), name


def test_cli_table_json_and_bad_input(capsys):
    assert main(["validate", "--summary"]) == 0
    assert "training throughput" in capsys.readouterr().out
    assert main(["validate", "--quantity", "TTFT", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["group"] for r in out["rows"]} == {"TTFT"}
    assert main(["validate", "--quantity", "nope"]) == 2
    assert "--quantity 'nope'" in capsys.readouterr().err
    assert main(["validate", "--measurements", "/no/such/file.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_breakdown_groups_the_rows_by_the_fields_asked(capsys):
    rows = [
        {"group": "TPOT", "model": "a", "tp": 1, "error": 0.1},
        {"group": "TPOT", "model": "a", "tp": 1, "error": -0.3},
        {"group": "TPOT", "model": "a", "tp": 1, "error": 0.5},
        {"group": "TPOT", "model": "a", "tp": 2, "error": 0.2},
        {"group": "TTFT", "model": "a", "tp": 1, "error": 0.4},
        {"group": "TTFT", "model": "b", "tp": 1},  # not representable: no error, not counted
    ]
    parts = report.breakdown(rows, ("tp",))
    assert [(p["group"], p["tp"], p["cases"]) for p in parts] == [("TTFT", 1, 1), ("TPOT", 1, 3), ("TPOT", 2, 1)]
    tpot1 = parts[1]
    assert tpot1["median_error"] == pytest.approx(0.1) and tpot1["median_abs_error"] == pytest.approx(0.3)
    assert tpot1["over_30pct"] == 1
    # the CLI: one line per (group, model, tp), serving's TP rows among them
    assert main(["validate", "--quantity", "serving throughput", "--by", "model,tp"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["quantity", "model", "tp"]
    assert any(line.split()[2:4] == ["llama-3.1-70b", "8"] for line in out.splitlines()[1:])
    # by serving engine: the name as published up to its parenthesis, whole in the table
    assert main(["validate", "--quantity", "serving throughput", "--by", "framework"]) == 0
    out = capsys.readouterr().out
    engines = {line[23:].rsplit(None, 4)[0].strip(): int(line.split()[-4]) for line in out.splitlines()[1:]}
    assert engines["TensorRT-LLM 0.17"] == 181 and engines["vLLM 0.6.3"] == 8
    assert main(["validate", "--by", "model,nope"]) == 2
    assert "--by 'model,nope'" in capsys.readouterr().err


def test_stated_kv_cache_fraction_sets_the_batch_that_fits(tmp_path):
    from fleet_marl.validation import predict

    # TensorRT-LLM 0.17's throughput runs state --kv_cache_free_gpu_mem_fraction 0.95: the KV
    # cache may take 0.95 of what the weights leave free (Llama-3.1-70B FP16 on 2 A100s: about
    # twice the kernel's 0.9 of the whole memory)
    c = next(c for c in cases.load() if c.id == "trtllm017_70b_a10080gb_fp16_tp2_1000_1000_tput")
    assert c.kv_free_fraction == 0.95
    st = predict._static(c)
    tt, mem = predict._terms(st, c)
    w = mem[0] / 2
    m = float(catalog.gpu("a100-80gb").memory_bytes)
    assert predict.serving_capacity(st, c, mem) == pytest.approx(w + 0.95 * (m - w), rel=1e-12)
    assert predict.serving_batch(st, c, tt, mem) > 2 * predict.serving_batch(st, dataclasses.replace(c, kv_free_fraction=0.0), tt, mem)
    bad = tmp_path / "bad.yaml"
    text = cases.PATH.read_text(encoding="utf-8").replace("kv_cache_free_gpu_mem_fraction: 0.95", "kv_cache_free_gpu_mem_fraction: 1.5", 1)
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="kv_cache_free_gpu_mem_fraction"):
        cases.load(str(bad))


def test_stated_kv_cache_format_reaches_the_kernel(tmp_path):
    from fleet_marl.validation import predict

    # vLLM runs torchao's FP8 weights with its default BF16 KV cache: twice the FP8 cache's bytes
    c = next(c for c in cases.load() if c.id == "torchao_vllm_h100_l31_8b_fp8_rowwise_decode_tput")
    assert c.kv_cache_dtype == "bf16" and c.prec_map["attention"] == "fp8"
    st = predict._static(c)
    tt, _ = predict._terms(st, c)
    auto = dataclasses.replace(c, kv_cache_dtype="auto")
    tt_auto, _ = predict._terms(predict._static(auto), auto)
    assert tt.kv_read_per_seq[0] == 2 * tt_auto.kv_read_per_seq[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(cases.PATH.read_text(encoding="utf-8").replace("kv_cache_dtype: bf16", "kv_cache_dtype: int4", 1), encoding="utf-8")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        cases.load(str(bad))


def test_published_power_limit_and_loss_reach_the_prediction(tmp_path, capsys):
    # torchtitan's Grand Teton H100 runs at its published 500 W limit: the kernel's power-to-clock
    # relation (power_heat.cap_clock: idle + f^3 dynamic = limit) slows it by the cube root of
    # (500 - idle) / (TDP - idle)
    from fleet_marl.validation.predict import clock, predict

    c = next(x for x in cases.load() if x.id == "tt_l31_8b_fsdp_bf16_tps")
    g = catalog.gpu(c.gpu)
    assert c.power_limit_w == 500 and c.hbm_tbs == 2.4
    assert clock(c) == pytest.approx(((500 - g.idle_w) / (g.tdp_w - g.idle_w)) ** (1 / 3), rel=1e-12)
    import dataclasses

    uncapped = predict(dataclasses.replace(c, power_limit_w=0.0))[0]
    assert predict(c)[0] < uncapped * clock(c) * 1.0001  # and the slower HBM2e costs a little more
    # a loss implementation the kernel does not know is bad input (exit 2), not a silent default
    bad = tmp_path / "bad.yaml"
    text = cases.PATH.read_text(encoding="utf-8").replace("loss_implementation: chunked", "loss_implementation: magic", 1)
    bad.write_text(text, encoding="utf-8")
    assert main(["validate", "--measurements", str(bad)]) == 2
    assert "loss_implementation 'magic'" in capsys.readouterr().err


#: Zeus's published power-limit sweeps (You et al., NSDI 2023; ml-energy/zeus at 75a8b939,
#: examples/research_reproducibility/zeus_nsdi23/trace/summary_power_{v100,a40}.csv): BERT-base
#: training, ``(power limit W, seconds per epoch, average W)``; the last row is uncapped.
_ZEUS = {
    "v100 bert_base_uncased b128": [
        (150, 4939.332014, 146.66),
        (175, 4626.845916, 169.22),
        (200, 4432.786383, 189.47),
        (250, 4114.859064, 223.44),
    ],
    "a40 bert_base_uncased b256": [(200, 2253.945616, 195.43), (250, 2011.939328, 237.38), (300, 1961.784077, 273.09)],
}


@pytest.mark.parametrize("run", sorted(_ZEUS))
def test_power_to_clock_relation_against_zeus_sweeps(run):
    # the kernel's relation (power_heat.cap_clock: idle + f^3 dynamic = cap) predicts a capped
    # run's throughput from its uncapped draw within 6 %, for any idle power from 0 to 60 W, and
    # closer on each sweep than the linear relation it replaced (idle + f dynamic = cap), up to
    # 33 % slow here
    from fleet_marl.kernel.power_heat import cap_clock, clock_power

    *capped, (_, t_full, p_full) = _ZEUS[run]
    for idle in (0.0, 30.0, 60.0):
        cubic = linear = 0.0
        for cap, t, _ in capped:
            f = cap_clock(cap - idle, p_full - idle)
            assert clock_power(f) * (p_full - idle) == pytest.approx(cap - idle, rel=1e-12)
            assert f == pytest.approx(t_full / t, rel=0.06)
            cubic += abs(f - t_full / t)
            linear += abs((cap - idle) / (p_full - idle) - t_full / t)
        assert cubic < linear


def test_serving_at_a_published_power_limit_slows_its_math_not_its_streams():
    # torchao's vLLM table ran on the device that names itself "NVIDIA H100" (pytorch/ao PR #3473),
    # Meta's 96 GB HBM2e part at 500 W and 2.4 TB/s: a serving pass's FLOPs run at the capped clock
    # (the peaks x clock), its weight and KV streams at the part's bandwidth, whatever the SM clock
    from fleet_marl.validation.predict import _static, clock, predict

    by_id = {x.id: x for x in cases.load()}
    pre, dec = by_id["torchao_vllm_h100_l31_8b_bf16_prefill_tput"], by_id["torchao_vllm_h100_l31_8b_bf16_decode_tput"]
    g = catalog.gpu(pre.gpu)
    f = clock(pre)
    assert pre.power_limit_w == dec.power_limit_w == 500 and pre.hbm_tbs == dec.hbm_tbs == 2.4
    assert f == pytest.approx(((500 - g.idle_w) / (g.tdp_w - g.idle_w)) ** (1 / 3), rel=1e-12)
    assert np.allclose(_static(pre).peak[0], np.asarray(g.peak_flops()) * f, rtol=1e-12)
    assert np.allclose(_static(dataclasses.replace(pre, power_limit_w=0.0)).peak[0], g.peak_flops(), rtol=1e-12)
    # training keeps its whole step throttled (predict: tokens/s x clock), its peaks at the catalog's
    tr = by_id["tt_l31_8b_fsdp_bf16_tps"]
    assert np.allclose(_static(tr).peak[0], catalog.gpu(tr.gpu).peak_flops(), rtol=1e-12)
    for c, lo, hi in ((pre, f, 0.95), (dec, 0.95, 1.0)):
        capped, free = predict(c)[0], predict(dataclasses.replace(c, power_limit_w=0.0))[0]
        # a 4,096-token prefill is mostly math (slowed nearly by the clock, never more); a batch-128
        # decode step mostly streams weights and KV (barely slowed)
        assert free * lo < capped < free * hi


def test_a_burst_prefills_each_prompt_once_between_decode_steps():
    from fleet_marl.validation import predict

    # TensorRT-LLM's "QPS INF" row: 500 requests sent at once, all running together
    c = next(c for c in cases.load() if c.id == "trtllm014_l31_8b_h100sxm_tp1_467_256_qpsinf_itl")
    assert c.burst and not next(c for c in cases.load() if c.id == "trtllm014_l31_8b_h100sxm_tp1_467_256_qps2_itl").burst
    st = predict._static(c)
    tt, mem = predict._terms(st, c)
    b = predict.serving_batch(st, c, tt, mem)
    assert b == 500
    t_dec = predict._roofline(st, c, tt, mem, 1, b)[4]  # the steady state: b / O prompts' work in every step
    t0 = predict._roofline(st, c, tt, mem, 1, b, prompt=0.0)[4]
    work = (t_dec - t0) * c.output / b  # one prompt's work
    assert 0.0 < t0 < t_dec and work > 0.0
    ttft, tpot = predict.burst_latencies(st, c, tt, mem, 1, b)
    # request i shares its O - 1 steps with the b - i prefills after it; the mean over i
    assert tpot == pytest.approx(t0 + sum(b - i for i in range(1, b + 1)) / b * work / (c.output - 1))
    assert ttft == pytest.approx(sum(i * work for i in range(1, b + 1)) / b)
    # the whole run takes b W + O t0 either way: throughput is the steady state's
    assert b * c.output / (b * work + c.output * t0) == pytest.approx(b / t_dec)
    assert predict.predict(c)[0] == pytest.approx(1e3 * tpot)


def test_a_finite_run_at_a_rate_holds_fewer_in_flight():
    from fleet_marl.validation import predict

    # an endless run holds rate x life (Little's law); a run of n requests lasts n / rate, and
    # those sent in its first and last life seconds see fewer: rate life (1 - life / (3 T))
    assert predict.finite_run_inflight(32.0, 0, 5.0) == 160.0
    T = 500 / 32.0
    assert predict.finite_run_inflight(32.0, 500, 5.0) == pytest.approx(160.0 * (1 - 5.0 / (3 * T)), rel=1e-4)
    assert predict.finite_run_inflight(2.0, 500, 2.0) == pytest.approx(4.0, rel=1e-2)  # a long run: Little's law
    # a life longer than the run: never more than the n requests, at most rate x T at once
    assert predict.finite_run_inflight(32.0, 100, 20.0) < 100
    # TensorRT-LLM 0.14's 500 requests at 32 QPS: the fixed point over the run, below the endless one
    c = next(c for c in cases.load() if c.id == "trtllm014_l31_8b_h100sxm_tp1_467_256_qps32_itl")
    assert c.max_batch == 500
    st = predict._static(c)
    tt, mem = predict._terms(st, c)
    b = predict.serving_batch(st, c, tt, mem)
    _, _, _, ttft, tpot = predict._roofline(st, c, tt, mem, 1, b)
    assert abs(b - predict.finite_run_inflight(32.0, 500, ttft + c.output * tpot)) <= 2
    endless = predict.serving_batch(st, dataclasses.replace(c, max_batch=0), tt, mem)
    assert endless > 1.3 * b


def test_composer_default_reduces_in_fp32_and_accumulation_shares_the_optimizer_step():
    # llm-foundry's MPT-13B on 8 H100 ("MP Mode" DEFAULT, Composer >= 0.16.4: reduce_dtype FP32):
    # the gradient reduce-scatter moves 4 B per parameter instead of BF16's 2, i.e.
    # 12,841,625,600 x 2 B x 7/8 more over NVLink's 450 GB/s, half of it hidden (comm_overlap 0.5),
    # on each step of micro-batch 2 x 2,048 tokens per GPU
    from fleet_marl.validation.predict import predict

    c = next(x for x in cases.load() if x.id == "foundry_h100_bf16_mpt13b_s2048_g8_tps")
    assert (c.reduce_bytes, c.grad_accum, c.batch, c.seq_len, c.gpus) == (4.0, 1, 2, 2048, 8)
    pure = next(x for x in cases.load() if x.id == "foundry_a10040_mpt13b_s2048_g8_tps")
    assert (pure.reduce_bytes, pure.grad_accum) == (0.0, 16)  # PURE: the BF16 gradients' own bytes
    tokens = 2 * 2048
    fp32, bf16 = predict(c)[0], predict(dataclasses.replace(c, reduce_bytes=0.0))[0]
    assert tokens / fp32 - tokens / bf16 == pytest.approx(0.5 * 2 * 12_841_625_600 * 7 / 8 / 450e9, rel=1e-9)
    # accumulating over 4 micro-batches pays the optimizer step (92 B per parameter on each GPU's
    # eighth at 0.92 of 3.35 TB/s) once for the four: 3/4 of it leaves each micro-batch
    four = predict(dataclasses.replace(c, grad_accum=4))[0]
    opt = 92 * 12_841_625_600 / 8 / (0.92 * 3.35e12)
    assert tokens / fp32 - tokens / four == pytest.approx(0.75 * opt, rel=1e-9)


def test_llm_foundry_triton_attention_runs_at_half_flashattention_2s_share(tmp_path, capsys):
    # llm-foundry's benchmarks ran attn_impl 'triton' (submit_benchmarks.py's default at the
    # commit that published them), a FlashAttention-1-class kernel: FlashAttention-2 is "around 2x"
    # faster (Dao 2023). MPT-13B at 2,048 tokens: the scores and weighted sum are
    # 2 x 40 x 2,048 x 5,120 = 838,860,800 FLOPs per token forward, 3.5 x that a step (forward,
    # backward, FlashAttention's recomputation), at 329.483 TFLOPS (FlashAttention-2 on H100) or
    # half: the half costs 4,096 x 3.5 x 838,860,800 / 329.483e12 s more per step of 2 x 2,048 tokens
    from fleet_marl.validation.predict import _static, predict

    c = next(x for x in cases.load() if x.id == "foundry_h100_bf16_mpt13b_s2048_g8_tps")
    assert c.attn_impl == "triton"
    assert _static(c).attn_eff[0] == pytest.approx(329.483 / 989.4 / 2, rel=1e-12)
    tokens = 2 * 2048
    tri, fa2 = predict(c)[0], predict(dataclasses.replace(c, attn_impl="flash"))[0]
    assert tokens / tri - tokens / fa2 == pytest.approx(tokens * 3.5 * 838_860_800 / 329.483e12, rel=1e-9)
    bad = tmp_path / "bad.yaml"
    bad.write_text(cases.PATH.read_text(encoding="utf-8").replace("attn_impl: triton", "attn_impl: magic", 1), encoding="utf-8")
    assert main(["validate", "--measurements", str(bad)]) == 2
    assert "attn_impl 'magic'" in capsys.readouterr().err


def test_micro_batches_per_optimizer_step_as_stated_or_from_the_batch_sizes():
    # Megatron-Bridge's row states GA 16; NeMo's row states GBS 128, MBS 1 on 8 GPUs with TP = PP =
    # CP = 1 (DP 8): num_microbatches = 128 / (1 x 8) = 16; torchtitan's local batch 2 x 8 GPUs is
    # its global batch 16: 1
    by_id = {c.id: c for c in cases.load()}
    assert by_id["mbridge2511_h100_llama3_8b_fp8cs_tps"].grad_accum == 16
    assert by_id["nemo2407_h100_llama2_7b_fp8_tps"].grad_accum == 16
    assert by_id["tt_l31_8b_fsdp_bf16_tps"].grad_accum == 1
    assert by_id["foundry_a10040_mpt13b_s2048_g8_tps"].grad_accum == 16  # the GradAccum column


def test_a_row_counting_total_tokens_is_predicted_in_total_tokens(tmp_path):
    # torchao's vLLM table prints vllm bench's "total tokens/s" (benchmarks/quantization/parse_log.py:
    # prefill_total_tokens_per_sec, decode_total_tokens_per_sec): prompt and output tokens per second
    from fleet_marl.validation.predict import predict

    rows = [x for x in cases.load() if x.id.startswith("torchao_vllm_h100_")]
    assert len(rows) == 6 and all(x.total_tokens for x in rows)
    assert not any(x.total_tokens for x in cases.load() if not x.id.startswith("torchao_vllm_h100_"))
    for c in rows:
        total, alone = predict(c)[0], predict(dataclasses.replace(c, total_tokens=False))[0]
        counted = c.prompt if "prefill" in c.unit else c.output  # prompt tokens/s or output tokens/s
        assert total == pytest.approx(alone * (c.prompt + c.output) / counted, rel=1e-12)
    bad = tmp_path / "bad.yaml"
    bad.write_text(cases.PATH.read_text(encoding="utf-8").replace("tokens_counted: total", "tokens_counted: some", 1), encoding="utf-8")
    with pytest.raises(ValueError, match="tokens_counted"):
        cases.load(str(bad))

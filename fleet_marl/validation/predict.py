"""The kernel's prediction for one published measurement (:func:`predict`).

Every number comes from the kernel's own functions on a one-tenant scenario with the default
cluster constants (``ClusterSpec()``: the MFU, MBU and overlap the environment runs at):
stage 1 (``kernel.stage1``), the roofline (``engine.roofline``), bytes per GPU
(``engine.memory_per_gpu``, ``engine.fitting_batch``) and, for a single linear layer, the
GEMM timing of ``cost.linear_seconds``. Nothing here is fitted to a measurement.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import ArbiterSpec, ClusterSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
from fleet_marl.kernel import KernelStatic, cost, engine, stage1
from fleet_marl.kernel.power_heat import cap_clock
from fleet_marl.kernel.queueing import prompt_seconds, stochastic_wait
from fleet_marl.kernel.static import model_arrays
from fleet_marl.validation.cases import Case, arch

GIB = float(1 << 30)
#: The largest batch a throughput run may reach when the source does not state it: TensorRT-LLM's
#: default ``max_batch_size`` (2048, ``trtllm-build --max_batch_size``).
MAX_BATCH = 2048
GPUS_PER_NODE = 8


def _static(c: Case) -> KernelStatic:
    m = arch(c.model)
    train = c.quantity.startswith("train")
    nodes = max(1, math.ceil(c.gpus / GPUS_PER_NODE))
    if train:
        wl = WorkloadSpec(seq_len=max(c.seq_len, 1))
    else:
        wl = WorkloadSpec(
            prompt_tokens=int(max(c.prompt, 1)),
            output_tokens=int(max(c.output, 1)),
            rate=1.0,
            seq_len=1 << 20,
            kv_cache_dtype=c.kv_cache_dtype,
            weight_only_dequant_tokens=c.dequant_tokens,
        )
    cfg = FleetConfig(
        cluster=ClusterSpec(gpu_types=(c.gpu,) * nodes, gpus_per_node=GPUS_PER_NODE, rack_power_cap_w=1e12),
        tenants=(
            TenantSpec(
                kind="train" if train else "serve",
                model="llama-3.1-8b",  # a placeholder: model_arrays puts the measured architecture in
                gpu_type=c.gpu,
                max_gpus=nodes * GPUS_PER_NODE,
                budget=1e12,
                activation_checkpointing=c.checkpointing if train else False,
                workload=wl,
            ),
        ),
        arbiter=ArbiterSpec(mechanism="maxmin"),
        safety=SafetySpec(mode="veto"),
    )
    st = KernelStatic.from_config(cfg)
    ctx = np.array([float(c.seq_len if train else max(c.prompt, 1))])
    bw: dict[str, Any] = {"bw": np.array([c.hbm_tbs * 1e12])} if c.hbm_tbs else {}
    if not train and c.power_limit_w:  # a serving pass's math runs at the capped clock, its streams do not
        bw["peak"] = st.peak * clock(c)
    if c.attn_impl == "triton":  # a FlashAttention-1-class kernel: half FlashAttention-2's share
        bw["attn_eff"] = st.attn_eff / cost.FA2_OVER_FA1
    return dataclasses.replace(st, **model_arrays([m], ctx, [c.loss if train else None]), **bw)


def clock(c: Case) -> float:
    """The clock factor of the case's GPUs at their published power limit, by the kernel's
    power-to-clock relation (``power_heat.cap_clock``: idle + f^3 x (TDP - idle) = limit); 1 at
    the catalog TDP."""
    if not c.power_limit_w:
        return 1.0
    g = catalog.gpu(c.gpu)
    return float(cap_clock(c.power_limit_w - g.idle_w, g.tdp_w - g.idle_w))


def _terms(st: KernelStatic, c: Case):
    prec = np.array([[catalog.PRECISION_CODE[c.prec_map[g]] for g in catalog.GROUPS]], np.int64)
    tt = stage1(st, prec, project=False)
    mem = (tt.weights[0], tt.grads[0], tt.master[0], tt.optimizer[0], tt.per_seq_local[0], tt.per_seq_sharded[0], tt.kv_heads[0])
    return tt, mem


def _roofline(st: KernelStatic, c: Case, tt, mem, n: int, batch: float, prompt: float | None = None):
    nodes = max(1, math.ceil(n / GPUS_PER_NODE))
    return engine.tenant_roofline(
        st,
        tt,
        0,
        n,
        batch,
        nodes,
        prompt=prompt,
        # an FP32 reduce-scatter (Composer's DEFAULT) moves the BF16 gradients at 4 B an element
        comm_bytes=tt.comm_bytes[0] + (tt.grads[0] * (c.reduce_bytes / 2.0 - 1.0) if c.reduce_bytes else 0.0),
        optimizer=mem[3] / max(c.grad_accum, 1),  # one optimizer step per grad_accum batches
    )


def serving_capacity(st: KernelStatic, c: Case, mem) -> float:
    """Bytes per GPU a serving run may fill: the kernel's usable memory (``st.mem_bytes``), or,
    where the run states TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` ``f``, the weights
    plus ``f`` of the memory CUDA reports that they leave free (the runtime's own buffers are
    not counted)."""
    if not c.kv_free_fraction:
        return float(st.mem_bytes[0])
    w = mem[0] / max(c.tp, 1)
    return w + c.kv_free_fraction * (float(catalog.gpu(c.gpu).memory_bytes) - w)


def finite_run_inflight(rate: float, n: int, life: float, k: int = 400) -> float:
    """The mean number of requests in flight over a request's life when ``n`` requests (0: an
    endless run) arrive at ``rate`` per second and each stays ``life`` seconds. An endless run
    holds ``rate x life`` (Little's law); a run of ``n`` lasts ``T = n / rate``, and the requests
    sent in its first and last ``life`` seconds share the server with fewer: at time ``s`` there
    are ``rate (min(s, T) - max(0, s - life))`` in flight. Averaged over arrivals spread evenly
    over ``T`` and over each life (midpoint rule, ``k`` points each): ``rate life (1 - life /
    (3 T))`` when ``life <= T``."""
    if n <= 0:
        return rate * life
    T = n / rate
    a = (np.arange(k) + 0.5) / k * T
    s = a[:, None] + (np.arange(k) + 0.5)[None, :] / k * life
    return float(np.mean(rate * (np.minimum(s, T) - np.maximum(0.0, s - life))))


def serving_batch(st: KernelStatic, c: Case, tt, mem) -> int:
    """The batch a serving measurement runs at: the stated one; at a request rate, the
    concurrency of Little's law ``b = rate x (TTFT + O x TPOT(b))`` (a fixed point), over a run
    of the requests it states (:func:`finite_run_inflight`); else the
    largest that fits (:func:`serving_capacity`), capped by the requests in the run and
    :data:`MAX_BATCH`."""
    n = max(c.tp, 1)
    fit = int(max(engine.fitting_batch(*mem, n, serving_capacity(st, c, mem)), 1))
    if isinstance(c.batch, int):
        return c.batch
    if str(c.batch).startswith("qps:"):
        rate = float(str(c.batch)[4:])
        b = 1.0
        for _ in range(50):
            _, _, _, ttft, tpot = _roofline(st, c, tt, mem, n, max(round(b), 1))
            b = finite_run_inflight(rate, c.max_batch, ttft + c.output * tpot)
        return int(min(max(round(b), 1), fit))
    cap = min(fit, MAX_BATCH)
    return int(min(cap, c.max_batch) if c.max_batch else cap)


def burst_latencies(st: KernelStatic, c: Case, tt, mem, n: int, b: int) -> tuple[float, float]:
    """``(mean TTFT s, mean TPOT s)`` of a burst: ``b`` requests sent at once, all running
    together. The kernel's step at ``b`` carries ``b / O`` prompts' work (its steady state); in a
    burst the prompts are prefilled once, first come first served, interleaved with the decode
    steps of the requests already running. With ``t_0`` the decode step without prompt work
    (the roofline at 0 prompt tokens) and ``W`` one prompt's work (``(t_dec - t_0) O / b``),
    request ``i`` (1..b) gets its first token after ``i W`` and shares its ``O - 1`` decode steps
    with the ``b - i`` prefills after it: mean TTFT ``(b + 1) W / 2``, mean TPOT ``t_0 + (b - 1) W
    / (2 (O - 1))``. Throughput is the steady state's (``b O / (b W + O t_0)`` either way)."""
    t_dec = _roofline(st, c, tt, mem, n, b)[4]
    t0 = _roofline(st, c, tt, mem, n, b, prompt=0.0)[4]
    out = max(c.output, 1.0)
    work = (t_dec - t0) * out / b
    return 0.5 * (b + 1) * work, t0 + 0.5 * (b - 1) * work / max(out - 1.0, 1.0)


def queue_wait(st: KernelStatic, c: Case, tt, mem) -> float:
    """Mean seconds a request of a run at a request rate waits in the server's queues before
    its first token (``queueing.stochastic_wait``, ``docs/model.md`` section 12.2): for one of
    the engine's slots, as many as its largest batch (what fits, capped by the requests in the
    run and :data:`MAX_BATCH`) at the capacity of that batch, and for the prefill of its prompt
    (``queueing.prompt_seconds``), over the run's length (its requests over the rate; endless
    if it states none). 0 for a run with no rate."""
    if not str(c.batch).startswith("qps:"):
        return 0.0
    rate = float(str(c.batch)[4:])
    n = max(c.tp, 1)
    nodes = max(1, math.ceil(n / GPUS_PER_NODE))
    fit = int(max(engine.fitting_batch(*mem, n, serving_capacity(st, c, mem)), 1))
    slots = min(fit, MAX_BATCH, c.max_batch) if c.max_batch else min(fit, MAX_BATCH)
    capacity = _roofline(st, c, tt, mem, n, slots)[0]
    d = prompt_seconds(*engine.tenant_groups(st, tt, 0), float(n), nodes)
    horizon = c.max_batch / rate if c.max_batch else math.inf
    p, m = stochastic_wait(rate, capacity, float(slots), d, horizon)
    return float(p * m)


#: The coupling mechanisms' quantities -> ``"module:function"`` that predicts a case of it
#: (``function(case) -> (value, setting)``), each from the kernel's own functions of that
#: mechanism (imported when first asked: those modules use this one's helpers).
COUPLED_PREDICTORS = {
    "contention_slowdown": "fleet_marl.validation.predict_contention:predict",
    "checkpoint_write_s": "fleet_marl.validation.predict_checkpoint:predict",
    "restart_s": "fleet_marl.validation.predict_checkpoint:predict",
    "power_capped_throughput_ratio": "fleet_marl.validation.predict_power:predict",
}


def predict(c: Case) -> tuple[float, dict]:
    """The kernel's value of ``c.quantity`` at the case's setting, in the case's unit, and the
    setting it used (batch, GPUs)."""
    if c.quantity in COUPLED_PREDICTORS:
        module, name = COUPLED_PREDICTORS[c.quantity].split(":")
        return getattr(importlib.import_module(module), name)(c)
    if c.quantity == "fp8_gemm_speedup":
        g = catalog.gpu(c.gpu)
        M, K, N = c.gemm
        bf = cost.linear_seconds(M, K, N, g, "bf16", train=True)
        f8 = cost.linear_seconds(M, K, N, g, "fp8", train=True)
        return bf / f8, {"gemm": c.gemm}
    st = _static(c)
    tt, mem = _terms(st, c)
    if c.quantity.startswith("train"):
        n = c.gpus
        b = int(c.batch) if isinstance(c.batch, int) else 1
        if c.pure_bf16:  # torchtune: BF16 weights and AdamW moments, no FP32 master copy
            mem = (mem[0], mem[1], 0.0, 0.5 * mem[3], *mem[4:])
        if c.quantity == "train_memory_gib_per_gpu":
            return float(engine.peak_bytes(*engine.memory_per_gpu(*mem, n, b))) / GIB, {"batch": b, "gpus": n}
        _, tps, _, _, _ = _roofline(st, c, tt, mem, n, b)
        per_gpu = tps / n * clock(c)  # throttled as the round's power stage does (power_heat.throttle)
        if c.quantity == "train_mfu":
            m = arch(c.model)
            peak = catalog.gpu(c.gpu).peak_flops()[catalog.PRECISION_CODE[c.prec_map["mlp"]]]
            flops = 6.0 * m.total_params + 12.0 * m.layers * m.hidden * c.seq_len  # llm-foundry's MFU definition
            return 100.0 * per_gpu * flops / peak, {"batch": b, "gpus": n}
        return per_gpu, {"batch": b, "gpus": n}
    b = serving_batch(st, c, tt, mem)
    rate, tps, _, ttft, tpot = _roofline(st, c, tt, mem, max(c.tp, 1), b)
    setting = {"batch": b, "gpus": max(c.tp, 1)}
    if c.burst and c.quantity in ("ttft_ms", "tpot_ms"):
        ttft, tpot = burst_latencies(st, c, tt, mem, max(c.tp, 1), b)
    if c.quantity in ("ttft_ms", "queue_ttft_ms"):  # at a request rate, with the wait in the queues
        return (ttft + queue_wait(st, c, tt, mem)) * 1e3, setting
    if c.quantity == "tpot_ms":
        return tpot * 1e3, setting
    if c.total_tokens:  # the run's prompt and output tokens per second (vLLM's "total tokens/s")
        return rate * (c.prompt + c.output), setting
    if "prefill" in c.unit:  # vLLM's offline benchmark reports prompt tokens/s for a prefill-heavy run
        return rate * c.prompt, setting
    return tps, setting


__all__ = [
    "COUPLED_PREDICTORS",
    "GIB",
    "MAX_BATCH",
    "burst_latencies",
    "finite_run_inflight",
    "predict",
    "queue_wait",
    "serving_batch",
    "serving_capacity",
]

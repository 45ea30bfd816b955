"""The roofline of one tenant on its GPUs (:func:`roofline`): a training step (FSDP data
parallel, compute-bound with the collectives partly hidden, :func:`train_step`) or a serving
forward pass (one tensor-parallel replica with in-flight batching, :func:`serve_step`, its
all-reduces on the faster path of :func:`allreduce_seconds`), compiled. Its inputs come in
three named groups: the tenant's :class:`Job`, its GPUs' :class:`Hardware` and its cost
:class:`Terms`. The stage ``tenant_cost.throughput`` calls it for every tenant of a row;
``docs/model.md`` section 5 has every equation with its source.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from fleet_marl.kernel.cost import (
    ADAM_BYTES,
    CAST_BW_EFF,
    OPT_STEP_BYTES,
    STEP_OVERHEAD_S,
    TP_ALLREDUCE_LATENCY_S,
    kernel_stall_seconds,
    replicated_seconds,
    tp_allreduces,
)
from fleet_marl.kernel.jit import jit, jit_inline


class Job(NamedTuple):
    """What a tenant runs: a training step or a serving forward pass, and its lengths."""

    is_train: bool
    seq_len: float  # tokens per training sequence
    prompt_tokens: float  # a request's prompt, on average
    output_tokens: float  # a request's output, on average


class Hardware(NamedTuple):
    """The tenant's GPU type (memory, links, all-reduce fit) and the cluster's efficiencies."""

    hbm_bw: float  # bytes/s of HBM
    intra_bw: float  # bytes/s per GPU inside a node
    inter_bw: float  # bytes/s per GPU across nodes (its NICs)
    ar_lat: float  # NCCL all-reduce: seconds per call
    ar_bus: float  # and its bus bandwidth, bytes/s
    nvlink: float  # 1.0 on an NVLink node (the custom one-shot all-reduce), else 0.0
    mbu: float  # the share of HBM bandwidth the KV cache streams at
    comm_overlap: float  # the share of a training step's collectives hidden under compute


class Terms(NamedTuple):
    """The tenant's cost terms: its stage 1 under its precision map, and its static costs."""

    weights: float  # bytes a serving forward pass streams (stage 1's stream_bytes)
    time_per_token: float  # seconds (training: a step's forward, backward and recomputation)
    head_time_per_token: float  # the LM head's share of it
    replicated_s: float  # seconds per token of the norms and residual adds, run whole on each GPU
    kv_read_per_seq: float  # KV bytes a decode step reads per sequence
    comm_bytes: float  # bytes of the collectives per step (serving: per token over all the all-reduces)
    kv_heads: float  # the KV cache splits over at most this many GPUs
    tp_calls: float  # all-reduces per serving forward pass
    kernel_s: float  # seconds of stalls at a pass's kernels' boundaries
    dequant_bytes: float  # bytes of converting the weight-only weights to BF16
    dequant_tokens: float  # the pass size from which that conversion is paid (0: never)
    optimizer: float  # optimizer bytes whose step each batch pays


@jit_inline
def allreduce_seconds(tokens, comm_bytes, calls, n, nodes, hw):
    """Seconds of a serving forward pass's ``calls`` all-reduces over a tensor-parallel group of
    ``n`` GPUs on ``nodes`` nodes of :class:`Hardware` ``hw``, carrying ``tokens`` tokens' hidden
    states (``comm_bytes`` per token over all the calls); 0 on one GPU. The engine takes the
    faster of two paths (``docs/model.md`` section 5): NCCL's ring, ``calls x ar_lat + 2 (n - 1)
    / n x bytes / ar_bus`` (the line through the GPU type's published sweep,
    ``catalog.GPUType.allreduce_fit``; across nodes at most the node's NICs, as the training
    collectives), and, inside one NVLink node, the custom one-shot kernel of vLLM and
    TensorRT-LLM, in which each GPU reads its ``n - 1`` peers' buffers over its link:
    ``calls x TP_ALLREDUCE_LATENCY_S + (n - 1) x bytes / intra_bw``."""
    if n <= 1.0:
        return 0.0
    size = tokens * comm_bytes
    bus = min(hw.ar_bus, n / nodes * hw.inter_bw) if nodes > 1 else hw.ar_bus
    t = calls * hw.ar_lat + 2.0 * (n - 1.0) / n * size / bus
    if hw.nvlink > 0.0 and nodes <= 1:
        t = min(t, calls * TP_ALLREDUCE_LATENCY_S + (n - 1.0) * size / hw.intra_bw)
    return t


@jit
def roofline(job, hw, terms, n, batch, nodes):
    """Throughput of one tenant (its :class:`Job`, :class:`Hardware` and :class:`Terms`) on
    ``n`` GPUs over ``nodes`` nodes at ``batch``, before throttling: ``(work rate, tokens/s,
    efficiency, ttft s, tpot s)``: :func:`train_step` or :func:`serve_step`."""
    nf = float(max(n, 1))
    bf = float(max(batch, 1))
    if job.is_train:
        return train_step(job, hw, terms, nf, bf, nodes)
    return serve_step(job, hw, terms, nf, bf, nodes)


@jit_inline
def train_step(job, hw, terms, nf, bf, nodes):
    """A training step (FSDP data parallel) on ``nf`` GPUs at ``bf`` sequences: compute-bound,
    the all-gather/reduce-scatter partly hidden (``comm_overlap``), then the optimizer's step,
    memory-bound, on each GPU's shard of the ``optimizer`` bytes (the moments'; ``OPT_STEP_BYTES /
    ADAM_BYTES`` of them move), never hidden; a caller whose step accumulates gradients over
    several batches passes its share per batch. ``(work rate, tokens/s, efficiency, 0, 0)``."""
    # across nodes a ring collective's links that leave a node run on the NICs of every GPU the
    # tenant has there at once (NCCL's channels cross at different GPUs), never faster than NVLink
    bw_link = min(hw.intra_bw, nf / nodes * hw.inter_bw) if nodes > 1 else hw.intra_bw
    hide = 1.0 - hw.comm_overlap
    t_comp = job.seq_len * bf * terms.time_per_token  # a step's (forward, backward, recomputation)
    t_comm = terms.comm_bytes * (nf - 1.0) / nf / bw_link
    step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
    # the optimizer step streams its state once per step on each GPU's 1 / n shard
    step += terms.optimizer * (OPT_STEP_BYTES / ADAM_BYTES) / nf / (hw.hbm_bw * CAST_BW_EFF)
    rate = nf * bf * job.seq_len / step
    eff = t_comp / step
    if math.isnan(eff):
        eff = 0.0
    return rate, rate, eff, 0.0, 0.0


@jit_inline
def serve_step(job, hw, terms, nf, bf, nodes):
    """A serving forward pass of one tensor-parallel replica on ``nf`` GPUs with ``bf`` requests
    in flight (in-flight batching): it streams ``weights`` once (an untied embedding table is
    only looked up), then does its tokens' work at the time per token (GEMMs, attention FLOPs,
    elementwise traffic), each GPU ``1 / n`` of it but the ``replicated_s`` of its norms and
    residual adds, whole; a decode step also reads each sequence's KV cache, one after the other
    (no overlap); each step carries ``batch`` decode tokens and their prompts' tokens spread over
    their output tokens, plus its ``tp_calls`` all-reduces over those tokens
    (:func:`allreduce_seconds`, never hidden), the stalls at its kernels' boundaries
    (``kernel_s``) and the serving engine's fixed overhead per forward pass,
    ``STEP_OVERHEAD_S``. The weights stream at ``CAST_BW_EFF`` of the HBM bandwidth, the KV cache
    at ``mbu``; a pass of at least ``dequant_tokens`` tokens (if > 0) also converts the
    weight-only weights to BF16 (``dequant_bytes``). The TTFT is one prompt's prefill after the
    running step, if any, in a step that also carries the other requests' work (``docs/model.md``
    section 5). ``(work rate, tokens/s, efficiency, ttft s, tpot s)``."""
    prompt_tokens, output_tokens = job.prompt_tokens, job.output_tokens
    hbm_bw, comm_bytes, tp_calls = hw.hbm_bw, terms.comm_bytes, terms.tp_calls
    time_per_token, head_time_per_token = terms.time_per_token, terms.head_time_per_token
    # every pass's stalls at its kernels' boundaries
    lat = terms.kernel_s
    w_read = terms.weights / nf / (hbm_bw * CAST_BW_EFF)  # a forward pass streams every weight once
    # a pass of at least dequant_tokens tokens first converts the weight-only weights to BF16
    w_dq = terms.dequant_bytes / nf / (hbm_bw * hw.mbu) if terms.dequant_tokens > 0.0 else 0.0
    # each GPU of the replica runs 1 / n of a token's work, but the norms and residual adds on
    # the full hidden state (replicated_s of it) whole
    rep = terms.replicated_s * (1.0 - 1.0 / nf)
    t_tok = time_per_token / nf + rep
    # a prompt's tokens skip the LM head but its last one (only the last position is sampled)
    t_head = head_time_per_token / nf
    t_prompt = (time_per_token - head_time_per_token) / nf + rep if time_per_token < math.inf else math.inf
    prefill = w_read + prompt_tokens * t_prompt + t_head + lat + STEP_OVERHEAD_S
    prefill += allreduce_seconds(prompt_tokens, comm_bytes, tp_calls, nf, nodes, hw)
    if prompt_tokens >= terms.dequant_tokens:
        prefill += w_dq
    out = max(output_tokens, 1.0)
    share = bf / out  # prompts per step: each step carries b decode tokens and b / O prompts
    m = bf + share * prompt_tokens
    t_kv = bf * terms.kv_read_per_seq / min(nf, terms.kv_heads) / (hbm_bw * hw.mbu)
    t_core = w_read + t_kv + bf * t_tok + share * (prompt_tokens * t_prompt + t_head)
    if m >= terms.dequant_tokens:
        t_core += w_dq
    t_ar = allreduce_seconds(m, comm_bytes, tp_calls, nf, nodes, hw)
    t_dec = t_core + t_ar + lat + STEP_OVERHEAD_S
    rate = bf / (out * t_dec)
    eff = t_core / t_dec
    if math.isnan(eff):
        eff = 0.0
    # a new request waits for the running step to end (mean residual t_dec / 2) when any of the
    # other b - 1 requests is running (Poisson: probability 1 - exp(-(b - 1))); the step that
    # carries its prompt also carries the others' work (their decode tokens, KV reads, prompts'
    # share and all-reduces' bytes: (b - 1) / b of the step's), so its first token comes at that end
    t_run = (
        t_kv + bf * t_tok + share * (prompt_tokens * t_prompt + t_head) + t_ar - allreduce_seconds(0.0, comm_bytes, tp_calls, nf, nodes, hw)
    )
    others = t_run * (bf - 1.0) / bf if bf > 1.0 else 0.0
    ttft = prefill + others + (1.0 - math.exp(1.0 - bf)) * 0.5 * t_dec
    return rate, rate * output_tokens, eff, ttft, t_dec


def tenant_groups(st, terms, t, prompt=None, comm_bytes=None, optimizer=None) -> tuple[Job, Hardware, Terms]:
    """The :class:`Job`, :class:`Hardware` and :class:`Terms` of tenant ``t`` of the scenario
    ``st`` (a ``KernelStatic``) with its stage-1 ``terms`` (``kernel.stage1``, indexed ``[t]``),
    outside the compiled round (``tenant_cost.throughput`` reads the same values from the packed
    arrays). ``prompt``, ``comm_bytes`` and ``optimizer`` replace the scenario's prompt tokens,
    stage 1's communication bytes and the optimizer bytes whose step each batch pays (the
    validation's FP32 reduce-scatter and gradient accumulation)."""
    job = Job(
        bool(st.is_train[t]), float(st.seq_len[t]), float(st.prompt_tokens[t] if prompt is None else prompt), float(st.output_tokens[t])
    )
    hw = Hardware(
        float(st.bw[t]),
        float(st.intra_bw[t]),
        float(st.inter_bw[t]),
        float(st.ar_lat[t]),
        float(st.ar_bus[t]),
        float(st.nvlink[t]),
        float(st.mbu),
        float(st.comm_overlap),
    )
    cost = Terms(
        float(terms.stream_bytes[t]),
        float(terms.time_per_token[t]),
        float(terms.head_time_per_token[t]),
        float(replicated_seconds(st)[t]),
        float(terms.kv_read_per_seq[t]),
        float(terms.comm_bytes[t] if comm_bytes is None else comm_bytes),
        float(terms.kv_heads[t]),
        float(tp_allreduces(st)[t]),
        float(kernel_stall_seconds(st)[t]),
        float(terms.dequant_bytes[t]),
        float(st.dequant_tokens[t]),
        float(terms.optimizer[t] if optimizer is None else optimizer),
    )
    return job, hw, cost


def tenant_roofline(st, terms, t, n, batch, nodes, prompt=None, comm_bytes=None, optimizer=None):
    """:func:`roofline` of tenant ``t`` of the scenario ``st`` with its stage-1 ``terms`` on ``n``
    GPUs over ``nodes`` nodes at ``batch``, outside the compiled round (its groups:
    :func:`tenant_groups`, which takes the same ``prompt``, ``comm_bytes`` and ``optimizer``):
    ``(work rate, tokens/s, efficiency, ttft s, tpot s)``."""
    return roofline(*tenant_groups(st, terms, t, prompt, comm_bytes, optimizer), n, batch, nodes)


__all__ = ["Hardware", "Job", "Terms", "allreduce_seconds", "roofline", "serve_step", "tenant_groups", "tenant_roofline", "train_step"]

"""The roofline of one tenant on its GPUs (:func:`roofline`): a training step (FSDP data
parallel, compute-bound with the collectives partly hidden) or a serving forward pass (one
tensor-parallel replica with in-flight batching, its all-reduces on the faster path of
:func:`allreduce_seconds`), compiled. The stage ``tenant_cost.throughput`` calls it for every
tenant of a row; ``docs/model.md`` section 5 has every equation with its source.
"""

from __future__ import annotations

import math

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


@jit_inline
def allreduce_seconds(tokens, comm_bytes, calls, n, nodes, intra_bw, inter_bw, ar_lat, ar_bus, nvlink):
    """Seconds of a serving forward pass's ``calls`` all-reduces over a tensor-parallel group of
    ``n`` GPUs on ``nodes`` nodes, carrying ``tokens`` tokens' hidden states (``comm_bytes`` per
    token over all the calls); 0 on one GPU. The engine takes the faster of two paths
    (``docs/model.md`` section 5): NCCL's ring, ``calls x ar_lat + 2 (n - 1) / n x bytes / ar_bus``
    (the line through the GPU type's published sweep, ``catalog.GPUType.allreduce_fit``; across
    nodes at most the node's NICs, as the training collectives), and, inside one NVLink node, the
    custom one-shot kernel of vLLM and TensorRT-LLM, in which each GPU reads its ``n - 1`` peers'
    buffers over its link: ``calls x TP_ALLREDUCE_LATENCY_S + (n - 1) x bytes / intra_bw``."""
    if n <= 1.0:
        return 0.0
    size = tokens * comm_bytes
    bus = min(ar_bus, n / nodes * inter_bw) if nodes > 1 else ar_bus
    t = calls * ar_lat + 2.0 * (n - 1.0) / n * size / bus
    if nvlink > 0.0 and nodes <= 1:
        t = min(t, calls * TP_ALLREDUCE_LATENCY_S + (n - 1.0) * size / intra_bw)
    return t


@jit
def roofline(
    is_train,
    seq_len,
    prompt_tokens,
    output_tokens,
    hbm_bw,
    intra_bw,
    inter_bw,
    ar_lat,
    ar_bus,
    nvlink,
    mbu,
    comm_overlap,
    weights,
    time_per_token,
    head_time_per_token,
    replicated_s,
    kv_read_per_seq,
    comm_bytes,
    kv_heads,
    tp_calls,
    kernel_s,
    dequant_bytes,
    dequant_tokens,
    optimizer,
    n,
    batch,
    nodes,
):
    """Throughput of one tenant on ``n`` GPUs over ``nodes`` nodes at ``batch``, before
    throttling: ``(work rate, tokens/s, efficiency, ttft s, tpot s)``. Training (FSDP data
    parallel) is compute-bound with the all-gather/reduce-scatter partly hidden. Serving (one
    tensor-parallel replica, in-flight batching): a forward pass streams ``weights`` once (stage
    1's ``stream_bytes``: an untied embedding table is only looked up), then
    does its tokens' work at the time per token (GEMMs, attention FLOPs, elementwise traffic),
    each GPU ``1 / n`` of it but the ``replicated_s`` of its norms and residual adds, whole; and
    a decode step also reads each sequence's KV cache, one after the other (no overlap); each step
    carries ``batch`` decode tokens and their prompts' tokens spread over their output tokens,
    plus its ``tp_calls`` all-reduces over those tokens (:func:`allreduce_seconds`, never hidden), the
    stalls at its kernels' boundaries (``kernel_s``) and the serving engine's fixed overhead per
    forward pass, ``STEP_OVERHEAD_S``. The weights stream at ``CAST_BW_EFF`` of the HBM
    bandwidth, the KV cache at ``mbu``; a pass of at least
    ``dequant_tokens`` tokens (if > 0) also converts the weight-only weights to BF16
    (``dequant_bytes``). The TTFT is one
    prompt's prefill after the running step, if any, in a step that also carries the other
    requests' work (``docs/model.md`` section 5). A training step ends with the optimizer's step,
    memory-bound, on each GPU's shard of the ``optimizer`` bytes (the moments'; ``OPT_STEP_BYTES /
    ADAM_BYTES`` of them move), never hidden; a caller whose step accumulates gradients over several
    batches passes its share per batch."""
    nf = float(max(n, 1))
    # across nodes a ring collective's links that leave a node run on the NICs of every GPU the
    # tenant has there at once (NCCL's channels cross at different GPUs), never faster than NVLink
    bw_link = min(intra_bw, nf / nodes * inter_bw) if nodes > 1 else intra_bw
    bf = float(max(batch, 1))
    hide = 1.0 - comm_overlap
    t_comp = seq_len * bf * time_per_token  # training: time_per_token is a step's (forward, backward, recomputation)
    t_comm = comm_bytes * (nf - 1.0) / nf / bw_link
    step = t_comp + (t_comm if hide == 1.0 else hide * t_comm)
    if is_train:
        # the optimizer step streams its state once per step on each GPU's 1 / n shard
        step += optimizer * (OPT_STEP_BYTES / ADAM_BYTES) / nf / (hbm_bw * CAST_BW_EFF)
        rate = nf * bf * seq_len / step
        eff = t_comp / step
        if math.isnan(eff):
            eff = 0.0
        return rate, rate, eff, 0.0, 0.0
    # every pass's stalls at its kernels' boundaries
    lat = kernel_s
    w_read = weights / nf / (hbm_bw * CAST_BW_EFF)  # a forward pass streams every weight once
    # a pass of at least dequant_tokens tokens first converts the weight-only weights to BF16
    w_dq = dequant_bytes / nf / (hbm_bw * mbu) if dequant_tokens > 0.0 else 0.0
    # each GPU of the replica runs 1 / n of a token's work, but the norms and residual adds on
    # the full hidden state (replicated_s of it) whole
    rep = replicated_s * (1.0 - 1.0 / nf)
    t_tok = time_per_token / nf + rep
    # a prompt's tokens skip the LM head but its last one (only the last position is sampled)
    t_head = head_time_per_token / nf
    t_prompt = (time_per_token - head_time_per_token) / nf + rep if time_per_token < math.inf else math.inf
    prefill = w_read + prompt_tokens * t_prompt + t_head + lat + STEP_OVERHEAD_S
    prefill += allreduce_seconds(prompt_tokens, comm_bytes, tp_calls, nf, nodes, intra_bw, inter_bw, ar_lat, ar_bus, nvlink)
    if prompt_tokens >= dequant_tokens:
        prefill += w_dq
    out = max(output_tokens, 1.0)
    share = bf / out  # prompts per step: each step carries b decode tokens and b / O prompts
    m = bf + share * prompt_tokens
    t_kv = bf * kv_read_per_seq / min(nf, kv_heads) / (hbm_bw * mbu)
    t_core = w_read + t_kv + bf * t_tok + share * (prompt_tokens * t_prompt + t_head)
    if m >= dequant_tokens:
        t_core += w_dq
    t_ar = allreduce_seconds(m, comm_bytes, tp_calls, nf, nodes, intra_bw, inter_bw, ar_lat, ar_bus, nvlink)
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
        t_kv
        + bf * t_tok
        + share * (prompt_tokens * t_prompt + t_head)
        + t_ar
        - allreduce_seconds(0.0, comm_bytes, tp_calls, nf, nodes, intra_bw, inter_bw, ar_lat, ar_bus, nvlink)
    )
    others = t_run * (bf - 1.0) / bf if bf > 1.0 else 0.0
    ttft = prefill + others + (1.0 - math.exp(1.0 - bf)) * 0.5 * t_dec
    return rate, rate * output_tokens, eff, ttft, t_dec


def tenant_roofline(st, terms, t, n, batch, nodes, prompt=None, comm_bytes=None, optimizer=None):
    """:func:`roofline` of tenant ``t`` of the scenario ``st`` (a ``KernelStatic``) with its stage-1
    ``terms`` (``kernel.stage1``, indexed ``[t]``) on ``n`` GPUs over ``nodes`` nodes at ``batch``,
    outside the compiled round (``tenant_cost.throughput`` reads the same values from the packed
    arrays): ``(work rate, tokens/s, efficiency, ttft s, tpot s)``. ``prompt``, ``comm_bytes`` and
    ``optimizer`` replace the scenario's prompt tokens, stage 1's communication bytes and the
    optimizer bytes whose step each batch pays (the validation's FP32 reduce-scatter and gradient
    accumulation)."""
    return roofline(
        bool(st.is_train[t]),
        st.seq_len[t],
        st.prompt_tokens[t] if prompt is None else prompt,
        st.output_tokens[t],
        st.bw[t],
        st.intra_bw[t],
        st.inter_bw[t],
        st.ar_lat[t],
        st.ar_bus[t],
        st.nvlink[t],
        st.mbu,
        st.comm_overlap,
        terms.stream_bytes[t],
        terms.time_per_token[t],
        terms.head_time_per_token[t],
        replicated_seconds(st)[t],
        terms.kv_read_per_seq[t],
        terms.comm_bytes[t] if comm_bytes is None else comm_bytes,
        terms.kv_heads[t],
        tp_allreduces(st)[t],
        kernel_stall_seconds(st)[t],
        terms.dequant_bytes[t],
        float(st.dequant_tokens[t]),
        terms.optimizer[t] if optimizer is None else optimizer,
        n,
        batch,
        nodes,
    )


__all__ = ["allreduce_seconds", "roofline", "tenant_roofline"]

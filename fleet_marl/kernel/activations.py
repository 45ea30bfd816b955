"""Activation memory of a training tenant: the bytes per token a transformer block keeps for
the backward pass, at 16 bit, by block type (:func:`activation_bytes`), by activation
checkpointing mode (none, full, selective per op: :func:`selective_checkpointing`, the ``CKPT_*``
codes) and by the loss's implementation (:data:`LOSS_BYTES`). Computed once per model from its
architecture (``static.model_arrays``); ``cost.stage1_tables`` turns them into bytes per sequence
and ``cost.recompute_seconds_table`` prices the recomputation. Equations and sources in
``docs/model.md`` section 4 (memory per GPU).
"""

from __future__ import annotations

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import ModelArch

_ATT, _MLP = catalog.GROUPS.index("attention"), catalog.GROUPS.index("mlp")
ACT_ATTN = 5.0  # Korthikanti et al. 2022: the stored scores, softmax and dropout, 5 a s bytes per token, without FlashAttention
#: Activation checkpointing of a training tenant, by code (``TenantSpec.activation_checkpointing``:
#: false or "none", true or "full", "selective").
CKPT_NONE, CKPT_FULL, CKPT_SELECTIVE = 0, 1, 2
CHECKPOINTING_CODE = {False: CKPT_NONE, "none": CKPT_NONE, True: CKPT_FULL, "full": CKPT_FULL, "selective": CKPT_SELECTIVE}

#: Bytes per token per vocabulary entry that the loss holds at its peak, by implementation:
#:
#: * ``"eager"`` (the default): ``F.cross_entropy(logits.float(), labels)`` in eager PyTorch,
#:   torchtitan's loss until it was compiled (``train.py`` at 9dec370, 2024-12: the
#:   ``torch.compile(loss_fn)`` line commented out) and Hugging Face's ``logits.float()``. The
#:   forward holds the BF16 logits (2), their FP32 copy (4) and the FP32 log-probabilities
#:   log-softmax saves (4); the backward, which starts with every block's activations still held,
#:   holds the saved log-probabilities (4), nll_loss's FP32 gradient (4) and log-softmax's FP32
#:   input gradient (4): 12;
#: * ``"fused"``: one fused kernel reads the BF16 logits and never writes their FP32 copy or
#:   log-probabilities; the BF16 logits (2) are kept for the backward, which writes a BF16
#:   gradient (2), 4: the loss under ``torch.compile`` (torchtitan compiles it with
#:   ``training.compile`` since bbb1b616e, 2025-04-02, ``components/loss.py``) and llm-foundry's
#:   default ``loss_fn = "fused_crossentropy"`` (flash-attn's fused cross-entropy,
#:   ``llmfoundry/models/mpt/modeling_mpt.py``);
#: * ``"chunked"``: torchtune's ``CEWithChunkedOutputLoss`` (8 chunks): the BF16 logits (2) and one
#:   chunk's FP32 copy and log-probabilities (8 / 8), 3.
LOSS_BYTES = {"eager": 12.0, "fused": 4.0, "chunked": 3.0}
#: A serving tenant computes no loss; the elementwise term of its forward pass
#: (:func:`seconds_per_token_table`) keeps the ``6 V`` bytes per token after the blocks that it had
#: before the loss was counted by implementation (the serving model's, not revisited here).
SERVE_VOCAB_BYTES = 6.0


def activation_bytes(m: ModelArch, loss: str | None = "eager") -> tuple[float, float]:
    """``(per_layer, final)``: activation bytes per token kept for the backward pass at 16 bit,
    with FlashAttention and no dropout, per transformer block and once after the last one, with
    the loss implemented as ``loss`` (a key of :data:`LOSS_BYTES`; None for a serving tenant,
    :data:`SERVE_VOCAB_BYTES`).

    Per block, the tensors autograd saves: the input of each of the two norms (``2 h`` each);
    attention: the norm's output that feeds q, k and v (``2 h``), q, k and v for the attention
    kernel (``2 (q + 2 k)``, GQA shrinks k and v), its output, which also feeds the output
    projection (``2 q``); a SwiGLU MLP: its input (``2 h``), the gate and up projections, the
    SiLU of the gate and their product (``4 x 2 f``); a GeLU MLP: its input, the GeLU's input and
    output (``2 h + 2 x 2 f``). After the blocks: the final norm's and the head's inputs
    (``2 x 2 h``) and the loss's ``LOSS_BYTES[loss] x V`` (logits and log-probabilities).
    This is Korthikanti et al. 2022's count (``34 h`` for a GPT block with dropout) redone for
    each block type."""
    h, f, q, k = m.hidden, m.ffn, m.heads * m.head_dim, m.kv_heads * m.head_dim
    mlp = 2 * h + (8 * f if m.mlp == "gated" else 4 * f)
    per_layer = 4 * h + 2 * h + 2 * (q + 2 * k) + 2 * q + mlp
    if loss is not None and loss not in LOSS_BYTES:
        raise ValueError(f"loss: {loss!r}; expected one of {', '.join(map(repr, LOSS_BYTES))}")
    return float(per_layer), float(4 * h + (SERVE_VOCAB_BYTES if loss is None else LOSS_BYTES[loss]) * m.vocab)


def selective_checkpointing(m: ModelArch) -> tuple[float, np.ndarray]:
    """``(per_layer, recomputed)`` under per-op selective activation checkpointing (torchtitan's
    ``selective_ac_option = "op"``): the bytes per token a block keeps for the backward pass at
    16 bit, and the share of each layer group's linear FLOPs (G,) run again in the backward.

    torchtitan's policy (``parallelize_llama.py``, ``_save_list`` and ``_custom_policy``) saves
    the output of every matmul except every second one in the block's call order, of the
    FlashAttention kernel and of the amax reductions; it recomputes everything else from the
    block's input. The catalog block calls q, k, v, o, then gate, up, down (SwiGLU) or fc, proj
    (GeLU), so it keeps the block's input (``2 h``), the outputs of q, v, gate and down (or fc)
    (``2 (q + k + f + h)``; ``2 (q + k + f)`` for GeLU), the attention output (``2 q``) and its
    FP32 log-sum-exp (``4 a``), and recomputes k and o and up (or proj)."""
    h, f, q, k, a = m.hidden, m.ffn, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.heads
    att = [(h, q), (h, k), (h, k), (q, h)]  # (in, out) of q, k, v, o
    mlp = [(h, f), (h, f), (f, h)] if m.mlp == "gated" else [(h, f), (f, h)]
    calls = [(_ATT, i, o) for i, o in att] + [(_MLP, i, o) for i, o in mlp]
    kept = 2.0 * h + 2.0 * q + 4.0 * a
    redo, total = np.zeros(catalog.N_GROUPS), np.zeros(catalog.N_GROUPS)
    for n, (g, i, o) in enumerate(calls, start=1):
        total[g] += i * o
        if n % 2:
            kept += 2.0 * o
        else:
            redo[g] += i * o
    with np.errstate(invalid="ignore"):
        return float(kept), np.where(total > 0, redo / total, 0.0)


__all__ = [
    "ACT_ATTN",
    "CHECKPOINTING_CODE",
    "CKPT_FULL",
    "CKPT_NONE",
    "CKPT_SELECTIVE",
    "LOSS_BYTES",
    "SERVE_VOCAB_BYTES",
    "activation_bytes",
    "selective_checkpointing",
]

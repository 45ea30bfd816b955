"""The oracle's gang and layout constraints (``coupling.gang``, docs/model.md section 12.4), in
numpy, written apart from ``fleet_marl/kernel/gang.py``: the GPUs each tenant's parallel layout
uses on each node, as one array expression over batch rows, tenants and nodes (a trainer's
whole tensor-parallel groups on each node; a server's one replica on its fullest node, its
degree read from a table of the degrees vLLM accepts). ``tests/oracle.py`` calls it from its
round."""

from __future__ import annotations

import numpy as np


def _degree_table(st) -> np.ndarray:
    """(T, gpus_per_node + 1) int64: entry ``[t, m]`` is the largest degree ``d <= m`` whose
    replica vLLM accepts for tenant ``t``'s model (``d`` divides its attention heads, and ``d``
    divides its KV heads or they divide ``d``); 0 for ``m = 0``."""
    heads = st.heads.astype(np.int64)[:, None]
    kv = st.kv_heads.astype(np.int64)[:, None]
    d = np.arange(1, st.gpus_per_node + 1)[None, :]
    ok = (heads % d == 0) & ((kv % d == 0) | (d % kv == 0))  # (T, gpn): degree d + 1 accepted
    accepted = np.where(ok, d, 0)
    table = np.maximum.accumulate(accepted, axis=1)  # the largest accepted degree up to m
    return np.concatenate([np.zeros((st.T, 1), np.int64), table], axis=1)


def usable_on_nodes(st, gon: np.ndarray) -> np.ndarray:
    """(B, T, K) GPUs each tenant uses on each node of the placement ``gon`` (B, T, K) under
    ``coupling.gang``: a trainer the multiples of its ``tensor_parallel`` degree it holds on each
    node; a server a replica of the largest accepted degree up to what it holds on its fullest
    node (the first such node on ties), on that node; the rest of its GPUs none."""
    tp = st.tensor_parallel[None, :, None]
    train = (gon // tp) * tp
    fullest = gon.argmax(-1)  # (B, T): numpy's argmax picks the first of equal maxima
    most = np.take_along_axis(gon, fullest[..., None], -1)[..., 0]
    degree = _degree_table(st)[np.arange(st.T)[None, :], most]  # (B, T)
    serve = np.where(np.arange(st.K)[None, None, :] == fullest[..., None], degree[..., None], 0)
    return np.where(st.is_train[None, :, None], train, serve)

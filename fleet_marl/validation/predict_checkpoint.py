"""The kernel's checkpoint write and restart seconds for a published measurement
(``measurements_checkpoint.yaml``; ``docs/validation.md``, "Checkpoint and restart time").

A case is one trainer on the published GPUs and nodes of the catalog GPU, with the default
cluster constants (``ClusterSpec()``: the loaders' rates per GPU and per node, the restart's fixed
part) and the published bandwidth of the shared storage it writes to or reads from
(``checkpoint.storage_gbs``, GB/s of 1e9 bytes). Every number comes from the kernel's own
functions, none re-derived here:

* the checkpoint's bytes: ``tenant_cost.checkpoint_bytes`` over the trainer's optimizer bytes of
  stage 1 (the fp32 master copy and Adam's two moments, 12 bytes a parameter);
* a synchronous save (``checkpoint_write_s``): ``contention.checkpoint_writes``, the round's rule that
  stops a trainer with a checkpoint interval ``I`` for ``s w`` seconds every ``I`` (``w`` the bytes
  at its loaders' rate, ``s`` its share of the storage); it scales the trainer's work rate by
  ``I / (I + s w)``, from which the seconds of one save are read back;
* a load or a restart (``restart_s``): ``tenant_cost.restart_time`` (the fixed part, then the bytes
  at ``min(n x per-GPU, nodes x per-node)``) and, where the storage is slower than that, the
  storage's max-min fluid schedule of the round's loads (``contention.storage_share``, as
  ``contention.storage_loads`` runs it) for the one load. ``checkpoint.part: load`` marks a
  source that times the checkpoint load alone: the fixed part is then left out.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fleet_marl.config import ClusterSpec
from fleet_marl.kernel import contention, layout, tenant_cost
from fleet_marl.validation.cases import Case
from fleet_marl.validation.predict import GPUS_PER_NODE, _static, _terms

#: What a source may time (``checkpoint.part``): a synchronous save, the checkpoint load alone,
#: or a whole restart (the fixed part and the load).
PARTS = {"checkpoint_write_s": ("save",), "restart_s": ("restart", "load")}


def block(c: Case) -> dict:
    """The case's ``checkpoint`` block (``{}`` if it has none)."""
    return dict(c.extra.get("entry", {}).get("checkpoint") or {})


def part(c: Case) -> str:
    """What the case's source times: ``save``, ``load`` or ``restart`` (the default of its quantity)."""
    p = str(block(c).get("part") or PARTS[c.quantity][0])
    if p not in PARTS[c.quantity]:
        raise ValueError(f"{c.id}: checkpoint.part {p!r} for {c.quantity}; expected one of {', '.join(PARTS[c.quantity])}")
    return p


def nodes(c: Case) -> int:
    """The nodes the trainer spans: as published (``checkpoint.nodes``, else ``hardware.nodes``), else
    its GPUs over 8 a node."""
    hw = c.extra.get("entry", {}).get("hardware") or {}
    n = block(c).get("nodes") or hw.get("nodes")
    return int(n) if n else max(1, math.ceil(c.gpus / GPUS_PER_NODE))


def storage_bps(c: Case) -> float:
    """The shared storage's bytes/s as published (``checkpoint.storage_gbs``); inf if the case states none."""
    s = block(c).get("storage_gbs")
    return math.inf if s is None else float(s) * 1e9


def checkpoint_bytes(c: Case) -> float:
    """The bytes of the trainer's checkpoint by the kernel's rule (``tenant_cost.checkpoint_bytes``)
    over its stage-1 optimizer bytes at the case's architecture and precision (the whole model's,
    whatever the GPUs: stage 1 runs on one node's)."""
    st = _static(dataclasses.replace(c, quantity="train_tokens_per_s_per_gpu", gpus=GPUS_PER_NODE))
    tt, _ = _terms(st, c)
    c_terms = np.zeros((tenant_cost.C_WS + 1, 1))
    c_terms[tenant_cost.C_W, 0] = tt.weights[0]
    c_terms[tenant_cost.C_O, 0] = tt.optimizer[0]
    return float(tenant_cost.checkpoint_bytes(c_terms, 0, True))


def write_seconds(ckpt: float, n: int, n_nodes: int, cl: ClusterSpec, storage: float) -> float:
    """Seconds one synchronous save stops a lone trainer of ``ckpt`` bytes on ``n`` GPUs over
    ``n_nodes`` nodes: ``contention.checkpoint_writes`` on a one-tenant row (its checkpoint bytes put in
    through the optimizer row that ``checkpoint_bytes`` reads), read back from the share of its
    time it trains, ``I / (I + s w)``."""
    every = 1000.0
    tf = np.zeros((1, len(layout.TF)))
    tf[0, layout.T_CKPT_EVERY] = every
    ti = np.zeros((1, len(layout.TI)), np.int64)
    ti[0, layout.T_TRAIN] = 1
    sc = np.zeros(len(layout.SC))
    sc[layout.S_LOAD_GPU] = cl.checkpoint_load_gbs_per_gpu * 1e9
    sc[layout.S_LOAD_NODE] = cl.checkpoint_load_gbs_per_node * 1e9
    sc[layout.S_STORAGE] = storage
    c_terms = np.zeros((tenant_cost.C_WS + 1, 1))
    c_terms[tenant_cost.C_O, 0] = ckpt * tenant_cost.ADAM_BYTES / tenant_cost.CKPT_TRAIN_BYTES
    work_rate = np.ones(1)
    rf = np.zeros((len(layout.OF), 1))
    contention.checkpoint_writes(
        tf, ti, sc, c_terms, np.array([n], np.int64), np.array([n_nodes], np.int64), np.ones(1, np.bool_), work_rate, rf, np.zeros((4, 1))
    )
    return every * (1.0 - work_rate[0]) / work_rate[0]


def load_seconds(ckpt: float, n: int, n_nodes: int, cl: ClusterSpec, storage: float) -> float:
    """Seconds a lone trainer of ``ckpt`` bytes on ``n`` GPUs over ``n_nodes`` nodes reads its checkpoint:
    ``tenant_cost.restart_time`` without its fixed part (the loaders' rate), and where the storage
    is slower than that rate, the storage's fluid schedule of the one load (``contention.storage_share``)."""
    gpu_bps, node_bps = cl.checkpoint_load_gbs_per_gpu * 1e9, cl.checkpoint_load_gbs_per_node * 1e9
    own = tenant_cost.restart_time(0.0, ckpt, n, n_nodes, gpu_bps, node_bps)
    if ckpt / own <= storage:  # the load at its own rate throughout (contention.storage_loads)
        return float(own)
    load_s, rem, cap, rate = np.zeros(1), np.array([ckpt]), np.array([ckpt / own]), np.zeros(1)
    contention.storage_share(storage, load_s, rem, cap, rate)
    return float(load_s[0])


def predict(c: Case) -> tuple[float, dict]:
    """The kernel's seconds of the case's save, load or restart, and the setting it used."""
    cl = ClusterSpec()
    n, n_nodes, storage = c.gpus, nodes(c), storage_bps(c)
    ckpt = checkpoint_bytes(c)
    p = part(c)
    if p == "save":
        value = write_seconds(ckpt, n, n_nodes, cl, storage)
    else:
        value = load_seconds(ckpt, n, n_nodes, cl, storage) + (cl.restart_seconds if p == "restart" else 0.0)
    setting = {"gpus": n, "nodes": n_nodes, "part": p, "checkpoint_gb": round(ckpt / 1e9, 2)}
    setting["storage_gbs"] = None if math.isinf(storage) else storage / 1e9
    return value, setting


__all__ = ["PARTS", "block", "checkpoint_bytes", "load_seconds", "nodes", "part", "predict", "storage_bps", "write_seconds"]

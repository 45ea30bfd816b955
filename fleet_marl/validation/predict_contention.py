"""The kernel's prediction of a contention slowdown (``contention_slowdown``,
``measurements_contention.yaml``): a training job's step time while co-runners share the links
it crosses, over its step time alone (``docs/validation.md``, "Contention slowdown").

Each entry's ``contention`` block is the published scenario: a catalog topology
(``catalog/topologies.yaml``, :meth:`ClusterSpec.from_topology`) with its node count and any
overridden cluster field, and the jobs, each with its architecture (a catalog model or one of
``cases.EXTRA_MODELS``), sequence length, sequences per GPU and its GPUs on each node as
published (``placement``: node index -> GPUs). ``job`` names the job whose slowdown was
measured.

The value is the kernel's own round (``kernel.evaluate``), run twice with ``coupling.contention``
on: every job present, and the measured job alone (the others absent). Persistent placement
(``coupling.persistent_placement``, last round's placement given as the published one and every
grant equal to it) pins each job to its published nodes, so no restart is charged; the
prediction is the measured job's tokens/s alone over its tokens/s with the co-runners (its step
time with them over alone: the same ratio, whether the source published a step time or a
throughput). With the switch off, or the co-runners removed, it is 1. Nothing is fitted.

A case whose block says ``benchmark: allreduce`` was measured as collective benchmarks
(nccl-tests' ``all_reduce_perf``) run side by side: each job communicates all the time and its
bus bandwidth alone over beside the others is the slowdown. Its round is the kernel's own
contention stage (``kernel.contention.contend``) on the scenario's packed arrays, every job a
trainer whose step is all communication (its work rate set so its step equals its ring's
all-reduce time, ``comm_overlap`` 0: a benchmark has nothing to hide the ring behind), so the
stage's ``slowdown`` is the ring's own factor ``s``; the ratio is its value beside the co-runners
over alone. An ``ecmp`` block (``flows``: the flows ECMP hashes onto one leaf's uplinks in one
direction, ``uplinks``: how many) takes the leaf's capacity at the uplinks' bytes/s over
:func:`ecmp_factor`, the expected load of the most loaded uplink over the mean when each flow
picks an uplink at random (balls in bins; a scenario value derived from the published flow count,
not fitted), as the catalog's ``crux-a100-testbed`` stands for ECMP's collisions with an
effective oversubscription.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import ArbiterSpec, ClusterSpec, CouplingSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate
from fleet_marl.kernel.contention import contend
from fleet_marl.kernel.layout import O_EFF, O_LINK, O_SLOW, O_TPS, OF, OI, OI_BATCH, T_INTER, T_INTRA, T_SEQ
from fleet_marl.kernel.static import model_arrays
from fleet_marl.kernel.tenant_cost import C_COMM
from fleet_marl.validation.cases import Case, arch


def _jobs(entry: dict) -> list[dict]:
    jobs = list((entry.get("contention") or {}).get("jobs") or [])
    if not jobs:
        raise ValueError(f"{entry.get('id')}: a contention case needs contention.jobs")
    return jobs


def _placement(entry: dict, nodes: int) -> np.ndarray:
    """(T, K) GPUs of each job on each node, as published."""
    jobs = _jobs(entry)
    out = np.zeros((len(jobs), nodes), np.int64)
    for t, job in enumerate(jobs):
        for k, g in (job.get("placement") or {}).items():
            if not 0 <= int(k) < nodes:
                raise ValueError(f"{entry.get('id')}: job {job.get('name')!r} placed on node {k} of {nodes}")
            out[t, int(k)] = int(g)
    return out


def ecmp_factor(flows: int, uplinks: int) -> float:
    """The expected load of the most loaded of ``uplinks`` links over the mean when each of
    ``flows`` equal flows is hashed onto one of them uniformly and independently (ECMP's static
    hashing; balls in bins): 1 for one uplink, 1.5 for two flows on two, 1.375 for four."""
    if flows < 1 or uplinks < 1:
        raise ValueError(f"ecmp: flows {flows} and uplinks {uplinks} must be positive")
    if uplinks**flows > 1 << 20:
        raise ValueError(f"ecmp: {uplinks}^{flows} hashings are too many to enumerate")
    most = [max(pick.count(u) for u in range(uplinks)) for pick in itertools.product(range(uplinks), repeat=flows)]
    return float(np.mean(most)) / (flows / uplinks)


def _benchmark(entry: dict) -> str:
    kind = str((entry.get("contention") or {}).get("benchmark") or "")
    if kind not in ("", "allreduce"):
        raise ValueError(f"{entry.get('id')}: contention.benchmark {kind!r}; expected 'allreduce' or none (a training step)")
    return kind


def scenario(c: Case, *, contention: bool = True) -> tuple[KernelStatic, Actions, RoundState, Draws, int]:
    """The case's round: ``(static, actions, state, draws, t)`` with ``t`` the measured job's
    tenant index. Every job is a trainer on the case's catalog GPU at the case's precision map,
    on the published topology and nodes; its models' arrays are the published architectures
    (a benchmark's jobs carry none: the case's model stands in, unread by the contention stage).
    An ``ecmp`` block divides the leaves' uplinks by :func:`ecmp_factor`; a benchmark runs
    with ``comm_overlap`` 0."""
    entry = c.extra["entry"]
    sc = entry["contention"]
    jobs = _jobs(entry)
    nodes = int(sc["nodes"])
    extra: dict[str, Any] = {"comm_overlap": 0.0} if _benchmark(entry) else {}
    cl = ClusterSpec.from_topology(
        str(sc["topology"]), nodes=nodes, **{"rack_power_cap_w": 1e12, "gpu_types": (c.gpu,) * nodes, **extra, **(sc.get("cluster") or {})}
    )
    if sc.get("ecmp"):
        factor = ecmp_factor(int(sc["ecmp"]["flows"]), int(sc["ecmp"]["uplinks"]))
        cl = dataclasses.replace(cl, uplink_oversubscription=cl.uplink_oversubscription * factor)
    place = _placement(entry, nodes)
    gpus = place.sum(1)
    tenants = tuple(
        TenantSpec(
            kind="train",
            model="llama-3.1-8b",  # a placeholder: model_arrays puts the published architecture in
            gpu_type=c.gpu,
            max_gpus=int(cl.capacity(c.gpu)),
            budget=1e12,
            activation_checkpointing=str(job.get("activation_checkpointing", "none")),
            workload=WorkloadSpec(seq_len=int(job.get("seq_len", c.seq_len or 1024))),
        )
        for job in jobs
    )
    cfg = FleetConfig(
        cluster=cl,
        tenants=tenants,
        arbiter=ArbiterSpec(mechanism="maxmin"),
        safety=SafetySpec(mode="veto"),
        coupling=CouplingSpec(contention=contention, persistent_placement=True),
    )
    st = KernelStatic.from_config(cfg)
    ctx = np.array([float(job.get("seq_len", c.seq_len or 1024)) for job in jobs])
    st = dataclasses.replace(st, **model_arrays([arch(str(job.get("model", c.model))) for job in jobs], ctx))
    T, K = len(jobs), nodes
    prec = np.array([[catalog.PRECISION_CODE[c.prec_map[g]] for g in catalog.GROUPS]] * T, np.int64)
    acts = Actions(gpus=gpus, bid=np.ones(T), precision=prec, batch=np.array([int(job.get("batch", 1)) for job in jobs], np.int64))
    state = RoundState(
        prev_alloc=gpus.copy(),
        temp_c=np.full(K, st.ambient_c),
        queue=np.zeros(T),
        remaining_tokens=np.full(T, 1e18),
        budget_left=np.full(T, 1e12),
        prev_placement=place,
    )
    draws = Draws(arrivals=np.zeros(T), tiebreak=np.linspace(0.1, 0.9, T))
    names = [str(job["name"]) for job in jobs]
    if str(sc["job"]) not in names:
        raise ValueError(f"{c.id}: contention.job {sc['job']!r} is not one of the jobs ({', '.join(names)})")
    return st, acts, state, draws, names.index(str(sc["job"]))


def slowdown(c: Case, *, contention: bool = True, co_runners: bool = True) -> tuple[float, dict[str, Any]]:
    """The measured job's tokens/s alone over its tokens/s with the co-runners present (both
    rounds with ``coupling.contention`` as given), and the setting: its GPUs and nodes, batch,
    the kernel's ``slowdown`` and ``link_load`` of the shared round. ``co_runners=False`` runs
    the shared round without them too (the ratio is then 1 by construction)."""
    st, acts, state, draws, t = scenario(c, contention=contention)
    alone_mask = np.zeros(st.T, bool)
    alone_mask[t] = True
    shared_mask = np.ones(st.T, bool) if co_runners else alone_mask
    if _benchmark(c.extra["entry"]):
        return _allreduce_slowdown(c, st, np.asarray(state.prev_placement), t, alone_mask, shared_mask, contention)
    alone = evaluate(st, acts, state, draws, present=alone_mask)
    shared = evaluate(st, acts, state, draws, present=shared_mask)
    want = np.asarray(state.prev_placement)
    for out in (alone, shared):
        got = np.asarray(out.gpus_on_node)[t]
        if not np.array_equal(got, want[t]) or out.tokens_per_s[t] <= 0.0:
            raise ValueError(
                f"{c.id}: the kernel did not run the measured job as published (GPUs on nodes {got.tolist()}, tokens/s {out.tokens_per_s[t]})"
            )
    ratio = float(alone.tokens_per_s[t] / shared.tokens_per_s[t])
    setting = {
        "gpus": int(acts.gpus[t]),
        "nodes": int((want[t] > 0).sum()),
        "batch": int(acts.batch[t]),
        "kernel_slowdown": float(shared.slowdown[t]),
        "kernel_slowdown_alone": float(alone.slowdown[t]),
        "link_load": float(shared.link_load[t]),
    }
    return ratio, setting


def _contend(st: KernelStatic, place: np.ndarray, running: np.ndarray, message_bytes: float) -> np.ndarray:
    """The kernel's contention stage (``contention.contend``) on one row: every job an
    all-reduce benchmark whose step is its ring's all-reduce of ``message_bytes`` (its work rate
    set so the step equals the ring time the stage computes, ``C_COMM`` bytes over the ring's
    link rate); returns the (3, T) ``slowdown``, ``link_load`` and tokens/s factor."""
    tf, ti, _tg, nf, ni, sc = st.packed
    T, K = place.shape
    alloc = place.sum(1).astype(np.int64)
    n_nodes = (place > 0).sum(1).astype(np.int64)
    t_nodes = np.zeros((T, K), np.int64)
    for t in range(T):
        on = np.nonzero(place[t])[0]
        t_nodes[t, : on.size] = on
    c_terms = np.zeros((13, T))
    c_terms[C_COMM] = 2.0 * message_bytes  # a ring all-reduce sends and receives 2 (n - 1) / n of the message a GPU
    d = np.minimum(tf[:, T_INTRA], alloc / np.maximum(n_nodes, 1) * tf[:, T_INTER])  # the stage's ring link rate
    comm = c_terms[C_COMM] * (alloc - 1) / alloc / d
    ri = np.zeros((len(OI), T), np.int64)
    ri[OI_BATCH] = 1
    work_rate = alloc * tf[:, T_SEQ] / comm  # step = n x batch x seq / work rate = the ring's time
    rf = np.zeros((len(OF), T))
    rf[O_TPS] = rf[O_EFF] = 1.0
    avail = np.full(T, st.round_seconds)
    ct, load, stamp = np.zeros((4, T)), np.zeros(K), np.zeros(K, np.int64)
    contend(0, tf, ti, nf, ni, sc, c_terms, alloc, n_nodes, t_nodes, running.copy(), work_rate, avail, rf, ri, ct, load, stamp)
    return np.stack([rf[O_SLOW], rf[O_LINK], rf[O_TPS]])


def _allreduce_slowdown(c: Case, st, place, t, alone_mask, shared_mask, contention: bool) -> tuple[float, dict[str, Any]]:
    """:func:`slowdown` of a benchmark case: the measured job's ring factor beside the others
    over alone, from the kernel's contention stage (:func:`_contend`); 1 with the switch off (the
    round never calls the stage)."""
    size = float(c.extra["entry"]["contention"].get("message_bytes", 1 << 27))
    alone = _contend(st, place, alone_mask, size)
    shared = _contend(st, place, shared_mask, size)
    if not contention:
        alone = shared = np.ones((3, st.T)) * np.array([[1.0], [0.0], [1.0]])
    ratio = float(shared[0, t] / alone[0, t])
    setting = {
        "gpus": int(place[t].sum()),
        "nodes": int((place[t] > 0).sum()),
        "batch": 1,
        "kernel_slowdown": float(shared[0, t]),
        "kernel_slowdown_alone": float(alone[0, t]),
        "link_load": float(shared[1, t]),
        "leaf_uplink_gbs": float(st.leaf_uplink_bps[place[t] > 0].min()) / 1e9,
    }
    return ratio, setting


def predict(c: Case) -> tuple[float, dict]:
    """The kernel's contention slowdown of the case's measured job (:func:`slowdown`)."""
    return slowdown(c)


__all__ = ["ecmp_factor", "predict", "scenario", "slowdown"]

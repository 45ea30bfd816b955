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
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fleet_marl import catalog
from fleet_marl.config import ArbiterSpec, ClusterSpec, CouplingSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate
from fleet_marl.kernel.static import model_arrays
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


def scenario(c: Case, *, contention: bool = True) -> tuple[KernelStatic, Actions, RoundState, Draws, int]:
    """The case's round: ``(static, actions, state, draws, t)`` with ``t`` the measured job's
    tenant index. Every job is a trainer on the case's catalog GPU at the case's precision map,
    on the published topology and nodes; its models' arrays are the published architectures."""
    entry = c.extra["entry"]
    sc = entry["contention"]
    jobs = _jobs(entry)
    nodes = int(sc["nodes"])
    cl = ClusterSpec.from_topology(
        str(sc["topology"]), nodes=nodes, **{"rack_power_cap_w": 1e12, "gpu_types": (c.gpu,) * nodes, **(sc.get("cluster") or {})}
    )
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
            workload=WorkloadSpec(seq_len=int(job["seq_len"])),
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
    ctx = np.array([float(job["seq_len"]) for job in jobs])
    st = dataclasses.replace(st, **model_arrays([arch(str(job["model"])) for job in jobs], ctx))
    T, K = len(jobs), nodes
    prec = np.array([[catalog.PRECISION_CODE[c.prec_map[g]] for g in catalog.GROUPS]] * T, np.int64)
    acts = Actions(gpus=gpus, bid=np.ones(T), precision=prec, batch=np.array([int(job["batch"]) for job in jobs], np.int64))
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


def predict(c: Case) -> tuple[float, dict]:
    """The kernel's contention slowdown of the case's measured job (:func:`slowdown`)."""
    return slowdown(c)


__all__ = ["predict", "scenario", "slowdown"]

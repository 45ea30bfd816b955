"""The credit-assignment suite: families of tasks that sweep what couples tenants, each task a
scenario generator with train, held-out and shifted seeds.

A suite task is a family at a team size ``n`` (``scarce_n32``). Its scenarios are drawn per seed,
as SMACv2 draws its unit types and start positions per episode and Procgen its levels per seed:
the tenant mix, each tenant's model, priority, budget and load, and (``trace_window``) the window
of the trace it replays. The shapes stay fixed within a task (the number of tenants, each
tenant's kind and largest request, the cluster), so every scenario of a task has the same
observation and action spaces and one policy plays them all::

    cfg = fleet_marl.suite.scenario("scarce_n8", seed=3, split="heldout")   # a FleetConfig dict
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=fleet_marl.suite.env_seed(3, "heldout"))

**Splits.** ``train`` is what a learner trains on (scenario seeds 0, 1, 2, ...); ``heldout``
draws from the same distribution with seeds a learner never saw (its scenarios and its episodes'
draws are disjoint from train's); ``shift`` is held out *and* changes what the family's
:attr:`Family.shift` says (a different arrival pattern, or a trace that training never replays).
The env is reset with :func:`env_seed`, which offsets each split's seeds, so train seed 3 and
held-out seed 3 share nothing.

**The distributions** (each a scenario choice, stated here and in docs/credit_assignment.md):

- *kind*: fixed per slot by the family (trainers on even slots and servers on odd ones, or all
  trainers);
- *model*: a trainer's uniformly from :data:`TRAIN_MODELS`, a server's from :data:`SERVE_MODELS`;
- *priority*: 2 with probability :attr:`Family.p_high`, else 1;
- *budget*: the family's budget times a log-uniform factor in [0.7, 1.4];
- *load*: a server's request rate the family's rate times a log-uniform factor in [0.5, 2]; a
  trainer's job size its model's size times a log-uniform factor in [0.5, 2];
- *window* (``trace_window``): the job trace among Pollux workloads 1-3 and both traces' replay
  offsets, uniformly over the part of each trace an episode can cover.

**The families** (:data:`FAMILIES`) and what each is for: ``aligned`` is the control (no pool is
oversubscribed, no power binds: a tenant's local reward is its difference reward);
``proportional`` is the earlier study's scenario (bids split an oversubscribed pool), where the
global reward's signal fades with n; ``scarce`` is scarcity the local reward does not price (a
uniform-price auction, 3 GPUs per tenant, servers at 3x load: a selfish tenant over-requests and
starves others); ``storm`` adds correlated arrival bursts and queueing (noise, and value that is
not linear in service); ``power`` and ``fabric`` couple tenants through a rack's power below its
GPUs' TDP and oversubscribed uplinks (issue 47's ``capped_rack`` and ``shared_fabric`` grown to
n); ``trace_window`` replays real traces from a per-seed window. Each family's tasks span
:data:`NS` where its cluster allows (``trace_window`` has its traces' six tenants).

How coupled each task is, measured (``fleet-marl suite coupling``), is in
``docs/data/suite_coupling.json``; ``fleet-marl suite list`` shows it beside each task.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleet_marl.builtin_tasks import tenant, trace_config
from fleet_marl.errors import ConfigError

#: Train scenarios a learner's clusters spread over by default (``FleetTorchEnv(task=...)``, ``scenarios``):
#: scenario seeds 0..31 of the train split, as Procgen's ``num_levels``.
TRAIN_SCENARIOS = 32
#: Team sizes the suite sweeps.
NS = (4, 8, 16, 32, 64, 128)
#: The splits and the offset of each one's env seeds (:func:`env_seed`).
SPLITS = {"train": 0, "heldout": 1_000_000, "shift": 2_000_000}
#: Trainers' models and each one's base job size in tokens (``easy``'s sizes).
TRAIN_MODELS = {"qwen2.5-0.5b": 2.0e8, "qwen2.5-7b": 2.0e7}
#: Servers' models.
SERVE_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b")
#: The shared bursts of a shifted split (``easy``-like families): every server and every
#: trainer's job arrivals follow one on/off chain, 4x the calm rate a fifth of the time, in
#: bursts of 3 rounds (``medium``'s burst shape, made common to all).
SHARED_BURSTS = dict(pattern="bursty", burst_factor=4.0, burst_fraction=0.2, burst_rounds=3.0, burst_shared=True)
#: ``storm``'s bursts: 8x the calm rate 15 % of the time, one round at a time, shared (``hard``'s
#: storms at 8, the lowest factor ``hard`` measured).
STORM = dict(pattern="bursty", burst_factor=8.0, burst_fraction=0.15, burst_rounds=1.0, burst_shared=True)
#: ``storm``'s shifted split: a diurnal swing of +-80 % over 50 rounds instead of bursts.
DIURNAL = dict(pattern="diurnal", diurnal_amplitude=0.8, diurnal_period_s=3000.0)
#: H100 SXM power at TDP (W), for the power families' caps (the catalog's figure, docs/model.md).
H100_TDP_W = 700.0


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _priority(rng: np.random.Generator, p_high: float) -> float:
    return 2.0 if rng.random() < p_high else 1.0


def _trainer(rng: np.random.Generator, budget: float, p_high: float, arrivals: dict, model: str | None = None, **kw) -> dict:
    m = str(rng.choice(list(TRAIN_MODELS))) if model is None else model
    tokens = TRAIN_MODELS.get(m, 1.0e10) * _log_uniform(rng, 0.5, 2.0)
    return tenant(
        "train",
        m,
        "h100-sxm",
        round(budget * _log_uniform(rng, 0.7, 1.4), 2),
        priority=_priority(rng, p_high),
        seq_len=2048,
        job_tokens=float(f"{tokens:.3g}"),
        rate=6.0,
        **arrivals,
        **kw,
    )


def _server(rng: np.random.Generator, budget: float, p_high: float, rate: float, arrivals: dict) -> dict:
    return tenant(
        "serve",
        str(rng.choice(SERVE_MODELS)),
        "h100-sxm",
        round(budget * _log_uniform(rng, 0.7, 1.4), 2),
        priority=_priority(rng, p_high),
        rate=round(rate * _log_uniform(rng, 0.5, 2.0), 3),
        prompt_tokens=1024,
        output_tokens=256,
        **arrivals,
    )


def _mixed(rng, n: int, budget: float, rate: float, p_high: float, arrivals: dict) -> list[dict]:
    """Trainers on even slots, servers on odd ones (``easy``'s mix, grown to n)."""
    return [_trainer(rng, budget, p_high, arrivals) if i % 2 == 0 else _server(rng, budget, p_high, rate, arrivals) for i in range(n)]


def _aligned(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # A node per tenant (8 GPUs each against requests of at most 8) in racks of two (11.2 kW at
    # TDP against the 16 kW cap): no pool is oversubscribed and no power binds.
    return {
        "cluster": {"gpu_types": ["h100-sxm"] * n, "nodes_per_rack": 2},
        "tenants": _mixed(rng, n, 172.0, 6.0, 0.25, SHARED_BURSTS if shift else {}),
        "arbiter": {"mechanism": "maxmin"},
        "max_cycles": 100,
    }


def _proportional(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # fleet_marl.tasks.scaled(n): 4 GPUs per tenant against requests of up to 8, bids split the pool.
    return {
        "cluster": {"gpu_types": ["h100-sxm"] * -(-n // 2), "nodes_per_rack": 2},
        "tenants": _mixed(rng, n, 172.0, 6.0, 0.25, SHARED_BURSTS if shift else {}),
        "arbiter": {"mechanism": "proportional"},
        "max_cycles": 100,
    }


def _scarce(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # 3 GPUs per tenant (ceil(3n / 8) nodes) under the uniform-price auction, servers at 3x easy's load.
    return {
        "cluster": {"gpu_types": ["h100-sxm"] * -(-3 * n // 8), "nodes_per_rack": 2},
        "tenants": _mixed(rng, n, 172.0, 18.0, 0.25, SHARED_BURSTS if shift else {}),
        "arbiter": {"mechanism": "auction"},
        "max_cycles": 100,
    }


def _storm(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # scarce, with every tenant's arrivals in shared storms and servers' queues counted in their TTFT.
    cfg = _scarce(n, rng, False)
    arrivals = DIURNAL if shift else STORM
    for t in cfg["tenants"]:
        t["workload"].update(arrivals)
    cfg["coupling"] = {"queueing": True}
    return cfg


def _rack(nodes: int, per_rack: int, fraction: float) -> dict:
    per_rack = min(per_rack, nodes)
    return {"nodes_per_rack": per_rack, "rack_power_cap_w": round(fraction * H100_TDP_W * 8 * per_rack, 1)}


def _power(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # capped_rack grown to n: n trainers of a small model on n / 2 nodes, racks of four powered
    # at 58 % of their GPUs' TDP, long jobs (short ones, arriving in shared bursts, when shifted).
    nodes = -(-n // 2)
    arrivals = SHARED_BURSTS if shift else {}
    scale = 1.0e-3 if shift else 1.0
    tenants = [_trainer(rng, 242.0, 0.5, arrivals, model="qwen2.5-0.5b") for _ in range(n)]
    for t in tenants:
        t["workload"]["job_tokens"] = float(f"{1.0e10 * scale * _log_uniform(rng, 0.5, 2.0):.3g}")
    return {
        "cluster": {"gpu_types": ["h100-sxm"] * nodes, **_rack(nodes, 4, 0.58), "round_seconds": 300.0},
        "tenants": tenants,
        "arbiter": {"mechanism": "maxmin"},
        "max_cycles": 50,
    }


def _fabric(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # shared_fabric grown to n: FSDP trainers of a 7B model able to take 12 GPUs, a leaf per node
    # with 1:4 uplinks, racks of two powered at 45 % of TDP.
    nodes = -(-n // 2)
    arrivals = SHARED_BURSTS if shift else {}
    scale = 1.0e-3 if shift else 1.0
    tenants = []
    for _ in range(n):
        t = _trainer(rng, 383.0, 0.5, arrivals, model="qwen2.5-7b", max_gpus=12)
        t["workload"]["job_tokens"] = float(f"{1.0e10 * scale * _log_uniform(rng, 0.5, 2.0):.3g}")
        t["activation_checkpointing"] = True
        tenants.append(t)
    return {
        "cluster": {
            "gpu_types": ["h100-sxm"] * nodes,
            **_rack(nodes, 2, 0.45),
            "nodes_per_leaf": 1,
            "uplink_oversubscription": 4.0,
            "round_seconds": 300.0,
        },
        "tenants": tenants,
        "arbiter": {"mechanism": "maxmin"},
        "coupling": {"contention": True},
        "max_cycles": 50,
    }


#: The job traces ``trace_window`` trains on, and the one its shifted split replays instead.
TRAIN_JOB_TRACES = ("pollux_workload-1.csv", "pollux_workload-2.csv", "pollux_workload-3.csv")
SHIFT_JOB_TRACE = "pollux_workload-4.csv"
#: Each trace's span in seconds (``fleet_marl.traces.trace_stats``; tests/test_suite.py checks them).
TRACE_SPAN_S = {
    "pollux_workload-1.csv": 27695.0,
    "pollux_workload-2.csv": 27131.0,
    "pollux_workload-3.csv": 28739.0,
    "pollux_workload-4.csv": 27731.0,
    "azure_llm_inference_conv_2023.csv": 3501.721937,
    "azure_llm_inference_code_2023_first30min.csv": 1788.410675,
}
#: Replay speeds: 100 rounds of 60 s cover 12,000 s of a job trace (at 2x) and 1,800 s of a
#: request trace (at 0.3x), so a window's offset can range over the rest of the trace.
JOB_SPEEDUP, REQUEST_SPEEDUP, EPISODE_S = 2.0, 0.3, 6000.0


def _trace_window(n: int, rng: np.random.Generator, shift: bool) -> dict:
    # The trace task's cluster and tenants, each seed replaying its own window: a job trace
    # among Pollux 1-3 (Pollux 4 when shifted) from a uniform offset, and the Azure conversation
    # trace (the code trace when shifted) from a uniform offset.
    job_trace = SHIFT_JOB_TRACE if shift else str(rng.choice(TRAIN_JOB_TRACES))
    req_trace = "azure_llm_inference_code_2023_first30min.csv" if shift else "azure_llm_inference_conv_2023.csv"
    job_off = rng.uniform(0.0, max(0.0, TRACE_SPAN_S[job_trace] - EPISODE_S * JOB_SPEEDUP))
    req_off = rng.uniform(0.0, max(0.0, TRACE_SPAN_S[req_trace] - EPISODE_S * REQUEST_SPEEDUP))
    jobs = dict(pattern="trace", trace=job_trace, trace_speedup=JOB_SPEEDUP, trace_shards=4, seq_len=2048, trace_offset_s=round(job_off, 1))
    lengths = (2028, 27) if shift else (1155, 211)
    rate = (3.21 if shift else 5.53) * REQUEST_SPEEDUP / 2
    reqs = dict(
        pattern="trace",
        trace=req_trace,
        trace_speedup=REQUEST_SPEEDUP,
        trace_shards=2,
        rate=round(rate, 3),
        prompt_tokens=lengths[0],
        output_tokens=lengths[1],
        trace_offset_s=round(req_off, 1),
    )
    return trace_config(jobs, reqs)


@dataclass(frozen=True)
class Family:
    """A family of suite tasks: ``build(n, rng, shift)`` draws one scenario's config dict."""

    name: str
    role: str  # what the family was built for: "control", "global fades", "scarcity", "noise", "power", "fabric" or "trace"
    description: str
    shift: str  # what the shifted split changes
    build: Callable[[int, np.random.Generator, bool], dict]
    ns: tuple[int, ...] = NS


#: The suite's families, in the order ``fleet-marl suite list`` shows them.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "aligned",
            "control",
            "easy's mix grown to n, a node per tenant, max-min: nothing is oversubscribed, local reward = difference reward",
            "every tenant's arrivals in shared bursts",
            _aligned,
        ),
        Family(
            "proportional",
            "global fades",
            "easy's mix grown to n on n/2 nodes under proportional share (the earlier study's scenario): bids split the pool",
            "every tenant's arrivals in shared bursts",
            _proportional,
        ),
        Family(
            "scarce",
            "scarcity",
            "easy's mix, 3 GPUs per tenant, servers at 3x load, uniform-price auction: scarcity the local reward does not price",
            "every tenant's arrivals in shared bursts",
            _scarce,
        ),
        Family(
            "storm",
            "noise",
            "scarce with every tenant's arrivals in shared 8x storms and servers' queues in their TTFT",
            "a diurnal swing instead of storms",
            _storm,
        ),
        Family(
            "power",
            "power",
            "n trainers on n/2 nodes in racks of four powered at 58 % of TDP (capped_rack grown to n)",
            "jobs 1000x shorter, arriving in shared bursts",
            _power,
        ),
        Family(
            "fabric",
            "fabric",
            "n FSDP 7B trainers on n/2 nodes, 1:4 uplinks, racks of two at 45 % of TDP (shared_fabric grown to n)",
            "jobs 1000x shorter, arriving in shared bursts",
            _fabric,
        ),
        Family(
            "trace_window",
            "trace",
            "the trace task's 6 tenants replaying a per-seed window of Pollux workloads 1-3 and Azure's conversation trace",
            "Pollux workload 4 and Azure's code trace, never replayed in training",
            _trace_window,
            ns=(6,),
        ),
    )
}


@dataclass(frozen=True)
class SuiteTask:
    """A family at a team size: ``name`` is ``f"{family}_n{n}"``."""

    name: str
    family: Family
    n: int


#: Every suite task, by name.
SUITE: dict[str, SuiteTask] = {f"{f.name}_n{n}": SuiteTask(f"{f.name}_n{n}", f, n) for f in FAMILIES.values() for n in f.ns}


def suite_task(name: str) -> SuiteTask:
    """The suite task ``name``; an unknown one is a :class:`ConfigError` listing the families and sizes."""
    if name not in SUITE:
        fams = ", ".join(f"{f.name}_n{{{','.join(map(str, f.ns))}}}" for f in FAMILIES.values())
        raise ConfigError("suite task", name, f"a suite task: {fams} (fleet-marl suite list)")
    return SUITE[name]


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ConfigError("split", split, f"one of {', '.join(map(repr, SPLITS))}")
    return split


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 1_000_000:
        raise ConfigError("seed", seed, "a scenario seed: an integer in [0, 1000000)")
    return int(seed)


def env_seed(seed: int, split: str = "train") -> int:
    """The seed to reset a scenario's env with: ``seed`` offset by its split's base (:data:`SPLITS`)."""
    return SPLITS[check_split(split)] + _seed(seed)


def scenario(name: str, seed: int, split: str = "train") -> dict:
    """The config dict (``FleetConfig`` fields; ``fleet_marl.parallel_env(config=...)``) of suite task
    ``name``'s scenario ``seed`` of ``split``: the same for the same arguments on every machine."""
    task, split, seed = suite_task(name), check_split(split), _seed(seed)
    key = [zlib.crc32(task.family.name.encode()), task.n, list(SPLITS).index(split), seed]
    return task.family.build(task.n, np.random.default_rng(key), split == "shift")


def scenarios(name: str, seeds, split: str = "train") -> list[tuple[int, dict]]:
    """``[(env_seed, config)]`` of scenarios ``seeds`` of ``split``: what a grader plays."""
    return [(env_seed(s, split), scenario(name, s, split)) for s in seeds]


__all__ = [
    "FAMILIES",
    "NS",
    "SPLITS",
    "SUITE",
    "TRAIN_SCENARIOS",
    "Family",
    "SuiteTask",
    "check_split",
    "env_seed",
    "scenario",
    "scenarios",
    "suite_task",
]

"""Named scenarios and the config builder behind ``fleet_marl.parallel_env(**config)``.

Every task is a :class:`~fleet_marl.config.FleetConfig`. ``make_config`` starts from one and
applies overrides of any field, so ``parallel_env(task="easy", reward_scheme="global",
cluster={"rack_power_cap_w": 9000})`` works, and an unknown field is a
:class:`~fleet_marl.config.ConfigError` that lists the valid ones.

=========  ========  ===================================================================
task       tenants   what it tests
=========  ========  ===================================================================
tiny       2         one node of 8 H100, two trainers of different priority; the one-round
                     optimum can be worked out by hand (``tests/test_env.py``)
easy       4         two H100 nodes, two trainers and two servers, Poisson arrivals,
                     generous budgets, max-min fair arbiter
medium     8         H100 and A100 nodes (the A100 has no FP8), training and serving mixed,
                     bursty arrivals, proportional-share arbiter (bids matter)
hard       16        four H100 nodes in one rack under a tight power cap, 45 C inlet air (heat binds),
                     correlated (adversarial) bursts, tight budgets, uniform-price auction
trace      6         arrivals replayed from real traces: Pollux/Philly jobs for the four
                     trainers, Azure LLM inference requests for the two servers
=========  ========  ===================================================================

``TASKS`` is the one registry of named scenarios (name, builder, one-line description); the
CLI, the baseline table, OpenEnv's task API and ``experiments/make_configs.py`` all read it.
A new task is one call of :func:`register_task`, in this file or in your own module.

``scaled(n)`` grows ``easy`` to ``n`` tenants on ``ceil(n / 2)`` nodes (the credit-assignment
study's scenarios): ``parallel_env(task="easy", **scaled(8))``.

The scenario numbers below (budgets, rates, job sizes, caps) are scenario choices, not
facts; the physical constants they sit on are cited in ``docs/model.md``. The design of each
task and the reasoning behind its numbers are in ``docs/environment.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet_marl.config import ConfigError, FleetConfig, from_dict
from fleet_marl.config.turn_orders import TURN_ORDERS as BUILTIN_TURN_ORDERS
from fleet_marl.config.turn_orders import turn_order as registered_turn_order

#: Options of the environment itself (not part of the scenario).
ENV_OPTIONS = ("obs_mode", "render_mode", "illegal_action", "mask_layout", "protocol", "turn_order")
#: How the tenants of one round act (the env option ``protocol``): ``"simultaneous"`` (the
#: default; every tenant decides blind, the ParallelEnv) or ``"sequential"`` (one at a time,
#: each seeing the claims made before its turn; the AEC env ``fleet_marl.env(protocol="sequential")``).
PROTOCOLS = ("simultaneous", "sequential")
#: The built-in orders of the tenants' turns within a round under the sequential protocol (the
#: env option ``turn_order``): ``fixed`` (tenant index), ``rotating`` (the first turn moves one
#: tenant on each round), ``random`` (a permutation per round from the env's seeded generator)
#: and ``priority`` (highest priority first, ties by index). They are the first rows of
#: :data:`fleet_marl.config.turn_orders.REGISTRY`; ``turn_order`` accepts any name registered there.
TURN_ORDERS = BUILTIN_TURN_ORDERS


def check_protocol(opts: dict) -> tuple[str, str]:
    """``(protocol, turn_order)`` of the env options ``opts``, checked: each one of
    :data:`PROTOCOLS` and the registered turn orders (defaults ``"simultaneous"`` and ``"fixed"``), and
    ``turn_order`` only with the sequential protocol. A bad value is a :class:`ConfigError`
    naming the option and the value."""
    protocol = opts.get("protocol", "simultaneous")
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ConfigError(
            "protocol",
            protocol,
            "'simultaneous' (every tenant decides blind; fleet_marl.parallel_env or fleet_marl.env) or "
            "'sequential' (one tenant at a time within a round; fleet_marl.env only)",
        )
    turn_order = opts.get("turn_order")
    if turn_order is not None:
        registered_turn_order(turn_order)  # a ConfigError listing the registered ones
    if turn_order is not None and protocol != "sequential":
        raise ConfigError(
            "turn_order",
            turn_order,
            "no turn_order with protocol='simultaneous' (every tenant acts at once); "
            "turns need fleet_marl.env(protocol='sequential', turn_order=...)",
        )
    return protocol, turn_order or "fixed"


def require_sequential(overrides: dict, owner: str, instead: str) -> str:
    """Pop ``protocol`` and ``turn_order`` from ``overrides`` (in place) for a class that plays
    only the sequential protocol, and return the checked ``turn_order``. ``protocol`` defaults to
    ``"sequential"``; any other value is a ``ValueError`` naming ``owner`` and what to use
    ``instead``; a bad value is :func:`check_protocol`'s ``ConfigError``."""
    opts = {k: overrides.pop(k) for k in ("protocol", "turn_order") if k in overrides}
    opts.setdefault("protocol", "sequential")
    protocol, turn_order = check_protocol(opts)
    if protocol != "sequential":
        raise ValueError(f"protocol = {protocol!r}: {owner} plays protocol='sequential'; {instead}")
    return turn_order


#: Shortcuts: a top-level keyword that sets a nested config field.
SHORTCUTS = {
    "reward_scheme": ("reward", "scheme"),
    "mixed_weight": ("reward", "mixed_weight"),
    "shapley_samples": ("reward", "shapley_samples"),
    "compute_all": ("reward", "compute_all"),
    "mechanism": ("arbiter", "mechanism"),
    "safety_mode": ("safety", "mode"),
}


def _tenant(kind, model, gpu, budget, max_gpus=8, priority=1.0, **wl) -> dict:
    return {
        "kind": kind,
        "model": model,
        "gpu_type": gpu,
        "budget": budget,
        "max_gpus": max_gpus,
        "priority": priority,
        "workload": wl,
    }


def _tiny() -> dict:
    # Two trainers of one small model on one 8-GPU node. Priority 2 vs 1 makes the one-round
    # optimum unique: every GPU to tenant_0 at the fastest safe precision (FP8 on the MLP only:
    # the attention GEMMs of a 896-wide model lose more to FP8's casts than they gain) and the
    # largest batch level that fits (8). Each budget ($23) is 1.75x the cost of
    # the whole node for the whole episode ($13.16 at $3.9492 per GPU-hour), so money never binds.
    wl = dict(seq_len=2048, job_tokens=2.0e8, rate=6.0)
    return {
        "cluster": {"gpu_types": ["h100-sxm"]},
        "tenants": [
            _tenant("train", "qwen2.5-0.5b", "h100-sxm", 23.0, priority=2.0, **wl),
            _tenant("train", "qwen2.5-0.5b", "h100-sxm", 23.0, priority=1.0, **wl),
        ],
        "arbiter": {"mechanism": "maxmin"},
        "safety": {"mode": "veto"},
        "max_cycles": 25,
    }


def _easy_tenants() -> list[dict]:
    return [
        _tenant("train", "qwen2.5-0.5b", "h100-sxm", 172.0, seq_len=2048, job_tokens=2.0e8, rate=6.0),
        _tenant("serve", "llama-3.1-8b", "h100-sxm", 172.0, rate=6.0, prompt_tokens=1024, output_tokens=256),
        _tenant("train", "qwen2.5-7b", "h100-sxm", 172.0, seq_len=2048, job_tokens=2.0e7, rate=6.0),
        _tenant("serve", "qwen2.5-7b", "h100-sxm", 172.0, rate=4.0, prompt_tokens=512, output_tokens=256),
    ]


def _easy() -> dict:
    # 16 H100s, demand 32: the arbiter matters, money hardly does.
    return {
        "cluster": {"gpu_types": ["h100-sxm", "h100-sxm"]},
        "tenants": _easy_tenants(),
        "arbiter": {"mechanism": "maxmin"},
        "max_cycles": 100,
    }


def _medium() -> dict:
    bursty = dict(pattern="bursty", burst_factor=4.0, burst_fraction=0.2, burst_rounds=3.0)
    h, a = "h100-sxm", "a100-80gb"
    return {
        "cluster": {"gpu_types": [h, h, a, a]},
        "tenants": [
            _tenant("train", "qwen2.5-0.5b", h, 57.0, seq_len=2048, job_tokens=2.0e8, rate=6.0, pattern="bursty"),
            _tenant("serve", "llama-3.1-8b", h, 57.0, rate=6.0, **bursty),
            _tenant("train", "qwen2.5-7b", h, 57.0, seq_len=2048, job_tokens=2.0e7, rate=6.0, priority=2.0),
            _tenant("serve", "mistral-7b", h, 57.0, rate=4.0, prompt_tokens=512, **bursty),
            _tenant("train", "gpt2", a, 44.0, seq_len=1024, job_tokens=2.0e8, rate=6.0, pattern="bursty"),
            _tenant("serve", "qwen2.5-7b", a, 44.0, rate=4.0, **bursty),
            _tenant("train", "qwen2.5-0.5b", a, 44.0, seq_len=2048, job_tokens=1.0e8, rate=6.0),
            _tenant("serve", "qwen2.5-0.5b", a, 44.0, rate=10.0, prompt_tokens=512, output_tokens=128, priority=2.0, **bursty),
        ],
        "arbiter": {"mechanism": "proportional"},
        "max_cycles": 100,
    }


def _hard() -> dict:
    # One rack of four H100 nodes: 32 x 700 W = 22.4 kW at TDP against a 15 kW cap, in a hall
    # whose cooling has degraded: inlet air at 45 C (the top of ASHRAE class A4's allowable
    # range) leaves 42 C to the 87 C throttle point, less than the 47 C a node's hottest
    # air-cooled GPU rises at TDP (docs/model.md section 6), so a node loaded past 89 % of its TDP
    # throttles. All servers burst together.
    # A $34 budget buys 2.6x its 2-GPU fair share for the episode at list price (2 x 100
    # rounds x $3.9492/h / 60 = $13.16); 8 GPUs at twice list price spend it in 32 rounds.
    # hoard_share 0.2 of the 32-GPU pool: holding 7 or 8 GPUs while another starves.
    h = "h100-sxm"
    storm = dict(pattern="bursty", burst_factor=8.0, burst_fraction=0.15, burst_rounds=4.0, burst_shared=True)
    trainers = [("gpt2", 4.0e8), ("qwen2.5-0.5b", 1.0e8), ("qwen2.5-7b", 1.0e7), ("llama-3.1-8b", 1.0e7)]
    servers = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b"]
    tenants = []
    for i in range(16):
        if i % 2 == 0:
            m, tokens = trainers[(i // 2) % 4]
            seq = 1024 if m == "gpt2" else 2048
            t = _tenant("train", m, h, 34.0, seq_len=seq, job_tokens=tokens, rate=6.0, priority=1.0 + (i % 3 == 0))
            t["activation_checkpointing"] = m in ("qwen2.5-7b", "llama-3.1-8b")  # else they need 4+ GPUs
            tenants.append(t)
        else:
            m = servers[(i // 2) % 4]
            tenants.append(
                _tenant("serve", m, h, 34.0, rate=3.0, prompt_tokens=1024, output_tokens=256, priority=1.0 + (i % 4 == 1), **storm)
            )
    return {
        "cluster": {"gpu_types": [h] * 4, "nodes_per_rack": 4, "rack_power_cap_w": 15_000.0, "ambient_c": 45.0},
        "tenants": tenants,
        "arbiter": {"mechanism": "auction", "reserve_price": 0.75},
        "fairness": {"hoard_share": 0.2},
        "max_cycles": 100,
    }


def _trace_config(jobs: dict, reqs: dict) -> dict:
    """The trace tasks' scenario: 2 H100 and 2 A100 nodes under max-min, four trainers replaying
    the job trace ``jobs`` (one shard each) and two servers replaying the request trace ``reqs``."""
    h, a = "h100-sxm", "a100-80gb"
    return {
        "cluster": {"gpu_types": [h, h, a, a]},
        "tenants": [
            _tenant("train", "qwen2.5-0.5b", h, 144.0, job_tokens=1.0e8, trace_shard=0, **jobs),
            _tenant("train", "gpt2", a, 109.0, job_tokens=2.0e8, trace_shard=1, **{**jobs, "seq_len": 1024}),
            _tenant("train", "qwen2.5-0.5b", a, 109.0, job_tokens=1.0e8, trace_shard=2, **jobs),
            _tenant("train", "qwen2.5-7b", h, 144.0, job_tokens=2.0e7, trace_shard=3, **jobs),
            _tenant("serve", "llama-3.1-8b", h, 144.0, trace_shard=0, **reqs),
            _tenant("serve", "qwen2.5-7b", a, 109.0, trace_shard=1, **reqs),
        ],
        "arbiter": {"mechanism": "maxmin"},
        "max_cycles": 100,
    }


def _trace() -> dict:
    # Pollux workload 1 (160 jobs over 7.7 h) replayed 4.6x faster so it spans the 100-round
    # episode, dealt round-robin to four trainers; the Azure conversation trace (19,366
    # requests in one hour) split between two servers. Prompt and output lengths are the
    # trace's means (fleet_marl.workloads.trace_stats; checked by tests/test_workloads.py).
    jobs = dict(pattern="trace", trace="pollux_workload-1.csv", trace_speedup=4.6, trace_shards=4, seq_len=2048)
    # rate: the trace's 5.53 requests/s split in two, the denominator of a server's value
    reqs = dict(
        pattern="trace", trace="azure_llm_inference_conv_2023.csv", trace_shards=2, rate=2.77, prompt_tokens=1155, output_tokens=211
    )
    return _trace_config(jobs, reqs)


def _trace_code() -> dict:
    # The trace task's cluster and arbiter with another pair of traces: Pollux workload 2 (160
    # jobs over 7.5 h) replayed 4.52x faster, and the first 30 minutes of Azure's 2023 *code*
    # trace (5,740 requests, long prompts and short outputs: means of 2,028 and 27 tokens)
    # stretched 3.3x (trace_speedup 0.3) over the 100 rounds and split between two servers.
    # Each round is priced at its own requests' lengths, so serving is prefill-bound here.
    jobs = dict(pattern="trace", trace="pollux_workload-2.csv", trace_speedup=4.52, trace_shards=4, seq_len=2048)
    # rate: the sample's 3.21 requests/s x 0.3, split in two (the scale of a server's value and queue features)
    reqs = dict(
        pattern="trace",
        trace="azure_llm_inference_code_2023_first30min.csv",
        trace_speedup=0.3,
        trace_shards=2,
        rate=0.48,
        prompt_tokens=2028,
        output_tokens=27,
    )
    return _trace_config(jobs, reqs)


def scaled(n: int, mechanism: str = "proportional") -> dict:
    """Overrides of task ``easy`` that give it ``n`` tenants and a cluster that grows with them.

    ``parallel_env(task="easy", **scaled(8))``. The tenants cycle through easy's four (a small
    trainer, an 8B server, a 7B trainer, a 7B server), and the cluster has ``ceil(n / 2)``
    H100 nodes: 4 GPUs per tenant against requests of up to 8, so demand is about twice the
    supply at every ``n``, as in ``easy``. Racks hold 2 nodes (16 x 700 W = 11.2 kW at TDP
    against the 16 kW cap), so, as in ``easy``, the power cap never binds at any ``n``: with
    racks of 4 it would bind from ``n = 8`` on and the scenarios would differ by more than
    ``n``. ``mechanism`` is the arbiter's; the credit-assignment study uses ``proportional``, where
    a tenant's bid takes GPUs from the others (under ``maxmin`` nobody's request can push
    another below its max-min share, so there is little externality for credit to assign).
    ``scaled(4, "maxmin")`` is ``easy`` itself (one rack of two nodes either way).
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 256:
        raise ConfigError("n", n, "an integer number of tenants in [1, 256]")
    base = _easy_tenants()
    return {
        "cluster": {"gpu_types": ["h100-sxm"] * -(-n // 2), "nodes_per_rack": 2},
        "tenants": [copy.deepcopy(base[i % len(base)]) for i in range(n)],
        "arbiter": {"mechanism": mechanism},
    }


@dataclass(frozen=True)
class Task:
    """A named scenario: ``builder()`` returns its plain-dict config (``FleetConfig`` fields)."""

    name: str
    builder: Callable[[], dict]
    description: str  # one line, shown by the CLI and OpenEnv's task API


#: The one registry of named scenarios, in the order the CLI, the baseline table and OpenEnv's
#: task API list them. Every place that lists tasks reads it; add one with :func:`register_task`.
TASKS: dict[str, Task] = {}


def register_task(name: str, builder: Callable[[], dict], description: str) -> Task:
    """Add a named scenario (from any module: ``parallel_env(task=name)``, ``fleet-marl evaluate
    --task name``, the baseline table and OpenEnv's task list pick it up). Replacing a name
    already registered is an error."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError("task", name, "a task name that is a Python identifier (letters, digits, _)")
    if name in TASKS:
        raise ConfigError("task", name, f"a new task name; {name!r} is already registered")
    if not callable(builder):
        raise ConfigError(f"task {name}: builder", builder, "a function returning the config dict")
    TASKS[name] = task = Task(name, builder, str(description))
    return task


register_task("tiny", _tiny, "2 trainers on one 8-GPU H100 node; the one-round optimum is known")
register_task("easy", _easy, "2 trainers and 2 servers on two H100 nodes, Poisson arrivals, max-min fair arbiter")
register_task("medium", _medium, "8 tenants on H100 and A100 nodes, bursty arrivals, proportional-share arbiter")
register_task(
    "hard",
    _hard,
    "16 tenants, four H100 nodes under a tight power cap in a 45 C hall (heat binds), correlated bursts, uniform-price auction",
)
register_task("trace", _trace, "6 tenants replaying Pollux jobs and Azure LLM inference requests")
register_task(
    "trace_code",
    _trace_code,
    "the trace task's cluster replaying Pollux workload 2 and Azure's 2023 code requests (long prompts, short outputs)",
)


def task_dict(name: str) -> dict:
    """The plain-dict config of task ``name`` (a fresh copy, safe to edit)."""
    if name not in TASKS:
        raise ConfigError("task", name, f"one of {', '.join(map(repr, TASKS))}")
    return copy.deepcopy(TASKS[name].builder())


def _merge(base: dict, over: dict, path: str) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v, f"{path}{k}.")
        else:
            out[k] = v
    return out


def unknown_option(name: Any, value: Any) -> ConfigError:
    """The error of an override ``name`` that :func:`make_config` does not take."""
    valid = sorted(set(FleetConfig.__dataclass_fields__) | set(SHORTCUTS) | set(ENV_OPTIONS) | {"task", "config"})
    return ConfigError(str(name), value, f"a known option (valid: {', '.join(valid)})")


def is_option(name: Any) -> bool:
    """Whether :func:`make_config` takes ``name`` as an override (a field, a shortcut or an env option)."""
    return name in FleetConfig.__dataclass_fields__ or name in SHORTCUTS or name in ENV_OPTIONS or name == "backend"


def make_config(task: str | None = None, config: FleetConfig | dict | None = None, **overrides: Any) -> tuple[FleetConfig, dict]:
    """Build ``(FleetConfig, env_options)`` from a task name, or a full ``config``, plus overrides.

    Overrides are any top-level FleetConfig field (``cluster``, ``tenants``, ``arbiter``,
    ``safety``, ``reward``, ``fairness``, ``max_cycles``); dicts merge into the
    task's dicts, lists replace. Old fairness keys under ``reward`` move to ``fairness`` first
    (with a ``DeprecationWarning``). Shortcuts set one nested field: ``reward_scheme``, ``mixed_weight``,
    ``shapley_samples``, ``compute_all``, ``mechanism``, ``safety_mode``. Environment options
    (``obs_mode``, ``render_mode``, ``illegal_action``, ``mask_layout``, ``protocol``, ``turn_order``)
    are returned separately (:func:`check_protocol` checks the last two).
    """
    env_opts = {k: overrides.pop(k) for k in ENV_OPTIONS if k in overrides}
    if config is not None and task is not None:
        raise ConfigError("task", task, "no task when a full config is given (pass one or the other)")
    if config is not None:
        base = config.to_dict() if isinstance(config, FleetConfig) else copy.deepcopy(dict(config))
    else:
        base = task_dict("easy" if task is None else task)
    fields_ = set(FleetConfig.__dataclass_fields__)
    nested: dict = {}
    for k, v in overrides.items():
        if k in SHORTCUTS:
            top, sub = SHORTCUTS[k]
            nested.setdefault(top, {})[sub] = v
        elif k in fields_ or k == "backend":  # backend: fleet_marl 0.2's, dropped by migrate with a warning
            v = copy.deepcopy(v)  # never write into the caller's dicts
            if isinstance(v, dict) and isinstance(nested.get(k), dict):
                nested[k] = _merge(nested[k], v, f"{k}.")
            else:
                nested[k] = v
        else:
            raise unknown_option(k, v)
    # old reward.<fairness knob> overrides move to fairness first (with their deprecation
    # warning), so they override the task's fairness section instead of clashing with it
    merged = _merge(base, FleetConfig.migrate(nested), "")
    return from_dict(FleetConfig, merged), env_opts


__all__ = [
    "ENV_OPTIONS",
    "PROTOCOLS",
    "SHORTCUTS",
    "TASKS",
    "TURN_ORDERS",
    "Task",
    "check_protocol",
    "is_option",
    "make_config",
    "register_task",
    "require_sequential",
    "scaled",
    "task_dict",
    "unknown_option",
]

"""What the ego tenant of the OpenEnv single-tenant view (:mod:`fleet_marl.openenv.ego`) is
told each round: :func:`describe` reads its structured view (tenant, cluster, legal choices)
off the env's public members, and :func:`render_prompt` writes the prompt text from that view
alone (the same view, the same text). docs/llm_agents.md shows a prompt.
"""

from __future__ import annotations

import json

import numpy as np

from fleet_marl import catalog
from fleet_marl.environment import OBS_FIELDS, FleetParallelEnv
from fleet_marl.environment.observations import unsquash
from fleet_marl.openenv.text_action import BATCH_SIZES, GROUP_KEYS, MAX_CHARS, bid_names, from_indices

_O = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}


def _r(x: float, nd: int = 3) -> float:
    return float(round(float(x), nd))


def describe(env: FleetParallelEnv, ego: str, obs, info: dict, turn: dict | None = None) -> tuple[dict, dict, dict]:
    """The structured view of ``ego``: (tenant, cluster, legal choices), from the env's public
    members (``kernel_static``, ``config``, ``last_outcome``, ``action_mask``) and the ego's
    observation and info; ``turn`` (the sequential protocol: its place in the round's order and
    the claims before it) goes into ``cluster["turn"]``."""
    st, cfg = env.kernel_static, env.config
    i = env.agent_index[ego]
    spec = cfg.tenants[i]
    o = env.last_outcome
    x = np.asarray(obs if obs is not None else np.zeros(len(OBS_FIELDS)), np.float64)
    hours = st.round_seconds / 3600.0
    train = bool(st.is_train[i])
    max_g = int(st.max_gpus[i])
    tenant: dict = {
        "agent": ego,
        "kind": "train" if train else "serve",
        "model": spec.model,
        "parameters_billion": _r(st.params[i].sum() / 1e9, 3),
        "gpu_type": spec.gpu_type,
        "priority": float(st.priority[i]),
        "max_gpus": max_g,
        "budget_usd": _r(st.budget[i], 2),
        "budget_left_usd": _r(o.budget_next[i] if o is not None else st.budget[i], 2),
        "list_price_usd_per_gpu_hour": _r(st.list_price[i], 2),
        "cost_of_max_gpus_per_round_usd": _r(max_g * st.list_price[i] * hours, 3),
        "held_gpus": round(float(x[_O["held"]] * max_g)),
        "fair_share_gpus": _r(x[_O["fair_share"]] * max_g, 2),
        "starvation_streak": int(info.get("starvation_streak", 0)),
    }
    if train:
        tenant["workload"] = {
            "job_tokens": float(st.job_tokens[i]),
            "seq_len": int(st.seq_len[i]),
            "job_tokens_left": _r(x[_O["job_left"]] * st.job_tokens[i] if obs is not None else st.job_tokens[i], 0),  # 0 between jobs
            "jobs_waiting": round(float(unsquash(x[_O["jobs_waiting"]]))),  # the env's inverse of its squash
        }
    else:
        tenant["workload"] = {
            "requests_per_s": _r(st.arrival_rate[i], 3),
            "prompt_tokens": int(st.prompt_tokens[i]),
            "output_tokens": int(st.output_tokens[i]),
            "slo_ttft_s": float(st.slo_ttft_s[i]),
            "slo_tpot_s": float(st.slo_tpot_s[i]),
            "queue_requests": _r(o.queue_next[i] if o is not None else 0.0, 1),
        }
    if o is not None:
        tenant["last_round"] = {
            "requested_gpus": int(o.requested[i]),
            "granted_gpus": int(o.alloc[i]),
            "price_usd_per_gpu_hour": _r(o.price[i], 3),
            "spend_usd": _r(o.spend[i], 3),
            "utility": _r(o.utility[i], 4),
            "oom": bool(o.oom[i]),
            "vetoed": bool(o.vetoed[i]),
            "unsafe_numerics": bool(o.unsafe_numerics[i]),
            "projected": bool(o.projected[i]),
            "throttle": _r(o.throttle[i], 3),
            "restarted": bool(o.restarted[i]),
            "memory_used": _r(o.mem_total[i] / o.mem_capacity[i], 3) if o.alloc[i] > 0 else 0.0,
            "tokens_per_s": _r(o.tokens_per_s[i], 1),
            "run": from_indices(_run_indices(env, o, i), env.bid_levels).to_dict()["precision"] if o.alloc[i] > 0 else None,
        }
        if not train:
            tenant["last_round"]["slo_attainment"] = _r(o.slo_attainment[i], 3)
    pool = int(st.pool[i])
    same = np.flatnonzero(st.pool == pool)
    cap = int(st.pool_capacity[pool])
    cluster: dict = {
        "round": env.round,
        "max_rounds": env.max_cycles,
        "mechanism": cfg.arbiter.mechanism,
        # how the arbiter clears and what a served tenant pays, from the mechanism registry
        "mechanism_rules": st.mechanism.summary(st.reserve_price),
        "pays": st.mechanism.pays,
        "reserve_price": float(st.reserve_price) if st.mechanism.reserve else None,
        "safety_mode": cfg.safety.mode,
        "gpu_type": spec.gpu_type,
        "pool_capacity_gpus": cap,
        "tenants_on_pool": int(same.size),
        "live_tenants": len(env.agents),
        "tenants": len(env.possible_agents),
        "throttle_temp_c": float(cfg.cluster.throttle_temp_c),
        "rack_power_cap_w": float(cfg.cluster.rack_power_cap_w),
    }
    if o is not None:
        cluster["pool_granted_gpus"] = int(o.alloc[same].sum())
        cluster["pool_requested_gpus"] = int(o.requested[same].sum())
        nodes = np.flatnonzero(np.asarray(st.node_pool) == pool)
        cluster["hottest_node_c"] = _r(np.max(o.temp_next[nodes]), 1)
        cluster["max_rack_power_w"] = _r(np.max(o.rack_power_w), 0)
    others = []
    for j, a in enumerate(env.possible_agents):
        if j == i:
            continue
        t = cfg.tenants[j]
        row = {"agent": a, "kind": t.kind, "model": t.model, "gpu_type": t.gpu_type, "live": a in env.agents}
        if o is not None:
            row["granted_gpus"] = int(o.alloc[j])
        others.append(row)
    cluster["others"] = others
    if turn is not None:
        cluster["turn"] = turn
    mask = env.action_mask(ego)
    gm = np.asarray(mask[0])
    legal = {
        "max_affordable_gpus": int(np.flatnonzero(gm)[-1]) if gm.any() else 0,
        "bids": list(bid_names(env.bid_levels)),
        "bid_multipliers": [float(b) for b in env.bid_levels],
        # the bids below this one ask for nothing (a reserve price); a served tenant pays at most price_at_most x list price
        "lowest_winning_bid": bid_names(env.bid_levels)[st.mechanism.lowest_winning_level(env.bid_levels, st.reserve_price)],
        "most_paid_multipliers": [st.mechanism.price_at_most(float(b)) for b in env.bid_levels],
        "batches": list(BATCH_SIZES),
        "precisions": [catalog.PRECISIONS[p] for p in np.flatnonzero(np.asarray(mask[2]))],
        "unsafe": {k: [catalog.PRECISIONS[p] for p in np.flatnonzero(catalog.UNSAFE[g])] for g, k in enumerate(GROUP_KEYS)},
    }
    return tenant, cluster, legal


def _run_indices(env, o, i) -> np.ndarray:
    idx = np.zeros(8, np.int64)
    idx[2:7] = o.precision[i]
    idx[-1] = int(np.searchsorted(np.asarray(BATCH_SIZES), max(int(o.batch[i]), 1)))
    idx[-1] = min(idx[-1], len(BATCH_SIZES) - 1)
    return idx


def render_prompt(tenant: dict, cluster: dict, legal: dict, schema: dict, last_action: dict | None, error: str | None) -> str:
    """The prompt text: a pure function of the structured view (the same view, the same text)."""
    t, c, w = tenant, cluster, tenant["workload"]
    lines = [
        f"You are {t['agent']}, a team sharing a GPU cluster with {c['tenants'] - 1} other teams. "
        f"Round {c['round'] + 1} of {c['max_rounds']}. Each round you ask for GPUs, bid for them, and choose how to run your model.",
        "",
        "## Your workload and budget",
    ]
    if t["kind"] == "train":
        lines.append(f"- Training {t['model']} ({t['parameters_billion']}B parameters) on {t['gpu_type']}; sequence length {w['seq_len']}.")
        lines.append(f"- Current job: {w['job_tokens_left']:.0f} of {w['job_tokens']:.0f} tokens left; {w['jobs_waiting']} job(s) waiting.")
    else:
        lines.append(
            f"- Serving {t['model']} ({t['parameters_billion']}B parameters) on {t['gpu_type']}: "
            f"{w['requests_per_s']} requests/s of {w['prompt_tokens']} prompt + {w['output_tokens']} output tokens."
        )
        lines.append(
            f"- SLO: time to first token <= {w['slo_ttft_s']} s, time per output token <= {w['slo_tpot_s']} s; "
            f"{w['queue_requests']:.0f} request(s) queued."
        )
    lines.append(
        f"- Budget: ${t['budget_left_usd']:.2f} left of ${t['budget_usd']:.2f}. List price ${t['list_price_usd_per_gpu_hour']:.2f} per GPU-hour; "
        f"{t['max_gpus']} GPUs for one round cost ${t['cost_of_max_gpus_per_round_usd']:.3f} at list price."
    )
    lines.append(f"- Priority {t['priority']:g}; at most {t['max_gpus']} GPUs.")
    lines += ["", "## What you hold"]
    lines.append(
        f"- {t['held_gpus']} GPU(s) held; your fair share is about {t['fair_share_gpus']:g}; starved for {t['starvation_streak']} round(s) in a row."
    )
    lr = t.get("last_round")
    if lr:
        flags = [k for k in ("oom", "vetoed", "unsafe_numerics", "projected", "restarted") if lr[k]]
        lines.append(
            f"- Last round: asked {lr['requested_gpus']}, granted {lr['granted_gpus']} at ${lr['price_usd_per_gpu_hour']:.3f}/GPU-hour "
            f"(spent ${lr['spend_usd']:.3f}); utility {lr['utility']:+.4f}; throughput {lr['tokens_per_s']:.1f} tokens/s; "
            f"memory {lr['memory_used'] * 100:.0f}% used; clock x{lr['throttle']:.2f}."
        )
        if "slo_attainment" in lr:
            lines.append(f"- SLO attainment last round: {lr['slo_attainment'] * 100:.1f}%.")
        lines.append(f"- Events last round: {', '.join(flags) if flags else 'none'}.")
    else:
        lines.append("- Nothing yet: this is the first round.")
    if last_action is not None:
        lines.append(f"- Your last action: {json.dumps(last_action, sort_keys=False)}")
    if error:
        lines.append(f"- Your last answer was rejected ({error}); the fallback action ran instead.")
    lines += ["", "## The cluster"]
    lines.append(
        f"- {c['pool_capacity_gpus']} {c['gpu_type']} GPUs shared by {c['tenants_on_pool']} tenant(s); "
        f"safety: {c['safety_mode']}; {c['live_tenants']} of {c['tenants']} tenants still running."
    )
    lines.append(f"- Arbiter: {c['mechanism_rules']}")
    if "pool_granted_gpus" in c:
        lines.append(
            f"- Last round the pool granted {c['pool_granted_gpus']} GPUs of {c['pool_requested_gpus']} requested; "
            f"hottest node {c['hottest_node_c']:.1f} C (throttles at {c['throttle_temp_c']:g} C); "
            f"highest rack power {c['max_rack_power_w']:.0f} W of {c['rack_power_cap_w']:.0f} W."
        )
    for r in c["others"]:
        held = f", granted {r['granted_gpus']} GPUs last round" if "granted_gpus" in r else ""
        lines.append(f"- {r['agent']}: {r['kind']} {r['model']} on {r['gpu_type']}{held}{'' if r['live'] else ' (finished)'}.")
    turn = c.get("turn")
    if turn is not None:
        lines += ["", "## This round's claims so far"]
        lines.append(
            f"- The teams claim one at a time this round ({turn['turn_order']} order); you claim {turn['position']} of {turn['turns']}, "
            "and the round clears after the last claim."
        )
        for cl in turn["claims_before"]:
            lines.append(f"- {cl['agent']} asked for {cl['gpus']} {cl['gpu_type']} GPU(s) at x{cl['bid']:g} list price.")
        if not turn["claims_before"]:
            lines.append("- Nobody has claimed yet: you are first.")
        lines.append(f"- Still to claim after you: {', '.join(turn['after']) if turn['after'] else 'nobody'}.")
    lines += ["", "## Your choices"]
    lines.append(f"- request_gpus: 0 to {legal['max_affordable_gpus']} (your budget pays for no more).")
    lines.append(
        "- bid: "
        + ", ".join(
            f"{n} (x{b:g}; a GPU costs at most x{p:g} list price)"
            for n, b, p in zip(legal["bids"], legal["bid_multipliers"], legal["most_paid_multipliers"], strict=True)
        )
        + (f"; bids below {legal['lowest_winning_bid']} get nothing." if c["reserve_price"] is not None else ".")
    )
    lines.append(
        f"- batch: one of {', '.join(map(str, legal['batches']))} ({'sequences per GPU per step' if t['kind'] == 'train' else 'concurrent sequences'})."
    )
    lines.append(
        f"- precision per layer group ({', '.join(GROUP_KEYS)}): {', '.join(legal['precisions'])}. "
        "Numerically unsafe: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in legal["unsafe"].items() if v) + "."
    )
    lines += [
        "",
        "## Answer",
        f"Reply with one JSON object (at most {MAX_CHARS} characters) that follows this JSON Schema:",
        json.dumps(schema, sort_keys=True),
        'Example: {"request_gpus": 2, "bid": "list", "batch": 8, "precision": {"embed": "bf16", "attn": "bf16", "mlp": "bf16", "norm": "bf16", "head": "bf16"}}',
    ]
    return "\n".join(lines)


__all__ = ["describe", "render_prompt"]

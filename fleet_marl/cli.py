"""The ``fleet-marl`` command.

Subcommands:

``estimate``  memory per GPU, fit and throughput of one model on one GPU type, in the spirit
              of ``accelerate estimate-memory``.
``sweep``     a batched-kernel search over precision maps, batch sizes and GPU counts for
              catalog models on catalog GPUs; prints the best safe configuration of each and
              writes a CSV and a plot.
``train``     PPO tenants with RLlib, the main job (``make train``; ``fleet_marl.rllib``,
              docs/training.md).
``compare``   the credit-assignment study: PPO under every reward scheme for N = 2..16
              tenants (``fleet_marl.rllib.compare``; docs/credit_assignment.md).
``evaluate``  run a policy (a reference one, ``module:Class`` or a ``.py`` file) for K seeds
              and grade it against ``random`` and ``planner`` (``fleet_marl.grader``).
``baselines`` every reference policy on every task: the table in README and docs/results.md.
``demo``      one rendered episode (``easy`` with ``precision_expert``), optionally a GIF.
``serve``     the OpenEnv server for LLM agents (``fleet_marl.serve``; docs/llm_agents.md).
``bench``     speed and memory: env steps, the batched kernel, overheads, a reference env
              (``fleet_marl.bench``; docs/benchmarks.md).

Run ``fleet-marl <subcommand> --help`` for the options and examples.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import CatalogError

#: The task names (kept here so that ``estimate`` and ``sweep`` do not import the env).
TASKS = ("tiny", "easy", "medium", "hard", "trace")

EXAMPLES = {
    "estimate": """examples:
  fleet-marl estimate --model llama-3.1-8b --mode train --gpus 8 --gpu-type h100-sxm --batch-size 2 --seq-len 4096
  fleet-marl estimate --model llama-3.1-70b --mode serve --precision int4 --gpus 2 --gpu-type a100-80gb --batch-size 32
  fleet-marl estimate --model mistral-7b --mode train --precision embedding=bf16,attention=fp8,mlp=fp8,norm=bf16,head=bf16 --json
""",
    "sweep": """examples:
  fleet-marl sweep                                   # every catalog model on every GPU type, training
  fleet-marl sweep --mode serve --models llama-3.1-8b,qwen2.5-14b --gpu-types h100-sxm,l40s
  fleet-marl sweep --quick --out runs/sweep
""",
    "evaluate": """examples:
  fleet-marl evaluate --task easy --policy precision_expert --episodes 10 --seed 0
  fleet-marl evaluate --task medium --policy my_policy.py --episodes 5 --json
  fleet-marl evaluate --task hard --policy mypackage.policies:MyPolicy

--policy takes a reference policy (random, greedy, fair_share, precision_expert, bidder,
planner), 'package.module:Name', or a path to a .py file ('my_policy.py' or
'my_policy.py:Name'). Name is a class or a function, called with the env; a file without
':Name' must define make_policy(env) or exactly one class with reset() and act().
score = (welfare - random's) / (planner's - random's), clipped to [0, 1], on the same seeds.
""",
    "baselines": """examples:
  fleet-marl baselines                          # 10 seeds, every task and policy; updates README.md and docs/results.md
  fleet-marl baselines --tasks tiny,easy --episodes 3  # a partial run prints the table and writes nothing (--write to force)
""",
    "demo": """examples:
  fleet-marl demo                               # easy, precision_expert, seed 0
  fleet-marl demo --gif runs/demo.gif --every 10
  fleet-marl demo --task medium --policy planner --delay 0.2
""",
}


class CLIError(Exception):
    """A user error: printed as 'error: ...' with exit code 2."""


def parse_precision(text: str) -> dict[str, str]:
    """'bf16' -> the same for every group; 'embedding=bf16,mlp=fp8,...' -> per group
    (groups not named default to bf16)."""
    text = text.strip().lower()
    if "=" not in text:
        if text not in catalog.PRECISION_CODE:
            raise CLIError(f"--precision {text!r}: expected one of {', '.join(catalog.PRECISIONS)} or group=precision pairs")
        return {g: text for g in catalog.GROUPS}
    out = {g: "bf16" for g in catalog.GROUPS}
    for part in text.split(","):
        if "=" not in part:
            raise CLIError(f"--precision part {part!r}: expected group=precision, e.g. mlp=fp8")
        g, p = (s.strip() for s in part.split("=", 1))
        if g not in out:
            raise CLIError(f"--precision group {g!r}: expected one of {', '.join(catalog.GROUPS)}")
        if p not in catalog.PRECISION_CODE:
            raise CLIError(f"--precision {g}={p!r}: expected one of {', '.join(catalog.PRECISIONS)}")
        out[g] = p
    return out


def _single_tenant_static(model: str, gpu_type: str, mode: str, gpus: int, gpus_per_node: int, seq_len: int, output_tokens: int, checkpointing: bool = False):
    from fleet_marl.config import ArbiterSpec, ClusterSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
    from fleet_marl.kernel import KernelStatic

    m = catalog.model(model)
    catalog.gpu(gpu_type)
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    if mode == "train":
        wl = WorkloadSpec(seq_len=min(seq_len, m.max_seq))
    else:
        wl = WorkloadSpec(prompt_tokens=seq_len, output_tokens=output_tokens, rate=1.0)
    cfg = FleetConfig(
        cluster=ClusterSpec(gpu_types=(gpu_type,) * nodes, gpus_per_node=gpus_per_node, rack_power_cap_w=1e12),
        tenants=(
            TenantSpec(
                kind=mode,
                model=model,
                gpu_type=gpu_type,
                max_gpus=nodes * gpus_per_node,
                budget=1e12,
                activation_checkpointing=checkpointing and mode == "train",
                workload=wl,
            ),
        ),
        arbiter=ArbiterSpec(mechanism="maxmin"),
        safety=SafetySpec(mode="veto"),
    )
    return KernelStatic.from_config(cfg)


def estimate(args) -> dict:
    """The ``estimate`` report as a dict."""
    from fleet_marl.kernel import cost
    from fleet_marl.kernel.safety import explain_invalid, invalid_precision

    if args.gpus < 1:
        raise CLIError(f"--gpus {args.gpus}: expected an integer >= 1")
    if args.batch_size < 1:
        raise CLIError(f"--batch-size {args.batch_size}: expected an integer >= 1")
    if args.seq_len < 1:
        raise CLIError(f"--seq-len {args.seq_len}: expected an integer >= 1")
    m = catalog.model(args.model)
    g = catalog.gpu(args.gpu_type)
    if args.mode == "train" and args.seq_len > m.max_seq:
        raise CLIError(f"--seq-len {args.seq_len}: {args.model} has a context of {m.max_seq} tokens")
    if args.mode == "serve" and args.seq_len + args.output_tokens > m.max_seq:
        raise CLIError(f"--seq-len + --output-tokens = {args.seq_len + args.output_tokens}: {args.model} has a context of {m.max_seq} tokens")
    prec_map = parse_precision(args.precision)
    st = _single_tenant_static(args.model, args.gpu_type, args.mode, args.gpus, args.gpus_per_node, args.seq_len, args.output_tokens, args.activation_checkpointing)
    prec = np.array([[[catalog.PRECISION_CODE[prec_map[gr]] for gr in catalog.GROUPS]]], np.int64)
    if invalid_precision(st, prec).any():
        msg = explain_invalid(st, prec)
        raise CLIError(msg.split(": ", 1)[1] if ": " in msg else msg)
    terms = cost.tenant_terms(st, prec, project=False)
    n = np.array([[args.gpus]])
    b = np.array([[args.batch_size]])
    nodes = np.array([[math.ceil(args.gpus / args.gpus_per_node)]])
    mem = cost.memory_per_gpu(terms, n, b)
    thr = cost.throughput(st, terms, n, b, nodes)
    cap = float(g.memory_gb * 1e9)
    usable = float(st.mem_bytes[0])
    fit_b = int(max(cost.largest_fitting_batch(terms, n, st.mem_bytes)[0, 0], 0))
    comp = {
        "weights": mem.weights,
        "gradients": mem.grads,
        "master_fp32": mem.master,
        "optimizer": mem.optimizer,
        "activations": mem.activations,
        "kv_cache": mem.kv_cache,
    }
    comp = {k: float(v[0, 0]) for k, v in comp.items() if args.mode == "train" or k in ("weights", "kv_cache")}
    comp["total"] = float(mem.total[0, 0])
    unsafe = [gr for gr, code in zip(catalog.GROUPS, prec[0, 0]) if catalog.UNSAFE[catalog.GROUPS.index(gr), code]]
    out = {
        "model": args.model,
        "mode": args.mode,
        "params": m.total_params,
        "params_by_group": m.params_by_group,
        "gpu_type": args.gpu_type,
        "gpus": args.gpus,
        "nodes": int(nodes[0, 0]),
        "precision": prec_map,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "activation_checkpointing": bool(args.activation_checkpointing and args.mode == "train"),
        "bytes_per_gpu": comp,
        "gpu_memory_bytes": cap,
        "usable_bytes_per_gpu": usable,
        "fits": bool(mem.total[0, 0] <= usable),
        "max_batch_that_fits": fit_b,
        "tokens_per_s": float(thr.tokens_per_s[0, 0]),
        "multi_gpu_efficiency": float(thr.efficiency[0, 0]),
        "numerically_safe": not unsafe,
        "unsafe_groups": unsafe,
    }
    if args.mode == "serve":
        kv_b = float(cost.KV_BYTES[prec[0, 0, catalog.GROUPS.index("attention")]])
        out["output_tokens"] = args.output_tokens
        out["kv_bytes_per_token"] = m.kv_bytes_per_token(kv_b)
        out["requests_per_s"] = float(thr.work_rate[0, 0])
        out["ttft_s"] = float(thr.ttft_s[0, 0])
        out["tpot_s"] = float(thr.tpot_s[0, 0])
    return out


def _gb(x: float) -> str:
    return f"{x / 1e9:9.2f} GB"


def print_estimate(r: dict) -> None:
    print(f"{r['model']} ({r['params'] / 1e9:.2f} B params), {r['mode']}, {r['gpus']} x {r['gpu_type']} on {r['nodes']} node(s)")
    prec = r["precision"]
    print("precision: " + ", ".join(f"{g}={p}" for g, p in prec.items()) + f"; batch {r['batch_size']}, seq {r['seq_len']}")
    print("\nmemory per GPU")
    for k, v in r["bytes_per_gpu"].items():
        if k != "total":
            print(f"  {k:<13}{_gb(v)}")
    print(f"  {'total':<13}{_gb(r['bytes_per_gpu']['total'])}   of {_gb(r['usable_bytes_per_gpu']).strip()} usable ({r['gpu_memory_bytes'] / 1e9:.0f} GB x 0.9)")
    verdict = "fits" if r["fits"] else "DOES NOT FIT (out of memory)"
    print(f"\n{verdict}; the largest batch that fits is {r['max_batch_that_fits']}")
    if not r["numerically_safe"]:
        print(f"numerically UNSAFE: {', '.join(r['unsafe_groups'])} in low precision (the safety check vetoes or projects it to bf16)")
    unit = "training tokens/s" if r["mode"] == "train" else "generated tokens/s"
    print(f"throughput: {r['tokens_per_s']:,.0f} {unit} (multi-GPU efficiency {r['multi_gpu_efficiency']:.2f})")
    if r["mode"] == "serve":
        print(f"KV cache: {r['kv_bytes_per_token']:,.0f} bytes/token; {r['requests_per_s']:.2f} requests/s; TTFT {r['ttft_s'] * 1e3:.1f} ms, TPOT {r['tpot_s'] * 1e3:.2f} ms")


# --- sweep -----------------------------------------------------------------------------------


def _sweep_one(model: str, gpu_type: str, mode: str, gpu_counts, batches, seq_len: int, output_tokens: int, checkpointing: bool = False):
    """All valid (precision map, batch, gpus) rows for one model on one GPU type, evaluated
    by the kernel in one batched call. Returns (n_evaluated, best row dict or None)."""
    import itertools

    from fleet_marl.kernel import Actions, Draws, RoundState, evaluate

    g = catalog.gpu(gpu_type)
    m = catalog.model(model)
    seq = min(seq_len, m.max_seq if mode == "train" else m.max_seq - output_tokens)
    per_node = 8
    st = _single_tenant_static(model, gpu_type, mode, max(gpu_counts), per_node, seq, output_tokens, checkpointing)
    allowed = [catalog.PRECISION_CODE[p] for p in g.precisions if mode == "serve" or not catalog.WEIGHT_ONLY[catalog.PRECISION_CODE[p]]]
    maps = np.array(list(itertools.product(allowed, repeat=catalog.N_GROUPS)), np.int64)  # (M, G)
    grid = np.array(list(itertools.product(range(len(maps)), batches, gpu_counts)), np.int64)
    B = len(grid)
    acts = Actions(
        gpus=grid[:, 2:3],
        bid=np.ones((B, 1)),
        precision=maps[grid[:, 0]][:, None, :],
        batch=grid[:, 1:2],
    )
    state = RoundState.initial(st)
    state = RoundState(prev_alloc=grid[:, 2:3], temp_c=state.temp_c, queue=state.queue, remaining_tokens=np.full((B, 1), 1e18), budget_left=state.budget_left)
    out = evaluate(st, acts, state, Draws(arrivals=np.zeros(1), tiebreak=np.zeros(1)), validate=True)
    ok = ~(out.oom[:, 0] | out.vetoed[:, 0] | out.unsafe_numerics[:, 0]) & (out.alloc[:, 0] > 0)
    if not ok.any():
        return B, None
    # best tokens/s per GPU among safe configurations that fit
    score = np.where(ok, out.tokens_per_s[:, 0] / np.maximum(out.alloc[:, 0], 1), -1.0)
    # the fastest; among equally fast ones, the least memory per GPU
    i = int(np.lexsort((out.mem_total[:, 0], -score))[0])
    best = {
        "model": model,
        "gpu_type": gpu_type,
        "mode": mode,
        "gpus": int(grid[i, 2]),
        "batch": int(grid[i, 1]),
        "precision": ",".join(f"{gr}={catalog.PRECISIONS[c]}" for gr, c in zip(catalog.GROUPS, maps[grid[i, 0]])),
        "tokens_per_s": float(out.tokens_per_s[i, 0]),
        "tokens_per_s_per_gpu": float(score[i]),
        "usd_per_million_tokens": float(g.price_per_hour / 3600.0 / score[i] * 1e6),
        "mem_gb_per_gpu": float(out.mem_total[i, 0] / 1e9),
        "configs_evaluated": B,
        "configs_safe_and_fitting": int(ok.sum()),
    }
    return B, best


def sweep(args) -> list[dict]:
    models = args.models.split(",") if args.models else list(catalog.models())
    gpus = args.gpu_types.split(",") if args.gpu_types else list(catalog.gpus())
    for name in models:
        catalog.model(name)
    for name in gpus:
        catalog.gpu(name)
    gpu_counts = (1, 8) if args.quick else (1, 2, 4, 8, 16)
    batches = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 32, 64, 128)
    jobs = [(m, g) for m in models for g in gpus]
    rows, total = [], 0
    t0 = time.perf_counter()
    from tqdm import tqdm

    bar = tqdm(jobs, desc=f"sweep ({args.mode})", unit="model x gpu", disable=args.json)
    for m, g in bar:
        n, best = _sweep_one(m, g, args.mode, gpu_counts, batches, args.seq_len, args.output_tokens, args.activation_checkpointing)
        total += n
        bar.set_postfix(configs=f"{total:,}")
        rows.append(best or {"model": m, "gpu_type": g, "mode": args.mode, "configs_evaluated": n, "configs_safe_and_fitting": 0})
    wall = time.perf_counter() - t0
    summary = {"configs_evaluated": total, "seconds": wall, "configs_per_s": total / wall}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_csv(out_dir / f"sweep_{args.mode}.csv", rows)
    png = _plot(out_dir / f"sweep_{args.mode}.png", rows, args.mode)
    if args.json:
        print(json.dumps({"summary": summary, "best": rows}, indent=2))
        return rows
    print(f"\nbest safe configuration per model and GPU type ({args.mode}, seq {args.seq_len}); ranked by tokens/s per GPU")
    hdr = f"{'model':<15}{'gpu':<11}{'gpus':>5}{'batch':>6}  {'tok/s/GPU':>10}{'$/Mtok':>9}{'GB/GPU':>8}  precision (emb,att,mlp,norm,head)"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "gpus" not in r:
            print(f"{r['model']:<15}{r['gpu_type']:<11}  nothing fits")
            continue
        short = ",".join(p.split("=")[1] for p in r["precision"].split(","))
        print(f"{r['model']:<15}{r['gpu_type']:<11}{r['gpus']:>5}{r['batch']:>6}  {r['tokens_per_s_per_gpu']:>10,.0f}{r['usd_per_million_tokens']:>9.3f}{r['mem_gb_per_gpu']:>8.1f}  {short}")
    print(f"\n{total:,} configurations evaluated by the batched kernel in {wall:.1f} s ({total / wall:,.0f} per second, including setup)")
    print(f"wrote {out_dir / f'sweep_{args.mode}.csv'}" + (f" and {png}" if png else ""))
    return rows


def _write_csv(path: Path, rows: list[dict]) -> None:
    import csv

    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _plot(path: Path, rows: list[dict], mode: str) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    gpus = list(dict.fromkeys(r["gpu_type"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(models)), 4))
    width = 0.8 / max(len(gpus), 1)
    for j, g in enumerate(gpus):
        ys = [next((r.get("tokens_per_s_per_gpu", 0.0) for r in rows if r["model"] == m and r["gpu_type"] == g), 0.0) for m in models]
        ax.bar(np.arange(len(models)) + j * width, ys, width, label=g)
    ax.set_xticks(np.arange(len(models)) + 0.4 - width / 2)
    ax.set_xticklabels(models, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s per GPU (best safe config)")
    ax.set_title(f"fleet-marl sweep: {mode}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleet-marl",
        description="fleet_marl: tenants negotiating for one shared GPU cluster.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fleet-marl train\n  fleet-marl compare --quick\n  fleet-marl estimate --model llama-3.1-8b --gpus 8 --gpu-type h100-sxm\n  fleet-marl sweep --quick\n  fleet-marl evaluate --task easy --policy precision_expert\n  fleet-marl demo\n  fleet-marl bench --quick\n  fleet-marl serve --mode ego\n\nRun 'fleet-marl <command> --help' for each command's options.",
    )
    sub = p.add_subparsers(dest="command", metavar="command")

    e = sub.add_parser("estimate", help="memory per GPU, fit and throughput of one configuration", epilog=EXAMPLES["estimate"], formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--model", required=True, help=f"catalog model: {', '.join(catalog.models())}")
    e.add_argument("--mode", choices=("train", "serve"), default="train")
    e.add_argument("--precision", default="bf16", help="one of fp32, bf16, fp8, int8, int4 for every group, or per group: embedding=bf16,attention=bf16,mlp=fp8,norm=bf16,head=bf16 (default bf16)")
    e.add_argument("--gpus", type=int, default=8, help="GPU count (default 8)")
    e.add_argument("--gpu-type", default="h100-sxm", help=f"catalog GPU type: {', '.join(catalog.gpus())}")
    e.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    e.add_argument("--batch-size", type=int, default=1, help="train: sequences per GPU per step; serve: concurrent sequences (default 1)")
    e.add_argument("--seq-len", type=int, default=4096, help="train: sequence length; serve: prompt tokens (default 4096)")
    e.add_argument("--output-tokens", type=int, default=256, help="serve: generated tokens per request (default 256)")
    e.add_argument("--activation-checkpointing", action="store_true", help="train: full activation recomputation (keeps 2*s*h bytes per layer, one extra forward pass)")
    e.add_argument("--json", action="store_true", help="print one JSON object")

    s = sub.add_parser("sweep", help="batched-kernel search for the best safe configuration of catalog models", epilog=EXAMPLES["sweep"], formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--mode", choices=("train", "serve"), default="train")
    s.add_argument("--models", default="", help="comma-separated catalog models (default: all)")
    s.add_argument("--gpu-types", default="", help="comma-separated GPU types (default: all)")
    s.add_argument("--seq-len", type=int, default=4096, help="train: sequence length; serve: prompt tokens (default 4096)")
    s.add_argument("--output-tokens", type=int, default=256, help="serve: generated tokens (default 256)")
    s.add_argument("--activation-checkpointing", action="store_true", help="train: full activation recomputation")
    s.add_argument("--quick", action="store_true", help="a smaller grid")
    s.add_argument("--out", default="runs/sweep", help="output folder for the CSV and PNG (default runs/sweep)")
    s.add_argument("--json", action="store_true", help="print JSON instead of the table")

    v = sub.add_parser("evaluate", help="grade a policy on a task over K seeds", epilog=EXAMPLES["evaluate"], formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--task", default="easy", help=f"one of {', '.join(TASKS)} (default easy)")
    v.add_argument("--policy", default="precision_expert", help="reference policy name, module:Name, path.py[:Name] or a fleet-marl train run folder (default precision_expert)")
    v.add_argument("--episodes", type=int, default=10, help="episodes, one per seed (default 10)")
    v.add_argument("--seed", type=int, default=0, help="first seed; episodes use seed .. seed+episodes-1 (default 0)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--no-cache", action="store_true", help="recompute the reference episodes instead of reading the cache")

    b = sub.add_parser("baselines", help="every reference policy on every task, as a table", epilog=EXAMPLES["baselines"], formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--tasks", default="", help=f"comma-separated tasks (default: all of {', '.join(TASKS)})")
    b.add_argument("--policies", default="", help="comma-separated reference policies (default: all)")
    b.add_argument("--episodes", type=int, default=10, help="seeds per cell (default 10)")
    b.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    b.add_argument("--results", default=None, help="markdown file to update (default: docs/results.md of the fleet_marl checkout)")
    b.add_argument("--readme", default=None, help="README to update (default: README.md of the fleet_marl checkout)")
    w = b.add_mutually_exclusive_group()
    w.add_argument("--write", action="store_true", help="update the files even for a partial run (--tasks/--policies)")
    w.add_argument("--no-write", action="store_true", help="print the table only")

    d = sub.add_parser("demo", help="one rendered episode with a summary", epilog=EXAMPLES["demo"], formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--task", default="easy", help="task (default easy)")
    d.add_argument("--policy", default="precision_expert", help="policy, as for evaluate (default precision_expert)")
    d.add_argument("--seed", type=int, default=0, help="episode seed (default 0)")
    d.add_argument("--gif", default=None, metavar="PATH", help="also save the rgb_array frames as an animated GIF")
    d.add_argument("--fps", type=float, default=4.0, help="GIF frames per second (default 4)")
    d.add_argument("--every", type=int, default=1, help="print every N-th frame (default 1)")
    d.add_argument("--delay", type=float, default=0.0, help="seconds to pause after each printed frame (default 0)")

    from fleet_marl import bench
    from fleet_marl.rllib import cli as train_cli

    train_cli.add_parser(sub)
    train_cli.add_compare_parser(sub)
    bench.add_parser(sub)
    from fleet_marl import serve

    serve.add_parser(sub)
    return p


def _positive(name: str, value, minimum=1) -> None:
    if value < minimum:
        raise CLIError(f"--{name} {value}: expected an integer >= {minimum}")


def print_evaluation(s: dict) -> None:
    seeds = s["seeds"]
    print(f"fleet-marl evaluate: task {s['task']}, policy {s['policy']}, {s['episodes']} episodes (seeds {seeds[0]}..{seeds[-1]})")
    print(f"welfare   {s['welfare_mean']:.2f} ± {s['welfare_std']:.2f}   (random {s['random_welfare_mean']:.2f}, planner {s['reference_welfare_mean']:.2f})")
    print(f"score     {s['score']:.3f}")
    rho = "-" if s["rho_mean"] is None else f"{s['rho_mean']:.2f}"
    wait = "-" if s["p99_wait_s_max"] is None else f"{s['p99_wait_s_max']:.0f} s"
    print(f"fairness  Jain {s['jain_mean']:.3f}   max starvation streak {s['max_starvation_streak']}   starvation events {s['starvation_events']}   Themis rho {rho}   p99 wait {wait}")
    print(f"events    oom {s['oom']}   veto {s['veto']}   throttle {s['throttle']}   degenerate {s['degenerate']}   illegal {s['illegal']}   (summed over tenants and episodes)")
    print()
    print(f"{'agent':<10} {'return':>9} {'utility':>9} {'service':>8} {'jobs':>5} {'starved':>8} {'degenerate':>10}   (means over episodes; counts summed)")
    for a, r in s["agents"].items():
        print(f"{a:<10} {r['return_mean']:>9.2f} {r['utility_mean']:>9.2f} {r['service_mean']:>8.2f} {r['jobs_done']:>5} {r['starvation_events']:>8} {r['degenerate']:>10}")


def run_evaluate(args) -> dict:
    from fleet_marl.grader import evaluate

    _positive("episodes", args.episodes)
    _positive("seed", args.seed, 0)
    if args.task not in TASKS:
        raise CLIError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    s = evaluate(args.task, args.policy, episodes=args.episodes, seed=args.seed, progress=True, cache=not args.no_cache).summary()
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print_evaluation(s)
    return s


def run_baselines(args) -> None:
    from fleet_marl import policies

    from fleet_marl import baselines

    tasks = [t for t in args.tasks.split(",") if t] or list(TASKS)
    names = [p for p in args.policies.split(",") if p] or list(policies.POLICIES)
    for t in tasks:
        if t not in TASKS:
            raise CLIError(f"--tasks: {t!r}: expected tasks from {', '.join(TASKS)}")
    for n in names:
        if n not in policies.POLICIES:
            raise CLIError(f"--policies: {n!r}: expected reference policies from {', '.join(policies.POLICIES)}")
    _positive("episodes", args.episodes)
    _positive("seed", args.seed, 0)
    full = tasks == list(TASKS) and names == list(policies.POLICIES)
    write = not args.no_write and (full or args.write)
    root = baselines.checkout()
    results = Path(args.results) if args.results else (root / "docs" / "results.md" if root else None)
    readme = Path(args.readme) if args.readme else (root / "README.md" if root else None)
    if write and (results is None or readme is None):
        raise CLIError("no fleet_marl checkout found to write README.md and docs/results.md into; pass --results and --readme, or --no-write")
    evals = baselines.run(tasks, names, episodes=args.episodes, seed=args.seed)
    print(baselines.table(evals))
    if not write:
        if not args.no_write:
            print("partial run (--tasks/--policies): the README and docs/results.md are left as they are; pass --write to update them", file=sys.stderr)
        return
    extra = ("" if tasks == list(TASKS) else f" --tasks {','.join(tasks)}") + ("" if names == list(policies.POLICIES) else f" --policies {','.join(names)}")
    text = baselines.block(evals, args.episodes, args.seed, extra)
    for path in (results, readme):
        if path.name == "results.md" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("# Results\n\n## Baselines: the reference policies\n\n")
        if baselines.write(path, text):
            print(f"updated {path}", file=sys.stderr)


def run_demo(args) -> None:
    from fleet_marl.demo import demo

    _positive("every", args.every)
    _positive("seed", args.seed, 0)
    if args.gif and Path(args.gif).suffix.lower() != ".gif":
        raise CLIError(f"--gif {args.gif}: expected a path ending in .gif")
    if args.task not in TASKS:
        raise CLIError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    if not args.fps > 0:
        raise CLIError(f"--fps {args.fps}: expected a number > 0")
    if args.delay < 0:
        raise CLIError(f"--delay {args.delay}: expected a number >= 0")
    demo(args.task, args.policy, seed=args.seed, gif=args.gif, fps=args.fps, every=args.every, delay=args.delay)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `fleet-marl ... | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    errors: tuple[type[Exception], ...] = (CLIError, CatalogError)
    if args.command in ("evaluate", "baselines", "demo"):  # only these load the env (PettingZoo)
        from fleet_marl.grader import GraderError, PolicyError

        errors += (PolicyError, GraderError)
    if args.command == "bench":
        from fleet_marl import bench

        return bench.main(args)
    if args.command == "train":
        from fleet_marl.rllib import cli as train_cli

        return train_cli.main(args)
    if args.command == "compare":
        from fleet_marl.rllib import cli as train_cli

        return train_cli.compare_main(args)
    if args.command == "serve":
        from fleet_marl import serve

        return serve.main(args)
    try:
        if args.command == "estimate":
            r = estimate(args)
            if args.json:
                print(json.dumps(r, indent=2))
            else:
                print_estimate(r)
        elif args.command == "sweep":
            sweep(args)
        elif args.command == "evaluate":
            run_evaluate(args)
        elif args.command == "baselines":
            run_baselines(args)
        elif args.command == "demo":
            run_demo(args)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"run 'fleet-marl {args.command} --help' for the options", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``fleet-marl sweep``: a batched-kernel search over precision maps, batch sizes and GPU counts
for catalog models on catalog GPUs; prints the best safe configuration of each and writes a
CSV and a plot. Each (model, GPU type) pair is one batched ``kernel.evaluate`` call. The plot
needs matplotlib (the ``[plot]`` extra); without it the sweep still runs and writes the CSV, and
says how to install the extra.
"""

from __future__ import annotations

import csv
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fleet_marl import catalog
from fleet_marl.catalog import CatalogError
from fleet_marl.errors import MissingExtra, UsageError, require
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate
from fleet_marl.tools.estimate import single_tenant_static

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, CatalogError)

EXAMPLES = """examples:
  fleet-marl sweep                                   # every catalog model on every GPU type, training
  fleet-marl sweep --mode serve --models llama-3.1-8b,qwen2.5-14b --gpu-types h100-sxm,l40s
  fleet-marl sweep --quick --out runs/sweep
"""


def _sweep_one(model: str, gpu_type: str, mode: str, gpu_counts, batches, seq_len: int, output_tokens: int, checkpointing: bool = False):
    """All valid (precision map, batch, gpus) rows for one model on one GPU type, evaluated
    by the kernel in one batched call. Returns (n_evaluated, best row dict or None)."""
    g = catalog.gpu(gpu_type)
    m = catalog.model(model)
    seq = min(seq_len, m.max_seq if mode == "train" else m.max_seq - output_tokens)
    per_node = 8
    st = single_tenant_static(model, gpu_type, mode, max(gpu_counts), per_node, seq, output_tokens, checkpointing)
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
    state = RoundState(
        prev_alloc=grid[:, 2:3],
        temp_c=state.temp_c,
        queue=state.queue,
        remaining_tokens=np.full((B, 1), 1e18),
        budget_left=state.budget_left,
    )
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
        "precision": ",".join(f"{gr}={catalog.PRECISIONS[c]}" for gr, c in zip(catalog.GROUPS, maps[grid[i, 0]], strict=True)),
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
        print(
            f"{r['model']:<15}{r['gpu_type']:<11}{r['gpus']:>5}{r['batch']:>6}  {r['tokens_per_s_per_gpu']:>10,.0f}{r['usd_per_million_tokens']:>9.3f}{r['mem_gb_per_gpu']:>8.1f}  {short}"
        )
    print(f"\n{total:,} configurations evaluated by the batched kernel in {wall:.1f} s ({total / wall:,.0f} per second, including setup)")
    print(f"wrote {out_dir / f'sweep_{args.mode}.csv'}" + (f" and {png}" if png else ""))
    return rows


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _plot(path: Path, rows: list[dict], mode: str) -> Path | None:
    """The plot of the best configurations, or None (and a note) without matplotlib."""
    try:
        require("matplotlib", "plot", "the sweep's plot")
    except MissingExtra as exc:
        print(f"no plot: {exc}", file=sys.stderr)
        return None
    import matplotlib  # matplotlib: only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

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


def add_arguments(parser) -> None:
    parser.add_argument("--mode", choices=("train", "serve"), default="train")
    parser.add_argument("--models", default="", help="comma-separated catalog models (default: all)")
    parser.add_argument("--gpu-types", default="", help="comma-separated GPU types (default: all)")
    parser.add_argument("--seq-len", type=int, default=4096, help="train: sequence length; serve: prompt tokens (default 4096)")
    parser.add_argument("--output-tokens", type=int, default=256, help="serve: generated tokens (default 256)")
    parser.add_argument("--activation-checkpointing", action="store_true", help="train: full activation recomputation")
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--out", default="runs/sweep", help="output folder for the CSV and PNG (default runs/sweep)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args) -> int:
    sweep(args)
    return 0


__all__ = ["EXAMPLES", "add_arguments", "run", "sweep"]

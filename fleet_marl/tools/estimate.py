"""``fleet-marl estimate``: memory per GPU, fit and throughput of one model on one GPU type, in
the spirit of ``accelerate estimate-memory``, straight from the kernel (``fleet_marl.kernel``).

``estimate(args)`` returns the report as a dict (``--json`` prints it); ``parse_precision``
reads a precision map; ``single_tenant_static`` builds the one-tenant scenario that ``sweep``
evaluates too.
"""

from __future__ import annotations

import math

import numpy as np

from fleet_marl import catalog
from fleet_marl.catalog import CatalogError
from fleet_marl.config import ArbiterSpec, ClusterSpec, FleetConfig, SafetySpec, TenantSpec, WorkloadSpec
from fleet_marl.errors import UsageError
from fleet_marl.kernel import KernelStatic, cost, engine, stage1
from fleet_marl.kernel.safety import explain_invalid, invalid_precision
from fleet_marl.output import print_report

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, CatalogError)

EXAMPLES = """examples:
  fleet-marl estimate --model llama-3.1-8b --mode train --gpus 8 --gpu-type h100-sxm --batch-size 2 --seq-len 4096
  fleet-marl estimate --model llama-3.1-70b --mode serve --precision int4 --gpus 2 --gpu-type a100-80gb --batch-size 32
  fleet-marl estimate --model mistral-7b --mode train --precision embedding=bf16,attention=fp8,mlp=fp8,norm=bf16,head=bf16 --json
"""


def parse_precision(text: str) -> dict[str, str]:
    """'bf16' -> the same for every group; 'embedding=bf16,mlp=fp8,...' -> per group
    (groups not named default to bf16)."""
    text = text.strip().lower()
    if "=" not in text:
        if text not in catalog.PRECISION_CODE:
            raise UsageError(f"--precision {text!r}: expected one of {', '.join(catalog.PRECISIONS)} or group=precision pairs")
        return dict.fromkeys(catalog.GROUPS, text)
    out = dict.fromkeys(catalog.GROUPS, "bf16")
    for part in text.split(","):
        if "=" not in part:
            raise UsageError(f"--precision part {part!r}: expected group=precision, e.g. mlp=fp8")
        g, p = (s.strip() for s in part.split("=", 1))
        if g not in out:
            raise UsageError(f"--precision group {g!r}: expected one of {', '.join(catalog.GROUPS)}")
        if p not in catalog.PRECISION_CODE:
            raise UsageError(f"--precision {g}={p!r}: expected one of {', '.join(catalog.PRECISIONS)}")
        out[g] = p
    return out


def single_tenant_static(
    model: str, gpu_type: str, mode: str, gpus: int, gpus_per_node: int, seq_len: int, output_tokens: int, checkpointing: bool | str = False
):
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
                activation_checkpointing=checkpointing if mode == "train" else False,
                workload=wl,
            ),
        ),
        arbiter=ArbiterSpec(mechanism="maxmin"),
        safety=SafetySpec(mode="veto"),
    )
    return KernelStatic.from_config(cfg)


def estimate(args) -> dict:
    """The ``estimate`` report as a dict."""
    if args.gpus < 1:
        raise UsageError(f"--gpus {args.gpus}: expected an integer >= 1")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size}: expected an integer >= 1")
    if args.seq_len < 1:
        raise UsageError(f"--seq-len {args.seq_len}: expected an integer >= 1")
    m = catalog.model(args.model)
    g = catalog.gpu(args.gpu_type)
    ckpt = getattr(args, "activation_checkpointing", None) or False
    if ckpt is True:  # a caller's namespace from before the modes
        ckpt = "full"
    if args.mode == "train" and args.seq_len > m.max_seq:
        raise UsageError(f"--seq-len {args.seq_len}: {args.model} has a context of {m.max_seq} tokens")
    if args.mode == "serve" and args.seq_len + args.output_tokens > m.max_seq:
        raise UsageError(
            f"--seq-len + --output-tokens = {args.seq_len + args.output_tokens}: {args.model} has a context of {m.max_seq} tokens"
        )
    prec_map = parse_precision(args.precision)
    st = single_tenant_static(args.model, args.gpu_type, args.mode, args.gpus, args.gpus_per_node, args.seq_len, args.output_tokens, ckpt)
    prec = np.array([[[catalog.PRECISION_CODE[prec_map[gr]] for gr in catalog.GROUPS]]], np.int64)
    if invalid_precision(st, prec).any():
        msg = explain_invalid(st, prec)
        raise UsageError(msg.split(": ", 1)[1] if ": " in msg else msg)
    tt = stage1(st, prec[0], project=False)
    terms = (tt.weights[0], tt.grads[0], tt.master[0], tt.optimizer[0], tt.per_seq_local[0], tt.per_seq_sharded[0], tt.kv_heads[0])
    n, b = args.gpus, args.batch_size
    nodes = math.ceil(args.gpus / args.gpus_per_node)
    mem = engine.memory_per_gpu(*terms, n, b)
    rate, tokens_per_s, efficiency, ttft_s, tpot_s = engine.tenant_roofline(st, tt, 0, n, b, nodes)
    cap = float(g.memory_bytes)
    usable = float(st.mem_bytes[0])
    fit_b = int(max(engine.fitting_batch(*terms, n, usable), 0))
    comp = dict(zip(("weights", "gradients", "master_fp32", "optimizer", "activations", "kv_cache"), map(float, mem), strict=True))
    comp = {k: v for k, v in comp.items() if args.mode == "train" or k in ("weights", "kv_cache")}
    comp["total"] = float(engine.peak_bytes(*mem))  # gradients and activations never peak together
    unsafe = [gr for gr, code in zip(catalog.GROUPS, prec[0, 0], strict=True) if catalog.UNSAFE[catalog.GROUPS.index(gr), code]]
    out = {
        "model": args.model,
        "mode": args.mode,
        "params": m.total_params,
        "params_by_group": m.params_by_group,
        "gpu_type": args.gpu_type,
        "gpus": args.gpus,
        "nodes": nodes,
        "precision": prec_map,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "activation_checkpointing": ckpt if args.mode == "train" else False,
        "bytes_per_gpu": comp,
        "gpu_memory_bytes": cap,
        "usable_bytes_per_gpu": usable,
        "fits": bool(comp["total"] <= usable),
        "max_batch_that_fits": fit_b,
        "tokens_per_s": tokens_per_s,
        "multi_gpu_efficiency": efficiency,
        "numerically_safe": not unsafe,
        "unsafe_groups": unsafe,
    }
    if args.mode == "serve":
        kv_b = float(cost.KV_BYTES[prec[0, 0, catalog.GROUPS.index("attention")]])
        out["output_tokens"] = args.output_tokens
        out["kv_bytes_per_token"] = m.kv_bytes_per_token(kv_b)
        out["requests_per_s"] = rate
        out["ttft_s"] = ttft_s
        out["tpot_s"] = tpot_s
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
    print(
        f"  {'total':<13}{_gb(r['bytes_per_gpu']['total'])}   of {_gb(r['usable_bytes_per_gpu']).strip()} usable ({r['gpu_memory_bytes'] / 1e9:.1f} GB as CUDA reports it x 0.9)"
    )
    verdict = "fits" if r["fits"] else "DOES NOT FIT (out of memory)"
    print(f"\n{verdict}; the largest batch that fits is {r['max_batch_that_fits']}")
    if not r["numerically_safe"]:
        print(f"numerically UNSAFE: {', '.join(r['unsafe_groups'])} in low precision (the safety check vetoes or projects it to bf16)")
    unit = "training tokens/s" if r["mode"] == "train" else "generated tokens/s"
    print(f"throughput: {r['tokens_per_s']:,.0f} {unit} (multi-GPU efficiency {r['multi_gpu_efficiency']:.2f})")
    if r["mode"] == "serve":
        print(
            f"KV cache: {r['kv_bytes_per_token']:,.0f} bytes/token; {r['requests_per_s']:.2f} requests/s; TTFT {r['ttft_s'] * 1e3:.1f} ms, TPOT {r['tpot_s'] * 1e3:.2f} ms"
        )


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help=f"catalog model: {', '.join(catalog.models())}")
    parser.add_argument("--mode", choices=("train", "serve"), default="train")
    parser.add_argument(
        "--precision",
        default="bf16",
        help="one of fp32, bf16, fp8, int8, int4 for every group, or per group: embedding=bf16,attention=bf16,mlp=fp8,norm=bf16,head=bf16 (default bf16)",
    )
    parser.add_argument("--gpus", type=int, default=8, help="GPU count (default 8)")
    parser.add_argument("--gpu-type", default="h100-sxm", help=f"catalog GPU type: {', '.join(catalog.gpus())}")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument(
        "--batch-size", type=int, default=1, help="train: sequences per GPU per step; serve: concurrent sequences (default 1)"
    )
    parser.add_argument("--seq-len", type=int, default=4096, help="train: sequence length; serve: prompt tokens (default 4096)")
    parser.add_argument("--output-tokens", type=int, default=256, help="serve: generated tokens per request (default 256)")
    parser.add_argument(
        "--activation-checkpointing",
        nargs="?",
        const="full",
        choices=("full", "selective"),
        help="train: full (keeps each block's input, runs its forward again; the default when given alone) or selective "
        "(torchtitan's per-op policy: keeps every other matmul's and attention's output)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    return print_report(estimate(args), args.json, print_estimate)


__all__ = ["EXAMPLES", "add_arguments", "estimate", "parse_precision", "print_estimate", "run", "single_tenant_static"]

"""The main run of ``fleet-marl bench``: how fast the environment and the batched kernel are,
on one core.

Every figure is a median over repeats, measured in one process pinned to one CPU core, with
actions sampled from the action masks beforehand (sampling is never timed) and a stock
PettingZoo environment measured in the same run as the reference. :func:`measure` runs every
measurement of :mod:`~fleet_marl.studies.bench.measures` under a plan (:data:`FULL` or
:data:`QUICK`) and returns the report, whose keys ``docs/benchmarks.md`` documents, with each
target's verdict (:mod:`~fleet_marl.studies.bench.targets`); :func:`format_table` is its table.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from tqdm import tqdm

from fleet_marl.studies.bench.measures import (
    ENV_SIZES,
    KERNEL_BATCHES,
    KERNEL_N,
    README_TASKS,
    README_VECTOR_B,
    RSS_AGENT_STEPS,
    SAMPLED_SHAPLEY_TASK,
    SCHEMES,
    SHAPLEY_N,
    VECTOR_B,
    env_step,
    kernel_before_rates,
    kernel_rate,
    kernel_single_us,
    readme_timing,
    reference_rate,
    rss_run,
    sampled_shapley_timing,
    vector_timing,
    vmas_timing,
)
from fleet_marl.studies.bench.targets import targets
from fleet_marl.studies.bench.timing import pin_to_one_core

# --- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    steps: dict  # tenants -> timed steps per repeat
    repeats: int
    kernel_min_time: float  # seconds per repeat of a kernel measurement
    shapley_steps: int
    rss_agent_steps: int
    reference_steps: int
    vector_steps: int  # vector-env steps per repeat
    readme_steps: int  # parallel-env steps per repeat of each README-built env and its bench build
    readme_vector_steps: int  # vector-env steps per repeat, likewise


FULL = Plan(
    steps={4: 400, 16: 300, 64: 100},
    repeats=5,
    kernel_min_time=0.25,
    shapley_steps=40,
    rss_agent_steps=RSS_AGENT_STEPS,
    reference_steps=2000,
    vector_steps=40,
    readme_steps=200,
    readme_vector_steps=20,
)
QUICK = Plan(
    steps={4: 60, 16: 40, 64: 12},
    repeats=3,
    kernel_min_time=0.03,
    shapley_steps=5,
    rss_agent_steps=RSS_AGENT_STEPS // 100,
    reference_steps=300,
    vector_steps=4,
    readme_steps=20,
    readme_vector_steps=3,
)


def measure(quick: bool = False, cpu: int | None = None, progress: bool = True, kernel_before: str | None = None) -> dict:
    """Run every measurement and return the report (a flat dict; see docs/benchmarks.md);
    ``kernel_before``: a checkout whose kernel to measure against this one (``--kernel-before``)."""
    plan = QUICK if quick else FULL
    pinned = pin_to_one_core(cpu)
    t_start = time.perf_counter()
    r: dict = {"quick": quick, "cpu": pinned, "repeats": plan.repeats}
    jobs: list[tuple[str, Callable[[], None]]] = []

    for n in ENV_SIZES:
        for scheme in SCHEMES:

            def job(n=n, scheme=scheme):
                t = env_step(n, scheme, plan.steps[n], plan.repeats)
                r[f"env_step_us_n{n}_{scheme}"] = t.us_per_step
                r[f"agent_steps_per_s_n{n}_{scheme}"] = t.agent_steps_per_s

            jobs.append((f"env N={n} {scheme}", job))

    for b in KERNEL_BATCHES:

        def kjob(b=b):
            r[f"kernel_evals_per_s_n{KERNEL_N}_b{b}"] = kernel_rate(b, plan.repeats, plan.kernel_min_time)

        jobs.append((f"kernel batch {b}", kjob))

    def single():
        r[f"kernel_eval_us_n{KERNEL_N}_b1"] = kernel_single_us(plan.repeats, plan.kernel_min_time)

    jobs.append(("one kernel evaluation", single))

    def shapley():
        t = env_step(SHAPLEY_N, "shapley", plan.shapley_steps, plan.repeats)
        base = env_step(SHAPLEY_N, "local", plan.steps[16], plan.repeats)
        r[f"shapley_step_us_n{SHAPLEY_N}"] = t.us_per_step
        r[f"env_step_us_n{SHAPLEY_N}_local"] = base.us_per_step
        r[f"shapley_overhead_ratio_n{SHAPLEY_N}"] = t.us_per_step / base.us_per_step

    jobs.append((f"exact Shapley N={SHAPLEY_N}", shapley))

    def reference():
        name, t = reference_rate(plan.reference_steps, plan.repeats)
        r["reference_env"] = name
        r["reference_step_us"] = t.us_per_step
        r["reference_agent_steps_per_s"] = t.agent_steps_per_s

    jobs.append(("reference env", reference))
    for scheme in SCHEMES:

        def vjob(scheme=scheme):
            ms, rate = vector_timing(scheme, plan.vector_steps, plan.repeats)
            r[f"vector_step_ms_n{KERNEL_N}_b{VECTOR_B}_{scheme}"] = ms
            r[f"vector_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}_{scheme}"] = rate

        jobs.append((f"vector env B={VECTOR_B} {scheme}", vjob))
    for form in ("parallel", "vector"):
        for task in README_TASKS:

            def rjob(task=task, form=form):
                readme, built = readme_timing(
                    task, form, plan.readme_steps if form == "parallel" else plan.readme_vector_steps, plan.repeats
                )
                r[f"readme_{form}_step_us_{task}"] = readme
                r[f"readme_{form}_bench_step_us_{task}"] = built
                r[f"readme_{form}_ratio_{task}"] = readme / built

            jobs.append((f"{task} as the README builds it ({form})", rjob))

    def sampled():
        sh, loc = sampled_shapley_timing(plan.shapley_steps, plan.repeats)
        r[f"sampled_shapley_step_us_{SAMPLED_SHAPLEY_TASK}"] = sh
        r[f"env_step_us_{SAMPLED_SHAPLEY_TASK}_local"] = loc
        r[f"sampled_shapley_overhead_ratio_{SAMPLED_SHAPLEY_TASK}"] = sh / loc

    jobs.append((f"sampled Shapley ({SAMPLED_SHAPLEY_TASK})", sampled))

    def vmas_job():
        v = vmas_timing(plan.vector_steps, plan.repeats)
        r[f"vmas_step_ms_n{KERNEL_N}_b{VECTOR_B}"], r[f"vmas_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}"] = v if v else (None, None)

    jobs.append((f"VMAS simple_spread N={KERNEL_N} B={VECTOR_B}", vmas_job))
    r["kernel_before"] = kernel_before
    r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_now"] = r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_before"] = None
    r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_now"] = r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_before"] = None
    if kernel_before is not None:

        def before_job():
            now, then, then_nodes, coupled = kernel_before_rates(kernel_before, pinned, plan.repeats, plan.kernel_min_time)
            r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_now"], r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_before"] = now, then
            r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_now"] = coupled
            r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_before"] = then_nodes

        jobs.append(("the kernel before (--kernel-before)", before_job))
    jobs.append(("memory (long run)", lambda: r.update(rss_run(plan.rss_agent_steps))))

    bar = tqdm(jobs, desc="fleet-marl bench", unit="part", file=sys.stderr, disable=not progress)
    for label, job in bar:
        bar.set_postfix_str(label)
        job()
    bar.close()

    r["difference_overhead_ratio"] = r["env_step_us_n16_difference"] / r["env_step_us_n16_local"]
    r["difference_overhead_ratio_n64"] = r["env_step_us_n64_difference"] / r["env_step_us_n64_local"]
    r[f"vector_difference_over_local_n16_b{VECTOR_B}"] = (
        r[f"vector_agent_steps_per_s_n16_b{VECTOR_B}_difference"] / r[f"vector_agent_steps_per_s_n16_b{VECTOR_B}_local"]
    )
    vmas_rate = r[f"vmas_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}"]
    for scheme in SCHEMES:  # the vector env against its vectorized peer, measured in the same run
        r[f"vector_over_vmas_{scheme}"] = r[f"vector_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}_{scheme}"] / vmas_rate if vmas_rate else None
    now, then = r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_now"], r[f"kernel_evals_per_s_n{KERNEL_N}_b1024_before"]
    r[f"kernel_speedup_n{KERNEL_N}_b1024_vs_before"] = now / then if now and then else None
    coupled, then_nodes = r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_now"], r[f"kernel_coupled_evals_per_s_n{KERNEL_N}_b1024_before"]
    r[f"kernel_coupled_cost_n{KERNEL_N}_b1024_vs_before"] = then_nodes / coupled if coupled and then_nodes else None
    r["readme_env_ratio_max"] = max(r[f"readme_{f}_ratio_{t}"] for f in ("parallel", "vector") for t in README_TASKS)
    r["agent_steps_ratio_vs_reference"] = r["agent_steps_per_s_n16_difference"] / r["reference_agent_steps_per_s"]
    r["targets"] = targets(r)
    r["seconds"] = time.perf_counter() - t_start
    r["machine"] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }
    return r


def format_table(r: dict) -> str:
    lines = [f"fleet-marl bench: pinned to CPU {r['cpu']}, medians of {r['repeats']} repeats{' (quick)' if r['quick'] else ''}", ""]
    lines.append(f"{'env step':<28}{'us/step':>10}{'agent-steps/s':>16}")
    for n in ENV_SIZES:
        for s in SCHEMES:
            lines.append(f"{f'  N={n:<3} {s}':<28}{r[f'env_step_us_n{n}_{s}']:>10,.0f}{r[f'agent_steps_per_s_n{n}_{s}']:>16,.0f}")
    lines.append(f"{'  reference ' + r['reference_env']:<28}{r['reference_step_us']:>10,.0f}{r['reference_agent_steps_per_s']:>16,.0f}")
    lines.append("")
    lines.append(f"{f'vector env, N=16, B={VECTOR_B}':<28}{'ms/step':>10}{'agent-steps/s':>16}")
    for s in SCHEMES:
        lines.append(
            f"{f'  {s}':<28}{r[f'vector_step_ms_n{KERNEL_N}_b{VECTOR_B}_{s}']:>10,.1f}{r[f'vector_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}_{s}']:>16,.0f}"
        )
    if r[f"vmas_step_ms_n{KERNEL_N}_b{VECTOR_B}"] is None:
        lines.append("  VMAS simple_spread: not installed (pip install 'fleet-marl[bench]')")
    else:
        lines.append(
            f"{'  VMAS simple_spread':<28}{r[f'vmas_step_ms_n{KERNEL_N}_b{VECTOR_B}']:>10,.1f}{r[f'vmas_agent_steps_per_s_n{KERNEL_N}_b{VECTOR_B}']:>16,.0f}"
            f"   (ours / VMAS: local {r['vector_over_vmas_local']:.1f}x, difference {r['vector_over_vmas_difference']:.1f}x)"
        )
    lines.append("")
    lines.append(f"{'one kernel evaluation, N=16':<28}{r[f'kernel_eval_us_n{KERNEL_N}_b1']:>10,.1f} us")
    lines.append(f"{'batched kernel, N=16':<28}{'evals/s':>10}")
    for b in KERNEL_BATCHES:
        lines.append(f"{f'  batch {b}':<28}{r[f'kernel_evals_per_s_n{KERNEL_N}_b{b}']:>10,.0f}")
    lines.append("")
    lines.append(f"difference overhead (N=16):     {r['difference_overhead_ratio']:.2f}x a local step")
    lines.append(
        f"exact Shapley (N={SHAPLEY_N}, {2**SHAPLEY_N} rows): {r[f'shapley_step_us_n{SHAPLEY_N}']:,.0f} us/step, {r[f'shapley_overhead_ratio_n{SHAPLEY_N}']:.1f}x a local step"
    )
    lines.append(f"ours / reference agent-steps:   {r['agent_steps_ratio_vs_reference']:.1f}x")
    lines.append(
        f"sampled Shapley ({SAMPLED_SHAPLEY_TASK}, 64 permutations): {r[f'sampled_shapley_step_us_{SAMPLED_SHAPLEY_TASK}']:,.0f} us/step, "
        f"{r[f'sampled_shapley_overhead_ratio_{SAMPLED_SHAPLEY_TASK}']:.1f}x a local step"
    )
    lines.append("")
    lines.append(f"{'env as the README builds it':<28}{'README':>10}{'bench':>10}{'ratio':>8}   (us/step; vector: B={README_VECTOR_B})")
    for f in ("parallel", "vector"):
        for t in README_TASKS:
            lines.append(
                f"{f'  {f} {t}':<28}{r[f'readme_{f}_step_us_{t}']:>10,.0f}{r[f'readme_{f}_bench_step_us_{t}']:>10,.0f}{r[f'readme_{f}_ratio_{t}']:>8.2f}"
            )
    lines.append(
        f"RSS over {r['rss_agent_steps']:,} vector agent-steps: {r['rss_start_bytes'] / 2**20:,.1f} -> {r['rss_end_bytes'] / 2**20:,.1f} MiB ({r['rss_growth_fraction']:+.2%})"
    )
    if r["kernel_before"] is not None:
        lines.append(
            f"kernel, N=16, batch 1024, interleaved: {r['kernel_evals_per_s_n16_b1024_now']:,.0f} evals/s now, "
            f"{r['kernel_evals_per_s_n16_b1024_before']:,.0f} in {r['kernel_before']} ({r['kernel_speedup_n16_b1024_vs_before']:.2f}x); "
            f"every coupling on {r['kernel_coupled_evals_per_s_n16_b1024_now']:,.0f} evals/s "
            f"({r['kernel_coupled_cost_n16_b1024_vs_before']:.2f}x the checkout's time per row)"
        )
    lines.append("")
    lines.append(f"{'target':<34}{'measured':>14}{'target':>12}{'ratio':>8}  met")
    for key, t in r["targets"].items():
        sign = ">=" if t["kind"] == "min" else "<="
        if t["measured"] is None:
            lines.append(f"{key:<34}{'not measured':>14}{sign:>4}{t['target']:>8,.3g}{'':>8}  NO")
            continue
        lines.append(f"{key:<34}{t['measured']:>14,.3g}{sign:>4}{t['target']:>8,.3g}{t['ratio']:>8.2f}  {'yes' if t['met'] else 'NO'}")
    lines.append(f"\n{r['seconds']:.0f} s in all")
    return "\n".join(lines)


__all__ = ["FULL", "QUICK", "Plan", "format_table", "measure"]

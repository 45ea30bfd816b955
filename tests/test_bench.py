"""`fleet-marl bench`: the quick run (the CI smoke test) prints every documented key, each a
number; the scenario family, the reference fallback and bad options. No timing asserts."""

from __future__ import annotations

import argparse
import ast
import graphlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleet_marl.environment import scheme_rewards
from fleet_marl.studies.bench import clients, command, measures, suite, targets

ROOT = Path(__file__).resolve().parents[1]
#: The keys the issue asks for, each a number.
REQUIRED = (
    "env_step_us_n16_difference",
    "env_step_us_n16_local",
    "difference_overhead_ratio",
    "kernel_evals_per_s_n16_b1024",
    "kernel_eval_us_n16_b1",
    "reference_agent_steps_per_s",
    "agent_steps_per_s_n16_difference",
    "rss_growth_fraction",
    "shapley_overhead_ratio_n8",
    "vector_agent_steps_per_s_n16_b256_local",
    "vector_agent_steps_per_s_n16_b256_difference",
    "readme_env_ratio_max",
    "sampled_shapley_overhead_ratio_hard",
    "difference_overhead_ratio_n64",
    "vector_difference_over_local_n16_b256",
    "vmas_agent_steps_per_s_n16_b256",
    "vector_over_vmas_local",
    "vector_over_vmas_difference",
)


def documented_keys() -> set[str]:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", text, re.M))


@pytest.fixture(scope="module")
def report():
    """One quick run, in a subprocess (it pins itself to one core)."""
    out = subprocess.run(
        [sys.executable, "-m", "fleet_marl.cli", "bench", "--quick", "--json"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "fleet-marl bench" in out.stderr  # the progress bar goes to stderr, not into the JSON
    return json.loads(out.stdout)


@pytest.mark.slow
def test_quick_run_prints_every_required_key_as_a_number(report):
    for key in REQUIRED:
        assert isinstance(report[key], (int, float)) and math.isfinite(report[key]), key
    assert report["quick"] is True and report["machine"]["numba"]
    for n in measures.ENV_SIZES:
        for s in measures.SCHEMES:
            assert report[f"env_step_us_n{n}_{s}"] > 0 and report[f"agent_steps_per_s_n{n}_{s}"] > 0
    for b in measures.KERNEL_BATCHES:
        assert report[f"kernel_evals_per_s_n16_b{b}"] > 0
    # derived figures are what they say
    assert report["difference_overhead_ratio"] == pytest.approx(report["env_step_us_n16_difference"] / report["env_step_us_n16_local"])
    assert report["agent_steps_ratio_vs_reference"] == pytest.approx(
        report["agent_steps_per_s_n16_difference"] / report["reference_agent_steps_per_s"]
    )
    assert report["rss_agent_steps"] >= measures.RSS_AGENT_STEPS // 100
    # issue 31: every task's env as the README builds it, against the same env as the bench builds it
    ratios = []
    for form in ("parallel", "vector"):
        for task in measures.README_TASKS:
            readme, built = report[f"readme_{form}_step_us_{task}"], report[f"readme_{form}_bench_step_us_{task}"]
            assert readme > 0 and built > 0 and report[f"readme_{form}_ratio_{task}"] == pytest.approx(readme / built)
            ratios.append(readme / built)
    assert set(measures.README_TASKS) == {"tiny", "easy", "medium", "hard", "trace", "trace_code", "capped_rack", "shared_fabric"}
    assert report["readme_env_ratio_max"] == pytest.approx(max(ratios))
    assert report["sampled_shapley_overhead_ratio_hard"] == pytest.approx(
        report["sampled_shapley_step_us_hard"] / report["env_step_us_hard_local"]
    )
    assert report["difference_overhead_ratio_n64"] == pytest.approx(report["env_step_us_n64_difference"] / report["env_step_us_n64_local"])
    assert set(report["targets"]) == set(targets.TARGETS)
    assert report["vector_over_vmas_local"] == pytest.approx(
        report["vector_agent_steps_per_s_n16_b256_local"] / report["vmas_agent_steps_per_s_n16_b256"]
    )
    # the kernel against another checkout's is measured only with --kernel-before: not measured, not met
    assert report["kernel_before"] is None and report["kernel_speedup_n16_b1024_vs_before"] is None
    assert report["kernel_coupled_cost_n16_b1024_vs_before"] is None
    assert report["targets"]["kernel_speedup_n16_b1024_vs_before"] == {
        "measured": None,
        "target": 4.0,
        "kind": "min",
        "ratio": None,
        "met": False,
    }
    assert report["targets"]["kernel_coupled_cost_n16_b1024_vs_before"]["measured"] is None
    for key, t in report["targets"].items():
        if key not in ("kernel_speedup_n16_b1024_vs_before", "kernel_coupled_cost_n16_b1024_vs_before"):
            assert t["ratio"] == pytest.approx(t["measured"] / t["target"]) and isinstance(t["met"], bool)


@pytest.mark.slow
def test_every_key_is_documented(report):
    doc = documented_keys()
    missing = [k for k in report if k not in doc]
    assert missing == [], f"keys of the JSON report missing from docs/benchmarks.md: {missing}"
    for sub in ("targets", "machine"):
        for k in report[sub] if sub == "machine" else next(iter(report[sub].values())):
            assert k in doc, f"{sub}.{k} is not documented"


@pytest.mark.slow
def test_table_shows_every_measure(report):
    table = suite.format_table(report)
    for label in (
        "N=16  difference",
        "batch 16384",
        "difference overhead",
        "exact Shapley",
        "reference",
        "RSS",
        "one kernel evaluation",
        "vector env, N=16, B=256",
        "kernel_evals_per_s_n16_b1024",
        "as the README builds it",
        "vector trace_code",
        "sampled Shapley (hard",
        "VMAS simple_spread",
        "not measured",
    ):
        assert label in table, label


@pytest.mark.slow
def test_kernel_before_measures_another_checkout_in_a_subprocess():
    """--kernel-before: this checkout against itself (the ratio is not asserted: speed lives in the
    bench); a folder without the engine is a clear error."""
    now, then, then_nodes, coupled = measures.kernel_before_rates(str(ROOT), None, repeats=1, min_time=0.005, rounds=1)
    assert now > 0 and then > 0 and then_nodes > 0 and coupled > 0
    with pytest.raises(ValueError, match="--kernel-before .*expected a checkout of the engine"):
        measures.kernel_before_rates(str(ROOT / "docs"), None, repeats=1, min_time=0.005)


def test_bench_config_has_n_tenants_all_staying_the_episode():
    import fleet_marl

    cfg = measures.bench_config(16)
    assert len(cfg["tenants"]) == 16 and len(cfg["cluster"]["gpu_types"]) == 8
    env = fleet_marl.parallel_env(config=cfg, reward_scheme="difference", compute_all=False)
    obs, infos = env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps = 0
    while env.agents:
        assert len(env.agents) == 16  # nobody leaves early: every step has N agents
        acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in env.agents}
        _obs, _rew, _term, _trunc, infos = env.step(acts)
        assert set(scheme_rewards(next(iter(infos.values())))) == {"difference"}
        steps += 1
    assert steps == cfg["max_cycles"]
    with pytest.raises(ValueError, match=r"n = 0: expected an integer >= 1"):
        measures.bench_config(0)


def test_reference_falls_back_to_a_bundled_pettingzoo_env(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpe2", None)
    name, timing = measures.reference_rate(steps=20, repeats=1)
    assert name == "pettingzoo.classic.rps_v2" and timing.agent_steps_per_s > 0 and timing.agents == 2


def test_bad_cpu_is_a_clear_error(capsys):
    parser = argparse.ArgumentParser(epilog=command.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_arguments(parser)  # the bench entry of the CLI's command table, on its own
    code = command.run(parser.parse_args(["--quick", "--cpu", "9999", "--no-progress"]))
    err = capsys.readouterr().err
    assert code == 2 and "--cpu 9999: expected one of the cores" in err


def test_the_bench_modules_import_without_a_circle():
    """The modules of fleet_marl.studies.bench import one another in one order (the command, the
    runs, the targets, the measurements, the timing helpers): none imports one that imports it
    back, at module level or in a function, and none imports the command."""
    pkg = ROOT / "fleet_marl" / "studies" / "bench"
    graph: dict[str, set[str]] = {p.stem: set() for p in pkg.glob("*.py") if p.stem != "__init__"}
    for name, deps in graph.items():
        for node in ast.walk(ast.parse((pkg / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "fleet_marl.studies.bench":
                deps |= {a.name for a in node.names}
            mods = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            mods += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            deps |= {m.split(".")[3] for m in mods if m.startswith("fleet_marl.studies.bench.")}
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a circle
    assert order[-1] == "command" and not any("command" in deps for deps in graph.values())
    assert graph["command"] >= {"suite", "train", "clients"} and "routes" in graph["clients"]


def test_help_has_examples():
    out = subprocess.run([sys.executable, "-m", "fleet_marl.cli", "bench", "--help"], capture_output=True, text=True, check=True).stdout
    assert "examples:" in out and "fleet-marl bench --quick --json" in out and "docs/benchmarks.md" in out


@pytest.mark.slow
def test_train_throughput_quick_run(tmp_path):
    """``bench --train --quick``: the make-train config trains for a few iterations and the
    report has the end-to-end rate (wall time), the learning rate and the learner's share of
    waiting for batches, consistent with each other, and the target's verdict."""
    out = subprocess.run(
        [sys.executable, "-m", "fleet_marl.cli", "bench", "--train", "--quick", "--json", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    e2e, learn, wait = r["train_agent_steps_per_s_easy"], r["train_learn_agent_steps_per_s"], r["train_wait_share"]
    assert 0 < e2e <= learn * (1 + 1e-6) and 0 <= wait < 1  # the wall time holds the learning and the waits
    assert r["train_collector"] == "sync" and r["train_iterations_timed"] == 4
    t = r["targets"]["train_agent_steps_per_s_easy"]
    assert t["target"] == 50_000 and t["met"] == (e2e >= 50_000)
    assert not list(tmp_path.iterdir())  # the run folder was temporary


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_clients_quick_run_measures_every_route_and_rllib_before_and_after(tmp_path):
    """``bench --clients --quick``: every route's rate, RLlib's training before (``vector:
    false``, as no checkout is named) and after (the vector env), both through ``fleet-marl
    train --engine rllib``, and each target of issue 32 with its measurement and verdict; the
    table shows them. No timing asserts."""
    out = subprocess.run(
        [sys.executable, "-m", "fleet_marl.cli", "bench", "--clients", "--quick", "--json", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=1100,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    rates = r["clients"]["agent_steps_per_s"]
    assert {"sb3_vecenv", "sb3_supersuit", "pufferlib_native", "pufferlib_emulation", "torchrl_parallel", "rllib_vector"} <= set(rates)
    assert all(math.isfinite(v) and v > 0 for v in rates.values())
    before, after = r["rllib_train"]["before"], r["rllib_train"]["after"]
    assert before["engine"] == "this package, vector: false" and after["engine"] == "this package"
    for run in (before, after):
        assert run["agent_steps"] > 0 and run["seconds_timed"] > 0
        assert run["agent_steps_per_s"] == pytest.approx(run["agent_steps"] / run["seconds_timed"])
        assert run["env_steps"] == 2000 * run["iterations_timed"]  # the default config's batch, every iteration
    assert set(r["targets"]) == set(targets.CLIENT_TARGETS)
    speedup = r["targets"]["rllib_train_speedup"]
    assert speedup["measured"] == pytest.approx(after["agent_steps_per_s"] / before["agent_steps_per_s"]) and isinstance(
        speedup["met"], bool
    )
    assert r["targets"]["sb3_vecenv_over_supersuit"]["measured"] == pytest.approx(r["clients"]["ratios"]["sb3_vecenv_over_supersuit"])
    table = clients.format_table(r)
    for label in ("rllib_vector", "torchrl_parallel", "before", "after", "rllib_train_speedup", "pufferlib_native_over_emulation"):
        assert label in table, label
    assert not list(tmp_path.iterdir())  # the runs' folders were temporary


def test_clients_refuses_a_before_checkout_without_fleet_marl(tmp_path):
    with pytest.raises(ValueError, match="no fleet_marl package there"):
        clients.rllib_train_rate(1, 1, checkout=str(tmp_path))


def test_the_coupled_bench_config_turns_every_coupling_on_and_each_acts():
    """The coupled kernel measurement runs every mechanism of ``CouplingSpec`` on a scenario
    where each has something to do: a switch added to the spec fails here until it is on."""
    import dataclasses

    import numpy as np

    from fleet_marl.config import CouplingSpec, FleetConfig, from_dict
    from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate

    cfg = from_dict(FleetConfig, measures.coupled_bench_config(16))
    assert all(getattr(cfg.coupling, f.name) for f in dataclasses.fields(CouplingSpec))
    st = KernelStatic.from_config(cfg)
    acts = measures.kernel_actions(st, np.random.default_rng(0), 256)
    out = evaluate(st, acts, RoundState.initial(st), Draws.expected(st), validate=False)
    assert (out.slowdown > 1).any()  # contention: trainers across the 4:1 uplinks
    assert (out.usable_gpus < out.alloc).any()  # gang: odd grants to tensor-parallel-2 trainers
    assert (out.restart_s > 0).any() and (out.ttft_p99_s > out.ttft_p50_s).any()  # restarts, queues

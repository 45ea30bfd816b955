"""Where a row of the compiled round spends its time (the per-row figures of docs/benchmarks.md).

How to run:  taskset -c 1 .venv/bin/python experiments/round_profile.py
What it prints: microseconds per row of ``engine.round_rows`` on the rows the vector env
(N = 16 tenants, B = 256 clusters, the bench scenario) hands the kernel in one step, for
``local`` (one full row per cluster) and ``difference`` (the grand coalition in full, then 16
welfare-only removal rows per cluster); then the same with one part of the round replaced by
something trivial (an ablation: "no clearing" grants min(request, 2) GPUs, "no throughput"
gives fixed rates and latencies, "no power" skips power, heat and throttling, "no outcome" sets
each utility from the work rate, "no check" runs every tenant with GPUs at its batch, "no
placement" puts each tenant on one node), each from a copy of the package in a temporary folder with that
part of ``engine.py`` rewritten. An ablation also changes what follows it (fewer GPUs, simpler
placements), so the differences are estimates of each part's cost, not exact shares.
Minimum over 4 interleaved runs of 7 repeats each; pin to one idle core, never while tests run.

``--steps SCHEME`` instead prints a cProfile of 300 vector-env steps with that reward scheme
(the per-step breakdowns of docs/benchmarks.md, "Where the time goes now"); cProfile's own
overhead inflates every figure by about half, so read them as shares.

``--reuse`` instead measures how much of a counterfactual row a perfect reuse of the grand
coalition's work could skip (issue 31's "incremental counterfactuals" route): on the bench's
rows (N = 16 and N = 64, ``difference``; ``hard`` with sampled Shapley, each coalition against
the prefix one tenant shorter), every row is evaluated in full and each tenant of a
counterfactual row is compared with the same tenant in the row it would reuse. It prints the
share of tenant-rows that keep their GPUs; their GPUs and nodes (the throughput stage could be
skipped); those and their clock (the outcome could be skipped); and the share of rows in which
no tenant's placement moved (the placement and power stages could be skipped).

``--stages`` prints the microseconds per row of the round cut short before each of its stages,
on ``fleet-marl bench``'s kernel rows (N = 16, batch 1024, random actions) of the bench scenario,
the coupled scenario's nodes and the coupled scenario with every coupling on (the "where the
coupled round's time goes" table of docs/benchmarks.md).

``--layers`` times the bench's N = 16 ``difference`` env as the parallel env and as the vector
env with one cluster (the same core step without the agent-ID dicts), interleaved, so that the
difference is the parallel env's dict layer.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: ablation name -> (text in engine.py, its replacement)
ABLATIONS = {
    "no clearing": (
        "        clear_pools(b, q_caps, tf, ti, sc, ins_f, req, alloc, mult, price, caps, got, k1, k2, w, level, order, frac, zeros)\n",
        "        for t in range(T):\n            alloc[t] = min(req[t], 2)\n            mult[t] = 1.0\n            price[t] = tf[t, 0]\n",
    ),
    "no throughput": (
        "        throughput(\n"
        + "".join(
            f"            {a},\n"
            for a in [
                "b",
                "tf",
                "ti",
                "sc",
                "ins_i",
                "ins_f",
                "c_terms",
                "alloc",
                "n_nodes",
                "pl",
                "running",
                "rf",
                "ri",
                "rb",
                "work_rate",
                "prefill_a",
                "t_dec_a",
                "avail_s",
                "activity",
                "carry",
            ]
        )
        + "        )\n",
        "        for t in range(T):\n            work_rate[t] = 1.0 * alloc[t]\n            prefill_a[t] = 0.1\n            t_dec_a[t] = 0.01\n"
        "            avail_s[t] = 60.0\n            activity[t] = 1.0 if running[t] else 0.0\n",
    ),
    "no power": (
        "        power_heat(b, tf, nf, ni, sc, temp, activity, pg, pn, pl, node_dyn, rack_dyn, f_cap, f_heat, f_node, t_pred, dead, rk, rr)\n"
        "        throttle(sc, pn, pl, f_node, f_cap, f_heat, t_pred, dead, running, rf, rb)\n",
        "",
    ),
    "no outcome": (
        "        outcome(b, tf, ti, sc, ins_i, ins_f, running, work_rate, avail_s, prefill_a, t_dec_a, alloc, mult, rf, ri, rb, c_terms, pl)\n",
        "        for t in range(T):\n            util[t] = work_rate[t] * 1e-9\n",
    ),
    "no check": (  # row 3 of ri is the batch that runs (layout.OI_BATCH), row 1 of ins_i the batch asked (I_BATCH)
        "        check(b, tf, sc, ins_i, c_terms, unsafe_c, invalid_c, used, rf, ri, rb, running)\n",
        "        for t in range(T):\n            running[t] = alloc[t] > 0\n            ri[3, t] = ins_i[1, b, t]\n",
    ),
    "no placement": (
        "        place(alloc, prev, held, persist, ti, ni, gpn, rg, free, hist, order, count, t_nodes, n_nodes)\n",
        "        for t in range(T):\n            n_nodes[t] = 1\n            t_nodes[t, 0] = t % K\n            rg[t, t % K] = alloc[t]\n",
    ),
}


def capture(scheme: str, out: Path) -> None:
    """Pickle the arguments of the kernel call of one vector-env step (after 10 warm-up steps)."""
    import fleet_marl
    from fleet_marl.kernel import engine
    from fleet_marl.studies.bench.measures import VECTOR_B, bench_config

    venv = fleet_marl.vector_env(num_envs=VECTOR_B, config=bench_config(16), reward_scheme=scheme, compute_all=False)
    _obs, infos = venv.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [venv.sample_actions(infos, rng) for _ in range(8)]
    for k in range(10):
        venv.step(pool[k % 8])
    seen = {}
    real = engine.round_rows

    def spy(*args):
        seen["args"] = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
        return real(*args)

    engine.round_rows = spy
    try:
        venv.step(pool[3])
    finally:
        engine.round_rows = real
    out.write_bytes(pickle.dumps(seen["args"]))


def time_rows(args_file: Path) -> float:
    """Minimum over 7 repeats of the microseconds per row of one kernel call on the captured rows."""
    from fleet_marl.kernel import engine

    args = pickle.loads(args_file.read_bytes())
    rows = args[6].shape[1]
    engine.round_rows(*args)
    best = np.inf
    for _ in range(7):
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.3:
            engine.round_rows(*args)
            n += 1
        best = min(best, (time.perf_counter() - t0) / n)
    return best / rows * 1e6


def variant(tmp: Path, name: str) -> Path:
    """A copy of the package with one ablation applied (``name`` "as is": unchanged)."""
    dest = tmp / name.replace(" ", "_")
    shutil.copytree(ROOT / "fleet_marl", dest / "fleet_marl", ignore=shutil.ignore_patterns("__pycache__"))
    if name in ABLATIONS:
        path = dest / "fleet_marl" / "kernel" / "engine.py"
        old, new = ABLATIONS[name]
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"{name}: engine.py no longer has the line this ablation replaces; update ABLATIONS")
        path.write_text(text.replace(old, new))
    return dest


def profile_steps(scheme: str) -> None:
    import cProfile
    import pstats

    import fleet_marl
    from fleet_marl.studies.bench.measures import VECTOR_B, bench_config

    venv = fleet_marl.vector_env(num_envs=VECTOR_B, config=bench_config(16), reward_scheme=scheme, compute_all=False)
    _obs, infos = venv.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [venv.sample_actions(infos, rng) for _ in range(8)]
    venv.step(pool[0])
    prof = cProfile.Profile()
    prof.enable()
    for k in range(300):  # three automatic resets of every cluster fall in these steps
        venv.step(pool[k % 8])
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def _kernel_calls(make_env, steps: int, warm: int = 5) -> list:
    """The arguments of ``evaluate_welfare`` in ``credit`` for ``steps`` steps after ``warm``."""
    from fleet_marl import credit

    seen, real = [], credit.evaluate_welfare

    def spy(st, a, s, d, p, full=None):
        seen.append((st, a, s, d, p))
        return real(st, a, s, d, p, full=full)

    _env, step = make_env()
    credit.evaluate_welfare = spy
    try:
        for _ in range(warm + steps):
            step()
    finally:
        credit.evaluate_welfare = real
    return seen[warm:]


def _kept(out, present: np.ndarray, row: int, base: int, who: np.ndarray) -> np.ndarray:
    """(4,) tenant-rows of ``who`` in ``row`` that keep, against ``base``: GPUs; GPUs and nodes;
    those and the clock; and 1 if no tenant's placement moved."""
    a = out.alloc[row, who] == out.alloc[base, who]
    p = a & (out.gpus_on_node[row, who] == out.gpus_on_node[base, who]).all(-1)
    c = p & (out.throttle[row, who] == out.throttle[base, who])
    moved = (out.gpus_on_node[row] != out.gpus_on_node[base]).any(-1) & present[row] & present[base]
    return np.array([a.sum(), p.sum(), c.sum(), 0 if moved.any() else 1], float)


def reuse_report() -> None:
    import fleet_marl
    from fleet_marl.kernel import evaluate_welfare
    from fleet_marl.studies.bench.measures import bench_config

    def difference(n: int):
        def make():
            venv = fleet_marl.vector_env(num_envs=16, config=bench_config(n), reward_scheme="difference", compute_all=False)
            _, infos = venv.reset(seed=0)
            rng = np.random.default_rng(3)
            return venv, lambda: venv.step(venv.sample_actions(infos, rng))

        return make

    def shapley():
        env = fleet_marl.parallel_env(task="hard", reward_scheme="shapley", compute_all=False)
        box = {"infos": env.reset(seed=0)[1]}
        for k, a in enumerate(env.possible_agents):  # the spaces' own generators, seeded: the same actions each run
            env.action_space(a).seed(k)

        def step():
            acts = {a: env.action_space(a).sample(box["infos"][a]["action_mask"]) for a in env.agents}
            box["infos"] = env.step(acts)[4]
            if not env.agents:
                box["infos"] = env.reset()[1]

        return env, step

    print(f"{'rows':<34}{'keep GPUs':>10}{'+ nodes':>10}{'+ clock':>10}{'rows, no move':>15}")
    for name, make in (("N = 16 difference (removal)", difference(16)), ("N = 64 difference (removal)", difference(64))):
        tot = np.zeros(4)
        n_t = n_r = 0
        for st, a, s, d, p in _kernel_calls(make, 10):
            out, _ = evaluate_welfare(st, a, s, d, p, full=np.ones(p.shape[0], bool))
            T = st.T
            for g in range(0, p.shape[0], T + 1):
                for i in range(T):
                    who = p[g + 1 + i] & p[g]
                    tot += _kept(out, p, g + 1 + i, g, who)
                    n_t += who.sum()
                    n_r += 1
        print(f"{name:<34}{tot[0] / n_t:>10.1%}{tot[1] / n_t:>10.1%}{tot[2] / n_t:>10.1%}{tot[3] / n_r:>15.1%}")
    tot = np.zeros(4)
    n_t = n_r = 0
    for st, a, s, d, p in _kernel_calls(shapley, 5):  # each coalition against one tenant smaller
        out, _ = evaluate_welfare(st, a, s, d, p, full=np.ones(p.shape[0], bool))
        key = {tuple(r): k for k, r in enumerate(p)}
        for r in range(p.shape[0]):
            for j in np.flatnonzero(p[r]):
                smaller = p[r].copy()
                smaller[j] = False
                base = key.get(tuple(smaller))
                if base is not None and smaller.any():
                    tot += _kept(out, p, r, base, smaller)
                    n_t += smaller.sum()
                    n_r += 1
                    break
    print(f"{'hard, sampled Shapley (coalitions)':<34}{tot[0] / n_t:>10.1%}{tot[1] / n_t:>10.1%}{tot[2] / n_t:>10.1%}{tot[3] / n_r:>15.1%}")


def layers_report() -> None:
    import statistics

    import fleet_marl
    from fleet_marl.studies.bench.measures import _vector_pool, _vector_step_s, bench_config
    from fleet_marl.studies.bench.timing import presample, time_steps

    env = fleet_marl.parallel_env(config=bench_config(16), reward_scheme="difference", compute_all=False)
    env.reset(seed=0)
    pool = presample(env, np.random.default_rng(7))
    venv = fleet_marl.vector_env(num_envs=1, config=bench_config(16), reward_scheme="difference", compute_all=False)
    vpool = _vector_pool(venv)
    par, vec = [], []
    for _ in range(5):
        par.append(time_steps(env, pool, 500, 1).us_per_step)
        vec.append(_vector_step_s(venv, vpool, 500) * 1e6)
    p, v = statistics.median(par), statistics.median(vec)
    print(f"parallel env {p:.0f} us a step; vector env, B = 1: {v:.0f} us; the dict layer: {p - v:.0f} us")


#: the statements of ``round_rows``' loop over rows that begin a stage, in order (cut points of ``--stages``)
STAGES = (
    "ask(",
    "clear_pools(",
    "place(",
    "if gang:",
    "tenant_stage1(",
    "check(",
    "restarts(",
    "if contended:",
    "throughput(",
    "power_heat(",
    "throttle(",
    "outcome(",
    "welfare[b] =",
)


def stages_report() -> None:
    """Microseconds per row of ``round_rows`` cut short before each stage (the row's loop body
    ``continue``s there), on the bench's kernel rows (``measures.kernel_rate``: N = 16, batch 1024,
    random actions, the whole outcome written) of three scenarios: the bench scenario, the coupled
    scenario's nodes with no coupling on, and every coupling on (``coupled_bench_config``). A
    stage's cost is the difference between the cut after it and the cut before it (a cut leaves
    the later stages' scratch as the last row left it, so the differences are estimates)."""
    import inspect
    import textwrap

    import numba

    from fleet_marl.config import FleetConfig, from_dict
    from fleet_marl.kernel import Draws, KernelStatic, RoundState, engine, layout
    from fleet_marl.kernel.packing import lead_shape, pack
    from fleet_marl.studies.bench.measures import bench_config, coupled_bench_config, kernel_actions, median_call_time

    src = textwrap.dedent(inspect.getsource(engine.round_rows.py_func)).replace("@jit_alloc\n", "")
    src = src.replace("def round_rows(tf,", "def cut_rows(stop, tf,")
    lines, names = [], []
    for line in src.split("\n"):
        body = line.startswith(" " * 8) and not line.startswith(" " * 9)  # a statement of the loop over rows
        for st in STAGES:
            if body and line.strip().startswith(st) and st not in names:
                lines.append(f"        if stop == {len(names)}:\n            continue")
                names.append(st)
        lines.append(line)
    scope = dict(vars(engine))
    exec("\n".join(lines), scope)
    cut = numba.njit(nogil=True, error_model="numpy")(scope["cut_rows"])
    scenarios = {
        "bench": bench_config(16),
        "coupled nodes": coupled_bench_config(16, couplings=False),
        "every coupling": coupled_bench_config(16),
    }
    table = {}
    for label, cfg in scenarios.items():
        st = KernelStatic.from_config(from_dict(FleetConfig, cfg))
        acts = kernel_actions(st, np.random.default_rng(1024), 1024)
        state, draws = RoundState.initial(st), Draws.expected(st)
        B, T, K = 1024, st.T, st.K
        ins = pack(st, acts, state, draws, None, lead_shape(acts, state, draws, None), B)
        outs = (
            np.arange(B),
            np.empty((len(layout.OF), B, T)),
            np.empty((len(layout.OI), B, T), np.int64),
            np.empty((len(layout.OB), B, T), np.bool_),
            np.empty((B, T, K), np.int64),
            np.empty((2, B, K)),
            np.empty((B, st.n_racks)),
            np.empty(B),
        )
        for k in range(len(names) + 1):
            call = lambda k=k, st=st, ins=ins, outs=outs: cut(k, *st.packed, *ins, *outs)  # noqa: E731
            call()
            table[label, k] = median_call_time(call, 7, 0.3) / B * 1e6
    print(f"{'us per row, cut before':<26}" + "".join(f"{label:>16}" for label in scenarios))
    for k in range(len(names) + 1):
        name = names[k].rstrip("(:") if k < len(names) else "(the whole row)"
        print(f"{name:<26}" + "".join(f"{table[label, k]:>16.2f}" for label in scenarios))


def main() -> None:
    if sys.argv[1:] == ["--stages"]:
        stages_report()
        return
    if sys.argv[1:] == ["--layers"]:
        layers_report()
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--time":  # child: time one variant on one capture
        print(time_rows(Path(sys.argv[2])))
        return
    if sys.argv[1:] == ["--reuse"]:
        reuse_report()
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--steps":
        profile_steps(sys.argv[2])
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        captures = {}
        for scheme in ("local", "difference"):
            captures[scheme] = tmp / f"{scheme}.pkl"
            capture(scheme, captures[scheme])
        names = ["as is", *ABLATIONS]
        roots = {n: variant(tmp, n) for n in names}
        best: dict[tuple[str, str], float] = {}
        for _ in range(4):  # interleaved, so a slow spell of the machine hits every variant
            for n in names:
                for scheme, path in captures.items():
                    env = {"PYTHONPATH": str(roots[n]), "NUMBA_CACHE_DIR": str(tmp / "numba" / n.replace(" ", "_"))}
                    res = subprocess.run(
                        [sys.executable, __file__, "--time", str(path)],
                        capture_output=True,
                        text=True,
                        check=True,
                        env={**os.environ, **env},
                    )
                    best[n, scheme] = min(best.get((n, scheme), np.inf), float(res.stdout.split()[-1]))
        print(f"{'us per row':<16}{'local (full rows)':>20}{'difference':>14}")
        for n in names:
            print(f"{n:<16}{best[n, 'local']:>20.2f}{best[n, 'difference']:>14.2f}")


if __name__ == "__main__":
    main()

"""The credit-assignment study behind ``fleet-marl compare`` (``experiments/credit_assignment.py``).

Which reward should each tenant learn from? The study trains PPO (one shared, masked policy)
on :func:`fleet_marl.tasks.scaled` -- task ``easy`` grown to N tenants with the cluster
growing with it, under the proportional-share arbiter -- once for every reward scheme, every
N and every seed, with the same budget of env steps for every scheme at a given N. Each run
is then graded by :func:`fleet_marl.grader.evaluate` (the greedy policy on the grader's seeds,
against the random and planner references), on the global welfare and on fairness.

Runs execute as Ray tasks, one CPU each, ``--jobs`` at a time. Each finished run appends a
row to ``results.csv`` and its learning curve to ``curves.csv`` under ``--out``, so a killed
study resumes where it stopped: runs already in ``results.csv`` are skipped. ``study.json``
records the settings; resuming with different ones is refused. :func:`report` turns the CSVs
into the summary table and the plots (mean and 95% interval across seeds).

Nothing here starts Ray at import time.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from fleet_marl.config import REWARD_SCHEMES

#: The full study's env-step budget per run, by N (the same for every scheme and seed). At
#: 2,000 env steps per PPO iteration, that is 12, 12, 8 and 8 iterations. Measured on the
#: 2-core machine, two runs at a time: an iteration took about 9, 12, 16 and 22 s at N = 2, 4, 8,
#: 16 (shapley at N = 16 about 12 s more), and the 72 runs took 2.93 CPU-hours, about 90 minutes.
FULL_BUDGETS = {2: 24_000, 4: 24_000, 8: 16_000, 16: 16_000}
QUICK_BUDGETS = {2: 400, 4: 400}

RESULT_COLUMNS = (
    "n", "scheme", "seed", "iterations", "env_steps", "agent_steps",
    "train_welfare", "eval_welfare", "score", "jain", "starvation_events", "degenerate", "illegal",
    "random_welfare", "planner_welfare",
    "run_seconds", "train_seconds", "eval_seconds", "credit_seconds", "credit_ms_per_step", "finished",
)
CURVE_COLUMNS = ("n", "scheme", "seed", "iteration", "env_steps", "welfare", "jain", "starvation_events", "degenerate", "seconds")
#: Summary columns: (column of results.csv, header, format)
SUMMARY = (
    ("eval_welfare", "welfare", "{:.1f}"),
    ("score", "score", "{:.3f}"),
    ("jain", "Jain", "{:.3f}"),
    ("starvation_events", "starvation events", "{:.1f}"),
    ("degenerate", "degenerate events", "{:.1f}"),
    ("run_seconds", "wall s / run", "{:.0f}"),
    ("credit_seconds", "of which reward s", "{:.1f}"),
)


class StudyError(ValueError):
    """A bad study setting or output folder: names the option, the value and what to do."""


@dataclass
class Study:
    """One credit-assignment study. ``schemes``, ``ns``, ``seeds``, ``budgets``, ``episodes``,
    ``mechanism`` and ``out`` are ``fleet-marl compare`` options; the PPO settings are set from
    Python (``Study(lr=1e-3)``)."""

    schemes: tuple = REWARD_SCHEMES
    ns: tuple = (2, 4, 8, 16)
    seeds: int = 3
    budgets: dict = field(default_factory=lambda: dict(FULL_BUDGETS))  # N -> env steps per run
    train_batch_size: int = 2000
    minibatch_size: int = 1000
    num_epochs: int = 6
    lr: float = 3e-4
    episodes: int = 5  # grader episodes per run (seeds 0 .. episodes - 1)
    mechanism: str = "proportional"
    sharing: str = "shared"
    shapley_samples: int = 64  # sampled permutations above 8 tenants
    max_cycles: int = 100
    out: str = "runs/credit_assignment"

    @classmethod
    def quick(cls, **changes) -> "Study":
        """About a minute: N = 2 and 4, two seeds, two PPO iterations of 200 env steps per run,
        episodes of 20 rounds, two grader episodes. It checks the pipeline, not the science."""
        base = dict(ns=(2, 4), seeds=2, budgets=dict(QUICK_BUDGETS), train_batch_size=200, minibatch_size=100, num_epochs=2,
                    episodes=2, max_cycles=20, out="runs/credit_assignment_quick")
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
        from fleet_marl.config import MECHANISMS

        def bad(name, value, expected):
            raise StudyError(f"--{name.replace('_', '-')} {value!r}: expected {expected}")

        for s in self.schemes:
            if s not in REWARD_SCHEMES:
                bad("schemes", s, f"schemes from {', '.join(REWARD_SCHEMES)}")
        if not self.schemes or len(set(self.schemes)) != len(self.schemes):
            bad("schemes", ",".join(self.schemes), "a non-empty list without repeats")
        for n in self.ns:
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
                bad("n", n, "tenant counts between 1 and 64")
        if not self.ns or len(set(self.ns)) != len(self.ns):
            bad("n", ",".join(map(str, self.ns)), "a non-empty list without repeats")
        for n in self.ns:
            if n not in self.budgets:
                bad("budget", ",".join(f"{k}={v}" for k, v in self.budgets.items()), f"a budget for every N (missing N={n}); e.g. --budget {n}=20000")
        for n, b in self.budgets.items():
            if isinstance(b, bool) or not isinstance(b, int) or b < self.train_batch_size or b % self.train_batch_size:
                bad("budget", f"{n}={b}", f"env steps per run: a multiple of the {self.train_batch_size:,} env steps of a PPO iteration")
        if self.seeds < 1:
            bad("seeds", self.seeds, "an integer >= 1")
        if self.episodes < 1:
            bad("episodes", self.episodes, "an integer >= 1")
        if self.mechanism not in MECHANISMS:
            bad("mechanism", self.mechanism, f"one of {', '.join(MECHANISMS)}")

    # --- runs ----------------------------------------------------------------------------------

    def iterations(self, n: int) -> int:
        return self.budgets[n] // self.train_batch_size  # check() makes it exact

    def env(self, n: int) -> dict:
        """The ``parallel_env`` overrides of the N-tenant scenario (task ``easy``)."""
        from fleet_marl.tasks import scaled

        return {**scaled(n, self.mechanism), "max_cycles": self.max_cycles}

    def runs(self) -> list[tuple[int, str, int]]:
        """Every (N, scheme, seed), smallest N first."""
        return [(n, s, seed) for n in sorted(self.ns) for seed in range(self.seeds) for s in self.schemes]

    def train_config(self, n: int, scheme: str, seed: int):
        from fleet_marl.rllib.config import TrainConfig

        return TrainConfig(task="easy", reward_scheme=scheme, sharing=self.sharing, env={**self.env(n), "shapley_samples": self.shapley_samples},
                           iterations=self.iterations(n), seed=seed, train_batch_size=self.train_batch_size,
                           minibatch_size=min(self.minibatch_size, self.train_batch_size), num_epochs=self.num_epochs, lr=self.lr,
                           eval_interval=0, checkpoint_interval=0, out=self.out, name=f"n{n}-{scheme}-{seed}")

    def settings(self) -> dict:
        """What a resumed study must match (everything but ``out``)."""
        d = asdict(self)
        d.pop("out")
        d["schemes"], d["ns"] = list(self.schemes), list(self.ns)
        d["budgets"] = {str(k): v for k, v in sorted(self.budgets.items())}
        return d


# --- one run (inside a Ray task) ---------------------------------------------------------------


def _fleet_env(algo):
    """The FleetParallelEnv the local env runner steps (num_env_runners=0)."""
    env = algo.env_runner.env
    subs = getattr(env, "envs", None) or [env]
    return subs[0].unwrapped.par_env


def run_one(study: Study, n: int, scheme: str, seed: int, progress=None) -> tuple[dict, list[dict]]:
    """Train and grade one (N, scheme, seed); returns its results row and learning curve."""
    from fleet_marl import grader
    from fleet_marl.rllib.config import build
    from fleet_marl.rllib.evaluation import algorithm_policy
    from fleet_marl.rllib.train import flatten, quiet

    quiet()
    tc = study.train_config(n, scheme, seed)
    t0 = time.perf_counter()
    algo = build(tc).build_algo()
    curve: list[dict] = []
    steps = agent_steps = 0
    try:
        for it in range(1, tc.iterations + 1):
            flat = flatten(algo.train())
            prev, steps = steps, int(flat.get("num_env_steps_sampled_lifetime", 0))
            agent_steps = int(sum(v for k, v in flat.items() if k.startswith("env_runners/num_agent_steps_sampled_lifetime/")))
            curve.append({"n": n, "scheme": scheme, "seed": seed, "iteration": it, "env_steps": steps,
                          **{k: flat.get(f"env_runners/fleet/{k}", "") for k in ("welfare", "jain", "starvation_events", "degenerate")},
                          "seconds": round(time.perf_counter() - t0, 2)})
            if progress is not None:
                progress.put(steps - prev)
        t1 = time.perf_counter()
        fleet = _fleet_env(algo)
        credit_s, env_steps_taken = fleet.credit_seconds, max(fleet.steps_taken, 1)
        ev = grader.evaluate("easy", lambda env: algorithm_policy(algo, env), episodes=study.episodes, seed=0,
                             overrides=study.env(n), progress=False)
    finally:
        algo.stop()
    t2 = time.perf_counter()
    eps = ev.episodes
    welfare = [c["welfare"] for c in curve if c["welfare"] != ""]
    row = {
        "n": n, "scheme": scheme, "seed": seed, "iterations": tc.iterations, "env_steps": steps, "agent_steps": agent_steps,
        "train_welfare": welfare[-1] if welfare else "",
        "eval_welfare": float(ev.welfare.mean()), "score": ev.score,
        "jain": float(np.mean([e.jain for e in eps])),
        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
        "illegal": float(np.mean([e.illegal for e in eps])),
        "random_welfare": float(np.mean(ev.random_welfare)), "planner_welfare": float(np.mean(ev.reference_welfare)),
        "run_seconds": round(t2 - t0, 2), "train_seconds": round(t1 - t0, 2), "eval_seconds": round(t2 - t1, 2),
        "credit_seconds": round(credit_s, 3), "credit_ms_per_step": round(1e3 * credit_s / env_steps_taken, 4),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return row, curve


# --- the study -----------------------------------------------------------------------------------


def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _append(path: Path, columns, rows: list[dict]) -> None:
    new = not path.is_file() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        if new:
            w.writeheader()
        w.writerows(rows)
        f.flush()
        os.fsync(f.fileno())


def _key(row: dict) -> tuple[int, str, int]:
    return int(row["n"]), str(row["scheme"]), int(row["seed"])


def _complete(row: dict, columns) -> bool:
    """False for a row cut short by a kill in the middle of a write."""
    if any(row.get(c) in (None, "") for c in ("n", "scheme", "seed", columns[-1])):
        return False
    try:
        _key(row)
    except ValueError:
        return False
    return True


def _rewrite(path: Path, columns, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows({c: r.get(c, "") for c in columns} for r in rows)
    tmp.replace(path)


def prepare(study: Study, overwrite: bool = False) -> tuple[Path, set]:
    """Check the study and its folder; returns (folder, runs already done). Nothing is
    deleted unless ``overwrite``, and only after every check passed."""
    study.check()
    out = Path(study.out)
    meta = out / "study.json"
    if out.exists() and not out.is_dir():
        raise StudyError(f"--out {str(out)!r}: is a file; give a folder")
    if meta.is_file() and not overwrite:
        try:
            old = json.loads(meta.read_text())
        except ValueError:
            old = None
        if old != study.settings():
            diff = sorted(k for k in study.settings() if not isinstance(old, dict) or old.get(k) != study.settings()[k])
            raise StudyError(f"--out {str(out)!r} holds a study with other settings (differs in: {', '.join(diff) or 'study.json unreadable'}); "
                             "resume it with the same options, pass --overwrite to start again, or give another --out")
    elif out.is_dir() and any(out.iterdir()) and not meta.is_file() and not overwrite:
        raise StudyError(f"--out {str(out)!r}: folder is not empty and holds no study.json; give an empty or new folder, or --overwrite")
    if overwrite:
        for name in ("study.json", "results.csv", "curves.csv"):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(study.settings(), indent=2) + "\n")
    wanted = set(study.runs())
    results = [r for r in _read(out / "results.csv") if _complete(r, RESULT_COLUMNS)]
    if (out / "results.csv").is_file():
        _rewrite(out / "results.csv", RESULT_COLUMNS, results)  # without a row a kill cut short
    done = {_key(r) for r in results} & wanted
    # a curve without its results row belongs to a run that was killed: drop it
    curves = [r for r in _read(out / "curves.csv") if _complete(r, CURVE_COLUMNS) and _key(r) in done]
    if (out / "curves.csv").is_file():
        _rewrite(out / "curves.csv", CURVE_COLUMNS, curves)
    return out, done


def run(study: Study, *, jobs: int = 2, address: str | None = None, overwrite: bool = False, progress: bool = True,
        echo=print) -> Path:
    """Run every missing run of ``study`` and write the report; returns the output folder."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise StudyError(f"--jobs {jobs!r}: expected an integer >= 1")
    out, done = prepare(study, overwrite)
    todo = [r for r in study.runs() if r not in done]
    echo(f"credit-assignment study in {out}: {len(study.runs())} runs, {len(done)} done, {len(todo)} to go "
         f"(budgets {', '.join(f'N={n}: {study.budgets[n]:,} env steps' for n in sorted(study.ns))})")
    if todo:
        _run_all(study, out, todo, jobs, address, progress, echo)
    report(out, echo=echo)
    return out


def _references(study: Study, progress: bool) -> None:
    """Play the grader's random and planner episodes once per N (cached on disk), before the
    runs that all need them."""
    from tqdm import tqdm

    from fleet_marl import grader

    # the grader's seeds, and the 3 (TrainConfig.eval_episodes) of the training score
    seeds = range(max(study.episodes, 3))
    with tqdm(total=2 * len(study.ns) * len(seeds), desc="references (random, planner)", unit="ep", disable=not progress, leave=False) as bar:
        for n in sorted(study.ns):
            for name in ("random", "planner"):
                grader.reference_episodes("easy", name, seeds, study.env(n), progress=bar)


def _run_all(study: Study, out: Path, todo: list, jobs: int, address: str | None, progress: bool, echo) -> None:
    from tqdm import tqdm

    from fleet_marl.rllib.train import TrainConfig, _init_ray

    _references(study, progress)
    import ray

    if address or ray.is_initialized():
        started = _init_ray(address, TrainConfig())
    else:  # the workers' log lines would break the progress bars; their errors still come back
        ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        started = True
    from ray.util.queue import Empty, Queue

    try:
        queue = Queue(actor_options={"num_cpus": 0})
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        total_steps = sum(study.iterations(n) * study.train_batch_size for n, _, _ in todo)
        pending = list(todo)
        running: dict = {}
        failed: list[str] = []
        runs_bar = tqdm(total=len(todo), desc="runs", unit="run", position=0, disable=not progress)
        steps_bar = tqdm(total=total_steps, desc="env steps", unit="step", unit_scale=True, position=1, disable=not progress, smoothing=0.05)
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    key = pending.pop(0)
                    running[task.remote(study, *key, progress=queue)] = key
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                while True:
                    try:
                        steps_bar.update(queue.get_nowait())
                    except Empty:
                        break
                for ref in ready:
                    key = running.pop(ref)
                    try:
                        row, curve = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 -- say which run, keep the others going
                        failed.append(f"N={key[0]} scheme={key[1]} seed={key[2]}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}")
                        runs_bar.update(1)
                        continue
                    _append(out / "curves.csv", CURVE_COLUMNS, curve)  # the curve first: results.csv marks the run done
                    _append(out / "results.csv", RESULT_COLUMNS, [row])
                    runs_bar.update(1)
                    runs_bar.set_postfix_str(f"last N={key[0]} {key[1]} seed {key[2]}: welfare {row['eval_welfare']:.1f}, {row['run_seconds']:.0f}s")
        finally:
            for ref in running:  # interrupted: stop the runs in flight (on a cluster too)
                ray.cancel(ref, force=True)
            steps_bar.close()
            runs_bar.close()
        if failed:
            raise StudyError(f"{len(failed)} run(s) failed and were not recorded (running the same command again retries them):\n  "
                             + "\n  ".join(failed))
    finally:
        if started:
            ray.shutdown()


# --- the report ----------------------------------------------------------------------------------


#: Two-sided 95% Student-t quantiles t(0.975, df) for df = 1 .. 30 (any statistics table;
#: e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t95(k: int) -> float:
    """Two-sided 95% Student-t quantile for k - 1 degrees of freedom (1.96 above 30)."""
    if k < 2:
        return float("nan")
    return _T975[k - 2] if k - 1 <= len(_T975) else 1.96


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval) of ``values`` across seeds (nan width for one)."""
    v = np.asarray([float(x) for x in values], np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan")
    return float(v.mean()), _t95(v.size) * float(v.std(ddof=1)) / math.sqrt(v.size)


def _fmt(m: float, h: float, f: str) -> str:
    return f.format(m) + ("" if math.isnan(h) else " ± " + f.format(h))


def summary_table(rows: list[dict]) -> str:
    """Markdown: per N and scheme, the mean ± 95% half-width across seeds of every SUMMARY column."""
    schemes = [s for s in REWARD_SCHEMES if any(r["scheme"] == s for r in rows)]
    head = ["N", "scheme", "seeds", *(h for _, h, _ in SUMMARY), "reward ms / step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sorted({int(r["n"]) for r in rows}):
        for s in schemes:
            rs = [r for r in rows if int(r["n"]) == n and r["scheme"] == s]
            if not rs:
                continue
            cells = [str(n), f"`{s}`", str(len(rs))]
            cells += [_fmt(*mean_ci([r[c] for r in rs]), f) for c, _, f in SUMMARY]
            cells.append(f"{np.mean([float(r['credit_ms_per_step']) for r in rs]):.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


OTHERS = "others"  # in a comparison: the mean, per seed, of every other scheme


def _by_seed(rows: list[dict], n: int, scheme: str, column: str) -> dict[int, float]:
    if scheme != OTHERS:
        return {int(r["seed"]): float(r[column]) for r in rows if int(r["n"]) == n and r["scheme"] == scheme}
    acc: dict[int, list[float]] = {}
    for r in rows:
        if int(r["n"]) == n and r["scheme"] != "local":
            acc.setdefault(int(r["seed"]), []).append(float(r[column]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def paired(rows: list[dict], a: str, b: str, column: str = "eval_welfare") -> dict[int, tuple[float, float, int, int]]:
    """Per N: (mean of a - b paired by seed, 95% half-width, seeds where a > b, seeds). ``b``
    may be ``OTHERS``: the mean of every scheme but ``local`` on the same seed."""
    out = {}
    for n in sorted({int(r["n"]) for r in rows}):
        va, vb = _by_seed(rows, n, a, column), _by_seed(rows, n, b, column)
        common = sorted(set(va) & set(vb))
        if common:
            d = [va[s] - vb[s] for s in common]
            m, h = mean_ci(d)
            out[n] = (m, h, sum(x > 0 for x in d), len(common))
    return out


#: The prediction's comparisons: (a, b, column, label); a - b paired by seed.
COMPARISONS = (
    ("difference", "global", "eval_welfare", "welfare"),
    ("difference_default", "global", "eval_welfare", "welfare"),
    ("shapley", "global", "eval_welfare", "welfare"),
    ("mixed", "global", "eval_welfare", "welfare"),
    ("local", "global", "eval_welfare", "welfare"),
    ("difference", "local", "eval_welfare", "welfare"),
    ("local", OTHERS, "starvation_events", "starvation events"),
    ("local", OTHERS, "jain", "Jain"),
)


def prediction_table(rows: list[dict]) -> str:
    """Markdown: the prediction's comparisons per N, paired by seed, and whether the
    difference-global gap grows with N (its change from the smallest N; independent runs, so
    the half-widths add in quadrature)."""
    ns = sorted({int(r["n"]) for r in rows})
    lines = ["| comparison (paired by seed) | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]

    def cell(m, h, f, wins=None, k=None):
        return _fmt(m, h, f).replace("± +", "± ").replace("± -", "± ") + (f" ({wins}/{k})" if k else "")

    for a, b, col, label in COMPARISONS:
        p = paired(rows, a, b, col)
        if not p:
            continue
        f = "{:+.3f}" if col == "jain" else "{:+.1f}"
        other = "the mean of the other schemes" if b == OTHERS else f"`{b}`"
        lines.append(f"| {label}: `{a}` − {other} | " + " | ".join(cell(*p[n][:2], f, *p[n][2:]) if n in p else "" for n in ns) + " |")
    gap = paired(rows, "difference", "global")
    if len(gap) > 1:
        n0 = min(gap)
        cells = []
        for n in ns:
            if n not in gap or n == n0:
                cells.append("" if n != n0 else "(reference)")
                continue
            h = math.hypot(gap[n][1], gap[n0][1]) if not (math.isnan(gap[n][1]) or math.isnan(gap[n0][1])) else float("nan")
            cells.append(cell(gap[n][0] - gap[n0][0], h, "{:+.1f}"))
        lines.append(f"| growth of the welfare gap `difference` − `global` since N={n0} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _save(fig, ax, path: Path) -> Path:
    """Grid, legend, and the PNG at ``path``; closes the figure."""
    import matplotlib.pyplot as plt

    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(curves: list[dict], n: int, path: Path, label: str = "") -> Path | None:
    """Training welfare against env steps at one N: mean and 95% interval across seeds, per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [c for c in curves if int(c["n"]) == n and c["welfare"] not in ("", None)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s in REWARD_SCHEMES:
        rs = [c for c in rows if c["scheme"] == s]
        if not rs:
            continue
        its = sorted({int(c["iteration"]) for c in rs})
        x, m, lo, hi = [], [], [], []
        for it in its:
            pts = [c for c in rs if int(c["iteration"]) == it]
            mu, h = mean_ci([c["welfare"] for c in pts])
            h = 0.0 if math.isnan(h) else h
            x.append(np.mean([float(c["env_steps"]) for c in pts]))
            m.append(mu)
            lo.append(mu - h)
            hi.append(mu + h)
        (line,) = ax.plot(x, m, marker="o", ms=3, label=s)
        ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("env steps")
    ax.set_ylabel("training welfare per episode")
    ax.set_title(f"N = {n} tenants{label}\nPPO, shared policy: training welfare, mean and 95% interval across seeds", fontsize=9)
    return _save(fig, ax, path)


def plot_scaling(rows: list[dict], path: Path) -> Path | None:
    """The grader's score of each scheme against N (mean, 95% interval across seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    ns = sorted({int(r["n"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4.2))
    schemes = [s for s in REWARD_SCHEMES if any(r["scheme"] == s for r in rows)]
    for j, s in enumerate(schemes):
        xs, ms, hs = [], [], []
        for n in ns:
            v = [r["score"] for r in rows if int(r["n"]) == n and r["scheme"] == s]
            if v:
                mu, h = mean_ci(v)
                xs.append(ns.index(n) + (j - (len(schemes) - 1) / 2) * 0.08)
                ms.append(mu)
                hs.append(0.0 if math.isnan(h) else h)
        lo = [m - max(m - h, 0.0) for m, h in zip(ms, hs)]  # the score lives in [0, 1]: so do its intervals
        hi = [min(m + h, 1.0) - m for m, h in zip(ms, hs)]
        ax.errorbar(xs, ms, yerr=[lo, hi], marker="o", ms=4, capsize=3, label=s)
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_xlabel("tenants N")
    ax.set_ylabel("grader score (0 = random, 1 = planner)")
    ax.set_title("Greedy policy after the same env-step budget (mean, 95% interval across seeds, clipped to [0, 1])", fontsize=9)
    return _save(fig, ax, path)


def report(out: str | Path, img_dir: str | Path | None = None, img_prefix: str = "", echo=print) -> dict:
    """Write ``summary.md`` and the plots for the study in ``out``; returns what it wrote."""
    out = Path(out)
    rows, curves = _read(out / "results.csv"), _read(out / "curves.csv")
    if not rows:
        raise StudyError(f"--out {str(out)!r}: no finished runs in results.csv yet; run the study first")
    settings = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
    img = Path(img_dir) if img_dir else out
    plots = {}
    for n in sorted({int(r["n"]) for r in rows}):
        b = settings.get("budgets", {}).get(str(n))
        label = (f", {settings['mechanism']} arbiter" if "mechanism" in settings else "") + (f", {b:,} env steps" if b else "")
        p = plot_curves(curves, n, img / f"{img_prefix}curves_n{n}.png", label)
        if p:
            plots[n] = p
    scaling = plot_scaling(rows, img / f"{img_prefix}scaling.png")
    table, pred = summary_table(rows), prediction_table(rows)
    total = sum(float(r["run_seconds"]) for r in rows)
    text = (f"# Credit-assignment study: {out}\n\n{len(rows)} runs, {total / 3600:.2f} CPU-hours of runs. Mean ± 95% interval "
            f"across seeds (Student t).\n\n## Summary\n\n{table}\n\n## The prediction, paired by seed\n\n"
            f"Mean difference ± 95% interval (seeds where the first is larger / seeds).\n\n{pred}\n")
    (out / "summary.md").write_text(text)
    echo(f"\n{table}\n\n{pred}\n\nwrote {out / 'summary.md'}, " + ", ".join(str(p) for p in [*plots.values(), scaling] if p))
    return {"summary": out / "summary.md", "table": table, "prediction": pred, "curves": plots, "scaling": scaling, "rows": rows}


DOC = "docs/credit_assignment.md"
START, END = "<!-- credit-assignment:start -->", "<!-- credit-assignment:end -->"


def docs_targets(mechanism: str) -> dict:
    """Where ``--docs`` writes a study run under ``mechanism``: the study's own arbiter
    (proportional) has the main block; another arbiter gets its own block (markers
    ``credit-assignment-<mechanism>``), data folder and image prefix, so it never replaces
    the main study's numbers."""
    if mechanism == Study.mechanism:
        return {"start": START, "end": END, "data": "docs/data/credit_assignment", "prefix": "credit_"}
    return {"start": f"<!-- credit-assignment-{mechanism}:start -->", "end": f"<!-- credit-assignment-{mechanism}:end -->",
            "data": f"docs/data/credit_assignment_{mechanism}", "prefix": f"credit_{mechanism}_"}


def command(settings: dict, out: str | Path | None = None) -> str:
    """The ``fleet-marl compare`` command that runs the study of ``settings`` (study.json)."""
    quick = Study.quick().settings()
    is_quick = settings.get("train_batch_size") == quick["train_batch_size"] and settings.get("max_cycles") == quick["max_cycles"]
    base = quick if is_quick else Study().settings()
    parts = ["fleet-marl compare"] + (["--quick"] if is_quick else [])
    flags = {"ns": ("--n", lambda v: ",".join(map(str, v))), "schemes": ("--schemes", ",".join), "seeds": ("--seeds", str),
             "budgets": ("--budget", lambda v: ",".join(f"{k}={b}" for k, b in v.items())), "episodes": ("--episodes", str),
             "mechanism": ("--mechanism", str)}
    for key, (flag, fmt) in flags.items():
        if key in settings and settings[key] != base[key]:
            parts.append(f"{flag} {fmt(settings[key])}")
    rest = sorted(k for k in base if k not in flags and settings.get(k) != base[k])
    if out is not None:
        parts.append(f"--out {out}")
    text = " ".join(parts)
    return text + (f" (and, from Python, Study({', '.join(f'{k}={settings.get(k)!r}' for k in rest)}))" if rest else "")


def wall_hours(rows: list[dict]) -> float:
    """Hours from the first run's start to the last run's end (includes any pause before a resume)."""
    import datetime as dt

    ends = [dt.datetime.fromisoformat(r["finished"]) for r in rows]
    starts = [e - dt.timedelta(seconds=float(r["run_seconds"])) for e, r in zip(ends, rows)]
    return (max(ends) - min(starts)).total_seconds() / 3600


def write_docs(out: str | Path, root: str | Path | None = None, echo=print, allow_quick: bool = False) -> Path:
    """Copy the study in ``out`` into the checkout's docs: the CSVs to
    ``docs/data/credit_assignment/``, the plots to ``docs/img/credit_*.png`` and the tables,
    with the command that reproduces them, between the markers of ``docs/credit_assignment.md``
    (a study under another arbiter than proportional goes to its own block: :func:`docs_targets`).
    A ``--quick`` study is refused (it would replace the full study's numbers) unless
    ``allow_quick``."""
    import re
    import shutil

    from fleet_marl.baselines import checkout

    root = Path(root) if root else checkout()
    if root is None:
        raise StudyError("--docs: this fleet_marl is not a source checkout (no docs/ to write); drop --docs")
    out = Path(out)
    if not (out / "study.json").is_file():
        raise StudyError(f"--out {str(out)!r}: no study.json; --docs needs a study run by fleet-marl compare")
    settings = json.loads((out / "study.json").read_text())
    quick = "--quick" in command(settings).split()
    default_out = Study.quick().out if quick else Study.out
    out_arg = "" if out.resolve() == Path(default_out).resolve() else f" --out {out.as_posix()}"
    cmd = command(settings, out.as_posix() if out_arg else None)
    if quick and not allow_quick:
        raise StudyError(f"--docs with the quick study in {str(out)!r}: its numbers mean nothing and would replace the full study's "
                         "in docs/; drop --docs (the report is in the study folder)")
    where = docs_targets(settings.get("mechanism", Study.mechanism))
    start, end = where["start"], where["end"]
    data = root / where["data"]
    data.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "curves.csv", "study.json"):
        if (out / name).is_file():
            shutil.copyfile(out / name, data / name)
    rep = report(out, img_dir=root / "docs" / "img", img_prefix=where["prefix"], echo=lambda *_: None)
    imgs = "\n\n".join(f"![N = {n}](img/{p.name})" for n, p in sorted(rep["curves"].items()))
    budgets = ", ".join(f"N={n}: {b:,}" for n, b in settings["budgets"].items() if int(n) in settings["ns"])
    total = sum(float(r["run_seconds"]) for r in rep["rows"])
    block = (f"{start}\n<!-- written by `fleet-marl compare --report --docs`; edit the text around it, not this block -->\n\n"
             f"Reproduce: `{cmd}`, then `fleet-marl compare{out_arg} --report --docs`. {len(rep['rows'])} runs; env-step budget per run {budgets}; "
             f"{settings['seeds']} seeds; {settings['episodes']} grader episodes per run; arbiter `{settings['mechanism']}`; "
             f"sharing `{settings['sharing']}`. The runs took {total / 3600:.2f} CPU-hours, {wall_hours(rep['rows']):.2f} hours of "
             f"wall time from the first start to the last finish. The data: "
             f"[`{where['data']}/`]({where['data'].removeprefix('docs/')}/).\n\n"
             f"### Summary (mean ± 95% interval across seeds)\n\n{rep['table']}\n\n"
             f"### The prediction, paired by seed\n\nMean difference ± 95% interval; in brackets, the seeds where the first "
             f"scheme is larger.\n\n{rep['prediction']}\n\n### Learning curves\n\n{imgs}\n\n"
             f"### Score against N\n\n![score against N](img/{rep['scaling'].name})\n{end}")
    path = root / DOC
    old = path.read_text() if path.is_file() else ""
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else (old.rstrip() + "\n\n" + block + "\n")
    path.write_text(new)
    echo(f"wrote {path}, {data}/ and docs/img/{where['prefix']}*.png")
    return path


__all__ = ["COMPARISONS", "DOC", "docs_targets", "OTHERS", "command", "wall_hours", "write_docs", "FULL_BUDGETS", "QUICK_BUDGETS", "Study", "StudyError", "mean_ci", "paired", "prepare", "report", "run", "run_one"]

"""The credit-assignment study behind ``fleet-marl compare`` (``experiments/credit_assignment.py``).

Which reward should each tenant learn from? The study trains PPO (one shared, masked policy)
on :func:`fleet_marl.tasks.scaled` -- task ``easy`` grown to N tenants with the cluster
growing with it, under the proportional-share arbiter -- once for every reward scheme, every
N and every seed, with the same budget of env steps for every scheme at a given N. Each run
is then graded by :func:`fleet_marl.evaluation.evaluate` (the greedy policy on the grader's
seeds, against the random and planner references), on the global welfare and on fairness.

Runs execute as Ray tasks, one CPU each, ``--jobs`` at a time. Each finished run appends a
row to ``results.csv`` and its learning curve to ``curves.csv`` under ``--out``, so a killed
study resumes where it stopped: runs already in ``results.csv`` are skipped. ``study.json``
records the settings; resuming with different ones is refused.
:func:`fleet_marl.studies.report.report` turns the CSVs into the summary table and the plots
(mean and 95% interval across seeds)::

    out = run(Study(ns=(2, 4), seeds=5))   # the missing runs
    report(out)                            # summary.md and the plots

Nothing here imports Ray at import time; :func:`run` and :func:`run_one` do.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fleet_marl.config import MECHANISMS, REWARD_SCHEMES
from fleet_marl.evaluation import evaluate, reference_episodes
from fleet_marl.rllib.config import TrainConfig, build
from fleet_marl.studies import store
from fleet_marl.studies.store import StudyError, read_rows
from fleet_marl.tasks import scaled

#: The full study's env-step budget per run, by N (the same for every scheme and seed). At
#: 2,000 env steps per PPO iteration, that is 12, 12, 8 and 8 iterations. Measured on the
#: 2-core machine, two runs at a time: an iteration took about 9, 12, 16 and 22 s at N = 2, 4, 8,
#: 16 (shapley at N = 16 about 12 s more), and the 72 runs took 2.93 CPU-hours, about 90 minutes.
FULL_BUDGETS = {2: 24_000, 4: 24_000, 8: 16_000, 16: 16_000}
QUICK_BUDGETS = {2: 400, 4: 400}

RESULT_COLUMNS = (
    "n",
    "scheme",
    "seed",
    "iterations",
    "env_steps",
    "agent_steps",
    "train_welfare",
    "eval_welfare",
    "score",
    "jain",
    "starvation_events",
    "degenerate",
    "illegal",
    "random_welfare",
    "planner_welfare",
    "run_seconds",
    "train_seconds",
    "eval_seconds",
    "credit_seconds",
    "credit_ms_per_step",
    "finished",
)
CURVE_COLUMNS = ("n", "scheme", "seed", "iteration", "env_steps", "welfare", "jain", "starvation_events", "degenerate", "seconds")


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
    def quick(cls, **changes) -> Study:
        """About a minute: N = 2 and 4, two seeds, two PPO iterations of 200 env steps per run,
        episodes of 20 rounds, two grader episodes. It checks the pipeline, not the science."""
        base = dict(
            ns=(2, 4),
            seeds=2,
            budgets=dict(QUICK_BUDGETS),
            train_batch_size=200,
            minibatch_size=100,
            num_epochs=2,
            episodes=2,
            max_cycles=20,
            out="runs/credit_assignment_quick",
        )
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
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
                bad(
                    "budget",
                    ",".join(f"{k}={v}" for k, v in self.budgets.items()),
                    f"a budget for every N (missing N={n}); e.g. --budget {n}=20000",
                )
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
        return {**scaled(n, self.mechanism), "max_cycles": self.max_cycles}

    def runs(self) -> list[tuple[int, str, int]]:
        """Every (N, scheme, seed), smallest N first."""
        return [(n, s, seed) for n in sorted(self.ns) for seed in range(self.seeds) for s in self.schemes]

    def train_config(self, n: int, scheme: str, seed: int) -> TrainConfig:
        return TrainConfig(
            task="easy",
            reward_scheme=scheme,
            sharing=self.sharing,
            env={**self.env(n), "shapley_samples": self.shapley_samples},
            iterations=self.iterations(n),
            seed=seed,
            train_batch_size=self.train_batch_size,
            minibatch_size=min(self.minibatch_size, self.train_batch_size),
            num_epochs=self.num_epochs,
            lr=self.lr,
            eval_interval=0,
            checkpoint_interval=0,
            out=self.out,
            name=f"n{n}-{scheme}-{seed}",
        )

    def settings(self) -> dict:
        """What a resumed study must match (everything but ``out``)."""
        d = asdict(self)
        d.pop("out")
        d["schemes"], d["ns"] = list(self.schemes), list(self.ns)
        d["budgets"] = {str(k): v for k, v in sorted(self.budgets.items())}
        return d


# --- one run (inside a Ray task) ---------------------------------------------------------------


def run_one(study: Study, n: int, scheme: str, seed: int, progress=None) -> tuple[dict, list[dict]]:
    """Train and grade one (N, scheme, seed); returns its results row and learning curve."""
    # Ray: only inside a run
    from fleet_marl.rllib.env import credit_timing  # Ray
    from fleet_marl.rllib.evaluation import algorithm_policy  # Ray
    from fleet_marl.rllib.train import flatten, quiet  # Ray

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
            curve.append(
                {
                    "n": n,
                    "scheme": scheme,
                    "seed": seed,
                    "iteration": it,
                    "env_steps": steps,
                    **{k: flat.get(f"env_runners/fleet/{k}", "") for k in ("welfare", "jain", "starvation_events", "degenerate")},
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            if progress is not None:
                progress.put(steps - prev)
        t1 = time.perf_counter()
        credit_s, env_steps_taken = credit_timing(algo)
        env_steps_taken = max(env_steps_taken, 1)
        ev = evaluate(
            "easy", lambda env: algorithm_policy(algo, env), episodes=study.episodes, seed=0, overrides=study.env(n), progress=False
        )
    finally:
        algo.stop()
    t2 = time.perf_counter()
    eps = ev.episodes
    welfare = [c["welfare"] for c in curve if c["welfare"] != ""]
    row = {
        "n": n,
        "scheme": scheme,
        "seed": seed,
        "iterations": tc.iterations,
        "env_steps": steps,
        "agent_steps": agent_steps,
        "train_welfare": welfare[-1] if welfare else "",
        "eval_welfare": float(ev.welfare.mean()),
        "score": ev.score,
        "jain": float(np.mean([e.jain for e in eps])),
        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
        "illegal": float(np.mean([e.illegal for e in eps])),
        "random_welfare": float(np.mean(ev.random_welfare)),
        "planner_welfare": float(np.mean(ev.reference_welfare)),
        "run_seconds": round(t2 - t0, 2),
        "train_seconds": round(t1 - t0, 2),
        "eval_seconds": round(t2 - t1, 2),
        "credit_seconds": round(credit_s, 3),
        "credit_ms_per_step": round(1e3 * credit_s / env_steps_taken, 4),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return row, curve


# --- the store and the scheduler ------------------------------------------------------------------


def _key(row: dict) -> tuple[int, str, int]:
    return int(row["n"]), str(row["scheme"]), int(row["seed"])


def _complete(row: dict, columns) -> bool:
    """False for a row cut short by a kill in the middle of a write."""
    return store.complete(row, ("n", "scheme", "seed"), columns, _key)


def prepare(study: Study, overwrite: bool = False) -> tuple[Path, set]:
    """Check the study and its folder; returns (folder, runs already done). Nothing is
    deleted unless ``overwrite``, and only after every check passed."""
    study.check()
    out = Path(study.out)
    store.open_folder(out, study.settings(), overwrite, ("results.csv", "curves.csv"))
    return out, store.resume(out, RESULT_COLUMNS, CURVE_COLUMNS, _complete, _key, set(study.runs()))


def run(study: Study, *, jobs: int = 2, address: str | None = None, overwrite: bool = False, progress: bool = True, echo=print) -> Path:
    """Run every missing run of ``study``; returns the output folder (for
    :func:`fleet_marl.studies.report.report`)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise StudyError(f"--jobs {jobs!r}: expected an integer >= 1")
    out, done = prepare(study, overwrite)
    todo = [r for r in study.runs() if r not in done]
    echo(
        f"credit-assignment study in {out}: {len(study.runs())} runs, {len(done)} done, {len(todo)} to go "
        f"(budgets {', '.join(f'N={n}: {study.budgets[n]:,} env steps' for n in sorted(study.ns))})"
    )
    if todo:
        _run_all(study, out, todo, jobs, address, progress, echo)
    return out


def _references(study: Study, progress: bool) -> None:
    """Play the grader's random and planner episodes once per N (cached on disk), before the
    runs that all need them."""
    # the grader's seeds, and the 3 (TrainConfig.eval_episodes) of the training score
    seeds = range(max(study.episodes, 3))
    with tqdm(
        total=2 * len(study.ns) * len(seeds), desc="references (random, planner)", unit="ep", disable=not progress, leave=False
    ) as bar:
        for n in sorted(study.ns):
            for name in ("random", "planner"):
                reference_episodes("easy", name, seeds, study.env(n), progress=bar)


def _run_all(study: Study, out: Path, todo: list, jobs: int, address: str | None, progress: bool, echo) -> None:
    # Ray: only when the study runs
    import ray  # Ray
    from ray.util.queue import Empty, Queue  # Ray

    from fleet_marl.rllib.train import init_ray  # Ray

    _references(study, progress)
    # on this machine, the workers' log lines would break the progress bars; their errors still come back
    started = init_ray(address, log_to_driver=bool(address))
    try:
        queue = Queue(actor_options={"num_cpus": 0})
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        total_steps = sum(study.iterations(n) * study.train_batch_size for n, _, _ in todo)
        pending = list(todo)
        running: dict = {}
        failed: list[str] = []
        runs_bar = tqdm(total=len(todo), desc="runs", unit="run", position=0, disable=not progress)
        steps_bar = tqdm(
            total=total_steps, desc="env steps", unit="step", unit_scale=True, position=1, disable=not progress, smoothing=0.05
        )
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
                        failed.append(
                            f"N={key[0]} scheme={key[1]} seed={key[2]}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}"
                        )
                        runs_bar.update(1)
                        continue
                    store.append(out / "curves.csv", CURVE_COLUMNS, curve)  # the curve first: results.csv marks the run done
                    store.append(out / "results.csv", RESULT_COLUMNS, [row])
                    runs_bar.update(1)
                    runs_bar.set_postfix_str(
                        f"last N={key[0]} {key[1]} seed {key[2]}: welfare {row['eval_welfare']:.1f}, {row['run_seconds']:.0f}s"
                    )
        finally:
            for ref in running:  # interrupted: stop the runs in flight (on a cluster too)
                ray.cancel(ref, force=True)
            steps_bar.close()
            runs_bar.close()
        if failed:
            raise StudyError(
                f"{len(failed)} run(s) failed and were not recorded (running the same command again retries them):\n  "
                + "\n  ".join(failed)
            )
    finally:
        if started:
            ray.shutdown()


__all__ = [
    "CURVE_COLUMNS",
    "FULL_BUDGETS",
    "QUICK_BUDGETS",
    "RESULT_COLUMNS",
    "Study",
    "StudyError",
    "prepare",
    "read_rows",
    "run",
    "run_one",
]

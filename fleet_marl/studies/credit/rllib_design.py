"""The first credit-assignment study's design, on the RLlib engine (``fleet-marl compare --engine rllib``).

Which reward should each tenant learn from? The first study trains PPO (one shared, masked
policy) on :func:`fleet_marl.tasks.scaled` -- task ``easy`` grown to N tenants with the
cluster growing with it, under one arbiter (``mechanism``, proportional share by default) --
once for every reward scheme, every N and every seed, with the same budget of env steps for
every scheme at a given N. Each run is then graded by :func:`fleet_marl.evaluation.evaluate`
(the greedy policy on the grader's seeds, against the random and planner references), on the
global welfare and on fairness.

A run's key is ``(n, scheme, seed)``. How the runs run (Ray tasks, one CPU each) is
:mod:`fleet_marl.studies.credit.rllib_runs`; the store, resuming and the report are the
study's (:mod:`fleet_marl.studies.credit`). Its committed data (``docs/data/credit_assignment/``)
reproduces its tables in ``docs/credit_assignment.md``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from fleet_marl.config import MECHANISMS, REWARD_SCHEMES
from fleet_marl.rllib.config import TrainConfig
from fleet_marl.studies.store import StudyError
from fleet_marl.tasks import scaled

#: The engine that trains this design's runs.
ENGINE = "rllib"
KEY = ("n", "scheme", "seed")


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
class RLlibStudy:
    """The first credit-assignment study. ``schemes``, ``ns``, ``seeds``, ``budgets``,
    ``episodes``, ``mechanism`` and ``out`` are ``fleet-marl compare --engine rllib`` options;
    the PPO settings are set from Python (``RLlibStudy(lr=1e-3)``)."""

    ENGINE: ClassVar[str] = ENGINE
    KEY: ClassVar[tuple[str, ...]] = KEY
    RESULT_COLUMNS: ClassVar[tuple[str, ...]] = RESULT_COLUMNS
    CURVE_COLUMNS: ClassVar[tuple[str, ...]] = CURVE_COLUMNS
    #: what --overwrite removes from the study folder (with study.json)
    FILES: ClassVar[tuple[str, ...]] = ("results.csv", "curves.csv")

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
    def quick(cls, **changes: Any) -> RLlibStudy:
        """About a minute: N = 2 and 4, two seeds, two PPO iterations of 200 env steps per run,
        episodes of 20 rounds, two grader episodes. It checks the pipeline, not the science."""
        base: dict[str, Any] = dict(
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

    @staticmethod
    def key(row: dict) -> tuple:
        """The key of a row of results.csv or curves.csv."""
        return int(row["n"]), str(row["scheme"]), int(row["seed"])

    def budget_note(self) -> str:
        """What the study's first line says about its budgets."""
        return f" (budgets {', '.join(f'N={n}: {self.budgets[n]:,} env steps' for n in sorted(self.ns))})"


__all__ = ["CURVE_COLUMNS", "ENGINE", "FULL_BUDGETS", "KEY", "QUICK_BUDGETS", "RESULT_COLUMNS", "RLlibStudy", "StudyError"]

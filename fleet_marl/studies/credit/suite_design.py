"""The credit-assignment study on the suite (``fleet-marl compare --suite``): the study's arms
trained on the suite's tasks (:mod:`fleet_marl.suite`), each graded on held-out scenarios and on
its train scenarios.

One part, ``suite``: for every family in ``families`` (:data:`fleet_marl.suite.FAMILIES`), every
n in ``ns`` and every arm in ``arms`` (:data:`~fleet_marl.studies.credit.torchrl_design.ARMS`),
``seeds`` runs of PPO (:mod:`fleet_marl.torchrl`). A run's key is ``("suite", family, n, arm,
seed)``; its env is the suite task itself, ``f"{family}_n{n}"``, with no overrides but the
``shapley`` arm's ``shapley_samples`` (and ``max_cycles`` when set: the quick study's short
episodes), so it trains on the task's first train scenarios (``FleetTorchEnv(task=...)``: its
clusters spread over train scenarios 0..31) and is graded on scenarios 0 .. episodes - 1 of a
split (:func:`fleet_marl.evaluation.evaluate` on a suite task).

=====================  =======================================================================
arm                    what it is
=====================  =======================================================================
``local``              independent PPO on the local reward (IPPO, de Witt et al. 2020: each
                       tenant learns from its own reward alone, one actor and critic shared by
                       all tenants): the issue's "independent PPO on local" baseline
``global``             the team's reward, to every tenant, shared actor and critic
``difference``         the difference reward (the baseline of the paired tables)
``shapley``            the Shapley reward (sampled permutations above 8 tenants)
``mappo``              the global reward with a centralized critic on the state
``difference_k4``      the 4-round difference (a tenant's removal carried forward 4 rounds:
                       restarts, heat, queues; docs/credit_horizon.md), PPO as ``difference``
=====================  =======================================================================

**Value decomposition**: the arms ``qmix`` and ``vdn``
(:data:`~fleet_marl.studies.credit.benchmarl_runs.VALUE_ARMS`, trained on BenchMARL:
:data:`ENGINES`) train BenchMARL's QMIX and VDN from its own configs on the same env (the
task's clusters over its train scenarios), the team's reward (``global``), the same env-step
budget and seed as the PPO arms, each tenant picking from a menu of GPUs x bid level; they are
graded the same way into the same columns (:mod:`~fleet_marl.studies.credit.benchmarl_runs`).

**Budgets** are the scaling part's: ``iterations`` PPO iterations of ``num_envs(n) x rollout``
env steps, ``num_envs(n) = agents_per_step // n`` clusters (at least ``min_envs``), so an
iteration holds the same agent steps at every n, and every arm the same budget at an n.

**Grading.** At ``eval_fractions`` of the budget the greedy policy is graded on ``split``
(``heldout``, or ``shift``): the learning curve, and the run's ``score``, ``eval_welfare``,
Jain, starvation and degenerate events (the existing columns, on that split). The last grading
also plays the hindsight reference (``hindsight``): ``gap`` (to the hindsight reference, the
headline of issue 48's item 7) and ``hindsight_welfare``. The final policy is then graded on the
train split's scenarios 0 .. episodes - 1 (scenarios it trained on): the ``train_*`` columns,
the same figures, ``train_gap`` only with ``train_hindsight`` (off by default: the hindsight
reference costs far more than a run's grading, about 90 s of CPU per scenario at n = 32, and
the issue's headline gap is the held-out one). Every reference episode (random, planner,
hindsight) of each scenario is computed once, before the runs (:meth:`SuiteStudy.reference_jobs`),
and cached on disk.

**Baselines** (issue 48, item 3). Before the runs, the ``open_loop`` baseline (one table of joint
actions per round, searched on the task's train scenarios: it sees only the round index) is
graded on each task of the study exactly as a run is (the same ``split``, ``episodes`` and
``max_cycles``, so it shares the runs' cached references) and stored in the study folder's
``baselines.csv`` (:meth:`SuiteStudy.baseline_jobs`, :meth:`SuiteStudy.baseline`,
:mod:`~fleet_marl.studies.credit.suite_baselines`): once per task, resumable. The report reads
that file and never plays an episode. Its search spends ``open_loop_budget`` tenant-rounds at most
(None, the study's: the grader's ``OPEN_LOOP_BUDGET``, 30,000,000; the quick study's 250,000,
which checks the pipeline at a fraction of the search's cost, not the baseline's strength). The ``local`` arm is the other baseline the issue
asks for, independent PPO on ``local``, and the report's baseline table names it so.

    out = run(SuiteStudy(families=("scarce",), ns=(8, 32), seeds=3))   # fleet_marl.studies.credit.run
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fleet_marl import suite
from fleet_marl.evaluation import evaluate
from fleet_marl.studies.credit import benchmarl_runs, rows, suite_baselines
from fleet_marl.studies.credit.torchrl_design import ARMS, RESULT_COLUMNS, Study, _bad

#: The suite study's one part.
PART = "suite"
#: The arms the suite study runs by default (of :data:`~fleet_marl.studies.credit.torchrl_design.ARMS`).
SUITE_ARMS = ("local", "global", "difference", "shapley", "mappo", "difference_k4")
#: The engine that trains each arm the suite study takes: TorchRL's PPO, or BenchMARL for the
#: value-decomposition arms (:data:`~fleet_marl.studies.credit.benchmarl_runs.VALUE_ARMS`).
ENGINES = {**dict.fromkeys(ARMS, "torchrl"), **dict.fromkeys(benchmarl_runs.VALUE_ARMS, benchmarl_runs.ENGINE)}
#: The columns of a run graded on the train split: the graded split's figures, prefixed.
TRAIN_COLUMNS = (
    "train_eval_welfare",
    "train_score",
    "train_gap",
    "train_jain",
    "train_starvation_events",
    "train_degenerate",
    "train_random_welfare",
    "train_planner_welfare",
    "train_hindsight_welfare",
)
#: ``results.csv`` of the suite study: the study's columns (on the graded split), the gap to the
#: hindsight reference, the train split's figures and the runs' CPU time; ``finished`` last.
SUITE_RESULT_COLUMNS = (
    *RESULT_COLUMNS[:-1],
    "gap",
    "hindsight_welfare",
    *TRAIN_COLUMNS,
    "cpu_seconds",
    "eval_cpu_seconds",
    RESULT_COLUMNS[-1],
)
#: The scaling part's settings the suite study has no use for: left at their defaults and out of study.json.
UNUSED = ("mechanisms", "sharing_arms", "sharing_tasks", "sharing_iterations")


@dataclass
class SuiteStudy(Study):
    """The study on the suite (see the module docstring). Every field but ``out`` is recorded in
    ``study.json`` (but :data:`UNUSED`); the PPO settings are :class:`Study`'s."""

    RESULT_COLUMNS: ClassVar[tuple[str, ...]] = SUITE_RESULT_COLUMNS
    #: what --overwrite removes from the study folder (with study.json): the runs' files and the baselines'
    FILES: ClassVar[tuple[str, ...]] = (*Study.FILES, suite_baselines.BASELINES)

    arms: tuple = SUITE_ARMS
    ns: tuple = (8, 16, 32, 64)
    max_cycles: int | None = None  # None: the task's own episodes (the study); the quick study's are shorter
    out: str = "runs/credit_suite"
    families: tuple = ("aligned", "proportional", "scarce", "power")
    split: str = "heldout"  # the split of the run's score (and its curve); the train split is graded too (train_*)
    hindsight: bool = True  # the last grading on `split` plays the hindsight reference: gap
    train_hindsight: bool = False  # ... and the train split's: train_gap (twice the references' cost)
    open_loop_budget: int | None = None  # the open_loop baseline's search, tenant-rounds (None: the grader's OPEN_LOOP_BUDGET)

    @classmethod
    def quick(cls, **changes) -> SuiteStudy:
        """A minute or two: families ``aligned`` and ``power`` at n = 4, two seeds, arms local,
        global and difference; five tiny iterations per run, episodes of 20 rounds, one grader
        scenario per split, the open_loop baseline searched with 250,000 tenant-rounds at most
        (``open_loop_budget``; the grader's is 30,000,000). It checks the pipeline, not the science."""
        base: dict[str, Any] = dict(
            families=("aligned", "power"),
            ns=(4,),
            arms=("local", "global", "difference"),
            seeds=2,
            iterations=5,
            agents_per_step=32,
            min_envs=2,
            rollout=4,
            epochs=1,
            minibatches=2,
            hidden=(16, 16),
            eval_fractions=(0.4, 0.8, 1.0),
            episodes=1,
            max_cycles=20,
            train_hindsight=True,  # the pipeline check grades every column
            open_loop_budget=250_000,  # the baseline's search: a check of the pipeline, not the grader's budget
            out="runs/credit_suite_quick",
        )
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
        bad = _bad
        for name, allowed in (("arms", ENGINES), ("families", suite.FAMILIES)):
            values = getattr(self, name)
            if not values:
                bad(name, "", f"at least one of {', '.join(allowed)}")
            for v in values:
                if v not in allowed:
                    bad(name, v, f"values from {', '.join(allowed)}")
            if len(set(values)) != len(values):
                bad(name, ",".join(values), "a list without repeats")
        if not self.ns:
            bad("n", "", "at least one team size")
        for n in self.ns:
            if isinstance(n, bool) or not isinstance(n, int):
                bad("n", n, f"team sizes of the suite ({', '.join(map(str, suite.NS))})")
            for f in self.families:
                if n not in suite.FAMILIES[f].ns:
                    bad("n", n, f"team sizes family {f} has: {', '.join(map(str, suite.FAMILIES[f].ns))} (fleet-marl suite list)")
        if len(set(self.ns)) != len(self.ns):
            bad("n", ",".join(map(str, self.ns)), "a list without repeats")
        if self.split not in ("heldout", "shift"):
            bad("split", self.split, "heldout or shift (the train split is graded as well, into the train_* columns)")
        for name in ("hindsight", "train_hindsight"):
            if not isinstance(getattr(self, name), bool):
                bad(name, getattr(self, name), "True or False")
        if self.max_cycles is not None and (
            isinstance(self.max_cycles, bool) or not isinstance(self.max_cycles, int) or self.max_cycles < 2
        ):
            bad("max_cycles", self.max_cycles, "None (the task's own episodes) or an integer >= 2")
        if self.open_loop_budget is not None and (
            isinstance(self.open_loop_budget, bool) or not isinstance(self.open_loop_budget, int) or self.open_loop_budget < 1
        ):
            bad("open_loop_budget", self.open_loop_budget, "None (the grader's search budget) or an integer >= 1 (tenant-rounds)")
        defaults = Study()
        for name in UNUSED:
            if getattr(self, name) != getattr(defaults, name):
                bad(name, getattr(self, name), "its default: the suite study has families, not arbiters or sharing tasks")
        self.check_budget()

    #: :meth:`Study.check_budget`'s integers but ``max_cycles`` (None: the task's own) and the sharing part's.
    INTEGERS: ClassVar[tuple[tuple[str, int], ...]] = tuple(
        (k, lo) for k, lo in Study.INTEGERS if k not in ("max_cycles", "sharing_iterations")
    )

    # --- the runs ---------------------------------------------------------------------------------

    @staticmethod
    def task(family: str, n: int) -> str:
        """The suite task of ``family`` at team size ``n``."""
        return f"{family}_n{n}"

    def runs_of(self, part: str) -> list[tuple]:
        if part != PART:
            return []
        return [
            (PART, f, n, arm, seed)
            for seed in range(self.seeds)
            for f in self.families
            for n in sorted(self.ns)
            for arm in self.arms
            if not (arm == "shapley" and n > self.shapley_max_n)
        ]

    def runs(self) -> list[tuple]:
        """Every run key, seed-major (all of seed 0 first, family by family)."""
        return self.runs_of(PART)

    def skipped(self) -> list[tuple]:
        """The (part, family, n, arm) the study does not run, by ``shapley_max_n``."""
        if "shapley" not in self.arms:
            return []
        return [(PART, f, n, "shapley") for f in self.families for n in sorted(self.ns) if n > self.shapley_max_n]

    def env(self, part: str, setting: str, n: int) -> tuple[str, dict]:
        """(task, env overrides) of a run: the suite task, as it is (``max_cycles`` when set)."""
        return self.task(setting, n), ({} if self.max_cycles is None else {"max_cycles": self.max_cycles})

    def iterations_of(self, part: str) -> int:
        return self.iterations

    @staticmethod
    def arm(key: tuple) -> tuple[str, str]:
        """(reward scheme, sharing scheme) of the run ``key`` (a value-decomposition arm's
        "sharing" is its algorithm)."""
        return {**ARMS, **benchmarl_runs.VALUE_ARMS}[key[3]]

    def settings(self) -> dict:
        """What a resumed study must match (everything but ``out`` and :data:`UNUSED`)."""
        d = super().settings()
        for name in UNUSED:
            d.pop(name)
        if d["open_loop_budget"] is None:
            d.pop("open_loop_budget")  # the studies before the option had the grader's, and their study.json must still match
        return d

    def budget_note(self) -> str:
        return f"; graded on the {self.split} and train splits ({self.episodes} scenarios each)"

    # --- the grading --------------------------------------------------------------------------------

    def grading(self, key: tuple) -> dict:
        """Graded on ``split`` (the run's env without ``shapley_samples``, which changes no
        welfare and would key the cached references apart), the hindsight reference at the last
        grading, then on the train split (:meth:`final`)."""
        _, env = self.env(*key[:3])
        return {"overrides": {**env, "split": self.split}, "hindsight": self.hindsight, "final": self.final}

    def final(self, ev: Any, play: Any) -> dict:
        """The ``train_*`` columns: the final policy graded on the train split's scenarios
        0 .. episodes - 1 (``play``: :func:`~fleet_marl.studies.credit.torchrl_runs.train_and_grade`'s)."""
        train = play({"split": "train"}, self.train_hindsight)
        out = {f"train_{k}": v for k, v in rows.graded(train).items()}
        out["train_random_welfare"] = float(np.mean(train.random_welfare))
        out["train_planner_welfare"] = float(np.mean(train.reference_welfare))
        hs = rows.hindsight(train)
        out["train_gap"], out["train_hindsight_welfare"] = hs["gap"], hs["hindsight_welfare"]
        return out

    def reference_jobs(self, todo: list[tuple]) -> list[tuple]:
        """One job per scenario the runs ``todo`` are graded on: ``(task, split, scenario)`` for
        the graded split and the train split, scenarios 0 .. episodes - 1."""
        pairs = sorted({(k[1], k[2]) for k in todo})
        return [(f, n, split, s) for f, n in pairs for split in (self.split, "train") for s in range(self.episodes)]

    def baseline_jobs(self, done: set) -> list[tuple]:
        """One job per task of the study whose baseline row is not in ``done`` (its ``(family, n)``
        pairs): ``(family, n)``, in the study's order."""
        return [(f, n) for f in self.families for n in sorted(self.ns) if (f, n) not in done]

    def baseline(self, job: tuple) -> dict:
        """The ``open_loop`` baseline's row on the task of ``job`` (``(family, n)``), graded as its
        runs are: on ``split`` and the train split, scenarios 0 .. episodes - 1, the runs' env
        overrides (:func:`~fleet_marl.studies.credit.suite_baselines.open_loop_row`)."""
        f, n = job
        task, env = self.env(PART, f, n)
        return suite_baselines.open_loop_row(task, self.split, self.episodes, env, budget=self.open_loop_budget)

    def reference(self, job: tuple) -> None:
        """The references (random, planner and, with ``hindsight`` on ``split`` or ``train_hindsight``
        on the train split, hindsight) of one scenario, cached."""
        f, n, split, s = job
        task, env = self.env(PART, f, n)
        hindsight = self.hindsight if split == self.split else self.train_hindsight
        evaluate(task, "planner", 1, s, {**env, "split": split}, progress=False, hindsight=hindsight)


__all__ = ["ENGINES", "PART", "SUITE_ARMS", "SUITE_RESULT_COLUMNS", "TRAIN_COLUMNS", "UNUSED", "SuiteStudy"]

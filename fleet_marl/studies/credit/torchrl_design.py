"""The credit-assignment study's design on the TorchRL engine (``fleet-marl compare``, the default).

Two parts, each a set of runs of PPO (:mod:`fleet_marl.torchrl`, one shared masked policy per
run unless the arm says otherwise), every run graded by the grader
(:func:`fleet_marl.evaluation.evaluate`: the greedy policy on grader seeds 0 .. episodes - 1,
against the random and planner references on the same seeds):

``scaling``  task ``easy`` grown to N tenants (:func:`fleet_marl.tasks.scaled`) under each
             arbiter in ``mechanisms``, for every arm in ``arms`` (:data:`ARMS`: the six reward
             schemes with a shared actor and critic, ``mappo``: the global reward with a
             centralized critic, and ``difference_k4``: the 4-round difference,
             :data:`ARM_HORIZON`; the default ``arms`` are the first seven) and every N in ``ns``
``sharing``  the tasks ``sharing_tasks`` under the ``difference`` reward, for every sharing
             scheme in ``sharing_arms`` (:data:`SHARING_ARMS`)

A run's key is ``(part, setting, n, arm, seed)``: ``setting`` is the arbiter (scaling) or the
task (sharing). Every run of a part at one N has the same budget: ``iterations`` PPO
iterations of ``num_envs(N) x rollout`` env steps, and ``num_envs(N) = agents_per_step / N``
clusters, so an iteration holds the same number of agent steps at every N (the env-step
budget per N is in :meth:`Study.env_steps`). The grader grades each run at ``eval_fractions``
of its budget: the learning curve. A run **converged** when its graded welfare moved by less
than 2% (``converge_tol``) over the last 20% of its budget, up or down (:func:`converged`): a
run still rising has not converged, and neither has one whose welfare fell (a collapse).

Runs are seed-major (all of seed 0 first), so a stopped study holds whole seeds; how they run
is :mod:`fleet_marl.studies.credit.torchrl_runs`, the store and resuming
:mod:`fleet_marl.studies.credit.runs`. ``study.json`` records :meth:`Study.settings`.

    out = run(Study(ns=(2, 4), seeds=3))    # the missing runs (fleet_marl.studies.credit.run)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from fleet_marl.config import MECHANISMS
from fleet_marl.evaluation import reference_episodes
from fleet_marl.studies.store import StudyError
from fleet_marl.tasks import TASKS, scaled

#: The engine that trains this design's runs.
ENGINE = "torchrl"

ARMS = {
    "local": ("local", "shared"),
    "global": ("global", "shared"),
    "mixed": ("mixed", "shared"),
    "difference": ("difference", "shared"),
    "difference_default": ("difference_default", "shared"),
    "shapley": ("shapley", "shared"),
    "mappo": ("global", "mappo"),  # learned credit assignment: a centralized critic on the state
    "difference_k4": ("difference", "shared"),  # the k-round difference, k = 4 (ARM_HORIZON)
}
#: The arms whose reward looks more than one round ahead: arm -> ``credit_horizon`` (the
#: k-round difference of :mod:`fleet_marl.torchrl.relabel`: a tenant's removal carried forward
#: k rounds in branches of the env, docs/credit_horizon.md). Every other arm: 1.
ARM_HORIZON = {"difference_k4": 4}
#: The sharing part's arms (all under the difference reward): arm -> (reward scheme, sharing).
SHARING_ARMS = {
    "shared": ("difference", "shared"),
    "per_kind": ("difference", "per_kind"),
    "per_tenant": ("difference", "per_tenant"),
    "mappo": ("difference", "mappo"),
}
PARTS = ("scaling", "sharing")
KEY = ("part", "setting", "n", "arm", "seed")

RESULT_COLUMNS = (
    *KEY,
    "scheme",
    "sharing",
    "iterations",
    "env_steps",
    "agent_steps",
    "eval_welfare",
    "score",
    "jain",
    "starvation_events",
    "degenerate",
    "illegal",
    "random_welfare",
    "planner_welfare",
    "welfare_at_80",
    "improvement_last_20",
    "converged",
    "env_steps_to_90",
    "agent_steps_to_90",
    "run_seconds",
    "train_seconds",
    "eval_seconds",
    "credit_seconds",
    "credit_ms_per_step",
    "finished",
)
CURVE_COLUMNS = (
    *KEY,
    "iteration",
    "env_steps",
    "agent_steps",
    "train_welfare",
    "eval_welfare",
    "score",
    "jain",
    "starvation_events",
    "degenerate",
    "seconds",
)
SESSION_COLUMNS = ("started", "stopped", "wall_seconds", "runs_done", "jobs", "version")


def converged(improvement: float, tol: float) -> bool:
    """The convergence rule: the graded welfare's relative change over the last 20% of the budget
    (``improvement_last_20``, from the 80% grading to the last) is within ``tol`` either way,
    ``|improvement| < tol``: a run whose welfare rose or fell by ``tol`` or more has not converged."""
    return abs(improvement) < tol


def _bad(name: str, value: Any, expected: str):
    """A :class:`StudyError` naming the option of setting ``name``, its value and what was expected."""
    raise StudyError(f"--{name.replace('_', '-')} {value!r}: expected {expected}")


@dataclass
class Study:
    """One study (see the module docstring). Every field but ``out`` is recorded in
    ``study.json``; the PPO settings not listed are :class:`~fleet_marl.torchrl.config.TorchRLTrainConfig`'s."""

    ENGINE: ClassVar[str] = ENGINE
    KEY: ClassVar[tuple[str, ...]] = KEY
    RESULT_COLUMNS: ClassVar[tuple[str, ...]] = RESULT_COLUMNS
    CURVE_COLUMNS: ClassVar[tuple[str, ...]] = CURVE_COLUMNS
    #: what --overwrite removes from the study folder (with study.json)
    FILES: ClassVar[tuple[str, ...]] = ("results.csv", "curves.csv", "sessions.csv")

    arms: tuple = tuple(a for a in ARMS if a not in ARM_HORIZON)  # the one-round arms (the committed study's)
    ns: tuple = (2, 4, 8, 16, 32, 64)
    mechanisms: tuple = ("proportional", "auction")
    sharing_arms: tuple = tuple(SHARING_ARMS)
    sharing_tasks: tuple = ("medium", "hard")
    seeds: int = 10
    iterations: int = 24  # PPO iterations per run (scaling part)
    sharing_iterations: int = 32  # ... sharing part
    agents_per_step: int = 2048  # num_envs(N) = agents_per_step // N clusters (at least min_envs)
    min_envs: int = 16
    rollout: int = 8
    epochs: int = 2
    minibatches: int = 4
    hidden: tuple = (64, 64)
    lr: float = 1e-3
    entropy_coeff: float = 0.01
    shapley_max_n: int = 64  # the shapley arm runs up to this N (its reward's cost grows ~N^2 per env step: a cap for larger studies)
    shapley_samples: int = 16  # sampled permutations above 8 tenants
    eval_fractions: tuple = (0.25, 0.5, 0.8, 1.0)  # of the budget, where the grader grades (0.8 and 1.0 decide convergence)
    episodes: int = 4  # grader episodes (seeds 0 .. episodes - 1) at each graded point
    max_cycles: int | None = 100  # rounds an episode (a design on tasks with their own episodes may take None: theirs)
    converge_tol: float = 0.02
    device: str = "cpu"  # the runs' learner (the env and collection stay on CPU); recorded in study.json only when not cpu
    out: str = "runs/credit_study"

    @classmethod
    def quick(cls, **changes) -> Study:
        """A minute or two: N = 2 and 4, two seeds, both arbiters, every arm, the sharing part on
        medium; five tiny iterations per run, episodes of 20 rounds, one grader episode. It checks
        the pipeline, not the science."""
        base: dict[str, Any] = dict(
            ns=(2, 4),
            seeds=2,
            sharing_tasks=("medium",),
            iterations=5,
            sharing_iterations=5,
            agents_per_step=32,
            min_envs=2,
            rollout=4,
            epochs=1,
            minibatches=2,
            hidden=(16, 16),
            eval_fractions=(0.4, 0.8, 1.0),
            episodes=1,
            max_cycles=20,
            out="runs/credit_study_quick",
        )
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)

    def check(self) -> None:
        bad = _bad
        for name, allowed in (("arms", ARMS), ("sharing_arms", SHARING_ARMS), ("mechanisms", MECHANISMS), ("sharing_tasks", TASKS)):
            values = getattr(self, name)
            for v in values:
                if v not in allowed:
                    bad(name, v, f"values from {', '.join(allowed)}")
            if len(set(values)) != len(values):
                bad(name, ",".join(values), "a list without repeats")
        if not self.arms and not self.sharing_arms:
            bad("arms", "", "at least one arm")
        for n in self.ns:
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 256:
                bad("n", n, "tenant counts between 1 and 256")
        if len(set(self.ns)) != len(self.ns):
            bad("n", ",".join(map(str, self.ns)), "a list without repeats")
        self.check_budget()

    #: The integer settings :meth:`check_budget` checks, each with its least value.
    INTEGERS: ClassVar[tuple[tuple[str, int], ...]] = (
        ("seeds", 1),
        ("iterations", 3),
        ("sharing_iterations", 3),
        ("agents_per_step", 1),
        ("min_envs", 1),
        ("rollout", 1),
        ("epochs", 1),
        ("minibatches", 1),
        ("shapley_samples", 1),
        ("episodes", 1),
        ("max_cycles", 2),
        ("shapley_max_n", 0),
    )

    def check_budget(self) -> None:
        """Check the budgets, the grading fractions, the convergence tolerance and the device
        (a :class:`StudyError` naming the option); every design's :meth:`check` ends with it."""
        bad = _bad
        for name, lo in self.INTEGERS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                bad(name, v, f"an integer >= {lo}" + (" (80% of the budget must come before its end)" if lo == 3 else ""))
        fr = self.eval_fractions
        if (
            not fr
            or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1 for f in fr)
            or list(fr) != sorted(set(fr))
            or 0.8 not in fr
            or fr[-1] != 1.0
        ):
            bad(
                "eval_fractions",
                ",".join(map(str, fr)),
                "increasing fractions of the budget in (0, 1], with 0.8 and 1.0 (convergence compares them)",
            )
        if not 0 < self.converge_tol < 1:
            bad("converge_tol", self.converge_tol, "a fraction in (0, 1)")
        if not isinstance(self.device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            bad("device", self.device, "cpu, cuda or cuda:<index>")

    # --- the runs ---------------------------------------------------------------------------------

    def num_envs(self, n: int) -> int:
        return max(self.min_envs, self.agents_per_step // n)

    def runs_of(self, part: str) -> list[tuple]:
        if part == "scaling":
            return [
                (part, m, n, arm, seed)
                for seed in range(self.seeds)
                for m in self.mechanisms
                for n in sorted(self.ns)
                for arm in self.arms
                if not (arm == "shapley" and n > self.shapley_max_n)
            ]
        return [
            (part, task, self.task_n(task), arm, seed)
            for seed in range(self.seeds)
            for task in self.sharing_tasks
            for arm in self.sharing_arms
        ]

    def runs(self) -> list[tuple]:
        """Every run key, seed-major (each part's seed 0, then seed 1, ...)."""
        by_part = [self.runs_of(p) for p in PARTS]
        return sorted((k for runs in by_part for k in runs), key=lambda k: (k[4], PARTS.index(k[0])))

    def skipped(self) -> list[tuple]:
        """The (part, setting, n, arm) the study does not run, by ``shapley_max_n``."""
        if "shapley" not in self.arms:
            return []
        return [("scaling", m, n, "shapley") for m in self.mechanisms for n in sorted(self.ns) if n > self.shapley_max_n]

    @staticmethod
    def task_n(task: str) -> int:
        return len(TASKS[task].builder()["tenants"])

    def env(self, part: str, setting: str, n: int) -> tuple[str, dict]:
        """(task, env overrides) of a run."""
        if part == "scaling":
            return "easy", {**scaled(n, setting), "max_cycles": self.max_cycles}
        return setting, {"max_cycles": self.max_cycles}

    def iterations_of(self, part: str) -> int:
        return self.iterations if part == "scaling" else self.sharing_iterations

    def env_steps(self, part: str, n: int) -> int:
        """The env-step budget of every run of ``part`` at N = ``n``."""
        return self.iterations_of(part) * self.num_envs(n) * self.rollout

    def eval_at(self, part: str) -> list[int]:
        """The iterations the grader grades (``eval_fractions`` of the budget)."""
        it = self.iterations_of(part)
        return sorted({max(1, round(f * it)) for f in self.eval_fractions})

    def train_config(self, key: tuple) -> Any:
        """The :class:`~fleet_marl.torchrl.config.TorchRLTrainConfig` of the run ``key``."""
        from fleet_marl.torchrl.config import TorchRLTrainConfig  # torch: only when a run trains

        part, setting, n, _, seed = key
        scheme, sharing = self.arm(key)
        task, env = self.env(part, setting, n)
        if scheme == "shapley":
            env["shapley_samples"] = self.shapley_samples
        B = self.num_envs(n)
        return TorchRLTrainConfig(
            task=task,
            reward_scheme=scheme,
            sharing=sharing,
            env=env,
            iterations=self.iterations_of(part),
            max_minutes=0,
            seed=seed,
            num_envs=B,
            rollout=self.rollout,
            epochs=self.epochs,
            minibatch=max(1, B * self.rollout // self.minibatches),
            lr=self.lr,
            entropy_coeff=self.entropy_coeff,
            hidden=list(self.hidden),
            eval_interval=0,
            checkpoint_interval=0,
            final_episodes=0,
            collector="sync",
            credit_horizon=ARM_HORIZON.get(key[3], 1),
            device=self.device,
            threads=1,
            out=str(Path(self.out) / "unused"),
            name="-".join(map(str, key)),
        )

    def settings(self) -> dict:
        """What a resumed study must match (everything but ``out``)."""
        d = asdict(self)
        d.pop("out")
        if d["device"] == "cpu":
            d.pop("device")  # the studies before the option had it, and their study.json must still match
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @staticmethod
    def key(row: dict) -> tuple:
        """The key of a row of results.csv or curves.csv."""
        return str(row["part"]), str(row["setting"]), int(row["n"]), str(row["arm"]), int(row["seed"])

    def budget_note(self) -> str:
        """What the study's first line says about its budgets (nothing: :meth:`env_steps` has them)."""
        return ""

    @staticmethod
    def arm(key: tuple) -> tuple[str, str]:
        """(reward scheme, sharing scheme) of the run ``key``."""
        return (ARMS if key[0] == "scaling" else SHARING_ARMS)[key[3]]

    # --- how a run is graded (the hooks a design on other tasks changes) -------------------------

    def grading(self, key: tuple) -> dict:
        """The keyword arguments of the run ``key``'s grading
        (:func:`~fleet_marl.studies.credit.torchrl_runs.train_and_grade`): none here, the grader
        plays the run's own env (:meth:`env`) on seeds 0 .. episodes - 1."""
        return {}

    def reference_jobs(self, todo: list[tuple]) -> list[tuple]:
        """What to compute before the runs ``todo`` (the grader's reference episodes, cached on
        disk, once per setting rather than in every run): one job for :meth:`reference` each."""
        seeds = list(range(self.episodes))
        return [(*self.env(*r), name, seeds) for r in sorted({k[:3] for k in todo}) for name in ("random", "planner")]

    def reference(self, job: tuple) -> None:
        """Compute (and cache) one job of :meth:`reference_jobs`: a reference's episodes."""
        task, overrides, name, seeds = job
        reference_episodes(task, name, seeds, overrides, progress=None)


__all__ = [
    "ARMS",
    "ARM_HORIZON",
    "CURVE_COLUMNS",
    "ENGINE",
    "KEY",
    "PARTS",
    "RESULT_COLUMNS",
    "SESSION_COLUMNS",
    "SHARING_ARMS",
    "Study",
    "StudyError",
    "converged",
]

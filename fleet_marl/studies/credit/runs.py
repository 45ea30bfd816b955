"""The credit-assignment study, run on an engine: its folder, resuming and the scheduler.

The study is one design (:class:`~fleet_marl.studies.credit.torchrl_design.Study`, or the study
on the suite, :class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`: TorchRL only) whose runs an
engine's module trains (:data:`RUNNERS`: the engines of the registry,
:data:`fleet_marl.training.engines.ENGINES`, that the study has runs for: TorchRL's,
:mod:`~fleet_marl.studies.credit.torchrl_runs`, the default, on this machine's processes or,
with ``address``, as Ray tasks on a cluster (:mod:`~fleet_marl.studies.credit.torchrl_ray`);
RLlib's, :mod:`~fleet_marl.studies.credit.rllib_runs`, as Ray tasks on this machine). Every
engine writes the same columns (:mod:`~fleet_marl.studies.credit.rows`); ``study.json`` names
the engine when it is not the default, so a study folder holds one engine's runs.

:func:`make_study`  the design (``quick`` for the pipeline check), with changes
:func:`prepare`     checks the study and its folder, records ``study.json`` and returns the runs
                    already done (a study with other settings is refused, a run a kill cut
                    short is dropped: :mod:`fleet_marl.studies.store`)
:func:`run`         every missing run, each appended to ``results.csv`` and ``curves.csv`` as it
                    finishes, so a stopped study resumes where it stopped; on the suite, first
                    the baselines its tasks lack (``baselines.csv``,
                    :func:`~fleet_marl.studies.credit.suite_baselines.compute`)

    out = run(make_study(ns=(2, 4), seeds=3))              # the missing runs
    out = run(make_study(suite=True, quick=True))          # the study on the suite, its pipeline check
    out = run(make_study(), address="auto")                 # ... on the Ray cluster this machine joined
    out = run(make_study(quick=True, out="runs/q_rllib"), engine="rllib")   # ... on RLlib
    report(out)                                            # fleet_marl.studies.credit.report

Nothing here imports torch or Ray; a run does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_marl.studies import store
from fleet_marl.studies.credit import rllib_runs, suite_baselines, torchrl_ray, torchrl_runs
from fleet_marl.studies.credit.suite_design import SuiteStudy
from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.store import StudyError
from fleet_marl.training import engines

#: The engines the study runs on: engine (of the registry) -> the module that trains its runs (``run_all``).
RUNNERS = {"torchrl": torchrl_runs, "rllib": rllib_runs}
#: Those engines, in the registry's order (the default first).
ENGINES = tuple(e for e in engines.ENGINES if e in RUNNERS)


def make_study(quick: bool = False, suite: bool = False, **changes: Any) -> Study:
    """The study (its ``quick`` pipeline check, or the full study) with ``changes``; unchecked.
    ``suite``: the study on the credit-assignment suite
    (:class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`) instead of the scaling and
    sharing parts."""
    cls = SuiteStudy if suite else Study
    return cls.quick(**changes) if quick else cls(**changes)


def settings(study: Study, engine: str = ENGINES[0]) -> dict:
    """What ``study.json`` records: the study's settings, and ``engine`` when it is not the
    default (the folders of the default engine's studies stay as they were)."""
    return study.settings() if engine == ENGINES[0] else {**study.settings(), "engine": engine}


def prepare(study: Study, overwrite: bool = False, engine: str = ENGINES[0]) -> tuple[Path, set]:
    """Check the study and its folder (a folder of another engine's runs is refused too);
    returns (folder, runs already done). Nothing is deleted unless ``overwrite``, and only
    after every check passed."""
    study.check()
    out = Path(study.out)
    store.open_folder(out, settings(study, engine), overwrite, study.FILES)

    def complete(row: dict, columns: tuple[str, ...]) -> bool:
        return store.complete(row, study.KEY, columns, study.key)

    return out, store.resume(out, study.RESULT_COLUMNS, study.CURVE_COLUMNS, complete, study.key, set(study.runs()))


def run(
    study: Study,
    *,
    engine: str = ENGINES[0],
    jobs: int | None = None,
    address: str | None = None,
    gpus: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Any = print,
) -> Path:
    """Run every missing run of ``study`` on ``engine``, ``jobs`` at a time (default 2 on this
    machine; on a Ray cluster, ``address``, as many as fit), and return the study folder (for
    the report). On a cluster each TorchRL run is a Ray task of one CPU and ``gpus`` GPUs
    (default: 1 when the study's runs learn on ``cuda``, else 0). The RLlib runs train on this
    machine only, on cpu, at most :data:`~fleet_marl.studies.credit.rllib_runs.RAY_CPUS` at once.
    A study on the suite first grades the baselines of its tasks that its ``baselines.csv`` lacks,
    ``jobs`` (default 2) processes at a time on this machine, with a cluster too."""
    if engine not in RUNNERS:
        raise StudyError(
            f"--engine {engine!r}: the study runs on {', '.join(ENGINES)} (the engines it has runs for; "
            f"the registry's engines are {', '.join(engines.ENGINES)})"
        )
    if isinstance(study, SuiteStudy) and engine != ENGINES[0]:
        raise StudyError(f"--engine {engine!r} with --suite: the study on the suite runs on {ENGINES[0]} only")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise StudyError(f"--jobs {jobs!r}: expected an integer >= 1")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus < 0):
        raise StudyError(f"--gpus-per-run {gpus!r}: expected a number >= 0 (a fraction shares a GPU between runs)")
    if gpus is not None and address is None:
        raise StudyError(f"--gpus-per-run {gpus!r} is the Ray request of a run on a cluster: give --address too")
    if engine == "rllib":
        rllib_runs.check(study, jobs, address)  # before the folder is touched
    if address is not None:
        torchrl_ray.check_address(address)  # before the folder is touched
    out, done = prepare(study, overwrite, engine)
    todo = [k for k in study.runs() if k not in done]
    where = f" on the Ray cluster at {address}" if address else ""
    on = "" if engine == ENGINES[0] else f" on {engine}"
    name = "credit-assignment study on the suite" if isinstance(study, SuiteStudy) else "credit-assignment study"
    echo(f"{name} in {out}{where}{on}: {len(study.runs())} runs, {len(done)} done, {len(todo)} to go{study.budget_note()}")
    if isinstance(study, SuiteStudy):  # the baselines before the runs, on this machine, each stored once (baselines.csv)
        for failure in suite_baselines.compute(study, out, jobs or 2, progress, echo):
            echo(f"warning: {failure} (not stored; the same command retries it)")
    if not todo:
        return out
    if address is not None:
        cuda = study.device.startswith("cuda")
        torchrl_ray.run_all(study, out, todo, jobs, progress, address, gpus=(1.0 if cuda else 0.0) if gpus is None else float(gpus))
    else:
        RUNNERS[engine].run_all(study, out, todo, jobs or 2, progress)
    return out


__all__ = ["ENGINES", "RUNNERS", "make_study", "prepare", "run", "settings"]

"""The credit-assignment study, run on either engine: its folder, resuming and the scheduler.

A study is a design (:data:`DESIGNS`: :class:`~fleet_marl.studies.credit.torchrl_design.Study`
on TorchRL, the default; :class:`~fleet_marl.studies.credit.rllib_design.RLlibStudy`, the first
study, on RLlib) whose runs its engine's module trains
(:mod:`~fleet_marl.studies.credit.torchrl_runs`, :mod:`~fleet_marl.studies.credit.rllib_runs`),
on this machine's processes or, with ``address``, as Ray tasks on a cluster (the TorchRL study's:
:mod:`~fleet_marl.studies.credit.torchrl_ray`).
Everything else is the same for both:

:func:`make_study`  the design of an engine (``quick`` for the pipeline check), with changes
:func:`engine_of`   the engine of a study folder's ``study.json``
:func:`prepare`     checks the study and its folder, records ``study.json`` and returns the runs
                    already done (a study with other settings is refused, a run a kill cut
                    short is dropped: :mod:`fleet_marl.studies.store`)
:func:`run`         every missing run, each appended to ``results.csv`` and ``curves.csv`` as it
                    finishes, so a stopped study resumes where it stopped

    out = run(make_study("torchrl", ns=(2, 4), seeds=3))   # the missing runs
    out = run(make_study("torchrl"), address="auto")        # ... on the Ray cluster this machine joined
    report(out)                                            # fleet_marl.studies.credit.report

Nothing here imports torch or Ray; a run does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_marl.studies import store
from fleet_marl.studies.credit import rllib_runs, torchrl_ray, torchrl_runs
from fleet_marl.studies.credit.rllib_design import RLlibStudy
from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.store import StudyError

#: The engines, the default first: engine -> the study's design on it.
DESIGNS: dict[str, type[Study] | type[RLlibStudy]] = {"torchrl": Study, "rllib": RLlibStudy}
ENGINES = tuple(DESIGNS)


def make_study(engine: str = "torchrl", quick: bool = False, **changes: Any) -> Study | RLlibStudy:
    """The study of ``engine`` (its ``quick`` pipeline check, or the full study) with ``changes``; unchecked."""
    if engine not in DESIGNS:
        raise StudyError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    design = DESIGNS[engine]
    return design.quick(**changes) if quick else design(**changes)


def engine_of(settings: dict) -> str:
    """The engine of a study with ``settings`` (its ``study.json``): the first study's has reward
    ``schemes``, the TorchRL study's has ``arms``."""
    return "rllib" if "schemes" in settings else "torchrl"


def prepare(study: Study | RLlibStudy, overwrite: bool = False) -> tuple[Path, set]:
    """Check the study and its folder; returns (folder, runs already done). Nothing is
    deleted unless ``overwrite``, and only after every check passed."""
    study.check()
    out = Path(study.out)
    store.open_folder(out, study.settings(), overwrite, study.FILES)

    def complete(row: dict, columns: tuple[str, ...]) -> bool:
        return store.complete(row, study.KEY, columns, study.key)

    return out, store.resume(out, study.RESULT_COLUMNS, study.CURVE_COLUMNS, complete, study.key, set(study.runs()))


def run(
    study: Study | RLlibStudy,
    *,
    jobs: int | None = None,
    address: str | None = None,
    gpus: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Any = print,
) -> Path:
    """Run every missing run of ``study`` on its engine, ``jobs`` at a time (default 2 on this
    machine; on a Ray cluster, ``address``, as many as fit), and return the study folder (for
    the report). On a cluster each TorchRL run is a Ray task of one CPU and ``gpus`` GPUs
    (default: 1 when the study's runs learn on ``cuda``, else 0)."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise StudyError(f"--jobs {jobs!r}: expected an integer >= 1")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus < 0):
        raise StudyError(f"--gpus-per-run {gpus!r}: expected a number >= 0 (a fraction shares a GPU between runs)")
    if gpus is not None and address is None:
        raise StudyError(f"--gpus-per-run {gpus!r} is the Ray request of a run on a cluster: give --address too")
    if address is not None and not isinstance(study, RLlibStudy):
        torchrl_ray.check_address(address)  # before the folder is touched
    out, done = prepare(study, overwrite)
    todo = [k for k in study.runs() if k not in done]
    where = f" on the Ray cluster at {address}" if address else ""
    echo(f"credit-assignment study in {out}{where}: {len(study.runs())} runs, {len(done)} done, {len(todo)} to go{study.budget_note()}")
    if not todo:
        return out
    if isinstance(study, RLlibStudy):
        rllib_runs.run_all(study, out, todo, jobs or 2, progress, address)
    elif address is not None:
        cuda = study.device.startswith("cuda")
        torchrl_ray.run_all(study, out, todo, jobs, progress, address, gpus=(1.0 if cuda else 0.0) if gpus is None else float(gpus))
    else:
        torchrl_runs.run_all(study, out, todo, jobs or 2, progress)
    return out


__all__ = ["DESIGNS", "ENGINES", "engine_of", "make_study", "prepare", "run"]

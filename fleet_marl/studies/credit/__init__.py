"""The credit-assignment study (``fleet-marl compare``): which reward should each tenant learn
from? One design (7 arms, N up to 64, two arbiters, the sharing schemes), run on an engine of the
registry (``--engine``; the study has runs for TorchRL). The first study (on RLlib: six reward
schemes, N = 2..16) is its committed data and the renderer of its section. See
``docs/credit_assignment.md``.

====================  ===========================================================================
module                what it owns
====================  ===========================================================================
``runs``              the study on an engine: :func:`make_study`, :func:`prepare` (the folder,
                      ``study.json``, resuming), :func:`run` (the missing runs)
``torchrl_design``    :class:`Study`: the design (arms, parts, budgets, columns)
``suite_design``      :class:`SuiteStudy`: the study on the credit-assignment suite (``--suite``):
                      families x n x arms, graded on held-out and train scenarios
``torchrl_runs``      one run on TorchRL (the trainer's loop, graded along the way) and the
                      process pool that runs them
``torchrl_ray``       the same runs as Ray tasks on a cluster (``--address``)
``stats``             means and 95% Student-t intervals across seeds
``torchrl_tables``    the study's tables and verdicts
``plots``             the study's plots
``suite_baselines``   the suite study's baselines (``open_loop``): graded before the runs into
                      ``baselines.csv``, read by the report
``suite_report``      the suite study's tables, verdicts per family and ``summary.md``
``report``            :func:`report` (``summary.md`` and the plots), :func:`write_docs` (a study
                      into ``docs/data/`` and ``docs/img/``, then the docs published) and the
                      blocks of ``docs/credit_assignment.md`` rendered from the committed data
``first_study``       the first study's tables and blocks, from its committed CSVs
====================  ===========================================================================

The study's CSV store is :mod:`fleet_marl.studies.store`. The names of ``runs`` and the
design are imported lazily from here; nothing imports torch or Ray until a run trains.

>>> from fleet_marl.studies.credit import make_study, report, run
>>> out = run(make_study(ns=(2, 4), seeds=3))  # doctest: +SKIP
>>> report.report(out)  # doctest: +SKIP
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    "Study": "torchrl_design",
    "SuiteStudy": "suite_design",
    "StudyError": "runs",
    "ENGINES": "runs",
    "make_study": "runs",
    "prepare": "runs",
    "run": "runs",
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)


__all__ = ["ENGINES", "Study", "StudyError", "SuiteStudy", "make_study", "prepare", "run"]  # the lazy names of _NAMES

"""Studies run on top of the env and the training engines: the credit-assignment study and the
benchmarks.

=============================  ==================================================================
``credit``                     the credit-assignment study behind ``fleet-marl compare``: its
                               design, runs, tables, plots and report, and the first study
                               (RLlib) as its committed data and renderer
``store``                      the studies' resumable CSV store and :class:`StudyError`
``command``                    the ``compare`` command
``publish``                    ``fleet-marl docs``: every generated block of the README and
                               ``docs/`` from the data in ``docs/data/``
``baselines``                  the ``baselines`` command (``make baselines``)
``learned``                    the learned rows (``fleet-marl train --docs RUN``)
``bench``                      ``fleet-marl bench``: env, kernel, training and outside-client
                               speed against targets (a package: ``bench.command`` is the command)
``protocols``                  the reference policies under the simultaneous and the sequential
                               protocols (``python -m fleet_marl.studies.protocols``)
=============================  ==================================================================

``Study``, ``StudyError``, ``make_study``, ``prepare`` and ``run`` are imported
lazily from here (from :mod:`fleet_marl.studies.credit`; the report is
:mod:`fleet_marl.studies.credit.report`). Importing ``fleet_marl.studies`` or any of its
modules imports neither Ray nor torch; running a study does. See ``docs/credit_assignment.md``
and ``docs/benchmarks.md``.
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    "Study": "credit.torchrl_design",
    "StudyError": "store",
    "make_study": "credit.runs",
    "prepare": "credit.runs",
    "run": "credit.runs",
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)


__all__ = ["Study", "StudyError", "make_study", "prepare", "run"]  # the lazy names of _NAMES

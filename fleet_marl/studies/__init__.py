"""Studies run on top of the env and the training engines: the credit-assignment study and the
benchmarks.

=============================  ==================================================================
``credit``                     the credit-assignment study behind ``fleet-marl compare``, on
                               either engine (``--engine torchrl``, the default, or ``rllib``,
                               the first study): its designs, runs, tables, plots and report
``store``                      the studies' resumable CSV store and :class:`StudyError`
``command``                    the ``compare`` command
``bench``                      ``fleet-marl bench``: env, kernel, training and outside-client
                               speed against targets (a package: ``bench.command`` is the command)
``protocols``                  the reference policies under the simultaneous and the sequential
                               protocols (``python -m fleet_marl.studies.protocols``)
=============================  ==================================================================

``Study``, ``RLlibStudy``, ``StudyError``, ``make_study``, ``prepare`` and ``run`` are imported
lazily from here (from :mod:`fleet_marl.studies.credit`; the report is
:mod:`fleet_marl.studies.credit.report`). Importing ``fleet_marl.studies`` or any of its
modules imports neither Ray nor torch; running a study does. See ``docs/credit_assignment.md``
and ``docs/benchmarks.md``.
"""

import importlib
from typing import Any

_NAMES = {
    "Study": "credit.torchrl_design",
    "RLlibStudy": "credit.rllib_design",
    "StudyError": "store",
    "make_study": "credit.runs",
    "prepare": "credit.runs",
    "run": "credit.runs",
}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(f"fleet_marl.studies.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.studies' has no attribute {name!r}")


__all__ = ["RLlibStudy", "Study", "StudyError", "make_study", "prepare", "run"]  # the lazy names of _NAMES

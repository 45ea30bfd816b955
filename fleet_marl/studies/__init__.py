"""Studies run on top of the env and the RLlib adapter: the credit-assignment study and the
benchmarks.

=============================  ==================================================================
``credit_assignment``          the study behind ``fleet-marl compare``: :class:`Study`, the Ray
                               scheduler (``run``, ``run_one``) and the resumable CSV store
``report``                     its statistics, tables, plots and the docs writer (``report``,
                               ``write_docs``)
``command``                    the ``compare`` command
``bench``                      ``fleet-marl bench``: env and kernel speed on one core
``protocols``                  the reference policies under the simultaneous and the sequential
                               protocols (``python -m fleet_marl.studies.protocols``)
=============================  ==================================================================

``Study``, ``StudyError``, ``run``, ``run_one``, ``prepare`` and ``write_docs`` are imported
lazily from here (the function ``report`` lives in ``fleet_marl.studies.report``). Importing
``fleet_marl.studies`` or any of its modules imports no Ray; running a study does. See ``docs/credit_assignment.md`` and
``docs/benchmarks.md``.
"""

import importlib

_NAMES = {
    "Study": "credit_assignment",
    "StudyError": "credit_assignment",
    "run": "credit_assignment",
    "run_one": "credit_assignment",
    "prepare": "credit_assignment",
    "write_docs": "report",
}


def __getattr__(name):
    if name in _NAMES:
        return getattr(importlib.import_module(f"fleet_marl.studies.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.studies' has no attribute {name!r}")


__all__ = sorted(_NAMES)

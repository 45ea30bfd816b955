"""The credit-assignment study (``fleet-marl compare``): which reward should each tenant learn
from? One study, two engines (``--engine``): its design on TorchRL, the default (7 arms, N up
to 64, two arbiters, the sharing schemes), and the first study on RLlib (six reward schemes,
N = 2..16), which still reproduces from its committed data. See ``docs/credit_assignment.md``.

====================  ===========================================================================
module                what it owns
====================  ===========================================================================
``runs``              the study on either engine: :func:`make_study`, :func:`prepare` (the
                      folder, ``study.json``, resuming), :func:`run` (the missing runs)
``torchrl_design``    :class:`Study`: the design on TorchRL (arms, parts, budgets, columns)
``torchrl_runs``      one run on TorchRL (the trainer's loop, graded along the way) and the
                      process pool that runs them
``rllib_design``      :class:`RLlibStudy`: the first study's design (schemes, env-step budgets)
``rllib_runs``        one run on RLlib and the Ray scheduler that runs them
``stats``             means and 95% Student-t intervals across seeds
``torchrl_tables``    the TorchRL study's tables and verdicts
``rllib_tables``      the first study's tables
``plots``             both studies' plots
``report``            :func:`report` (``summary.md`` and the plots) and :func:`write_docs` (the
                      block of ``docs/credit_assignment.md``), for either engine
====================  ===========================================================================

The study's CSV store is :mod:`fleet_marl.studies.store`. The names of ``runs`` and the
designs are imported lazily from here; nothing imports torch or Ray until a run trains.

>>> from fleet_marl.studies.credit import make_study, report, run
>>> out = run(make_study("torchrl", ns=(2, 4), seeds=3))  # doctest: +SKIP
>>> report.report(out)  # doctest: +SKIP
"""

import importlib
from typing import Any

_NAMES = {
    "Study": "torchrl_design",
    "RLlibStudy": "rllib_design",
    "StudyError": "runs",
    "ENGINES": "runs",
    "make_study": "runs",
    "engine_of": "runs",
    "prepare": "runs",
    "run": "runs",
}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(f"fleet_marl.studies.credit.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fleet_marl.studies.credit' has no attribute {name!r}")


__all__ = ["ENGINES", "RLlibStudy", "Study", "StudyError", "engine_of", "make_study", "prepare", "run"]  # the lazy names of _NAMES

"""The TorchRL study's runs on a Ray cluster: ``fleet-marl compare --engine torchrl --address auto|host:port|ray://host:port``.

:func:`run_all` submits each missing run (part, setting, N, arm, seed) as a Ray task that asks
for ``cpus`` CPUs (and ``gpus`` GPUs, for runs whose learner is on ``cuda``) and runs exactly
what a worker process of the local pool runs (:func:`~fleet_marl.studies.credit.torchrl_runs.run_caught`:
the sync collector, one torch thread), so a run's results are bit for bit the local pool's
for the same seeds. Ray places the tasks on the cluster's nodes as their requests fit
(``jobs``: at most that many at once; None: as many as fit). Each result is appended to the
study's CSV store on the driver as it arrives (:class:`~fleet_marl.studies.credit.torchrl_runs.Session`),
so a study whose driver is killed resumes where it stopped: its tasks end with it, and the same
command submits the runs that are not in ``results.csv``.

Every node needs fleet_marl and the ``[torchrl]`` extra in the same Python environment
(docs/training.md, "The credit study on a Ray cluster"); the grader's reference episodes are
cached on each node by the first run that needs them. Ray is imported only here, when a study
runs on a cluster.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.credit.torchrl_runs import Session, run_caught
from fleet_marl.studies.store import StudyError
from fleet_marl.training import unreachable


def check_address(address: str) -> None:
    """Fail fast, naming ``--address``, when nothing listens at a ``host:port`` (or ``ray://host:port``)
    address: ``ray.init`` would retry for minutes. ``auto`` is left to Ray."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise StudyError(f"--address {address!r}: expected 'auto', host:port or ray://host:port")
    why = unreachable(host, port)
    if why is not None:
        raise StudyError(
            f"--address {address!r}: nothing answers there ({why}); start a cluster with 'ray start --head' "
            "(docs/training.md), or leave out --address to run on this machine"
        )


def connect(address: str) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``host:port`` or ``ray://host:port``);
    True if this call connected (and so should ``ray.shutdown()``), False if Ray was running in
    this process already. A :class:`StudyError` names ``--address`` when nothing answers."""
    import ray  # Ray: only for a study on a cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    try:
        if address.startswith("ray://"):
            ray.init(address=address)  # Ray Client: the server's ray.init takes the rest
        else:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise StudyError(
            f"--address {address!r}: no Ray cluster answered ({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}); "
            "start one with 'ray start --head' (docs/training.md), or leave out --address to run on this machine"
        ) from None
    return True


def run_all(
    study: Study, out: Path, todo: list[tuple], jobs: int | None, progress: bool, address: str, cpus: float = 1.0, gpus: float = 0.0
) -> None:
    """The runs ``todo`` of ``study`` as Ray tasks of ``cpus`` CPUs and ``gpus`` GPUs on the
    cluster at ``address``, at most ``jobs`` at once (None: as many as the cluster fits), each
    appended to the CSVs of ``out`` as it finishes."""
    import ray  # Ray: only for a study on a cluster

    started = connect(address)
    try:
        fits = int(ray.cluster_resources().get("CPU", 0) // max(cpus, 1e-9))
        if gpus:
            fits = min(fits, int(ray.cluster_resources().get("GPU", 0) // gpus))
        if fits < 1:
            raise StudyError(
                f"--address {address!r}: the cluster has {ray.cluster_resources().get('CPU', 0):g} CPUs and "
                f"{ray.cluster_resources().get('GPU', 0):g} GPUs; a run asks for {cpus:g} CPU(s) and {gpus:g} GPU(s)"
            )
        limit = min(jobs, fits) if jobs else fits
        session = Session(out, limit, columns=(study.RESULT_COLUMNS, study.CURVE_COLUMNS))
        task = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(run_caught)
        try:
            session.run_on_ray(task, study, todo, limit, f"runs on {address}", progress)
        finally:
            session.close()
    finally:
        if started:
            ray.shutdown()


__all__ = ["check_address", "connect", "run_all"]

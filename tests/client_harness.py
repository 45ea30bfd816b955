"""The outside-client matrix (issue 32): every client x ``obs_mode`` x ``mask_layout`` x its tasks
(a small and a large one; every registered task for TorchRL's ``PettingZooWrapper``, over the
ParallelEnv and both AEC forms) either runs a rollout past two episode ends, with finite rewards
and every action allowed by the masks it was handed, or is refused when it is built, with an
error that names a combination that works.

:func:`build_check` is the refusal (:class:`Refused`, a ``ValueError``): for the clients of
this package it is the adapter's own ``check_options`` (the constructor raises the same
error); for the third-party wrappers of the ParallelEnv it says what the wrapper cannot take.
:func:`run_cell` plays one cell (``tests/client_runs.py`` has a rollout per client), :func:`matrix`
all of them, :func:`data` the matrix as the data of ``docs/environment.md``'s table ("The client
matrix"), which ``python -m tests.client_harness --docs`` saves in ``docs/data/client_matrix.json``
and publishes (:mod:`fleet_marl.studies.client_matrix` renders it). ``tests/test_client_matrix.py``
runs the whole matrix; the harness is the tests', not the package's.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleet_marl.studies import client_matrix, publish
from fleet_marl.tasks import TASKS as REGISTERED
from tests.client_runs import RUNS

OBS_MODES = ("flat", "dict")
MASK_LAYOUTS = ("dims", "flat")
#: A small and a large task: 2 and 16 tenants.
TASKS = ("tiny", "hard")
#: Every registered task (the TorchRL wrapper's cells).
EVERY_TASK = tuple(REGISTERED)
#: Each cell's episodes: short (its rollout passes ``ENDS`` episode ends within a few steps).
MAX_CYCLES = 3
ENDS = 2


class Refused(ValueError):
    """A client refuses an ``obs_mode`` / ``mask_layout`` combination; the message names one it takes."""


def _flat_only(client: str, why: str) -> Callable[[str, str], None]:
    def check(obs_mode: str, mask_layout: str) -> None:
        if (obs_mode, mask_layout) != ("flat", "flat"):
            raise Refused(
                f"{client} with obs_mode={obs_mode!r}, mask_layout={mask_layout!r}: {why}; use obs_mode='flat', mask_layout='flat'"
            )

    return check


def _flat_obs(client: str, why: str) -> Callable[[str, str], None]:
    def check(obs_mode: str, mask_layout: str) -> None:
        if obs_mode != "flat":
            raise Refused(f"{client} with obs_mode={obs_mode!r}: {why}; use obs_mode='flat', mask_layout={mask_layout!r}")

    return check


def _anything(obs_mode: str, mask_layout: str) -> None:
    return None


def _adapter(package: str) -> Callable[[str, str], None]:
    def check(obs_mode: str, mask_layout: str) -> None:
        try:
            importlib.import_module(package).check_options(obs_mode, mask_layout)  # the adapter's extra: loaded when its cell is checked
        except ValueError as exc:
            if isinstance(exc, ImportError):  # MissingExtra is both
                raise
            raise Refused(str(exc)) from exc

    return check


@dataclass(frozen=True)
class Client:
    name: str
    what: str  # how the env reaches it
    over: str  # "parallel" (the dict API), "aec" (PettingZoo's AEC API) or "vector" (the array API)
    check: Callable[[str, str], None]
    tasks: tuple[str, ...] = TASKS


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client(
            "sb3_supersuit",
            "SB3 through SuperSuit (black_death_v3, pettingzoo_env_to_vec_env_v1, concat_vec_envs_v1)",
            "parallel",
            _flat_obs("SB3 through SuperSuit", "black_death_v3 needs a Box observation, and SB3 has no Tuple space"),
        ),
        Client(
            "sb3_vecenv",
            "fleet_marl.clients.sb3.FleetSB3VecEnv (SB3 VecEnv over the vector env)",
            "vector",
            _adapter("fleet_marl.clients.sb3"),
        ),
        Client("torchrl_wrapper", "TorchRL PettingZooWrapper (default)", "parallel", _anything, EVERY_TASK),
        Client("torchrl_wrapper_mask", "TorchRL PettingZooWrapper(use_mask=True, done_on_any=False)", "parallel", _anything, EVERY_TASK),
        Client("torchrl_wrapper_aec", "TorchRL PettingZooWrapper(use_mask=True) over fleet_marl.env()", "aec", _anything, EVERY_TASK),
        Client(
            "torchrl_wrapper_sequential",
            "TorchRL PettingZooWrapper(use_mask=True) over fleet_marl.env(protocol='sequential')",
            "aec",
            _anything,
            EVERY_TASK,
        ),
        Client("rllib_parallel", "RLlib ParallelPettingZooEnv", "parallel", _anything),
        Client("pufferlib_emulation", "PufferLib PettingZooPufferEnv (emulation)", "parallel", _anything),
        Client("pufferlib_vector", "pufferlib.vector.make(PettingZooPufferEnv, backend=Serial)", "parallel", _anything),
        Client(
            "pufferlib_native",
            "fleet_marl.clients.pufferlib.FleetPufferEnv (native PufferEnv over the vector env, pufferlib.vector.make)",
            "vector",
            _adapter("fleet_marl.clients.pufferlib"),
        ),
        Client(
            "benchmarl",
            "fleet_marl.clients.benchmarl.FleetTask (BenchMARL MAPPO, its own configs)",
            "vector",
            _adapter("fleet_marl.clients.benchmarl"),
        ),
        Client("rllib_env", "fleet_marl.rllib.FleetRLlibEnv (RLlib MultiAgentEnv, one cluster)", "parallel", _anything),
        Client(
            "rllib_vector",
            "fleet_marl.rllib.vector.FleetVectorMultiAgentEnv (RLlib VectorMultiAgentEnv over the vector env; fleet-marl train --engine rllib)",
            "vector",
            _anything,
        ),
        Client(
            "torchrl_native",
            "fleet_marl.torchrl.FleetTorchEnv in TorchRL's SerialEnv (fleet-marl train's env)",
            "vector",
            _flat_only(
                "fleet_marl.torchrl.FleetTorchEnv", "it takes neither option: its TensorDict always holds the observation and the flat mask"
            ),
        ),
        Client(
            "cleanrl_example",
            "the CleanRL example (`experiments/cleanrl_ppo.py`, trained on the vector env; its `GreedyPolicy` on the ParallelEnv)",
            "parallel",
            _anything,
        ),
    )
}


@dataclass
class Cell:
    client: str
    task: str
    obs_mode: str
    mask_layout: str
    status: str  # "runs" or "refused"
    message: str = ""  # the refusal
    steps: int = 0
    ends: int = 0
    agent_steps: int = 0
    rewards_finite: bool = True
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """A refusal that names a working combination, or a run past ``ENDS`` episode ends with finite rewards."""
        if self.status == "refused":
            return "use obs_mode=" in self.message
        return self.ends >= ENDS and self.rewards_finite and self.agent_steps > 0


def build_check(client: str, obs_mode: str, mask_layout: str) -> None:
    """Raise :class:`Refused` if ``client`` cannot take this combination (naming one it can)."""
    if client not in CLIENTS:
        raise KeyError(f"unknown client {client!r}: expected one of {', '.join(CLIENTS)}")
    CLIENTS[client].check(obs_mode, mask_layout)


def scenario(task: str, obs_mode: str, mask_layout: str, max_cycles: int = MAX_CYCLES) -> dict:
    """The env options of a cell: short episodes, a masked choice an error, one reward scheme."""
    return {
        "task": task,
        "obs_mode": obs_mode,
        "mask_layout": mask_layout,
        "max_cycles": max_cycles,
        "illegal_action": "raise",
        "compute_all": False,
    }


def run_cell(client: str, task: str, obs_mode: str, mask_layout: str, seed: int = 0, limit: int = 50) -> Cell:
    """Build ``client`` on the cell's scenario and roll it out past ``ENDS`` episode ends (at
    most ``limit`` steps), or return its refusal."""
    cell = Cell(client, task, obs_mode, mask_layout, "runs")
    try:
        build_check(client, obs_mode, mask_layout)
    except Refused as exc:
        cell.status, cell.message = "refused", str(exc)
        return cell
    t = time.perf_counter()
    r = RUNS[client](scenario(task, obs_mode, mask_layout), ENDS, limit, np.random.default_rng(seed))
    cell.steps, cell.ends, cell.agent_steps, cell.rewards_finite = r.steps, r.ends, r.agent_steps, r.rewards_finite
    cell.seconds = time.perf_counter() - t
    return cell


def cells(clients: Iterable[str] | None = None, tasks: Iterable[str] | None = None) -> list[tuple[str, str, str, str]]:
    """Every (client, task, obs_mode, mask_layout) of the matrix (each client on its own tasks, or on ``tasks``)."""
    return [
        (c, t, o, m)
        for c in (clients or CLIENTS)
        for t in (CLIENTS[c].tasks if tasks is None else tasks)
        for o in OBS_MODES
        for m in MASK_LAYOUTS
    ]


def matrix(clients: Iterable[str] | None = None, tasks: Iterable[str] | None = None) -> list[Cell]:
    """Every cell played (or refused)."""
    return [run_cell(*key) for key in cells(clients, tasks)]


def data(results: list[Cell]) -> dict:
    """The matrix as ``docs/data/client_matrix.json`` holds it (:mod:`fleet_marl.studies.client_matrix`):
    its clients and each cell's verdict (``"fails"`` for a run that is not :attr:`Cell.ok`), without
    run times."""
    names = list(dict.fromkeys(c.client for c in results))
    return {
        "command": "python -m tests.client_harness --docs",
        "clients": [
            {"name": n, "what": CLIENTS[n].what, "tasks": list(dict.fromkeys(c.task for c in results if c.client == n))} for n in names
        ],
        "cells": [
            {
                "client": c.client,
                "task": c.task,
                "obs_mode": c.obs_mode,
                "mask_layout": c.mask_layout,
                "status": c.status if c.ok else "fails",
                "message": c.message,
            }
            for c in results
        ],
    }


def markdown(results: list[Cell]) -> str:
    """The matrix as the markdown table of ``docs/environment.md`` ("The client matrix")."""
    return client_matrix.table(data(results))


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.client_harness [--docs] [--client NAME ...]``: play the matrix and print
    its table; with ``--docs`` (the whole matrix) save it as the docs' data and publish."""
    parser = argparse.ArgumentParser(prog="python -m tests.client_harness", description=main.__doc__)
    parser.add_argument("--docs", action="store_true", help="save docs/data/client_matrix.json and run the publisher")
    parser.add_argument("--client", action="append", choices=list(CLIENTS), help="only these clients (not with --docs)")
    args = parser.parse_args(argv)
    if args.docs and args.client:
        parser.error("--docs plays the whole matrix: leave --client out")
    results = matrix(args.client)
    print(markdown(results))
    if args.docs:
        root = Path(__file__).resolve().parents[1]
        client_matrix.save(root, data(results))
        publish.publish(root, renderers=("fleet_marl.studies.client_matrix",))
    return 0 if all(c.ok for c in results) else 1


__all__ = [
    "CLIENTS",
    "ENDS",
    "EVERY_TASK",
    "MASK_LAYOUTS",
    "MAX_CYCLES",
    "OBS_MODES",
    "TASKS",
    "Cell",
    "Client",
    "Refused",
    "build_check",
    "cells",
    "data",
    "main",
    "markdown",
    "matrix",
    "run_cell",
    "scenario",
]


if __name__ == "__main__":
    raise SystemExit(main())

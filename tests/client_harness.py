"""The outside-client matrix (issue 32): every client x ``obs_mode`` x ``mask_layout`` x a small
and a large task either runs a rollout past two episode ends, with finite rewards and every
action allowed by the masks it was handed, or is refused when it is built, with an error that
names a combination that works.

:func:`build_check` is the refusal (:class:`Refused`, a ``ValueError``): for the clients of
this package it is the adapter's own ``check_options`` (the constructor raises the same
error); for the third-party wrappers of the ParallelEnv it says what the wrapper cannot take.
:func:`run_cell` plays one cell (``tests/client_runs.py`` has a rollout per client), :func:`matrix`
all of them, :func:`markdown` the table of ``docs/environment.md`` ("Outside clients").
``tests/test_client_matrix.py`` runs the whole matrix (and the CleanRL example's cells, which
live beside the script); the harness is the tests', not the package's.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from tests.client_runs import RUNS

OBS_MODES = ("flat", "dict")
MASK_LAYOUTS = ("dims", "flat")
#: A small and a large task: 2 and 16 tenants.
TASKS = ("tiny", "hard")
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
    over: str  # "parallel" (the dict API) or "vector" (the array API)
    check: Callable[[str, str], None]


_TORCHRL_WHY = (
    "TorchRL's PettingZooWrapper makes a tensor of every info value, and the 'dims' mask is a ragged tuple; "
    "with obs_mode='dict' it finds the mask in both the observation and the infos and fails at reset"
)
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
        Client(
            "torchrl_wrapper", "TorchRL PettingZooWrapper (default)", "parallel", _flat_only("TorchRL's PettingZooWrapper", _TORCHRL_WHY)
        ),
        Client(
            "torchrl_wrapper_mask",
            "TorchRL PettingZooWrapper(use_mask=True, done_on_any=False)",
            "parallel",
            _flat_only("TorchRL's PettingZooWrapper(use_mask=True)", _TORCHRL_WHY),
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


def cells(clients: Iterable[str] | None = None, tasks: Iterable[str] = TASKS) -> list[tuple[str, str, str, str]]:
    """Every (client, task, obs_mode, mask_layout) of the matrix."""
    return [(c, t, o, m) for c in (clients or CLIENTS) for t in tasks for o in OBS_MODES for m in MASK_LAYOUTS]


def matrix(clients: Iterable[str] | None = None, tasks: Iterable[str] = TASKS) -> list[Cell]:
    """Every cell played (or refused)."""
    return [run_cell(*key) for key in cells(clients, tasks)]


def markdown(results: list[Cell]) -> str:
    """The matrix as a markdown table: a row per client, a column per ``obs_mode`` / ``mask_layout``
    ("runs" when it ran on every task, else the combination the refusal names first)."""
    cols = [(o, m) for o in OBS_MODES for m in MASK_LAYOUTS]
    head = "| client | " + " | ".join(f"`{o}` / `{m}`" for o, m in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for name in dict.fromkeys(c.client for c in results):
        row = []
        for o, m in cols:
            mine = [c for c in results if c.client == name and (c.obs_mode, c.mask_layout) == (o, m)]
            if all(c.status == "runs" and c.ok for c in mine):
                row.append("runs")
            elif all(c.status == "refused" for c in mine):
                advice = re.search(r"use (obs_mode='\w+', mask_layout='\w+')", mine[0].message)
                row.append(f"refused: use `{advice.group(1)}`" if advice else "refused")
            else:
                row.append("FAILS")
        lines.append(f"| {CLIENTS[name].what if name in CLIENTS else name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


__all__ = [
    "CLIENTS",
    "ENDS",
    "MASK_LAYOUTS",
    "MAX_CYCLES",
    "OBS_MODES",
    "TASKS",
    "Cell",
    "Client",
    "Refused",
    "build_check",
    "cells",
    "markdown",
    "matrix",
    "run_cell",
    "scenario",
]

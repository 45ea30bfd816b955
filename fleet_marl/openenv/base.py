"""What both server views share: building the env of a session from ``reset`` arguments, the
config digest, the fairness report, and OpenEnv's task API over ``fleet_marl.tasks``.

Task API (``GET /{env_name}/splits``, ``POST /{env_name}/tasks`` ...): one split, ``train``,
whose tasks are the named scenarios in ``TASKS`` order (tiny, easy, medium, hard, trace).
``reset(split="train", index=i)`` selects one, as does ``reset(task="easy")``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import numpy as np

from fleet_marl.environment import FleetParallelEnv
from fleet_marl.tasks import TASKS, task_dict

#: The task API's one split.
SPLIT = "train"
TASK_NAMES = tuple(TASKS)
#: What each task is for (the table of fleet_marl.tasks).
TASK_DESCRIPTIONS = {
    "tiny": "2 trainers on one 8-GPU H100 node; the one-round optimum is known",
    "easy": "2 trainers and 2 servers on two H100 nodes, Poisson arrivals, max-min fair arbiter",
    "medium": "8 tenants on H100 and A100 nodes, bursty arrivals, proportional-share arbiter",
    "hard": "16 tenants, four H100 nodes under a tight power cap, correlated bursts, uniform-price auction",
    "trace": "6 tenants replaying Pollux jobs and Azure LLM inference requests",
}


def config_digest(env: FleetParallelEnv) -> str:
    """16 hex digits of the SHA-256 of the scenario (``FleetConfig.to_dict()`` as sorted JSON)."""
    text = json.dumps(env.config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fairness_report(env: FleetParallelEnv) -> dict:
    """The episode's fairness so far, from ``env.tracker``: welfare summed over rounds, Jain's
    index of service (GPU-rounds granted / fair share), and per agent its service, current and
    longest starvation streak, starvation events and event counts."""
    tr = env.tracker
    if not hasattr(tr, "streak"):
        return {}
    agents = {}
    for i, a in enumerate(env.possible_agents):
        agents[a] = {
            "service": float(tr.alloc_sum[i] / tr.fair_sum[i]) if tr.fair_sum[i] > 0 else 1.0,
            "starvation_streak": int(tr.streak[i]),
            "max_starvation_streak": int(tr.max_streak[i]),
            "starvation_events": int(tr.starvation_events[i]),
            **{k: int(v[i]) for k, v in tr.counts.items()},
        }
    return {"welfare": float(tr.welfare_sum), "jain": float(tr.jain_index()), "agents": agents}


def task_spec(index: int) -> dict:
    """The task API's description of task ``index`` of the split."""
    name = TASK_NAMES[index]
    d = task_dict(name)
    return {
        "id": name, "index": index, "split": SPLIT, "description": TASK_DESCRIPTIONS.get(name, ""),
        "tenants": len(d["tenants"]), "max_cycles": d.get("max_cycles"), "reset": {"task": name},
    }


class TaskAPI:
    """OpenEnv's TaskProvider protocol (structural) over ``fleet_marl.tasks``."""

    def list_splits(self) -> list:
        return [SPLIT]

    def _check_split(self, split: str) -> None:
        if split != SPLIT:
            raise ValueError(f"split = {split!r}: expected {SPLIT!r}")

    def list_tasks(self, split: str) -> list:
        self._check_split(split)
        return [task_spec(i) for i in range(len(TASK_NAMES))]

    def num_tasks(self, split: str) -> int:
        self._check_split(split)
        return len(TASK_NAMES)

    def get_task(self, split: str, index: int) -> dict:
        self._check_split(split)
        if not 0 <= index < len(TASK_NAMES):
            raise IndexError(index)
        return task_spec(index)

    def get_task_range(self, split: str, start: Optional[int] = None, stop: Optional[int] = None) -> list:
        self._check_split(split)
        return [task_spec(i) for i in range(len(TASK_NAMES))[start:stop]]


def resolve_task(task: Optional[str], split: Optional[str], index: Optional[int], default: str) -> str:
    """The task a reset asks for: ``task`` by name, or ``split`` and ``index`` of the task API."""
    if index is not None or split is not None:
        if task is not None:
            raise ValueError("reset: give task or split/index, not both")
        if split not in (None, SPLIT):
            raise ValueError(f"reset: split = {split!r}: expected {SPLIT!r}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(TASK_NAMES):
            raise ValueError(f"reset: index = {index!r}: expected an integer in [0, {len(TASK_NAMES) - 1}]")
        return TASK_NAMES[index]
    task = default if task is None else task
    if task not in TASKS:
        raise ValueError(f"reset: task = {task!r}: expected one of {', '.join(TASK_NAMES)}")
    return task


class SessionEnv:
    """The ``FleetParallelEnv`` of one session, rebuilt only when the task or the overrides
    change (so ``reset(seed=None)`` continues the seed sequence, as locally)."""

    def __init__(self) -> None:
        self.env: Optional[FleetParallelEnv] = None
        self.key: Any = None
        self.task: Optional[str] = None

    def get(self, task: str, config: Optional[dict], extra: Optional[dict] = None) -> FleetParallelEnv:
        overrides = dict(config or {})
        for k in ("obs_mode", "render_mode"):
            if k in overrides:
                raise ValueError(f"reset: config.{k}: not settable over the wire (the server chooses it)")
        overrides.update(extra or {})
        key = (task, json.dumps(overrides, sort_keys=True, default=str))
        if self.env is None or key != self.key:
            env = FleetParallelEnv(task=task, **overrides)  # a ConfigError names the bad field
            if self.env is not None:
                self.env.close()
            self.env, self.key, self.task = env, key, task
        return self.env


def check_seed(seed: Any) -> Optional[int]:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"reset: seed = {seed!r}: expected None or a non-negative integer")
    return None if seed is None else int(seed)


__all__ = ["SPLIT", "SessionEnv", "TASK_NAMES", "TaskAPI", "check_seed", "config_digest", "fairness_report", "resolve_task", "task_spec"]

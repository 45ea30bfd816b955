"""What both server views share: building the env of a session from ``reset`` arguments, the
config digest, the fairness report, and OpenEnv's task API over ``fleet_marl.tasks``.

Task API (``GET /{env_name}/splits``, ``POST /{env_name}/tasks`` ...): one split, ``train``,
whose tasks are the named scenarios of the registry ``fleet_marl.tasks.TASKS``, in its order.
``reset(split="train", index=i)`` selects one, as does ``reset(task="easy")``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fleet_marl.checks import is_seed
from fleet_marl.config import FleetConfig
from fleet_marl.environment import FleetParallelEnv, FleetSequentialEnv
from fleet_marl.errors import ClientError, short_repr
from fleet_marl.openenv.cost import check_work
from fleet_marl.openenv.limits import ServerLimits, check_config, check_overrides, trace_values
from fleet_marl.tasks import TASKS, make_config, task_dict

#: The task API's one split.
SPLIT = "train"


def task_names() -> tuple[str, ...]:
    """The task API's tasks: the registry ``fleet_marl.tasks.TASKS``, read at each call (a
    task registered after the server started is listed too)."""
    return tuple(TASKS)


def config_digest(env: FleetParallelEnv) -> str:
    """16 hex digits of the SHA-256 of the scenario (``FleetConfig.to_dict()`` as sorted JSON)."""
    text = json.dumps(env.config.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fairness_report(env: FleetParallelEnv) -> dict:
    """The episode's fairness so far, from ``env.fairness`` (``fleet_marl.fairness.summary()``): welfare summed over
    rounds, Jain's index of service (GPU-rounds granted / fair share), and per agent its
    service, current and longest starvation streak, starvation events and event counts."""
    s = env.fairness
    agents = {}
    for i, a in enumerate(env.possible_agents):
        agents[a] = {
            "service": float(s.service[i]),
            "starvation_streak": int(s.streak[i]),
            "max_starvation_streak": int(s.max_streak[i]),
            "starvation_events": int(s.starvation_events[i]),
            **{k: int(v[i]) for k, v in s.counts.items()},
        }
    return {"welfare": float(s.welfare), "jain": float(s.jain), "agents": agents}


def task_spec(index: int) -> dict:
    """The task API's description of task ``index`` of the split."""
    name = task_names()[index]
    d = task_dict(name)
    return {
        "id": name,
        "index": index,
        "split": SPLIT,
        "description": TASKS[name].description,
        "tenants": len(d["tenants"]),
        "max_cycles": d.get("max_cycles"),
        "reset": {"task": name},
    }


class TaskAPI:
    """OpenEnv's TaskProvider protocol (structural) over ``fleet_marl.tasks``."""

    def list_splits(self) -> list:
        return [SPLIT]

    def _check_split(self, split: str) -> None:
        if split != SPLIT:
            raise ClientError(f"split = {short_repr(split)}: expected {SPLIT!r}")

    def list_tasks(self, split: str) -> list:
        self._check_split(split)
        return [task_spec(i) for i in range(len(task_names()))]

    def num_tasks(self, split: str) -> int:
        self._check_split(split)
        return len(task_names())

    def get_task(self, split: str, index: int) -> dict:
        self._check_split(split)
        if not 0 <= index < len(task_names()):
            raise IndexError(index)
        return task_spec(index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list:
        self._check_split(split)
        return [task_spec(i) for i in range(len(task_names()))[start:stop]]


def resolve_task(task: str | None, split: str | None, index: int | None, default: str) -> str:
    """The task a reset asks for: ``task`` by name, or ``split`` and ``index`` of the task API."""
    if index is not None or split is not None:
        if task is not None:
            raise ClientError("reset: give task or split/index, not both")
        if split not in (None, SPLIT):
            raise ClientError(f"reset: split = {short_repr(split)}: expected {SPLIT!r}")
        names = task_names()
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(names):
            raise ClientError(f"reset: index = {short_repr(index)}: expected an integer in [0, {len(names) - 1}]")
        return names[index]
    task = default if task is None else task
    if task not in TASKS:
        raise ClientError(f"reset: task = {short_repr(task)}: expected one of {', '.join(task_names())}")
    return task


class SessionEnv:
    """The ``FleetParallelEnv`` of one session, rebuilt only when the task or the overrides
    change (so ``reset(seed=None)`` continues the seed sequence, as locally). ``env`` is it (the
    round engine), ``aec`` the sequential protocol's AEC env over it when the ego view's config
    asks for one (else None).

    Every scenario it builds is checked against ``limits`` first (:func:`check_config`): within
    the server's limits, and naming only registry traces, apart from ``trusted_traces`` (those of
    the operator's own default config). A built-in task's traces are registry names."""

    def __init__(self, limits: ServerLimits | None = None, trusted_traces: AbstractSet[str] = frozenset()) -> None:
        self.env: FleetParallelEnv | None = None
        self.aec: FleetSequentialEnv | None = None
        self.key: Any = None
        self.task: str | None = None
        self.limits = ServerLimits() if limits is None else limits
        self.trusted_traces = frozenset(trusted_traces)

    def get(
        self,
        task: str,
        config: dict | None,
        extra: dict | None = None,
        sequential: bool = False,
        check: Callable[[FleetConfig], None] | None = None,
    ) -> FleetParallelEnv:
        """The session's env for ``task`` and ``config`` (overrides); with ``sequential`` (the ego
        view) ``config`` ``{"protocol": "sequential", ...}`` builds the sequential protocol's AEC
        env (``aec``; the env returned is its round engine), which the multi view (a ParallelEnv
        over the wire) refuses as ``parallel_env`` does. ``check(config)`` runs on the scenario
        before anything changes (it raises to refuse)."""
        overrides = dict(config or {})
        for k in ("obs_mode", "render_mode", "mask_layout"):
            if k in overrides:
                raise ClientError(f"reset: config.{k}: not settable over the wire (the server chooses it)")
        overrides.update(extra or {})
        # the wire reports every scheme's reward (docs/llm_agents.md) unless the client asks for fewer
        overrides.setdefault("compute_all", True)
        check_overrides(overrides, self.limits)  # cheap checks first: the key below walks the whole mapping
        key = (task, json.dumps(overrides, sort_keys=True, default=str), sequential)
        current = self.env
        if current is not None and key == self.key:
            if check is not None:
                check(current.config)
            return current
        cfg, _ = make_config(task, None, **overrides)  # a ConfigError names the bad field
        check_config(cfg, self.limits, trace_values(task_dict(task)) | self.trusted_traces)
        check_work(cfg, self.limits)  # the round's own cost; the ego view's check adds its opponents
        if check is not None:
            check(cfg)
        aec: FleetSequentialEnv | None = None
        if sequential and overrides.get("protocol") == "sequential":
            aec = FleetSequentialEnv(task=task, **overrides)  # a ConfigError names the bad field
            env = aec.env
        else:
            env = FleetParallelEnv(task=task, **overrides)  # a ConfigError names the bad field
        old = self.aec if self.aec is not None else self.env
        if old is not None:
            old.close()
        self.env, self.aec, self.key, self.task = env, aec, key, task
        return env


def package_version() -> str:
    """The installed fleet-marl version (``"0"`` when running from a source tree that was never installed)."""
    try:
        return version("fleet-marl")
    except PackageNotFoundError:  # pragma: no cover
        return "0"


#: The longest ``episode_id`` a reset takes (OpenEnv's HTTP ``ResetRequest`` has the same bound).
MAX_EPISODE_ID = 255


def check_episode_id(episode_id: Any) -> str | None:
    if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > MAX_EPISODE_ID):
        raise ClientError(
            f"reset: episode_id = {short_repr(episode_id, 40)}: expected None or a string of at most {MAX_EPISODE_ID} characters"
        )
    return episode_id


#: The arguments of a reset that both views take (the ego view takes its own after them).
RESET_ARGS = ("seed", "episode_id", "task", "config", "split", "index")


def check_reset_args(unknown: dict, own: tuple[str, ...] = ()) -> None:
    """A reset's ``unknown`` arguments (beyond :data:`RESET_ARGS` and the view's ``own``) are an
    error that names the first."""
    if unknown:
        raise ClientError(f"reset: unknown argument {short_repr(sorted(unknown)[0])}: expected {', '.join(RESET_ARGS + own)}")


def check_seed(seed: Any) -> int | None:
    if seed is not None and not is_seed(seed):
        raise ClientError(f"reset: seed = {short_repr(seed)}: expected None or a non-negative integer")
    return None if seed is None else int(seed)


__all__ = [
    "MAX_EPISODE_ID",
    "RESET_ARGS",
    "SPLIT",
    "SessionEnv",
    "TaskAPI",
    "check_episode_id",
    "check_reset_args",
    "check_seed",
    "config_digest",
    "fairness_report",
    "package_version",
    "resolve_task",
    "task_names",
    "task_spec",
]

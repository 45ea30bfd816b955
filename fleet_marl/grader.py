"""The grader: run a policy for a list of seeds and score it against the reference policies.

::

    score = clip((W_policy - W_random) / (W_planner - W_random), 0, 1)

with ``W`` the mean episode welfare (``sum_t G_t``, the sum of every tenant's utility over
the episode) over the same seeds: 0 is no better than the ``random`` policy, 1 is as good as
the centralized ``planner`` or better. Everything is deterministic for a list of seeds: the
episode with seed ``s`` resets the environment and the policy with ``s``.

>>> from fleet_marl.grader import evaluate
>>> ev = evaluate("tiny", "precision_expert", episodes=2, progress=False)  # doctest: +SKIP
>>> round(ev.score, 2)  # doctest: +SKIP

A policy is given as a reference name (``policies.POLICIES``), ``package.module:Name``, a
path to a ``.py`` file (``my_policy.py`` or ``my_policy.py:Name``), a ``fleet-marl train``
checkpoint (the run folder or its ``checkpoint/``; greedy play of the trained modules, needs
Ray's RLlib installed), a class or a factory ``env -> policy``, or a policy object that is not bound to another env. ``Name`` is a class or a function; it is called with the env if it
takes an argument, else with none. A file without ``:Name`` must define ``make_policy(env)``
or exactly one class with ``act`` and ``reset`` methods. Every problem -- an import that
fails, an object that lacks the protocol, a malformed action -- is a :class:`PolicyError`
that names the source, the agent and the problem.

The reference welfares are cached per (task, overrides, seed, policy, code version and the
contents of any trace file the task replays) under
``$FLEET_MARL_CACHE`` (default ``~/.cache/fleet_marl``), so repeated evaluations only run the
policy under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fleet_marl.environment import ActionError, FleetParallelEnv, parallel_env

RANDOM, REFERENCE = "random", "planner"
#: Event counts summed over tenants and episodes.
EVENTS = ("oom", "veto", "throttle", "degenerate")


class PolicyError(Exception):
    """A policy that cannot be loaded or that misbehaves. Names the source, the agent (when
    one is involved) and the problem."""

    def __init__(self, source: str, problem: str, agent: str | None = None):
        self.source, self.problem, self.agent = source, problem, agent
        super().__init__(source, problem, agent)  # args as given: copy and pickle rebuild it (Ray does)

    def __str__(self) -> str:
        where = f"policy {self.source}" + (f", agent {self.agent}" if self.agent else "")
        return f"{where}: {self.problem}"


class GraderError(ValueError):
    """The score is undefined (the reference does not beat random on these seeds)."""


# --- loading policies ------------------------------------------------------------------------------


def _call(source: str, obj, env):
    try:
        params = [p for p in inspect.signature(obj).parameters.values() if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = [None]
    try:
        return obj(env) if params else obj()
    except Exception as exc:  # the user's constructor
        raise PolicyError(source, f"constructing it raised {type(exc).__name__}: {exc}") from exc


def _check_protocol(source: str, policy) -> Any:
    missing = [m for m in ("reset", "act") if not callable(getattr(policy, m, None))]
    if missing:
        raise PolicyError(source, f"{type(policy).__name__} lacks {' and '.join(m + '()' for m in missing)}; expected the Policy protocol: reset(seed) and act(observations, infos) -> {{agent: action}} (see fleet_marl/policies/base.py)")
    return policy


def _from_module(source: str, module, name: str | None, env):
    if name:
        if not hasattr(module, name):
            found = sorted(k for k, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
            raise PolicyError(source, f"no attribute {name!r} in the module; classes defined there: {', '.join(found) or 'none'}")
        return _call(source, getattr(module, name), env)
    if callable(getattr(module, "make_policy", None)):
        return _call(source, module.make_policy, env)
    classes = [
        v for v in vars(module).values()
        if inspect.isclass(v) and v.__module__ == module.__name__ and callable(getattr(v, "act", None)) and callable(getattr(v, "reset", None))
    ]
    if len(classes) != 1:
        if classes:
            what = f"{len(classes)} classes with act() and reset() ({', '.join(c.__name__ for c in classes)})"
        else:
            others = [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
            lacks = [f"{c.__name__} lacks {' and '.join(m + '()' for m in ('reset', 'act') if not callable(getattr(c, m, None)))}" for c in others]
            what = "no class with act() and reset()" + (f" ({'; '.join(lacks)})" if lacks else "")
        raise PolicyError(source, f"defines {what}; expected make_policy(env) or exactly one such class, or name one with {source}:ClassName")
    return _call(source, classes[0], env)


def source_name(spec) -> str:
    """How a policy given as an object, a class or a factory is named in reports and errors."""
    if isinstance(spec, str):
        return spec
    if inspect.isclass(spec) or inspect.isfunction(spec):
        return spec.__qualname__
    return getattr(spec, "name", None) or type(spec).__qualname__


def _fleet_env_or_none(env):
    from fleet_marl.policies.base import fleet_env

    try:
        return fleet_env(env)
    except TypeError:
        return None


def _on_path(folder: Path) -> None:
    """Put ``folder`` first on ``sys.path`` (as ``python file.py`` and ``python -m`` do), so a
    policy can import its siblings and ``module:Name`` finds modules in the working directory."""
    f = str(folder.resolve())
    if f not in sys.path:
        sys.path.insert(0, f)


def load_policy(spec, env) -> Any:
    """A policy object for ``env`` from ``spec`` (see the module docstring)."""
    if not isinstance(spec, str):
        name = source_name(spec)
        if inspect.isclass(spec) or (callable(spec) and not callable(getattr(spec, "act", None))):
            return _check_protocol(name, _call(name, spec, env))
        if callable(getattr(spec, "act", None)):
            bound = _fleet_env_or_none(getattr(spec, "env", None))
            if bound is not None and bound is not env:
                raise PolicyError(name, "is bound to another environment than the one being evaluated; pass its class or a factory env -> policy instead (for example lambda env: policies.make('bidder', env))")
            return _check_protocol(name, spec)
        raise PolicyError(repr(spec), "expected a reference policy name, 'module:Name', a .py path, a policy object, a class or a factory env -> policy")
    from fleet_marl import policies

    if spec in policies.POLICIES:
        return policies.make(spec, env)
    folder = Path(spec)
    if folder.is_dir() and ((folder / "fleet_marl.json").is_file() or (folder / "checkpoint" / "fleet_marl.json").is_file()):
        return _from_checkpoint(spec, folder, env)
    path_part, _, name = spec.partition(":") if not (len(spec) > 1 and spec[1] == ":" and spec[0].isalpha()) else (spec, "", "")
    if path_part.endswith(".py"):
        path = Path(path_part)
        if not path.is_file():
            raise PolicyError(spec, f"file {path} not found (looked from {Path.cwd()})")
        mod_name = f"fleet_marl_user_policy_{hashlib.blake2b(str(path.resolve()).encode(), digest_size=6).hexdigest()}"
        _on_path(path.parent)
        try:
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = module
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise PolicyError(str(path), f"failed to import: {type(exc).__name__}: {exc}") from exc
        return _check_protocol(spec, _from_module(spec, module, name or None, env))
    if name:
        _on_path(Path.cwd())
        try:
            module = importlib.import_module(path_part)
        except Exception as exc:
            raise PolicyError(spec, f"failed to import module {path_part!r}: {type(exc).__name__}: {exc}") from exc
        return _check_protocol(spec, _from_module(spec, module, name, env))
    raise PolicyError(spec, f"unknown policy; expected a reference policy ({', '.join(policies.POLICIES)}), 'package.module:Name' or a path to a .py file")


def _from_checkpoint(spec: str, folder: Path, env):
    """The greedy policy of a ``fleet-marl train`` checkpoint (a run folder or its checkpoint/)."""
    from fleet_marl.rllib.policy import ModulePolicy

    if not (folder / "fleet_marl.json").is_file():
        folder = folder / "checkpoint"
    import json

    meta = json.loads((folder / "fleet_marl.json").read_text())
    sig = meta.get("signature", {})
    fe = _fleet_env_or_none(env)
    if fe is not None:
        want = {"possible_agents": list(fe.possible_agents), "nvec": fe.nvec.max(0).tolist()}
        for k, v in want.items():
            if sig.get(k) != v:
                raise PolicyError(spec, f"the checkpoint was trained on task {sig.get('task')!r} with {k} = {sig.get(k)!r}; this environment has {v!r}. Evaluate it on its own task")
        trained = meta.get("train_config", {})
        if trained:  # the scenario it learned, rewards aside, must be the one being played
            from fleet_marl.tasks import make_config

            cfg, _ = make_config(trained.get("task"), None, **trained.get("env", {}))
            same = dataclasses.replace(cfg, reward=fe.config.reward, backend=fe.config.backend) == fe.config
            if not same:
                raise PolicyError(spec, f"the checkpoint was trained on task {trained.get('task')!r} with env overrides {trained.get('env', {})!r}, "
                                        "and this environment's scenario differs; evaluate it with the same overrides, e.g. "
                                        f"grader.evaluate({trained.get('task')!r}, {spec!r}, overrides={trained.get('env', {})!r})")
    try:
        return ModulePolicy.from_checkpoint(folder, env)
    except Exception as exc:
        raise PolicyError(spec, f"failed to load the checkpoint: {type(exc).__name__}: {exc}") from exc


# --- running episodes ----------------------------------------------------------------------------


@dataclass
class Episode:
    """One episode's result."""

    seed: int
    welfare: float
    rounds: int
    jain: float
    max_starvation_streak: int
    starvation_events: int
    events: dict[str, int]
    illegal: int  # masked choices (vetoed or capped by the env)
    agents: dict[str, dict]  # each agent's episode report (``infos[agent]["episode"]``)


def _checked_actions(source: str, env: FleetParallelEnv, actions, round_: int) -> dict:
    if not isinstance(actions, dict):
        raise PolicyError(source, f"act() returned a {type(actions).__name__} at round {round_}; expected a dict {{agent: action}} for the live agents {', '.join(env.agents)}")
    for a in actions:
        if a not in env.agents:
            raise PolicyError(source, f"act() returned an action for {a!r} at round {round_}, which is not a live agent; live: {', '.join(env.agents)}. "
                              "step() returns an observation for an agent on the round it finishes: act only for the agents in env.agents", agent=str(a))
    for a in env.agents:
        if a not in actions:
            raise PolicyError(source, f"act() returned no action at round {round_}; expected one for every live agent", agent=a)
        try:
            env.check_action(a, actions[a])
        except ActionError as exc:
            raise PolicyError(source, f"malformed action at round {round_}: {exc.field} = {exc.value!r}; expected {exc.expected}", agent=a) from None
    return actions


def run_episode(env: FleetParallelEnv, policy, seed: int, source: str = "policy") -> Episode:
    """Play one episode of ``env`` with ``policy`` from ``seed``, checking every action."""
    obs, infos = env.reset(seed=seed)
    for k, a in enumerate(env.possible_agents):  # so action_space(a).sample(mask) is reproducible too
        env.action_space(a).seed(seed * 1_000_003 + k)
    try:
        policy.reset(seed)
    except Exception as exc:
        raise PolicyError(source, f"reset({seed}) raised {type(exc).__name__}: {exc}") from exc
    reports: dict[str, dict] = {}
    illegal = 0
    while env.agents:
        try:
            actions = policy.act(obs, infos)
        except PolicyError:
            raise
        except Exception as exc:
            raise PolicyError(source, f"act() raised {type(exc).__name__} at round {env.round}: {exc}") from exc
        obs, _, _, _, infos = env.step(_checked_actions(source, env, actions, env.round))
        for a, info in infos.items():
            illegal += bool(info["illegal"])
            if "episode" in info:
                reports[a] = info["episode"]
    last = max(reports.values(), key=lambda r: r["rounds"])  # the last to finish saw the whole episode
    return Episode(
        seed=seed,
        welfare=float(last["welfare"]),
        rounds=env.round,
        jain=float(last["jain"]),
        max_starvation_streak=max(r["max_starvation_streak"] for r in reports.values()),
        starvation_events=sum(r["starvation_events"] for r in reports.values()),
        events={k: sum(int(r[k]) for r in reports.values()) for k in EVENTS},
        illegal=illegal,
        agents={a: reports[a] for a in env.possible_agents if a in reports},
    )


def make_env(task: str, **overrides) -> FleetParallelEnv:
    """The evaluation env: ``task`` with ``overrides``; only the configured reward scheme is
    computed (welfare, the score's measure, does not depend on the schemes)."""
    overrides.setdefault("compute_all", False)
    return parallel_env(task=task, **overrides)


# --- the reference cache ----------------------------------------------------------------------------


def code_version() -> str:
    """A digest of the code and data that decide an episode (fleet_marl and policies)."""
    import fleet_marl
    from fleet_marl import policies

    h = hashlib.blake2b(digest_size=12)
    for root in (Path(fleet_marl.__file__).parent, Path(policies.__file__).parent):
        for p in sorted(root.rglob("*")):
            # the training and serving layers never change a reference episode
            if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts and not {"rllib", "openenv"} & set(p.relative_to(root).parts[:1]):
                h.update(p.relative_to(root.parent).as_posix().encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def _cache_dir() -> Path:
    return Path(os.environ.get("FLEET_MARL_CACHE", Path.home() / ".cache" / "fleet_marl")) / "grader"


_TRACE_DIGESTS: dict[tuple, str] = {}


def data_version(env: FleetParallelEnv) -> str:
    """A digest of the trace files the env replays (empty when it replays none)."""
    from fleet_marl.workloads import resolve_trace

    h = hashlib.blake2b(digest_size=12)
    for t in env.config.tenants:
        if t.workload.pattern != "trace":
            continue
        p = resolve_trace(t.workload.trace).resolve()
        stat = p.stat()
        key = (str(p), stat.st_size, stat.st_mtime_ns)
        if key not in _TRACE_DIGESTS:
            _TRACE_DIGESTS[key] = hashlib.blake2b(p.read_bytes(), digest_size=12).hexdigest()
        h.update(_TRACE_DIGESTS[key].encode())
    return h.hexdigest()


def _cache_key(task: str, overrides: dict, policy: str, seed: int, version: str) -> str:
    blob = json.dumps({"task": task, "overrides": overrides, "policy": policy, "seed": seed, "version": version}, sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def reference_episodes(task: str, name: str, seeds, overrides: dict | None = None, progress=None, cache: bool = True) -> list[Episode]:
    """Episodes of the reference policy ``name`` (random or planner), from the cache when it
    has them."""
    overrides = dict(overrides or {})
    env, pol = make_env(task, **overrides), None
    version = code_version() + data_version(env) if cache else ""
    out = []
    d = _cache_dir()
    for s in seeds:
        path = d / f"{_cache_key(task, overrides, name, int(s), version)}.json"
        if cache and path.is_file():
            try:
                out.append(Episode(**json.loads(path.read_text())))
                if progress is not None:
                    progress.update(1)
                continue
            except (OSError, ValueError, TypeError):
                pass  # a damaged entry is recomputed
        if pol is None:
            pol = load_policy(name, env)
        ep = run_episode(env, pol, int(s), name)
        out.append(ep)
        if cache:
            try:
                d.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(asdict(ep)))
                tmp.replace(path)
            except OSError:
                pass  # a read-only home: no cache
        if progress is not None:
            progress.update(1)
    return out


# --- evaluation -------------------------------------------------------------------------------------


@dataclass
class Evaluation:
    """A policy's evaluation on one task: its episodes, the references' and the score."""

    task: str
    policy: str
    seeds: list[int]
    episodes: list[Episode]
    random_welfare: list[float]
    reference_welfare: list[float]
    overrides: dict = field(default_factory=dict)

    @property
    def welfare(self) -> np.ndarray:
        return np.array([e.welfare for e in self.episodes])

    @property
    def score(self) -> float:
        return score(float(self.welfare.mean()), float(np.mean(self.random_welfare)), float(np.mean(self.reference_welfare)))

    def summary(self) -> dict:
        """The JSON report (``fleet-marl evaluate --json``)."""
        eps = self.episodes
        rho = [r["rho"] for e in eps for r in e.agents.values() if r.get("rho") is not None]
        waits = [r["p99_wait_s"] for e in eps for r in e.agents.values() if r.get("p99_wait_s") is not None]
        return {
            "task": self.task,
            "policy": self.policy,
            "episodes": len(eps),
            "seeds": list(self.seeds),
            "welfare_mean": float(self.welfare.mean()),
            "welfare_std": float(self.welfare.std()),
            "welfare": self.welfare.tolist(),
            "score": self.score,
            "random_welfare_mean": float(np.mean(self.random_welfare)),
            "reference_welfare_mean": float(np.mean(self.reference_welfare)),
            "jain_mean": float(np.mean([e.jain for e in eps])),
            "starvation_events": int(sum(e.starvation_events for e in eps)),
            "max_starvation_streak": int(max(e.max_starvation_streak for e in eps)),
            "rho_mean": float(np.mean(rho)) if rho else None,
            "p99_wait_s_max": float(np.max(waits)) if waits else None,
            "rounds_mean": float(np.mean([e.rounds for e in eps])),
            "illegal": int(sum(e.illegal for e in eps)),
            **{k: int(sum(e.events[k] for e in eps)) for k in EVENTS},
            "agents": _agent_table(eps),
        }


def _agent_table(eps: list[Episode]) -> dict[str, dict]:
    agents = list(eps[0].agents)
    out = {}
    for a in agents:
        rs = [e.agents[a] for e in eps if a in e.agents]
        out[a] = {
            "return_mean": float(np.mean([r["return"] for r in rs])),
            "utility_mean": float(np.mean([r["utility"] for r in rs])),
            "service_mean": float(np.mean([r["service"] for r in rs])),
            "jobs_done": int(sum(r["jobs_done"] for r in rs)),
            "starvation_events": int(sum(r["starvation_events"] for r in rs)),
            "degenerate": int(sum(r["degenerate"] for r in rs)),
        }
    return out


def score(welfare: float, random_welfare: float, reference_welfare: float) -> float:
    """``clip((W - W_random) / (W_reference - W_random), 0, 1)``."""
    span = reference_welfare - random_welfare
    if not span > 0:
        raise GraderError(f"the score is undefined: reference welfare {reference_welfare:.3f} does not exceed random welfare {random_welfare:.3f} on these seeds; use more episodes or another task")
    return float(np.clip((welfare - random_welfare) / span, 0.0, 1.0))


def evaluate(
    task: str,
    policy: str | Callable | Any,
    episodes: int = 10,
    seed: int = 0,
    overrides: dict | None = None,
    progress: bool = True,
    cache: bool = True,
) -> Evaluation:
    """Evaluate ``policy`` on ``task`` for seeds ``seed .. seed + episodes - 1``, with the
    random and planner references on the same seeds."""
    from fleet_marl.tasks import TASKS

    if task not in TASKS:
        raise ValueError(f"task = {task!r}: expected one of {', '.join(TASKS)}")
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes = {episodes!r}: expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed = {seed!r}: expected a non-negative integer")
    overrides = dict(overrides or {})
    seeds = list(range(int(seed), int(seed) + int(episodes)))
    env = make_env(task, **overrides)
    source = source_name(policy)
    pol = load_policy(policy, env)
    bar = None
    if progress:
        from tqdm import tqdm

        own = 0 if isinstance(policy, str) and policy in (RANDOM, REFERENCE) else len(seeds)
        bar = tqdm(total=2 * len(seeds) + own, desc=f"evaluate {task}", unit="episode", file=sys.stderr, leave=False)
    try:
        rand = reference_episodes(task, RANDOM, seeds, overrides, bar, cache)
        ref = reference_episodes(task, REFERENCE, seeds, overrides, bar, cache)
        if isinstance(policy, str) and policy in (RANDOM, REFERENCE):
            eps = rand if policy == RANDOM else ref  # the same episodes: play them once
        else:
            eps = []
            for s in seeds:
                eps.append(run_episode(env, pol, s, str(source)))
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return Evaluation(
        task=task, policy=str(source), seeds=seeds, episodes=eps,
        random_welfare=[e.welfare for e in rand], reference_welfare=[e.welfare for e in ref], overrides=overrides,
    )


__all__ = ["Episode", "Evaluation", "GraderError", "PolicyError", "code_version", "data_version", "evaluate", "load_policy", "make_env", "reference_episodes", "run_episode", "score", "source_name"]

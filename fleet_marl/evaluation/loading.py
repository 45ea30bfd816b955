"""Loading policies: a policy spec -> a policy object bound to one env.

A policy is given as a reference name (``fleet_marl.policies.POLICIES``), ``package.module:Name``,
a path to a ``.py`` file (``my_policy.py`` or ``my_policy.py:Name``), a spec a registered
:class:`PolicyLoader` accepts (``fleet_marl.rllib`` registers one for ``fleet-marl train`` run
folders and checkpoints), a class or a factory ``env -> policy``, or a policy object that is not
bound to another env. ``Name`` is a class or a function; it is called with the env if it takes
an argument, else with none. A file without ``:Name`` must define ``make_policy(env)`` or
exactly one class with ``act`` and ``reset`` methods. Every problem -- an import that fails, an
object that lacks the protocol -- is a :class:`PolicyError` naming the source and the problem.

Plug-ins. A package adds a kind of policy spec without this module knowing it: it declares a
:class:`PolicyLoader` under the entry-point group ``fleet_marl.policy_loaders`` in its
``pyproject.toml`` (how ``fleet_marl.rllib`` adds trained checkpoints)::

    [project.entry-points."fleet_marl.policy_loaders"]
    rllib = "fleet_marl.rllib.loader:LOADER"

or calls :func:`register_loader` at run time. A loader's module must import cheaply (no Ray,
no torch): it is imported whenever a spec is not a reference name.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet_marl.policies import POLICIES, fleet_env, make

#: The entry-point group of policy loader plug-ins.
ENTRY_POINT_GROUP = "fleet_marl.policy_loaders"


class PolicyError(Exception):
    """A policy that cannot be loaded or that misbehaves. Names the source, the agent (when
    one is involved) and the problem."""

    def __init__(self, source: str, problem: str, agent: str | None = None):
        self.source, self.problem, self.agent = source, problem, agent
        super().__init__(source, problem, agent)  # args as given: copy and pickle rebuild it (Ray does)

    def __str__(self) -> str:
        where = f"policy {self.source}" + (f", agent {self.agent}" if self.agent else "")
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class PolicyLoader:
    """A plug-in kind of policy spec: ``accepts(spec)`` says whether a string is one (cheaply,
    without heavy imports) and ``load(spec, env)`` returns the policy, raising
    :class:`PolicyError` for a spec it accepts but cannot load."""

    name: str
    accepts: Callable[[str], bool]
    load: Callable[[str, Any], Any]
    description: str  # what the spec looks like, for the error that lists the kinds


_REGISTERED: dict[str, PolicyLoader] = {}


def register_loader(loader: PolicyLoader) -> None:
    """Add (or replace, by name) a policy loader at run time."""
    if not isinstance(loader, PolicyLoader):
        raise TypeError(f"register_loader: expected a PolicyLoader, got {type(loader).__name__}")
    _REGISTERED[loader.name] = loader


def loaders() -> dict[str, PolicyLoader]:
    """Every policy loader: those of the ``fleet_marl.policy_loaders`` entry points (loaded
    once), then those registered at run time (which win on a name clash)."""
    return {**_entry_point_loaders(), **_REGISTERED}


@functools.cache
def _entry_point_loaders() -> dict[str, PolicyLoader]:
    """The loaders the ``fleet_marl.policy_loaders`` entry points declare (loaded once)."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 -- a broken plug-in must not break the reference policies: warn, skip it
            print(f"warning: policy loader {ep.name} ({ep.value}) failed to load: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if isinstance(obj, PolicyLoader):
            found[obj.name] = obj
        else:
            print(f"warning: policy loader {ep.name} ({ep.value}) is a {type(obj).__name__}, not a PolicyLoader; ignored", file=sys.stderr)
    return found


def _call(source: str, obj, env):
    try:
        takes_env = any(
            p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in inspect.signature(obj).parameters.values()
        )
    except (TypeError, ValueError):
        takes_env = True
    try:
        return obj(env) if takes_env else obj()
    except Exception as exc:  # the user's constructor
        raise PolicyError(source, f"constructing it raised {type(exc).__name__}: {exc}") from exc


def _check_protocol(source: str, policy) -> Any:
    missing = [m for m in ("reset", "act") if not callable(getattr(policy, m, None))]
    if missing:
        raise PolicyError(
            source,
            f"{type(policy).__name__} lacks {' and '.join(m + '()' for m in missing)}; expected the Policy protocol: reset(seed) and act(observations, infos) -> {{agent: action}} (see fleet_marl/policies/base.py)",
        )
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
        v
        for v in vars(module).values()
        if inspect.isclass(v)
        and v.__module__ == module.__name__
        and callable(getattr(v, "act", None))
        and callable(getattr(v, "reset", None))
    ]
    if len(classes) != 1:
        if classes:
            what = f"{len(classes)} classes with act() and reset() ({', '.join(c.__name__ for c in classes)})"
        else:
            others = [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
            lacks = [
                f"{c.__name__} lacks {' and '.join(m + '()' for m in ('reset', 'act') if not callable(getattr(c, m, None)))}"
                for c in others
            ]
            what = "no class with act() and reset()" + (f" ({'; '.join(lacks)})" if lacks else "")
        raise PolicyError(
            source, f"defines {what}; expected make_policy(env) or exactly one such class, or name one with {source}:ClassName"
        )
    return _call(source, classes[0], env)


def source_name(spec) -> str:
    """How a policy given as an object, a class or a factory is named in reports and errors."""
    if isinstance(spec, str):
        return spec
    if inspect.isclass(spec) or inspect.isfunction(spec):
        return spec.__qualname__
    return getattr(spec, "name", None) or type(spec).__qualname__


def fleet_env_or_none(env):
    """The fleet_marl env under ``env`` (see :func:`fleet_marl.policies.fleet_env`), or None."""
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
            bound = fleet_env_or_none(getattr(spec, "env", None))
            if bound is not None and bound is not env:
                raise PolicyError(
                    name,
                    "is bound to another environment than the one being evaluated; pass its class or a factory env -> policy instead (for example lambda env: fleet_marl.policies.make('bidder', env))",
                )
            return _check_protocol(name, spec)
        raise PolicyError(
            repr(spec), "expected a reference policy name, 'module:Name', a .py path, a policy object, a class or a factory env -> policy"
        )
    if spec in POLICIES:
        return make(spec, env)
    for loader in loaders().values():
        if loader.accepts(spec):
            return _check_protocol(spec, loader.load(spec, env))
    path_part, _, name = spec.partition(":") if not (len(spec) > 1 and spec[1] == ":" and spec[0].isalpha()) else (spec, "", "")
    if path_part.endswith(".py"):
        path = Path(path_part)
        if not path.is_file():
            raise PolicyError(spec, f"file {path} not found (looked from {Path.cwd()})")
        mod_name = f"fleet_marl_user_policy_{hashlib.blake2b(str(path.resolve()).encode(), digest_size=6).hexdigest()}"
        _on_path(path.parent)
        try:
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ImportError(f"no module loader for {path}")
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
            moved = (
                " (the reference policies moved to fleet_marl.policies in 0.2.0: write fleet_marl.policies...)"
                if path_part.split(".")[0] == "policies"
                else ""
            )
            raise PolicyError(spec, f"failed to import module {path_part!r}: {type(exc).__name__}: {exc}{moved}") from exc
        return _check_protocol(spec, _from_module(spec, module, name, env))
    kinds = "".join(f", {loader.description}" for loader in loaders().values())
    if Path(spec).is_dir():
        raise PolicyError(
            spec,
            f"is a folder that no policy loader accepts (loaders: {', '.join(loaders()) or 'none'}). A fleet-marl train run "
            "folder is loaded by the 'rllib' loader, which installing fleet-marl registers as an entry point: "
            "reinstall it (pip install -e . in a checkout) if it is missing",
        )
    raise PolicyError(
        spec, f"unknown policy; expected a reference policy ({', '.join(POLICIES)}), 'package.module:Name', a path to a .py file{kinds}"
    )


__all__ = [
    "ENTRY_POINT_GROUP",
    "PolicyError",
    "PolicyLoader",
    "fleet_env_or_none",
    "load_policy",
    "loaders",
    "register_loader",
    "source_name",
]

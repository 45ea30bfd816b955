"""Where a trace name becomes a file: :func:`resolve_trace` turns a ``WorkloadSpec.trace`` value
into a file, trying in order:

1. the value itself, if it is an existing file;
2. ``$FLEET_MARL_TRACES/<value>``, if that variable is set;
3. the shipped sample of that name: ``data/<value>``, or the sample of the registry entry
   ``<value>``;
4. the fetched cache (``$FLEET_MARL_CACHE/traces``, default ``~/.cache/fleet_marl/traces``):
   ``<cache>/<value>``, or the full file of the registry entry ``<value>``
   (``fleet-marl traces fetch <value>`` puts it there).

So ``pollux_workload-1.csv`` and ``azure_llm_inference_conv_2023.csv``, the names the ``trace``
task replays, resolve to shipped samples with nothing beside the package. :func:`registry_file`
finds a registry name's file in the registry's folders only (a server's check of a client's value).
"""

from __future__ import annotations

import os
from pathlib import Path

from fleet_marl.traces.registry import CACHE_ENV, DATA_DIR, TRACES, TRACES_ENV


def traces_dir() -> Path:
    """The folder a bare trace file name is looked up in first: ``$FLEET_MARL_TRACES`` if set,
    else the shipped samples (``fleet_marl/traces/data``)."""
    env = os.environ.get(TRACES_ENV)
    return Path(env).expanduser() if env else DATA_DIR


def cache_dir() -> Path:
    """Where ``fleet-marl traces fetch`` puts full traces: ``$FLEET_MARL_CACHE/traces``
    (default ``~/.cache/fleet_marl/traces``)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fleet_marl").expanduser() / "traces"


def _candidates(key: str) -> list[Path]:
    """Where a trace name is looked up, in order, after the value itself (steps 2-4 of the
    module docstring)."""
    info = TRACES.get(key)
    tried = []
    env = os.environ.get(TRACES_ENV)
    if env:
        tried.append(Path(env).expanduser() / key)
    tried += [DATA_DIR / key] + ([info.sample_path] if info and info.sample_path else [])
    tried += [cache_dir() / key] + ([cache_dir() / info.file] if info else [])
    return tried


def resolve_trace(name: str | os.PathLike) -> Path:
    """The file of a trace path or name, found in the order of the module docstring."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    key = str(name)
    info = TRACES.get(key)
    tried = [given.resolve(), *_candidates(key)]
    for path in tried[1:]:
        if path.is_file():
            return path
    if info:
        hint = f"run 'fleet-marl traces fetch {key}' to download it ({info.url})"
    else:
        hint = f"set {TRACES_ENV} to the folder that holds it, or use a name of 'fleet-marl traces list' ({', '.join(TRACES)})"
    raise FileNotFoundError(f"trace {key!r} not found: tried {', '.join(map(str, dict.fromkeys(tried)))}; {hint}")


def registry_names() -> tuple[str, ...]:
    """Every value that names a trace of the registry and no path: each entry's name
    (``pollux-1``), its full file's name and its sample's name (``pollux_workload-1.csv``, the
    names the built-in tasks use)."""
    names = []
    for info in TRACES.values():
        names += [info.name, info.file] + ([info.sample] if info.sample else [])
    return tuple(dict.fromkeys(names))


def registry_file(name: str) -> Path | None:
    """The file of the registry trace ``name`` (a value of :func:`registry_names`), looked up only
    in the registry's folders (``$FLEET_MARL_TRACES``, the shipped samples, the fetched cache), or
    None when ``name`` is no registry name, is not on this machine, or a file of the same name in
    the working directory would be read in its place by :func:`resolve_trace`. Nothing a caller
    passes here is opened: a server checks a client's trace value with it (docs/llm_agents.md,
    "Security")."""
    if not isinstance(name, str) or name not in registry_names() or Path(name).is_file():
        return None  # not a registry name, or shadowed by a file in the working directory
    return next((path for path in _candidates(name) if path.is_file()), None)


__all__ = ["cache_dir", "registry_file", "registry_names", "resolve_trace", "traces_dir"]

"""The layers of the package (docs/architecture.md): data flows down, nothing reaches up.

Each top-level unit of ``fleet_marl`` has a rank; a unit imports only units of a lower rank
(checked on every import statement, module-level and function-local, by reading the source).
The import graph between units is therefore acyclic, and so is the one between modules
(no module imports one that imports it back, through function-local imports too). Function-local imports exist only to
keep an optional dependency optional, and each one says why in a comment. Subprocess checks
confirm what the static rules promise: the kernel and the env load no RL framework, the core
packages (env, grader, policies, tools, traces) load no extra (Ray, torch, matplotlib,
supersuit), and grading the reference policies loads none either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "fleet_marl"

#: Unit -> rank. A unit may import units of a strictly lower rank only (and itself).
RANK = {
    "_lazy": 0,
    "errors": 0,
    "checks": 0,
    "output": 0,
    "catalog": 0,
    "config": 1,
    "traces": 1,
    "workloads": 2,
    "kernel": 2,
    "shapley_sampling": 2,
    "credit": 3,
    "fairness": 3,
    "builtin_tasks": 1,
    "tasks": 3,
    "suite": 2,
    "validation": 3,
    "environment": 4,
    "policies": 5,
    "evaluation": 6,
    "tools": 6,
    "training": 7,
    "rllib": 8,
    "torchrl": 8,
    "openenv": 8,
    "clients": 8,
    "studies": 9,
    "cli": 10,
}
#: Third-party modules a unit must never import.
FORBIDDEN = {
    "kernel": {"pettingzoo", "gymnasium", "ray", "torch", "supersuit"},
    "catalog": {"pettingzoo", "gymnasium", "ray", "torch"},
    "config": {"pettingzoo", "gymnasium", "ray", "torch"},
    "credit": {"pettingzoo", "gymnasium", "ray", "torch"},
    "shapley_sampling": {"pettingzoo", "gymnasium", "ray", "torch"},
    "fairness": {"pettingzoo", "gymnasium", "ray", "torch"},
    "policies": {"ray", "torch", "torchrl"},
    "evaluation": {"ray", "torch"},
    "training": {"ray", "torch", "torchrl", "tensordict"},
    "torchrl": {"ray"},
    "clients": {"ray"},
}
#: Optional dependencies: importing one (or a fleet_marl module that needs one) inside a
#: function is how a module keeps it optional.
OPTIONAL = (
    "ray",
    "torch",
    "openenv",
    "matplotlib",
    "uvicorn",
    "fastapi",
    "PIL",
    "mpe2",
    "vmas",
    "pettingzoo.classic",
    "tensorboardX",
    "resource",
    "torchrl",
    "tensordict",
    "fleet_marl.rllib",
    "fleet_marl.torchrl",
    "fleet_marl.openenv",
    "fleet_marl.studies",
    "stable_baselines3",
    "sb3_contrib",
    "supersuit",
    "pufferlib",
    "benchmarl",
    "fleet_marl.clients",
)


def _unit(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def _modules_of(node: ast.AST) -> list[str]:
    """The absolute modules an import statement reads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [f"{node.module}.{a.name}" for a in node.names]  # a name or a submodule of node.module
    return []


def _imports():
    """(file, line, unit, imported module, function-local?, source line) for every import."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "__init__.py":
            continue  # the package root only re-exports names lazily
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        local = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(fn):
                    if isinstance(n, (ast.Import, ast.ImportFrom)):
                        local.add(id(n))
        for n in ast.walk(tree):
            for mod in _modules_of(n):
                out.append(
                    (path, n.lineno, _unit(path), mod, id(n) in local, lines[n.lineno - 1], lines[n.lineno - 2] if n.lineno > 1 else "")
                )
    return out


IMPORTS = _imports()


def test_kernel_modules_import_without_a_circle():
    """Inside the kernel the modules form a chain (jit, mechanisms, activations, serving, constants, flops, cost, layout,
    roofline, the stages clearing, placement, tenant_cost, safety, power_heat and outcome, then engine, types,
    static, checks, packing, api): no module imports one that imports it back."""
    kernel = PKG / "kernel"
    names = {p.stem for p in kernel.glob("*.py") if p.stem != "__init__"}
    graph = {n: set() for n in names}
    for path, _, _, mod, _, _, _ in IMPORTS:
        if path.parent == kernel and path.stem in names and mod.startswith("fleet_marl.kernel."):
            target = mod.split(".")[2]
            if target in names and target != path.stem:
                graph[path.stem].add(target)
    done, stack = set(), []

    def visit(n):
        assert n not in stack, f"kernel import circle: {' -> '.join(stack[stack.index(n) :] + [n])}"
        if n in done:
            return
        stack.append(n)
        for m in sorted(graph[n]):
            visit(m)
        stack.pop()
        done.add(n)

    for n in sorted(graph):
        visit(n)
    assert graph["engine"] and "api" not in graph["engine"]  # the walk saw the engine's imports


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: Import circles between modules still allowed, each (its modules) with why.
CIRCLES_ALLOWED: dict[frozenset[str], str] = {}


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    """No module of the package imports a module that imports it back, directly or through
    others; module-level and function-local imports count alike (a function-local import hides
    a circle, it does not break it). CIRCLES_ALLOWED lists the ones still allowed, with why."""
    modules = {_module_name(p) for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path, _, _, mod, _, _, _ in IMPORTS:
        parts = mod.split(".")
        target = next((".".join(parts[:i]) for i in range(len(parts), 1, -1) if ".".join(parts[:i]) in modules), None)
        source = _module_name(path)
        if target is not None and target != source:
            graph[source].add(target)
    assert graph["fleet_marl.clients.sb3"] >= {"fleet_marl.clients.base", "fleet_marl.errors"}  # the walk saw the imports
    found = {frozenset(c) for c in _circles(graph)}
    bad = [" <-> ".join(sorted(c)) for c in found if c not in CIRCLES_ALLOWED]
    assert not bad, "modules that import each other:\n" + "\n".join(sorted(bad))
    assert set(CIRCLES_ALLOWED) <= found, f"stale CIRCLES_ALLOWED entries: {[sorted(c) for c in set(CIRCLES_ALLOWED) - found]}"


def test_every_unit_has_a_rank():
    units = {_unit(p) for p in PKG.rglob("*.py") if p != PKG / "__init__.py"}
    assert units <= set(RANK), f"give these a rank in tests/test_layers.py and docs/architecture.md: {sorted(units - set(RANK))}"


def test_the_architecture_diagram_gives_each_unit_its_rank():
    """docs/architecture.md draws the layers: every unit it draws sits at its rank here (training/
    below the engines' adapters, above the grader)."""
    import re

    diagram = (ROOT / "docs" / "architecture.md").read_text().split("```")[1]
    drawn, rank = {}, None
    for line in diagram.splitlines()[1:]:
        m = re.match(r"\s{1,2}(\d+)\s+(\S+)", line) or re.match(r"\s{6}()(\S+/|\S+\.py)\s", line)
        if m:
            rank = int(m.group(1)) if m.group(1) else rank
            drawn[m.group(2).rstrip("/").removesuffix(".py")] = rank
    assert drawn["training"] == RANK["training"] and RANK["evaluation"] < RANK["training"] < min(RANK["rllib"], RANK["torchrl"])
    assert {u: r for u, r in drawn.items() if RANK.get(u) != r} == {}


def test_imports_point_down():
    bad = []
    for path, line, unit, mod, _, _, _ in IMPORTS:
        if not mod.startswith("fleet_marl."):
            continue
        target = mod.split(".")[1]
        if target in RANK and target != unit and RANK[target] >= RANK[unit]:
            bad.append(f"{path.relative_to(ROOT)}:{line}: {unit} (rank {RANK[unit]}) imports {mod} (rank {RANK[target]})")
    assert not bad, "imports that reach up or sideways:\n" + "\n".join(bad)


def test_no_import_of_rllib_outside_rllib_studies_and_cli():
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {mod}"
        for p, line, unit, mod, _, _, _ in IMPORTS
        if mod.startswith("fleet_marl.rllib") and unit not in ("rllib", "studies", "cli")
    ]
    assert not bad, "\n".join(bad)


def test_no_import_of_torchrl_adapter_outside_it_studies_and_cli():
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {mod}"
        for p, line, unit, mod, _, _, _ in IMPORTS
        if mod.startswith("fleet_marl.torchrl") and unit not in ("torchrl", "studies", "cli")
    ]
    assert not bad, "\n".join(bad)


def test_the_top_level_policies_folder_holds_examples_not_a_package():
    # the reference policies moved into fleet_marl.policies in 0.2.0; the top-level folder holds
    # example files that fleet-marl evaluate loads by path, and nothing imports it as a package
    folder = ROOT / "policies"
    files = [p for p in folder.iterdir() if p.is_file()]
    assert files and all(p.suffix == ".py" for p in files) and not (folder / "__init__.py").exists()
    hits = []
    for folder in ("fleet_marl", "tests", "experiments"):
        for path in (ROOT / folder).rglob("*.py"):
            for n in ast.walk(ast.parse(path.read_text())):
                if any(m == "policies" or m.startswith("policies.") for m in _modules_of(n)):
                    hits.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not hits, "imports of the top-level policies package: " + ", ".join(hits)


@pytest.mark.parametrize("unit", sorted(FORBIDDEN))
def test_forbidden_third_party_imports(unit):
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {mod}" for p, line, u, mod, _, _, _ in IMPORTS if u == unit and mod.split(".")[0] in FORBIDDEN[unit]
    ]
    assert not bad, "\n".join(bad)


def test_function_local_imports_keep_an_optional_dependency_optional_and_say_so():
    bad = []
    for path, line, _unit_of, mod, local, src, above in IMPORTS:
        if not local or mod == "__future__":
            continue
        optional = any(mod == o or mod.startswith(o + ".") for o in OPTIONAL)
        explained = "#" in src or above.strip().startswith("#")
        if not optional or not explained:
            why = "not an optional dependency" if not optional else "no comment saying why"
            bad.append(f"{path.relative_to(ROOT)}:{line}: {src.strip()}  ({why})")
    assert not bad, "function-local imports:\n" + "\n".join(bad)


def _loaded(code: str, modules=("ray", "torch", "pettingzoo", "gymnasium", "supersuit")) -> set[str]:
    code += f"; print(','.join(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True, check=True).stdout.strip()
    return set(filter(None, out.split(",")))


def test_kernel_layer_loads_no_rl_framework():
    code = (
        "import fleet_marl, fleet_marl.kernel, fleet_marl.catalog, fleet_marl.config, fleet_marl.workloads, "
        "fleet_marl.credit, fleet_marl.fairness, fleet_marl.tasks, fleet_marl.tools.estimate, fleet_marl.tools.sweep"
    )
    assert _loaded(code) == set()


#: Modules of the extras (pyproject.toml) that the core must not load.
EXTRA_MODULES = ("ray", "torch", "matplotlib", "supersuit")


def test_import_fleet_marl_loads_no_ray_or_torch():
    assert _loaded("import fleet_marl", EXTRA_MODULES) == set()


def test_core_packages_load_no_extra():
    """Every module of the core packages (the env, the grader, the policies, estimate and sweep,
    the traces, the engines' shared training code) imports without Ray, torch, matplotlib or
    supersuit: ``pip install fleet-marl`` with no extra runs them (.ci/wheel_smoke checks it on the wheel)."""
    code = (
        "import importlib, pkgutil, fleet_marl; "
        "[importlib.import_module(m.name) for p in ('environment', 'evaluation', 'policies', 'tools', 'traces', 'training') "
        "for m in pkgutil.walk_packages(importlib.import_module('fleet_marl.' + p).__path__, f'fleet_marl.{p}.')]; "
        "assert 'fleet_marl.evaluation.demo' in sys.modules and 'fleet_marl.tools.sweep' in sys.modules"
    )
    assert _loaded(code, EXTRA_MODULES) == set()


def test_env_policies_and_grader_load_no_ray_or_torch():
    code = (
        "import fleet_marl, fleet_marl.policies; from fleet_marl.evaluation import evaluate; "
        "evaluate('tiny', 'fair_share', episodes=1, progress=False, cache=False)"
    )
    assert _loaded(code, EXTRA_MODULES) == set()


def test_cli_and_adapter_packages_load_no_ray_until_used():
    code = (
        "import fleet_marl.rllib, fleet_marl.rllib.loader, fleet_marl.studies, fleet_marl.openenv, fleet_marl.torchrl, "
        "fleet_marl.torchrl.loader, fleet_marl.torchrl.command, fleet_marl.cli.train; "
        "from fleet_marl.cli import build_parser; build_parser(); "
        "from fleet_marl.evaluation import loaders; loaders()"
    )
    assert _loaded(code, ("ray", "torch", "torchrl", "tensordict", "openenv")) == set()


#: ``(file, attribute)`` pairs allowed to read another object's private ``_name``, each with why.
PRIVATE_ALLOWED = {
    (
        "fleet_marl/rllib/env.py",
        "_cumulative_rewards",
    ): "PettingZoo's AECEnv keeps what accrued since an agent's last turn there; last() reads it, and it has no public accessor",
    ("fleet_marl/config/checks.py", "_getframe"): "sys._getframe: the deprecation warning's stack level, the standard library's way",
    (
        "fleet_marl/torchrl/networks.py",
        "_empty_net",
    ): "TorchRL's MultiAgentMLP runs its shared module template so; the rows of one agent have no public call",
    ("fleet_marl/kernel/packing.py", "_groups"): "_Packed._groups: the class's own registry, read in the module that defines it",
    (
        "fleet_marl/rllib/runner.py",
        "_forward_exploration",
    ): "RLlib's RLModule API: the array env runner calls the module's forward pass without RLlib's per-call eval/train switch, as RLlib's own runner does inside forward_exploration",
    ("fleet_marl/rllib/runner.py", "_forward_inference"): "RLlib's RLModule API: as _forward_exploration, for greedy actions",
}


def test_no_module_reaches_into_another_objects_private_names():
    """``x._name`` on anything but ``self``, ``cls`` or ``super()`` is another object's private
    state; only the pairs of PRIVATE_ALLOWED may (checked on every fleet_marl source file)."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for n in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
                continue
            v = n.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            found.setdefault((rel, n.attr), n.lineno)
    bad = [f"{f}:{line}: ._{a[1:]}" for (f, a), line in sorted(found.items()) if (f, a) not in PRIVATE_ALLOWED]
    assert not bad, "private names read across objects (make them public, or add to PRIVATE_ALLOWED with why):\n" + "\n".join(bad)
    assert set(PRIVATE_ALLOWED) <= set(found), f"stale PRIVATE_ALLOWED entries: {sorted(set(PRIVATE_ALLOWED) - set(found))}"


def test_no_file_in_the_package_is_over_450_lines():
    """A module that outgrows 450 lines is split along a seam and named for what it holds."""
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert not long, f"files over 450 lines: {long}"


def test_no_function_in_the_kernel_is_over_80_lines():
    """Every function of ``fleet_marl/kernel/`` is at most 80 lines (its ``def`` line to its last,
    docstring included): a compiled stage that outgrows it splits by what it computes."""
    long = []
    for path in sorted((PKG / "kernel").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := node.end_lineno - node.lineno + 1) > 80:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over 80 lines: {long}"


def _owns_rows() -> dict[str, str]:
    """docs/architecture.md's "What each folder owns" table: unit -> its row's text."""
    text = (ROOT / "docs" / "architecture.md").read_text().split("## What each folder owns")[1].split("\n## ")[0]
    rows = {}
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 3:
            rows[cells[0].removeprefix("| ").strip("`").rstrip("/").removesuffix(".py")] = line
    return rows


def test_the_architecture_doc_draws_every_unit_and_names_every_module_in_its_row():
    """The diagram draws every unit at its rank, and the unit's row of "What each folder owns"
    names each of its modules (``name.py`` or `` `name` ``) and subpackages (``name/``): a new room is drawn."""
    import re

    diagram = (ROOT / "docs" / "architecture.md").read_text().split("```")[1]
    drawn = set(re.findall(r"^\s*(?:\d+\s+)?(\S+?)(?:/|\.py)\s", diagram, re.M))
    assert set(RANK) - drawn == set(), f"draw these units in docs/architecture.md's diagram: {sorted(set(RANK) - drawn)}"
    rows = _owns_rows()
    assert set(RANK) - set(rows) == set(), f"give these units a row in docs/architecture.md: {sorted(set(RANK) - set(rows))}"
    missing = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if len(rel.parts) < 2 or path.name in ("__init__.py", "__main__.py"):
            continue
        names = [rel.parts[-1], f"`{path.stem}`"] + ([f"{rel.parts[-2]}/"] if len(rel.parts) > 2 else [])
        if not any(n in rows[rel.parts[0]] for n in names):
            missing.append(str(rel))
    assert missing == [], f"name these modules in their unit's row of docs/architecture.md: {missing}"

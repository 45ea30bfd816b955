"""An install that takes only what you use (pyproject.toml, docs/install.md).

``pip install fleet-marl`` is the core: the env, the kernel, the policies, the grader,
``estimate``, ``sweep``, ``traces``. Ray, torch, matplotlib, OpenEnv and mpe2 are extras, and
every command or feature that needs one says which, with the pip command, exit code 2 and no
traceback. Here a missing module is simulated with ``monkeypatch.setitem(sys.modules, name,
None)`` (importing it then raises ImportError), and a present one with an empty module, so no
test imports Ray; ``.ci/wheel_smoke`` checks the same on a real core-only install of the wheel.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest

from fleet_marl.cli import main
from fleet_marl.errors import MissingExtra, UsageError, install_command, require

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
#: The core's requirements: nothing heavier than these.
CORE = {"numpy", "numba", "gymnasium", "pettingzoo", "pyyaml", "tqdm"}
#: Importable module -> the distribution that provides it.
DIST = {
    "ray": "ray",
    "torch": "torch",
    "torchrl": "torchrl",
    "tensordict": "tensordict",
    "tensorboardX": "tensorboardx",
    "matplotlib": "matplotlib",
    "PIL": "pillow",
    "mpe2": "mpe2",
    "stable_baselines3": "stable-baselines3",
    "supersuit": "supersuit",
    "psutil": "psutil",
    "hydra": "hydra-core",
    "omegaconf": "omegaconf",
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
}


def hint(what: str, extra: str) -> str:
    return f"{what} needs the [{extra}] extra: pip install 'fleet-marl[{extra}]'"


def absent(monkeypatch, *names: str) -> None:
    """Make ``names`` unimportable for the test. Import what depends on them first (as
    matplotlib on PIL): a module whose import fails half way leaves broken submodules behind."""
    for n in names:
        monkeypatch.setitem(sys.modules, n, None)


def present(monkeypatch, *names: str) -> None:
    """Empty stand-ins: ``require`` imports them without loading the real (heavy) package."""
    for n in names:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()


# --- pyproject.toml ----------------------------------------------------------------------------


def test_the_core_needs_no_ray_torch_matplotlib_or_supersuit():
    assert {name(r) for r in PYPROJECT["project"]["dependencies"]} == CORE


def test_extras_and_what_each_holds():
    assert set(EXTRAS) == {"rllib", "torchrl", "plot", "bench", "openenv", "sb3", "pufferlib", "benchmarl", "llm", "all", "test", "fast"}
    names = {extra: {name(r) for r in reqs} for extra, reqs in EXTRAS.items()}
    assert {"ray", "torch", "tensorboardx", "matplotlib"} <= names["rllib"]
    assert "ray[rllib]==2.60.0" in EXTRAS["rllib"]
    assert {"torch", "torchrl", "tensordict", "tensorboardx", "matplotlib"} == names["torchrl"]  # the run folder's logs and curve
    assert {"torchrl>=0.14,<0.15", "tensordict>=0.14,<0.15"} <= set(EXTRAS["torchrl"])
    assert {"matplotlib", "pillow"} == names["plot"]
    assert (
        names["bench"] == {"mpe2", "vmas", "torch"}
        and "torch==2.13.0" in EXTRAS["bench"]
        and "openenv" in names["openenv"]
        and {"trl", "transformers", "accelerate", "datasets", "torch"} == names["llm"]
        and "torch==2.13.0" in EXTRAS["llm"]
        and EXTRAS["fast"] == []
    )
    # [all] is every feature extra: not test (tooling), not fast (empty)
    (all_,) = EXTRAS["all"]
    assert all_.startswith("fleet-marl[")
    assert set(all_[len("fleet-marl[") : -1].split(",")) == set(EXTRAS) - {"all", "test", "fast"}


def test_torch_is_pinned_everywhere_it_appears():
    reqs = [r for reqs in EXTRAS.values() for r in reqs] + PYPROJECT["project"]["dependencies"]
    torch = [r for r in reqs if name(r) == "torch"]
    assert torch and set(torch) == {"torch==2.13.0"}
    makefile = (ROOT / "Makefile").read_text()
    assert re.findall(r'"torch[^"]*"', makefile) and set(re.findall(r'"torch[^"]*"', makefile)) == {'"torch==2.13.0"'}


def test_make_installs_the_extras_make_train_and_make_test_need():
    makefile = (ROOT / "Makefile").read_text()
    (spec,) = re.findall(r'pip install -e "\.\[([a-z0-9,]+)\]"', makefile)
    assert set(spec.split(",")) == {"test", "rllib", "torchrl", "bench", "openenv", "plot", "sb3", "pufferlib", "benchmarl", "llm"}
    # what the extras cannot list (their wheels pin torch 2.9.0 and torchrl < 0.12) goes in without dependencies
    assert 'pip install --no-deps "pufferlib-core==3.0.23" "benchmarl==1.5.2"' in makefile


def test_every_extra_a_message_names_exists_and_holds_what_it_checks():
    """Every ``require(modules, extra, what)`` in the package names a declared extra, and the
    extra declares the distribution of each module it checks."""
    calls = []
    for path in sorted((ROOT / "fleet_marl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and len(node.args) >= 2:
                calls.append((path.relative_to(ROOT), node))
    assert len(calls) >= 6
    from fleet_marl.rllib import command as train_command
    from fleet_marl.studies import command as compare_command
    from fleet_marl.torchrl import command as torchrl_command

    modules_of = {
        ("fleet_marl/rllib/command.py", "NEEDS"): train_command.NEEDS,
        ("fleet_marl/studies/command.py", "NEEDS"): compare_command.NEEDS,
        ("fleet_marl/studies/command.py", "RLLIB_NEEDS"): compare_command.RLLIB_NEEDS,
        ("fleet_marl/torchrl/command.py", "NEEDS"): torchrl_command.NEEDS,
    }
    for path, node in calls:
        extra = node.args[1].value
        assert extra in EXTRAS, f"{path}:{node.lineno}: no extra [{extra}]"
        arg = node.args[0]
        if isinstance(arg, ast.Constant):
            mods = (arg.value,)
        elif isinstance(arg, ast.Tuple):
            mods = tuple(e.value for e in arg.elts)
        else:  # a module constant (NEEDS, RLLIB_NEEDS)
            mods = modules_of[path.as_posix(), arg.id]
        declared = {name(r) for r in EXTRAS[extra]}
        for m in mods:
            assert DIST[m.split(".")[0]] in declared, f"{path}:{node.lineno}: [{extra}] does not declare {m}"


def test_the_install_page_lists_every_extra():
    page = (ROOT / "docs" / "install.md").read_text()
    assert "docs/install.md" in (ROOT / "README.md").read_text()  # the README sends readers there
    for extra in EXTRAS:
        assert f"| `[{extra}]` |" in page, f"docs/install.md's table of extras lacks [{extra}]"


# --- require and MissingExtra ------------------------------------------------------------------


def test_require_says_which_extra_and_the_pip_command(monkeypatch):
    require(("numpy", "yaml"), "plot", "anything")  # present: nothing happens
    absent(monkeypatch, "ray")
    with pytest.raises(MissingExtra) as e:
        require(("ray.rllib", "torch"), "rllib", "fleet-marl train")
    exc = e.value
    assert isinstance(exc, UsageError) and isinstance(exc, ImportError)  # the CLI's exit code 2; catchable as ImportError
    assert str(exc).startswith(hint("fleet-marl train", "rllib"))
    assert "pip install -e '.[rllib]'" in str(exc) and exc.missing == exc.name == "ray" and exc.extra == "rllib"
    assert install_command("plot") == "pip install 'fleet-marl[plot]'"


def test_require_checks_the_parent_of_a_loaded_submodule(monkeypatch):
    absent(monkeypatch, "ray")
    present(monkeypatch, "ray.rllib")  # loaded earlier in the process, its parent now missing
    with pytest.raises(MissingExtra, match=r"missing: ray \("):
        require("ray.rllib", "rllib", "fleet-marl train")


# --- the commands --------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["ray", "torch", "tensorboardX", "matplotlib"])
def test_train_without_the_rllib_extra(monkeypatch, capsys, tmp_path, module):
    from fleet_marl.rllib.command import NEEDS

    monkeypatch.chdir(tmp_path)
    needs = ["ray", *NEEDS]  # require imports them in this order, a parent before its submodule
    present(monkeypatch, *needs[: needs.index(module)])
    absent(monkeypatch, module)
    code, out, err = run(capsys, "train", "--engine", "rllib", "--iterations", "1")
    assert code == 2 and out == ""
    assert f"error: {hint('fleet-marl train', 'rllib')}" in err and f"missing: {module}" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("module", ["torch", "torchrl", "tensordict", "tensorboardX", "matplotlib"])
def test_train_without_the_torchrl_extra(monkeypatch, capsys, tmp_path, module):
    """The default engine (torchrl) says which extra it needs, before anything is written."""
    from fleet_marl.torchrl.command import NEEDS

    monkeypatch.chdir(tmp_path)
    present(monkeypatch, *NEEDS[: NEEDS.index(module)])
    absent(monkeypatch, module)
    code, out, err = run(capsys, "train", "--iterations", "1")
    assert code == 2 and out == ""
    assert f"error: {hint('fleet-marl train --engine torchrl', 'torchrl')}" in err and f"missing: {module}" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


def test_compare_without_the_rllib_extra(monkeypatch, capsys, tmp_path):
    absent(monkeypatch, "ray")
    code, _, err = run(capsys, "compare", "--engine", "rllib", "--quick", "--out", str(tmp_path / "study"))
    assert code == 2 and f"error: {hint('fleet-marl compare --engine rllib', 'rllib')}" in err and "Traceback" not in err
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize("module", ["torch", "torchrl", "tensordict", "matplotlib"])
def test_compare_without_the_torchrl_extra(monkeypatch, capsys, tmp_path, module):
    """The default engine (torchrl) says which extra it needs, before anything is written."""
    from fleet_marl.studies.command import NEEDS

    present(monkeypatch, *NEEDS[: NEEDS.index(module)])
    absent(monkeypatch, module)
    code, _, err = run(capsys, "compare", "--quick", "--out", str(tmp_path / "study"))
    assert code == 2 and f"error: {hint('fleet-marl compare', 'torchrl')}" in err and f"missing: {module}" in err and "Traceback" not in err
    assert not (tmp_path / "study").exists()


def test_compare_report_without_the_plot_extra(monkeypatch, capsys, tmp_path):
    absent(monkeypatch, "matplotlib")
    code, _, err = run(capsys, "compare", "--report", "--out", str(tmp_path))
    assert code == 2 and f"error: {hint('fleet-marl compare --report', 'plot')}" in err and "Traceback" not in err


@pytest.mark.parametrize("module", ["matplotlib", "PIL"])
def test_demo_gif_without_the_plot_extra(monkeypatch, capsys, tmp_path, module):
    if module == "PIL":  # matplotlib imports PIL: load it first, or it is left half-imported
        pytest.importorskip("matplotlib")
    absent(monkeypatch, module)
    gif = tmp_path / "demo.gif"
    code, out, err = run(capsys, "demo", "--task", "tiny", "--gif", str(gif))
    assert code == 2 and out == ""  # said before the episode starts
    assert f"error: {hint('fleet-marl demo --gif', 'plot')}" in err and f"missing: {module}" in err
    assert "Traceback" not in err and not gif.exists()


def test_save_gif_without_pillow(monkeypatch, tmp_path):
    from fleet_marl.evaluation.demo import save_gif

    absent(monkeypatch, "PIL")
    with pytest.raises(ImportError, match=re.escape(hint("fleet-marl demo --gif", "plot"))):
        save_gif([], tmp_path / "x.gif", 4.0)


def test_rgb_array_render_without_the_plot_extra(monkeypatch):
    import fleet_marl

    env = fleet_marl.parallel_env(task="tiny", render_mode="rgb_array")
    env.reset(seed=0)
    absent(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra, match=re.escape(hint('render_mode="rgb_array"', "plot"))):
        env.render()
    env.close()


def test_sweep_without_the_plot_extra_writes_the_csv_and_says_how_to_get_the_plot(monkeypatch, capsys, tmp_path):
    absent(monkeypatch, "matplotlib")
    code, out, err = run(capsys, "sweep", "--quick", "--models", "gpt2", "--gpu-types", "h100-sxm", "--out", str(tmp_path))
    assert code == 0 and "gpt2" in out
    assert (tmp_path / "sweep_train.csv").is_file() and not (tmp_path / "sweep_train.png").exists()
    assert f"no plot: {hint('the sweep' + chr(39) + 's plot', 'plot')}" in err


def test_serve_without_the_openenv_extra(monkeypatch, capsys):
    absent(monkeypatch, "openenv", "openenv.core", "uvicorn")
    code, _, err = run(capsys, "serve", "--port", "1")
    assert code == 2 and "pip install 'fleet-marl[openenv]'" in err and "Traceback" not in err

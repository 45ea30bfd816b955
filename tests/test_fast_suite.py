"""``make test-fast`` (``pytest -m "not slow"``) runs the core's tests and the doctests, and
``make test`` runs everything (CI). The ``slow`` marker is registered under ``--strict-markers``
(a misspelt marker fails the run rather than selecting nothing), the files of the adapters, the
training studies and the server's stress and attack tests are marked slow as a whole, and the
selection, collected by pytest itself, keeps the golden digests and the kernel and drops those files.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Files whose every test is slow (``pytestmark``): the adapters and outside clients, the runs
#: that train, the server as a real process (under stress and attack too), the example policies
#: graded through the command.
SLOW_FILES = (
    "test_benchmarl.py",
    "test_cleanrl_example.py",
    "test_client_matrix.py",
    "test_clients.py",
    "test_credit_ray.py",
    "test_openenv_attacks.py",
    "test_openenv_serve.py",
    "test_openenv_stress.py",
    "test_policy_examples.py",
    "test_pufferlib.py",
    "test_reproducible.py",
    "test_rllib.py",
    "test_rllib_config.py",
    "test_rllib_vector.py",
    "test_sb3.py",
    "test_sequential_torchrl.py",
    "test_torchrl.py",
    "test_torchrl_parallel.py",
)


def _recipe(target: str) -> str:
    lines = (ROOT / "Makefile").read_text().splitlines()
    return lines[lines.index(f"{target}: $(STAMP)") + 1].strip()


def _marks_the_file_slow(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "pytest.mark.slow" in ast.unparse(node.value)
    return False


def test_the_slow_marker_is_registered_and_strict():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert [m for m in ini["markers"] if m.startswith("slow:")] and "--strict-markers" in ini["addopts"].split()
    assert "-m" not in ini["addopts"].split()  # make test deselects nothing


def test_make_test_runs_everything_and_test_fast_only_what_is_not_slow():
    assert _recipe("test") == "$(PY) -m pytest -q"
    assert _recipe("test-fast") == '$(PY) -m pytest -q -m "not slow"'


def test_the_slow_files_are_exactly_the_listed_ones():
    marked = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if _marks_the_file_slow(p))
    assert marked == sorted(SLOW_FILES)


def test_the_fast_selection_keeps_the_core_and_drops_the_slow_files():
    """pytest's own selection over the golden and kernel tests and two adapter files."""
    core = ["tests/test_golden.py", "tests/test_kernel.py"]
    slow = ["tests/test_client_matrix.py", "tests/test_sb3.py"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-m", "not slow", *core, *slow],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    for path in core:
        assert any(i.startswith(path + "::") for i in ids), path
    assert not [i for i in ids if i.startswith(tuple(slow))]
    assert re.search(r"\d+ deselected", r.stdout), r.stdout

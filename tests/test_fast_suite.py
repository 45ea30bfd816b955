"""``make test-fast`` (``pytest -m "not slow" -n 2``) runs the core's tests and the doctests, and
``make test`` runs everything (CI). The ``slow`` marker is registered under ``--strict-markers``
(a misspelt marker fails the run rather than selecting nothing), the files of the adapters, the
training studies and the server run for real are marked slow as a whole, the slowest cases of
some parametrized core tests by ``SLOW_CASES`` in ``tests/conftest.py``, and the selection,
collected by pytest itself, keeps the golden digests and the kernel and drops those.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import SLOW_CASES

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
    "test_credit_suite_benchmarl.py",
    "test_openenv_attacks.py",
    "test_openenv_serve.py",
    "test_openenv_stress.py",
    "test_policy_examples.py",
    "test_pufferlib.py",
    "test_reproducible.py",
    "test_rllib.py",
    "test_rllib_config.py",
    "test_rllib_runs.py",
    "test_rllib_vector.py",
    "test_sb3.py",
    "test_sequential_torchrl.py",
    "test_torchrl.py",
    "test_torchrl_parallel.py",
    "test_trl_grpo.py",
    "test_viewer_browser.py",
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
    assert _recipe("test-fast") == '$(PY) -m pytest -q -m "not slow" -n 2'


def test_the_slow_files_are_exactly_the_listed_ones():
    marked = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if _marks_the_file_slow(p))
    assert marked == sorted(SLOW_FILES)


#: Collects with ``-m "not slow"`` and prints what pytest selected and what it deselected.
COLLECT = """
import json, sys, pytest
got = {"selected": [], "deselected": []}
class Record:
    def pytest_deselected(self, items):
        got["deselected"] += [i.nodeid for i in items]
    def pytest_collection_finish(self, session):
        got["selected"] = [i.nodeid for i in session.items]
rc = pytest.main(["--co", "-q", "-p", "no:cacheprovider", "-m", "not slow", *sys.argv[1:]], plugins=[Record()])
print("RECORD" + json.dumps(got))
sys.exit(rc)
"""


def test_the_fast_selection_keeps_the_core_and_drops_the_slow_files_and_cases():
    """pytest's own selection over the golden and kernel tests, two adapter files and the files
    of conftest's SLOW_CASES: each of its entries still names cases on both sides."""
    core = ["tests/test_golden.py", "tests/test_kernel.py"]
    slow = ["tests/test_client_matrix.py", "tests/test_sb3.py"]
    cased = sorted({key.split("::")[0] for key in SLOW_CASES})
    r = subprocess.run([sys.executable, "-c", COLLECT, *core, *slow, *cased], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.split("RECORD")[-1])
    selected, deselected = got["selected"], got["deselected"]
    for path in core:
        assert any(i.startswith(path + "::") for i in selected), path
    assert not [i for i in selected if i.startswith(tuple(slow))]
    assert [i for i in deselected if i.startswith(tuple(slow))]
    for key, parts in SLOW_CASES.items():
        for part in parts:
            assert [i for i in deselected if i.startswith(key + "[") and re.search(rf"[\[/-]{re.escape(part)}[\]/-]", i)], (key, part)
        assert [i for i in selected if i.startswith(key + "[")], key

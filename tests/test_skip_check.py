"""tests/skip_check.py: under FLEET_MARL_STRICT_SKIPS=1 (.ci/run) a skip whose reason
tests/allowed_skips.txt does not list fails the session; a listed one, or no strictness, does not."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skip_check import allowed_reasons

ROOT = Path(__file__).resolve().parents[1]

MODULE_SKIP = 'import pytest\npytest.importorskip("no_such_module_fleet_marl")\n\ndef test_x():\n    pass\n'
LISTED_SKIP = 'import pytest\n\n@pytest.mark.skipif(True, reason="no shared traces at /nowhere")\ndef test_y():\n    pass\n\ndef test_z():\n    pass\n'


def run(tmp_path, body: str, strict: bool):
    (tmp_path / "test_sample.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLEET_MARL_STRICT_SKIPS": "1" if strict else "0"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.skip_check", "-p", "no:cacheprovider", str(tmp_path / "test_sample.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_an_unlisted_skip_fails_only_under_strictness(tmp_path):
    r = run(tmp_path, MODULE_SKIP, strict=True)
    assert r.returncode == 1 and "skipped for a reason not in allowed_skips.txt" in r.stdout and "no_such_module_fleet_marl" in r.stdout, (
        r.stdout
    )
    r = run(tmp_path, MODULE_SKIP, strict=False)
    assert r.returncode == pytest.ExitCode.NO_TESTS_COLLECTED and "1 skipped" in r.stdout  # pytest's own verdict, untouched


@pytest.mark.slow
def test_a_listed_skip_passes(tmp_path):
    r = run(tmp_path, LISTED_SKIP, strict=True)
    assert r.returncode == 0 and "1 passed, 1 skipped" in r.stdout, r.stdout


def test_every_allowed_skip_says_why(tmp_path):
    assert allowed_reasons() == ["no shared traces at"]
    bad = tmp_path / "allowed.txt"
    bad.write_text("a reason with no why\n")
    with pytest.raises(pytest.UsageError, match="expected '<start of the skip reason> | <why it may skip>'"):
        allowed_reasons(bad)

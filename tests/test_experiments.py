"""Shipped configs load, validate and evaluate; the README's Python snippets run."""

import re
from pathlib import Path

import numpy as np

from fleet_marl.config import FleetConfig
from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate
from tests.conftest import random_actions

ROOT = Path(__file__).resolve().parents[1]


def test_every_experiment_yaml_loads_and_evaluates():
    files = sorted((ROOT / "experiments").glob("*.yaml"))
    assert files
    for f in files:
        cfg = FleetConfig.from_yaml(f)
        assert FleetConfig.from_dict(cfg.to_dict()) == cfg
        st = KernelStatic.from_config(cfg)
        out = evaluate(st, random_actions(st, np.random.default_rng(0), 8), RoundState.initial(st), Draws.expected(st))
        assert np.isfinite(out.welfare).all()


def test_readme_python_snippets_run():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    ns: dict = {}  # one namespace, top to bottom: a snippet may use what an earlier one defined
    for code in blocks:
        # a snippet may end with a line that shows an error on purpose: run it expecting that error
        lines = code.strip().splitlines()
        if lines[-1].startswith("# ConfigError"):
            from fleet_marl.config import ConfigError

            try:
                exec(compile("\n".join(lines[:-1]), "README.md", "exec"), ns)
            except ConfigError as e:
                assert lines[-1].removeprefix("# ConfigError: ") == str(e)
            else:
                raise AssertionError("the README's error example did not raise")
        else:
            exec(compile(code, "README.md", "exec"), ns)


def test_planner_variants_script_runs():
    import subprocess
    import sys

    script = ROOT / "experiments" / "planner_variants.py"
    r = subprocess.run([sys.executable, str(script), "--tasks", "tiny", "--seeds", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "| default |" in r.stdout and "| horizon=3 |" in r.stdout
    r = subprocess.run([sys.executable, str(script), "--cost", "--tasks", "tiny"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ms per plan" in r.stdout, r.stderr

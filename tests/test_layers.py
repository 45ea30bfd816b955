"""The kernel, catalog, config, workloads, credit, fairness and tasks are pure numpy: importing
them (or the package itself, whose env names load lazily) loads no PettingZoo, Gymnasium or Ray."""

import subprocess
import sys


def test_kernel_imports_no_rl_framework():
    code = (
        "import sys; import fleet_marl, fleet_marl.kernel, fleet_marl.catalog, fleet_marl.config, "
        "fleet_marl.workloads, fleet_marl.credit, fleet_marl.fairness, fleet_marl.tasks; "
        "bad = [m for m in ('pettingzoo', 'gymnasium', 'ray', 'torch', 'supersuit') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"kernel layer imported {out}"


def test_policies_and_env_do_not_import_ray():
    code = (
        "import sys; import fleet_marl, policies; env = fleet_marl.parallel_env(task='tiny'); env.reset(seed=0); "
        "print(','.join(m for m in ('ray', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the environment imported {out}"


def test_grader_cli_and_rllib_package_load_no_ray_until_used():
    """RLlib lives in fleet_marl.rllib and loads only when training or loading a checkpoint:
    grading reference policies and building the CLI import no Ray."""
    code = (
        "import sys; import fleet_marl.rllib, fleet_marl.rllib.cli, fleet_marl.rllib.sharing; "
        "from fleet_marl import grader; from fleet_marl.cli import build_parser; build_parser(); "
        "grader.evaluate('tiny', 'fair_share', episodes=1, progress=False, cache=False); "
        "print(','.join(m for m in ('ray', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"imported {out}"

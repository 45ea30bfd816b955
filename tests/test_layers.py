"""The kernel, catalog and config are pure numpy: importing them loads no PettingZoo, Gymnasium or Ray."""

import subprocess
import sys


def test_kernel_imports_no_rl_framework():
    code = (
        "import sys; import fleet_marl.kernel, fleet_marl.catalog, fleet_marl.config; "
        "bad = [m for m in ('pettingzoo', 'gymnasium', 'ray', 'torch', 'supersuit') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"kernel layer imported {out}"

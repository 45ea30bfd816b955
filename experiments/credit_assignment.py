"""The credit-assignment study: which reward should each tenant learn from?

PPO (one shared, masked policy) on ``easy`` scaled to N = 2, 4, 8, 16 tenants
(``fleet_marl.tasks.scaled``, proportional-share arbiter), under every reward scheme --
local, global, mixed, difference, difference_default, shapley -- with 3 seeds each and the
same env-step budget for every scheme at an N; every run graded by ``fleet_marl.evaluation``.
The write-up with the full study's numbers is docs/credit_assignment.md.

This script is ``fleet-marl compare`` (``fleet_marl.studies.command``; the study itself is
``fleet_marl.studies.credit_assignment`` and ``fleet_marl.studies.report``); it takes the same
options::

    python experiments/credit_assignment.py --quick      # the pipeline in about a minute
    python experiments/credit_assignment.py              # the full study, about 90 min on 2 cores
    python experiments/credit_assignment.py --report --docs

A killed study resumes: run the same command again.
"""

from __future__ import annotations

import sys

from fleet_marl.cli import main as cli_main


def main(argv=None) -> int:
    """``fleet-marl compare`` with ``argv`` (its options, its errors and exit codes)."""
    return cli_main(["compare", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

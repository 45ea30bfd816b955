"""The credit-assignment study: which reward should each tenant learn from?

PPO (the TorchRL trainer) on ``easy`` scaled to N = 2..64 tenants (``fleet_marl.tasks.scaled``)
under the proportional-share and the auction arbiter, for 7 arms -- the reward schemes local,
global, mixed, difference, difference_default, shapley with one shared actor and critic, and
MAPPO (global reward, centralized critic) -- with 10 seeds each and the same env-step budget for
every arm at an N, plus the sharing schemes on medium and hard; every run graded by
``fleet_marl.evaluation`` along the way. ``--engine rllib`` runs the first study (RLlib, N = 2..16,
3 seeds). The write-up is docs/credit_assignment.md.

This script is ``fleet-marl compare`` (``fleet_marl.studies.command``; the study, on either
engine, is ``fleet_marl.studies.credit``); it takes the same options::

    python experiments/credit_assignment.py --quick      # the pipeline in a minute or two
    python experiments/credit_assignment.py              # the full study: 920 runs, 2.9 hours on 2 cores here
    python experiments/credit_assignment.py --report --docs

A stopped study resumes: run the same command again.
"""

from __future__ import annotations

import sys

from fleet_marl.cli import main as cli_main


def main(argv=None) -> int:
    """``fleet-marl compare`` with ``argv`` (its options, its errors and exit codes)."""
    return cli_main(["compare", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

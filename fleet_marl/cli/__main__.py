"""``python -m fleet_marl.cli``: the ``fleet-marl`` command."""

import sys

from fleet_marl.cli import main

sys.exit(main())

"""The cost model against published measurements: ``fleet-marl validate``.

``measurements.yaml`` (shipped with the package) holds the published numbers, each with its
source and setting; :mod:`~fleet_marl.validation.cases` reads them, :mod:`~fleet_marl.validation.predict`
asks the kernel for each, :mod:`~fleet_marl.validation.report` tabulates the errors against the
targets and :mod:`~fleet_marl.validation.command` is the command. See ``docs/validation.md``.
"""

from fleet_marl.validation.report import CASE_TARGET, MEDIAN_TARGET, validate

__all__ = ["CASE_TARGET", "MEDIAN_TARGET", "validate"]

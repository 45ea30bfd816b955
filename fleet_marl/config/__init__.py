"""Configuration: frozen, validated dataclasses.

Every field is checked when the object is built; a bad value raises :class:`ConfigError`
naming the field (with its dotted path when built from a dict), the value and what was
expected. Unknown keys are an error. Configs round-trip through plain dicts and YAML
(``yaml.safe_load`` only)::

    cfg = FleetConfig.from_yaml("experiments/mixed_cluster.yaml")
    assert FleetConfig.from_dict(cfg.to_dict()) == cfg

The specs are in :mod:`fleet_marl.config.specs` (``FleetConfig``, re-exporting the families it is
made of: :mod:`~fleet_marl.config.cluster`, :mod:`~fleet_marl.config.tenants`,
:mod:`~fleet_marl.config.rules`, :mod:`~fleet_marl.config.coupling`), the field checks and the dict round trip in
:mod:`fleet_marl.config.checks`; every name is importable from ``fleet_marl.config``.

The fairness detector's knobs (``starvation_fraction``, ``starvation_rounds``,
``hoard_share``) are :class:`FairnessSpec` (``fairness:``); under ``reward:``, where they used
to be, they still load, with a ``DeprecationWarning`` naming the new key.

The default value of each scenario parameter is a modelling choice; the default of each
physical constant is cited in ``docs/model.md``.
"""

from fleet_marl.config import specs
from fleet_marl.config.checks import ConfigError, from_dict, to_dict
from fleet_marl.config.specs import *  # noqa: F403 -- the package re-exports the specs' public names, their __all__

#: The checks' names and the specs'.
__all__ = ["ConfigError", "from_dict", "to_dict"]
__all__ += specs.__all__

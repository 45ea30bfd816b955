"""What the outside-client adapters share. Each client steps
:class:`~fleet_marl.environment.vector.FleetVectorEnv` (B clusters, one array step), built
from the same arguments as :func:`fleet_marl.vector_env`, and takes the same two options
(``obs_mode``, ``mask_layout``) minus the combinations it cannot hold.

=====================================  ==========================================================
:func:`check_modes`                    the ValueError of an ``obs_mode`` or ``mask_layout`` the
                                       env does not have (a client's ``check_options`` calls it
                                       first, then refuses what the client cannot hold)
:func:`open_vector`                    the vector env a client steps: only the configured
                                       scheme's rewards computed (``compute_all=False``)
:class:`VectorClient`                  a client whose rows are the B*N tenants: the vector env
                                       and the attributes every such client has
:func:`split_dims`                     flat masks -> the 8 per-dimension masks (``"dims"``)
:func:`import_unlisted`                the client's own package, which its extra cannot list
                                       (``pip install --no-deps``): missing, a ``MissingExtra``
=====================================  ==========================================================

No client framework is imported here (``import fleet_marl.clients.base`` loads no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from fleet_marl.environment import MASK_LAYOUTS, OBS_MODES
from fleet_marl.environment.vector import FleetVectorEnv
from fleet_marl.errors import MissingExtra

T = TypeVar("T")


def check_modes(obs_mode: str, mask_layout: str) -> None:
    """The ValueError of an ``obs_mode`` or a ``mask_layout`` that is not one of the env's."""
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode = {obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
    if mask_layout not in MASK_LAYOUTS:
        raise ValueError(f"mask_layout = {mask_layout!r}: expected one of {', '.join(map(repr, MASK_LAYOUTS))}")


def open_vector(num_clusters: int, task: str | None, config: Any, overrides: dict[str, Any]) -> FleetVectorEnv:
    """B clusters of ``task`` (or ``config``, plus ``overrides``), as a client steps them."""
    overrides.setdefault("compute_all", False)  # only the configured scheme's rewards reach a learner
    return FleetVectorEnv(num_clusters, task, config, **overrides)


class VectorClient:
    """A client whose rows (or slots) are the B*N tenants, row ``b * N + t`` tenant t of cluster
    b. :meth:`open_clusters` sets what every such client has, before the client framework's
    base class is initialized (its ``__init__`` may read ``render_mode``)."""

    venv: FleetVectorEnv
    obs_mode: str
    mask_layout: str
    num_clusters: int
    n_agents: int
    offsets: np.ndarray

    def open_clusters(
        self, num_clusters: int, task: str | None, config: Any, obs_mode: str, mask_layout: str, overrides: dict[str, Any]
    ) -> FleetVectorEnv:
        """Build the vector env (:func:`open_vector`) and set ``venv``, ``obs_mode``,
        ``mask_layout``, ``num_clusters``, ``n_agents``, ``config``, ``task``, ``offsets`` (the
        flat mask's dimension boundaries) and ``render_mode`` (None)."""
        self.venv = venv = open_vector(num_clusters, task, config, overrides)
        self.obs_mode, self.mask_layout = obs_mode, mask_layout
        self.num_clusters, self.n_agents = venv.num_envs, venv.num_agents
        self.config, self.task = venv.config, venv.task
        self.offsets = venv.mask_offsets
        self.render_mode = None
        return venv

    def close(self) -> None:
        self.venv.close()


def split_dims(mask: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """Flat masks (..., M) -> the 8 per-dimension masks (..., nvec_max[d]), views cut at ``offsets``."""
    return tuple(mask[..., offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1))


def import_unlisted(what: str, extra: str, load: Callable[[], T]) -> T:
    """``load()``, which imports what ``extra`` cannot list (a package whose wheel pins other
    versions, installed with ``pip install --no-deps``); its ImportError is a
    :class:`~fleet_marl.errors.MissingExtra` of ``extra`` naming ``what`` (which names the
    install lines)."""
    try:
        return load()
    except ImportError as exc:
        raise MissingExtra(what, extra, exc.name or extra, str(exc)) from exc


__all__ = ["VectorClient", "check_modes", "import_unlisted", "open_vector", "split_dims"]

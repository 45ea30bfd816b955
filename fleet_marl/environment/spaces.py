"""The gymnasium spaces and action masks of ``fleet_v0``; the layouts' one import place.

:func:`build_spaces` gives each tenant's observation and ``MultiDiscrete`` action space;
:class:`ActionMasks` builds the static parts of the masks once per scenario (the GPU count's
mask follows the budget each round), in either layout (``MASK_LAYOUTS``). :class:`AgentSpaces` is
PettingZoo's per-agent API over them, :class:`EmptyStep` the answer to a step with no live agent.

This module re-exports the fields (:mod:`~fleet_marl.environment.fields`: ``ACTION_FIELDS``,
``OBS_FIELDS``, ``CLAIM_FIELDS``, ``decode_actions``, ...) and the action checks
(:mod:`~fleet_marl.environment.action_checks`: ``ActionError``, :func:`parse_action`, the check of
one action that needs no episode state, shared by the env and the remote client, ...).
"""

from __future__ import annotations

import gymnasium
import numpy as np

from fleet_marl import catalog
from fleet_marl.environment import action_checks, fields
from fleet_marl.environment.action_checks import *  # noqa: F403 -- re-exports the action checks' public names (their __all__)
from fleet_marl.environment.fields import *  # noqa: F403 -- re-exports the fields' public names (their __all__): the layouts' one import place
from fleet_marl.environment.fields import BATCH_LEVELS, MASK_LAYOUTS, N_OBS


def action_nvec(max_gpus: np.ndarray, n_bids: int) -> np.ndarray:
    """(T, 8) the ``MultiDiscrete`` sizes of each tenant's action."""
    return np.stack(
        [np.concatenate(([m + 1, n_bids], np.full(catalog.N_GROUPS, catalog.N_PRECISIONS), [len(BATCH_LEVELS)])) for m in max_gpus]
    ).astype(np.int64)


class FlatMaskMultiDiscrete(gymnasium.spaces.MultiDiscrete):
    """The action space with ``mask_layout="flat"``: a ``MultiDiscrete`` whose :meth:`sample`
    also takes a mask (or probabilities) as one vector of length ``sum(nvec)``, the 8
    dimensions concatenated, so that ``action_space(a).sample(mask=infos[a]["action_mask"])``
    works in both layouts (gymnasium's own takes only the per-dimension tuple)."""

    def sample(self, mask=None, probability=None):
        if isinstance(mask, np.ndarray) and mask.ndim == 1:
            mask = mask_dims(mask, self.nvec)
        if isinstance(probability, np.ndarray) and probability.ndim == 1:
            probability = mask_dims(probability, self.nvec)
        return super().sample(mask=mask, probability=probability)


class DimsMask(tuple):
    """One tenant's mask in the ``"dims"`` layout: a tuple of 8 ``int8`` arrays, one per action
    dimension (what gymnasium's ``MultiDiscrete.sample(mask=)`` and PettingZoo's tests take), that
    array libraries read as the ``"flat"`` vector through DLPack: ``torch.as_tensor(mask)`` and
    ``np.from_dlpack(mask)`` give the 8 concatenated, shape ``(sum(nvec),)``. That is how TorchRL's
    ``PettingZooWrapper``, which makes a tensor of every info and mask value, takes it (a plain
    tuple of arrays of different lengths is no tensor)."""

    __slots__ = ()

    def flat(self) -> np.ndarray:
        """The mask in the ``"flat"`` layout: the 8 arrays concatenated (a fresh array)."""
        return np.concatenate(self)

    def __dlpack__(self, *args, **kwargs):
        return self.flat().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.flat().__dlpack_device__()


def mask_space(nvec_row: np.ndarray, mask_layout: str = "dims") -> gymnasium.spaces.Space:
    """The space of one tenant's action mask: ``Tuple(MultiBinary(n) for n in nvec)``
    (``"dims"``) or ``MultiBinary(sum(nvec))`` (``"flat"``)."""
    if mask_layout == "flat":
        return gymnasium.spaces.MultiBinary(int(np.sum(nvec_row)))
    return gymnasium.spaces.Tuple([gymnasium.spaces.MultiBinary(int(n)) for n in nvec_row])


def check_mask_layout(mask_layout) -> str:
    """``mask_layout`` if it is one of :data:`MASK_LAYOUTS`, else a ValueError naming it."""
    if not isinstance(mask_layout, str) or mask_layout not in MASK_LAYOUTS:
        raise ValueError(
            f"mask_layout = {mask_layout!r}: expected 'dims' (a tuple of 8 int8 arrays, one per action dimension: "
            "PettingZoo's tests, MultiDiscrete.sample(mask=)) or 'flat' (one int8 vector of length sum(nvec), "
            "the 8 concatenated: one logits mask over the heads, as TorchRL's MultiCategorical takes it)"
        )
    return mask_layout


def mask_dims(mask, nvec_row: np.ndarray) -> tuple[np.ndarray, ...]:
    """One tenant's mask in the ``"dims"`` layout, from either layout: a tuple is returned
    as it is, a flat vector is split (views) at the boundaries of ``nvec_row``."""
    if isinstance(mask, np.ndarray) and mask.ndim == 1:
        return tuple(np.split(mask, np.cumsum(nvec_row)[:-1]))
    return tuple(mask)


def build_spaces(
    agents: list[str], nvec: np.ndarray, obs_mode: str, state_size: int, mask_layout: str = "dims", n_obs: int = N_OBS
) -> tuple[dict, dict, gymnasium.spaces.Box]:
    """(action spaces, observation spaces, state space), built once per scenario; ``n_obs``
    features per observation (``N_OBS + N_CLAIM`` under the sequential protocol)."""
    space = FlatMaskMultiDiscrete if mask_layout == "flat" else gymnasium.spaces.MultiDiscrete
    action_spaces = {a: space(nvec[i]) for i, a in enumerate(agents)}
    observation_spaces: dict[str, gymnasium.spaces.Space]
    if obs_mode == "flat":
        observation_spaces = {a: gymnasium.spaces.Box(0.0, 1.0, (n_obs,), np.float32) for a in agents}
    else:
        observation_spaces = {
            a: gymnasium.spaces.Dict(
                {
                    "observation": gymnasium.spaces.Box(0.0, 1.0, (n_obs,), np.float32),
                    "action_mask": mask_space(nvec[i], mask_layout),
                }
            )
            for i, a in enumerate(agents)
        }
    return action_spaces, observation_spaces, gymnasium.spaces.Box(0.0, 1.0, (state_size,), np.float32)


class ActionMasks:
    """The action masks of one scenario (see the package docstring): the static dimensions --
    bid and batch levels, the precisions each tenant may use -- built once, read-only; the GPU
    count's mask from what the budget affords each round."""

    def __init__(self, st, n_bids: int) -> None:
        #: (T, P) the precisions each tenant may use: its GPU's, and no weight-only format for training
        self.prec_legal = st.supported & ~(st.is_train[:, None] & catalog.WEIGHT_ONLY[None, :])
        self.max_gpus = st.max_gpus
        ones_bid = np.ones(n_bids, np.int8)
        ones_batch = np.ones(len(BATCH_LEVELS), np.int8)
        self._static = []
        self._gpu_range = [np.arange(m + 1) for m in st.max_gpus]
        self._full_gpu = [np.ones(m + 1, np.int8) for m in st.max_gpus]
        for g in self._full_gpu:
            g.setflags(write=False)
        for i in range(st.T):
            pm = self.prec_legal[i].astype(np.int8)
            parts = [ones_bid] + [pm] * catalog.N_GROUPS + [ones_batch]
            for p in parts:
                p.setflags(write=False)
            self._static.append(parts)
        # the "flat" layout's template per tenant: every GPU count allowed
        self._flat_static = [np.concatenate([self._full_gpu[i], *self._static[i]]) for i in range(st.T)]

    def __call__(self, afford: np.ndarray) -> list[DimsMask]:
        """Every tenant's mask when it can afford ``afford[i]`` GPUs (``"dims"`` layout: a
        :class:`DimsMask` of read-only arrays)."""
        out = []
        for i in range(len(self._static)):
            if afford[i] >= self.max_gpus[i]:
                g = self._full_gpu[i]
            else:
                g = (self._gpu_range[i] <= afford[i]).astype(np.int8)
                g.setflags(write=False)
            out.append(DimsMask((g, *self._static[i])))
        return out

    def flat(self, afford: np.ndarray) -> list[np.ndarray]:
        """The same masks in the ``"flat"`` layout: per tenant one int8 vector of length
        ``sum(nvec)``, the 8 dimensions concatenated; fresh (writable) arrays each call."""
        out = []
        for i, tmpl in enumerate(self._flat_static):
            m = tmpl.copy()
            if afford[i] < self.max_gpus[i]:
                m[: self.max_gpus[i] + 1] = self._gpu_range[i] <= afford[i]
            out.append(m)
        return out


class EmptyStep:
    """The answer to a ``step()`` with no live agent (every agent finished): five empty dicts, as
    PettingZoo's envs give (SuperSuit's ``black_death`` and RLlib's ``ParallelPettingZooEnv``
    rely on it to see the end of the episode), with a warning the first time in an episode
    (``reset()`` sets ``warned`` back to False)."""

    def __init__(self) -> None:
        self.warned = False

    def __call__(self) -> tuple[dict, dict, dict, dict, dict]:
        if not self.warned:
            self.warned = True
            gymnasium.logger.warn(
                "step() called with no live agent (every agent finished): it returns five empty dicts; "
                "call env.reset() to start a new episode"
            )
        return {}, {}, {}, {}, {}


class AgentSpaces:
    """What the parallel and the sequential env share of PettingZoo's per-agent API: ``observation_space(agent)``
    and ``action_space(agent)`` over their ``observation_spaces``/``action_spaces`` dicts, the
    check that an agent name is one of ``possible_agents``, and the check that ``reset()`` came
    first (``_ready``)."""

    # provided by the env that mixes this in
    observation_spaces: dict[str, gymnasium.spaces.Space]
    action_spaces: dict[str, gymnasium.spaces.MultiDiscrete]
    possible_agents: list[str]
    _ready: bool

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[self._known(agent)]

    def action_space(self, agent: str) -> gymnasium.spaces.MultiDiscrete:
        return self.action_spaces[self._known(agent)]

    def _known(self, agent) -> str:
        if agent not in self.observation_spaces:
            raise KeyError(f"unknown agent {agent!r}: expected one of {', '.join(self.possible_agents)}")
        return agent

    def _need_reset(self, what: str) -> None:
        if not self._ready:
            raise RuntimeError(f"{what} called before reset(): call env.reset(seed=...) first")


__all__ = [
    "ActionMasks",
    "AgentSpaces",
    "DimsMask",
    "EmptyStep",
    "FlatMaskMultiDiscrete",
    "action_nvec",
    "build_spaces",
    "check_mask_layout",
    "mask_dims",
    "mask_space",
]
__all__ += fields.__all__ + action_checks.__all__

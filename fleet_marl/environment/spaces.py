"""The action and observation layouts of ``fleet_v0``: fields, masks and gymnasium spaces.

``ACTION_FIELDS`` names the 8 dimensions of each tenant's ``MultiDiscrete`` action,
``BATCH_LEVELS`` the batch sizes ``batch_level`` selects, ``OBS_FIELDS`` the observation
features (their normalizations are in :mod:`fleet_marl.environment.observations`).
:class:`ActionMasks` builds the static parts of the masks once per scenario; the GPU count's
mask follows the budget each round. :func:`parse_action` is the check of one action that
needs no episode state (dtype, shape, range), shared by the env and the remote client.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numba as nb
import numpy as np

from fleet_marl import catalog
from fleet_marl.errors import ClientError, short_repr
from fleet_marl.kernel import Actions

#: Batch sizes selectable by ``batch_level``. 256 is vLLM's default ``max_num_seqs``.
BATCH_LEVELS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], dtype=np.int64)
ACTION_FIELDS = ("gpus", "bid_level") + tuple(f"precision.{g}" for g in catalog.GROUPS) + ("batch_level",)
N_ACT = len(ACTION_FIELDS)
#: The precision dimensions of an action (one per layer group).
PREC = slice(2, 2 + catalog.N_GROUPS)
OBS_MODES = ("flat", "dict")
ILLEGAL_ACTION = ("veto", "raise")
#: The layouts of the action mask (the env option ``mask_layout``): ``"dims"``, a tuple of 8
#: int8 arrays, one per action dimension (gymnasium's ``MultiDiscrete.sample(mask=...)``);
#: ``"flat"``, one int8 vector of length ``sum(nvec)``, the 8 concatenated in action order.
MASK_LAYOUTS = ("dims", "flat")

#: Observation features, in order, with their meaning (all in [0, 1]).
OBS_FIELDS: tuple[tuple[str, str], ...] = (
    ("is_serve", "1 for a serving tenant, 0 for a trainer"),
    ("alive", "1 while the tenant is in the episode"),
    ("round", "rounds played / max_cycles"),
    ("budget_left", "budget left / episode budget"),
    ("job_left", "train: tokens left in the current job / job_tokens (0 between jobs); serve: 0"),
    ("jobs_waiting", "train: jobs queued behind the current one, n / (n + 1); serve: 0"),
    ("queue", "serve: requests waiting, q / (q + m) with m the mean arrivals per round; train: 0"),
    ("arrivals", "serve: requests that arrived last round, a / (a + m); train: 0"),
    ("held", "GPUs held last round / max_gpus"),
    ("granted", "GPUs granted / GPUs requested last round (1 if nothing was requested)"),
    ("price", "price paid per GPU-hour last round / (list price x highest bid level)"),
    ("value", "work value last round, v / (v + 1) (docs/model.md sec. 8)"),
    ("utility", "utility last round, 0.5 + 0.5 tanh(u)"),
    ("slo", "serve: share of last round's arrivals served within the SLO; train: 0"),
    ("oom", "1 if last round's config did not fit in memory"),
    ("vetoed", "1 if last round's config was refused by the safety check"),
    ("unsafe", "1 if last round's precision map was numerically unsafe"),
    ("throttle", "1 - clock factor last round (0 = full speed)"),
    ("restarted", "1 if last round's allocation changed and the job restarted"),
    ("memory", "bytes per GPU / usable bytes per GPU last round, clipped to 1"),
    ("starvation", "starvation streak / starvation_rounds, clipped to 1"),
    ("fair_share", "max-min fair share of its pool / max_gpus"),
    ("pool_free", "GPUs of its pool not granted last round / pool capacity"),
    ("pool_demand", "GPUs requested from its pool last round / capacity, x / (x + 1)"),
    ("pool_price", "mean price multiplier paid in its pool last round / highest bid level"),
    ("temperature", "hottest node of its pool, (T - ambient) / (critical - ambient), clipped"),
    ("rack_power", "highest rack power last round / rack cap, clipped to 1"),
    ("alive_share", "live tenants / all tenants"),
    ("fp8", "1 if its GPU type supports FP8"),
    ("gpu_memory", "memory of its GPU type / 141 GB (H200)"),
    ("model_size", "log10(parameters) / 12"),
    ("priority", "p / (p + 1)"),
    ("max_gpus", "max_gpus / pool capacity"),
    ("burn_rate", "cost of max_gpus for a round at list price / (budget / max_cycles), x / (x + 1)"),
)
N_OBS = len(OBS_FIELDS)
#: Index of each observation feature by name.
OBS_INDEX = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}

#: The features the sequential protocol (``fleet_marl.env(protocol="sequential")``) appends
#: to every observation, after ``OBS_FIELDS``: the claims made this round by the tenants
#: before it in the turn order, on its own pool (the GPU type it runs on, the only pool it can
#: be granted GPUs from), and its place in the order. All in [0, 1].
CLAIM_FIELDS: tuple[tuple[str, str], ...] = (
    ("claimed", "GPUs requested from its pool this round by the tenants before it / pool capacity, x / (x + 1)"),
    ("unclaimed", "GPUs of its pool the tenants before it left unrequested this round / pool capacity (0 once they ask for all)"),
    ("claimed_bid", "GPU-weighted mean bid multiplier of those requests / highest bid level (0 when none)"),
    ("claimants", "tenants before it this round that asked its pool for GPUs / tenants of its pool"),
    ("after_in_pool", "live tenants of its pool whose turn comes after its own this round / tenants of its pool"),
    ("position", "its place in this round's order / (tenants in the order - 1): 0 first, 1 last (0 when alone)"),
)
N_CLAIM = len(CLAIM_FIELDS)
#: Index of each feature of a sequential observation by name: ``OBS_FIELDS`` then ``CLAIM_FIELDS``.
SEQUENTIAL_OBS_INDEX = {name: i for i, (name, _) in enumerate(OBS_FIELDS + CLAIM_FIELDS)}


class ActionError(ClientError):
    """A bad action. ``agent`` and ``field`` name what was wrong; the step changed nothing."""

    def __init__(self, agent: Any, field: str, value: Any, expected: str):
        self.agent, self.field, self.value, self.expected = agent, field, value, expected
        name = str(agent) if len(str(agent)) <= 80 else short_repr(agent, 80)
        super().__init__(f"{name}: {field} = {short_repr(value)}: expected {expected}")


def decode_actions(idx: np.ndarray, bid_levels: np.ndarray) -> Actions:
    """The kernel's :class:`~fleet_marl.kernel.Actions` of (..., T, 8) action indices."""
    return Actions(
        gpus=idx[..., 0].copy(),
        bid=bid_levels[idx[..., 1]],
        precision=idx[..., PREC].copy(),
        batch=BATCH_LEVELS[idx[..., -1]],
    )


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
            "the 8 concatenated: TorchRL's PettingZooWrapper and MultiCategorical)"
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

    def __call__(self, afford: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """Every tenant's mask when it can afford ``afford[i]`` GPUs (``"dims"`` layout,
        read-only arrays)."""
        out = []
        for i in range(len(self._static)):
            if afford[i] >= self.max_gpus[i]:
                g = self._full_gpu[i]
            else:
                g = (self._gpu_range[i] <= afford[i]).astype(np.int8)
                g.setflags(write=False)
            out.append((g, *self._static[i]))
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


#: The outcomes of :func:`check_indices`.
OK, NOT_INTEGER, OUT_OF_RANGE, NOT_ALLOWED = range(4)
_G = PREC.stop - PREC.start
assert PREC.start == 2


@nb.njit(cache=True, nogil=True)
def check_indices(a, live, nvec, default_index, prec_legal, min_unit, budget, stop_at_illegal, idx, illegal):
    """Check the (B, T, 8) actions of live tenants in three passes, as the errors are ranked
    (not an integer, out of range, not allowed by the mask), each in C order; fill ``idx``
    (the defaults for tenants not live) and ``illegal`` (B, T). Returns ``(code, b, t, k)`` of
    the first error, or ``(OK, -1, -1, -1)``."""
    B, T, A = a.shape
    G = _G  # the precision dims are 2 .. 2 + G
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    x = a[b, t, k]
                    if not (x == np.floor(x) and np.isfinite(x * 1.0)):
                        return NOT_INTEGER, b, t, k
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    if a[b, t, k] < 0 or a[b, t, k] >= nvec[t, k]:
                        return OUT_OF_RANGE, b, t, k
    first = -1
    for b in range(B):
        for t in range(T):
            if live[b, t]:
                for k in range(A):
                    idx[b, t, k] = int(a[b, t, k])
            else:
                for k in range(A):
                    idx[b, t, k] = default_index[t, k]
            bad_gpus = live[b, t] and idx[b, t, 0] * min_unit[t] > budget[b, t]
            bad_g = -1
            if live[b, t]:
                for g in range(G):
                    if not prec_legal[t, idx[b, t, 2 + g]]:
                        bad_g = g
                        break
            illegal[b, t] = bad_gpus or bad_g >= 0
            if illegal[b, t] and first < 0:
                first = b * T + t
                k_first = 0 if bad_gpus else 2 + bad_g
    if first >= 0 and stop_at_illegal:
        return NOT_ALLOWED, first // T, first % T, k_first
    return OK, -1, -1, -1


def parse_action(a: str, act, nvec: np.ndarray) -> np.ndarray:
    """One agent's action as 8 int64 indices, or an :class:`ActionError` naming the bad
    field: an integer (or integral float) array of shape (8,) within ``nvec``."""
    try:
        arr = np.asarray(act) if act is not None else None
    except (ValueError, TypeError, OverflowError):  # ragged nested lists, an int too large for any dtype
        raise ActionError(a, "action", act, f"an integer array of shape ({N_ACT},) from action_space('{a}')") from None
    if arr is None or arr.dtype in (object, bool) or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ActionError(a, "action", act, f"an integer array of shape ({N_ACT},) from action_space('{a}')")
    if arr.shape != (N_ACT,):
        raise ActionError(a, "action.shape", arr.shape, f"({N_ACT},): {', '.join(ACTION_FIELDS)}")
    if np.issubdtype(arr.dtype, np.floating):
        for k in range(N_ACT):
            if not np.isfinite(arr[k]) or arr[k] != np.round(arr[k]):
                raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", float(arr[k]), "an integer")
    bad = (arr < 0) | (arr >= nvec)
    if bad.any():
        k = int(np.argmax(bad))
        raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", arr[k].item(), f"an integer in [0, {nvec[k] - 1}]")
    return arr.astype(np.int64)


def check_agent(a, agent_index: dict, agents: list[str], live: set) -> int:
    """The index of agent ``a``, or an :class:`ActionError` if it is unknown or finished (the
    check of one action; ``step()`` drops the actions of agents that finished before it
    checks the rest, see :func:`departed`)."""
    if a not in agent_index:
        raise ActionError(a, "agent", a, f"a live agent, one of {', '.join(agents)}")
    if a not in live:
        raise ActionError(
            a, "agent", a, f"a live agent; {a} has finished (PettingZoo: finished agents take no action). Live: {', '.join(agents)}"
        )
    return agent_index[a]


def departed(actions: dict, agent_index: dict, live: set) -> dict:
    """``actions`` without those of agents that already left the episode (known agents not
    in ``live``): PettingZoo clients such as TorchRL's ``PettingZooWrapper(use_mask=True)``
    send an action for every agent, every step. Unknown names stay, for the check to name."""
    if len(actions) == len(live) and live.issuperset(actions):
        return actions
    return {a: v for a, v in actions.items() if a in live or a not in agent_index}


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
    "ACTION_FIELDS",
    "BATCH_LEVELS",
    "CLAIM_FIELDS",
    "ILLEGAL_ACTION",
    "MASK_LAYOUTS",
    "NOT_ALLOWED",
    "NOT_INTEGER",
    "N_ACT",
    "N_CLAIM",
    "N_OBS",
    "OBS_FIELDS",
    "OBS_INDEX",
    "OBS_MODES",
    "OK",
    "OUT_OF_RANGE",
    "PREC",
    "SEQUENTIAL_OBS_INDEX",
    "ActionError",
    "ActionMasks",
    "AgentSpaces",
    "EmptyStep",
    "FlatMaskMultiDiscrete",
    "action_nvec",
    "build_spaces",
    "check_agent",
    "check_indices",
    "check_mask_layout",
    "decode_actions",
    "departed",
    "mask_dims",
    "mask_space",
    "parse_action",
]

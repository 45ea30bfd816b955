"""The ``Policy`` protocol and what every reference policy shares.

A policy plays every tenant of one environment. It sees only what PettingZoo hands out --
observations, infos (with ``infos[agent]["action_mask"]``) -- plus the environment's public
read-only attributes listed by :class:`FleetEnvLike` (``kernel_static``, ``bid_levels``,
``default_actions``, ``state()``, ``observed_round()`` ...), and returns actions in the
environment's ``MultiDiscrete`` layout (``fleet_marl.environment.ACTION_FIELDS``). Any env
that provides them will do: ``FleetParallelEnv``, its AEC form, and
``fleet_marl.openenv.RemoteParallelEnv`` (a client of a server, which is not a
``FleetParallelEnv``).

Under the sequential protocol (``fleet_marl.env(protocol="sequential")``) each observation
ends with the claims made before the tenant's turn (``CLAIM_FIELDS``); :meth:`BasePolicy.claims_so_far`
reads them back in GPUs (None under the simultaneous protocol).

Two entry points, one per PettingZoo loop::

    # parallel:  actions = policy.act(observations, infos)
    # AEC:       for agent in aec.agent_iter(): obs, r, term, trunc, info = aec.last()
    #                aec.step(None if term or trunc else policy.act_one(obs, agent, info))

:class:`BasePolicy` implements ``act`` from ``act_one``; a policy that plans jointly overrides
``act`` and answers ``act_one`` from the joint plan of the current round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pettingzoo import AECEnv

from fleet_marl import catalog
from fleet_marl.environment import ACTION_FIELDS, BATCH_LEVELS, N_OBS, OBS_FIELDS, SEQUENTIAL_OBS_INDEX, has_claims
from fleet_marl.environment.observations import unsquash
from fleet_marl.environment.spaces import mask_dims
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate
from fleet_marl.kernel.work import kernel_work

#: Index of each observation feature by name (``fleet_marl.environment.OBS_FIELDS``).
OBS = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}
N_ACT = len(ACTION_FIELDS)
PREC = slice(2, 2 + catalog.N_GROUPS)
BF16, FP32, FP8 = (catalog.PRECISION_CODE[p] for p in ("bf16", "fp32", "fp8"))
GROUP = {g: i for i, g in enumerate(catalog.GROUPS)}


@runtime_checkable
class Policy(Protocol):
    """What ``fleet-marl evaluate`` and the grader need from a policy."""

    def reset(self, seed: int | None = None) -> None:
        """Start an episode; a policy that draws random numbers seeds them here."""

    def act(self, observations: dict[str, Any], infos: dict[str, dict]) -> dict[str, np.ndarray]:
        """One action (an int array of the action space's shape) per agent in ``observations``."""


@runtime_checkable
class FleetEnvLike(Protocol):
    """What a reference policy reads of its environment besides observations and infos: the
    PettingZoo ``ParallelEnv`` surface plus fleet_marl's read-only views of the scenario and
    the round. ``FleetParallelEnv`` and ``RemoteParallelEnv`` provide it; so may any env."""

    possible_agents: list[str]
    agents: list[str]
    agent_index: dict[str, int]  # agent -> tenant row
    config: Any  # the FleetConfig
    kernel_static: Any  # the scenario's KernelStatic
    bid_levels: np.ndarray  # (L,) price multipliers of bid_level
    nvec: np.ndarray  # (T, 8) the MultiDiscrete sizes of each tenant's action
    default_actions: Any  # kernel Actions of each tenant's default action (FitTable's background)

    @property
    def max_cycles(self) -> int: ...

    @property
    def round(self) -> int: ...  # rounds played in the episode

    def action_space(self, agent: str) -> Any: ...

    def action_mask(self, agent: str) -> tuple: ...

    def state(self) -> np.ndarray: ...

    def observed_round(self, state_vector: np.ndarray | None = None, include_queued_jobs: bool = False) -> Any: ...


#: The names of :class:`FleetEnvLike`, checked without calling anything (a property may need reset()).
ENV_ATTRIBUTES = (
    "possible_agents",
    "agents",
    "agent_index",
    "config",
    "kernel_static",
    "bid_levels",
    "nvec",
    "default_actions",
    "max_cycles",
    "round",
    "action_space",
    "action_mask",
    "state",
    "observed_round",
)


def _provides(e) -> bool:
    names = set(dir(e))
    return all(n in names for n in ENV_ATTRIBUTES)


def fleet_env(env) -> FleetEnvLike:
    """The env a policy plays under ``env``: ``env`` itself when it provides
    :class:`FleetEnvLike` (a ``FleetParallelEnv``, a ``RemoteParallelEnv``, or any env with
    those members), else the one a PettingZoo AEC env or wrapper (``fleet_marl.env()``) wraps."""
    seen = 0
    e = env
    while isinstance(e, AECEnv) or not _provides(e):
        nxt = getattr(e, "env", None)
        if nxt is None or seen > 16:
            raise TypeError(
                f"policy: env is a {type(env).__name__}; expected a fleet_marl environment (fleet_marl.parallel_env(), fleet_marl.env() "
                f"or an env with {', '.join(ENV_ATTRIBUTES)})"
            )
        e, seen = nxt, seen + 1
    return e


def split(observation, agent: str, info: dict | None, env: FleetEnvLike) -> tuple[np.ndarray, tuple]:
    """(feature vector, action mask) from either obs mode: the mask is ``obs["action_mask"]``
    in dict mode and ``info["action_mask"]`` in flat mode; without either it is read from
    ``env.action_mask(agent)``. The mask is returned as a tuple of 8 arrays, whichever the
    env's ``mask_layout``."""
    if isinstance(observation, dict):
        feats, mask = np.asarray(observation["observation"]), observation["action_mask"]
    else:
        mask = info.get("action_mask") if info else None
        feats, mask = np.asarray(observation), (mask if mask is not None else env.action_mask(agent))
    if isinstance(mask, np.ndarray):  # mask_layout="flat"
        mask = mask_dims(mask, env.nvec[env.agent_index[agent]])
    return feats, mask


@dataclass(frozen=True)
class ClaimsSoFar:
    """What a tenant's sequential observation says of the claims made before its turn this
    round, on its pool, back in GPUs (:meth:`BasePolicy.claims_so_far`)."""

    claimed: int  # GPUs requested from its pool by the tenants before it
    left: int  # GPUs of its pool they left unrequested (0 when they asked for all or more)
    bid: float  # their GPU-weighted mean bid multiplier (0 when none)
    after: int  # live tenants of its pool whose turn comes after its own
    position: float  # its place in the order, 0 first .. 1 last


class BasePolicy:
    """A per-agent policy bound to one fleet_marl environment.

    Subclasses implement :meth:`act_one`. ``env`` is the parallel env or the AEC env.
    """

    name = "base"
    #: Precision maps per tenant whose fit tables (:class:`FitTable`) an ``act`` may fill.
    FIT_MAPS = 2

    def __init__(self, env) -> None:
        self.env = fleet_env(env)
        self.rng = np.random.default_rng()
        self._fits: FitTable | None = None

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observations: dict, infos: dict) -> dict[str, np.ndarray]:
        """Actions for the agents of ``observations`` that are still live (``step`` returns an
        observation for an agent on the round it finishes; it takes no more actions)."""
        infos = infos or {}
        live = set(self.env.agents)
        return {a: self.act_one(o, a, infos.get(a)) for a, o in observations.items() if a in live}

    def act_one(self, observation, agent: str, info: dict | None = None) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def work(cls, config) -> int:
        """An upper bound on what one ``act`` with the default options costs on the scenario
        ``config`` (a ``FleetConfig``), in the kernel's row-columns
        (:func:`fleet_marl.kernel.work.kernel_work`): the first act's, which fills the fit
        tables. A policy that searches with the kernel adds its search; a server refuses an
        opponent whose work is over its limit (``fleet_marl.openenv.limits``)."""
        T, N = len(config.tenants), config.cluster.num_nodes
        G = max((t.max_gpus for t in config.tenants), default=0)
        # a fit table's rows hold one tenant alone on the cluster: a column for it and each node
        return kernel_work(T * cls.FIT_MAPS * G * BATCH_LEVELS.size, 1, N, calls=T * cls.FIT_MAPS)

    # --- shared pieces ------------------------------------------------------------------------

    @property
    def fits(self) -> FitTable:
        if self._fits is None or self._fits.env_static is not self.env.kernel_static:
            self._fits = FitTable(self.env)
        return self._fits

    def index(self, agent: str) -> int:
        return self.env.agent_index[agent]

    def claims_so_far(self, obs: np.ndarray, i: int) -> ClaimsSoFar | None:
        """The claims before tenant ``i``'s turn from its observation ``obs`` (a feature
        vector): None for a simultaneous observation (``N_OBS`` features, plus the
        ``COUPLING_FIELDS`` of a coupled scenario), else the ``CLAIM_FIELDS`` in GPUs (counts
        rounded)."""
        if not has_claims(obs.shape[-1]):
            return None
        st = self.env.kernel_static
        q = int(st.pool[i])
        cap = float(st.pool_capacity[q])
        pool_n = int(np.sum(st.pool == q))
        f = lambda name: float(obs[SEQUENTIAL_OBS_INDEX[name]])  # noqa: E731
        return ClaimsSoFar(
            claimed=int(np.rint(unsquash(f("claimed")) * cap)),
            left=int(np.rint(f("unclaimed") * cap)),
            bid=f("claimed_bid") * float(self.env.bid_levels[-1]),
            after=int(np.rint(f("after_in_pool") * pool_n)),
            position=f("position"),
        )

    def bid_index(self, multiplier: float) -> int:
        """The bid level nearest ``multiplier`` times the list price."""
        return int(np.argmin(np.abs(self.env.bid_levels - multiplier)))

    def lowest_winning_bid(self) -> int:
        """The cheapest bid level that can win: the lowest one, or under a mechanism with a
        reserve the lowest at or above the reserve price (``Mechanism.lowest_winning_level``)."""
        st = self.env.kernel_static
        return st.mechanism.lowest_winning_level(self.env.bid_levels, st.reserve_price)

    @staticmethod
    def legal_max(mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[-1])

    def holding(self, i: int, n: int, mask: np.ndarray, precision: np.ndarray) -> int:
        """``n`` GPUs raised to the fewest that hold the model, within the mask; 0 when ``n``
        is 0, when no count holds the model, or when the mask forbids enough GPUs (asking
        for GPUs that cannot run anything only costs money)."""
        if n <= 0:
            return 0
        least = self.fits.fewest_gpus(i, precision)
        if least is None:
            return 0
        n = self.clip_gpus(max(n, least), mask)
        return n if n >= least else 0

    @staticmethod
    def clip_gpus(n: int, mask: np.ndarray) -> int:
        """The largest GPU count the mask allows that is at most ``n``."""
        ok = np.flatnonzero(mask[: max(int(n), 0) + 1])
        return int(ok[-1]) if ok.size else 0

    def precision_map(self, i: int, mask: tuple, plan: dict[str, str], fallback: str = "bf16") -> np.ndarray:
        """Precision codes per group from ``plan`` (group -> precision name), each replaced by
        ``fallback`` (then the first legal precision) where the mask forbids it."""
        out = np.empty(catalog.N_GROUPS, np.int64)
        for g, group in enumerate(catalog.GROUPS):
            allowed = mask[2 + g]
            want = catalog.PRECISION_CODE[plan.get(group, fallback)]
            if not allowed[want]:
                want = catalog.PRECISION_CODE[fallback]
            if not allowed[want]:
                want = int(np.flatnonzero(allowed)[0])
            out[g] = want
        return out

    def action(self, i: int, gpus: int, bid: int, precision: np.ndarray, batch_level: int | None = None) -> np.ndarray:
        """An action; ``batch_level=None`` takes the largest batch level that fits in memory."""
        if batch_level is None:
            batch_level = self.fits.largest(i, precision, gpus)
        a = np.empty(N_ACT, np.int64)
        a[0], a[1], a[PREC], a[-1] = gpus, bid, precision, batch_level
        return a


class FitTable:
    """The largest batch level that fits in memory, per tenant, precision map and GPU count,
    asked of the batched kernel itself (one ``evaluate`` call per new precision map, every
    tenant alone on a fresh cluster, so nothing but memory decides): a row fits when it is
    neither OOM, vetoed nor projected (it runs exactly as asked)."""

    def __init__(self, env: FleetEnvLike) -> None:
        self.env = env
        self.env_static = st = env.kernel_static
        self._cache: dict[tuple, np.ndarray] = {}
        L = BATCH_LEVELS.size
        self._gmax = int(st.max_gpus.max())
        self._state = RoundState.initial(st)
        self._draws = Draws.expected(st)
        self._L = L

    def table(self, i: int, precision: np.ndarray) -> np.ndarray:
        """(max_gpus + 1,) the largest fitting batch level for 0 .. max_gpus GPUs (-1: none)."""
        key = (i, tuple(int(p) for p in precision))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        st, L = self.env_static, self._L
        G = self._gmax
        counts = np.repeat(np.arange(1, G + 1), L)  # rows: (gpus, level)
        levels = np.tile(np.arange(L), G)
        R = counts.size
        gpus = np.zeros((R, st.T), np.int64)
        gpus[:, i] = counts
        prec = np.broadcast_to(np.asarray(self.env.default_actions.precision), (R, st.T, catalog.N_GROUPS)).copy()
        prec[:, i] = precision
        batch = np.ones((R, st.T), np.int64)
        batch[:, i] = BATCH_LEVELS[levels]
        present = np.zeros((R, st.T), bool)
        present[:, i] = True
        state = RoundState(
            prev_alloc=gpus.copy(),
            temp_c=self._state.temp_c,
            queue=self._state.queue,
            remaining_tokens=np.where(st.is_train, np.maximum(st.job_tokens, 1.0), 0.0),
            budget_left=np.full(st.T, 1e300),
        )
        out = evaluate(
            st, Actions(gpus=gpus, bid=np.ones((R, st.T)), precision=prec, batch=batch), state, self._draws, present, validate=False
        )
        ok = (out.alloc[:, i] == counts) & ~out.oom[:, i] & ~out.vetoed[:, i] & ~out.projected[:, i]
        ok = ok.reshape(G, L)
        best = np.where(ok.any(1), L - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
        res = np.concatenate(([-1], best))[: int(st.max_gpus[i]) + 1]
        res.setflags(write=False)
        self._cache[key] = res
        return res

    def largest(self, i: int, precision: np.ndarray, gpus: int) -> int:
        """The largest batch level that fits on ``gpus`` GPUs (0 when nothing fits or gpus = 0)."""
        if gpus <= 0:
            return 0
        return max(int(self.table(i, precision)[gpus]), 0)

    def fewest_gpus(self, i: int, precision: np.ndarray) -> int | None:
        """The fewest GPUs that hold one sequence (None when even max_gpus cannot)."""
        t = self.table(i, precision)
        ok = np.flatnonzero(t >= 0)
        return int(ok[0]) if ok.size else None


__all__ = ["ENV_ATTRIBUTES", "N_OBS", "OBS", "BasePolicy", "ClaimsSoFar", "FitTable", "FleetEnvLike", "Policy", "fleet_env", "split"]

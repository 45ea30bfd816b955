"""The sequential protocol of ``fleet_v0``: a native :class:`pettingzoo.AECEnv` in which the
tenants of one round claim GPUs one at a time, each seeing the claims made before its turn.

``fleet_marl.env(protocol="sequential", turn_order=...)`` builds it (wrapped in PettingZoo's
order-enforcing wrapper); ``fleet_marl.parallel_env(protocol="sequential")`` is refused (a
ParallelEnv has every tenant act at once). The full reference is ``docs/environment.md``.

===============  ===========================================================================
agents           ``tenant_0`` ... ``tenant_{N-1}``, as in the simultaneous protocol
turns            one per live tenant per round, in the order ``turn_order`` gives
                 (``fleet_marl.tasks.TURN_ORDERS``): ``fixed`` (tenant index), ``rotating``
                 (round r starts at tenant ``r mod N`` and goes on by index), ``random`` (a
                 permutation per round from the env's seeded generator, a third stream of the
                 reset seed, so the env's arrivals and the credit draws are the same as under
                 the simultaneous protocol), ``priority`` (highest ``priority`` first, ties by index)
actions          the simultaneous protocol's ``MultiDiscrete`` (``ACTION_FIELDS``), checked on
                 the agent's turn: a bad action is an ``ActionError`` naming the agent and the
                 field and changes nothing (the agent may try again)
observations     the simultaneous protocol's ``OBS_FIELDS`` of the round's start, then
                 ``CLAIM_FIELDS``: GPUs requested and bid on its pool by the tenants before it
                 this round, how many of its pool claimed and are still to claim, and its place
                 in the order (``SEQUENTIAL_OBS_INDEX`` names every column). ``obs_mode="dict"``
                 adds ``action_mask`` in the env's ``mask_layout``, as in the other forms
clearing         once per round, after the last claim: the collected joint action goes through
                 the simultaneous protocol's round (:class:`FleetParallelEnv`'s ``step``, the
                 array core's one kernel call with every counterfactual row), so dynamics,
                 rewards of every scheme, infos and episode reports are the same code
rewards          all arrive at the end of the round, in ``rewards`` and added to
                 ``_cumulative_rewards``; ``last()`` gives each agent what accrued since its
                 previous turn (PettingZoo's AEC convention); non-final turns reward nothing
termination      as in the simultaneous protocol, at the end of a round; finished agents then
                 step ``None`` once each (``_deads_step_first``) before the next round's turns
===============  ===========================================================================

The env's read-only views (``round``, ``episode_reports``, ``last_outcome``, ``config``, ...,
``VIEWS``) are the round engine's, on ``env(...).unwrapped``; ``claims`` is the round's
claims so far. ``state()`` is the simultaneous protocol's state vector followed by four
columns per tenant: claimed this round (0/1), GPUs requested / max_gpus, bid multiplier /
highest level, place in the order / (tenants in the order - 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import AgentSelector

from fleet_marl.environment.observations import claim_features
from fleet_marl.environment.parallel import FleetParallelEnv
from fleet_marl.environment.render import render_frame
from fleet_marl.environment.spaces import N_CLAIM, N_OBS, OBS_MODES, AgentSpaces, build_spaces
from fleet_marl.tasks import require_sequential

#: The round engine's read-only views and helpers the sequential env shows as its own.
VIEWS = (
    "config",
    "task",
    "kernel_static",
    "bid_levels",
    "nvec",
    "default_action_index",
    "default_actions",
    "rounds_alone",
    "reward_schemes",
    "agent_index",
    "illegal_action",
    "mask_layout",
    "round",
    "last_outcome",
    "last_credit",
    "fairness",
    "episode_reports",
    "node_temperatures",
    "round_state",
    "arrival_schedule",
    "observed_round",
    "action_mask",
    "check_action",
    "credit_seconds",
    "last_credit_seconds",
    "steps_taken",
)
#: Columns per tenant that ``state()`` appends to the simultaneous protocol's state vector.
STATE_CLAIM_COLUMNS = ("claimed", "gpus", "bid", "position")


class FleetSequentialEnv(AgentSpaces, AECEnv):
    """Tenants claim GPUs one at a time within each round (see the module docstring).

    >>> import fleet_marl
    >>> env = fleet_marl.env(task="tiny", protocol="sequential", turn_order="rotating")
    >>> env.reset(seed=0)
    >>> for agent in env.agent_iter():
    ...     obs, reward, term, trunc, info = env.last()
    ...     env.step(None if term or trunc else env.action_space(agent).sample(info["action_mask"]))
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "fleet_v0",
        "render_modes": ["ansi", "rgb_array", "human"],
        "render_fps": 2,
        "is_parallelizable": False,
    }

    def __init__(self, task: str | None = None, config=None, **overrides: Any):
        """``task`` or ``config`` and overrides as ``parallel_env`` takes them, plus
        ``protocol="sequential"`` and ``turn_order`` (default ``"fixed"``)."""
        super().__init__()
        self.turn_order = require_sequential(
            overrides, "FleetSequentialEnv", "fleet_marl.env(protocol='simultaneous') is the AEC form of the ParallelEnv"
        )
        self.protocol = "sequential"
        self.obs_mode = overrides.pop("obs_mode", "flat")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode = {self.obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
        self.render_mode = overrides.pop("render_mode", None)
        if self.render_mode is not None and self.render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode = {self.render_mode!r}: expected None or one of {', '.join(map(repr, self.metadata['render_modes']))}"
            )
        #: the round engine: the simultaneous protocol's env, stepped once per round with the joint action
        self.env = FleetParallelEnv(task, config, obs_mode="flat", **overrides)
        self.possible_agents = self.env.possible_agents[:]
        self.agents: list[str] = []
        self._build()
        self._order_rng: np.random.Generator | None = None
        self._ready = False
        self._figure = None

    def _build(self) -> None:
        e = self.env
        T = len(self.possible_agents)
        self.action_spaces, self.observation_spaces, self.state_space = build_spaces(
            self.possible_agents,
            e.nvec,
            self.obs_mode,
            e.state_space.shape[0] + len(STATE_CLAIM_COLUMNS) * T,
            e.mask_layout,
            N_OBS + N_CLAIM,
        )
        st = e.kernel_static
        self._priority_order = sorted(range(T), key=lambda i: (-float(st.priority[i]), i))
        self._position = np.full(T, -1, np.int64)  # (T,) place in this round's order, -1 not in it
        self._joint = np.zeros((T, e.nvec.shape[1]), np.int64)  # (T, 8) the round's claims (action indices)
        self._claimed = np.zeros(T, bool)  # (T,) claimed this round
        self._claim_rows: np.ndarray | None = None  # (T, N_CLAIM) cache of the claim features

    def __getattr__(self, name: str):
        if name in VIEWS and "env" in self.__dict__:
            return getattr(self.__dict__["env"], name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # --- PettingZoo API ---------------------------------------------------------------------------

    @property
    def max_cycles(self) -> int:
        return self.env.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        self.env.max_cycles = value
        self._build()
        self._ready = False

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        obs, infos = self.env.reset(seed=seed, options=options)  # checks the seed
        if seed is not None or self._order_rng is None:
            # the turn order's own stream (the third child of the seed; the engine spawns the first
            # two for the arrivals and the credit draws), so the order never shifts their draws
            self._order_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
        self._ready = True
        self.agents = self.env.agents[:]
        self._base = obs
        self.infos = infos
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self._skip_agent_selection = None
        self._start_round()
        if self.render_mode == "human":
            self.render()

    def _start_round(self) -> None:
        """This round's turn order over the live tenants; no claims yet."""
        live = self.env.agents
        self._order = self._turn_order(live)
        self._position[:] = -1
        idx = self.env.agent_index
        for k, a in enumerate(self._order):
            self._position[idx[a]] = k
        self._joint[:] = 0
        self._claimed[:] = False
        self._claim_rows = None
        if self._order:
            self._selector = AgentSelector(self._order)
            self.agent_selection = self._selector.reset()

    def _turn_order(self, live: list[str]) -> list[str]:
        idx, T = self.env.agent_index, len(self.possible_agents)
        rows: Sequence[int]
        if self.turn_order == "fixed":
            rows = range(T)
        elif self.turn_order == "rotating":
            start = self.env.round % T
            rows = [(start + k) % T for k in range(T)]
        elif self.turn_order == "random":
            assert self._order_rng is not None  # reset() draws it before the first turn
            rows = self._order_rng.permutation(T).tolist()  # drawn over all tenants: the stream does not depend on who is live
        else:
            rows = self._priority_order
        alive = {idx[a] for a in live}
        return [self.possible_agents[i] for i in rows if i in alive]

    def step(self, action) -> None:
        self._need_reset("step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        idx = self.env.check_action(agent, action)  # an ActionError naming the agent and the field; nothing changes
        i = self.env.agent_index[agent]
        self._cumulative_rewards[agent] = 0.0
        self._joint[i] = idx
        self._claimed[i] = True
        self._claim_rows = None
        if not self._selector.is_last():
            self._clear_rewards()
            self.agent_selection = self._selector.next()
            return
        # the last claim: the round clears once, with the joint action, in the round engine
        obs, rewards, terms, truncs, infos = self.env.step({a: self._joint[self.env.agent_index[a]] for a in self._order})
        self._base = obs
        self.rewards = {a: rewards[a] for a in self.agents}
        self.terminations = {a: terms[a] for a in self.agents}
        self.truncations = {a: truncs[a] for a in self.agents}
        self.infos = {a: infos[a] for a in self.agents}
        self._accumulate_rewards()
        self._start_round()
        self._deads_step_first()
        if self.render_mode == "human":
            self.render()

    def _claims(self) -> np.ndarray:
        if self._claim_rows is None:
            bids = self.env.bid_levels[self._joint[:, 1]]
            gpus = np.where(self._claimed, self._joint[:, 0], 0)
            self._claim_rows = claim_features(
                self.env.kernel_static, float(self.env.bid_levels[-1]), self._position, gpus, bids, self._claimed
            )
        return self._claim_rows

    def observe(self, agent: str):
        """``agent``'s observation now: its ``OBS_FIELDS`` at the round's start and its
        ``CLAIM_FIELDS`` (the claims of the tenants before it in this round's order)."""
        self._need_reset("observe()")
        i = self.env.agent_index[self._known(agent)]
        vec = np.concatenate([self._base[agent], self._claims()[i]])
        if self.obs_mode == "flat":
            return vec
        mask = self.infos[agent]["action_mask"] if agent in self.infos else self.env.action_mask(agent)
        return {"observation": vec, "action_mask": mask}

    @property
    def claims(self) -> dict[str, dict]:
        """The round's claims so far, in turn order: ``{agent: {"position", "pool", "gpus",
        "bid_level", "bid"}}`` (``bid`` the multiplier of the list price). What every tenant
        after them sees, summed per pool, in its ``CLAIM_FIELDS``."""
        self._need_reset("claims")
        st = self.env.kernel_static
        out = {}
        for a in self._order:
            i = self.env.agent_index[a]
            if self._claimed[i]:
                out[a] = {
                    "position": int(self._position[i]),
                    "pool": st.pools[st.pool[i]],
                    "gpus": int(self._joint[i, 0]),
                    "bid_level": int(self._joint[i, 1]),
                    "bid": float(self.env.bid_levels[self._joint[i, 1]]),
                }
        return out

    @property
    def turn_sequence(self) -> list[str]:
        """This round's turn order (the live tenants; a copy)."""
        self._need_reset("turn_sequence")
        return list(self._order)

    def state(self) -> np.ndarray:
        """The simultaneous protocol's ``state()`` then, per tenant, ``STATE_CLAIM_COLUMNS``
        (claimed, GPUs / max_gpus, bid / highest level, place / (tenants in the order - 1))."""
        self._need_reset("state()")
        e = self.env
        T = len(self.possible_agents)
        extra = np.zeros((T, len(STATE_CLAIM_COLUMNS)))
        c = self._claimed
        extra[:, 0] = c
        extra[:, 1] = np.where(c, self._joint[:, 0] / e.kernel_static.max_gpus, 0.0)
        extra[:, 2] = np.where(c, e.bid_levels[self._joint[:, 1]] / e.bid_levels[-1], 0.0)
        extra[:, 3] = np.where(self._position >= 0, self._position / max(len(self._order) - 1, 1), 0.0)
        return np.concatenate([e.state(), np.clip(extra, 0.0, 1.0).ravel().astype(np.float32)])

    def _claims_line(self) -> str:
        if not self.agents:
            return "sequential: episode over"
        made = ", ".join(f"{a} {c['gpus']} GPUs at {c['bid']:g}x" for a, c in self.claims.items()) or "none yet"
        nxt = self.agent_selection if self.agent_selection in self._order else "-"
        return f"sequential ({self.turn_order}): order {' '.join(self._order)}; next {nxt}; claims this round: {made}"

    def render(self):
        self._need_reset("render()")
        frame, self._figure = render_frame(self.render_mode, self.env, self._figure, self._claims_line())
        return frame

    def close(self) -> None:
        self._figure = None
        self.env.close()


__all__ = ["STATE_CLAIM_COLUMNS", "VIEWS", "FleetSequentialEnv"]

"""The sequential protocol of ``fleet_v0``: a native :class:`pettingzoo.AECEnv` in which the
tenants of one round claim GPUs one at a time, each seeing the claims made before its turn.

``fleet_marl.env(protocol="sequential", turn_order=...)`` builds it (wrapped in PettingZoo's
order-enforcing wrapper); ``fleet_marl.parallel_env(protocol="sequential")`` is refused (a
ParallelEnv has every tenant act at once). The full reference is ``docs/environment.md``.

===============  ===========================================================================
agents           ``tenant_0`` ... ``tenant_{N-1}``, as in the simultaneous protocol
turns            one per live tenant per round, in the order ``turn_order`` gives (a name in
                 ``fleet_marl.config.turn_orders.REGISTRY``): ``fixed`` (tenant index), ``rotating``
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
                 adds ``action_mask`` in the env's ``mask_layout`` (and takes it out of the
                 infos), as in the other forms
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

The turn order, the claims and the claim features are the protocol's array core
(:class:`~fleet_marl.environment.turns.Turns`) for one cluster, the same code the per-turn
vector env plays for B; this env adds the agent names, PettingZoo's turn bookkeeping and the
round engine. The env's read-only views (``round``, ``episode_reports``, ``last_outcome``,
``config``, ..., ``VIEWS``) are the round engine's, on ``env(...).unwrapped``; ``claims`` is
the round's claims so far. ``state()`` is the simultaneous protocol's state vector followed by
four columns per tenant: claimed this round (0/1), GPUs requested / max_gpus, bid multiplier /
highest level, place in the order / (tenants in the order - 1).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv

from fleet_marl.environment.infos import AgentInfo
from fleet_marl.environment.parallel import FleetParallelEnv
from fleet_marl.environment.render import render_frame
from fleet_marl.environment.spaces import N_CLAIM, N_OBS, OBS_MODES, AgentSpaces, build_spaces, obs_fields
from fleet_marl.environment.turns import STATE_CLAIM_COLUMNS, Turns
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
            len(e.obs_fields) + N_CLAIM,
        )
        #: the observation's columns in order, (name, meaning): OBS_FIELDS, CLAIM_FIELDS, then
        #: COUPLING_FIELDS when a coupling switch is on (``fields.obs_fields``)
        self.obs_fields = obs_fields(len(e.obs_fields) > N_OBS, sequential=True)
        before: Turns | None = self.__dict__.get("_turns")
        #: the protocol's array core for this one cluster (B = 1): the order, the claims, the claim features
        self._turns = Turns(1, e.kernel_static, e.bid_levels, self.turn_order)
        if before is not None:
            self._turns.rngs = before.rngs  # the order's stream goes on across a rebuild (max_cycles)
        self._order: list[str] = []  # this round's turn order (the live tenants' names)

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
        if seed is not None or self._turns.rngs is None:
            self._turns.seed([seed])  # the turn order's own stream of the seed
        self._ready = True
        self.agents = self.env.agents[:]
        self._base = obs
        self.infos = self._infos(infos, self.agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self._skip_agent_selection = None
        self._start_round()
        if self.render_mode == "human":
            self.render()

    def _start_round(self) -> None:
        """This round's turn order over the live tenants (the array core's, for one cluster); no
        claims yet; the first of them has the turn."""
        t, idx = self._turns, self.env.agent_index
        alive = np.zeros((1, len(self.possible_agents)), bool)
        alive[0, [idx[a] for a in self.env.agents]] = True
        t.start(np.zeros(1, np.int64), np.array([self.env.round], np.int64), alive)
        self._order = [self.possible_agents[i] for i in t.order[0, : t.n_live[0]]]
        if self._order:
            self.agent_selection = self._order[0]

    def step(self, action) -> None:
        self._need_reset("step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        idx = self.env.check_action(agent, action)  # an ActionError naming the agent and the field; nothing changes
        t = self._turns
        self._cumulative_rewards[agent] = 0.0
        t.claim(np.zeros(1, np.int64), np.array([self.env.agent_index[agent]]), np.asarray(idx, np.int64)[None])
        if t.turn + 1 < t.n_live[0]:
            self._clear_rewards()
            t.advance()
            self.agent_selection = self._order[t.turn]
            return
        # the last claim: the round clears once, with the joint action, in the round engine
        joint = t.joint[0]
        obs, rewards, terms, truncs, infos = self.env.step({a: joint[self.env.agent_index[a]] for a in self._order})
        self._base = obs
        self.rewards = {a: rewards[a] for a in self.agents}
        self.terminations = {a: terms[a] for a in self.agents}
        self.truncations = {a: truncs[a] for a in self.agents}
        self.infos = self._infos(infos, self.agents)
        self._accumulate_rewards()
        self._start_round()
        self._deads_step_first()
        if self.render_mode == "human":
            self.render()

    def observe(self, agent: str):
        """``agent``'s observation now: its ``OBS_FIELDS`` at the round's start and its
        ``CLAIM_FIELDS`` (the claims of the tenants before it in this round's order), then its
        round-start ``COUPLING_FIELDS`` when a coupling switch is on."""
        self._need_reset("observe()")
        i = self.env.agent_index[self._known(agent)]
        base = self._base[agent]
        vec = np.concatenate([base[:N_OBS], self._turns.features()[0, i], base[N_OBS:]])
        if self.obs_mode == "flat":
            return vec
        mask = self._masks[agent] if agent in self.infos else self.env.action_mask(agent)
        return {"observation": vec, "action_mask": mask}

    def _infos(self, infos: dict, agents: list[str]) -> dict:
        """The round engine's infos of ``agents``; with ``obs_mode="dict"`` without ``action_mask``
        (kept for :meth:`observe`: the mask is in the observation only, as in the ParallelEnv)."""
        self._masks = {a: infos[a]["action_mask"] for a in agents}
        if self.obs_mode == "flat":
            return {a: infos[a] for a in agents}
        return {a: AgentInfo((k, v) for k, v in infos[a].items() if k != "action_mask") for a in agents}

    @property
    def claims(self) -> dict[str, dict]:
        """The round's claims so far, in turn order: ``{agent: {"position", "pool", "gpus",
        "bid_level", "bid"}}`` (``bid`` the multiplier of the list price). What every tenant
        after them sees, summed per pool, in its ``CLAIM_FIELDS``."""
        self._need_reset("claims")
        st, t = self.env.kernel_static, self._turns
        out = {}
        for a in self._order:
            i = self.env.agent_index[a]
            if t.claimed[0, i]:
                out[a] = {
                    "position": int(t.position[0, i]),
                    "pool": st.pools[st.pool[i]],
                    "gpus": int(t.joint[0, i, 0]),
                    "bid_level": int(t.joint[0, i, 1]),
                    "bid": float(self.env.bid_levels[t.joint[0, i, 1]]),
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
        return np.concatenate([self.env.state(), self._turns.state_columns()[0]])

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

"""``FleetRLlibEnv``: fleet_marl as an RLlib ``MultiAgentEnv`` (new API stack, ray 2.60).

Why not RLlib's ``ParallelPettingZooEnv``: its ``render()`` passes a mode argument that
PettingZoo's ``render()`` no longer takes, its agent order comes from a ``set`` (so it changes
with the hash seed), and when the last agents finish partly terminated and partly truncated it
never sets ``__all__``, so the env runner steps an env with no agents left. fleet_marl can end
that way (a tenant that goes broke in the last round is terminated while the rest are
truncated). This wrapper fixes all three.

``env_config`` -- every keyword ``fleet_marl.parallel_env`` takes (``task``, ``reward_scheme``,
any config override), ``protocol`` and ``turn_order`` (below), plus:

``obs_mode``
    ``"dict"`` (default): each observation is ``{"observations": Box(34 or 40), "action_mask":
    Box(0, 1, (sum(nvec),))}``, the masks of the 8 action dimensions concatenated in action order
    (the layout of the logits of RLlib's ``TorchMultiCategorical``), for
    :class:`~fleet_marl.rllib.modules.MaskedPPOTorchRLModule`.
    ``"flat"``: the plain ``Box``; RLlib's default module, no masking (the env vetoes a
    masked precision and caps a masked GPU count, see ``docs/environment.md``).
``with_state``
    ``True`` adds ``"state": env.state()`` (dict mode only), the input of the centralized critic
    (:class:`~fleet_marl.rllib.modules.CentralCriticPPOTorchRLModule`).
``compute_all``
    Defaults to ``False`` here (only the trained scheme's reward is computed; welfare and the
    fairness report do not depend on it).
``mask_layout``
    ``"dims"`` or ``"flat"``, accepted and ignored: the mask in the observation is always the flat
    one above.

``protocol``
    ``"simultaneous"`` (default): every live tenant acts on every env step (the
    ``FleetParallelEnv``). ``"sequential"`` (with ``turn_order``, default ``"fixed"``): the
    tenants claim one at a time (``FleetSequentialEnv``, the native AEC env), and the wrapper
    is RLlib's turn-based ``MultiAgentEnv``: ``reset()`` and every ``step()`` return the
    observation of the one tenant whose turn is next (40 features: the 34 of the round's start
    and the 6 ``CLAIM_FIELDS`` of the claims before its turn), and ``step()`` takes that
    tenant's action only. A tenant's rewards are held until it is handed an observation again:
    what accrued since its previous turn (the previous round's reward; PettingZoo's
    ``last()``) comes with its next turn's observation, so over an episode each tenant is
    credited exactly the AEC env's cumulative reward. A tenant that finishes (terminated or
    truncated at the end of a round) gets one last observation with its last reward and its
    flag, together with the next tenant's turn, and nothing after that; ``__all__`` is set on
    the step that finishes the last one. One RLlib env step is one claim (N per round).

Action spaces are padded to a common ``MultiDiscrete(nvec.max(0))`` so that agents with
different ``max_gpus`` can share a module; the padded choices are masked (dict mode) or
clipped to the agent's range (flat mode).

B clusters at the vector env's speed: :class:`~fleet_marl.rllib.vector.FleetVectorMultiAgentEnv`
(the same spaces, B clusters in one array step), what ``fleet-marl train --engine rllib`` samples
by default; this per-cluster env stays for the sequential protocol and ``TrainConfig.vector = False``.

Reading the envs inside RLlib: :func:`fleet_envs` gives the ``FleetParallelEnv`` of each sub-env
of an RLlib vector env (what ``FleetCallbacks.on_episode_end`` receives), and
:func:`credit_timing` the reward seconds and env steps of the envs an algorithm's local env
runner steps (the credit-assignment study's cost of each reward scheme).

Seeding: RLlib passes ``seed + worker_index + sub_env_index`` to the first reset of each
sub-env; the wrapper mixes in the worker index (``SeedSequence([seed, worker_index])``) so that
no two sub-envs of a run share a seed. Later resets continue the env's own stream, so a run is
reproducible from ``config.debugging(seed=...)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.tune.registry import register_env

from fleet_marl.environment import FleetParallelEnv, FleetSequentialEnv
from fleet_marl.tasks import check_protocol

#: The names registered with ``ray.tune.registry.register_env`` by :func:`register`.
ENV_NAMES = {"dict": "fleet_marl", "flat": "fleet_marl_flat"}
OBS_MODES = tuple(ENV_NAMES)
#: Keys of ``env_config`` the wrapper consumes itself; the rest go to ``parallel_env``.
WRAPPER_KEYS = ("obs_mode", "with_state")
PROTOCOL_KEYS = ("protocol", "turn_order")


def check_env_config(cfg: dict) -> tuple[str, bool, dict]:
    """``(obs_mode, with_state, the rest)`` of an ``env_config``, checked (a ValueError naming the
    key); the rest has ``compute_all = False`` unless it says otherwise. ``mask_layout`` (``"dims"``
    or ``"flat"``) is taken and dropped: the RLlib envs' mask is always their own flat one."""
    cfg = dict(cfg)
    obs_mode = cfg.pop("obs_mode", "dict")
    if obs_mode not in OBS_MODES:
        raise ValueError(f"env_config obs_mode = {obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
    with_state = bool(cfg.pop("with_state", False))
    if with_state and obs_mode != "dict":
        raise ValueError("env_config with_state = True needs obs_mode = 'dict' (the state is one key of the Dict observation)")
    cfg.setdefault("compute_all", False)
    layout = cfg.pop("mask_layout", "dims")
    if layout not in ("dims", "flat"):
        raise ValueError(
            f"env_config mask_layout = {layout!r}: the RLlib env puts its own flat mask, padded to nvec_max, in the observation "
            "(obs_mode='dict') whatever the layout; leave mask_layout out, or give 'dims' or 'flat'"
        )
    return obs_mode, with_state, cfg


def rllib_spaces(
    features: int, mask_size: int, nvec_max: np.ndarray, state: gym.Space | None, obs_mode: str = "dict"
) -> tuple[gym.Space, gym.spaces.MultiDiscrete]:
    """Every agent's (observation space, action space): the Dict of ``observations`` (a Box of
    ``features``), ``action_mask`` (a Box of ``mask_size``) and, given, ``state``; or the Box
    alone (``obs_mode="flat"``). Actions: ``MultiDiscrete(nvec_max)``."""
    box = gym.spaces.Box(0.0, 1.0, (features,), np.float32)
    obs_space: gym.Space = box
    if obs_mode == "dict":
        spaces: dict[str, gym.Space] = {"observations": box, "action_mask": gym.spaces.Box(0.0, 1.0, (mask_size,), np.float32)}
        if state is not None:
            spaces["state"] = state
        obs_space = gym.spaces.Dict(spaces)
    return obs_space, gym.spaces.MultiDiscrete(nvec_max)


def flat_mask(mask: tuple, offsets: np.ndarray) -> np.ndarray:
    """The per-dimension mask tuple of ``FleetParallelEnv`` as one float32 vector of length
    ``offsets[-1] = sum(nvec_max)``: dimension ``k`` at ``offsets[k]:offsets[k+1]``, padded
    choices 0."""
    out = np.zeros(int(offsets[-1]), np.float32)
    for k, m in enumerate(mask):
        out[offsets[k] : offsets[k] + len(m)] = m
    return out


def mask_offsets(nvec_max: np.ndarray) -> np.ndarray:
    """Start of each action dimension in the flat mask, and its length last."""
    return np.concatenate(([0], np.cumsum(nvec_max))).astype(np.int64)


class FleetRLlibEnv(MultiAgentEnv):
    """fleet_marl's ``FleetParallelEnv`` (or, with ``protocol="sequential"``, its
    ``FleetSequentialEnv``, turn by turn) as an RLlib ``MultiAgentEnv``. See the module docstring."""

    def __init__(self, config: dict | None = None, obs_mode: str | None = None):
        super().__init__()
        cfg = dict(config or {})
        self.worker_index = int(getattr(config, "worker_index", 0) or 0)  # RLlib's EnvContext
        if obs_mode is not None:
            cfg["obs_mode"] = obs_mode
        self.obs_mode, self.with_state, cfg = check_env_config(cfg)
        protocol, turn_order = check_protocol(cfg)  # a ConfigError naming protocol or turn_order
        cfg = {k: v for k, v in cfg.items() if k not in PROTOCOL_KEYS}
        self.protocol = protocol
        #: the sequential protocol's AEC env (None under the simultaneous protocol)
        self.seq_env: FleetSequentialEnv | None = None
        if protocol == "sequential":
            self.seq_env = FleetSequentialEnv(obs_mode="flat", protocol=protocol, turn_order=turn_order, **cfg)
            self.par_env = self.seq_env.env  # the round engine: the views, fairness and timing fleet_envs() reads
            spaces_of = self.seq_env
        else:
            self.par_env = FleetParallelEnv(obs_mode="flat", **cfg)  # masks come from the infos
            spaces_of = self.par_env
        pe = self.par_env
        self.metadata = dict(spaces_of.metadata)  # own copy: RLlib's vector env writes into it
        self.render_mode = spaces_of.render_mode
        self.possible_agents = list(pe.possible_agents)
        self.agents = []
        self.nvec_max = pe.nvec.max(0)
        self._hi = {a: pe.nvec[i] - 1 for i, a in enumerate(self.possible_agents)}
        self._offsets = mask_offsets(self.nvec_max)
        box = spaces_of.observation_spaces[pe.possible_agents[0]]  # 34 features, or 40 under the sequential protocol
        state = spaces_of.state_space if self.with_state else None
        features = int(np.prod(box.shape or ()))
        obs_space, act_space = rllib_spaces(features, int(self.nvec_max.sum()), self.nvec_max, state, self.obs_mode)
        self.observation_spaces = dict.fromkeys(self.possible_agents, obs_space)
        self.action_spaces = dict.fromkeys(self.possible_agents, act_space)

    # --- conversions ------------------------------------------------------------------------------

    def flat_mask(self, mask: tuple) -> np.ndarray:
        """See :func:`flat_mask`."""
        return flat_mask(mask, self._offsets)

    def convert(self, obs: dict, infos: dict) -> dict:
        """The wrapper's observations from ``FleetParallelEnv``'s flat-mode ones and infos."""
        if self.obs_mode == "flat":
            return obs
        state = self.par_env.state() if self.with_state else None
        out = {}
        for a, o in obs.items():
            d = {"observations": o, "action_mask": self.flat_mask(infos[a]["action_mask"])}
            if state is not None:
                d["state"] = state
            out[a] = d
        return out

    @staticmethod
    def _slim(infos: dict) -> dict:
        # the mask is in the observation (or not needed); it would only bloat the episodes
        return {a: {k: v for k, v in i.items() if k != "action_mask"} for a, i in infos.items()}

    # --- MultiAgentEnv ----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            seed = int(np.random.SeedSequence([int(seed), self.worker_index]).generate_state(1)[0])
        if self.seq_env is not None:
            return self._reset_turns(seed, options)
        obs, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return self.convert(obs, infos), self._slim(infos)

    def step(self, action_dict: dict[Any, Any]):
        if self.seq_env is not None:
            return self._step_turns(action_dict)
        acts = {a: np.minimum(np.asarray(v, np.int64), self._hi[a]) for a, v in action_dict.items()}
        obs, rew, term, trunc, infos = self.par_env.step(acts)
        self.agents = list(self.par_env.agents)
        done = not self.agents  # every agent finished, however each one ended
        term["__all__"] = done and all(term.values())
        trunc["__all__"] = done and not term["__all__"]
        return self.convert(obs, infos), rew, term, trunc, self._slim(infos)

    # --- the sequential protocol: one tenant per env step ------------------------------------------

    def _seq(self) -> FleetSequentialEnv:
        """The sequential protocol's AEC env (only its methods call this)."""
        assert self.seq_env is not None  # protocol == "sequential"
        return self.seq_env

    def _turn_obs(self, agent: str):
        """``agent``'s observation now (its 40 features and, in dict mode, its flat mask)."""
        se = self._seq()
        vec = se.observe(agent)
        if self.obs_mode == "flat":
            return vec
        info = se.infos.get(agent) or {}
        mask = info.get("action_mask")
        if mask is None:
            mask = self.par_env.action_mask(agent)
        d = {"observations": vec, "action_mask": self.flat_mask(mask)}
        if self.with_state:
            d["state"] = se.state()
        return d

    def _hand_out(self) -> tuple[dict, dict, dict, dict, dict]:
        """Step the finished tenants out of the AEC env (each with its last observation, its
        held reward and its flag), then hand the observation and held reward to the tenant
        whose turn it is, if any is left: (obs, rewards, terminated, truncated, infos)."""
        se = self._seq()
        obs: dict[str, Any] = {}
        rew: dict[str, float] = {}
        term: dict[str, bool] = {}
        trunc: dict[str, bool] = {}
        infos: dict[str, dict] = {}
        while se.agents:
            a = se.agent_selection
            obs[a] = self._turn_obs(a)
            rew[a] = float(se._cumulative_rewards[a])  # what accrued since its previous turn (AEC last())
            infos[a] = {k: v for k, v in (se.infos.get(a) or {}).items() if k != "action_mask"}
            if not (se.terminations[a] or se.truncations[a]):
                break  # a live tenant's turn: it acts next
            term[a], trunc[a] = bool(se.terminations[a]), bool(se.truncations[a])
            se.step(None)  # finished: PettingZoo's dead step, which drops it
        self.agents = list(se.agents)
        done = not self.agents
        term["__all__"] = done and all(term.values())  # every tenant that finished on this step terminated
        trunc["__all__"] = done and not term["__all__"]
        return obs, rew, term, trunc, infos

    def _reset_turns(self, seed, options):
        self._seq().reset(seed=seed, options=options)
        obs, _, _, _, infos = self._hand_out()
        return obs, infos

    def _step_turns(self, action_dict: dict[Any, Any]):
        se = self._seq()
        if not se.agents:
            raise RuntimeError("step() after the episode ended: call reset() first")
        agent = se.agent_selection
        if set(action_dict) != {agent}:
            raise ValueError(
                f"action_dict keys = {sorted(map(str, action_dict))}: the sequential protocol takes one action, for {agent!r}, "
                "the tenant whose turn it is (the one reset() or the last step() returned an observation for)"
            )
        se.step(np.minimum(np.asarray(action_dict[agent], np.int64), self._hi[agent]))
        return self._hand_out()

    def render(self):
        if self.seq_env is not None:
            return self.seq_env.render()
        return self.par_env.render()

    def close(self) -> None:
        (self.seq_env or self.par_env).close()


def make_env(config: dict | None = None) -> FleetRLlibEnv:
    """The env creator registered under :data:`ENV_NAMES` ``["dict"]``."""
    return FleetRLlibEnv(config)


def make_flat_env(config: dict | None = None) -> FleetRLlibEnv:
    """The env creator registered under :data:`ENV_NAMES` ``["flat"]``."""
    return FleetRLlibEnv(config, obs_mode="flat")


def fleet_envs(vector_env) -> list[FleetParallelEnv]:
    """The ``FleetParallelEnv`` of each sub-env of an RLlib vector env of :class:`FleetRLlibEnv`
    (or of one ``FleetRLlibEnv``), in sub-env order. The array-speed vector env
    (:class:`~fleet_marl.rllib.vector.FleetVectorMultiAgentEnv`) has none: a ValueError."""
    if hasattr(vector_env, "step_frame"):
        raise ValueError("fleet_envs: a FleetVectorMultiAgentEnv steps its clusters as arrays, with no FleetParallelEnv per cluster")
    subs = getattr(vector_env, "envs", None) or [vector_env]
    return [sub.unwrapped.par_env for sub in subs]


def credit_timing(algorithm) -> tuple[float, int]:
    """(seconds spent computing rewards, env steps taken) over the lifetime of the envs the
    algorithm's local env runner steps: every training step when ``num_env_runners = 0``, none
    otherwise (then ``(0.0, 0)``). An env step is one round of one cluster, on either env
    runner (``FleetParallelEnv.credit_seconds``, ``FleetVectorEnv.credit_seconds``)."""
    runner = algorithm.env_runner
    env = runner.env if runner is not None else None
    if env is None:
        return 0.0, 0
    if hasattr(env, "step_frame"):  # the array-speed vector env: its own totals
        return float(env.credit_seconds), int(env.steps_taken)
    envs = fleet_envs(env)
    return float(sum(e.credit_seconds for e in envs)), int(sum(e.steps_taken for e in envs))


def register() -> None:
    """Register ``"fleet_marl"`` (dict obs, masked) and ``"fleet_marl_flat"`` with Ray Tune's
    registry, so configs can name the env: ``PPOConfig().environment("fleet_marl", ...)``."""
    register_env(ENV_NAMES["dict"], make_env)
    register_env(ENV_NAMES["flat"], make_flat_env)

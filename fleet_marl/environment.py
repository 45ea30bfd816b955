"""The PettingZoo environment ``fleet_v0``: tenants negotiate for one shared GPU cluster.

``FleetParallelEnv`` is a :class:`pettingzoo.ParallelEnv`; ``env()`` is its AEC form. Both are
a thin layer over the batched kernel: agent-ID dicts at the edge, tenant arrays inside. The
full reference, with every field, formula and task, is ``docs/environment.md``.

Agents
    ``tenant_0`` ... ``tenant_{N-1}``, one per ``config.tenants`` entry. Each runs a stream of
    jobs of its kind: a trainer works through training jobs one at a time (new jobs arrive by
    its workload's arrival process and queue); a server receives requests that queue FIFO.

Actions -- ``MultiDiscrete`` per tenant, ``ACTION_FIELDS``:
    ``gpus`` (0 .. max_gpus), ``bid_level`` (index into ``arbiter.bid_levels``, multipliers of
    the list price), ``precision.<group>`` for the five layer groups (index into
    ``catalog.PRECISIONS``: fp32, bf16, fp8, int8, int4) and ``batch_level`` (index into
    ``BATCH_LEVELS``: sequences per GPU per step for training, concurrent sequences for
    serving).

Action mask -- a tuple of 8 int8 arrays, one per action dimension, the layout gymnasium's
    ``MultiDiscrete.sample(mask=...)`` takes. Masked out: precisions the tenant's GPU lacks,
    INT8/INT4 for training (weight-only formats), and GPU counts the budget cannot pay for at
    the lowest bid. It is ``obs["action_mask"]`` in ``obs_mode="dict"`` and
    ``infos[agent]["action_mask"]`` in both modes. A masked choice is named in
    ``infos[agent]["illegal"]``: a masked precision is vetoed (the tenant runs nothing that
    round), a masked GPU count is capped at what the budget affords at the bid. With
    ``illegal_action="raise"`` either is an :class:`ActionError`.

Observations -- float32 in [0, 1], ``OBS_FIELDS`` (normalizations in the docs). ``state()``
    is every tenant's row followed by each node's temperature and each rack's power.

Rewards -- ``reward_scheme``: local, global, mixed, difference, difference_default, shapley
    (``fleet_marl.credit``). Every scheme's value is in ``infos[agent]["rewards"]`` unless
    ``compute_all=False``. A degenerate strategy's reward is ``degenerate_floor``.
    ``env.credit_seconds`` is the wall time the env has spent in the credit engine (the one
    batched kernel call per round that every computed scheme needs, plus the schemes'
    arithmetic) since it was built, over all episodes; ``env.steps_taken`` counts the steps.

Termination -- a tenant whose budget cannot pay for one GPU for one round at the lowest bid,
    or whose work is done (no job or request left, and none to come), is terminated.
    Reaching ``max_cycles`` rounds truncates everyone left.
"""

from __future__ import annotations

from collections import deque
from time import perf_counter
from typing import Any

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec_wrapper
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from fleet_marl import catalog
from fleet_marl.config import REWARD_SCHEMES, FleetConfig
from fleet_marl.credit import CreditEngine
from fleet_marl.fairness import FairnessTracker, lowest_precision
from fleet_marl.kernel import Actions, Draws, KernelStatic, RoundState, evaluate
from fleet_marl.kernel import cost
from fleet_marl.kernel.arbiter import AUCTION, PROPORTIONAL
from fleet_marl.tasks import make_config
from fleet_marl.workloads import arrival_schedule, burst_chain, resolve_trace

#: Batch sizes selectable by ``batch_level``. 256 is vLLM's default ``max_num_seqs``.
BATCH_LEVELS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], dtype=np.int64)
ACTION_FIELDS = ("gpus", "bid_level") + tuple(f"precision.{g}" for g in catalog.GROUPS) + ("batch_level",)
N_ACT = len(ACTION_FIELDS)
_PREC = slice(2, 2 + catalog.N_GROUPS)
OBS_MODES = ("flat", "dict")
ILLEGAL_ACTION = ("veto", "raise")

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
__doc__ += "\nObservation fields (index, name, meaning)::\n\n" + "\n".join(
    f"    {i:2d}  {name:<13} {meaning}" for i, (name, meaning) in enumerate(OBS_FIELDS)
)
_O = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}


class ActionError(ValueError):
    """A bad action. ``agent`` and ``field`` name what was wrong; the step changed nothing."""

    def __init__(self, agent: Any, field: str, value: Any, expected: str):
        self.agent, self.field, self.value, self.expected = agent, field, value, expected
        super().__init__(f"{agent}: {field} = {value!r}: expected {expected}")


def _squash(x, scale):
    x = np.maximum(x, 0.0)
    return x / (x + scale)


class FleetParallelEnv(ParallelEnv):
    """Tenants negotiate for one shared GPU cluster; one step is one scheduling round.

    >>> import fleet_marl
    >>> env = fleet_marl.parallel_env(task="tiny")
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs)
    ['tenant_0', 'tenant_1']
    >>> actions = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
    >>> obs, rewards, terms, truncs, infos = env.step(actions)
    >>> sorted(infos["tenant_0"]["rewards"])
    ['difference', 'difference_default', 'global', 'local', 'mixed', 'shapley']
    """

    metadata = {"name": "fleet_v0", "render_modes": ["ansi", "rgb_array", "human"], "render_fps": 2, "is_parallelizable": True}

    def __init__(self, task: str | None = None, config: FleetConfig | dict | None = None, **overrides: Any):
        """``task`` (default ``"easy"``) or a full ``config``, plus overrides of any field."""
        cfg, opts = make_config(task, config, **overrides)
        self.task = (task or "easy") if config is None else None
        self.obs_mode = opts.get("obs_mode", "flat")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode = {self.obs_mode!r}: expected one of {', '.join(map(repr, OBS_MODES))}")
        self.render_mode = opts.get("render_mode")
        if self.render_mode is not None and self.render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode = {self.render_mode!r}: expected None or one of {', '.join(map(repr, self.metadata['render_modes']))}")
        self.illegal_action = opts.get("illegal_action", "veto")
        if self.illegal_action not in ILLEGAL_ACTION:
            raise ValueError(f"illegal_action = {self.illegal_action!r}: expected one of {', '.join(map(repr, ILLEGAL_ACTION))}")
        self._build(cfg)
        self._ready = False
        self._seed_seq: np.random.SeedSequence | None = None

    # --- construction ---------------------------------------------------------------------------

    def _build(self, cfg: FleetConfig) -> None:
        for t in cfg.tenants:  # a missing trace file is an error now, not at reset()
            if t.workload.pattern == "trace":
                resolve_trace(t.workload.trace)
        self.config = cfg
        st = self.kernel_static = KernelStatic.from_config(cfg)
        T = st.T
        self.possible_agents = [f"tenant_{i}" for i in range(T)]
        self.agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self.bid_levels = np.array(cfg.arbiter.bid_levels, np.float64)
        self._hours = st.round_seconds / 3600.0
        # the budget is checked at the bid in these two mechanisms (at list price otherwise), so
        # the cheapest GPU-round is at the lowest bid that can win: in an auction, the lowest
        # level at or above the reserve
        if st.mechanism == AUCTION:
            pay_low = float(self.bid_levels[self.bid_levels >= st.reserve_price][0])
        elif st.mechanism == PROPORTIONAL:
            pay_low = float(self.bid_levels[0])
        else:
            pay_low = 1.0
        self._min_unit = st.list_price * pay_low * self._hours  # cheapest GPU-round each tenant can buy
        # masks of the static dimensions
        self._prec_legal = st.supported & ~(st.is_train[:, None] & catalog.WEIGHT_ONLY[None, :])  # (T, P)
        self.nvec = np.stack([
            np.concatenate(([m + 1, len(self.bid_levels)], np.full(catalog.N_GROUPS, catalog.N_PRECISIONS), [len(BATCH_LEVELS)]))
            for m in st.max_gpus
        ]).astype(np.int64)  # (T, 8)
        ones_bid = np.ones(len(self.bid_levels), np.int8)
        ones_batch = np.ones(len(BATCH_LEVELS), np.int8)
        self._static_masks = []
        self._gpu_range = [np.arange(m + 1) for m in st.max_gpus]
        self._full_gpu_masks = [np.ones(m + 1, np.int8) for m in st.max_gpus]
        for g in self._full_gpu_masks:
            g.setflags(write=False)
        for i in range(T):
            pm = self._prec_legal[i].astype(np.int8)
            parts = [ones_bid] + [pm] * catalog.N_GROUPS + [ones_batch]
            for p in parts:
                p.setflags(write=False)
            self._static_masks.append(parts)
        # spaces, built once
        self.action_spaces = {a: gymnasium.spaces.MultiDiscrete(self.nvec[i]) for i, a in enumerate(self.possible_agents)}
        if self.obs_mode == "flat":
            self.observation_spaces = {a: gymnasium.spaces.Box(0.0, 1.0, (N_OBS,), np.float32) for a in self.possible_agents}
        else:
            self.observation_spaces = {
                a: gymnasium.spaces.Dict({
                    "observation": gymnasium.spaces.Box(0.0, 1.0, (N_OBS,), np.float32),
                    "action_mask": gymnasium.spaces.Tuple([gymnasium.spaces.MultiBinary(int(n)) for n in self.nvec[i]]),
                })
                for i, a in enumerate(self.possible_agents)
            }
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (T * N_OBS + st.K + st.n_racks,), np.float32)
        # static observation features
        pool_cap = st.pool_capacity[st.pool].astype(np.float64)
        static = np.zeros((T, N_OBS))
        static[:, _O["is_serve"]] = ~st.is_train
        static[:, _O["fp8"]] = st.supported[:, catalog.PRECISION_CODE["fp8"]]
        static[:, _O["gpu_memory"]] = np.minimum(st.mem_bytes / cfg.cluster.usable_memory_fraction / 141e9, 1.0)
        static[:, _O["model_size"]] = np.clip(np.log10(st.params.sum(-1)) / 12.0, 0.0, 1.0)
        static[:, _O["priority"]] = st.priority / (st.priority + 1.0)
        static[:, _O["max_gpus"]] = st.max_gpus / pool_cap
        static[:, _O["burn_rate"]] = _squash(st.max_gpus * st.list_price * self._hours / st.spend_norm, 1.0)
        self._static_obs = static
        self._mean_arrivals = np.maximum(st.arrival_rate * st.round_seconds, 1.0)
        self._node_of_pool = st.node_pool[None, :] == np.arange(len(st.pools))[:, None]  # (Q, K)
        # the documented default action (difference_default, Themis) and the tracker
        #: (T, 8) action indices and decoded kernel actions of each tenant's default action
        self.default_action_index, self.default_actions = self._default_action()
        #: (T,) Themis T_independent of each trainer's job, in rounds (inf for servers)
        self.rounds_alone = self._job_rounds_alone()
        self._schemes = REWARD_SCHEMES if cfg.reward.compute_all else (cfg.reward.scheme,)
        self.credit_seconds = 0.0  # wall time in the credit engine, over the env's lifetime
        self.steps_taken = 0
        self.tracker = FairnessTracker(
            cfg.reward, st.pool, st.pool_capacity, st.max_gpus, lowest_precision(st.supported, st.is_train), st.round_seconds,
        )

    def _default_action(self) -> tuple[np.ndarray, Actions]:
        """Each tenant's default action ``c_i`` (docs/environment.md): its static fair share of
        its pool (capacity // tenants on the pool), raised to the fewest GPUs that hold its
        model if the share cannot, within [1, max_gpus]; the bid level nearest list price; BF16
        on every group; and the largest batch level that fits there."""
        st = self.kernel_static
        T = st.T
        per_pool = np.bincount(st.pool, minlength=len(st.pools))
        share = st.pool_capacity[st.pool] // per_pool[st.pool]
        bid_idx = int(np.argmin(np.abs(self.bid_levels - 1.0)))
        bf16 = catalog.PRECISION_CODE["bf16"]
        prec = np.where(self._prec_legal[:, bf16], bf16, catalog.PRECISION_CODE["fp32"])
        precision = np.repeat(prec[:, None], catalog.N_GROUPS, axis=1).astype(np.int64)
        terms = cost.tenant_terms(st, precision[None], project=not st.veto)
        # the fewest GPUs that hold one sequence, for models too big for the fair share
        counts = np.arange(1, int(st.max_gpus.max()) + 1)[:, None] * np.ones((1, T), np.int64)
        holds = cost.largest_fitting_batch(terms, counts, st.mem_bytes) >= 1
        least = np.where(holds.any(0), np.argmax(holds, axis=0) + 1, st.max_gpus)
        gpus = np.clip(np.maximum(share, least), 1, st.max_gpus).astype(np.int64)
        fit = cost.largest_fitting_batch(terms, gpus[None], st.mem_bytes)[0]
        level = np.maximum(np.searchsorted(BATCH_LEVELS, fit, side="right") - 1, 0)
        idx = np.zeros((T, N_ACT), np.int64)
        idx[:, 0] = gpus
        idx[:, 1] = bid_idx
        idx[:, _PREC] = precision
        idx[:, -1] = level
        return idx, self._decode(idx)

    def _job_rounds_alone(self) -> np.ndarray:
        """Themis ``T_independent`` in rounds: a trainer's job alone on its default action from
        a standing start (the first round loses ``restart_seconds``, as every job's first round
        does in the shared run), nodes at ambient. inf where it cannot run."""
        st = self.kernel_static
        T = st.T
        d = self.default_actions
        state = RoundState.initial(st)
        state = RoundState(prev_alloc=d.gpus.copy(), temp_c=state.temp_c, queue=state.queue, remaining_tokens=np.full(T, np.inf), budget_left=np.full(T, 1e300))
        out = evaluate(st, d, state, Draws.expected(st), np.eye(T, dtype=bool), validate=False)
        rate = np.diagonal(out.tokens_per_s)
        with np.errstate(divide="ignore"):
            seconds = st.restart_seconds + st.job_tokens / rate
            return np.where(st.is_train & (rate > 0), seconds / st.round_seconds, np.inf)

    def _decode(self, idx: np.ndarray) -> Actions:
        return Actions(
            gpus=idx[:, 0].copy(),
            bid=self.bid_levels[idx[:, 1]],
            precision=idx[:, _PREC].copy(),
            batch=BATCH_LEVELS[idx[:, -1]],
        )

    # --- PettingZoo API ---------------------------------------------------------------------------

    @property
    def max_cycles(self) -> int:
        return self.config.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        """Changing the episode length rebuilds the scenario (utility is normalized per round of
        the episode budget, so it depends on ``max_cycles``)."""
        if value != self.config.max_cycles:
            import dataclasses

            self._build(dataclasses.replace(self.config, max_cycles=value))
            self._ready = False

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[self._known(agent)]

    def action_space(self, agent: str) -> gymnasium.spaces.MultiDiscrete:
        return self.action_spaces[self._known(agent)]

    def _known(self, agent) -> str:
        if agent not in self.agent_index:
            raise KeyError(f"unknown agent {agent!r}: expected one of {', '.join(self.possible_agents)}")
        return agent

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"reset: seed = {seed!r}: expected None or a non-negative integer")
        if seed is not None or self._seed_seq is None:
            self._seed_seq = np.random.SeedSequence(seed)
            env_ss, credit_ss = self._seed_seq.spawn(2)
            self._rng = np.random.default_rng(env_ss)
            self._credit_rng = np.random.default_rng(credit_ss)
        cfg, st = self.config, self.kernel_static
        T, n = st.T, cfg.max_cycles
        rng = self._rng
        cl = cfg.cluster
        # arrival schedules for the whole episode: serving requests and training jobs per round
        # one on/off burst chain shared by every tenant with burst_shared (the first such
        # tenant's parameters), drawn always so the stream does not depend on the flags
        wl = next((t.workload for t in cfg.tenants if t.workload.burst_shared), cfg.tenants[0].workload)
        shared = burst_chain(n, wl.burst_fraction, wl.burst_rounds, rng)
        sched = np.zeros((n, T))
        for i, t in enumerate(cfg.tenants):
            sched[:, i] = arrival_schedule(t.workload, t.kind, n, cl.round_seconds, rng, shared)
        self._requests = np.where(st.is_train, 0.0, sched)
        self._jobs = np.where(st.is_train, sched, 0.0)
        future = np.cumsum(sched[::-1], axis=0)[::-1]  # future[t] = arrivals in rounds t..n-1
        self._future = np.vstack([future, np.zeros((1, T))])
        self._state = RoundState.initial(st)
        self._backlog = [deque() for _ in range(T)]  # trainers: arrival round of each queued job
        self._backlog_n = np.zeros(T, np.int64)
        self._job_born = np.full(T, -1, np.int64)  # arrival round of the current job
        self._has_job = st.is_train.copy()
        self._live = np.ones(T, bool)
        self._round = 0
        self._last = None
        self._last_credit = None
        self._fair = np.zeros(T)
        self._return = np.zeros(T)
        self._utility_sum = np.zeros(T)
        self._rounds = np.zeros(T, np.int64)
        self._engine = CreditEngine(st, cfg.reward, self._schemes, self._credit_rng)
        self.tracker.reset()
        self.agents = self.possible_agents[:]
        self._ready = True
        self._fair = self.tracker.fair(self._live, self._has_work())
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations = self._observations(obs_m, masks, self.agents)
        infos = {a: {"action_mask": masks[self.agent_index[a]]} for a in self.agents}
        if self.render_mode == "human":
            self.render()
        return observations, infos

    def step(self, actions: dict):
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset(seed=...) first")
        if not self.agents:
            raise RuntimeError("step() called after every agent finished: call env.reset() to start a new episode")
        idx, illegal = self._validate(actions)
        st, cfg = self.kernel_static, self.config
        T, t = st.T, self._round
        live = self._live.copy()
        acts = self._decode(idx)
        arrivals = np.where(live, self._requests[t], 0.0)
        draws = Draws(arrivals=arrivals, tiebreak=self._rng.random(T))
        has_work = self._has_work(arrivals)
        t0 = perf_counter()
        credit = self._engine.compute(acts, self._state, draws, live, self.default_actions)
        self.credit_seconds += perf_counter() - t0
        self.steps_taken += 1
        o = credit.outcome
        # fairness of this round
        fair = self.tracker.fair(live, has_work)
        starved, low, hoard = self.tracker.step(live, has_work, o.requested, o.alloc, acts.gpus, acts.precision, fair)
        self._engine.apply_starvation(credit, live, starved)
        degenerate = low | hoard
        raw = credit.rewards[cfg.reward.scheme]
        reward = np.where(degenerate, np.minimum(raw, cfg.reward.degenerate_floor), raw)  # never a gain
        self.tracker.count(live, o.oom, o.vetoed, o.power_throttled | o.thermal_throttled, degenerate)
        self.tracker.welfare_sum += credit.welfare
        self.tracker.serve_round(t, live & ~st.is_train, arrivals, o.served)
        # carry the state over, then the job streams
        nxt = o.next_state()
        remaining = np.array(nxt.remaining_tokens, np.float64)
        self._state = RoundState(
            prev_alloc=np.array(nxt.prev_alloc), temp_c=np.array(nxt.temp_c), queue=np.array(nxt.queue),
            remaining_tokens=remaining, budget_left=np.array(nxt.budget_left),
        )
        self._advance_jobs(t, live, remaining)
        self._round = t + 1
        self._return += np.where(live, reward, 0.0)
        self._utility_sum += np.where(live, o.utility, 0.0)
        self._rounds += live
        self._last, self._last_credit, self._fair = o, credit, fair
        # who leaves
        broke = self._state.budget_left < self._min_unit
        done = ~self._has_work(upcoming=True)
        # the schedule ends at the horizon: at max_cycles running out of it is truncation
        terminated = live & (broke | (done & (self._round < cfg.max_cycles)))
        truncated = live & ~terminated & (self._round >= cfg.max_cycles)
        finished = terminated | truncated
        agents = self.agents
        obs_m = self._obs_matrix()
        masks = self._masks()
        observations = self._observations(obs_m, masks, agents)
        schemes = tuple(credit.rewards)
        vals = {s: credit.rewards[s].tolist() for s in schemes}
        rew_l, u_l, alloc_l, req_l = reward.tolist(), o.utility.tolist(), o.alloc.tolist(), o.requested.tolist()
        flags = {k: getattr(o, k).tolist() for k in ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted")}
        thr_l = (o.power_throttled | o.thermal_throttled).tolist()
        starved_l, streak_l, fair_l = starved.tolist(), self.tracker.streak.tolist(), fair.tolist()
        low_l, hoard_l = low.tolist(), hoard.tolist()
        welfare = credit.welfare
        rewards, terms, truncs, infos = {}, {}, {}, {}
        for a in agents:
            i = self.agent_index[a]
            rewards[a] = rew_l[i]
            terms[a] = bool(terminated[i])
            truncs[a] = bool(truncated[i])
            info = {
                "rewards": {s: vals[s][i] for s in schemes},
                "utility": u_l[i],
                "welfare": welfare,
                "requested": req_l[i],
                "alloc": alloc_l[i],
                "throttled": thr_l[i],
                "starved": starved_l[i],
                "starvation_streak": streak_l[i],
                "fair_share": fair_l[i],
                "degenerate": [r for r, f in (("lowest_precision", low_l[i]), ("hoarding", hoard_l[i])) if f],
                "illegal": illegal.get(i, []),
                "action_mask": masks[i],
            }
            for k, v in flags.items():
                info[k] = v[i]
            if finished[i]:
                info["episode"] = self.tracker.report(i, self._round, self._return[i], self._utility_sum[i], int(self._rounds[i]), self._backlog[i])
            infos[a] = info
        self._live &= ~finished
        self.agents = [a for a in agents if not finished[self.agent_index[a]]]
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terms, truncs, infos

    # --- internals --------------------------------------------------------------------------------

    def _has_work(self, arrivals: np.ndarray | None = None, upcoming: bool = False) -> np.ndarray:
        """Trainers: a job in progress or queued. Servers: requests queued (plus ``arrivals``).
        ``upcoming`` also counts arrivals still to come this episode."""
        st = self.kernel_static
        train = self._has_job | (self._backlog_n > 0)
        serve = self._state.queue + (0.0 if arrivals is None else arrivals) > 0
        work = np.where(st.is_train, train, serve)
        if upcoming:
            work |= self._future[min(self._round, self.config.max_cycles)] > 0
        return work

    def _advance_jobs(self, t: int, live: np.ndarray, remaining: np.ndarray) -> None:
        """Trainers: record finished jobs, queue this round's arrivals, start the next job."""
        st = self.kernel_static
        jobs = self._jobs[t]
        finished = live & self._has_job & (remaining <= 0)
        for i in np.flatnonzero(finished | ((jobs > 0) & live)):
            if finished[i]:
                self.tracker.job_finished(i, t - self._job_born[i], self.rounds_alone[i])
                self._has_job[i] = False
            self._backlog[i].extend([t] * int(jobs[i]))
            self._backlog_n[i] += int(jobs[i])
            if not self._has_job[i] and self._backlog[i]:
                born = self._backlog[i].popleft()
                self._backlog_n[i] -= 1
                self._job_born[i] = born
                self._has_job[i] = True
                remaining[i] = st.job_tokens[i]
                self.tracker.job_started(i, t + 1 - (born + 1))

    def _validate(self, actions) -> tuple[np.ndarray, dict]:
        """Check every action before anything changes; return (T, 8) indices and the masked
        (illegal) fields per tenant."""
        if not isinstance(actions, dict):
            raise ActionError("actions", "type", type(actions).__name__, "a dict {agent: action}")
        T = self.kernel_static.T
        idx = np.zeros((T, N_ACT), np.int64)
        live = set(self.agents)
        if len(actions) == len(live) and live.issuperset(actions):
            # fast path: integer arrays of the right shape, all in range
            vals = list(actions.values())
            if all(type(v) is np.ndarray and v.dtype.kind in "iu" and v.shape == (N_ACT,) for v in vals):
                rows = [self.agent_index[a] for a in actions]
                arr = np.stack(vals)
                if not ((arr < 0) | (arr >= self.nvec[rows])).any():
                    idx[rows] = arr
                    return idx, self._illegal(idx)
        for a, act in actions.items():
            idx[self.agent_index[a] if a in self.agent_index else 0] = self.check_action(a, act, live)
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ActionError(missing[0], "action", None, f"an action for every live agent; missing {', '.join(missing)}")
        return idx, self._illegal(idx)

    def check_action(self, a, act, live: set | None = None) -> np.ndarray:
        """Validate one agent's action; return its 8 indices or raise :class:`ActionError`.
        Masked choices raise too when ``illegal_action="raise"``. Changes nothing."""
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset(seed=...) first")
        live = set(self.agents) if live is None else live
        if a not in self.agent_index:
            raise ActionError(a, "agent", a, f"a live agent, one of {', '.join(self.agents)}")
        if a not in live:
            raise ActionError(a, "agent", a, f"a live agent; {a} has finished (PettingZoo: finished agents take no action). Live: {', '.join(self.agents)}")
        i = self.agent_index[a]
        arr = np.asarray(act) if act is not None else None
        if arr is None or arr.dtype == object or arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ActionError(a, "action", act, f"an integer array of shape ({N_ACT},) from action_space('{a}')")
        if arr.shape != (N_ACT,):
            raise ActionError(a, "action.shape", arr.shape, f"({N_ACT},): {', '.join(ACTION_FIELDS)}")
        if np.issubdtype(arr.dtype, np.floating):
            for k in range(N_ACT):
                if not np.isfinite(arr[k]) or arr[k] != np.round(arr[k]):
                    raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", float(arr[k]), "an integer")
        nv = self.nvec[i]
        bad = (arr < 0) | (arr >= nv)
        if bad.any():
            k = int(np.argmax(bad))
            raise ActionError(a, f"action[{k}] ({ACTION_FIELDS[k]})", arr[k].item(), f"an integer in [0, {nv[k] - 1}]")
        out = arr.astype(np.int64)
        if self.illegal_action == "raise":
            one = np.zeros((self.kernel_static.T, N_ACT), np.int64)
            one[i] = out
            self._illegal(one, only=i)
        return out

    def _illegal(self, idx: np.ndarray, only: int | None = None) -> dict[int, list[str]]:
        """Masked choices per tenant (veto mode), or an ActionError (raise mode)."""
        T = self.kernel_static.T
        illegal: dict[int, list[str]] = {}
        live = self._live if only is None else (np.arange(T) == only)
        prec_bad = ~self._prec_legal[np.arange(T)[:, None], idx[:, _PREC]]  # (T, G)
        gpus_bad = idx[:, 0] * self._min_unit > self._state.budget_left
        for i in np.flatnonzero(live & (prec_bad.any(1) | gpus_bad)):
            fields_ = ([ACTION_FIELDS[0]] if gpus_bad[i] else []) + [ACTION_FIELDS[2 + g] for g in np.flatnonzero(prec_bad[i])]
            if self.illegal_action == "raise":
                a = self.possible_agents[i]
                k = ACTION_FIELDS.index(fields_[0])
                raise ActionError(a, f"action[{k}] ({fields_[0]})", int(idx[i, k]), "a choice the action mask allows (see infos[agent]['action_mask'])")
            illegal[i] = fields_
        return illegal

    def _masks(self) -> list[tuple[np.ndarray, ...]]:
        st = self.kernel_static
        afford = np.floor(self._state.budget_left / self._min_unit)
        out = []
        for i in range(st.T):
            if afford[i] >= st.max_gpus[i]:
                g = self._full_gpu_masks[i]
            else:
                g = (self._gpu_range[i] <= afford[i]).astype(np.int8)
                g.setflags(write=False)
            out.append((g, *self._static_masks[i]))
        return out

    def _obs_matrix(self) -> np.ndarray:
        st, cfg = self.kernel_static, self.config
        m = self._static_obs.copy()
        s = self._state
        m[:, _O["alive"]] = self._live
        m[:, _O["round"]] = self._round / cfg.max_cycles
        m[:, _O["budget_left"]] = s.budget_left / st.budget
        jt = np.where(st.job_tokens > 0, st.job_tokens, 1.0)
        m[:, _O["job_left"]] = np.where(st.is_train & self._has_job, s.remaining_tokens / jt, 0.0)
        m[:, _O["jobs_waiting"]] = _squash(self._backlog_n.astype(np.float64), 1.0)
        m[:, _O["queue"]] = np.where(st.is_train, 0.0, _squash(s.queue, self._mean_arrivals))
        m[:, _O["held"]] = s.prev_alloc / st.max_gpus
        m[:, _O["fair_share"]] = self._fair / st.max_gpus
        m[:, _O["alive_share"]] = self._live.mean()
        o = self._last
        Q = len(st.pools)
        if o is not None:
            t = self._round - 1
            m[:, _O["arrivals"]] = np.where(st.is_train, 0.0, _squash(self._requests[t], self._mean_arrivals))
            m[:, _O["granted"]] = np.where(o.requested > 0, o.alloc / np.maximum(o.requested, 1), 1.0)
            top = self.bid_levels[-1]
            m[:, _O["price"]] = np.where(o.alloc > 0, o.price / (st.list_price * top), 0.0)
            m[:, _O["value"]] = _squash(o.value, 1.0)
            m[:, _O["utility"]] = 0.5 + 0.5 * np.tanh(o.utility)
            m[:, _O["slo"]] = np.where(st.is_train, 0.0, o.slo_attainment)
            m[:, _O["oom"]] = o.oom
            m[:, _O["vetoed"]] = o.vetoed
            m[:, _O["unsafe"]] = o.unsafe_numerics
            m[:, _O["throttle"]] = np.where(o.alloc > 0, 1.0 - np.where(o.throttle > 0, o.throttle, 1.0), 0.0)
            m[:, _O["restarted"]] = o.restarted
            m[:, _O["memory"]] = np.where(o.alloc > 0, o.mem_total / o.mem_capacity, 0.0)
            m[:, _O["starvation"]] = self.tracker.streak / cfg.reward.starvation_rounds
            alloc_q = np.bincount(st.pool, weights=o.alloc, minlength=Q)
            req_q = np.bincount(st.pool, weights=o.requested, minlength=Q)
            paid_q = np.bincount(st.pool, weights=o.alloc * o.price / st.list_price, minlength=Q)
            cap = st.pool_capacity.astype(np.float64)
            m[:, _O["pool_free"]] = ((cap - alloc_q) / cap)[st.pool]
            m[:, _O["pool_demand"]] = _squash(req_q / cap, 1.0)[st.pool]
            m[:, _O["pool_price"]] = (paid_q / np.maximum(alloc_q, 1) / top)[st.pool]
            m[:, _O["rack_power"]] = (o.rack_power_w / st.rack_power_cap_w).max()
        else:
            m[:, _O["granted"]] = 1.0
            m[:, _O["utility"]] = 0.5
            m[:, _O["pool_free"]] = 1.0
        hot = np.where(self._node_of_pool, s.temp_c[None, :], -np.inf).max(1)  # (Q,)
        m[:, _O["temperature"]] = ((hot - st.ambient_c) / (st.critical_temp_c - st.ambient_c))[st.pool]
        np.clip(m, 0.0, 1.0, out=m)
        return m.astype(np.float32)

    def _observations(self, obs_m: np.ndarray, masks, agents) -> dict:
        if self.obs_mode == "flat":
            return {a: obs_m[self.agent_index[a]] for a in agents}
        return {a: {"observation": obs_m[self.agent_index[a]], "action_mask": masks[self.agent_index[a]]} for a in agents}

    # --- extras ------------------------------------------------------------------------------------

    def action_mask(self, agent: str) -> tuple[np.ndarray, ...]:
        """The current action mask of ``agent``: a tuple of 8 int8 arrays (see module docstring)."""
        self._known(agent)
        if not self._ready:
            raise RuntimeError("action_mask() called before reset(): call env.reset(seed=...) first")
        return self._masks()[self.agent_index[agent]]

    def state(self) -> np.ndarray:
        """The global view for centralized critics: every tenant's observation row, as it would
        be observed now (finished tenants' rows have ``alive`` = 0 and hold nothing), then each
        node's temperature ``(T - ambient) / (critical - ambient)`` and each rack's power / cap,
        all in [0, 1]."""
        if not self._ready:
            raise RuntimeError("state() called before reset(): call env.reset(seed=...) first")
        st = self.kernel_static
        temp = (self._state.temp_c - st.ambient_c) / (st.critical_temp_c - st.ambient_c)
        rack = self._last.rack_power_w / st.rack_power_cap_w if self._last is not None else np.zeros(st.n_racks)
        out = np.concatenate([self._obs_matrix().ravel(), np.clip(temp, 0, 1), np.clip(rack, 0, 1)]).astype(np.float32)
        return out

    @property
    def round(self) -> int:
        """Rounds played in this episode."""
        return self._round

    @property
    def last_outcome(self):
        """The kernel's :class:`~fleet_marl.kernel.Outcome` of the last round (None before the first step)."""
        return self._last

    def render(self):
        if not self._ready:
            raise RuntimeError("render() called before reset(): call env.reset(seed=...) first")
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'rgb_array' or 'human'.")
            return None
        if self.render_mode == "rgb_array":
            from fleet_marl.render import render_rgb

            return render_rgb(self)
        from fleet_marl.render import render_ansi

        text = render_ansi(self)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        # nothing to import unless a frame was drawn (close() also runs at interpreter exit)
        self._figure = None


def parallel_env(**config: Any) -> FleetParallelEnv:
    """The ParallelEnv: ``parallel_env(task="easy", reward_scheme="difference", obs_mode="dict")``."""
    return FleetParallelEnv(**config)


class _FleetAEC(parallel_to_aec_wrapper):
    """PettingZoo's parallel-to-AEC conversion, with each action checked on its own turn: a
    bad action is an :class:`ActionError` naming that agent, and is not stored, so the agent
    can try again."""

    def step(self, action):
        agent = self.agent_selection
        if action is not None and not (self.terminations.get(agent) or self.truncations.get(agent)):
            self.env.check_action(agent, action)
        super().step(action)


def env(**config: Any):
    """The AEC form (PettingZoo's ``parallel_to_aec`` with its order-enforcing wrapper, plus a
    check of each action on its agent's turn)."""
    return OrderEnforcingWrapper(_FleetAEC(FleetParallelEnv(**config)))


raw_env = FleetParallelEnv

__all__ = ["ACTION_FIELDS", "ActionError", "BATCH_LEVELS", "FleetParallelEnv", "OBS_FIELDS", "env", "parallel_env", "raw_env"]

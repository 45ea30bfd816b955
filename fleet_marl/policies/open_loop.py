"""``open_loop``: a policy that sees only the round index, and the search that finds its table.

:class:`OpenLoopPolicy` plays a table ``action[round][tenant]`` (``(R, T, 8)`` action indices,
``R`` the scenario's ``max_cycles``): in round ``r`` every live tenant plays row ``r`` whatever
it observes (past the table's end, its last row). It is the baseline a benchmark must beat by
more than noise (SMACv2's point: a policy that sees only the timestep should lose); if it does
not, the task does not test what it claims.

:func:`search` finds a table by coordinate ascent over whole episodes on a set of seeds,
maximizing the mean episode welfare (``sum_t G_t``). The rounds are cut into ``levels`` of
contiguous blocks, coarse to fine (the default ``(1, 4)``: the whole episode, then quarters; then
sixteenths, with ``levels=(1, 4, 16)``); at each level, for each block and tenant in turn, every single change of one
action field of that tenant over that block (one value of the field for all the block's rounds)
is one episode per seed of a batched vector env (:class:`~fleet_marl.environment.FleetVectorEnv`,
bit for bit the ParallelEnv's episodes), and the best change is kept when it raises the mean
welfare; the same block and tenant are searched again until no change does. ``sweeps`` passes
over the blocks per level, or fewer when a pass changes nothing. The search starts from the
best of its ``starts`` (default: each tenant's default action, ``env.default_action_index``,
every round). ``budget`` bounds its cost in tenant-rounds played (episodes x tenants x rounds,
what a vector env's step costs grows with): the search stops before a batch that would pass it,
so its cost does not grow with the team size. It draws no random numbers and reads no clock:
the same seeds, starts, levels and budget give the same table.

:func:`search_scenarios` is the same search over several scenarios of one set of shapes (a suite
task's train scenarios, :mod:`fleet_marl.suite`), each played from its own seed, one cluster per
scenario and table in a :class:`~fleet_marl.environment.ScenarioVectorEnv`: the one table that
maximizes the mean welfare over them.

Only the GPU count of a tenant's action is masked by its state (what its budget affords); the
search tries every value of every other field that the tenant's static mask allows, and a table
that asks for GPUs a tenant cannot afford is vetoed or capped by the env, as any policy's would be.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleet_marl.environment import FleetVectorEnv
from fleet_marl.environment.scenario_vector import ScenarioVectorEnv
from fleet_marl.environment.state import CoreStatic
from fleet_marl.policies.base import N_ACT, BasePolicy

#: The block counts of the search's levels, coarse to fine (rounds cut into that many blocks).
#: Sixteenths as well, ``(1, 4, 16)``, cost two to five times the CPU for as good a table out of
#: sample on tiny, easy and trace (``experiments/open_loop_reference.py --levels``; docs/policies.md).
LEVELS = (1, 4)
#: Passes over the blocks per level at most (fewer when a pass changes nothing).
SWEEPS = 2
#: The smallest rise of the mean welfare that counts as a move (float noise is not one).
TOL = 1e-9
#: What an open-loop table's JSON file says it is (``fleet-marl open-loop --out``).
KIND = "fleet_marl.open_loop"


class OpenLoopPolicy(BasePolicy):
    """Plays ``table[round, tenant]`` (``(R, T, 8)`` action indices) whatever it observes.

    ``table`` is checked against the env: ``T`` its tenants, every index inside the tenant's
    action space (a ``ValueError`` names the round, tenant and field otherwise)."""

    name = "open_loop"

    def __init__(self, env, table) -> None:
        super().__init__(env)
        self.table = check_table(table, self.env.nvec)

    def act_one(self, observation, agent: str, info: dict | None = None) -> np.ndarray:
        r = min(int(self.env.round), len(self.table) - 1)
        return self.table[r, self.env.agent_index[agent]].copy()

    @classmethod
    def work(cls, config) -> int:
        return 0  # a table look-up: no kernel call

    def to_dict(self, **meta) -> dict:
        """The JSON form :meth:`from_dict` and the ``open_loop`` loader read (``meta`` is kept)."""
        return {"kind": KIND, **meta, "nvec": np.asarray(self.env.nvec).tolist(), "table": self.table.tolist()}

    @classmethod
    def from_dict(cls, env, d: dict, source: str = "open-loop table") -> OpenLoopPolicy:
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise ValueError(f"{source}: kind = {d.get('kind') if isinstance(d, dict) else type(d).__name__!r}: expected {KIND!r}")
        return cls(env, d.get("table"))

    @classmethod
    def from_file(cls, env, path) -> OpenLoopPolicy:
        """The policy of a JSON file that ``fleet-marl open-loop --out`` wrote."""
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read an open-loop table: {exc}") from exc
        return cls.from_dict(env, d, str(path))


def check_table(table, nvec: np.ndarray) -> np.ndarray:
    """``table`` as a read-only ``(R, T, 8)`` int64 array, every index inside ``nvec`` (T, 8)."""
    try:
        t = np.asarray(table)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"open-loop table: {exc}; expected an (R, T, 8) array of action indices") from None
    T = len(nvec)
    if t.ndim != 3 or t.shape[1:] != (T, N_ACT) or t.shape[0] < 1:
        raise ValueError(f"open-loop table: shape = {t.shape}: expected (R, {T}, {N_ACT}) (rounds, tenants, action fields), R >= 1")
    if t.dtype.kind not in "iu" and not (t.dtype.kind == "f" and np.all(t == np.round(t))):
        raise ValueError(f"open-loop table: dtype = {t.dtype}: expected integer action indices")
    t = t.astype(np.int64)
    bad = np.argwhere((t < 0) | (t >= np.asarray(nvec)[None]))
    if bad.size:
        r, i, k = (int(x) for x in bad[0])
        raise ValueError(f"open-loop table: round {r}, tenant_{i}, field {k} = {t[r, i, k]}: expected an index in [0, {nvec[i][k] - 1}]")
    t.setflags(write=False)
    return t


class Episodes:
    """Whole episodes of candidate tables on fixed seeds, in one vector env per batch size.

    ``config`` is a ``FleetConfig`` (``env.config``); welfare does not depend on the reward
    scheme, so the env computes the cheapest one (``global``)."""

    def __init__(self, config, seeds: Sequence[int]):
        self.config, self.seeds = config, [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("open-loop search: seeds = []: expected at least one seed")
        self.rounds = int(config.max_cycles)
        self._envs: dict[int, FleetVectorEnv | ScenarioVectorEnv] = {}
        self.played = 0  # episodes played so far
        self.tenant_rounds = 0  # tenant-rounds played so far (the budget's unit)

    def env(self, n: int) -> FleetVectorEnv | ScenarioVectorEnv:
        if n not in self._envs:
            self._envs[n] = FleetVectorEnv(n, config=self.config, reward_scheme="global", compute_all=False)
        return self._envs[n]

    def __call__(self, tables: np.ndarray) -> np.ndarray:
        """(C, S) each table's (C, R, T, 8) episode welfare on each seed."""
        C, S = len(tables), len(self.seeds)
        venv = self.env(C * S)
        venv.reset(seed=self.seeds * C)
        welfare = _play(venv, np.repeat(tables, S, axis=0), self.rounds)  # cluster c * S + s: table c on seed s
        self.played += C * S
        self.tenant_rounds += self.cost(C)
        return welfare.reshape(C, S)

    def cost(self, n: int) -> int:
        """The tenant-rounds ``n`` tables cost on every seed."""
        return n * len(self.seeds) * self.rounds * len(self.config.tenants)

    def allowed(self) -> np.ndarray:
        """(T, mask size) every value each tenant's static mask allows (GPUs: 0 .. the cap)."""
        return self.env(1).all_allowed


class ScenarioEpisodes(Episodes):
    """Whole episodes of candidate tables on several scenarios, scenario ``k`` (``configs[k]``, a
    ``FleetConfig`` or its dict, all of one set of shapes and ``max_cycles``) reset with
    ``seeds[k]``: one :class:`~fleet_marl.environment.ScenarioVectorEnv` per batch size, cluster
    ``k * C + c`` table ``c`` on scenario ``k``. A value is allowed where every scenario's static
    mask allows it."""

    def __init__(self, configs: Sequence, seeds: Sequence[int]):
        self.configs = list(configs)
        if len(self.configs) != len(seeds):
            raise ValueError(
                f"open-loop search: {len(self.configs)} scenario configs and {len(seeds)} seeds: expected one seed per scenario"
            )
        probe = ScenarioVectorEnv(len(self.configs), self.configs, reward_scheme="global", compute_all=False)
        super().__init__(probe.config, seeds)
        if len({int(e.config.max_cycles) for e in probe.envs}) != 1:
            raise ValueError("open-loop search: the scenarios' max_cycles differ: expected one episode length")
        self._envs[1] = probe

    def env(self, n: int) -> FleetVectorEnv | ScenarioVectorEnv:
        if n not in self._envs:
            self._envs[n] = ScenarioVectorEnv(n * len(self.configs), self.configs, reward_scheme="global", compute_all=False)
        return self._envs[n]

    def __call__(self, tables: np.ndarray) -> np.ndarray:
        """(C, K) each table's (C, R, T, 8) episode welfare on each scenario."""
        C, K = len(tables), len(self.seeds)
        venv = self.env(C)
        venv.reset(seed=[s for s in self.seeds for _ in range(C)])
        acts = np.tile(tables, (K, 1, 1, 1))  # cluster k * C + c: table c on scenario k
        welfare = _play(venv, acts, self.rounds)
        self.played += C * K
        self.tenant_rounds += self.cost(C)
        return welfare.reshape(K, C).T

    def allowed(self) -> np.ndarray:
        probe = self.env(1)
        assert isinstance(probe, ScenarioVectorEnv)
        return np.logical_and.reduce([e.all_allowed for e in probe.envs])


def _play(venv, acts: np.ndarray, rounds: int) -> np.ndarray:
    """(B,) each cluster's welfare over its first episode of ``acts[b]`` ((B, R, T, 8)), from a reset ``venv``."""
    B, R = len(acts), acts.shape[1]
    welfare, done = np.full(B, np.nan), np.zeros(B, bool)
    for k in range(rounds + 1):
        _, _, _, _, infos = venv.step(acts[:, min(k, R - 1)])
        if "episode" in infos:
            new = infos["_final"] & ~done
            welfare[new] = infos["episode"]["welfare"][new]
            done |= infos["_final"]
        if done.all():
            return welfare
    raise RuntimeError(f"open-loop search: an episode ran past max_cycles = {rounds}")


@dataclass
class SearchResult:
    """What :func:`search` found."""

    table: np.ndarray  # (R, T, 8) the best table
    welfare: np.ndarray  # (S,) its episode welfare on each seed
    seeds: list[int]
    start_welfare: float  # the mean welfare of the best start
    episodes: int  # episodes played by the search
    tenant_rounds: int  # tenant-rounds played (the budget's unit)
    exhausted: bool  # the budget stopped it before it converged
    moves: list[dict] = field(default_factory=list)  # each kept change: level, block, tenant, field, value, welfare

    @property
    def mean(self) -> float:
        return float(self.welfare.mean())


def blocks(rounds: int, n: int) -> list[tuple[int, int]]:
    """``rounds`` cut into ``min(n, rounds)`` contiguous blocks ``[lo, hi)`` of near-equal length."""
    edges = np.linspace(0, rounds, min(n, rounds) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def candidates(cur: np.ndarray, lo: int, hi: int, i: int, allowed: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Every single change of tenant ``i``'s fields over rounds ``[lo, hi)``: ``(tables (C, R, T, 8),
    [(field, value)])``; ``allowed[k]`` the values field ``k`` may take."""
    changes = [(k, int(v)) for k in range(N_ACT) for v in allowed[k] if not np.all(cur[lo:hi, i, k] == v)]
    tables = np.repeat(cur[None], len(changes), axis=0)
    for c, (k, v) in enumerate(changes):
        tables[c, lo:hi, i, k] = v
    return tables, changes


def search(
    config,
    seeds: Sequence[int],
    starts: Sequence[np.ndarray] | None = None,
    levels: Sequence[int] = LEVELS,
    sweeps: int = SWEEPS,
    budget: int | None = None,
    progress=None,
) -> SearchResult:
    """The coordinate ascent of the module docstring on ``config`` (a ``FleetConfig``) for
    ``seeds``, from the best of ``starts`` ((R, T, 8) tables; default each tenant's default
    action every round), playing at most ``budget`` tenant-rounds after the starts (None: no
    bound). ``progress``: a function of one line, told of every kept move."""
    return _ascend(lambda: Episodes(config, seeds), starts, levels, sweeps, budget, progress)


def search_scenarios(
    configs: Sequence,
    seeds: Sequence[int],
    starts: Sequence[np.ndarray] | None = None,
    levels: Sequence[int] = LEVELS,
    sweeps: int = SWEEPS,
    budget: int | None = None,
    progress=None,
) -> SearchResult:
    """:func:`search` over several scenarios: ``configs[k]`` played from ``seeds[k]`` (one
    episode each, :class:`ScenarioEpisodes`), maximizing the mean welfare over them (the
    result's ``welfare`` and ``seeds`` one per scenario); the default start is ``configs[0]``'s
    default actions."""
    return _ascend(lambda: ScenarioEpisodes(configs, seeds), starts, levels, sweeps, budget, progress)


def _ascend(make_play, starts, levels, sweeps, budget, progress) -> SearchResult:
    """The coordinate ascent on the episodes ``make_play()`` plays (:class:`Episodes`)."""
    if isinstance(sweeps, bool) or not isinstance(sweeps, int) or sweeps < 0:
        raise ValueError(f"open-loop search: sweeps = {sweeps!r}: expected an integer >= 0")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ValueError(f"open-loop search: budget = {budget!r}: expected None or an integer >= 0 (tenant-rounds)")
    if not levels or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in levels):
        raise ValueError(f"open-loop search: levels = {levels!r}: expected block counts, integers >= 1")
    play = make_play()
    probe = play.env(1)
    nvec, R = probe.nvec, play.rounds
    offsets, static = probe.mask_offsets, play.allowed()  # every field's static mask (GPUs: 0 .. the cap)
    allowed = [[np.flatnonzero(static[i, offsets[k] : offsets[k] + nvec[i, k]]) for k in range(N_ACT)] for i in range(len(nvec))]
    if starts is None:
        starts = [np.broadcast_to(CoreStatic.from_config(play.config).default_index, (R, *nvec.shape))]
    tables = np.stack([_fit(check_table(s, nvec), R) for s in starts])
    w = play(tables)
    b = int(np.argmax(w.mean(1)))
    cur, cur_w = tables[b].copy(), w[b]
    start, spent = float(cur_w.mean()), play.tenant_rounds
    moves: list[dict] = []
    exhausted = False
    for n in levels:
        for sweep in range(sweeps):
            moved = False
            for lo, hi in blocks(R, n):
                for i in range(len(nvec)):
                    while not exhausted:
                        cand, changes = candidates(cur, lo, hi, i, allowed[i])
                        if not changes:
                            break
                        if budget is not None and play.tenant_rounds - spent + play.cost(len(cand)) > budget:
                            exhausted = True
                            break
                        cw = play(cand)
                        c = int(np.argmax(cw.mean(1)))
                        if not cw[c].mean() > cur_w.mean() + TOL:
                            break
                        cur, cur_w, moved = cand[c], cw[c], True
                        k, v = changes[c]
                        moves.append(
                            {
                                "level": n,
                                "sweep": sweep,
                                "block": [lo, hi],
                                "tenant": i,
                                "field": k,
                                "value": v,
                                "welfare": float(cur_w.mean()),
                            }
                        )
                        if progress is not None:
                            progress(
                                f"blocks {n}, pass {sweep + 1}: rounds {lo}..{hi - 1}, tenant_{i} field {k} -> {v}: welfare {cur_w.mean():.2f}"
                            )
            if not moved or exhausted:
                break
    cur.setflags(write=False)
    return SearchResult(
        table=cur,
        welfare=cur_w,
        seeds=list(play.seeds),
        start_welfare=start,
        episodes=play.played,
        tenant_rounds=play.tenant_rounds,
        exhausted=exhausted,
        moves=moves,
    )


def _fit(t: np.ndarray, rounds: int) -> np.ndarray:
    """``t`` cut or extended (its last row repeated) to ``rounds`` rows."""
    if len(t) >= rounds:
        return np.array(t[:rounds])
    return np.concatenate([t, np.repeat(t[-1:], rounds - len(t), axis=0)])


class Recorder:
    """Wraps a policy and writes each round's actions into a table: ``(R, T, 8)``, each tenant's
    default action before its first act, its last action after it leaves (the env ignores it)."""

    def __init__(self, env, policy) -> None:
        self.env, self.policy = env, policy
        self.table = np.broadcast_to(np.asarray(env.default_action_index), (int(env.max_cycles), *np.shape(env.nvec))).copy()

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed)

    def act(self, observations: dict, infos: dict) -> dict:
        acts = self.policy.act(observations, infos)
        r = int(self.env.round)
        for a, x in acts.items():
            self.table[r:, self.env.agent_index[a]] = np.asarray(x)
        return acts


def most_frequent(actions: np.ndarray) -> np.ndarray:
    """The most frequent row of ``actions`` (N, 8) (ties: the first seen)."""
    rows = [tuple(int(v) for v in x) for x in actions]
    counts: dict[tuple, int] = {}
    for x in rows:
        counts[x] = counts.get(x, 0) + 1
    return np.array(max(counts, key=lambda x: (counts[x], -rows.index(x))), np.int64)


def modal(tables: np.ndarray, per_round: bool = False) -> np.ndarray:
    """A table from ``tables`` ((S, R, T, 8) episodes' tables, or one (R, T, 8)): each tenant's
    most frequent action over every seed and round, every round; with ``per_round``, each
    round's most frequent over the seeds."""
    t = np.asarray(tables)
    t = t[None] if t.ndim == 3 else t
    out = np.empty(t.shape[1:], np.int64)
    for i in range(t.shape[2]):
        if per_round:
            for r in range(t.shape[1]):
                out[r, i] = most_frequent(t[:, r, i])
        else:
            out[:, i] = most_frequent(t[:, :, i].reshape(-1, N_ACT))
    return out


__all__ = [
    "KIND",
    "LEVELS",
    "SWEEPS",
    "Episodes",
    "OpenLoopPolicy",
    "Recorder",
    "ScenarioEpisodes",
    "SearchResult",
    "blocks",
    "check_table",
    "modal",
    "most_frequent",
    "search",
    "search_scenarios",
]

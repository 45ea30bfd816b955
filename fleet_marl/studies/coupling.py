"""How much the tenants of a task couple, measured on the states a policy visits
(``fleet-marl coupling``; the command and the docs block are :mod:`fleet_marl.studies.coupling_command`).

A policy plays ``episodes`` episodes of the task (seeds ``seed``, ``seed + 1``, ...) in a
``FleetParallelEnv`` with every reward scheme computed (``compute_all=True``). Before each step
the round's visit is kept: the live tenants, the env's true :class:`~fleet_marl.kernel.RoundState`
(``env.round_state``), the draws the round will see (``env.round_draws()``), each tenant's action
mask and the policy's joint action. Three measures follow:

1. **Externality share**, over every live tenant-round of the episodes, from the env's infos
   (``reward_difference`` D and ``reward_local`` L): ``Σ|D − L| / Σ|L|``, and the share of
   tenant-rounds where ``|D − L| > 1 %`` of ``|L|``. D equals L exactly when no other tenant's
   utility depends on whether tenant i is there.
2. **Factoredness and learnability** (Agogino and Tumer, JAAMAS 2008) of ``local`` (``u_i``),
   ``global`` (``G = Σ_j u_j``, unshaped) and ``difference`` (``G(z) − G(z_−i)``), on ``states``
   visits per episode (evenly spaced over its rounds). From the visit's joint action ``z``:

   * *own changes*: tenant i takes each action ``c`` of its search space (below), the others
     keep theirs;
   * *others' changes*: ``samples`` joint actions in which every other live tenant takes an
     action drawn uniformly from its own search space, tenant i keeps its own.

   Factoredness of ``g_i`` is the fraction of the pairs ``(c, c')`` of own changes, over every
   visit and live tenant, for which ``sign(g_i(c) − g_i(c')) == sign(G(c) − G(c'))`` (a
   difference within ``1e-9 · max(1, |values|)`` counts as 0). Learnability of ``g_i`` is
   ``mean |g_i(c) − g_i(z)|`` over own changes divided by ``mean |g_i(z'_−i) − g_i(z)|`` over
   others' changes, both means taken over every (visit, tenant, change) together (a change
   within the tolerance above counts as 0); it is infinite (``None`` in JSON, ``∞`` in the
   table) when the others' changes never move ``g_i``.
3. **Selfish/team equilibrium ratio**, on the same visits: from the policy's joint action,
   each live tenant in index order replaces its action with the best of its search space given
   the others' (on its local reward ``u_i``, or on the welfare ``G``), keeping its own unless
   another is better by more than the tolerance above; sweeps repeat until one changes nothing
   or ``sweeps`` have run. The ratio is ``G`` after the selfish iteration over ``G`` after the
   team iteration, per visit whose team welfare is positive, averaged over those visits.

Every row of a visit is evaluated by the kernel (:func:`fleet_marl.kernel.evaluate`) with the
visit's state and draws, the others' actions fixed unless said otherwise: the same draws for
every comparison. The rows of one visit (or of one tenant's best responses over every visit)
go into one kernel call.

**The search space** of a live tenant at a visit: its action there (the policy's), nothing
(0 GPUs), and every combination of a GPU count from 1 to the most its action mask allows (its
``max_gpus`` and what its budget affords), a bid level among the lowest that can win, the middle
one and the highest, a precision map among BF16 everywhere, FP8 on the MLP, FP8 on attention and
the MLP, and (servers) INT8 or INT4 weights on attention and the MLP (each replaced by BF16 where
the mask forbids it; duplicates dropped), and a batch level among the largest that fits in memory
at that count and two below it (:class:`~fleet_marl.policies.FitTable`); counts at which nothing
fits are left out. The same space serves both iterations and the factoredness and learnability.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import fleet_marl
from fleet_marl.environment import scheme_rewards
from fleet_marl.environment.fields import decode_actions
from fleet_marl.environment.spaces import mask_dims
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.kernel import Draws, Outcome, RoundState, evaluate
from fleet_marl.policies import BasePolicy
from fleet_marl.policies.heuristics import EXPERT_MAP

#: The precision maps a search space tries (group -> precision; unnamed groups BF16).
MAPS: tuple[dict[str, str], ...] = (
    {},
    EXPERT_MAP,
    {**EXPERT_MAP, "attention": "fp8"},
    {**EXPERT_MAP, "attention": "int8", "mlp": "int8"},
    {**EXPERT_MAP, "attention": "int4", "mlp": "int4"},
)
#: Batch levels below the largest that fits which a search space also tries.
BATCH_STEPS = (0, 2)
#: A difference of rewards within this share of max(1, |values|) counts as no difference.
TOL = 1e-9
#: ``|D − L| > SHARE_THRESHOLD · |L|`` makes a tenant-round one where D and L differ.
SHARE_THRESHOLD = 0.01
SCHEMES = ("local", "global", "difference")
OBJECTIVES = ("local", "global")


@dataclass(frozen=True)
class Settings:
    """What a measurement ran with (defaults: the command's)."""

    episodes: int = 2
    seed: int = 0
    states: int = 10  # visits sampled per episode for the factoredness, learnability and equilibria
    samples: int = 16  # others' changes per visit and tenant (learnability)
    sweeps: int = 10  # the most best-response sweeps of an iteration


@dataclass
class Visit:
    """One round a policy played: who was live, the true state and draws, the masks, its action."""

    live: np.ndarray  # (T,) bool
    state: RoundState
    draws: Draws
    masks: dict[int, tuple]  # tenant -> its action mask (8 arrays)
    action: np.ndarray  # (T, 8) the policy's action indices (0 for tenants not live)
    welfare: float = float("nan")  # the round's welfare G, as the env reported it


def _copy(obj):
    return type(obj)(**{f.name: None if getattr(obj, f.name) is None else np.array(getattr(obj, f.name)) for f in dataclasses.fields(obj)})


def _env(task: str | dict, **overrides):
    """The ParallelEnv of a task's name, or of a full config (a dict)."""
    if isinstance(task, str):
        return fleet_marl.parallel_env(task=task, **overrides)
    return fleet_marl.parallel_env(config=task, **overrides)


def play(task: str | dict, policy, settings: Settings, progress: Callable[[], None] | None = None) -> tuple[list[list[Visit]], np.ndarray]:
    """Play ``settings.episodes`` episodes of ``policy`` (any spec ``load_policy`` takes) on
    ``task`` (a task's name or a full config) with every scheme computed: each episode's visits, and the (D, L) pairs of every
    live tenant-round, (n, 2)."""
    env = _env(task, compute_all=True)
    pol = load_policy(policy, env)
    episodes, pairs = [], []
    for e in range(settings.episodes):
        seed = settings.seed + e
        obs, infos = env.reset(seed=seed)
        pol.reset(seed)
        visits = []
        while env.agents:
            actions = pol.act(obs, infos)
            live = np.zeros(env.kernel_static.T, bool)
            joint = np.zeros((env.kernel_static.T, env.nvec.shape[1]), np.int64)
            masks = {}
            for a in env.agents:
                i = env.agent_index[a]
                live[i] = True
                joint[i] = actions[a]
                masks[i] = tuple(np.array(m) for m in mask_dims(env.action_mask(a), env.nvec[i]))
            visits.append(Visit(live, _copy(env.round_state), _copy(env.round_draws()), masks, joint))
            acting = list(env.agents)
            obs, _, _, _, infos = env.step(actions)
            visits[-1].welfare = float(env.last_credit.welfare)
            for a in acting:
                r = scheme_rewards(infos[a])
                pairs.append((r["difference"], r["local"]))
        episodes.append(visits)
        if progress is not None:
            progress()
    return episodes, np.array(pairs, np.float64).reshape(-1, 2)


def externality(pairs: np.ndarray) -> dict:
    """The externality share of (D, L) pairs: ``Σ|D − L| / Σ|L|`` and the share of pairs with
    ``|D − L| > SHARE_THRESHOLD · |L|``."""
    d, loc = pairs[:, 0], pairs[:, 1]
    gap = np.abs(d - loc)
    return {
        "tenant_rounds": int(pairs.shape[0]),
        "externality_share": float(gap.sum() / max(np.abs(loc).sum(), 1e-300)),
        "rounds_differ": float(np.mean(gap > SHARE_THRESHOLD * np.abs(loc))) if pairs.size else 0.0,
    }


def sample_visits(episodes: list[list[Visit]], states: int) -> list[Visit]:
    """``states`` visits of each episode, evenly spaced over its rounds (each at most once)."""
    out = []
    for visits in episodes:
        picks: Any = np.unique(np.linspace(0, len(visits) - 1, states).round().astype(np.int64)) if visits else []
        out += [visits[k] for k in picks]
    return out


class SearchSpace:
    """Each live tenant's search space at a visit (the module docstring), as (C, 8) action
    indices whose row 0 is the policy's action."""

    def __init__(self, env) -> None:
        self.helper = BasePolicy(env)  # its fit tables, precision maps and actions
        st = env.kernel_static
        self.is_train = np.asarray(st.is_train)
        self._bids = sorted({self.helper.lowest_winning_bid(), (len(env.bid_levels) - 1) // 2, len(env.bid_levels) - 1})

    def of(self, i: int, mask: tuple, start: np.ndarray) -> np.ndarray:
        h = self.helper
        bids = [b for b in self._bids if mask[1][b]] or [int(np.flatnonzero(mask[1])[0])]
        maps = MAPS[:3] if self.is_train[i] else MAPS
        rows = [start, h.action(i, 0, bids[0], h.precision_map(i, mask, {}), 0)]
        seen = set()
        counts = np.flatnonzero(mask[0])
        for plan in maps:
            prec = h.precision_map(i, mask, plan)
            if tuple(prec) in seen:
                continue
            seen.add(tuple(prec))
            table = h.fits.table(i, prec)
            for g in counts[counts > 0]:
                top = int(table[g])
                if top < 0:
                    continue
                for lv in sorted({max(top - k, 0) for k in BATCH_STEPS}):
                    rows += [h.action(i, int(g), b, prec, lv) for b in bids]
        rows_a = np.stack(rows)
        _, first = np.unique(rows_a, axis=0, return_index=True)
        keep = np.sort(first)
        return rows_a[keep if keep[0] == 0 else np.concatenate(([0], keep))]


class Rows:
    """The sampled visits stacked, so that rows of any visits go into one kernel call."""

    def __init__(self, env, visits: list[Visit]) -> None:
        self.st, self.bid_levels = env.kernel_static, env.bid_levels
        self.state = _stack(RoundState, [v.state for v in visits])
        self.draws = _stack(Draws, [v.draws for v in visits])

    def evaluate(self, visit: np.ndarray, idx: np.ndarray, present: np.ndarray) -> Outcome:
        """The outcome of rows of (R, T, 8) action indices, each under the state and draws of its visit (R,)."""
        state, draws = _pick(self.state, visit), _pick(self.draws, visit)
        return evaluate(self.st, decode_actions(idx, self.bid_levels), state, draws, present, validate=False)


def _pick(obj, rows: np.ndarray):
    """``obj`` (a stacked RoundState or Draws) with every field's rows ``rows``."""
    return type(obj)(**{f.name: None if getattr(obj, f.name) is None else getattr(obj, f.name)[rows] for f in dataclasses.fields(obj)})


def _stack(kind, objs: list):
    """One ``kind`` (RoundState or Draws) whose every field stacks the objects' (None where the first's is None)."""
    first = objs[0]
    return kind(
        **{
            f.name: None if getattr(first, f.name) is None else np.stack([getattr(o, f.name) for o in objs])
            for f in dataclasses.fields(kind)
        }
    )


def _sign(x: np.ndarray, scale: float) -> np.ndarray:
    return np.where(np.abs(x) <= TOL * max(1.0, scale), 0, np.sign(x))


class Sums:
    """The running sums of factoredness (pairs that agree, pairs) and learnability (own and others' |Δ|)."""

    def __init__(self) -> None:
        self.agree = dict.fromkeys(SCHEMES, 0)
        self.pairs = 0
        self.own = dict.fromkeys(SCHEMES, 0.0)
        self.others = dict.fromkeys(SCHEMES, 0.0)
        self.own_n = 0
        self.others_n = 0

    def result(self) -> dict:
        fact = {s: (self.agree[s] / self.pairs if self.pairs else None) for s in SCHEMES}
        learn = {}
        for s in SCHEMES:
            own, oth = self.own[s] / max(self.own_n, 1), self.others[s] / max(self.others_n, 1)
            learn[s] = own / oth if oth > 0 else None
        return {"factoredness": fact, "learnability": learn}


def factored_learnable(rows: Rows, visits: list[Visit], spaces: list[dict[int, np.ndarray]], samples: int, rng, sums: Sums) -> None:
    """Add every visit's own and others' changes (one kernel call per visit) to ``sums``."""
    for k, v in enumerate(visits):
        live = [int(i) for i in np.flatnonzero(v.live)]
        T = v.live.size
        blocks: list[np.ndarray] = [v.action[None]]
        present: list[np.ndarray] = [v.live[None]]
        plan = []
        for i in live:
            out_i = v.live & (np.arange(T) != i)
            own = np.repeat(v.action[None], len(spaces[k][i]), axis=0)
            own[:, i] = spaces[k][i]
            others = np.repeat(v.action[None], samples, axis=0)
            for j in live:
                if j == i:
                    continue
                others[:, j] = spaces[k][j][rng.integers(len(spaces[k][j]), size=samples)]
            plan.append((i, own.shape[0]))
            blocks += [v.action[None], own, others, others]
            present += [
                out_i[None],
                np.repeat(v.live[None], own.shape[0], 0),
                np.repeat(v.live[None], samples, 0),
                np.repeat(out_i[None], samples, 0),
            ]
        idx, pres = np.concatenate(blocks), np.concatenate(present)
        out = rows.evaluate(np.full(idx.shape[0], k), idx, pres)
        W, U = np.asarray(out.welfare), np.asarray(out.utility)
        at = 1
        for i, n in plan:
            base_minus = W[at]
            mine = slice(at + 1, at + 1 + n)
            oth = slice(at + 1 + n, at + 1 + n + samples)
            oth_minus = slice(at + 1 + n + samples, at + 1 + n + 2 * samples)
            at += 1 + n + 2 * samples
            g_own = {"local": U[mine, i], "global": W[mine], "difference": W[mine] - base_minus}
            g_base = {"local": U[0, i], "global": W[0], "difference": W[0] - base_minus}
            g_oth = {"local": U[oth, i], "global": W[oth], "difference": W[oth] - W[oth_minus]}
            upper = np.triu_indices(n, 1)
            scale = float(np.abs(W[mine]).max(initial=0.0))
            dG = _sign((W[mine][:, None] - W[mine][None, :])[upper], scale)
            for s in SCHEMES:
                size = max(scale, float(np.abs(g_own[s]).max(initial=0.0)), float(np.abs(g_oth[s]).max(initial=0.0)))
                dg = _sign((g_own[s][:, None] - g_own[s][None, :])[upper], size)
                sums.agree[s] += int(np.count_nonzero(dg == dG))
                sums.own[s] += float(np.abs(_sign(g_own[s] - g_base[s], size) * (g_own[s] - g_base[s])).sum())
                sums.others[s] += float(np.abs(_sign(g_oth[s] - g_base[s], size) * (g_oth[s] - g_base[s])).sum())
            sums.pairs += upper[0].size
            sums.own_n += n
            sums.others_n += samples


def best_responses(rows: Rows, visits: list[Visit], spaces: list[dict[int, np.ndarray]], objective: str, sweeps: int) -> dict:
    """Iterated one-tenant best responses on ``objective`` (``local``: each tenant's ``u_i``;
    ``global``: ``G``) from every visit's joint action, all visits together (one kernel call per
    tenant and sweep): each visit's welfare after it, (S,), the sweeps it ran and whether its
    last sweep changed nothing."""
    S, T = len(visits), visits[0].live.size
    choice = np.zeros((S, T), np.int64)  # index into each tenant's search space; 0 = the policy's action
    live = np.stack([v.live for v in visits])
    active = np.ones(S, bool)
    ran = np.zeros(S, np.int64)

    def joint(s: int) -> np.ndarray:
        z = visits[s].action.copy()
        for j in np.flatnonzero(live[s]).tolist():
            z[j] = spaces[s][j][choice[s, j]]
        return z

    for _ in range(sweeps):
        changed = np.zeros(S, bool)
        ran[active] += 1
        for i in range(T):
            ss = np.flatnonzero(active & live[:, i])
            if not ss.size:
                continue
            blocks = []
            for s in ss.tolist():
                r = np.repeat(joint(s)[None], len(spaces[s][i]), axis=0)
                r[:, i] = spaces[s][i]
                blocks.append(r)
            counts = np.array([b.shape[0] for b in blocks])
            vis = np.repeat(ss, counts)
            out = rows.evaluate(vis, np.concatenate(blocks), live[vis])
            score = np.asarray(out.utility)[:, i] if objective == "local" else np.asarray(out.welfare)
            start = np.concatenate(([0], np.cumsum(counts)[:-1]))
            for s, a, n in zip(ss.tolist(), start.tolist(), counts.tolist(), strict=True):
                seg = score[a : a + n]
                best, cur = int(np.argmax(seg)), seg[choice[s, i]]
                if seg[best] > cur + TOL * max(1.0, abs(cur)):
                    choice[s, i] = best
                    changed[s] = True
        active &= changed
        if not active.any():
            break
    zs = np.stack([joint(s) for s in range(S)])
    welfare = np.asarray(rows.evaluate(np.arange(S), zs, live).welfare, np.float64)
    return {"welfare": welfare, "sweeps": ran, "converged": ~active}


def equilibria(rows: Rows, visits: list[Visit], spaces, sweeps: int) -> dict:
    """The selfish/team ratio (the module docstring) and what it rests on."""
    selfish = best_responses(rows, visits, spaces, "local", sweeps)
    team = best_responses(rows, visits, spaces, "global", sweeps)
    ok = team["welfare"] > 0
    ratio = selfish["welfare"][ok] / team["welfare"][ok]
    return {
        "ratio": float(ratio.mean()) if ok.any() else None,
        "ratio_min": float(ratio.min()) if ok.any() else None,
        "states_used": int(ok.sum()),
        "selfish_welfare": float(selfish["welfare"].mean()),
        "team_welfare": float(team["welfare"].mean()),
        "converged": float(np.mean(selfish["converged"] & team["converged"])),
    }


def measure(task: str | dict, policy, settings: Settings | None = None, progress: Callable[[], None] | None = None) -> dict:
    """Every measure of ``task`` under ``policy`` (a row of the command's report); ``progress``
    is called after each episode and once at the end."""
    settings = settings or Settings()
    episodes, pairs = play(task, policy, settings, progress)
    row: dict = {"task": task if isinstance(task, str) else "custom", "policy": str(policy), **externality(pairs)}
    visits = [v for v in sample_visits(episodes, settings.states) if v.live.any()]
    row["states"] = len(visits)
    if not visits:
        return {**row, **Sums().result(), "equilibrium": None}
    env = _env(task, compute_all=False)
    space = SearchSpace(env)
    spaces = [{int(i): space.of(int(i), v.masks[int(i)], v.action[i]) for i in np.flatnonzero(v.live)} for v in visits]
    rows = Rows(env, visits)
    sums = Sums()
    factored_learnable(rows, visits, spaces, settings.samples, np.random.default_rng(settings.seed), sums)
    row.update(sums.result())
    row["search_space"] = float(np.mean([len(c) for sp in spaces for c in sp.values()]))
    row["equilibrium"] = equilibria(rows, visits, spaces, settings.sweeps)
    if progress is not None:
        progress()
    return row


__all__ = [
    "BATCH_STEPS",
    "MAPS",
    "OBJECTIVES",
    "SCHEMES",
    "SHARE_THRESHOLD",
    "TOL",
    "Rows",
    "SearchSpace",
    "Settings",
    "Sums",
    "Visit",
    "best_responses",
    "equilibria",
    "externality",
    "factored_learnable",
    "measure",
    "play",
    "sample_visits",
]

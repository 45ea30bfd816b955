"""Credit beyond one round: a difference reward whose counterfactual carries a tenant's removal
forward ``k`` rounds, measured against the one-round ``difference`` the env computes
(``python -m fleet_marl.studies.credit_horizon``; issue 48, item 5; ``docs/credit_horizon.md``).

Every scheme of :mod:`fleet_marl.credit` looks one round ahead: ``D_i(t) = G_t(z) − G_t(z_−i)``
evaluates round t again with tenant i removed, from the same state. What i leaves behind --
a restart it causes next round, the heat of the GPUs it ran, the queue it shortened, the budget
it spent -- counts in none of them. The k-round difference does::

    D^k_i(t) = Σ_{s=t}^{t+k−1} [ G_s(actual) − G_s(branch_i) ]

``G_s(actual)`` is the welfare of round s of the episode as played. ``branch_i`` is the episode
copied at the start of round t (:meth:`FleetParallelEnv.core_state`) with tenant i taken out of
it, then played on by the env's own round (:func:`fleet_marl.environment.core.step`, the
dynamics written once): placements, restarts, heat, queues, budgets and terminations carry
from one round to the next in the branch as they do in the env. The draws are the episode's
(drawn at reset). The other tenants replay the actions their policy played in the episode
(open loop, as ``D^1`` holds them fixed); a tenant still live in a branch after it left the
episode holds its last action (``held`` counts those tenant-rounds). Two branches per tenant:

* ``withdrawn`` (the definition above): i is out from round t to the window's end;
* ``sits_out``: i is out of round t only and plays its own actions again from t + 1 (where the
  episode had it live), so ``D^k − D^1`` is what i's presence in round t did to the rounds after.

``D^1`` of either is the env's ``difference`` reward, exactly (``d1_max_error``; the test ties
them). A window stops at the episode's last round. All horizons come from one branch of
``max(horizons)`` rounds: ``D^k`` is its first k terms.

What is compared, over the live tenant-rounds of ``episodes`` episodes (seeds ``seed``, ...;
on a suite task, :data:`SUITE_TASKS`, episode e is the task's train scenario ``seed + e``:
:func:`episodes_of`):

* ``share``: ``Σ|D^k − D^1| / Σ|D^1|``;
* ``spearman``: the mean over rounds of the Spearman correlation between ``D^1`` and ``D^k``
  across the round's live tenants (ties at their mean rank; rounds with fewer than three live
  tenants, or where either is constant, are left out: ``rounds``), and ``same_order`` the share
  of those rounds whose tenants ``D^k`` orders as ``D^1`` does (Spearman 1); ``distinct``, the
  mean number of distinct ``D^1`` values a round (tenants alike in every way tie: the ranks
  there are to keep);
* ``sign``: the share of tenant-rounds where ``D^k`` and ``D^1`` have the same sign (a value
  within ``TOL · max(1, the round's largest |D|)`` of 0 counts as 0);
* the cost: kernel rows and env rounds per tenant-round, and ms per round of the branches
  (this process's CPU time, ``time.process_time``, which other processes sharing the core do
  not inflate as they do wall time; beside ``env_ms``, the env's own round with ``difference``
  as the reward, timed so).

The verdict, declared before the measurement: one round ranks the tenants as k rounds do on a
task when, under every policy and for every k, the mean Spearman is at least ``ENOUGH_SPEARMAN``
and the sign agreement at least ``ENOUGH_SIGN``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter, process_time

import numpy as np

import fleet_marl
from fleet_marl import suite
from fleet_marl.environment import core, scheme_rewards
from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.studies import credit_horizon_cost as cost
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.tasks import scaled

HORIZONS = (1, 2, 4, 8)
VARIANTS = ("withdrawn", "sits_out")
BUILTIN_TASKS = ("capped_rack", "shared_fabric", "hard", "easy", "easy_x8_auction")
#: The credit-assignment suite's tasks measured (``fleet_marl.suite``): episode e of a row plays the
#: task's train scenario ``seed + e``, reset with its seed (``suite.scenarios``).
SUITE_TASKS = ("aligned_n8", "proportional_n8", "scarce_n8", "storm_n8", "power_n8", "fabric_n8")
TASKS = BUILTIN_TASKS + SUITE_TASKS
POLICIES = ("planner", "fair_share")
#: A value within this share of max(1, the round's largest |D|) counts as 0.
TOL = 1e-9
ENOUGH_SPEARMAN = 0.9
ENOUGH_SIGN = 0.95
DATA = "docs/data/credit_horizon.json"
DOC = "docs/credit_horizon.md"
START, END = "<!-- credit-horizon:start -->", "<!-- credit-horizon:end -->"
PROG = "python -m fleet_marl.studies.credit_horizon"


def scenario(task: str) -> dict:
    """The overrides of ``parallel_env`` for a task of :data:`TASKS`: a built-in task's name (a
    suite task's name gives its train scenario 0), or ``easy_x8_auction``: ``easy`` scaled to 8
    tenants under the auction (``tasks.scaled(8, "auction")``) on 3 nodes (3 GPUs a tenant) with
    the servers' arrival rates tripled."""
    if task != "easy_x8_auction":
        return {"task": task}
    sc = scaled(8, "auction")
    sc["cluster"]["gpu_types"] = ["h100-sxm"] * 3
    for t in sc["tenants"]:
        if t["kind"] == "serve":
            t["workload"]["rate"] *= 3.0
    return {"task": "easy", **sc}


def episodes_of(task: str, seed: int, episodes: int) -> list[tuple[dict, int]]:
    """``[(parallel_env overrides, reset seed)]`` of a row's episodes: a suite task's train
    scenarios ``seed`` .. ``seed + episodes − 1``, each with its own seed (the scenarios a learner
    of the task trains on); any other task's one scenario with seeds ``seed`` .. ``seed + episodes − 1``."""
    if task in suite.SUITE:
        return [({"config": cfg}, s) for s, cfg in suite.scenarios(task, range(seed, seed + episodes), "train")]
    return [(scenario(task), seed + e) for e in range(episodes)]


@dataclass(frozen=True)
class Settings:
    """What a measurement ran with (defaults: the command's)."""

    episodes: int = 10
    seed: int = 0
    horizons: tuple[int, ...] = HORIZONS


@dataclass
class Episode:
    """One episode as played: per round t (E rounds) the state it started from, who was live,
    the joint action (E, T, 8), the welfare (E,), the env's ``difference`` (E, T; NaN where not
    live) and the env round's CPU time (E,). ``held`` (E, T, 8) is each tenant's action in
    round t if it was live then, else the last one it played (zeros before its first)."""

    states: list
    live: np.ndarray
    actions: np.ndarray
    welfare: np.ndarray
    d1: np.ndarray
    env_s: np.ndarray

    @property
    def held(self) -> np.ndarray:
        out = self.actions.copy()
        for u in range(1, out.shape[0]):
            out[u] = np.where(self.live[u][:, None], self.actions[u], out[u - 1])
        return out


def play(env, policy, seed: int) -> Episode:
    """Play one episode of ``policy`` (bound to ``env``) from ``seed``, keeping each round's start."""
    T = env.kernel_static.T
    obs, infos = env.reset(seed=seed)
    policy.reset(seed)
    states, live, actions, welfare, d1, env_s = [], [], [], [], [], []
    while env.agents:
        act = policy.act(obs, infos)
        states.append(env.core_state())
        joint = np.zeros((T, env.nvec.shape[1]), np.int64)
        alive = np.zeros(T, bool)
        for a in env.agents:
            joint[env.agent_index[a]] = act[a]
            alive[env.agent_index[a]] = True
        acting = list(env.agents)
        t0 = process_time()
        obs, _, _, _, infos = env.step(act)
        env_s.append(process_time() - t0)
        d = np.full(T, np.nan)
        for a in acting:
            d[env.agent_index[a]] = scheme_rewards(infos[a])["difference"]
        live.append(alive)
        actions.append(joint)
        welfare.append(float(env.last_credit.welfare))
        d1.append(d)
    return Episode(states, np.array(live), np.array(actions), np.array(welfare), np.array(d1), np.array(env_s))


def branch_static(env) -> core.CoreStatic:
    """The array core of ``env``'s scenario computing ``local`` alone: one kernel row a cluster
    and round (the branches need only each round's welfare)."""
    cfg = env.config
    return core.CoreStatic.from_config(dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, scheme="local", compute_all=False)))


def branches(cs: core.CoreStatic, ep: Episode, held_actions: np.ndarray, t: int, kmax: int, variant: str) -> dict:
    """Every live tenant's branch of round ``t``, played ``kmax`` rounds (or to the episode's end)
    in one batch, the others on ``held_actions`` (``ep.held``): ``tenants`` (n,), ``welfare`` (n, h) each branch's G_s, ``rows`` kernel rows and
    ``seconds`` (h,) CPU time after each round, ``held`` tenant-rounds that held a last action."""
    if variant not in VARIANTS:
        raise ValueError(f"variant = {variant!r}: expected one of {', '.join(VARIANTS)}")
    E, T = ep.live.shape
    tenants = np.flatnonzero(ep.live[t])
    n = tenants.size
    h_end = min(kmax, E - t)
    welfare = np.zeros((n, h_end))
    seconds = np.zeros(h_end)
    rows, held = 0, 0
    t0 = process_time()
    s = ep.states[t].take(np.zeros(n, np.int64))
    s.live[np.arange(n), tenants] = False
    for h in range(h_end):
        u = t + h
        if variant == "sits_out" and h > 0:
            s.live[np.arange(n), tenants] = ep.live[u, tenants]
        held += int(np.count_nonzero(s.live & ~ep.live[u]))
        r = core.step(cs, s, np.broadcast_to(held_actions[u], (n, T, held_actions.shape[2])), [None] * n)
        core.finish(s, r)
        welfare[:, h] = r.credit.welfare
        rows += int(np.sum(r.credit.rows))
        seconds[h] = process_time() - t0
    return {"tenants": tenants, "welfare": welfare, "rows": rows, "seconds": seconds, "held": held}


def differences(cs: core.CoreStatic, ep: Episode, kmax: int, variant: str) -> dict:
    """``D`` (E, T, kmax): ``D[t, i, k − 1]`` is D^k_i(t) (NaN where i was not live at t; a
    window cut by the episode's end keeps its last sum); per round ``seconds`` (E, kmax) and
    ``rows`` (E, kmax) the branches' CPU time and kernel rows up to each horizon, and ``held``."""
    E, T = ep.live.shape
    D = np.full((E, T, kmax), np.nan)
    seconds = np.zeros((E, kmax))
    rows = np.zeros((E, kmax))
    held, acts = 0, ep.held
    for t in range(E):
        b = branches(cs, ep, acts, t, kmax, variant)
        h = b["welfare"].shape[1]
        gaps = np.cumsum(ep.welfare[t : t + h][None, :] - b["welfare"], axis=1)  # (n, h)
        D[t, b["tenants"], :h] = gaps
        D[t, b["tenants"], h:] = gaps[:, -1:]
        seconds[t, :h] = b["seconds"]
        seconds[t, h:] = b["seconds"][-1]
        n = b["tenants"].size
        rows[t, :h] = n * np.arange(1, h + 1)
        rows[t, h:] = n * h
        held += b["held"]
    return {"D": D, "seconds": seconds, "rows": rows, "held": held}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of ``x`` (1-D), ties at their mean rank."""
    order = np.argsort(x, kind="stable")
    r = np.empty(x.size)
    r[order] = np.arange(x.size, dtype=np.float64)
    _, inv = np.unique(x, return_inverse=True)
    sums = np.bincount(inv, r)
    return sums[inv] / np.bincount(inv)[inv]


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's correlation of two 1-D arrays (None when either is constant)."""
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else None


def _sign(x: np.ndarray, scale: float) -> np.ndarray:
    return np.where(np.abs(x) <= TOL * max(1.0, scale), 0, np.sign(x))


def compare(D: np.ndarray, k: int) -> dict:
    """``share``, ``spearman``, ``same_order``, ``sign`` and ``rounds`` of D^k against D^1
    over an episode's (or episodes' stacked) rounds, D (E, T, kmax)."""
    d1, dk = D[:, :, 0], D[:, :, k - 1]
    live = ~np.isnan(d1)
    gap, base = float(np.abs(dk - d1)[live].sum()), float(np.abs(d1[live]).sum())
    rhos, agree, distinct = [], 0, []
    for t in range(D.shape[0]):
        a, b = d1[t, live[t]], dk[t, live[t]]
        if a.size:
            distinct.append(np.unique(a).size)
        scale = float(max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0)))
        agree += int(np.count_nonzero(_sign(a, scale) == _sign(b, scale)))
        if a.size >= 3 and (rho := spearman(a, b)) is not None:
            rhos.append(rho)
    r = np.array(rhos)
    return {
        "share": gap / base if base > 0 else None,
        "spearman": float(r.mean()) if r.size else None,
        "spearman_min": float(r.min()) if r.size else None,
        "same_order": float(np.mean(r > 1 - 1e-12)) if r.size else None,
        "sign": agree / int(live.sum()) if live.any() else None,
        "rounds": int(r.size),
        "distinct": float(np.mean(distinct)) if distinct else None,
    }


def measure(task: str, policy: str, settings: Settings | None = None, progress: Callable[[], None] | None = None) -> dict:
    """The row of ``task`` (a name of :data:`TASKS` or a built-in task) under ``policy``: per
    variant and horizon the comparison with D^1 and its cost."""
    settings = settings or Settings()
    kmax = max(settings.horizons)
    eps, statics = [], []
    for e, (overrides, seed) in enumerate(episodes_of(task, settings.seed, settings.episodes)):
        env = fleet_marl.parallel_env(**overrides, reward_scheme="difference")
        pol = load_policy(policy, env)
        cs = branch_static(env)
        if e == 0:  # untimed: the first calls load the compiled round
            warm = play(env, pol, seed)
            for variant in VARIANTS:
                branches(cs, warm, warm.held, 0, kmax, variant)
        eps.append(play(env, pol, seed))
        statics.append(cs)
    row: dict = {"task": task, "policy": policy, "tenants": env.kernel_static.T, "episodes": settings.episodes, "seed": settings.seed}
    if task in suite.SUITE:
        row["scenarios"] = f"train {settings.seed}-{settings.seed + settings.episodes - 1}"
    rounds = sum(len(ep.welfare) for ep in eps)
    tenant_rounds = int(sum(ep.live.sum() for ep in eps))
    row.update(rounds=rounds, tenant_rounds=tenant_rounds, env_ms=1e3 * float(np.concatenate([ep.env_s for ep in eps]).mean()))
    for variant in VARIANTS:
        out = [differences(cs, ep, kmax, variant) for cs, ep in zip(statics, eps, strict=True)]
        D = np.concatenate([o["D"] for o in out])
        d1_env = np.concatenate([ep.d1 for ep in eps])
        err = np.abs(D[:, :, 0] - d1_env)[~np.isnan(d1_env)]
        seconds, rows = np.concatenate([o["seconds"] for o in out]), np.concatenate([o["rows"] for o in out])
        per_k = {}
        for k in settings.horizons:
            per_k[str(k)] = {
                **compare(D, k),
                "rows_per_tenant_round": float(rows[:, k - 1].sum() / tenant_rounds),
                "ms_per_round": 1e3 * float(seconds[:, k - 1].mean()),
            }
        row[variant] = {"d1_max_error": float(err.max(initial=0.0)), "held": int(sum(o["held"] for o in out)), "horizons": per_k}
        if progress is not None:
            progress()
    return row


def enough(rows: list[dict], task: str, variant: str) -> bool | None:
    """Whether one round ranks ``task``'s tenants as every k does (the module docstring's rule)."""
    mine = [r for r in rows if r["task"] == task]
    if not mine:
        return None
    for r in mine:
        for c in r[variant]["horizons"].values():
            if c["spearman"] is not None and c["spearman"] < ENOUGH_SPEARMAN:
                return False
            if c["sign"] is not None and c["sign"] < ENOUGH_SIGN:
                return False
    return True


def _f(x, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def render(data: dict) -> str:
    """The doc's generated block from the saved data."""
    rows = data["rows"]
    out = [
        START,
        f"Made by `{data['command']}` ({data['settings']['episodes']} episodes a row, seeds from {data['settings']['seed']}).",
        "",
    ]
    groups = [
        ("", [r for r in rows if r["task"] not in suite.SUITE]),
        (" on the suite (episode e: train scenario e)", [r for r in rows if r["task"] in suite.SUITE]),
    ]
    for variant, (where, group) in ((v, g) for g in groups for v in VARIANTS):
        if not group:
            continue
        out += [f"**{variant}**{where}", ""]
        out += [
            "| task | policy | k | share Σ\\|Dᵏ−D¹\\|/Σ\\|D¹\\| | Spearman (mean / min) | same order | sign agreement "
            "| kernel rows per tenant-round | CPU ms per round (env's round) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in group:
            for k, c in r[variant]["horizons"].items():
                rho = _f(c["spearman"], ".3f") + (" ✗" if c["spearman"] is not None and c["spearman"] < ENOUGH_SPEARMAN else "")
                sign = _f(c["sign"], ".3f") + (" ✗" if c["sign"] is not None and c["sign"] < ENOUGH_SIGN else "")
                out.append(
                    f"| {r['task']} | {r['policy']} | {k} | {_f(c['share'], '.3f')} | {rho} / {_f(c['spearman_min'], '.2f')} "
                    f"| {_f(c['same_order'], '.2f')} | {sign} | {c['rows_per_tenant_round']:.2f} "
                    f"| {c['ms_per_round']:.2f} ({r['env_ms']:.2f}) |"
                )
        out.append("")
    out += [
        f"Verdict (one round is enough when, under both policies and every k, the mean Spearman is at least {ENOUGH_SPEARMAN} "
        f"and the sign agreement at least {ENOUGH_SIGN}; ✗ marks a figure below it):",
        "",
        "| task | withdrawn | sits_out | distinct D¹ values a round | D¹ = env's difference (max error) | tenant-rounds holding a last action |",
        "|---|---|---|---:|---:|---:|",
    ]
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        verdicts = ["one round is enough" if enough(rows, task, v) else "one round is **not** enough" for v in VARIANTS]
        err = max(r[v]["d1_max_error"] for r in mine for v in VARIANTS)
        held = sum(r[v]["held"] for r in mine for v in VARIANTS)
        distinct = ", ".join(f"{r['policy']} {_f(r[VARIANTS[0]]['horizons']['1']['distinct'], '.1f')}" for r in mine)
        out.append(f"| {task} | {verdicts[0]} | {verdicts[1]} | {distinct} | {err:.1e} | {held} |")
    out.append(END)
    return "\n".join(out)


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The publisher's blocks (``fleet_marl.studies.publish``): the doc's tables, each if its data
    is there (the training cost's: :mod:`fleet_marl.studies.credit_horizon_cost`)."""
    out = []
    if (root / DATA).is_file():
        out.append((DOC, START, END, render(json.loads((root / DATA).read_text()))))
    if (root / cost.DATA).is_file():
        out.append((DOC, cost.START, cost.END, cost.render(json.loads((root / cost.DATA).read_text()))))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated (default: %(default)s)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: %(default)s)")
    d = Settings()
    p.add_argument("--episodes", type=int, default=d.episodes, help="episodes per task and policy (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="the first episode's seed (default %(default)s)")
    p.add_argument("--horizons", default=",".join(map(str, d.horizons)), help="the k compared with 1 (default %(default)s)")
    p.add_argument("--save", action="store_true", help=f"write {DATA} and publish the block of {DOC} from it")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(argv)
    horizons = tuple(sorted({1, *(int(k) for k in a.horizons.split(","))}))
    if a.episodes < 1 or horizons[0] < 1:
        p.error(f"--episodes = {a.episodes}, --horizons = {a.horizons}: expected at least 1 episode and horizons >= 1")
    settings = Settings(episodes=a.episodes, seed=a.seed, horizons=horizons)
    rows = []
    for task in a.tasks.split(","):
        for policy in a.policies.split(","):
            t0 = perf_counter()
            rows.append(measure(task, policy, settings))
            print(f"{task} {policy}: {perf_counter() - t0:.1f} s", file=sys.stderr)
    data = {"command": " ".join([PROG, *argv]), "settings": dataclasses.asdict(settings), "rows": rows}
    text = render(data)
    print(text)
    if a.save:
        try:
            root = checkout_root("--save")
        except UsageError as exc:
            p.error(f"{exc}; drop --save")
        (root / DATA).write_text(json.dumps(data, indent=1) + "\n")
        publish(root, echo=lambda m: print(m, file=sys.stderr), renderers=("fleet_marl.studies.credit_horizon",))
    return 0


if __name__ == "__main__":
    sys.exit(main())

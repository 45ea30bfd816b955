"""Does the degenerate-strategy detector fire on good play? (issue 34, item 5)

How to run:  taskset -c 0 .venv/bin/python experiments/detector_check.py
             (``--planner`` adds the planner and the planner with the lowest precisions forced,
             about 11 s per episode at N = 32 and 40 s at N = 64 on one core; ``--ns``, ``--seeds``,
             ``--tasks``, ``--arbiters``, ``--only`` and ``--no-veto`` change what runs; the defaults take about a minute)
What it prints: for the credit study's scaling scenarios (task ``easy`` grown to N tenants by
``fleet_marl.tasks.scaled(N, arbiter)``, 100 rounds, as ``Study.env`` builds them) at N = 32 and
64 under both arbiters (``proportional``, ``auction``), and for the task ``hard``, with the
``difference`` reward (``compute_all=False``), one row per variant: episode welfare (the sum of
every round's welfare, mean and std over seeds 0..2) and per-episode counts of tenant-rounds:
``degenerate`` (the env's detector: ``lowest`` the lowest-precision rule, ``hoard`` hoarding),
``unsafe`` (the safety check's unsafe numerics), ``proj`` (projected: unsafe groups run in BF16,
or a batch lowered), ``veto``, ``oom``, ``thr`` (power or thermal throttle), ``illegal`` (masked
choices), ``bite`` (degenerate tenant-rounds whose raw ``difference`` reward was above
``reward.degenerate_floor``, so the floor lowered it) and ``raw/deg`` (the mean raw
``difference`` reward on the degenerate tenant-rounds). The variants:

``expert``          ``precision_expert`` (BF16, FP8 on the MLP)
``lowest``          the same actions with every group's precision overwritten by the detector's
                    ``lowest_precision`` map (FP8 for trainers, INT4 for servers on H100): what
                    the detector flags; GPUs, bid and batch unchanged
``lowest_safe``     the same, but the unsafe groups (``catalog.UNSAFE``: embedding, norm, head)
                    left in BF16: the map the safety check's ``project`` mode runs instead of
                    ``lowest``'s
``lowest_sized``    ``lowest`` with the GPUs and batch precision_expert's rules would choose for
                    ``lowest_safe``'s map (what actually runs)
``safe_sized``      ``lowest_safe``'s map with those GPUs and batch
``expert_unsafe_emb`` precision_expert's map with only the embedding at the lowest precision
                    (unsafe, but not every group at the lowest: outside the detector's rule)
``planner``         the grader's reference (``--planner``)
``planner_lowest``  the planner's actions with the lowest map forced (``--planner``)
``planner_safe``    the planner's actions with ``lowest_safe``'s map forced (``--planner``)

and, unless ``--no-veto``, ``expert`` and ``lowest`` again with ``safety_mode="veto"`` (rows
marked ``veto``), where the check refuses an unsafe map instead of projecting it. The last
lines compare the trained ``difference`` policies of docs/data/credit_study/results.csv at
these N: welfare of the runs with and without degenerate play. Deterministic: the env, the
policies and the action spaces are seeded by the episode seed.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

import fleet_marl
import fleet_marl.policies as P
from fleet_marl import catalog
from fleet_marl.environment.spaces import PREC
from fleet_marl.fairness import lowest_precision
from fleet_marl.policies.base import split
from fleet_marl.policies.heuristics import EXPERT_MAP, PrecisionExpertPolicy, fair_gpus, sequential_share
from fleet_marl.tasks import scaled

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("degenerate", "lowest_precision", "hoarding", "unsafe_numerics", "projected", "vetoed", "oom", "throttled", "illegal")
SHORT = ("degen", "lowest", "hoard", "unsafe", "proj", "veto", "oom", "thr", "illegal")
BF16 = catalog.PRECISION_CODE["bf16"]


def maps(env) -> tuple[np.ndarray, np.ndarray]:
    """(T, G) the detector's lowest map per tenant (-1 rows: none) and its safe part (the unsafe
    groups in BF16: what the ``project`` check runs)."""
    st = env.kernel_static
    low = lowest_precision(st.supported, st.is_train)
    lowest = np.repeat(low[:, None], catalog.N_GROUPS, axis=1)
    safe = lowest.copy()
    for t in range(st.T):
        for g in range(catalog.N_GROUPS):
            if low[t] >= 0 and catalog.UNSAFE[g, low[t]]:
                safe[t, g] = BF16
    return lowest, safe


class Forced:
    """``base``'s actions with the precision entries of every tenant that has a lowest map
    overwritten by ``table[t]`` (GPUs, bid and batch kept)."""

    def __init__(self, base, env, table: np.ndarray) -> None:
        self.base, self.env, self.table = base, env, table

    def reset(self, seed=None) -> None:
        self.base.reset(seed)

    def act(self, observations, infos):
        out = self.base.act(observations, infos)
        for a, act in out.items():
            t = self.env.agent_index[a]
            if self.table[t, 0] >= 0:
                act = act.copy()
                act[PREC] = self.table[t]
                out[a] = act
        return out


class Sized(PrecisionExpertPolicy):
    """precision_expert's GPUs (fair share raised to what holds the model), list price and the
    largest batch that fits, all sized for the map ``size[t]``; it submits ``submit[t]``."""

    name = "sized"

    def __init__(self, env, submit: np.ndarray, size: np.ndarray) -> None:
        super().__init__(env)
        self.submit, self.size = submit, size

    def act_one(self, observation, agent, info=None):
        obs, mask = split(observation, agent, info, self.env)
        i = self.index(agent)
        if self.size[i, 0] < 0:
            return super().act_one(observation, agent, info)
        max_gpus = int(self.env.kernel_static.max_gpus[i])
        size = self.size[i].astype(np.int64)
        gpus = self.holding(i, sequential_share(fair_gpus(obs, max_gpus), self.claims_so_far(obs, i)), mask[0], size)
        return self.action(i, gpus, self.bid_index(1.0), self.submit[i].astype(np.int64), self.fits.largest(i, size, gpus))


def episode(env, policy, seed: int) -> dict:
    """One episode: welfare and the per-episode counts."""
    obs, infos = env.reset(seed=seed)
    for k, a in enumerate(env.possible_agents):
        env.action_space(a).seed(seed * 1_000_003 + k)
    policy.reset(seed)
    welfare = 0.0
    counts = dict.fromkeys(FLAGS, 0)
    bite, raw_deg = 0, []
    while env.agents:
        actions = policy.act(obs, infos)
        obs, rewards, _, _, infos = env.step(actions)
        if not infos:
            break
        welfare += next(iter(infos.values()))["welfare"]
        for a, info in infos.items():
            for f in FLAGS:
                counts[f] += bool(info[f])
            if info["degenerate"]:
                raw = info["reward_difference"]
                raw_deg.append(raw)
                bite += rewards[a] < raw - 1e-12
    return dict(welfare=welfare, bite=bite, raw_deg=float(np.mean(raw_deg)) if raw_deg else float("nan"), **counts)


def variants(env, planner: bool):
    lowest, safe = maps(env)
    # precision_expert's map with only the embedding at the lowest precision (unsafe, not all-lowest)
    st = env.kernel_static
    expert_emb = np.full_like(lowest, -1)
    for t in range(st.T):
        if lowest[t, 0] >= 0:
            expert_emb[t] = [catalog.PRECISION_CODE[p] if st.supported[t, catalog.PRECISION_CODE[p]] else BF16 for p in EXPERT_MAP.values()]
            expert_emb[t, 0] = lowest[t, 0]
    out = {
        "expert": P.make("precision_expert", env),
        "lowest": Forced(P.make("precision_expert", env), env, lowest),
        "lowest_safe": Forced(P.make("precision_expert", env), env, safe),
        "lowest_sized": Sized(env, lowest, safe),
        "safe_sized": Sized(env, safe, safe),
        "expert_unsafe_emb": Forced(P.make("precision_expert", env), env, expert_emb),
    }
    if planner:
        out["planner"] = P.make("planner", env)
        out["planner_lowest"] = Forced(P.make("planner", env), env, lowest)
        out["planner_safe"] = Forced(P.make("planner", env), env, safe)
    return out


def row(label: str, eps: list[dict]) -> str:
    w = np.array([e["welfare"] for e in eps])
    cells = " ".join(f"{np.mean([e[f] for e in eps]):>7.1f}" for f in FLAGS)
    raw = np.nanmean([e["raw_deg"] for e in eps]) if any(np.isfinite(e["raw_deg"]) for e in eps) else float("nan")
    return f"{label:<34} {w.mean():>9.2f} {w.std():>7.2f} {cells} {np.mean([e['bite'] for e in eps]):>7.1f} {raw:>8.3f}"


def header() -> str:
    return f"{'scenario / variant':<34} {'welfare':>9} {'std':>7} " + " ".join(f"{s:>7}" for s in SHORT) + f" {'bite':>7} {'raw/deg':>8}"


def study_runs(ns) -> None:
    path = ROOT / "docs/data/credit_study/results.csv"
    if not path.exists():
        return
    rows = [r for r in csv.DictReader(path.open()) if r["part"] == "scaling" and r["arm"] == "difference" and int(r["n"]) in ns]
    print("\nTrained `difference` policies (docs/data/credit_study/results.csv, 10 seeds each): welfare of runs with degenerate > 0 vs = 0")
    for m in ("proportional", "auction"):
        for n in ns:
            rs = [r for r in rows if r["setting"] == m and int(r["n"]) == n]
            deg = [float(r["eval_welfare"]) for r in rs if float(r["degenerate"]) > 0]
            clean = [float(r["eval_welfare"]) for r in rs if float(r["degenerate"]) == 0]
            pw = np.mean([float(r["planner_welfare"]) for r in rs]) if rs else float("nan")
            f = lambda x: f"{np.median(x):.1f} (n={len(x)})" if x else "-"  # noqa: E731
            print(f"  {m:<12} N={n:<3} median welfare, degenerate runs {f(deg):<18} clean runs {f(clean):<18} grader planner {pw:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ns", default="32,64")
    ap.add_argument("--arbiters", default="proportional,auction")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", default="hard", help="named tasks to add (comma-separated; '' for none)")
    ap.add_argument("--planner", action="store_true")
    ap.add_argument("--no-veto", action="store_true")
    ap.add_argument("--no-study", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated variant names to run (default: all)")
    args = ap.parse_args()
    ns = [int(n) for n in args.ns.split(",") if n]
    scenarios = [(f"easy x{n} {m}", "easy", {**scaled(n, m), "max_cycles": 100}) for n in ns for m in args.arbiters.split(",") if m]
    scenarios += [(t, t, {}) for t in args.tasks.split(",") if t]
    seeds = range(args.seeds)
    print(f"seeds {list(seeds)}; reward_scheme='difference', compute_all=False; counts are tenant-rounds per episode (mean over seeds)")
    print(header())
    t0 = time.perf_counter()
    for label, task, over in scenarios:
        env = fleet_marl.parallel_env(task=task, **over, reward_scheme="difference", compute_all=False)
        lowest, _ = maps(env)
        names = {int(p) for p in lowest[:, 0] if p >= 0}
        print(
            f"-- {label}: {env.kernel_static.T} tenants, safety {env.config.safety.mode}, lowest maps {sorted(catalog.PRECISIONS[p] for p in names)}, "
            f"degenerate_floor {env.config.reward.degenerate_floor}"
        )
        only = {v for v in args.only.split(",") if v}
        for name, pol in variants(env, args.planner).items():
            if only and name not in only:
                continue
            print(row(f"  {name}", [episode(env, pol, s) for s in seeds]), flush=True)
        if not args.no_veto and env.config.safety.mode != "veto":
            venv = fleet_marl.parallel_env(task=task, **over, reward_scheme="difference", compute_all=False, safety_mode="veto")
            vl, _ = maps(venv)
            for name, pol in (("expert", P.make("precision_expert", venv)), ("lowest", Forced(P.make("precision_expert", venv), venv, vl))):
                print(row(f"  {name} (veto)", [episode(venv, pol, s) for s in seeds]), flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if not args.no_study:
        study_runs(ns)


if __name__ == "__main__":
    main()

"""Shapley for less: the kernel rows each sampled-Shapley estimator needs for the error of 64 permutations.

How to run:  taskset -c 0 .venv/bin/python experiments/shapley_estimators.py [--json docs/data/shapley_estimators.json] [--quick]

It records real rounds (the credit engine's inputs: actions, state, draws, live tenants) from
episodes of a policy (``random``, ``greedy`` or ``planner``) on ``easy`` scaled to N tenants
under the auction (``scaled(N, "auction")``, N = 6, 8, 10, 16, 64) and on ``hard`` (16
tenants), every ``--every``-th round of episodes from seed 0 on. For each round it computes the
reference Shapley values: exact over all ``2^n`` coalitions up to 16 live tenants (the credit
engine with ``exact_max=16``), above that the mean of ``--ref-chunks`` x 512 independent
permutations. Then it runs the credit engine itself, always sampled (``exact_max=0``), with
each ``RewardSpec.shapley_estimator`` (``permutation``, ``antithetic``, ``stratified``,
``banded``, ``regression``) at growing ``shapley_samples`` M, ``--reps`` independent draws per round, and measures

- **rows**: the kernel rows the engine evaluated for the round's Shapley values (the distinct
  coalitions, the grand coalition included: what ``Credit.rows`` counts), mean over draws;
- **RMSE**: the root mean square error of the tenants' values against the reference, over live
  tenants, rounds and draws (above 16 tenants less the reference's own mean square error,
  estimated from its chunks); "of rms φ" is it over the root mean square of the values.

The target is the ``permutation`` estimator's RMSE at M = 64 (what the env does today). For
each other estimator it prints the rows at which its RMSE reaches the target (log-log
interpolation between the two grid points around it; "<=" when the smallest M already does)
and the ratio, 64 permutations' rows over those rows, and, for ``stratified``, ``banded`` and
``regression``, their rows and RMSE at the same M = 64. Same seed, same table (each estimator draws from its
own seeds, so adding one leaves the others' numbers as they were). ``--json`` writes
the table and every grid point; docs/credit_assignment.md ("Shapley for less") is
:func:`render` of docs/data/shapley_estimators.json (a test checks it). About 13 minutes of
CPU on one core to itself (twice that on a shared one); ``--quick`` is a smoke run of seconds.

Results to expect (docs/credit_assignment.md): the target (3x fewer rows, issue 48 item 6)
applies where the env samples, N > 8 (up to 8 live tenants it computes exact Shapley; the
N = 6 and 8 rows are informational). ``regression`` meets it in all nine: 5.3x, 6.1x, 5.7x
at N = 10, 16, 64 under random play, 8.5x, 12.2x, 12.1x under greedy play, and on ``hard``
3.9x under random play, 8.5x under greedy play, 9.7x under the planner. ``banded`` meets it in
the eight others (4.3-8.3x) but not on ``hard`` under random play (1.8x; stratified 2.0x),
where the strata table shows why marginals fail there: 56 % of a marginal's variance is within
coalitions and a pairwise game explains 19 % of that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from dataclasses import fields
from typing import Any

import numpy as np

import fleet_marl
from fleet_marl import credit, policies
from fleet_marl.config import RewardSpec
from fleet_marl.config.rules import SHAPLEY_ESTIMATORS
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate_welfare
from fleet_marl.tasks import scaled

TARGET_M = 64  # today's estimator: 64 uniform permutations
TARGET_RATIO = 3.0  # issue 48 item 6: that error with at least 3x fewer kernel rows, where the env samples (N > 8)
GRID = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # shapley_samples tried for the other estimators
EXACT_UP_TO = 16  # reference: exact Shapley up to this many live tenants (2^16 rows a round)
REF_CHUNK = 512  # permutations per chunk of the sampled reference
#: (task label, N, policy): the scenarios of the table, in its order
SCENARIOS = tuple(("auction", n, p) for p in ("random", "greedy") for n in (6, 8, 10, 16, 64)) + tuple(
    ("hard", 16, p) for p in ("random", "greedy", "planner")
)


def env_for(task: str, n: int):
    """The parallel env of a scenario, computing ``difference`` alone (the recorded inputs are
    the same whatever the scheme; difference keeps recording cheap)."""
    kw = {"task": "hard"} if task == "hard" else {"task": "easy", **scaled(n, "auction")}
    return fleet_marl.parallel_env(reward_scheme="difference", compute_all=False, **kw)


def _copy(x):
    return None if x is None else np.array(x)


@contextlib.contextmanager
def recording(seen: list):
    """Appends the inputs of every ``CreditEngine.compute`` call made inside to ``seen`` (copies)."""
    real = credit.CreditEngine.compute

    def spy(self, actions, state, draws, live, rngs=None):
        seen.append(
            (
                Actions(*(_copy(getattr(actions, f)) for f in ("gpus", "bid", "precision", "batch"))),
                RoundState(**{f.name: _copy(getattr(state, f.name)) for f in fields(RoundState)}),
                Draws(*(_copy(getattr(draws, f.name)) for f in fields(Draws))),
                np.array(live),
            )
        )
        return real(self, actions, state, draws, live, rngs)

    credit.CreditEngine.compute = spy  # type: ignore[method-assign]
    try:
        yield
    finally:
        credit.CreditEngine.compute = real  # type: ignore[method-assign]


def record_rounds(task: str, n: int, policy: str, rounds: int, every: int) -> tuple[object, list]:
    """(kernel static, ``rounds`` rounds): every ``every``-th round with at least two live
    tenants, from ``policy``'s episodes on seeds 0, 1, ..."""
    env = env_for(task, n)
    pol = policies.make(policy, env)
    seen: list = []
    out: list = []
    ep = 0
    with recording(seen):
        while len(out) < rounds:
            obs, infos = env.reset(seed=ep)
            pol.reset(ep)
            ep += 1
            k = 0
            while env.agents and len(out) < rounds:
                obs, _, _, _, infos = env.step(pol.act(obs, infos))
                if k % every == 0 and seen[-1][3].sum() >= 2:
                    out.append(seen[-1])
                k += 1
            seen.clear()
    return env.kernel_static, out


def _tile(rnd, B: int):
    """One round's inputs repeated over B clusters."""
    a, s, d, live = rnd

    def rep(x: Any) -> Any:
        return None if x is None else np.repeat(x, B, axis=0)

    return (
        Actions(*(rep(getattr(a, f)) for f in ("gpus", "bid", "precision", "batch"))),
        RoundState(**{f.name: rep(getattr(s, f.name)) for f in fields(RoundState)}),
        Draws(*(rep(getattr(d, f.name)) for f in fields(Draws))),
        rep(live),
    )


def shapley(st, rnd, estimator: str, M: int, seeds: list, exact_max: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(values (B, T), rows (B,)) of the credit engine on one round, one cluster per seed."""
    spec = RewardSpec(scheme="shapley", shapley_samples=M, shapley_estimator=estimator)
    engine = credit.CreditEngine(st, spec, ("shapley",), exact_max=exact_max)
    a, s, d, live = _tile(rnd, len(seeds))
    c = engine.compute(a, s, d, live, [np.random.default_rng(x) for x in seeds])
    return c.rewards["shapley"], np.asarray(c.rows)


def reference(st, rnd, seed: list, chunks: int) -> tuple[np.ndarray, float]:
    """(reference values (T,), its own mean square error per live tenant): exact up to
    ``EXACT_UP_TO`` live tenants (error 0), else the mean of ``chunks`` x ``REF_CHUNK`` permutations."""
    live = rnd[3][0]
    if live.sum() <= EXACT_UP_TO:
        phi, _ = shapley(st, rnd, "permutation", 1, [seed], exact_max=EXACT_UP_TO)
        return phi[0], 0.0
    parts = np.concatenate([shapley(st, rnd, "permutation", REF_CHUNK, [seed + [c]])[0] for c in range(chunks)])
    mse = float(parts[:, live].var(axis=0, ddof=1).mean() / chunks)
    return parts.mean(axis=0), mse


def game_table(st, rnd) -> np.ndarray:
    """(2^n,) the welfare of every coalition of the round's n live tenants, indexed by bitmask
    (bit j: the j-th live tenant present; the empty coalition 0)."""
    live = rnd[3][0]
    idx = np.flatnonzero(live)
    n = idx.size
    masks = np.arange(1 << n)
    out = np.zeros(1 << n)
    for c in range(1, 1 << n, 8192):
        m = masks[c : c + 8192]
        present = np.zeros((m.size, live.size), bool)
        present[:, idx] = (m[:, None] >> np.arange(n)) & 1
        a, s, d, _ = _tile(rnd, m.size)
        _, out[m] = evaluate_welfare(st, a, s, d, present, full=np.arange(m.size) == 0)
    return out


def strata(v: np.ndarray) -> dict:
    """Where a tenant's marginal contribution varies, for one round's game table ``v``
    (:func:`game_table`): over a uniformly random position k = 0..n-1 and coalition S of k
    others, its variance around the tenant's Shapley value splits into ``profile`` (the mean
    marginal at position k over all tenants), ``tenant_x_position`` (a tenant's own departure
    from that profile) and ``within`` (with who, not how many, precede it); ``within_top`` is
    the part of ``within`` at the top ceil(n/4) positions (banded's band), ``by_position`` its
    mean over tenants at each position, and ``pairwise`` the share of ``within`` that the best
    pairwise game explains (each tenant's marginal regressed, position by position centred, on
    which others are present: what antithetic pairs and banded's control can cancel at best).
    Means over tenants."""
    n = int(np.log2(v.size))
    masks = np.arange(1 << n)
    size = np.array([bin(m).count("1") for m in masks])
    mu, var = np.zeros((n, n)), np.zeros((n, n))
    resid = 0.0  # within-coalition variance the best pairwise game leaves
    for j in range(n):
        without = masks[(masks >> j) & 1 == 0]
        m = v[without | (1 << j)] - v[without]
        k_of = size[without]
        others = ((without[:, None] >> np.delete(np.arange(n), j)) & 1).astype(float)
        for k in range(n):
            at = k_of == k
            mk = m[at]
            mu[j, k], var[j, k] = mk.mean(), mk.var()
            m[at] -= mk.mean()
            others[at] -= others[at].mean(axis=0)
        w = np.sqrt(1.0 / (n * np.bincount(k_of, minlength=n)[k_of]))  # Shapley's weights: each position 1/n
        beta = np.linalg.lstsq(others * w[:, None], m * w, rcond=None)[0]
        resid += float((((m - others @ beta) * w) ** 2).sum())
    dev = mu - mu.mean(axis=1, keepdims=True)  # around each tenant's Shapley value
    profile = dev.mean(axis=0)
    top = n - -(-n // 4)
    return {
        "profile": float((profile**2).mean()),
        "tenant_x_position": float(((dev - profile) ** 2).mean()),
        "within": float(var.mean()),
        "within_top": float(var[:, top:].sum(axis=1).mean() / n),
        "by_position": [float(x) for x in var.mean(axis=0)],
        "pairwise": 1.0 - resid / n / float(var.mean()) if var.mean() > 1e-12 else 0.0,
    }


def measure(st, rounds, refs, estimator: str, M: int, reps: int, seed: list) -> tuple[float, float]:
    """(mean rows, RMSE against the references) of ``estimator`` with M samples."""
    sq, rows, ref_mse = [], [], []
    for r, (rnd, (phi_ref, mse_ref)) in enumerate(zip(rounds, refs, strict=True)):
        live = rnd[3][0]
        sid = SHAPLEY_ESTIMATORS.index(estimator)
        phi, rw = shapley(st, rnd, estimator, M, [seed + [r, sid, M, k] for k in range(reps)])
        sq.append(((phi[:, live] - phi_ref[live]) ** 2).mean())
        rows.append(rw.mean())
        ref_mse.append(mse_ref)
    mse = max(float(np.mean(sq)) - float(np.mean(ref_mse)), 0.0)
    return float(np.mean(rows)), math.sqrt(mse)


def rows_to_reach(curve: list[tuple[int, float, float]], target: float) -> tuple[float, str]:
    """(rows, bound) at which a curve of (M, rows, RMSE) reaches ``target``: interpolated
    log-log between the last point above it and the first at or below it (bound "="), the first
    point's rows when it is already below (bound "<="), or the last point's when none is (">")."""
    for j, (_m, rows, err) in enumerate(curve):
        if err <= target:
            if j == 0:
                return rows, "<="
            _, r0, e0 = curve[j - 1]
            if err in (0.0, e0):
                return rows, "="
            t = (math.log(target) - math.log(e0)) / (math.log(err) - math.log(e0))
            return math.exp(math.log(r0) + t * (math.log(rows) - math.log(r0))), "="
    return curve[-1][1], ">"


def run_scenario(task: str, n: int, policy: str, a, index: int) -> dict:
    t0 = time.perf_counter()
    rounds_n = a.rounds if n <= EXACT_UP_TO else a.rounds_big
    reps = a.reps if n <= EXACT_UP_TO else a.reps_big
    st, rounds = record_rounds(task, n, policy, rounds_n, a.every)
    seed = [a.seed, index]
    refs = [reference(st, rnd, seed + [10_000 + r], a.ref_chunks) for r, rnd in enumerate(rounds)]
    ref_rms = math.sqrt(float(np.mean([np.mean(p[rnd[3][0]] ** 2) for (p, _), rnd in zip(refs, rounds, strict=True)])))
    base_rows, target = measure(st, rounds, refs, "permutation", TARGET_M, reps, seed)
    out = {
        "task": task,
        "N": n,
        "policy": policy,
        "rounds": len(rounds),
        "live": sorted({int(rnd[3][0].sum()) for rnd in rounds}),
        "reps": reps,
        "reference": "exact" if n <= EXACT_UP_TO else f"{a.ref_chunks * REF_CHUNK} permutations",
        "reference_rmse": math.sqrt(float(np.mean([m for _, m in refs]))),
        "phi_rms": ref_rms,
        "target": {"M": TARGET_M, "rows": base_rows, "rmse": target},
        "estimators": {},
    }
    if n <= EXACT_UP_TO:  # where the marginals vary, from every coalition's welfare: means over rounds
        parts = [strata(game_table(st, rnd)) for rnd in rounds]
        out["strata"] = {k: np.mean([p[k] for p in parts], axis=0).tolist() for k in parts[0]}  # by_position: per position
    for est in SHAPLEY_ESTIMATORS:
        same_rows, same_err = (base_rows, target) if est == "permutation" else measure(st, rounds, refs, est, TARGET_M, reps, seed)
        curve = []
        for M in a.grid:
            rows, err = measure(st, rounds, refs, est, M, reps, seed)
            curve.append((M, rows, err))
            if err <= target:
                break
        need, bound = (0.0, "exact") if target == 0.0 else rows_to_reach(curve, target)
        out["estimators"][est] = {
            "curve": [{"M": m, "rows": r, "rmse": e} for m, r, e in curve],
            "rows_needed": need,
            "bound": bound,
            "ratio": (base_rows / need) if need else None,
            "at_target_M": {"rows": same_rows, "rmse": same_err},
        }
    out["seconds"] = time.perf_counter() - t0
    return out


def _ratio(e: dict) -> str:
    if e["bound"] == "exact":
        return "exact"
    sign = {"=": "", "<=": "≥ ", ">": "< "}[e["bound"]]
    rows = {"=": "", "<=": "≤ ", ">": "> "}[e["bound"]] + f"{e['rows_needed']:,.0f}"
    return f"{rows} ({sign}{e['ratio']:.1f}x)"


def meets(e: dict) -> bool:
    """Whether an estimator reaches 64 permutations' error with at least ``TARGET_RATIO`` times
    fewer rows (a ratio that is only a lower bound counts; an upper bound does not)."""
    return e["bound"] in ("=", "<=") and e["ratio"] is not None and e["ratio"] >= TARGET_RATIO


def verdict(s: dict) -> str:
    """The target's verdict for a scenario: where the engine samples (N > EXACT_SHAPLEY_MAX),
    which estimators reach it; at fewer tenants the env computes exact Shapley and the row only
    compares the estimators."""
    if s["N"] <= credit.EXACT_SHAPLEY_MAX:
        return "n/a (the env is exact)"
    ok = [k for k, e in s["estimators"].items() if k != "permutation" and meets(e)]
    return f"**{'yes' if 'regression' in ok else 'no'}**" + (f" ({', '.join(ok)})" if ok else " (none)")


def render(data: dict) -> str:
    """The markdown table of a run (docs/credit_assignment.md, "Shapley for less")."""
    lines = [
        "| task | policy | N | reference | 64 permutations: rows | RMSE (of rms φ) | antithetic: rows for that RMSE | "
        "stratified: rows for that RMSE | banded: rows for that RMSE | regression: rows for that RMSE | regression meets 3x (which do) | "
        "stratified, 64 samples: rows, RMSE | banded, 64 samples: rows, RMSE | regression, 64 samples: rows, RMSE |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for s in data["scenarios"]:
        t = s["target"]
        rel = t["rmse"] / s["phi_rms"] if s["phi_rms"] else 0.0
        task = "easy scaled, auction" if s["task"] == "auction" else s["task"]
        e = s["estimators"]
        lines.append(
            f"| {task} | {s['policy']} | {s['N']} | {s['reference']} | {t['rows']:,.0f} | {t['rmse']:.4f} ({rel:.1%}) "
            f"| {_ratio(e['antithetic'])} | {_ratio(e['stratified'])} | {_ratio(e['banded'])} | **{_ratio(e['regression'])}** | {verdict(s)} "
            + "".join(
                f"| {e[k]['at_target_M']['rows']:,.0f}, {e[k]['at_target_M']['rmse']:.4f} " for k in ("stratified", "banded", "regression")
            )
            + "|"
        )
    return "\n".join(lines)


def render_strata(data: dict) -> str:
    """The markdown table of where the marginals vary (docs/credit_assignment.md, "Shapley for less")."""
    lines = [
        "| task | policy | N | variance of a marginal | common position profile | tenant × position | within coalitions "
        "| of which in the top quarter of positions | of which a pairwise game explains |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in data["scenarios"]:
        if "strata" not in s:
            continue
        v = s["strata"]
        total = v["profile"] + v["tenant_x_position"] + v["within"]
        task = "easy scaled, auction" if s["task"] == "auction" else s["task"]
        lines.append(
            f"| {task} | {s['policy']} | {s['N']} | {total:.4f} | {v['profile'] / total:.0%} | {v['tenant_x_position'] / total:.0%} "
            f"| {v['within'] / total:.0%} | {v['within_top'] / v['within'] if v['within'] else 0:.0%} | {v['pairwise']:.0%} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=24, help="rounds per scenario up to 16 tenants")
    ap.add_argument("--rounds-big", type=int, default=8, help="rounds per scenario above 16 tenants")
    ap.add_argument("--reps", type=int, default=16, help="independent draws of each estimator per round up to 16 tenants")
    ap.add_argument("--reps-big", type=int, default=6, help="... above 16 tenants")
    ap.add_argument("--every", type=int, default=4, help="record every k-th round of the episodes")
    ap.add_argument("--ref-chunks", type=int, default=8, help="chunks of 512 permutations in the reference above 16 tenants")
    ap.add_argument("--scenarios", default="", help="comma-separated task:N:policy (default: the table's 13)")
    ap.add_argument("--json", default=None, help="write the results here (docs/data/shapley_estimators.json)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: auction N = 6 and hard, 3 rounds, 2 draws")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core")
    a = ap.parse_args(argv)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    scen = [tuple(x.split(":")) for x in a.scenarios.split(",")] if a.scenarios else list(SCENARIOS)
    scen = [(t, int(n), p) for t, n, p in scen]
    a.grid = GRID
    if a.quick:
        scen = [("auction", 6, "random"), ("hard", 16, "greedy")]
        a.rounds, a.reps, a.every, a.grid = 3, 2, 2, (4, 8, 16)
    results = []
    for i, (task, n, policy) in enumerate(scen):
        r = run_scenario(task, n, policy, a, SCENARIOS.index((task, n, policy)) if (task, n, policy) in SCENARIOS else 100 + i)
        results.append(r)
        e = r["estimators"]
        print(
            f"{task} N={n} {policy}: 64 permutations {r['target']['rows']:,.0f} rows, RMSE {r['target']['rmse']:.5f}; "
            f"antithetic {_ratio(e['antithetic'])}; stratified {_ratio(e['stratified'])}; banded {_ratio(e['banded'])}; "
            f"regression {_ratio(e['regression'])} [{r['seconds']:.0f} s]",
            flush=True,
        )
    data = {
        "command": "taskset -c 0 .venv/bin/python experiments/shapley_estimators.py --json docs/data/shapley_estimators.json",
        "settings": {k: getattr(a, k) for k in ("seed", "rounds", "rounds_big", "reps", "reps_big", "every", "ref_chunks", "quick")}
        | {"grid": list(a.grid), "target_M": TARGET_M, "exact_up_to": EXACT_UP_TO, "ref_chunk": REF_CHUNK},
        "scenarios": results,
    }
    print()
    print(render(data))
    print()
    print(render_strata(data))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return data


if __name__ == "__main__":
    main()

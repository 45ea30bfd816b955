"""Why PPO stalls on ``power_n8``: the joint action every arm learns, and what each reward says of it.

How to run:  taskset -c 0 .venv/bin/python experiments/power_trap.py [--json docs/data/power_trap.json] [--scenarios 4]

The suite study's pilot (docs/data/credit_suite_pilot_a and _b) found every arm on ``power_n8``
(local, global, difference, shapley, mappo, difference_k4) at the same held-out score, 0.427 (local,
difference, shapley and mappo bit for bit), below the open-loop baseline and far below the
planner, and 288 iterations land on the same policy as 96. The greedy policy those runs learn
requests 6 GPUs for every tenant, whatever its priority: max-min gives each of the 8 trainers 4
of the 32 GPUs, and the rack's power cap (58 % of its GPUs' TDP) throttles all of them. The
planner seats the low-priority trainers out and gives their GPUs and power to the high-priority
ones.

This script plays both joint actions on the first ``--scenarios`` held-out scenarios (one cluster
each; every other field of an action as ``precision_expert`` sets it) and records the rounds
(:class:`fleet_marl.environment.horizon.Recorder`). For the tenants of each priority it prints the
mean per tenant-round of

- ``local``: the tenant's own utility;
- ``D^1``: the env's difference reward, ``G(z) − G(z_−i)`` for round t alone;
- ``D^k`` for k = 4 and 16, both branches: ``sits_out`` (i out of round t only) and ``withdrawn``
  (i out from t on);

and the episode welfare of each joint action. A positive mean for a low-priority tenant says the
reward tells it to stay; a negative one says leave. One round's counterfactual hands a removed
tenant's GPUs to the others, who must restart to take them, and charges that restart to the
removal, so it credits staying; a removal carried forward pays the restart once and collects the
freed GPUs and power for the rounds after it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from fleet_marl import suite
from fleet_marl.environment.horizon import Recorder
from fleet_marl.environment.parallel import parallel_env
from fleet_marl.environment.vector import FleetVectorEnv
from fleet_marl.evaluation.loading import load_policy

TASK = "power_n8"
#: What the learned policies request (every tenant, every round).
LEARNED_GPUS = 6
HORIZONS = ((4, "sits_out"), (4, "withdrawn"), (16, "sits_out"), (16, "withdrawn"))


def planner_gpus(cfg: dict, seed: int) -> list[int]:
    """The GPUs the planner requests per tenant in round 0 of the scenario (it holds them every round here)."""
    env = parallel_env(config=cfg)
    obs, infos = env.reset(seed=seed)
    pol = load_policy("planner", env)
    pol.reset(seed)
    acts = pol.act(obs, infos)
    return [int(acts[a][0]) for a in env.possible_agents]


def expert_fields(cfg: dict, seed: int) -> np.ndarray:
    """(T, 8) precision_expert's round-0 action of each tenant: the fields other than the GPUs."""
    env = parallel_env(config=cfg)
    obs, infos = env.reset(seed=seed)
    pol = load_policy("precision_expert", env)
    pol.reset(seed)
    acts = pol.act(obs, infos)
    return np.stack([acts[a] for a in env.possible_agents]).astype(np.int64)


def play(cfg: dict, seed: int, gpus: list[int]) -> dict:
    """Play the fixed joint action ``gpus`` (the other fields precision_expert's) for the episode; per-tenant rewards."""
    venv = FleetVectorEnv(1, config=cfg, reward_scheme="difference")
    venv.reset(seed=seed)
    rec = Recorder(venv)
    base = expert_fields(cfg, seed)
    base[:, 0] = gpus
    act = base[None]
    local, d1, welfare = [], [], 0.0
    while True:
        live = venv.alive.copy()
        _, rew, _, _, infos = rec.step(venv, act)
        local.append(np.where(live[0], np.asarray(infos["utility"])[0], np.nan))
        d1.append(np.where(live[0], np.asarray(rew)[0], np.nan))
        welfare += float(np.asarray(infos["welfare"])[0])
        if np.asarray(infos["_final"])[0]:
            break
    out = {"local": np.array(local), "D^1": np.array(d1)}
    rounds = len(local)
    for k, variant in HORIZONS:
        out[f"D^{k} {variant}"] = rec.differences(k, variant, count=rounds)[:, 0, :]
    return {"welfare": welfare, "rewards": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", type=int, default=4)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows: list[dict] = []
    for s in range(args.scenarios):
        cfg, seed = suite.scenario(TASK, s, "heldout"), suite.env_seed(s, "heldout")
        prio = np.array([t.get("priority", 1.0) for t in cfg["tenants"]])
        plan = planner_gpus(cfg, seed)
        for name, gpus in (("learned", [LEARNED_GPUS] * len(prio)), ("planner", plan)):
            res = play(cfg, seed, gpus)
            for group, mask in (("priority 1", prio == 1.0), ("priority 2", prio == 2.0)):
                if not mask.any():
                    continue
                row = {"scenario": s, "joint action": name, "tenants": group, "welfare": res["welfare"]}
                row["gpus requested"] = float(np.mean(np.array(gpus)[mask]))
                for key, r in res["rewards"].items():
                    row[key] = float(np.nanmean(r[:, mask])) if np.isfinite(r[:, mask]).any() else float("nan")
                rows.append(row)
    keys = ["local", "D^1", *(f"D^{k} {v}" for k, v in HORIZONS)]
    print("| joint action | tenants | GPUs requested | episode welfare | " + " | ".join(keys) + " |")
    print("|" + "---|" * (4 + len(keys)))
    summary = []
    for name in ("learned", "planner"):
        for group in ("priority 1", "priority 2"):
            rs = [r for r in rows if r["joint action"] == name and r["tenants"] == group]
            if not rs:
                continue
            m = {k: float(np.nanmean([r[k] for r in rs])) for k in ["gpus requested", "welfare", *keys]}
            summary.append({"joint action": name, "tenants": group, **m})
            print(
                f"| {name} | {group} | {m['gpus requested']:.1f} | {m['welfare']:.1f} | " + " | ".join(f"{m[k]:+.3f}" for k in keys) + " |"
            )
    if args.json:
        args.json.write_text(
            json.dumps({"task": TASK, "split": "heldout", "scenarios": args.scenarios, "summary": summary, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()

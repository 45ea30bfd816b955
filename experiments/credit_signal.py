"""How much of each reward a tenant's own action moves, in the credit-assignment study's scenario.

How to run:  .venv/bin/python experiments/credit_signal.py [--episodes 20] [--n 2,4,8,16] [--mechanism proportional,auction]

It plays the reference ``random`` policy (uniform over the mask's choices, dimension by
dimension: roughly what an untrained PPO policy does) on
``parallel_env(task="easy", **scaled(N, mechanism))`` (by default under ``proportional``, the
study's arbiter) and reads each tenant's ``local`` (L_i), ``global`` (G) and ``difference``
(D_i) rewards from ``infos[agent]["rewards"]``. For each tenant it regresses each reward on
the tenant's own action (one-hot per action field, least squares), then averages over the
tenants:

- **own-action R²** (adjusted) of G, D_i and L_i: the share of the reward's variance the
  tenant's own action explains. The rest is the state and the other tenants. This is the
  "learnability" of Agogino and Tumer (JAAMAS 17, 2008) seen from logged play.
- **alignment with D_i**: the correlation, over the tenant's rounds, between the part of L_i
  (or G) its own action explains and the part of D_i its own action explains. Near 1 means
  the reward ranks the tenant's own actions as its marginal contribution to the welfare does.
- **top − bottom bid**: how much L_i and D_i change, on average, between the highest and the
  lowest bid level. Under proportional share a tenant pays its bid, so a negative L_i column
  means a selfish tenant already pays for the GPUs it takes from others. Under ``priority``
  and ``auction`` a higher bid can help the tenant while it costs the others.

docs/credit_assignment.md uses this table to explain the study's results. It takes about 30 s
on one core with the defaults.
"""

from __future__ import annotations

import argparse

import numpy as np

import fleet_marl
from fleet_marl import policies
from fleet_marl.config import MECHANISMS
from fleet_marl.environment import ACTION_FIELDS
from fleet_marl.tasks import scaled

SCHEMES = ("global", "difference", "local")
BID = ACTION_FIELDS.index("bid_level")


def play(n: int, episodes: int, seed: int = 0, mechanism: str = "proportional") -> tuple[dict, dict, np.ndarray]:
    """``(actions, rewards, nvec)``: per tenant, its actions ``(rounds, 8)`` and its rewards
    ``(rounds, 3)`` in the order of ``SCHEMES``, over ``episodes`` random episodes."""
    env = fleet_marl.parallel_env(task="easy", **scaled(n, mechanism))
    policy = policies.make("random", env)
    acts = {a: [] for a in env.possible_agents}
    rews = {a: [] for a in env.possible_agents}
    for ep in range(episodes):
        obs, infos = env.reset(seed=seed + ep)
        policy.reset(seed + ep)
        while env.agents:
            step = policy.act(obs, infos)
            obs, _, _, _, infos = env.step(step)
            for a, x in step.items():
                acts[a].append(x)
                rews[a].append([infos[a][f"reward_{s}"] for s in SCHEMES])
    nvec = env.action_space(env.possible_agents[0]).nvec
    env.close()
    return ({a: np.asarray(v) for a, v in acts.items()}, {a: np.asarray(v, dtype=float) for a, v in rews.items()}, nvec)


def own_action_fit(x: np.ndarray, y: np.ndarray, nvec) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of every column of ``y`` on the one-hot of the action ``x``:
    ``(fitted values, adjusted R² per column)``."""
    cols = [np.ones(len(x))] + [(x[:, k] == v).astype(float) for k in range(len(nvec)) for v in range(1, nvec[k])]
    f = np.stack(cols, axis=1)
    f = f[:, [0] + [j for j in range(1, f.shape[1]) if f[:, j].std() > 0]]
    beta, *_ = np.linalg.lstsq(f, y, rcond=None)
    fit = f @ beta
    m, p = len(x), f.shape[1] - 1
    r2 = 1 - ((y - fit) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)
    return fit, 1 - (1 - r2) * (m - 1) / (m - p - 1)


def row(n: int, episodes: int, mechanism: str = "proportional") -> dict[str, float]:
    acts, rews, nvec = play(n, episodes, mechanism=mechanism)
    per = []
    for a in acts:
        x, y = acts[a], rews[a]
        fit, r2 = own_action_fit(x, y, nvec)
        g, d, loc = fit[:, 0], fit[:, 1], fit[:, 2]
        top, bottom = x[:, BID] == nvec[BID] - 1, x[:, BID] == 0
        bid = y[top].mean(0) - y[bottom].mean(0)
        per.append([*r2, np.corrcoef(loc, d)[0, 1], np.corrcoef(g, d)[0, 1], bid[2], bid[1]])
    m = np.mean(per, axis=0)
    keys = ("r2_global", "r2_difference", "r2_local", "align_local", "align_global", "bid_local", "bid_difference")
    return {"n": n, "agent_steps": sum(len(v) for v in acts.values()), **{k: float(v) for k, v in zip(keys, m, strict=False)}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=20, help="random episodes per N (default 20)")
    p.add_argument("--n", default="2,4,8,16", help="comma-separated tenant counts (default 2,4,8,16)")
    p.add_argument(
        "--mechanism",
        default="proportional",
        help=f"comma-separated arbiters from {', '.join(MECHANISMS)} (default proportional, the study's)",
    )
    args = p.parse_args(argv)
    mechanisms = [m.strip() for m in args.mechanism.split(",") if m.strip()]
    for m in mechanisms:
        if m not in MECHANISMS:
            p.error(f"--mechanism {m!r}: expected arbiters from {', '.join(MECHANISMS)}")
    print("| arbiter | N | agent-steps | own-action R²: G | D_i | L_i | alignment with D_i: L_i | G | top − bottom bid: L_i | D_i |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in mechanisms:
        for n in (int(v) for v in args.n.split(",")):
            r = row(n, args.episodes, m)
            print(
                f"| `{m}` | {n} | {r['agent_steps']:,} | {r['r2_global']:.3f} | {r['r2_difference']:.3f} | {r['r2_local']:.3f} | "
                f"{r['align_local']:.3f} | {r['align_global']:.3f} | {r['bid_local']:+.3f} | {r['bid_difference']:+.3f} |"
            )


if __name__ == "__main__":
    main()

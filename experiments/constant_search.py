"""How far is the hindsight reference from the best play? (issue 34, item 1)

How to run:  taskset -c 0 .venv/bin/python experiments/constant_search.py --task trace --start planner
             (``--start`` takes a reference policy's name or a ``fleet-marl train`` run folder;
             ``--seed``, ``--sweeps``; about a minute on ``trace``, one episode is 0.06 s)
What it prints: the start's welfare on the seed, then every move of a coordinate ascent over
*constant* joint actions (each tenant plays one fixed action every round): one tenant's one
action dimension set to each of its values in turn, the whole episode played for each, a move
kept when the episode's welfare rises; ``--sweeps`` passes over every tenant and dimension, or
fewer when a pass changes nothing. It starts from each tenant's most frequent action in the
start policy's episode. Last, the best constant joint action's welfare next to the grader's
``planner`` and ``hindsight`` references on the same seed.

Why: the hindsight policy (``fleet_marl.policies.planner.HindsightPolicy``) searches each
round over a fixed set of precision maps with the true draws, a few rounds ahead. It is a
heuristic, not a bound: this whole-episode search over constant plays beat it on ``trace``
(336.6 against 330.8 on seed 0), which is why the grader's hindsight reference now also runs an
open-loop search on each seed (``fleet_marl.policies.open_loop``, ``fleet-marl open-loop``
generalizes this script to per-block tables and many seeds; ``docs/policies.md``, "The
hindsight reference"). The last line's ``hindsight`` is that reference.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from fleet_marl.evaluation.loading import load_policy
from fleet_marl.evaluation.reference import HINDSIGHT, REFERENCE, reference_episodes
from fleet_marl.evaluation.runner import make_env


def welfare(env, profile: dict[str, np.ndarray], seed: int) -> float:
    """The episode's welfare when every tenant plays its action in ``profile`` every round."""
    env.reset(seed=seed)
    while env.agents:
        env.step({a: profile[a] for a in env.agents})
    return float(max(r["welfare"] for r in env.episode_reports.values()))


def start_profile(env, spec: str, seed: int) -> dict[str, np.ndarray]:
    """Each tenant's most frequent action in ``spec``'s episode on ``seed``."""
    policy = load_policy(spec, env)
    obs, infos = env.reset(seed=seed)
    policy.reset(seed)
    seen: dict[str, collections.Counter] = {a: collections.Counter() for a in env.possible_agents}
    while env.agents:
        acts = policy.act(obs, infos)
        for a, x in acts.items():
            seen[a][tuple(int(v) for v in np.asarray(x))] += 1
        obs, _, _, _, infos = env.step(acts)
    return {a: np.array(c.most_common(1)[0][0], np.int64) for a, c in seen.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="trace")
    p.add_argument("--start", default="planner", help="a reference policy's name or a fleet-marl train run folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweeps", type=int, default=3)
    a = p.parse_args(argv)
    env = make_env(a.task)
    profile = start_profile(env, a.start, a.seed)
    best = welfare(env, profile, a.seed)
    print(f"{a.task} seed {a.seed}: start from {a.start}'s most frequent actions: welfare {best:.1f}")
    for sweep in range(a.sweeps):
        moved = False
        for agent in env.possible_agents:
            nvec = env.action_space(agent).nvec
            for d in range(len(nvec)):
                for v in range(int(nvec[d])):
                    if v == profile[agent][d]:
                        continue
                    trial = {k: x.copy() for k, x in profile.items()}
                    trial[agent][d] = v
                    w = welfare(env, trial, a.seed)
                    if w > best + 1e-9:
                        best, profile, moved = w, trial, True
                        print(f"  pass {sweep + 1}: {agent} dimension {d} -> {v}: welfare {w:.1f}")
        if not moved:
            break
    refs = {name: reference_episodes(a.task, name, [a.seed], {}, None)[0].welfare for name in (REFERENCE, HINDSIGHT)}
    print(f"best constant joint action: welfare {best:.1f}; planner {refs[REFERENCE]:.1f}, hindsight {refs[HINDSIGHT]:.1f}")
    for agent, x in profile.items():
        print(f"  {agent}: {x.tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a trained policy does greedily and when it samples: bids, requests, welfare, starvation.

How to run:  .venv/bin/python experiments/greedy_vs_sampled.py [--n 8] [--mechanism auction]
             [--schemes local,difference] [--seed 0] [--episodes 5]

For each reward scheme it trains one run exactly as the first credit-assignment study did
(:class:`Setup`, the settings of ``docs/data/credit_assignment/study.json``: same scenario, budget
and PPO settings, under ``--mechanism``), then grades the policy twice with the grader on seeds 0 .. episodes-1: greedy (the
mode of every action dimension, what ``fleet-marl compare`` grades) and sampled
(``ModulePolicy(explore=True)``, what the env runners play in training). It prints one row
per (scheme, play):

- welfare and starvation events per episode (the grader's);
- the share of decisions at the top bid level, and the mean GPU request;
- demand / supply: the GPUs requested in a round over the cluster's GPUs, averaged over rounds,
  and the share of rounds where the requests exceed the cluster (requests as chosen, before
  the arbiter caps them at what a budget affords). Under ``auction``, a round where the requests fit in the cluster clears at the reserve price
  (nobody is left unserved); one where they do not clears at the highest unserved bid, paid by
  everyone (docs/model.md §7).

docs/credit_assignment.md uses it to explain why greedy local policies collapse under the
auction. About 2.5 minutes per scheme at N = 8 on one core.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from fleet_marl.studies.credit.first_study import DEFAULTS
from fleet_marl.tasks import scaled


class Setup:
    """A run of the first credit-assignment study (RLlib): its scenario at N tenants under
    ``mechanism`` and its PPO settings (:data:`~fleet_marl.studies.credit.first_study.DEFAULTS`)."""

    def __init__(self, mechanism: str = "auction", max_cycles: int = DEFAULTS["max_cycles"]):
        self.mechanism, self.max_cycles = mechanism, max_cycles

    def env(self, n: int) -> dict:
        """The ``parallel_env`` overrides of the N-tenant scenario (task ``easy``)."""
        return {**scaled(n, self.mechanism), "max_cycles": self.max_cycles}

    def train_config(self, n: int, scheme: str, seed: int):
        from fleet_marl.rllib.config import TrainConfig  # Ray: only when a run trains

        d = DEFAULTS
        return TrainConfig(
            task="easy",
            reward_scheme=scheme,
            sharing=d["sharing"],
            env={**self.env(n), "shapley_samples": d["shapley_samples"]},
            iterations=d["budgets"][str(n)] // d["train_batch_size"],
            seed=seed,
            train_batch_size=d["train_batch_size"],
            minibatch_size=d["minibatch_size"],
            num_epochs=d["num_epochs"],
            lr=d["lr"],
            eval_interval=0,
            checkpoint_interval=0,
            out="runs/credit_assignment",
            name=f"n{n}-{scheme}-{seed}",
        )


class Recorder:
    """Wraps a policy and records every action it takes."""

    def __init__(self, policy):
        self.policy, self.actions, self.rounds = policy, [], []

    def reset(self, seed=None):
        self.policy.reset(seed)

    def act(self, observations, infos):
        acts = self.policy.act(observations, infos)
        self.rounds.append(np.stack(list(acts.values())))
        return acts


def measure(algo, n: int, study, explore: bool, episodes: int) -> dict:
    from fleet_marl import evaluation
    from fleet_marl.environment import ACTION_FIELDS
    from fleet_marl.rllib.evaluation import algorithm_policy

    rec: list[Recorder] = []

    def factory(env):
        rec.append(Recorder(algorithm_policy(algo, env, explore=explore)))
        return rec[-1]

    ev = evaluation.evaluate("easy", factory, episodes=episodes, seed=0, overrides=study.env(n), progress=False)
    rounds = [r for x in rec for r in x.rounds]
    acts = np.concatenate(rounds)
    gpus, bid = ACTION_FIELDS.index("gpus"), ACTION_FIELDS.index("bid_level")
    supply = int(rec[0].policy.env.kernel_static.pool_capacity.sum())  # the cluster's GPUs
    return {
        "welfare": float(ev.welfare.mean()),
        "starvation": float(np.mean([e.starvation_events for e in ev.episodes])),
        "top_bid": float(np.mean(acts[:, bid] == rec[0].policy.env.nvec[0, bid] - 1)),
        "request": float(acts[:, gpus].mean()),
        "demand": float(np.mean([r[:, gpus].sum() / supply for r in rounds])),
        "oversubscribed": float(np.mean([r[:, gpus].sum() > supply for r in rounds])),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=8, help="tenants (default 8)")
    p.add_argument("--mechanism", default="auction", help="arbiter (default auction)")
    p.add_argument("--schemes", default="local,difference", help="reward schemes (default local,difference)")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument("--episodes", type=int, default=5, help="grader episodes per play (default 5)")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from tqdm import tqdm

    from fleet_marl.rllib.config import build
    from fleet_marl.rllib.train import quiet

    study = Setup(mechanism=args.mechanism)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    quiet()
    rows = []
    try:
        for scheme in args.schemes.split(","):
            tc = study.train_config(args.n, scheme, args.seed)
            algo = build(tc).build_algo()
            try:
                for _ in tqdm(range(tc.iterations), desc=f"training {scheme}", unit="it", leave=False):
                    algo.train()
                for explore in (False, True):
                    rows.append((scheme, "sampled" if explore else "greedy", measure(algo, args.n, study, explore, args.episodes)))
            finally:
                algo.stop()
    finally:
        ray.shutdown()
    print(f"N = {args.n}, {args.mechanism}, training seed {args.seed}, grader seeds 0..{args.episodes - 1}\n")
    print("| scheme | play | welfare | starvation events | top bid | mean request (GPUs) | demand / supply | oversubscribed rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for scheme, play, m in rows:
        print(
            f"| `{scheme}` | {play} | {m['welfare']:.1f} | {m['starvation']:.1f} | {m['top_bid']:.0%} | {m['request']:.2f} | {m['demand']:.2f} | {m['oversubscribed']:.0%} |"
        )


if __name__ == "__main__":
    main()

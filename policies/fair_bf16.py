"""A simple heuristic, written against the plain PettingZoo parallel API: each tenant asks for its
max-min fair share of GPUs (the ``fair_share`` observation), bids list price, runs BF16 on every
layer group and a middling batch.

Grade it:   fleet-marl evaluate --task easy --policy policies/fair_bf16.py

It reads nothing but the observation and the action mask, so it plays any PettingZoo client's
loop unchanged, and under the sequential protocol too (the grader hands ``act`` one agent at a
time; ``act_one`` is the same rule for one agent, for an AEC loop of your own).
"""

import numpy as np

from fleet_marl.environment import OBS_FIELDS

FAIR = [name for name, _ in OBS_FIELDS].index("fair_share")  # max-min fair share / max_gpus
LIST_PRICE, BF16, BATCH_LEVEL = 2, 1, 3  # bid level x1.0, precision index of BF16, batch 8


class FairBF16:
    """Its fair share of GPUs at list price, BF16, batch 8; a choice the mask forbids is capped."""

    def __init__(self, env):
        self.env = env

    def reset(self, seed=None):
        pass  # no randomness, no memory

    def act_one(self, observation, agent, info):
        gpu_mask = np.asarray(info["action_mask"][0])
        allowed = np.flatnonzero(gpu_mask)
        gpus = int(observation[FAIR] * (len(gpu_mask) - 1))
        gpus = int(allowed[allowed <= gpus].max()) if (allowed <= gpus).any() else 0
        return np.array([gpus, LIST_PRICE, BF16, BF16, BF16, BF16, BF16, BATCH_LEVEL])

    def act(self, observations, infos):
        return {a: self.act_one(observations[a], a, infos[a]) for a in observations if a in self.env.agents}

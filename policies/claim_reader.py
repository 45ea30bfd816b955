"""A policy that reads the claims made before its turn under the sequential protocol
(``fleet_marl.env(protocol="sequential")``, docs/environment.md "The sequential protocol").

On its turn a tenant sees, in its observation's claim features, what the tenants before it asked
of its pool this round: ``unclaimed`` (what they left, / capacity) and ``after_in_pool`` (how
many of its pool still claim after it). It takes what is left, shared with those still to come,
never less than one GPU while any is left and never more than its mask allows; BF16, list price,
batch 8 for a trainer and 32 concurrent sequences for a server (at 8, a bursty server's queue
outgrows its steps: every forward pass pays a fixed overhead and per-kernel stalls).
Under the simultaneous protocol (no claim features) it falls back to its fair share.

Grade it:   fleet-marl evaluate --task medium --policy policies/claim_reader.py --protocol sequential --turn-order rotating
"""

import numpy as np

from fleet_marl.environment import OBS_FIELDS, SEQUENTIAL_OBS_INDEX

FAIR = [name for name, _ in OBS_FIELDS].index("fair_share")
UNCLAIMED, AFTER = SEQUENTIAL_OBS_INDEX["unclaimed"], SEQUENTIAL_OBS_INDEX["after_in_pool"]
LIST_PRICE, BF16 = 2, 1
TRAIN_BATCH_LEVEL, SERVE_BATCH_LEVEL = 3, 5  # BATCH_LEVELS: 8 sequences per GPU, 32 concurrent sequences


class ClaimReader:
    """What the tenants before it left of its pool, split with those after it."""

    def __init__(self, env):
        self.env = env

    def reset(self, seed=None):
        pass

    def _capacity(self, agent):
        cfg = self.env.config
        gpu_type = cfg.tenants[self.env.agent_index[agent]].gpu_type
        return cfg.cluster.capacity(gpu_type), sum(t.gpu_type == gpu_type for t in cfg.tenants)

    def act_one(self, observation, agent, info):
        gpu_mask = np.asarray(info["action_mask"][0])
        allowed = np.flatnonzero(gpu_mask)
        capacity, pool_tenants = self._capacity(agent)
        serves = self.env.config.tenants[self.env.agent_index[agent]].kind == "serve"
        if len(observation) > UNCLAIMED:  # the sequential protocol: the claims before its turn
            left = observation[UNCLAIMED] * capacity
            after = round(observation[AFTER] * pool_tenants)
            want = int(np.ceil(left / (after + 1))) if left >= 1 else 0
        else:
            want = int(observation[FAIR] * (len(gpu_mask) - 1))
        gpus = int(allowed[allowed <= want].max()) if (allowed <= want).any() else 0
        return np.array([gpus, LIST_PRICE, BF16, BF16, BF16, BF16, BF16, SERVE_BATCH_LEVEL if serves else TRAIN_BATCH_LEVEL])

    def act(self, observations, infos):
        return {a: self.act_one(observations[a], a, infos[a]) for a in observations if a in self.env.agents}

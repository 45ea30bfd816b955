"""A policy that calls the batched kernel as a look-ahead: before it acts, it scores every GPU
count each tenant may ask for by evaluating the coming round with ``fleet_marl.kernel.evaluate``,
the others holding their default actions, and asks for the count that gives the cluster the
most welfare. One kernel call per tenant and round, a row per candidate (docs/kernel.md).

Grade it:   fleet-marl evaluate --task easy --policy policies/kernel_lookahead.py

It reads the env's public views (``kernel_static``, ``observed_round()``, ``default_actions``,
``default_action_index``) as the reference planner does (``fleet_marl/policies/planner.py``,
which searches further: every field, several passes); it needs a ``FleetParallelEnv`` (or
``RemoteParallelEnv``) and the simultaneous protocol.
"""

import numpy as np

from fleet_marl.kernel import Actions, Draws, evaluate


class KernelLookahead:
    """Each tenant's GPU count chosen by a one-round kernel look-ahead on the cluster's welfare."""

    def __init__(self, env):
        self.env = env

    def reset(self, seed=None):
        pass

    def act(self, observations, infos):
        env = self.env
        st, seen = env.kernel_static, env.observed_round()
        draws = Draws.expected(st)
        base = env.default_actions  # (T,) arrays: what every tenant does unless it is the one tried
        index = env.default_action_index.copy()  # (T, 8) the same as action indices
        for agent in observations:
            if agent not in env.agents:
                continue
            i = env.agent_index[agent]
            counts = np.flatnonzero(np.asarray(infos[agent]["action_mask"][0]))  # the GPU counts its mask allows
            k = len(counts)
            rows = Actions(gpus=np.repeat(base.gpus[None], k, 0), bid=np.repeat(base.bid[None], k, 0),
                           precision=np.repeat(base.precision[None], k, 0), batch=np.repeat(base.batch[None], k, 0))
            rows.gpus[:, i] = counts
            welfare = evaluate(st, rows, seen.state, draws, seen.live).welfare  # (k,): one row per candidate
            index[i, 0] = counts[int(np.argmax(welfare))]
        return {a: index[env.agent_index[a]].copy() for a in observations if a in env.agents}

"""The degenerate-strategy detector on the play the credit study's trained ``difference``
policies flagged at N >= 32 (issue 34, item 5; evidence: ``experiments/detector_check.py``).

That play asks for every layer group at the lowest precision. It is not good play that the
detector misreads: it requests numerics the safety check marks unsafe on every flagged round,
and only the check's ``project`` mode (the unsafe groups run in BF16) keeps its welfare level
with the safe map's. So the override must bite, and it does: the reward of a flagged round is
at most ``degenerate_floor``, far below its raw ``difference`` reward."""

from __future__ import annotations

import numpy as np

import fleet_marl
from fleet_marl import catalog, policies
from fleet_marl.environment.spaces import PREC
from fleet_marl.fairness import lowest_precision
from fleet_marl.tasks import scaled

BF16 = catalog.PRECISION_CODE["bf16"]


def _play(env, table, rounds=4, seed=0):
    """precision_expert's actions with each tenant's precision map replaced by ``table[t]``:
    (welfare, flagged tenant-rounds, their rewards, their raw difference rewards, unsafe and
    projected flags of those rounds)."""
    pol = policies.make("precision_expert", env)
    obs, infos = env.reset(seed=seed)
    pol.reset(seed)
    welfare, flagged = 0.0, []
    for _ in range(rounds):
        acts = pol.act(obs, infos)
        for a, act in acts.items():
            if table[env.agent_index[a], 0] >= 0:
                act[PREC] = table[env.agent_index[a]]
        obs, rew, _, _, infos = env.step(acts)
        o = env.last_outcome
        welfare += float(o.welfare)
        for a in rew:
            i = env.agent_index[a]
            if infos[a]["degenerate"]:
                flagged.append((rew[a], infos[a]["reward_difference"], bool(o.unsafe_numerics[i]), bool(o.projected[i])))
    return welfare, flagged


def test_the_flagged_play_is_unsafe_and_the_floor_bites():
    env = fleet_marl.parallel_env(task="easy", reward_scheme="difference", compute_all=False, **scaled(32))
    st = env.kernel_static
    low = lowest_precision(st.supported, st.is_train)
    lowest = np.repeat(low[:, None], catalog.N_GROUPS, axis=1)
    safe = np.where((low[:, None] >= 0) & catalog.UNSAFE[:, np.maximum(low, 0)].T, BF16, lowest)
    w_low, flagged = _play(env, lowest)
    w_safe, flagged_safe = _play(env, safe)
    assert len(flagged) >= 32 * 4 * 0.8, len(flagged)  # nearly every tenant, every round
    assert not flagged_safe  # the same precisions on the safe groups only: not flagged
    assert all(unsafe and projected for _, _, unsafe, projected in flagged)  # the check rewrites every flagged request
    assert w_low == w_safe  # ... into the safe map, so welfare cannot tell them apart
    floor = env.config.reward.degenerate_floor
    assert all(r <= floor for r, _, _, _ in flagged)
    # the floor lowers most flagged rewards: 86 % of these four rounds (98 % of whole episodes in detector_check.py)
    assert np.mean([raw > floor for _, raw, _, _ in flagged]) > 0.75

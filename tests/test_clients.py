"""Outside clients, each run for real and briefly, each using only the public PettingZoo API:
SB3's PPO through SuperSuit, TorchRL's ``PettingZooWrapper`` (with ``check_env_specs`` and a
rollout past an episode end), and RLlib's own ``ParallelPettingZooEnv``, with the two places it
falls short next to ``fleet_marl.rllib``'s env (docs/environment.md, "Outside clients").

Each test fails if its client broke on the env: a crash, a missed episode end, a spec that does
not match what the env returns. No ``ray.init`` here (RLlib training is ``tests/test_rllib.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fleet_marl
from fleet_marl import catalog
from fleet_marl.config import FleetConfig
from fleet_marl.environment import ACTION_FIELDS, FleetParallelEnv
from fleet_marl.tasks import task_dict

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny networks: torch's thread pool only fights the other processes of a 2-core machine
    (a PPO iteration takes 10x longer with it)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


def h100_rounds(cfg: dict, n: float) -> float:
    """USD of ``n`` H100 GPU-rounds at list price in scenario ``cfg``: from the catalog's price and
    the round length, so a budget meant to run out stays meant to when the prices change (a
    hard-coded $0.50 bought one round of 4 GPUs at $6.88 per GPU-hour, two at Modal's $3.9492;
    issue 30)."""
    return n * catalog.gpu("h100-sxm").price_per_hour * FleetConfig.from_dict(cfg).cluster.round_seconds / 3600.0


def uneven_tiny(**opts) -> FleetParallelEnv:
    """tiny where tenant_1 goes broke within a few rounds (a budget of 4.35 GPU-rounds at list
    price) while tenant_0 plays on to the horizon: agents leave at different times."""
    cfg = task_dict("tiny")
    cfg["tenants"][1]["budget"] = h100_rounds(cfg, 4.35)
    return fleet_marl.parallel_env(config=cfg, **opts)


class StepSpy:
    """Wraps ``env.step`` to count what the client sends: actions of agents that already left,
    and steps with no live agent."""

    def __init__(self, env):
        self.env, self.step, self.departed, self.empty, self.steps = env, env.step, 0, 0, 0
        env.step = self

    def __call__(self, actions):
        self.steps += 1
        self.departed += len(set(actions) - set(self.env.agents))
        self.empty += not self.env.agents
        return self.step(actions)


# --- SB3 through SuperSuit (the PettingZoo tutorial route) ---------------------------------------


def test_sb3_ppo_through_supersuit():
    """black_death_v3 -> pettingzoo_env_to_vec_env_v1 -> concat_vec_envs_v1(stable_baselines3)
    -> PPO("MlpPolicy").learn(): through several episode ends. SuperSuit's black_death ends an
    episode only when every agent is both terminated and truncated, so it steps the env once
    more after the last agent finished: that step returns five empty dicts (it used to raise)."""
    import supersuit as ss
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    env = fleet_marl.parallel_env(task="tiny", max_cycles=10)  # obs_mode="flat": SuperSuit needs a Box observation
    vec = ss.pettingzoo_env_to_vec_env_v1(ss.black_death_v3(env))
    venv = ss.concat_vec_envs_v1(vec, 2, num_cpus=0, base_class="stable_baselines3")  # copies of env (cloudpickle)

    class Ends(BaseCallback):
        def __init__(self):
            super().__init__()
            self.dones = 0

        def _on_step(self) -> bool:
            self.dones += int(np.sum(self.locals["dones"]))
            return True

    ends = Ends()
    model = PPO(
        "MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, device="cpu", verbose=0
    )  # SB3's seed= needs VecEnv.seed, which SuperSuit lacks
    with pytest.warns(UserWarning, match="no live agent"):  # black_death's extra step
        model.learn(total_timesteps=4 * 32 * 2, callback=ends)  # 4 agent slots (2 envs x 2 tenants), 2 PPO iterations
    assert model.num_timesteps >= 256
    # 64 steps per env, 11 per episode (10 rounds and the empty one): 5 episode ends x 2 tenants x 2 envs
    assert ends.dones >= 16, ends.dones
    actions, _ = model.predict(venv.reset(), deterministic=True)
    assert actions.shape == (4, len(ACTION_FIELDS))


# --- TorchRL's PettingZooWrapper ---------------------------------------------------------------------


@pytest.mark.parametrize("use_mask", [False, True], ids=["default", "use_mask"])
def test_torchrl_pettingzoo_wrapper(use_mask):
    """check_env_specs, then a rollout past an episode end. mask_layout="flat" is needed: the
    wrapper makes a tensor of every info value (the "dims" tuple is ragged) and builds
    ("tenant", "action_mask") from infos[agent]["action_mask"]. With use_mask=True and
    done_on_any=False the wrapper steps on after an agent left, sending an action for it each
    step: the env ignores those actions."""
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper
    from torchrl.envs.utils import check_env_specs

    pe = (
        uneven_tiny(mask_layout="flat", max_cycles=6)
        if use_mask
        else fleet_marl.parallel_env(task="tiny", mask_layout="flat", max_cycles=6)
    )
    spy = StepSpy(pe)
    with pytest.warns(UserWarning, match="tested using version"):  # TorchRL's note on the PettingZoo version
        env = PettingZooWrapper(pe, use_mask=use_mask, done_on_any=False if use_mask else None, seed=0)
    check_env_specs(env)
    info_keys = set(env.observation_spec["tenant", "info"].keys())
    assert {
        "reward_difference",
        "welfare",
        "illegal",
        "illegal_fields",
        "degenerate",
        "oom",
    } <= info_keys and "action_mask" not in info_keys
    assert env.observation_spec["tenant", "action_mask"].shape == (2, 48)

    td = env.rollout(16, break_when_any_done=False)  # 6 rounds per episode: two episode ends and a third episode
    done = td["next", "done"].squeeze(-1)
    assert td.batch_size == (16,) and done.sum() == 2 and done[5] and done[11]
    mask = td["tenant", "action_mask"]
    assert mask.dtype == torch.bool and mask.shape == (16, 2, 48)
    # INT8/INT4 are weight-only: masked for the two trainers (precision dims 2..6 hold 5 choices each, from index 9 + 5)
    prec = mask[0, :, 14:39].reshape(2, 5, 5)
    assert not prec[..., 3:].any() and prec[..., :3].all()
    welfare = td["next", "tenant", "info", "welfare"]
    assert welfare.shape == (16, 2) and torch.isfinite(welfare).all()
    if use_mask:
        agent_mask = td["next", "tenant", "mask"]
        assert (~agent_mask[:, 1]).any() and agent_mask[:, 0][~done].all()  # tenant_1 left early; tenant_0 stayed to the horizon
        assert spy.departed > 0  # the wrapper did send actions for it, and the env ignored them
    assert spy.empty == 0


# --- RLlib's ParallelPettingZooEnv, and ours where it falls short -------------------------------------


def test_rllib_parallel_pettingzoo_env_runs_episodes():
    """RLlib's own wrapper, stepped with random masked actions through the end of an episode
    (every agent truncated at the horizon together: __all__ is set)."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    env = ParallelPettingZooEnv(fleet_marl.parallel_env(task="tiny", max_cycles=5))
    for seed in (0, 1):
        obs, infos = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for steps in range(1, 100):  # noqa: B007 -- the count is read after the loop
            acts = {a: np.array([rng.choice(np.flatnonzero(m)) for m in infos[a]["action_mask"]]) for a in obs}
            obs, rew, term, trunc, infos = env.step(acts)
            assert set(rew) == set(obs) and all(np.isfinite(r) for r in rew.values())
            if term["__all__"] or trunc["__all__"]:
                break
        assert steps == 5 and trunc["__all__"] and not term["__all__"]


def test_rllib_parallel_pettingzoo_env_where_it_falls_short():
    """Where RLlib's wrapper does not work, and fleet_marl.rllib's FleetRLlibEnv does:
    an episode whose last agents finish partly terminated, partly truncated never sets
    __all__ (RLlib then steps on: the empty step that follows sets it, one step late), and
    render() passes a mode that PettingZoo's render() no longer takes."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    from fleet_marl.rllib.env import FleetRLlibEnv

    cfg = task_dict("tiny")
    cfg["tenants"][1]["budget"] = h100_rounds(cfg, 4.35)  # broke after one round of 4 GPUs at list price (0.35 of a GPU-round left)
    cfg["max_cycles"] = 1  # ... which is the last: tenant_1 terminated, tenant_0 truncated
    act = np.array([4, 2, 1, 1, 1, 1, 1, 3])
    theirs = ParallelPettingZooEnv(fleet_marl.parallel_env(config=cfg, render_mode="ansi"))
    theirs.reset(seed=0)
    obs, rew, term, trunc, infos = theirs.step({"tenant_0": act, "tenant_1": act})
    assert term == {"tenant_0": False, "tenant_1": True, "__all__": False}
    assert trunc == {"tenant_0": True, "tenant_1": False, "__all__": False}  # the end is missed
    with pytest.warns(UserWarning, match="no live agent"):
        late = theirs.step({})
    assert late[2] == {"__all__": True} and late[3] == {"__all__": True}  # one empty step late
    with pytest.raises(TypeError):
        theirs.render()

    ours = FleetRLlibEnv({"config": cfg, "render_mode": "ansi"})
    ours.reset(seed=0)
    _obs, _rew, term, trunc, _infos = ours.step({"tenant_0": act, "tenant_1": act})
    assert term["__all__"] is False and trunc["__all__"] is True  # every agent finished, however each ended
    assert "tenant_0" in ours.render()
    # either mask_layout is taken (the RLlib env's mask is always its own flat one); another is named
    flat = FleetRLlibEnv({"task": "tiny", "mask_layout": "flat"})
    assert flat.reset(seed=0)[0].keys() == FleetRLlibEnv({"task": "tiny"}).reset(seed=0)[0].keys()
    with pytest.raises(ValueError, match="mask_layout"):
        FleetRLlibEnv({"task": "tiny", "mask_layout": "ragged"})

"""RLlib over the vector env (issue 32): ``FleetVectorMultiAgentEnv`` (B clusters in one array
step, RLlib's ``VectorMultiAgentEnv`` API), ``FleetEnvRunner`` (the env runner that samples it
as arrays) and ``FusedMultiCategorical`` (the action distribution in one table).

The vector env's dict API is played against ``FleetParallelEnv`` with the same seeds, step by
step through episode ends; the array runner's episodes are compared with the ones RLlib's own
``MultiAgentEnvRunner`` loop builds step by step from the same env and module; the distribution
with RLlib's ``TorchMultiCategorical``. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

import torch  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical  # noqa: E402
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner  # noqa: E402

from fleet_marl.environment import FleetParallelEnv  # noqa: E402
from fleet_marl.rllib.config import TrainConfig, build  # noqa: E402
from fleet_marl.rllib.distribution import FusedMultiCategorical  # noqa: E402
from fleet_marl.rllib.env import FleetRLlibEnv, credit_timing, fleet_envs, mask_offsets  # noqa: E402
from fleet_marl.rllib.modules import mask_logits  # noqa: E402
from fleet_marl.rllib.runner import FleetEnvRunner  # noqa: E402
from fleet_marl.rllib.vector import FleetVectorMultiAgentEnv  # noqa: E402

SMALL = dict(train_batch_size=200, minibatch_size=100, num_epochs=1, eval_interval=0, hidden=[32, 32])


def _mixed(seed: int, worker: int = 0) -> int:
    return int(np.random.SeedSequence([seed, worker]).generate_state(1)[0])


def _masked_actions(obs: dict, offsets: np.ndarray, rng: np.random.Generator) -> dict:
    return {
        a: np.array([rng.choice(np.flatnonzero(o["action_mask"][offsets[k] : offsets[k + 1]])) for k in range(len(offsets) - 1)])
        for a, o in obs.items()
    }


@pytest.mark.parametrize("task, cycles", [("tiny", 6), ("medium", 5)])
def test_vector_env_plays_like_the_parallel_env_through_episode_ends(task, cycles):
    """Cluster b of a vector env reset with seed s is the parallel env reset with the mixed seed
    + b: the same observations, masks, rewards and flags every step; the step after the last
    returns the next episode's first observations (the parallel env's reset without a seed)."""
    B = 3
    venv = FleetVectorMultiAgentEnv({"task": task, "max_cycles": cycles, "reward_scheme": "difference"}, num_envs=B)
    envs = [FleetRLlibEnv({"task": task, "max_cycles": cycles, "reward_scheme": "difference"}) for _ in range(B)]
    obs, infos = venv.reset(seed=7)
    ref = []
    for b, e in enumerate(envs):
        o, i = e.par_env.reset(seed=_mixed(7) + b)
        ref.append(e.convert(o, i))
    offsets = mask_offsets(venv.nvec_max)
    rng = np.random.default_rng(0)

    def same(got: dict, want: dict, left: tuple = ()):
        assert list(got) == list(want)
        for a in want:
            np.testing.assert_array_equal(got[a]["observations"], want[a]["observations"])
            if a not in left:  # a tenant's last observation: the vector env's mask of a slot that left allows everything
                np.testing.assert_array_equal(got[a]["action_mask"], want[a]["action_mask"])

    for b in range(B):
        same(obs[b], ref[b])
    done: list[set] = [set() for _ in range(B)]  # tenants that finished: RLlib sends them no action
    for _ in range(2 * cycles + 1):
        acts = [_masked_actions({a: x for a, x in o.items() if a not in done[b]}, offsets, rng) for b, o in enumerate(obs)]
        obs, rew, term, trunc, infos = venv.step(acts)
        done = [{a for a in obs[b] if term[b].get(a) or trunc[b].get(a)} for b in range(B)]
        for b, e in enumerate(envs):
            if not acts[b]:  # the cluster ended on the last step: its next episode starts here
                o, _ = e.reset()  # no seed: the generators go on
                same(obs[b], o)
                assert rew[b] == {} and not term[b]["__all__"] and not trunc[b]["__all__"]
                continue
            o, r, t, tr, i = e.step(acts[b])
            same(obs[b], o, tuple(a for a in o if t[a] or tr[a]))
            assert rew[b] == pytest.approx(r)
            assert term[b] == t and trunc[b] == tr
            assert infos[b] == {a: {"illegal": True} for a in i if i[a]["illegal"]}
    assert venv.steps_taken > 0 and venv.credit_seconds > 0


def _end_cluster_at(venv: FleetVectorMultiAgentEnv, cluster: int, step: int) -> None:
    """Make every tenant of ``cluster`` leave (terminated) on the ``step``-th round from now, as
    if all went broke at once: the case of a cluster that ends before the others."""
    inner = venv.venv
    play = inner.step_held
    count = [0]

    def step_held(actions):
        obs, r, illegal = play(actions)
        count[0] += 1
        if count[0] == step:
            r.terminated[cluster] |= r.live[cluster]
            r.truncated[cluster] = False
            inner._s.live[cluster] = False
        return obs, r, illegal

    inner.step_held = step_held  # type: ignore[method-assign]


def test_vector_env_a_cluster_that_ends_alone_waits_and_restarts():
    """A cluster whose tenants all leave before the others' gets no round on the next step
    (RLlib sends it no action): its next episode's first observations come back, while the
    other clusters play on exactly as the parallel env does."""
    B, cycles = 3, 8
    venv = FleetVectorMultiAgentEnv({"task": "tiny", "max_cycles": cycles}, num_envs=B)
    envs = [FleetRLlibEnv({"task": "tiny", "max_cycles": cycles}) for _ in range(B)]
    obs, _ = venv.reset(seed=5)
    for b, e in enumerate(envs):
        e.par_env.reset(seed=_mixed(5) + b)
    _end_cluster_at(venv, 1, 3)
    offsets = mask_offsets(venv.nvec_max)
    rng = np.random.default_rng(2)
    for k in range(1, 6):
        acts = [_masked_actions(o, offsets, rng) for o in obs]
        if k == 4:
            acts[1] = {}  # it ended on step 3
        obs, rew, term, trunc, _ = venv.step(acts)
        if k == 3:
            assert term[1]["__all__"] and not trunc[1]["__all__"] and all(term[1][a] for a in venv.possible_agents)
        if k == 4:  # a fresh episode, no round played
            assert rew[1] == {} and set(obs[1]) == set(venv.possible_agents)
            assert all(o["observations"][2] == 0.0 and o["observations"][1] == 1.0 for o in obs[1].values())  # round 0, alive
        for b in (0, 2):  # the others are untouched by the round the waiting cluster sat out
            o, r, *_ = envs[b].step(acts[b])
            for a in o:
                np.testing.assert_array_equal(obs[b][a]["observations"], o[a]["observations"])
            assert rew[b] == pytest.approx(r)
    assert venv.summary(1).welfare == pytest.approx(venv.summary(1).welfare)  # taken on step 3


def test_array_runner_restarts_a_cluster_that_ends_alone(ray_session):
    tc = TrainConfig(**{**SMALL, "task": "tiny", "num_envs_per_env_runner": 3, "env": {"max_cycles": 9}})
    runner = FleetEnvRunner(config=build(tc))
    runner.sample(num_timesteps=3)  # builds and resets the clusters
    _end_cluster_at(runner.env, 2, 2)
    eps = runner.sample(num_timesteps=12)
    done = [e for e in eps if e.is_done]
    assert len(done) == 1 and len(done[0]) == 2 and done[0].env_t_started == 1  # one step in the last call, two in this one
    assert all(sa.is_terminated and not sa.is_truncated for sa in done[0].agent_episodes.values())
    ongoing = [e for e in eps if not e.is_done]
    assert sorted(len(e) for e in ongoing) == [2, 4, 4]  # its next episode ran the two steps after it ended
    fresh = min(ongoing, key=len)
    assert fresh.env_t_started == 0 and all(float(sa.get_observations(0)["observations"][2]) == 0.0 for sa in fresh.agent_episodes.values())
    runner.stop()


def test_fused_distribution_is_rllibs_multicategorical():
    torch.manual_seed(0)
    nvec = [9, 5, 5, 5, 5, 5, 5, 9]
    off = mask_offsets(np.array(nvec))
    mask = (torch.rand(300, 48) > 0.4).float()
    for d in range(8):
        mask[:, off[d]] = 1.0  # one choice per dimension stays allowed
    x, y = mask_logits(torch.randn(300, 48) * 3, mask), mask_logits(torch.randn(300, 48), mask)
    f, r = FusedMultiCategorical.from_logits(x, input_lens=nvec), TorchMultiCategorical.from_logits(x, input_lens=nvec)
    fy, ry = FusedMultiCategorical.from_logits(y, input_lens=nvec), TorchMultiCategorical.from_logits(y, input_lens=nvec)
    a = r.sample()
    torch.testing.assert_close(f.logp(a), r.logp(a), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(f.entropy(), r.entropy(), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(f.kl(fy), r.kl(ry), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(f.to_deterministic().sample(), r.to_deterministic().sample())
    draws = torch.stack([f.sample() for _ in range(400)])  # (400, 300, 8)
    for d in range(8):
        assert bool(mask[torch.arange(300)[None, :], off[d] + draws[..., d]].all())  # never a masked choice
    freq = torch.zeros(8, 9).scatter_add_(1, draws[:, 0].T.contiguous(), torch.ones(8, 400)) / 400
    assert float((freq - f.log_probs[0].exp()).abs().max()) < 0.12
    with pytest.raises(ValueError, match="sum to"):
        FusedMultiCategorical.from_logits(x, input_lens=[9, 5])


class _StockLoop(FleetEnvRunner):
    """RLlib's own sampling loop (per-agent dicts, connectors, step-by-step episodes) over the
    same vector env: the reference the array runner is compared with."""

    _sample = MultiAgentEnvRunner._sample


@pytest.mark.parametrize("sharing, obs_mode", [("shared", "dict"), ("per_kind", "dict"), ("mappo", "dict"), ("shared", "flat")])
def test_array_runner_builds_the_episodes_rllibs_loop_builds(ray_session, sharing, obs_mode):
    """Greedy play of the same module on the same seeds: every finished episode of the array
    runner holds what RLlib's step-by-step loop records (observations, actions, rewards,
    flags, per tenant), and the continuing chunks hold the same number of steps."""
    task = "easy" if sharing == "per_kind" else "tiny"
    tc = TrainConfig(
        **{**SMALL, "task": task, "sharing": sharing, "obs_mode": obs_mode, "num_envs_per_env_runner": 3, "env": {"max_cycles": 7}}
    )
    config = build(tc).env_runners(explore=False)
    fast, slow = FleetEnvRunner(config=config), _StockLoop(config=config)
    slow.module.set_state(fast.module.get_state())
    got = {"fast": [], "slow": []}
    for name, runner in (("fast", fast), ("slow", slow)):
        for _ in range(3):
            got[name] += [e for e in runner.sample(num_timesteps=15, explore=False) if e.is_done]

    def key(e):  # what every tenant saw over the chunk (clusters of tiny can start alike)
        return str(
            [
                (a, np.asarray(sa.get_observations()["observations"] if obs_mode == "dict" else sa.get_observations()).tobytes())
                for a, sa in sorted(e.agent_episodes.items())
            ]
        )

    fast_eps = {key(e): e for e in got["fast"]}
    matched = 0
    for e in got["slow"]:
        f = fast_eps.get(key(e))
        if f is None:
            continue
        matched += 1
        assert len(f) == len(e) and f.is_terminated == e.is_terminated and f.is_truncated == e.is_truncated
        for a, sa in e.agent_episodes.items():
            fa = f.agent_episodes[a]
            assert fa.module_id == sa.module_id and fa.is_terminated == sa.is_terminated and fa.is_truncated == sa.is_truncated
            np.testing.assert_allclose(fa.get_rewards(), sa.get_rewards(), rtol=1e-6)
            np.testing.assert_array_equal(fa.get_actions(), sa.get_actions())
            fo, so = fa.get_observations(), sa.get_observations()
            for k in fo if isinstance(fo, dict) else {None: None}:
                np.testing.assert_allclose(fo[k] if k else fo, so[k] if k else so, rtol=1e-6)
            np.testing.assert_allclose(
                fa.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS), sa.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS), rtol=1e-5
            )
    assert matched >= 3  # every cluster's first episode at least
    fast.stop()
    slow.stop()


def test_vector_training_reports_the_envs_figures(ray_session):
    """The default config trains on the array runner: episode metrics from the clusters'
    fairness summaries, the credit engine's time and steps, no FleetParallelEnv to read."""
    tc = TrainConfig(**{**SMALL, "task": "tiny", "num_envs_per_env_runner": 8, "reward_scheme": "difference"})
    algo = build(tc).build_algo()
    try:
        assert isinstance(algo.env_runner, FleetEnvRunner)
        for _ in range(4):
            r = algo.train()
        er = r["env_runners"]
        assert er["num_episodes_lifetime"] > 0 and np.isfinite(er["fleet/welfare"]) and er["fleet/illegal"] == 0
        assert er["episode_len_mean"] == 25
        seconds, steps = credit_timing(algo)
        assert steps == r["num_env_steps_sampled_lifetime"] and seconds > 0.0
        with pytest.raises(ValueError, match="as arrays"):
            fleet_envs(algo.env_runner.env)
    finally:
        algo.stop()
    # the per-cluster env stays behind vector = False (and the sequential protocol always takes it)
    for cfg in ({"vector": False}, {"env": {"protocol": "sequential"}}):
        algo = build(TrainConfig(**{**SMALL, "task": "tiny", "num_envs_per_env_runner": 2, **cfg})).build_algo()
        try:
            assert not isinstance(algo.env_runner, FleetEnvRunner)
            assert len(fleet_envs(algo.env_runner.env)) == 2
        finally:
            algo.stop()


def test_vector_env_refuses_the_sequential_protocol_and_bad_options():
    with pytest.raises(ValueError, match="sequential"):
        FleetVectorMultiAgentEnv({"task": "tiny", "protocol": "sequential"})
    with pytest.raises(ValueError, match="obs_mode"):
        FleetVectorMultiAgentEnv({"task": "tiny", "obs_mode": "box"})
    with pytest.raises(ValueError, match="mask_layout"):
        FleetVectorMultiAgentEnv({"task": "tiny", "mask_layout": "rows"})
    venv = FleetVectorMultiAgentEnv({"task": "tiny", "obs_mode": "dict", "with_state": True}, num_envs=2)
    obs, _ = venv.reset(seed=0)
    pe = FleetParallelEnv(task="tiny")
    pe.reset(seed=_mixed(0))
    np.testing.assert_allclose(obs[0]["tenant_0"]["state"], pe.state(), rtol=1e-6)
    assert venv.single_observation_spaces == FleetRLlibEnv({"task": "tiny", "with_state": True}).observation_spaces
    with pytest.raises(LookupError):
        venv.summary(0)


def test_the_learner_computes_rllibs_ppo_loss(ray_session, monkeypatch):
    """FleetPPOTorchLearner's loss and logged figures equal RLlib's PPOTorchLearner's on every
    minibatch of two iterations (the masked rows included: episode chunks end in each batch)."""
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    from fleet_marl.rllib.learner import FleetPPOTorchLearner

    seen = []
    fast = FleetPPOTorchLearner.compute_loss_for_module

    def both(self, *, module_id, config, batch, fwd_out):
        theirs = PPOTorchLearner.compute_loss_for_module(self, module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        logged = {k: self.metrics.peek((module_id, k)) for k in ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "vf_explained_var")}
        ours = fast(self, module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        for k, v in logged.items():
            assert float(self.metrics.peek((module_id, k))) == pytest.approx(float(v), rel=1e-4, abs=1e-6), k
        seen.append(Columns.LOSS_MASK in batch and not bool(batch[Columns.LOSS_MASK].all()))
        return ours

    monkeypatch.setattr(FleetPPOTorchLearner, "compute_loss_for_module", both)
    for sharing in ("shared", "mappo"):
        algo = build(TrainConfig(**{**SMALL, "task": "tiny", "sharing": sharing, "num_epochs": 2})).build_algo()
        try:
            assert isinstance(algo.learner_group._learner, FleetPPOTorchLearner)
            algo.train()
            algo.train()
        finally:
            algo.stop()
    assert len(seen) >= 8 and any(seen)

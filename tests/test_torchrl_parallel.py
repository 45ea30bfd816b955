"""``FleetTorchEnv`` inside TorchRL's batched envs and collectors (issue 32): ``SerialEnv`` and
``ParallelEnv`` of it (built before or after a reset: the masked action spec stacks), each of
TorchRL 0.14's collectors over the env alone and over both batched envs, through episode ends
with legal actions; and a batched env of two halves plays exactly as one env of every cluster.
Nothing here asserts on wall-clock time."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

import torch  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import AsyncCollector, Collector, MultiAsyncCollector, MultiSyncCollector  # noqa: E402
from torchrl.envs import ParallelEnv, SerialEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

from fleet_marl.torchrl import FleetTorchEnv  # noqa: E402
from fleet_marl.torchrl.env import FleetActionSpec  # noqa: E402

TASK = dict(task="tiny", max_cycles=6)


def make(clusters: int = 3, seed: int = 0, reset: bool = False) -> FleetTorchEnv:
    env = FleetTorchEnv(num_envs=clusters, seed=seed, **TASK)
    if reset:  # the action spec then carries a mask, which the batched envs must stack
        env.reset()
    return env


class FirstAllowed(torch.nn.Module):
    """Each tenant's first allowed choice in every action dimension (a legal, deterministic policy)."""

    def __init__(self, nvec):
        super().__init__()
        self.offsets = np.concatenate(([0], np.cumsum(nvec))).tolist()

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        o = self.offsets
        return torch.stack([mask[..., o[d] : o[d + 1]].float().argmax(-1) for d in range(len(o) - 1)], -1)


def policy() -> TensorDictModule:
    nvec = make(1).nvec
    return TensorDictModule(FirstAllowed(nvec), in_keys=[("agents", "action_mask")], out_keys=[("agents", "action")])


def _legal(td, nvec) -> bool:
    """Every live tenant's action is allowed by the mask it was taken under."""
    o = np.concatenate(([0], np.cumsum(nvec)))
    act, mask, live = td["agents", "action"], td["agents", "action_mask"], td["agents", "mask"]
    for d in range(len(nvec)):
        chosen = torch.gather(mask[..., o[d] : o[d + 1]], -1, act[..., d : d + 1]).squeeze(-1)
        if not bool(chosen[live].all()):
            return False
    return True


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize("reset", [False, True])
def test_batched_envs_build_their_specs_and_pass_torchrl_checks(batched, reset):
    env = batched(2, [partial(make, 3, 0, reset), partial(make, 3, 3, reset)])
    try:
        check_env_specs(env)
        spec = env.action_spec["agents", "action"]
        assert spec.shape == (2, 3, 2, 8)
        if spec.mask is not None:
            assert spec.mask.shape == (2, 3, 2, 48)
        td = env.rollout(14, break_when_any_done=False)  # past two episode ends
        assert td.shape == (2, 3, 14) and int(td["next", "done"].sum()) == 2 * 3 * 2
    finally:
        env.close()


@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_a_batched_env_of_two_halves_plays_as_one_env_of_every_cluster(batched):
    """Cluster seeds 0..5 either way: the same observations, rewards and ends, step by step."""
    whole = make(6, 0)
    env = batched(2, [partial(make, 3, 0), partial(make, 3, 3)])
    pol = policy()
    try:
        a = whole.rollout(14, pol, break_when_any_done=False)
        b = env.rollout(14, pol, break_when_any_done=False).reshape(6, 14)
        for key in (
            ("agents", "observation"),
            ("agents", "action"),
            ("next", "agents", "reward"),
            ("next", "done"),
            ("next", "agents", "mask"),
        ):
            torch.testing.assert_close(b[key], a[key], msg=str(key))
        assert int(a["next", "done"].sum()) == 12
    finally:
        env.close()


def _serial():
    return SerialEnv(2, [partial(make, 3, 0), partial(make, 3, 3)])


def _parallel():
    return ParallelEnv(2, [partial(make, 3, 0), partial(make, 3, 3)])


@pytest.mark.parametrize("env_fn", [make, _serial, _parallel], ids=["FleetTorchEnv", "SerialEnv", "ParallelEnv"])
@pytest.mark.parametrize("collector", [Collector, MultiSyncCollector, MultiAsyncCollector, AsyncCollector])
def test_every_collector_runs_through_episode_ends_with_legal_actions(env_fn, collector):
    pol = policy()
    kwargs = dict(policy=pol, frames_per_batch=36, total_frames=144)
    col = collector([env_fn, env_fn], **kwargs) if collector in (MultiSyncCollector, MultiAsyncCollector) else collector(env_fn, **kwargs)
    nvec = make(1).nvec
    frames = ends = 0
    try:
        for td in col:
            frames += td.numel()
            ends += int(td["next", "done"].sum())
            assert _legal(td, nvec)
            assert torch.isfinite(td["next", "agents", "reward"]).all()
    finally:
        col.shutdown()
    assert frames >= 144 and ends >= 2  # episodes of 6 rounds ended and the clusters went on


def test_the_action_spec_keeps_its_mask_when_expanded_or_reshaped():
    env = make(3, 0, reset=True)
    spec = env.action_spec["agents", "action"]
    assert isinstance(spec, FleetActionSpec) and spec.mask.shape == (3, 2, 48)
    big = spec.expand(4, 3, 2, 8)
    assert isinstance(big, FleetActionSpec) and big.mask.shape == (4, 3, 2, 48)
    assert torch.equal(big.mask[2], spec.mask)
    flat = spec.reshape(6, 8)
    assert flat.mask.shape == (6, 48) and torch.equal(flat.mask, spec.mask.reshape(6, 48))
    assert spec.is_in(spec.rand()) and big.is_in(big.rand())
    env.close()

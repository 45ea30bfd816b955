"""``FleetTorchEnv``: the vector env as a TorchRL ``EnvBase`` (the way VMAS integrates with TorchRL).

One env holds B clusters (``batch_size=[B]``) of the same scenario and steps them as one array
operation (:class:`~fleet_marl.environment.vector.FleetVectorEnv` underneath, so a cluster is
bit-identical to a :class:`~fleet_marl.environment.FleetParallelEnv` with the same seed). The
tenants form one agent group, ``"agents"``, with the tenant dimension after the batch::

    observation  ("agents", "observation")  (B, N, F) float32 in [0, 1]    the parallel env's rows
                 ("agents", "action_mask")  (B, N, M) bool                 flat mask, M = sum(nvec)
                 ("agents", "mask")         (B, N)    bool                 tenant in the episode
                 "state"                    (B, S)    float32 in [0, 1]    for centralized critics
                 "episode_welfare"          (B, 1)    float32              welfare of the episode that
                                                                           ended at this step (else 0)
    action       ("agents", "action")       (B, N, 8) int64                MultiCategorical(nvec), masked
    reward       ("agents", "reward")       (B, N, 1) float32              the configured scheme's
    done         "done", "terminated", "truncated"  (B, 1) bool           the cluster's episode ended

``M`` lays the 8 action dimensions out with the sizes ``nvec`` (every tenant of a task has the
same; a tenant with fewer choices has the rest masked). The action spec's mask follows the
current ``action_mask`` after every reset and step, so ``env.rand_action()`` and
``check_env_specs`` draw legal actions.

Done keys are the cluster's only (as VMAS's are): a tenant that finishes before the others
stays in its slot with ``mask`` False, reward 0 and an all-allowed action mask, and its
actions are ignored. Learners exclude it with ``("agents", "mask")`` (``mask_t`` and not
``mask_{t+1}``: it finished at step t).

Resets follow TorchRL: a cluster whose episode ends returns its final observation with
``done`` set, and the next ``reset`` (the collector calls it with ``"_reset"``) starts its next
episode, continuing its generators (what ``FleetVectorEnv`` did already at that step: the
first observation is kept until then). ``set_seed(s)`` seeds cluster b of the next whole reset
with ``s + b``; ``FleetTorchEnv(..., seed=s)`` seeds the first one. A collector resets its env
when it is built, before its ``set_seed`` can reach the env: build the env with its seed (the
trainer does), or the first episodes draw fresh entropy.

Inside TorchRL's batched envs and every collector: ``SerialEnv(k, ...)`` and ``ParallelEnv(k,
...)`` of ``FleetTorchEnv`` stack k of them (batch ``[k, B]``), ``Collector``,
``AsyncCollector``, ``MultiSyncCollector`` and ``MultiAsyncCollector`` run over either or over
the env alone (``tests/test_torchrl_parallel.py``). The action spec is a
:class:`FleetActionSpec`, TorchRL's ``MultiCategorical`` with the expand and reshape that keep
its mask's layout (torchrl 0.14's own cannot stack a masked spec). A batched env's own action
spec keeps the mask of the env it was built from (its ``rand_action`` is not updated per step;
policies read ``("agents", "action_mask")``).

>>> from fleet_marl.torchrl import FleetTorchEnv
>>> env = FleetTorchEnv(num_envs=4, task="tiny")
>>> env.rollout(3)["next", "agents", "reward"].shape
torch.Size([4, 3, 2, 1])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, Unbounded
from torchrl.envs import EnvBase

from fleet_marl.environment.scenario_vector import make_vector_env

#: The agent group's name.
GROUP = "agents"


class FleetActionSpec(MultiCategorical):
    """TorchRL's ``MultiCategorical`` whose mask keeps its layout when the spec is expanded or
    reshaped. torchrl 0.14's ``MultiCategorical.expand`` gives the mask the whole new shape plus
    its own last dimension (``(*shape, M)`` for a spec of shape ``(..., 8)``, which cannot hold),
    so a ``ParallelEnv`` or ``SerialEnv`` of a ``FleetTorchEnv`` whose spec carries a mask (every
    env after a reset) failed while building its specs; its ``_reshape`` keeps ``nvec`` in the old
    shape. Here the mask follows the batch dimensions, ``(*shape[:-1], M)``, and ``nvec`` the
    spec's shape; nothing else changes."""

    def expand(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        mask = self.mask
        self.mask = None  # TorchRL's expand, without the mask it gets wrong
        try:
            out = MultiCategorical.expand(self, *shape)
        finally:
            self.mask = mask
        if mask is not None:
            out.update_mask(mask.expand(*out.shape[:-1], mask.shape[-1]))
        return out

    def _reshape(self, shape):
        shape = torch.Size(shape)
        mask = None if self.mask is None else self.mask.reshape(*shape[:-1], self.mask.shape[-1])
        return self.__class__(nvec=self.nvec.reshape(shape), shape=shape, device=self.device, dtype=self.dtype, mask=mask)


class FleetTorchEnv(EnvBase):
    """B clusters of ``task`` (or ``config``, plus overrides of any field, as
    :func:`fleet_marl.vector_env` takes them) as a batched TorchRL env; see the module docstring.
    A suite task (``fleet_marl.suite``) spreads its clusters over its first ``scenarios`` train
    scenarios (:func:`~fleet_marl.environment.scenario_vector.make_vector_env`)."""

    batch_locked = True

    def __init__(
        self,
        num_envs: int = 64,
        task: str | None = None,
        config=None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        scenarios: int | None = None,
        **overrides: Any,
    ):
        overrides.setdefault("compute_all", False)  # only the configured scheme's rewards reach a learner
        venv = make_vector_env(num_envs, task, config, scenarios=scenarios, **overrides)
        super().__init__(batch_size=torch.Size([venv.num_envs]), device=device)
        self.venv = venv
        self.task = venv.task
        self.config = venv.config
        self.num_envs, self.n_agents = venv.num_envs, venv.num_agents
        self.nvec = venv.nvec_max  # (8,) the flat mask's layout
        self._seed: int | None = seed  # the first reset's: a collector resets its env when it is built, before set_seed could reach it
        self._pending: dict[str, np.ndarray] | None = None  # the first observation of clusters reset by the vector env
        #: steps the vector env when set (``recorder.step(venv, actions)``, a
        #: :class:`~fleet_marl.environment.horizon.Recorder`: the k-round difference's record); None: ``venv.step``
        self.recorder: Any = None
        self._make_specs()

    # --- specs --------------------------------------------------------------------------------

    def _make_specs(self) -> None:
        B, N, dev = self.num_envs, self.n_agents, self.device
        F = self.venv.single_observation_space.shape[-1]
        S = self.venv.state_space.shape[-1]
        M = self.venv.mask_size
        self.observation_spec = Composite(
            {
                GROUP: Composite(
                    {
                        "observation": Bounded(0.0, 1.0, (B, N, F), dtype=torch.float32, device=dev),
                        "action_mask": Categorical(2, (B, N, M), dtype=torch.bool, device=dev),
                        "mask": Categorical(2, (B, N), dtype=torch.bool, device=dev),
                    },
                    shape=(B, N),
                ),
                "state": Bounded(0.0, 1.0, (B, S), dtype=torch.float32, device=dev),
                "episode_welfare": Unbounded((B, 1), dtype=torch.float32, device=dev),
            },
            shape=(B,),
        )
        nvec = torch.as_tensor(self.nvec, dtype=torch.int64)
        self.action_spec = Composite(
            {GROUP: Composite({"action": FleetActionSpec(nvec, shape=(B, N, len(nvec)), dtype=torch.int64, device=dev)}, shape=(B, N))},
            shape=(B,),
        )
        self.reward_spec = Composite(
            {GROUP: Composite({"reward": Unbounded((B, N, 1), dtype=torch.float32, device=dev)}, shape=(B, N))},
            shape=(B,),
        )
        self.done_spec = Composite(
            {k: Categorical(2, (B, 1), dtype=torch.bool, device=dev) for k in ("done", "terminated", "truncated")},
            shape=(B,),
        )

    @property
    def group_map(self) -> dict[str, list[str]]:
        """TorchRL's MARL group map: one group, every tenant."""
        return {GROUP: list(self.venv.possible_agents)}

    # --- EnvBase --------------------------------------------------------------------------------

    def _set_seed(self, seed: int | None) -> None:
        self._seed = seed  # the next whole reset seeds cluster b with seed + b

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        which = None
        if tensordict is not None and "_reset" in tensordict.keys():  # noqa: SIM118 (a TensorDict)
            which = tensordict.get("_reset").reshape(self.num_envs).cpu().numpy()
        p = self._pending
        if which is not None and p is not None and not (which & ~p["ended"]).any():
            # the clusters that ended were reset by the vector env in that step: hand out their first observation
            left = p["ended"] & ~which
            self._pending = {**p, "ended": left} if left.any() else None
            return self._pack(p["obs"], p["action_mask"], p["alive"], p["state"], np.zeros(self.num_envs), None)
        if which is not None and not which.all():
            running = which if p is None else which & ~p["ended"]
            raise RuntimeError(
                f"FleetTorchEnv: a partial reset of clusters {np.flatnonzero(running).tolist()} that did not end; "
                "reset every cluster (env.reset() without '_reset'), or step until they end"
            )
        obs, infos = self.venv.reset(seed=self._seed)  # every cluster starts a new episode
        self._seed = None
        self._pending = None
        return self._pack(obs, infos["action_mask"], infos["alive"], self.venv.state(), np.zeros(self.num_envs), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._pending is not None and self._pending["ended"].any():
            b = np.flatnonzero(self._pending["ended"]).tolist()
            raise RuntimeError(f"FleetTorchEnv: step() on clusters {b} whose episode ended; call env.reset(td) (the collector does) first")
        act = tensordict.get((GROUP, "action")).cpu().numpy()
        obs, rew, _term, trunc, infos = self.venv.step(act) if self.recorder is None else self.recorder.step(self.venv, act)
        mask, alive = infos["action_mask"], infos["alive"]
        state = None
        ended = infos["_final"]
        welfare = np.zeros(self.num_envs)
        if ended.any():
            # the step returns each ended cluster's final observation; its fresh one waits for reset()
            fresh_state = self.venv.state()
            self._pending = {
                "obs": obs.copy(),
                "action_mask": mask.copy(),
                "alive": alive.copy(),
                "state": fresh_state,
                "ended": ended.copy(),
            }
            obs = np.where(ended[:, None, None], infos["final_obs"], obs)
            alive = np.where(ended[:, None], False, alive)
            mask = np.where(ended[:, None, None], self.venv.all_allowed[None], mask)
            state = np.where(ended[:, None], infos["final_state"], fresh_state)
            welfare[ended] = infos["episode"]["welfare"][ended]
        else:
            self._pending = None
        out = self._pack(obs, mask, alive, state, welfare, rew)
        t = ended[:, None]
        out.set("terminated", torch.from_numpy(t & ~trunc.any(-1, keepdims=True)))
        out.set("truncated", torch.from_numpy(t & trunc.any(-1, keepdims=True)))
        out.set("done", torch.from_numpy(t.copy()))
        return out

    # --- internals ------------------------------------------------------------------------------

    def _pack(self, obs, action_mask, alive, state, welfare, reward) -> TensorDictBase:
        if state is None:
            state = self.venv.state()
        am = torch.from_numpy(np.ascontiguousarray(action_mask))
        self.action_spec[GROUP, "action"].update_mask(am)
        group = {
            "observation": torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)),
            "action_mask": am,
            "mask": torch.from_numpy(np.ascontiguousarray(alive)),
        }
        if reward is not None:
            group["reward"] = torch.from_numpy(reward.astype(np.float32))[..., None]
        B, N = self.num_envs, self.n_agents
        return TensorDict(
            {
                GROUP: TensorDict(group, batch_size=(B, N)),
                "state": torch.from_numpy(np.ascontiguousarray(state, dtype=np.float32)),
                "episode_welfare": torch.from_numpy(welfare.astype(np.float32))[:, None],
            },
            batch_size=(B,),
        )


__all__ = ["GROUP", "FleetActionSpec", "FleetTorchEnv"]

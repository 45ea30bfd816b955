"""``FleetMenuEnv``: the vector env as a batched TorchRL env whose tenants pick from a menu, for BenchMARL.

BenchMARL's discrete algorithms (MAPPO, IPPO, MASAC, QMIX, IQL, VDN, ISAC) act with one
categorical per agent; fleet_marl's action is ``MultiDiscrete`` over 8 fields (about 1.3
million joint choices). The menu is the product of the fields the tenants learn
(``action_fields``, by default ``gpus`` and ``bid_level``: 9 x 5 = 45 entries); the other fields
take each tenant's default action (``FleetParallelEnv.default_action_index``: its
precision map and batch). Entry k's mask is the AND of its fields' choices in the vector env's
flat mask, so a masked entry is never sampled (``MaskedCategorical``) and masked Q-values are
never taken. One env holds B clusters (``batch_size=[B]``, one array step of
:class:`~fleet_marl.environment.vector.FleetVectorEnv`), with one agent group::

    ("agents", "observation")    (B, N, 34) float32   the parallel env's rows
    ("agents", "mask_features")  (B, N, K) float32    obs_mode="dict" only: the menu mask as 0/1
                                                      features of the observation
    ("agents", "action_mask")    (B, N, K) bool       the menu mask (mask_layout="flat": one
                                                      vector per agent, what BenchMARL masks)
    "state"                      (B, S) float32       for centralized critics (MAPPO, MASAC, QMIX)
    ("agents", "action")         (B, N) int64         Categorical(K): an entry of the menu
    ("agents", "reward")         (B, N, 1) float32
    "done", "terminated", "truncated"  (B, 1) bool    the cluster's episode ended

A suite task (``fleet_marl.suite``) spreads its clusters over its first ``scenarios`` train
scenarios, as ``fleet_marl.torchrl``'s env does
(:func:`~fleet_marl.environment.scenario_vector.make_vector_env`), each cluster's fixed fields
its own scenario's tenants' defaults. ``ended_welfare`` collects the welfare of every episode
that ends (a trainer reads and clears it: its training curve).

As in ``fleet_marl.torchrl``'s env, done keys are the cluster's; a tenant that left before the
others keeps its slot with reward 0 and an all-allowed mask, and its actions are ignored. A
cluster whose episode ends returns its final observation with ``done`` set, and the next
``reset`` (the collector's, with ``"_reset"``) hands out the first observation of its next
episode, which the vector env started in that step.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from fleet_marl.clients.base import check_modes
from fleet_marl.clients.benchmarl.compat import WHAT
from fleet_marl.environment import ACTION_FIELDS, core
from fleet_marl.environment.scenario_vector import ScenarioVectorEnv, make_vector_env
from fleet_marl.environment.spaces import mask_dims
from fleet_marl.errors import require

require(("torch", "torchrl", "tensordict"), "benchmarl", WHAT)

import torch  # noqa: E402 (after the extra's check)
from tensordict import TensorDict, TensorDictBase  # noqa: E402 (after the extra's check)
from torchrl.data import Bounded, Categorical, Composite, Unbounded  # noqa: E402 (after the extra's check)
from torchrl.envs import EnvBase  # noqa: E402 (after the extra's check)

#: The agent group's name.
GROUP = "agents"
#: The fields the tenants choose by default.
DEFAULT_FIELDS = ("gpus", "bid_level")
#: The largest menu: QMIX and MASAC hold a value per entry and agent.
MAX_MENU = 4096


def check_options(obs_mode: str, mask_layout: str, action_fields=DEFAULT_FIELDS) -> tuple[str, ...]:
    """The ValueError of a combination BenchMARL cannot take, naming one it can; else the fields."""
    check_modes(obs_mode, mask_layout)
    if mask_layout == "dims":
        raise ValueError(
            f"obs_mode={obs_mode!r} with mask_layout='dims': BenchMARL's algorithms mask one categorical per agent (the menu), not 8 "
            f"per-dimension masks; use obs_mode={obs_mode!r}, mask_layout='flat' (either obs_mode takes the flat layout)"
        )
    fields = tuple(action_fields)
    unknown = [f for f in fields if f not in ACTION_FIELDS]
    if unknown or not fields or len(set(fields)) != len(fields):
        raise ValueError(f"action_fields = {fields!r}: expected distinct names among {', '.join(ACTION_FIELDS)}")
    if "gpus" not in fields:
        raise ValueError(f"action_fields = {fields!r}: the menu needs 'gpus' (its mask follows the budget); e.g. {DEFAULT_FIELDS!r}")
    return fields


class Menu:
    """The menu of ``fields`` over a vector env's flat mask layout (each action dimension padded
    to ``nvec_max``): entry k sets field j to ``choices[k, j]``, and is allowed when each of
    those choices is. Plain arrays: a trained policy carries it to the grader's envs
    (:class:`~fleet_marl.clients.benchmarl.policy.GreedyMenuPolicy`)."""

    def __init__(self, fields: tuple[str, ...], nvec_max: np.ndarray):
        self.fields = tuple(fields)
        self.dims = np.array([ACTION_FIELDS.index(f) for f in self.fields])
        self.nvec_max = np.asarray(nvec_max, np.int64)
        self.size = int(np.prod(self.nvec_max[self.dims]))
        if self.size > MAX_MENU:
            raise ValueError(
                f"action_fields = {self.fields!r}: a menu of {self.size} entries (over {MAX_MENU}); choose fewer fields, e.g. {DEFAULT_FIELDS!r}"
            )
        self.offsets = np.concatenate(([0], np.cumsum(self.nvec_max)))  # the flat mask's dimension boundaries
        self.choices = np.array(list(itertools.product(*[range(self.nvec_max[d]) for d in self.dims])), np.int64)  # (K, F)
        self.columns = self.offsets[self.dims][None, :] + self.choices  # (K, F) each entry's columns of the flat mask

    def mask(self, flat_mask: np.ndarray) -> np.ndarray:
        """(..., M) flat masks of the vector env -> (..., K) the menu's: entry k is allowed when
        each of its fields' choices is."""
        return np.asarray(flat_mask[..., self.columns].all(-1))

    def actions(self, entries: np.ndarray, base: np.ndarray) -> np.ndarray:
        """(...) menu entries -> (..., 8) action indices: ``base`` ((..., 8), broadcast; the
        tenants' defaults) with the menu's fields set."""
        out = np.broadcast_to(base, (*entries.shape, base.shape[-1])).copy()
        out[..., self.dims] = self.choices[entries]
        return out

    def flat(self, mask: Any, nvec_row: np.ndarray) -> np.ndarray:
        """One tenant's action mask from a ``FleetParallelEnv`` (either layout, its own action
        sizes ``nvec_row``) -> (M,) the vector env's flat layout, each dimension padded."""
        out = np.zeros(int(self.offsets[-1]), bool)
        for d, m in enumerate(mask_dims(mask, np.asarray(nvec_row))):
            out[self.offsets[d] : self.offsets[d] + len(m)] = np.asarray(m, bool)
        return out


class FleetMenuEnv(EnvBase):
    """B clusters of ``task`` (or ``config``, plus overrides, as :func:`fleet_marl.vector_env`
    takes them; a suite task's over its first ``scenarios`` train scenarios), each tenant
    choosing one entry of the menu of ``action_fields``; see the module docstring.

    >>> from fleet_marl.clients.benchmarl import FleetMenuEnv
    >>> env = FleetMenuEnv(num_envs=4, task="tiny")
    >>> env.menu_size, env.rollout(3)["next", "agents", "reward"].shape
    (45, torch.Size([4, 3, 2, 1]))
    """

    batch_locked = True

    def __init__(
        self,
        num_envs: int = 32,
        task: str | None = None,
        config=None,
        obs_mode: str = "flat",
        mask_layout: str = "flat",
        action_fields=DEFAULT_FIELDS,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        scenarios: int | None = None,
        **overrides: Any,
    ):
        fields = check_options(obs_mode, mask_layout, action_fields)
        overrides.setdefault("compute_all", False)  # only the configured scheme's rewards reach a learner
        venv = make_vector_env(num_envs, task, config, scenarios=scenarios, **overrides)
        self.menu_map = Menu(fields, venv.nvec_max)
        super().__init__(batch_size=torch.Size([venv.num_envs]), device=device)
        self.venv, self.obs_mode, self.mask_layout, self.action_fields = venv, obs_mode, mask_layout, fields
        self.task, self.config = venv.task, venv.config
        self.num_envs, self.n_agents, self.menu_size = venv.num_envs, venv.num_agents, self.menu_map.size
        self.menu = self.menu_map.choices  # (K, F) each entry's choice of each field
        parts = venv.envs if isinstance(venv, ScenarioVectorEnv) else [venv]  # each scenario's clusters: its tenants' defaults
        self._base = np.concatenate(
            [
                np.broadcast_to(core.CoreStatic.from_config(e.config).default_index.astype(np.int64), (e.num_envs, venv.num_agents, 8))
                for e in parts
            ]
        )  # (B, N, 8) the fixed fields
        self.ended_welfare: list[float] = []
        self._seed: int | None = seed
        self._pending: dict[str, np.ndarray] | None = None
        self._make_specs()

    # --- specs ----------------------------------------------------------------------------------

    def _make_specs(self) -> None:
        B, N, K, dev = self.num_envs, self.n_agents, self.menu_size, self.device
        F = self.venv.single_observation_space.shape[-1]
        S = self.venv.state_space.shape[-1]
        group = {
            "observation": Bounded(0.0, 1.0, (B, N, F), dtype=torch.float32, device=dev),
            "action_mask": Categorical(2, (B, N, K), dtype=torch.bool, device=dev),
        }
        if self.obs_mode == "dict":
            group["mask_features"] = Bounded(0.0, 1.0, (B, N, K), dtype=torch.float32, device=dev)
        self.observation_spec = Composite(
            {GROUP: Composite(group, shape=(B, N)), "state": Bounded(0.0, 1.0, (B, S), dtype=torch.float32, device=dev)},
            shape=(B,),
        )
        self.action_spec = Composite(
            {GROUP: Composite({"action": Categorical(K, (B, N), dtype=torch.int64, device=dev)}, shape=(B, N))},
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

    def menu_mask(self, flat_mask: np.ndarray) -> np.ndarray:
        """(..., M) flat masks of the vector env -> (..., K) the menu's (:meth:`Menu.mask`)."""
        return self.menu_map.mask(flat_mask)

    def actions(self, entries: np.ndarray) -> np.ndarray:
        """(B, N) menu entries -> (B, N, 8) the vector env's action indices, the fields off the
        menu at each cluster's tenants' defaults."""
        return self.menu_map.actions(entries, self._base)

    # --- EnvBase --------------------------------------------------------------------------------

    def _set_seed(self, seed: int | None) -> None:
        self._seed = seed  # the next whole reset seeds cluster b with seed + b

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        which = None
        if tensordict is not None and "_reset" in tensordict.keys():  # noqa: SIM118 (a TensorDict)
            which = tensordict.get("_reset").reshape(self.num_envs).cpu().numpy()
        p = self._pending
        if which is not None and p is not None and not (which & ~p["ended"]).any():
            left = p["ended"] & ~which  # the clusters that ended were reset by the vector env in that step
            self._pending = {**p, "ended": left} if left.any() else None
            return self._pack(p["obs"], p["mask"], p["state"], None)
        if which is not None and not which.all():
            running = which if p is None else which & ~p["ended"]
            raise RuntimeError(f"FleetMenuEnv: a partial reset of clusters {np.flatnonzero(running).tolist()} that did not end")
        obs, infos = self.venv.reset(seed=self._seed)
        self._seed, self._pending = None, None
        return self._pack(obs, infos["action_mask"], self.venv.state(), None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._pending is not None and self._pending["ended"].any():
            b = np.flatnonzero(self._pending["ended"]).tolist()
            raise RuntimeError(f"FleetMenuEnv: step() on clusters {b} whose episode ended; call env.reset(td) (the collector does) first")
        entries = tensordict.get((GROUP, "action")).cpu().numpy().reshape(self.num_envs, self.n_agents)
        obs, rew, _, trunc, infos = self.venv.step(self.actions(entries))
        mask, ended = infos["action_mask"], infos["_final"]
        if ended.any():
            self.ended_welfare.extend(np.asarray(infos["episode"]["welfare"])[ended].tolist())
            state = self.venv.state()
            self._pending = {"obs": obs.copy(), "mask": mask.copy(), "state": state, "ended": ended.copy()}
            obs = np.where(ended[:, None, None], infos["final_obs"], obs)
            mask = np.where(ended[:, None, None], self.venv.all_allowed[None], mask)
            state = np.where(ended[:, None], infos["final_state"], state)
        else:
            self._pending, state = None, None
        out = self._pack(obs, mask, state, rew)
        t = ended[:, None]
        out.set("terminated", torch.from_numpy(t & ~trunc.any(-1, keepdims=True)))
        out.set("truncated", torch.from_numpy(t & trunc.any(-1, keepdims=True)))
        out.set("done", torch.from_numpy(t.copy()))
        return out

    def _pack(self, obs, flat_mask, state, reward) -> TensorDictBase:
        B, N = self.num_envs, self.n_agents
        menu = torch.from_numpy(self.menu_mask(flat_mask))
        self.action_spec[GROUP, "action"].update_mask(menu)
        group = {"observation": torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)), "action_mask": menu}
        if self.obs_mode == "dict":
            group["mask_features"] = menu.to(torch.float32)
        if reward is not None:
            group["reward"] = torch.from_numpy(reward.astype(np.float32))[..., None]
        if state is None:
            state = self.venv.state()
        return TensorDict(
            {GROUP: TensorDict(group, batch_size=(B, N)), "state": torch.from_numpy(np.ascontiguousarray(state, dtype=np.float32))},
            batch_size=(B,),
        )


__all__ = ["DEFAULT_FIELDS", "GROUP", "FleetMenuEnv", "Menu", "check_options"]

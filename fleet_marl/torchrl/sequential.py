"""TorchRL training under the sequential protocol: the turn collector and the re-layout of turns
into rounds.

Under the sequential protocol a tenant's observation holds the claims made before its turn in
the round, so the policy must be called once per turn, after the claims before it. The
environment side is :class:`~fleet_marl.environment.FleetSequentialVectorEnv` (numpy, no
torch): B clusters, one turn per array step, each round N aligned turn slots, the round
cleared by one kernel call after the N-th. The learner side is unchanged: PPO needs each
tenant's trajectory, one transition per round, which is the simultaneous protocol's layout.

``TurnCollector``      steps the per-turn vector env for ``rollout`` whole rounds per batch,
                       calling the actor once per turn on the acting tenant's observation
                       (:func:`~fleet_marl.torchrl.networks.turn_logits`; the env never calls the
                       policy), and yields each batch as the (B, R, N) TensorDict that
                       :class:`~fleet_marl.torchrl.FleetTorchEnv`'s rollouts have, so
                       ``Learner.update`` (GAE, clipped PPO) runs on it unchanged
``turns_to_rounds``    the re-layout: turn data (B, R*N, ...) to (B, R, N, ...), tenant i's entry
                       of round r taken from its turn slot in round r

The batch's TensorDict (B clusters, R rounds, N tenants, F = 40 features, M the flat mask):

====================================  ============  ==============================================
``("agents", "observation")``          (B, R, N, F)  what tenant i saw at its turn in round r
``("agents", "action_mask")``          (B, R, N, M)  its flat mask then (all allowed if it left)
``("agents", "mask")``                 (B, R, N)     tenant in its episode in round r
``("agents", "action")``, ``"action_log_prob"``  its action, and its log-probability when sampled
``"state"``                            (B, R, S)     the sequential ``state()`` at the round's start
``("next", "agents", "reward")``       (B, R, N, 1)  the round's reward (the configured scheme)
``("next", "agents", "mask")``         (B, R, N)     still in its episode after the round
``("next", "agents", "observation")``  (B, R, N, F)  what it sees at its turn in round r + 1; the
                                                     final observation where the episode ended
``("next", "state")``                  (B, R, S)     ``state()`` at the next round's start (final)
``("next", "done" / "terminated" / "truncated")``  (B, R, 1)  the cluster's episode ended
``("next", "episode_welfare")``        (B, R, 1)     the ended episode's welfare, else 0
====================================  ============  ==============================================

The bootstrap of the batch's last round needs each tenant's observation at its turn in the
round after it, so the collector plays that round too (with the policy of the moment) and
hands it out as the first round of the next batch: no round is played twice or dropped, and
its log-probabilities are those of the policy that acted (PPO's ratio corrects for the one
update in between, as with the asynchronous collector).
"""

from __future__ import annotations

import pickle
import queue
import traceback
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from fleet_marl.environment.sequential_vector import FleetSequentialVectorEnv
from fleet_marl.torchrl.distribution import MaskedMultiCategorical
from fleet_marl.torchrl.env import GROUP
from fleet_marl.torchrl.networks import turn_logits
from fleet_marl.training import config_env


def turns_to_rounds(x: torch.Tensor, agent: torch.Tensor, n_agents: int) -> torch.Tensor:
    """(B, R*N, ...) per-turn data to (B, R, N, ...): tenant i's entry of round r is the one of
    the turn slot of round r that ``agent`` (B, R*N) int64 gives to tenant i. Every round's N
    slots must hold each tenant once (the per-turn vector env's slots do: the live tenants in
    turn order, then those that left); a ValueError names the first cluster and round that do not."""
    B, RN = agent.shape
    N = int(n_agents)
    if RN % N:
        raise ValueError(f"turns_to_rounds: {RN} turns per cluster: expected a multiple of the {N} tenants (whole rounds)")
    R = RN // N
    slots = agent.reshape(B, R, N)
    ok = torch.sort(slots, -1).values == torch.arange(N)
    if not bool(ok.all()):
        b, r = (int(v) for v in torch.nonzero(~ok.all(-1))[0])
        raise ValueError(
            f"turns_to_rounds: cluster {b}, round {r}: turn slots hold tenants {slots[b, r].tolist()}; expected each of 0..{N - 1} once"
        )
    xr = x.reshape((B, R, N) + tuple(x.shape[2:]))
    out = torch.empty_like(xr)
    out[torch.arange(B)[:, None, None], torch.arange(R)[None, :, None], slots] = xr
    return out


class TurnCollector:
    """Batches of ``tc.rollout`` whole rounds in ``tc.num_envs`` clusters of the sequential
    protocol, played with ``actor_net`` sampling one action per turn (see the module
    docstring). Iterating yields ``batches`` TensorDicts (B, R) in ``Learner.update``'s layout.
    It runs in this process and reads ``actor_net``'s weights as they are
    (``update_policy_weights_`` is a no-op), like TorchRL's synchronous ``Collector``."""

    def __init__(self, tc: Any, actor_net: torch.nn.Module, nvec, batches: int):
        self.venv = config_env(FleetSequentialVectorEnv, tc, tc.num_envs, compute_all=False)
        self.actor_net, self.nvec = actor_net, [int(n) for n in nvec]
        self.rollout, self.batches = int(tc.rollout), int(batches)
        self.N = self.venv.num_agents
        self._seed: int | None = None
        self._obs: np.ndarray | None = None
        self._infos: dict | None = None
        self._carry: dict | None = None  # the round played for the last batch's bootstrap: the next batch's first

    # the collector interface ``Loop`` uses
    def set_seed(self, seed: int) -> None:
        self._seed = int(seed)  # the first reset seeds cluster b with seed + b

    def update_policy_weights_(self) -> None:
        pass  # the actor network is the learner's own

    def shutdown(self) -> None:
        self.venv.close()

    def state_dict(self) -> bytes:
        """Where collection stands between two batches (the vector env, the observations it
        handed out last and the round played ahead for the bootstrap), pickled: a checkpoint
        holds it so that a resumed run plays on as the uninterrupted one would."""
        return pickle.dumps({"venv": self.venv, "obs": self._obs, "infos": self._infos, "carry": self._carry})

    def load_state_dict(self, state: bytes) -> None:
        d = pickle.loads(state)
        self.venv, self._obs, self._infos, self._carry = d["venv"], d["obs"], d["infos"], d["carry"]

    def __iter__(self):
        if self._obs is None:
            self._obs, self._infos = self.venv.reset(seed=self._seed)
        for _ in range(self.batches):
            yield self.batch()

    # --- collection -----------------------------------------------------------------------------

    def _round(self) -> dict:
        """Play one round in every cluster: its turns (B, N, ...) in slot order and what it returned."""
        venv, N = self.venv, self.N
        B = venv.num_envs
        coupling = getattr(self.actor_net, "coupling", None)
        rec: dict[str, Any] = {"state": venv.state(), "live": venv.alive, "obs": [], "mask": [], "agent": [], "action": [], "logp": []}
        obs, infos = self._obs, self._infos
        assert obs is not None and infos is not None  # __iter__ resets the vector env first
        for _ in range(N):
            o, m, a = torch.from_numpy(obs), torch.from_numpy(infos["action_mask"]), torch.from_numpy(infos["agent"])
            with torch.no_grad():
                dist = MaskedMultiCategorical(turn_logits(self.actor_net, o, a, N), m, self.nvec, coupling)
                act = dist.sample()
                lp = dist.log_prob(act)
            rec["obs"].append(o)
            rec["mask"].append(m)
            rec["agent"].append(a)
            rec["action"].append(act)
            rec["logp"].append(lp)
            obs, rew, _term, trunc, infos = venv.step(act.numpy())
        self._obs, self._infos = obs, infos
        ended = infos["_final"]
        rec["reward"] = rew
        rec["ended"] = ended.copy()
        rec["truncated"] = ended & trunc.any(-1)
        rec["next_live"] = np.where(ended[:, None], False, infos["alive"])
        nxt = venv.state()
        rec["final_obs"] = infos["final_obs"] if ended.any() else None
        rec["next_state"] = np.where(ended[:, None], infos["final_state"], nxt) if ended.any() else nxt
        welfare = np.zeros(B)
        if ended.any():
            welfare[ended] = infos["episode"]["welfare"][ended]
        rec["welfare"] = welfare
        return rec

    def batch(self) -> TensorDict:
        """The next ``rollout`` rounds as a (B, R) TensorDict (the module docstring's layout)."""
        R, N = self.rollout, self.N
        rounds = [self._carry if self._carry is not None else self._round()]
        rounds += [self._round() for _ in range(R - 1)]
        self._carry = self._round()  # the bootstrap's observations; the next batch's first round
        B = self.venv.num_envs

        def turns(key, rs=rounds):
            return torch.stack([torch.stack(r[key], 1) for r in rs], 1).reshape((B, len(rs) * N) + tuple(rs[0][key][0].shape[1:]))

        agent = turns("agent")
        obs = turns_to_rounds(turns("obs"), agent, N)  # (B, R, N, F)
        nxt_obs = torch.cat([obs[:, 1:], turns_to_rounds(turns("obs", [self._carry]), turns("agent", [self._carry]), N)], 1)
        for r, rec in enumerate(rounds):
            if rec["final_obs"] is not None:
                e = torch.from_numpy(rec["ended"])
                nxt_obs[e, r] = torch.from_numpy(rec["final_obs"][rec["ended"]])

        def per_round(key, dtype=None):
            return (
                torch.from_numpy(np.stack([r[key] for r in rounds], 1)).to(dtype)
                if dtype
                else torch.from_numpy(np.stack([r[key] for r in rounds], 1))
            )

        ended = per_round("ended")[..., None]
        trunc = per_round("truncated")[..., None]
        group = TensorDict(
            {
                "observation": obs,
                "action_mask": turns_to_rounds(turns("mask"), agent, N),
                "mask": per_round("live"),
                "action": turns_to_rounds(turns("action"), agent, N),
                "action_log_prob": turns_to_rounds(turns("logp"), agent, N),
            },
            batch_size=(B, R, N),
        )
        nxt = TensorDict(
            {
                GROUP: TensorDict(
                    {"observation": nxt_obs, "mask": per_round("next_live"), "reward": per_round("reward", torch.float32)[..., None]},
                    batch_size=(B, R, N),
                ),
                "state": per_round("next_state", torch.float32),
                "done": ended,
                "terminated": ended & ~trunc,
                "truncated": trunc,
                "episode_welfare": per_round("welfare", torch.float32)[..., None],
            },
            batch_size=(B, R),
        )
        return TensorDict({GROUP: group, "state": per_round("state", torch.float32), "next": nxt}, batch_size=(B, R))


def _collect_in_worker(
    tc: Any, actor_net: torch.nn.Module, nvec, batches: int, seed: int | None, weights: Any, out: Any, stop: Any
) -> None:
    """The worker process of :class:`AsyncTurnCollector`: collect ``batches`` batches, taking
    the newest weights sent before each batch, and put each (or the error's traceback) on
    ``out``; end when ``stop`` is set."""
    out.cancel_join_thread()  # a batch left unread when the learner stops early must not keep this process from ending
    try:
        torch.set_num_threads(1)
        col = TurnCollector(tc, actor_net, nvec, batches)
        if seed is not None:
            col.set_seed(seed)
        for i, batch in enumerate(col):
            while True:
                try:
                    out.put(batch, timeout=0.5)
                    break
                except queue.Full:
                    if stop.is_set():
                        return
            if stop.is_set():
                return
            if i + 1 < batches:
                state = None
                while True:  # the newest weights sent so far
                    try:
                        state = weights.get_nowait()
                    except queue.Empty:
                        break
                if state is not None:
                    actor_net.load_state_dict(state)
    except Exception:  # noqa: BLE001 -- whatever failed is handed to the learner's process, which raises it
        out.put(traceback.format_exc())
    # the batches' tensors are in shared memory, handed over through this process: stay until told to go
    stop.wait()


class AsyncTurnCollector:
    """:class:`TurnCollector` in a worker process (``collector: async``): it collects the next
    batch with the weights of the last update while this process learns on the previous one (as
    TorchRL's ``AsyncCollector`` does for the simultaneous protocol). The same interface; an
    error in the worker is raised here with its traceback."""

    def __init__(self, tc: Any, actor_net: torch.nn.Module, nvec, batches: int):
        self.tc, self.actor_net, self.nvec, self.batches = tc, actor_net, [int(n) for n in nvec], int(batches)
        self._seed: int | None = None
        self._ctx = mp.get_context("spawn")
        self._weights = self._ctx.Queue()
        self._out = self._ctx.Queue(maxsize=1)
        self._stop = self._ctx.Event()
        self._proc = None

    def set_seed(self, seed: int) -> None:
        self._seed = int(seed)

    def update_policy_weights_(self) -> None:
        self._weights.put({k: v.detach().clone() for k, v in self.actor_net.state_dict().items()})

    def __iter__(self):
        self._proc = self._ctx.Process(
            target=_collect_in_worker,
            daemon=True,
            args=(self.tc, self.actor_net, self.nvec, self.batches, self._seed, self._weights, self._out, self._stop),
        )
        self._proc.start()
        for _ in range(self.batches):
            while True:
                try:
                    got = self._out.get(timeout=5.0)
                    break
                except queue.Empty:
                    if not self._proc.is_alive():
                        raise RuntimeError(
                            f"the sequential protocol's collector worker process ended (exit code {self._proc.exitcode}) "
                            "before its batches were in"
                        ) from None
            if isinstance(got, str):
                raise RuntimeError(f"the sequential protocol's collector failed in its worker process:\n{got}")
            yield got

    def shutdown(self) -> None:
        if self._proc is not None:
            self._stop.set()  # the worker's signal to end (within half a second of its batch in progress)
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=10)
        self._proc = None


__all__ = ["AsyncTurnCollector", "TurnCollector", "turns_to_rounds"]

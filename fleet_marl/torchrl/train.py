"""``fleet-marl train --engine torchrl``: IPPO and MAPPO on TorchRL's own parts, at vector speed.

The loop (:mod:`fleet_marl.torchrl.loop`): a collector steps a
:class:`~fleet_marl.torchrl.FleetTorchEnv` (``num_envs`` clusters in one array step) with a
masked multi-categorical actor for ``rollout`` steps: TorchRL's ``Collector`` (``collector:
sync``, the default: collect, then learn; bit for bit the same run for the same config and
seed, and a resumed run continues it bit for bit), ``AsyncCollector`` (``async``: a worker
process collects the next batch with the previous weights while this one learns; faster on
two cores, not reproducible) or, with ``collectors: K``, their multi-process forms.
``GAE`` computes each tenant's advantages and value targets; ``ClipPPOLoss`` is minimized for
``epochs`` passes over minibatches, with the learning rate annealed over the run's iterations
(``anneal_lr``) on ``device`` (the env and the collection stay on CPU). A tenant's samples count only while it is
in its episode (``("agents", "mask")``); one that finishes at step t is done there (no
bootstrap). A cluster's truncation (``max_cycles``) bootstraps every tenant still in it.
``max_minutes`` is a safety cap on wall time: a run it stops says so. ``credit_horizon: k`` (with
``reward_scheme: difference``) trains on the k-round difference, each batch relabelled k − 1
steps behind the collector (:mod:`fleet_marl.torchrl.relabel`).

Under the sequential protocol (``env: {protocol: sequential, turn_order: ...}``) the collector
is :class:`~fleet_marl.torchrl.sequential.TurnCollector` (``AsyncTurnCollector`` for
``async``): the actor is called once per turn, on the per-turn vector env, and each batch of
``rollout`` rounds comes laid out per tenant and round as above, so the learner is the same.

Sharing schemes (:data:`~fleet_marl.torchrl.networks.SHARING`): ``shared``, ``per_tenant`` and
``per_kind`` are IPPO (each tenant's critic reads its own observation); ``mappo`` has a shared
actor and a centralized critic on ``state``.

A run writes, under ``<out>/<run name>/`` (default ``runs/train/<task>-<sharing>-<scheme>-torchrl``,
``...-<scheme>-sequential-torchrl`` under the sequential protocol),
what the RLlib route writes:

===================  ==========================================================================
``checkpoint/``      ``model.pt`` (the actor's and critic's weights, the optimizer),
                     ``fleet_marl_torchrl.json`` (the config and the env's signature), read by
                     ``--resume`` and by ``fleet-marl evaluate --policy RUN``, and ``state.pt``
                     (torch's generator and the episodes in progress: :meth:`Loop.state`, read
                     by ``--resume`` only)
``metrics.csv``      one row per iteration: :data:`COLUMNS`
``tb/``              TensorBoard scalars, the same columns
``learning_curve.png``  training welfare and the grader's evaluations against the references
``results.md``       the final table: the trained policy and every reference policy, graded on
                     the same seeds; ``results.json`` has the summaries
``config.yaml``      the run's config
===================  ==========================================================================

The config is :class:`~fleet_marl.torchrl.config.TorchRLTrainConfig`; the run folder, its
checks and the end of the run are every engine's (:mod:`fleet_marl.training`).
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torchrl.envs.utils import ExplorationType
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from fleet_marl.evaluation import Evaluation, evaluate
from fleet_marl.torchrl.config import COLUMNS, TorchRLTrainConfig, check_device
from fleet_marl.torchrl.env import GROUP
from fleet_marl.torchrl.loader import ENGINE
from fleet_marl.torchrl.loop import RESUME_STRIDE, Loop
from fleet_marl.torchrl.policy import MaskedMultiCategorical, TrainedPolicy, build_networks
from fleet_marl.training import MetricsLog, TrainConfigError, TrainResult, finish, prepare_run, progress_bar, show_progress, start_run


class Learner:
    """The actor, the critic, the loss, GAE and the optimizer of one run (no env, no collector):
    what a checkpoint holds, and what the collector's policy is."""

    def __init__(self, tc: TorchRLTrainConfig, sig: dict):
        self.tc, self.sig = tc, sig
        self.nvec = list(sig["nvec"])
        self.device = torch.device(tc.device)
        torch.manual_seed(tc.seed)
        actor_net, critic_net, critic_in = build_networks(
            tc.sharing,
            len(sig["possible_agents"]),
            sig["obs_dim"],
            sig["state_dim"],
            self.nvec,
            sig["kinds"],
            tc.hidden,
            tc.activation,
            tc.autoregressive,
            sig.get("agent_id", False),
        )
        self.actor_net, self.critic_net = actor_net.to(self.device), critic_net.to(self.device)
        self.actor = self.make_actor(actor_net)
        self.critic = TensorDictModule(
            critic_net, in_keys=[(GROUP, "observation") if critic_in == "observation" else "state"], out_keys=[(GROUP, "state_value")]
        )
        self.loss = ClipPPOLoss(
            self.actor,
            self.critic,
            clip_epsilon=tc.clip,
            entropy_bonus=True,
            entropy_coeff=tc.entropy_coeff,
            critic_coeff=tc.critic_coeff,
            loss_critic_type="l2",
            normalize_advantage=False,
            reduction="none",
            functional=False,
            log_explained_variance=False,
        )  # no target networks: the modules as they are
        self.critic_in = (GROUP, "observation") if critic_in == "observation" else "state"
        keys = dict(
            reward=(GROUP, "reward"),
            action=(GROUP, "action"),
            sample_log_prob=(GROUP, "action_log_prob"),
            value=(GROUP, "state_value"),
            done=(GROUP, "done"),
            terminated=(GROUP, "terminated"),
            advantage=(GROUP, "advantage"),
            value_target=(GROUP, "value_target"),
        )
        self.loss.set_keys(**keys)
        self.gae = GAE(gamma=tc.gamma, lmbda=tc.lmbda, value_network=self.critic, average_gae=False)
        self.gae.set_keys(**{k: v for k, v in keys.items() if k not in ("action", "sample_log_prob")})
        self.optim = torch.optim.Adam(list(actor_net.parameters()) + list(critic_net.parameters()), lr=tc.lr)

    def make_actor(self, actor_net: torch.nn.Module) -> ProbabilisticActor:
        """``actor_net`` (the learner's, or a copy of it) as TorchRL's sampling actor over the masked distribution."""
        return ProbabilisticActor(
            TensorDictModule(actor_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "logits")]),
            in_keys={"logits": (GROUP, "logits"), "mask": (GROUP, "action_mask")},
            out_keys=[(GROUP, "action")],
            distribution_class=MaskedMultiCategorical,
            distribution_kwargs={"nvec": self.nvec, "coupling": getattr(actor_net, "coupling", None)},
            return_log_prob=True,
            log_prob_key=(GROUP, "action_log_prob"),
            default_interaction_type=ExplorationType.RANDOM,
        )

    def state_dict(self) -> dict:
        """The weights and the optimizer, on CPU (a checkpoint loads on a machine without the learner's GPU)."""
        d = {"actor": self.actor_net.state_dict(), "critic": self.critic_net.state_dict(), "optim": self.optim.state_dict()}
        return _to_cpu(d)

    def load_state_dict(self, d: dict) -> None:
        self.actor_net.load_state_dict(d["actor"])
        self.critic_net.load_state_dict(d["critic"])
        if "optim" in d:
            self.optim.load_state_dict(d["optim"])

    def set_progress(self, frac: float) -> float:
        """The learning rate for a run ``frac`` (0..1) done: ``lr`` falling linearly to 2% of it
        with ``anneal_lr`` (CleanRL's schedule), else ``lr``."""
        lr = self.tc.lr * max(1.0 - frac, 0.02) if self.tc.anneal_lr else self.tc.lr
        for g in self.optim.param_groups:
            g["lr"] = lr
        return lr

    def update(self, data) -> dict[str, float]:
        """GAE over the batch (B, T), then ``epochs`` passes of clipped PPO over minibatches;
        the mean statistics, over the tenants in their episodes."""
        tc = self.tc
        data = data.to(self.device)  # collected on CPU
        mask = data.get((GROUP, "mask"))  # (B, T, N) tenant in its episode when acting
        nmask = data.get(("next", GROUP, "mask"))
        done = data.get(("next", "done"))  # (B, T, 1)
        trunc = data.get(("next", "truncated"))
        ended = (mask & ~nmask) | done  # the tenant's episode ended at this step
        data.set(("next", GROUP, "done"), ended.unsqueeze(-1))
        data.set(("next", GROUP, "terminated"), (ended & ~trunc).unsqueeze(-1))
        with torch.no_grad():
            self.gae(data)
        # what the loss reads: indexing only these keeps the minibatches cheap
        flat = data.reshape(-1).select(
            *{
                (GROUP, "observation"),
                (GROUP, "action_mask"),
                (GROUP, "action"),
                (GROUP, "action_log_prob"),
                (GROUP, "advantage"),
                (GROUP, "value_target"),
                (GROUP, "state_value"),
                (GROUP, "mask"),
                self.critic_in,
            }
        )
        n = flat.shape[0]
        adv = flat.get((GROUP, "advantage"))
        m = flat.get((GROUP, "mask")).unsqueeze(-1)
        mu = adv[m].mean()
        sd = adv[m].std().clamp_min(1e-8)
        flat.set((GROUP, "advantage"), (adv - mu) / sd)
        stats = {"policy_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "kl_approx": 0.0, "clip_fraction": 0.0}
        count = 0
        mb = min(tc.minibatch, n)
        for _ in range(tc.epochs):
            perm = torch.randperm(n).to(self.device)  # drawn on CPU: the same minibatches on every device
            for start in range(0, n - mb + 1, mb):
                batch = flat[perm[start : start + mb]]
                out = self.loss(batch)
                w = batch.get((GROUP, "mask")).float()  # (mb, N)

                def mean(key, out=out, w=w):
                    x = out.get(key)
                    if x.numel() != w.numel():  # a statistic the loss reduced already
                        return x.mean()
                    return (x.reshape(w.shape) * w).sum() / w.sum().clamp_min(1.0)

                loss = mean("loss_objective") + mean("loss_critic") + mean("loss_entropy")
                self.optim.zero_grad(set_to_none=True)
                loss.backward()
                # the actor's and the critic's gradients clipped apart: a large value error does not shrink the policy's step
                torch.nn.utils.clip_grad_norm_(self.actor_net.parameters(), tc.max_grad_norm)
                torch.nn.utils.clip_grad_norm_(self.critic_net.parameters(), tc.max_grad_norm)
                self.optim.step()
                with torch.no_grad():
                    stats["policy_loss"] += float(mean("loss_objective"))
                    stats["vf_loss"] += float(mean("loss_critic"))
                    stats["entropy"] += float(mean("entropy"))
                    stats["kl_approx"] += float(mean("kl_approx"))
                    stats["clip_fraction"] += float(mean("clip_fraction"))
                count += 1
        stats = {k: v / max(count, 1) for k, v in stats.items()}
        with torch.no_grad():
            target = flat.get((GROUP, "value_target"))[m]
            value = flat.get((GROUP, "state_value"))[m]
            var = target.var()
            stats["explained_variance"] = float(1 - (target - value).var() / var) if var > 0 else float("nan")
        return stats

    def policy(self, env, explore: bool = False) -> TrainedPolicy:
        """The trained actor as a grader policy on ``env`` (a copy: training goes on unchanged)."""
        return TrainedPolicy(env, copy.deepcopy(self.actor_net).to("cpu"), self.nvec, explore=explore)


def prepare(
    tc: TorchRLTrainConfig, resume: str | None = None, overwrite: bool = False
) -> tuple[TorchRLTrainConfig, Path | None, dict | None]:
    """Everything checked before training: (config, checkpoint folder to resume or None, its sidecar)."""

    def check_signature(meta: dict, source: str) -> None:
        if meta.get("signature") != tc.signature():
            raise TrainConfigError(
                f"--resume {resume}: the checkpoint was trained on {meta.get('signature')}, this config has {tc.signature()}"
            )

    check_device(tc.device)
    folder, meta = prepare_run(tc, ENGINE, resume, overwrite, check_signature)
    return tc, folder, meta


#: The file of a checkpoint that continues the run where it stopped (:meth:`Loop.state`; a pickle, read only by ``--resume``).
STATE = "state.pt"


def _save(loop: Loop, run_dir: Path, tc: TorchRLTrainConfig, sig: dict, iteration: int, env_steps: int, seconds: float) -> Path:
    def write(folder: Path) -> None:
        torch.save(loop.learner.state_dict(), folder / "model.pt")
        torch.save(loop.state(), folder / STATE)

    return ENGINE.save(run_dir, write, tc, sig, iteration, env_steps, seconds)


def grade(learner: Learner, tc: TorchRLTrainConfig, episodes: int) -> Evaluation:
    """The greedy policy's evaluation by the grader on seeds 0 .. episodes - 1."""
    return evaluate(
        tc.task,
        lambda env: learner.policy(env),  # noqa: PLW0108 -- the grader takes a function (inspect.isfunction), not a bound method
        episodes=episodes,
        seed=0,
        overrides=dict(tc.env),
        progress=False,
        hindsight=False,  # a learning curve's points need the score only; the final evaluation reports the gap
    )


def train(
    tc: TorchRLTrainConfig, *, resume: str | None = None, overwrite: bool = False, progress: bool = True, final_episodes: int | None = None
) -> TrainResult:
    """Train ``tc`` (see the module docstring)."""
    tc, ckpt, meta = prepare(tc, resume, overwrite)
    run_dir = start_run(tc, ckpt, overwrite)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    sig = tc.signature()
    learner = Learner(tc, sig)
    first, offset, env_steps0, state = 0, 0.0, 0, None
    notes: list[str] = []
    if ckpt is not None and meta is not None:
        learner.load_state_dict(torch.load(ckpt / "model.pt", weights_only=True))
        first, offset, env_steps0 = int(meta["iteration"]), float(meta.get("seconds", 0.0)), int(meta.get("env_steps", 0))
        if (ckpt / STATE).is_file():
            state = torch.load(ckpt / STATE, weights_only=False)  # the run's own pickle (Loop.state), as the weights are its own
    from tensorboardX import SummaryWriter  # only when training

    writer = SummaryWriter(str(run_dir / "tb"))
    log = MetricsLog(run_dir, COLUMNS, first if ckpt is not None else None)
    N = len(sig["possible_agents"])
    t0 = time.time()
    bar = progress_bar(tc, first, progress)
    it, env_steps, last = first, env_steps0, ckpt
    loop = Loop(tc, learner, first=first, env_steps=env_steps0, offset=offset, state=state)
    if ckpt is not None and not loop.restored:
        notes.append(
            f"resumed at iteration {first} with fresh episodes (seed {tc.seed} + {RESUME_STRIDE} x {first}): the episodes in progress "
            f"are restored only with collector: sync, collectors: 1 and the same env and num_envs; this run is not bit-identical to an "
            "uninterrupted one"
        )
    try:
        for row in loop:
            it, env_steps = row["iteration"], row["env_steps"]
            if tc.eval_interval and it % tc.eval_interval == 0 and tc.eval_episodes:
                ev = grade(learner, tc, tc.eval_episodes)
                row["eval_welfare"], row["score"] = round(float(ev.welfare.mean()), 4), round(ev.score, 4)
            log.append(row)
            for k, v in row.items():
                if v != "" and k != "iteration" and not (isinstance(v, float) and math.isnan(v)):
                    writer.add_scalar(k, v, env_steps)
            if tc.checkpoint_interval and it % tc.checkpoint_interval == 0 and it < tc.iterations:
                last = _save(loop, run_dir, tc, sig, it, env_steps, offset + time.time() - t0)
            show_progress(bar, env_steps, row, (("welfare", "welfare", ".1f"), ("eval_welfare", "graded", ".1f")))
        last = _save(loop, run_dir, tc, sig, it, env_steps, offset + time.time() - t0)
    finally:
        loop.close()
        writer.close()
        if bar is not None:
            bar.close()
    seconds = offset + time.time() - t0
    if loop.capped:
        notes.append(
            f"stopped by the max_minutes cap ({tc.max_minutes:g} min of wall time) after {it} of {tc.iterations} iterations: how far a "
            f"capped run gets depends on the machine's speed; --resume {run_dir} trains on to {tc.iterations}"
        )
    res = TrainResult(
        run_dir=run_dir,
        checkpoint=last,
        iterations=it,
        env_steps=env_steps,
        seconds=seconds,
        agent_steps=env_steps * N,
        train_seconds=loop.train_seconds,
        rows=log.rows,
        notes=notes,
    )
    return finish(
        res,
        tc,
        task=tc.task,
        overrides=dict(tc.env),
        policy=lambda env: learner.policy(env),  # noqa: PLW0108 -- the grader takes a function (inspect.isfunction), not a bound method
        label=f"PPO torchrl ({tc.sharing}, {tc.reward_scheme})",
        episodes=tc.final_episodes if final_episodes is None else final_episodes,
        progress=progress,
        trained=f"Trained with TorchRL for {it} iterations ({env_steps:,} env steps, {env_steps * N:,} agent steps, {seconds / 60:.1f} min)"
        + "".join(f"; {n}" for n in notes),
        title=f"{tc.run_name}: PPO (TorchRL) on {tc.task}",
    )


def _to_cpu(x: Any) -> Any:
    """``x`` (tensors in dicts and lists) with every tensor on CPU."""
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, dict):
        return type(x)((k, _to_cpu(v)) for k, v in x.items())
    if isinstance(x, list):
        return [_to_cpu(v) for v in x]
    return x


__all__ = ["COLUMNS", "Learner", "Loop", "TorchRLTrainConfig", "TrainResult", "grade", "prepare", "train"]

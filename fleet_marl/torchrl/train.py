"""``fleet-marl train --engine torchrl``: IPPO and MAPPO on TorchRL's own parts, at vector speed.

The loop: TorchRL's ``AsyncCollector`` (``collector: async``, the default: a worker process on
the second core, collecting the next batch with the previous weights while this process learns)
or ``Collector`` (``sync``) steps a :class:`~fleet_marl.torchrl.FleetTorchEnv` (``num_envs``
clusters in one array step) with a masked multi-categorical actor for ``rollout`` steps;
``GAE`` computes each tenant's advantages and value targets; ``ClipPPOLoss`` is minimized for
``epochs`` passes over minibatches, with the learning rate annealed over the run
(``anneal_lr``). A tenant's samples count only while it is
in its episode (``("agents", "mask")``); one that finishes at step t is done there (no
bootstrap). A cluster's truncation (``max_cycles``) bootstraps every tenant still in it.

Under the sequential protocol (``env: {protocol: sequential, turn_order: ...}``) the collector
is :class:`~fleet_marl.torchrl.sequential.TurnCollector` (``AsyncTurnCollector`` for
``async``): the actor is called once per turn, on the per-turn vector env, and each batch of
``rollout`` rounds comes laid out per tenant and round as above, so the learner is the same.

Sharing schemes (:data:`~fleet_marl.torchrl.policy.SHARING`): ``shared``, ``per_tenant`` and
``per_kind`` are IPPO (each tenant's critic reads its own observation); ``mappo`` has a shared
actor and a centralized critic on ``state``.

A run writes, under ``<out>/<run name>/`` (default ``runs/train/<task>-<sharing>-<scheme>-torchrl``,
``...-<scheme>-sequential-torchrl`` under the sequential protocol),
what the RLlib route writes:

===================  ==========================================================================
``checkpoint/``      ``model.pt`` (the actor's and critic's weights, the optimizer) and
                     ``fleet_marl_torchrl.json`` (the config and the env's signature), read by
                     ``--resume`` and by ``fleet-marl evaluate --policy RUN``
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
import functools
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors import AsyncCollector, Collector
from torchrl.envs.utils import ExplorationType
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from fleet_marl.evaluation import Evaluation, evaluate
from fleet_marl.torchrl.config import COLUMNS, TorchRLTrainConfig
from fleet_marl.torchrl.env import GROUP, FleetTorchEnv
from fleet_marl.torchrl.loader import ENGINE
from fleet_marl.torchrl.policy import MaskedMultiCategorical, TrainedPolicy, build_networks
from fleet_marl.torchrl.sequential import AsyncTurnCollector, TurnCollector
from fleet_marl.training import MetricsLog, TrainConfigError, TrainResult, finish, prepare_run, progress_bar, start_run


class Learner:
    """The actor, the critic, the loss, GAE and the optimizer of one run (no env, no collector):
    what a checkpoint holds, and what the collector's policy is."""

    def __init__(self, tc: TorchRLTrainConfig, sig: dict):
        self.tc, self.sig = tc, sig
        self.nvec = list(sig["nvec"])
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
        self.actor_net, self.critic_net = actor_net, critic_net
        self.actor = ProbabilisticActor(
            TensorDictModule(actor_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "logits")]),
            in_keys={"logits": (GROUP, "logits"), "mask": (GROUP, "action_mask")},
            out_keys=[(GROUP, "action")],
            distribution_class=MaskedMultiCategorical,
            distribution_kwargs={"nvec": self.nvec, "coupling": getattr(actor_net, "coupling", None)},
            return_log_prob=True,
            log_prob_key=(GROUP, "action_log_prob"),
            default_interaction_type=ExplorationType.RANDOM,
        )
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

    def state_dict(self) -> dict:
        return {"actor": self.actor_net.state_dict(), "critic": self.critic_net.state_dict(), "optim": self.optim.state_dict()}

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
            perm = torch.randperm(n)
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
        return TrainedPolicy(env, copy.deepcopy(self.actor_net), self.nvec, explore=explore)


class Loop:
    """Collect and learn: iterating yields one :data:`COLUMNS` row per iteration (``welfare``
    the mean of the episodes that ended in the batch; no grader columns), after the learner's
    update and the collector's new weights. What the caller does between two rows (grading,
    checkpoints) is not training time (``train_seconds``) but counts towards ``max_minutes``;
    the loop ends after ``tc.iterations`` in all (``first`` done already) or when
    ``max_minutes`` are spent. ``close()`` stops the collector (also when the caller stops early).
    ``env`` is the sync collector's :class:`FleetTorchEnv` (None for ``async``: it lives in the
    worker process; and under the sequential protocol, whose collector is
    :class:`~fleet_marl.torchrl.sequential.TurnCollector`).

    >>> loop = Loop(tc, Learner(tc, tc.signature()))
    >>> for row in loop:
    ...     print(row["iteration"], row["welfare"])
    """

    def __init__(self, tc: TorchRLTrainConfig, learner: Learner, *, first: int = 0, env_steps: int = 0, offset: float = 0.0):
        self.tc, self.learner = tc, learner
        self.first, self.env_steps0, self.offset = first, env_steps, offset
        self.frames = tc.num_envs * tc.rollout
        self.n_agents = len(learner.sig["possible_agents"])
        self.train_seconds = 0.0
        seed = tc.seed + 1_000_003 * first  # a resumed run continues with fresh episodes
        # the env is seeded when it is built: TorchRL's collectors reset it in their constructor, so a
        # set_seed after that seeded only a reset that never came, and the first episodes drew fresh entropy
        make_env = functools.partial(FleetTorchEnv, tc.num_envs, tc.task, seed=seed, reward_scheme=tc.reward_scheme, **tc.env)
        kwargs = dict(
            frames_per_batch=self.frames, total_frames=self.frames * (tc.iterations - first), exploration_type=ExplorationType.RANDOM
        )
        if tc.sequential:
            # the sequential protocol: the actor called once per turn, batches laid out per round (torchrl/sequential.py)
            make = AsyncTurnCollector if tc.collector == "async" else TurnCollector
            self.collector = make(tc, learner.actor_net, learner.nvec, tc.iterations - first)
            self.collector.set_seed(seed)  # its first reset, which it makes when iterated
            self.env = None  # no FleetTorchEnv: the per-turn vector env is the collector's (``collector.venv``, sync)
        elif tc.collector == "async":
            # the env and the sampling policy in a worker process (another core), collecting the next
            # batch with the previous weights while this process learns on the last one
            # (this process keeps ``threads`` torch threads; TorchRL's default would be the cores minus the worker)
            self.collector = AsyncCollector(make_env, learner.actor, num_sub_threads=1, num_threads=tc.threads or None, **kwargs)
            self.env = None
        else:
            self.env = make_env()
            self.collector = Collector(self.env, learner.actor, auto_register_policy_transforms=False, **kwargs)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        tc, learner, frames, N = self.tc, self.learner, self.frames, self.n_agents
        it, env_steps = self.first, self.env_steps0
        t0 = time.time()
        tick = t0
        for data in self.collector:
            collected = time.time()
            it += 1
            env_steps += frames
            done = data.get(("next", "done")).squeeze(-1)
            welfare = data.get(("next", "episode_welfare")).squeeze(-1)[done]
            spent = (self.offset + collected - t0) / (60 * tc.max_minutes) if tc.max_minutes else 0.0
            lr = learner.set_progress(max((it - 1) / tc.iterations, spent))
            stats = learner.update(data)
            self.collector.update_policy_weights_()
            now = time.time()
            self.train_seconds += now - tick
            row: dict[str, Any] = dict.fromkeys(COLUMNS, "")
            row.update(
                iteration=it,
                env_steps=env_steps,
                agent_steps=env_steps * N,
                time_s=round(self.offset + now - t0, 2),
                agent_steps_per_s=round(frames * N / max(now - tick, 1e-9), 1),
                collect_s=round(collected - tick, 4),
                learn_s=round(now - collected, 4),
                episodes=int(done.sum()),
                lr=lr,
                **{k: round(v, 6) for k, v in stats.items()},
            )
            if len(welfare):
                row["welfare"] = round(float(welfare.mean()), 4)
            yield row
            if tc.max_minutes and self.offset + time.time() - t0 >= 60 * tc.max_minutes:
                return  # the time budget is spent
            tick = time.time()

    def close(self) -> None:
        self.collector.shutdown()


def prepare(
    tc: TorchRLTrainConfig, resume: str | None = None, overwrite: bool = False
) -> tuple[TorchRLTrainConfig, Path | None, dict | None]:
    """Everything checked before training: (config, checkpoint folder to resume or None, its sidecar)."""

    def check_signature(meta: dict, source: str) -> None:
        if meta.get("signature") != tc.signature():
            raise TrainConfigError(
                f"--resume {resume}: the checkpoint was trained on {meta.get('signature')}, this config has {tc.signature()}"
            )

    folder, meta = prepare_run(tc, ENGINE, resume, overwrite, check_signature)
    return tc, folder, meta


def _save(learner: Learner, run_dir: Path, tc: TorchRLTrainConfig, sig: dict, iteration: int, env_steps: int, seconds: float) -> Path:
    return ENGINE.save(
        run_dir, lambda folder: torch.save(learner.state_dict(), folder / "model.pt"), tc, sig, iteration, env_steps, seconds
    )


def grade(learner: Learner, tc: TorchRLTrainConfig, episodes: int) -> Evaluation:
    """The greedy policy's evaluation by the grader on seeds 0 .. episodes - 1."""
    return evaluate(
        tc.task,
        lambda env: learner.policy(env),  # noqa: PLW0108 -- the grader takes a function (inspect.isfunction), not a bound method
        episodes=episodes,
        seed=0,
        overrides=dict(tc.env),
        progress=False,
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
    first, offset, env_steps0 = 0, 0.0, 0
    if ckpt is not None and meta is not None:
        learner.load_state_dict(torch.load(ckpt / "model.pt", weights_only=True))
        first, offset, env_steps0 = int(meta["iteration"]), float(meta.get("seconds", 0.0)), int(meta.get("env_steps", 0))
    from tensorboardX import SummaryWriter  # only when training

    writer = SummaryWriter(str(run_dir / "tb"))
    log = MetricsLog(run_dir, COLUMNS, first if ckpt is not None else None)
    N = len(sig["possible_agents"])
    t0 = time.time()
    bar = progress_bar(tc, first, progress)
    it, env_steps, last = first, env_steps0, ckpt
    loop = Loop(tc, learner, first=first, env_steps=env_steps0, offset=offset)
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
                last = _save(learner, run_dir, tc, sig, it, env_steps, offset + time.time() - t0)
            if bar is not None:
                post: dict[str, Any] = {"steps": env_steps}
                if row["welfare"] != "":
                    post["welfare"] = f"{row['welfare']:.1f}"
                if row["eval_welfare"] != "":
                    post["graded"] = f"{row['eval_welfare']:.1f}"
                bar.set_postfix(post)
                bar.update(1)
        last = _save(learner, run_dir, tc, sig, it, env_steps, offset + time.time() - t0)
    finally:
        loop.close()
        writer.close()
        if bar is not None:
            bar.close()
    seconds = offset + time.time() - t0
    res = TrainResult(
        run_dir=run_dir,
        checkpoint=last,
        iterations=it,
        env_steps=env_steps,
        seconds=seconds,
        agent_steps=env_steps * N,
        train_seconds=loop.train_seconds,
        rows=log.rows,
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
        trained=f"Trained with TorchRL for {it} iterations ({env_steps:,} env steps, {env_steps * N:,} agent steps, {seconds / 60:.1f} min)",
        title=f"{tc.run_name}: PPO (TorchRL) on {tc.task}",
    )


__all__ = ["COLUMNS", "Learner", "Loop", "TorchRLTrainConfig", "TrainResult", "grade", "prepare", "train"]

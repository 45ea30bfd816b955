"""``fleet-marl bench --train``: end-to-end training throughput of ``make train``'s config (the
torchrl engine on ``easy``), against its target (:data:`~fleet_marl.studies.bench.targets.TRAIN_TARGETS`),
and its table.
"""

from __future__ import annotations

import tempfile
from typing import Any

from fleet_marl.errors import require
from fleet_marl.studies.bench.targets import TRAIN_TARGETS, verdict


def train_throughput(quick: bool = False, progress: bool = True) -> dict:
    """End-to-end training throughput of ``fleet-marl train`` (the torchrl engine, its default
    config: ``make train``) on ``easy``: env, inference and learning, wall time per iteration
    on the cores this process may use (the target is for the 2-core machine; the default
    config collects in a worker process while this one learns), the first iterations
    (warm-up, compilation, the worker's start) left out; plus where the learner's time goes
    (waiting for the batch vs learning on it)."""
    require(("torch", "torchrl", "tensordict"), "torchrl", "fleet-marl bench --train")
    import torch  # torch: only for --train

    from fleet_marl.torchrl.train import TorchRLTrainConfig, train  # torch: only for --train

    iterations, warmup = (4, 2) if quick else (24, 4)
    with tempfile.TemporaryDirectory() as tmp:
        tc = TorchRLTrainConfig(
            iterations=iterations + warmup, max_minutes=0, eval_interval=0, final_episodes=0, checkpoint_interval=0, out=tmp
        )
        res = train(tc, progress=progress)
    rows = res.rows[warmup:]
    n = len(tc.signature()["possible_agents"])
    frames = tc.num_envs * tc.rollout * n
    wall = float(rows[-1]["time_s"]) - float(res.rows[warmup - 1]["time_s"])
    collect = sum(float(x["collect_s"]) for x in rows)
    learn = sum(float(x["learn_s"]) for x in rows)
    r: dict[str, Any] = {
        "train_task": tc.task,
        "train_num_envs": tc.num_envs,
        "train_rollout": tc.rollout,
        "train_epochs": tc.epochs,
        "train_minibatch": tc.minibatch,
        "train_hidden": list(tc.hidden),
        "train_iterations_timed": len(rows),
        "train_threads": tc.threads or torch.get_num_threads(),
        "train_collector": tc.collector,
        "train_agent_steps_per_s_easy": frames * len(rows) / wall,
        "train_wait_share": collect / (collect + learn),
        "train_learn_agent_steps_per_s": frames * len(rows) / learn,
    }
    r["targets"] = {k: verdict(r[k], *TRAIN_TARGETS[k]) for k in TRAIN_TARGETS}
    return r


def format_train_table(r: dict) -> str:
    where = (
        "a worker process collects the next batch while the learner learns" if r["train_collector"] == "async" else "collect, then learn"
    )
    lines = [
        f"fleet-marl bench --train: {r['train_task']}, {r['train_num_envs']} clusters x {r['train_rollout']} steps per iteration, "
        f"{r['train_epochs']} epochs, {r['train_threads']} torch thread(s), {r['train_collector']} collector ({where}); "
        f"{r['train_iterations_timed']} iterations timed",
        "",
    ]
    lines.append(
        f"end-to-end training      {r['train_agent_steps_per_s_easy']:>12,.0f} agent-steps/s (wall time: env, inference, learning)"
    )
    lines.append(f"  learning alone         {r['train_learn_agent_steps_per_s']:>12,.0f} agent-steps/s (GAE + PPO epochs)")
    lines.append(f"  waiting for the batch  {r['train_wait_share']:>12.0%} of the learner's time")
    for key, t in r["targets"].items():
        lines.append(f"\n{key}: {t['measured']:,.0f} >= {t['target']:,.0f}: {'met' if t['met'] else 'NOT met'} (ratio {t['ratio']:.2f})")
    return "\n".join(lines)


__all__ = ["format_train_table", "train_throughput"]

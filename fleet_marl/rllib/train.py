"""The loop behind ``fleet-marl train`` (``make train``): PPO on fleet_marl with RLlib.

:func:`train` checks everything it can before Ray starts (the config, the checkpoint to
resume, the CPUs asked for), then trains with a progress bar and writes, under
``<out>/<run name>/``:

===================  ==========================================================================
``checkpoint/``      RLlib's checkpoint plus ``fleet_marl.json`` (the config and the env's
                     signature, checked on ``--resume`` and by ``ModulePolicy``)
``metrics.csv``      one row per iteration: :data:`COLUMNS`
``tb/``              TensorBoard scalars: every numeric leaf of RLlib's result
``learning_curve.png``  training welfare and the grader's evaluations against the references
``results.md``       the final table: the trained policy and every reference policy, graded on
                     the same seeds; ``results.json`` has the summaries
===================  ==========================================================================

:func:`init_ray` starts Ray on this machine or joins a cluster (``--address``). The run
folder, its checks and the end of the run are every engine's (:mod:`fleet_marl.training`).

Nothing here runs at import time; ``import fleet_marl.rllib.train`` imports Ray but does not
start it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import ray
import torch

from fleet_marl.rllib.callbacks import EPISODE_METRICS, EVAL_METRICS
from fleet_marl.rllib.config import TrainConfig, TrainConfigError, build, check_signature
from fleet_marl.rllib.evaluation import grader_task
from fleet_marl.rllib.loader import ENGINE
from fleet_marl.rllib.policy import ModulePolicy
from fleet_marl.training import MetricsLog, TrainResult, finish, prepare_run, progress_bar, show_progress, start_run, unreachable

#: RLlib's lifetime agent-steps, one leaf per agent (``.../tenant_0`` ...): ``agent_steps`` is their sum.
AGENT_STEPS = "env_runners/num_agent_steps_sampled_lifetime"
#: The columns of ``metrics.csv``, in order (empty where an iteration has no value, e.g. no
#: episode ended or no evaluation ran).
COLUMNS = (
    ("iteration", "training_iteration"),
    ("env_steps", "num_env_steps_sampled_lifetime"),
    ("agent_steps", AGENT_STEPS),
    ("time_s", "time_total_s"),
    ("episodes", "env_runners/num_episodes"),
    ("episode_return_mean", "env_runners/episode_return_mean"),
    *((m, f"env_runners/fleet/{m}") for m in EPISODE_METRICS),
    ("score_train", "env_runners/fleet/score_train"),
    *((m, f"evaluation/fleet/{m}") for m in EVAL_METRICS),
    ("policy_loss", "learners/__mean__/policy_loss"),
    ("vf_loss", "learners/__mean__/vf_loss"),
    ("vf_explained_var", "learners/__mean__/vf_explained_var"),
    ("entropy", "learners/__mean__/entropy"),
    ("mean_kl_loss", "learners/__mean__/mean_kl_loss"),
)


def flatten(result: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested RLlib result as ``{"a/b/c": value}``, plus
    ``learners/__mean__/<stat>``: each learner statistic averaged over the modules."""
    out: dict[str, float] = {}

    def walk(d, pre):
        for k, v in d.items():
            key = f"{pre}{k}"
            if isinstance(v, dict):
                walk(v, key + "/")
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                out[key] = float(v)
            elif hasattr(v, "item") and getattr(v, "size", 2) == 1:
                try:
                    x = float(v.item())
                except (TypeError, ValueError):
                    continue
                if math.isfinite(x):
                    out[key] = x

    walk({k: v for k, v in result.items() if k != "config"}, prefix)
    stats: dict[str, list[float]] = {}
    for mid, d in (result.get("learners") or {}).items():
        if mid == "__all_modules__" or not isinstance(d, dict):
            continue
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                stats.setdefault(k, []).append(float(v))
    for k, vs in stats.items():
        out[f"learners/__mean__/{k}"] = sum(vs) / len(vs)
    return out


INT_COLUMNS = ("iteration", "env_steps", "agent_steps", "episodes")


def row_of(flat: dict[str, float]) -> dict[str, Any]:
    row = {name: flat.get(key, "") for name, key in COLUMNS}
    per_agent = [v for k, v in flat.items() if k.startswith(AGENT_STEPS + "/")]
    if per_agent:
        row["agent_steps"] = sum(per_agent)
    for name in INT_COLUMNS:
        if row[name] != "":
            row[name] = int(row[name])
    return row


def init_ray(address: str | None = None, num_env_runners: int = 0, log_to_driver: bool = True) -> bool:
    """Start Ray on this machine, or join the cluster at ``address`` ('auto' or host:port) and
    check it has a CPU for each of ``num_env_runners`` remote env runners (the driver runs the
    learner). Nothing happens if Ray is running already. ``log_to_driver`` applies to a local
    start only (on a cluster the workers' lines always come back). True if this call started
    or joined Ray (and so should ``ray.shutdown()``)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True)
        except ConnectionError as exc:
            raise TrainConfigError(
                f"--address {address!r}: no Ray cluster found ({exc}). Start one with 'ray start --head' "
                "(see docs/training.md), or leave out --address to train on this machine"
            ) from None
        cpus = ray.cluster_resources().get("CPU", 0)
        if num_env_runners > cpus:
            ray.shutdown()
            raise TrainConfigError(
                f"--num-env-runners {num_env_runners}: the cluster at {address} has {cpus:g} CPUs; use at most {int(cpus)}"
            )
        return True
    ray.init(
        address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=log_to_driver
    )
    return True


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` nobody listens on (``ray.init`` would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or address.startswith(("ray://", "auto")):
        return  # "auto" and ray:// addresses: ray.init reports them itself
    why = unreachable(host, port)
    if why is not None:
        raise TrainConfigError(
            f"--address {address!r}: no Ray cluster found (nothing answers on {host}:{port}: {why}). "
            "Start one with 'ray start --head --port PORT' (see docs/training.md), or leave out --address to train on this machine"
        )


def _save(algo: Any, run_dir: Path, tc: TrainConfig, iteration: int, env_steps: int, seconds: float = 0.0) -> Path:
    return ENGINE.save(run_dir, lambda folder: algo.save_to_path(str(folder.resolve())), tc, tc.signature(), iteration, env_steps, seconds)


def prepare(tc: TrainConfig, resume: str | None = None, overwrite: bool = False) -> tuple[TrainConfig, Path | None, dict | None]:
    """Everything checked before Ray starts: (config, checkpoint to resume or None, its sidecar)."""
    ckpt, meta = prepare_run(tc, ENGINE, resume, overwrite, lambda meta, source: check_signature(meta, tc, source))
    return tc, ckpt, meta


def train(
    tc: TrainConfig,
    *,
    address: str | None = None,
    resume: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    final_episodes: int | None = None,
) -> TrainResult:
    """Train ``tc`` (see the module docstring). ``resume``: a run folder or its checkpoint;
    ``overwrite``: start the run folder over (otherwise an existing run there is an error)."""
    tc, ckpt, meta = prepare(tc, resume, overwrite)
    if address is None and tc.num_env_runners > (os.cpu_count() or 1):  # one CPU per remote env runner
        raise TrainConfigError(
            f"--num-env-runners {tc.num_env_runners}: this machine has {os.cpu_count()} CPUs; use at most {os.cpu_count()} (or 0: sample in the driver)"
        )
    run_dir = start_run(tc, ckpt, overwrite)  # only once every check has passed
    offset = float(meta.get("seconds", 0.0)) if meta else 0.0  # RLlib's clock restarts on restore
    started = init_ray(address, tc.num_env_runners)
    t0 = time.time()
    writer = None
    algo = None
    try:
        torch.set_num_threads(1)  # one core per process: the env runners and the learner share the machine
        algo = build(tc).build_algo()
        if ckpt is not None:
            algo.restore_from_path(str(ckpt.resolve()))
        from tensorboardX import SummaryWriter  # Ray's optional dependency: only when training

        writer = SummaryWriter(str(run_dir / "tb"))
        log = MetricsLog(run_dir, [c for c, _ in COLUMNS], int(meta.get("iteration", 0)) if meta is not None else None)
        first = algo.iteration
        bar = progress_bar(tc, first, progress)
        env_steps = 0
        last_ckpt = ckpt
        done = first
        for it in range(first, tc.iterations):
            result = algo.train()
            done = it + 1
            flat = flatten(result)
            if "time_total_s" in flat:
                flat["time_total_s"] += offset
            row = row_of(flat)
            log.append(row)
            step = int(flat.get("num_env_steps_sampled_lifetime", 0))
            env_steps = step
            for k, v in flat.items():
                writer.add_scalar(k, v, step)
            writer.flush()
            if tc.checkpoint_interval and (it + 1) % tc.checkpoint_interval == 0 and it + 1 < tc.iterations:
                last_ckpt = _save(algo, run_dir, tc, it + 1, step, offset + time.time() - t0)
            show_progress(bar, step, row, (("welfare", "welfare", ".1f"), ("score", "score", ".2f")))
            if tc.max_minutes and done < tc.iterations and offset + time.time() - t0 >= 60 * tc.max_minutes:
                break  # the max_minutes cap: this iteration passed it
        if bar is not None:
            bar.close()
        last_ckpt = _save(algo, run_dir, tc, done, env_steps, offset + time.time() - t0)
    finally:
        if writer is not None:
            writer.close()
        if algo is not None:
            algo.stop()
            with contextlib.suppress(OSError):  # the empty folder RLlib makes under ~/ray_results for every Algorithm
                os.rmdir(algo.logdir)
        if started:
            ray.shutdown()
    seconds = offset + time.time() - t0
    notes = []
    if done < tc.iterations:
        notes.append(
            f"stopped by the max_minutes cap ({tc.max_minutes:g} min of wall time) after {done} of {tc.iterations} iterations: how far a "
            f"capped run gets depends on the machine's speed; --resume {run_dir} trains on to {tc.iterations}"
        )
    res = TrainResult(
        run_dir=run_dir, checkpoint=last_ckpt, iterations=done, env_steps=env_steps, seconds=seconds, rows=log.rows, notes=notes
    )
    task, overrides = grader_task(tc.env_config())
    return finish(
        res,
        tc,
        task=task,
        overrides=overrides,
        policy=lambda env: ModulePolicy.from_checkpoint(last_ckpt, env),
        label=f"PPO ({tc.sharing}, {tc.reward_scheme})",
        episodes=tc.final_episodes if final_episodes is None else final_episodes,
        progress=progress,
        trained=f"Trained {done} iterations ({env_steps:,} env steps, {seconds / 60:.1f} min)" + "".join(f"; {n}" for n in notes),
        title=f"{tc.run_name}: PPO on {tc.task}",
    )


def quiet() -> None:
    """Silence notices every run prints: RLlib's "new API stack" and ``RLModuleConfig``
    deprecation warnings (RLlib's own code triggers them), and gymnasium's re-registration of
    RLlib's vector env. Global (logging levels, a warnings filter): ``fleet-marl train`` calls
    it; ``train()`` from Python does not."""
    logging.getLogger("ray.rllib.algorithms.algorithm_config").setLevel(logging.ERROR)
    logging.getLogger("ray.rllib.core.rl_module.rl_module").setLevel(logging.ERROR)  # RLModuleConfig deprecation
    warnings.filterwarnings("ignore", message=r".*Overriding environment rllib-multi-agent-env-v0")

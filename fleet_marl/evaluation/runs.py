"""A training run's folder, for every training engine (``fleet_marl.rllib.train`` and
``fleet_marl.torchrl.train``): what both engines check, write and show the same way.

:class:`TrainConfigError`     a bad training config, run folder or checkpoint (names the field, the
                              value and what to do); both engines raise it
:func:`check_common`          the config fields both engines share (task, reward scheme, sharing,
                              env overrides, layer widths, run folder name); :func:`check_env`
                              builds the config's env
:func:`config_path`           a run config (``--config NAME``)
:func:`claim_run_folder`      refuses a folder that holds a run unless resuming or overwriting, and
                              clears it for ``--overwrite``
:func:`swap_in_checkpoint`    writes ``checkpoint/`` atomically (into ``checkpoint.tmp/``, then swapped)
:func:`check_trained_on`      a trained run may be graded only on the agents, action spaces and
                              scenario it learned
:func:`learning_curve`        ``learning_curve.png`` from the rows of ``metrics.csv``
:func:`final_evaluation`      the trained policy and every reference policy on the same seeds
:func:`print_summary`         what ``fleet-marl train`` prints at the end

No training framework is imported here; matplotlib only when a curve is drawn.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleet_marl.config import REWARD_SCHEMES, ConfigError
from fleet_marl.evaluation.baselines import checkout, table
from fleet_marl.evaluation.loading import PolicyError, fleet_env_or_none
from fleet_marl.evaluation.score import Evaluation, evaluate
from fleet_marl.policies import POLICIES
from fleet_marl.tasks import TASKS, make_config


class TrainConfigError(ValueError):
    """A bad training config, run folder or checkpoint: names the field, the value and what was
    expected, or says what to do."""


def check_common(cfg: Any, source: str, sharing: tuple[str, ...] | list[str], bad: Callable[[str, str], None]) -> None:
    """The fields every engine's config has: ``bad(name, expected)`` raises for the first wrong one."""
    if cfg.task not in TASKS:
        bad("task", f"one of {', '.join(TASKS)}")
    if cfg.reward_scheme not in REWARD_SCHEMES:
        bad("reward_scheme", f"one of {', '.join(REWARD_SCHEMES)}")
    if cfg.sharing not in sharing:
        bad("sharing", f"one of {', '.join(sharing)}")
    if not isinstance(cfg.env, dict):
        bad("env", "a mapping of fleet_marl.parallel_env overrides")
    if (
        not isinstance(cfg.hidden, list)
        or not cfg.hidden
        or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in cfg.hidden)
    ):
        bad("hidden", "a non-empty list of positive layer widths, e.g. [128, 128]")
    if not isinstance(cfg.out, str) or not cfg.out:
        bad("out", "a folder path")
    if not isinstance(cfg.name, str) or "/" in cfg.name:
        bad("name", "a folder name without '/'")


def check_env(cfg: Any, source: str) -> None:
    """The config's env can be built (``cfg.probe()``): its overrides and trace files; the last check."""
    try:
        cfg.probe()
    except (ConfigError, ValueError, TypeError, FileNotFoundError) as exc:
        raise TrainConfigError(f"{source}: env = {cfg.env!r}: {exc}") from None


def claim_run_folder(run_dir: Path, outputs: tuple[str, ...], overwrite: bool) -> None:
    """Refuse ``run_dir`` if it holds a run (a checkpoint or metrics), unless ``overwrite``:
    then remove what a run writes (``outputs``) from it. Call it once every other check passed."""
    if not overwrite:
        if (run_dir / "checkpoint").exists() or (run_dir / "metrics.csv").exists():
            raise TrainConfigError(
                f"run folder {str(run_dir)!r} already holds a run; pass --resume {run_dir} to continue it, "
                "--overwrite to start it over, or --name to start another"
            )
        return
    for name in outputs:
        p = run_dir / name
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def swap_in_checkpoint(run_dir: Path, write: Callable[[Path], None], sidecar: str, meta: dict) -> Path:
    """``run_dir / "checkpoint"`` written atomically: ``write(folder)`` and the ``sidecar`` JSON
    (``meta``) go into ``checkpoint.tmp/``, which then replaces the old checkpoint."""
    final, tmp, old = run_dir / "checkpoint", run_dir / "checkpoint.tmp", run_dir / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    (tmp / sidecar).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def check_trained_on(spec: str, meta: dict, env) -> None:
    """Raise :class:`PolicyError` unless the run whose sidecar is ``meta`` learned ``env``'s
    agents, action spaces and scenario (rewards and fairness detectors may differ)."""
    fe = fleet_env_or_none(env)
    if fe is None:
        return
    trained = meta.get("train_config", {})
    learned = (trained.get("env") or {}).get("protocol", "simultaneous")
    playing = getattr(getattr(env, "unwrapped", env), "protocol", "simultaneous")  # FleetSequentialEnv has one
    if learned != playing:
        raise PolicyError(
            spec,
            f"the run was trained with protocol = {learned!r} and this environment plays protocol = {playing!r} "
            "(the sequential protocol's observations have 6 more features, the claims before the tenant's turn); "
            f"evaluate it with --protocol {learned} (overrides protocol={learned!r})",
        )
    sig = meta.get("signature", {})
    want = {"possible_agents": list(fe.possible_agents), "nvec": fe.nvec.max(0).tolist()}
    for k, v in want.items():
        if sig.get(k) != v:
            raise PolicyError(
                spec,
                f"the run was trained on task {sig.get('task')!r} with {k} = {sig.get(k)!r}; this environment has {v!r}. "
                "Evaluate it on its own task",
            )
    if trained:
        cfg, _ = make_config(trained.get("task"), None, **trained.get("env", {}))
        if dataclasses.replace(cfg, reward=fe.config.reward, fairness=fe.config.fairness) != fe.config:
            raise PolicyError(
                spec,
                f"the run was trained on task {trained.get('task')!r} with env overrides {trained.get('env', {})!r}, "
                "and this environment's scenario differs; evaluate it with the same overrides, e.g. "
                f"evaluate({trained.get('task')!r}, {spec!r}, overrides={trained.get('env', {})!r})",
            )


def config_path(name: str) -> Path:
    """A training ``--config`` as given, or ``experiments/configs/<name>.yaml`` of the checkout."""
    p = Path(name)
    if p.is_file() or p.suffix in (".yaml", ".yml") or "/" in name:
        return p
    root = checkout()
    cand = (root / "experiments" / "configs" / f"{name}.yaml") if root else p
    return cand if cand.is_file() else p


def learning_curve(rows: list[dict], path: Path, title: str, references: dict[str, float] | None = None, x: str = "env_steps") -> Path:
    """Training welfare per iteration (``welfare``) and the grader's evaluations
    (``eval_welfare``) against ``x``, with the references' welfare as horizontal lines."""
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    def series(name):
        xs, ys = [], []
        for r in rows:
            if r.get(name) not in ("", None) and r.get(x) not in ("", None):
                xs.append(float(r[x]))
                ys.append(float(r[name]))
        return xs, ys

    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs, ys = series("welfare")
    ax.plot(xs, ys, color="tab:blue", label="PPO, training episodes (sampled actions)")
    xs, ys = series("eval_welfare")
    if xs:
        ax.plot(xs, ys, "o-", color="tab:orange", label="PPO, grader (greedy, seeds 0..)")
    colors = iter(["tab:gray", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"])
    for name, w in (references or {}).items():
        ax.axhline(w, ls="--", lw=1, color=next(colors, "k"), label=f"{name} ({w:.0f})")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel("episode welfare")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def final_evaluation(
    task: str, overrides: dict, policy: Callable[[Any], Any], label: str, episodes: int, progress: bool = True
) -> tuple[list[Evaluation], str]:
    """The trained ``policy`` (a factory ``env -> policy``) and every reference policy on
    ``task`` with ``overrides``, seeds ``0 .. episodes - 1``: (evaluations, markdown table)."""
    names = list(POLICIES)
    bar = tqdm(total=1 + len(names), desc="final evaluation", unit="policy", file=sys.stderr, leave=False) if progress else None
    ev = evaluate(task, policy, episodes=episodes, seed=0, overrides=overrides, progress=False)
    ev.policy = label
    evals = [ev]
    if bar is not None:
        bar.update(1)
    for name in names:
        evals.append(evaluate(task, name, episodes=episodes, seed=0, overrides=overrides, progress=False))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return evals, table(evals)


def print_summary(res: Any, task: str, env: dict, headline: str) -> None:
    """What ``fleet-marl train`` prints when a run ends: ``headline``, the final table, where
    the run's files are and how to grade it again."""
    print(headline)
    if res.table:
        print()
        print(res.table)
        print()
    print(f"checkpoint      {res.checkpoint}")
    print(f"metrics         {res.run_dir / 'metrics.csv'}  (tensorboard --logdir {res.run_dir / 'tb'})")
    print(f"learning curve  {res.run_dir / 'learning_curve.png'}")
    if env:
        print(
            f"evaluate again  fleet_marl.evaluation.evaluate({task!r}, {str(res.run_dir)!r}, overrides={env!r})  (the run's env overrides)"
        )
    else:
        print(f"evaluate again  fleet-marl evaluate --task {task} --policy {res.run_dir}")


__all__ = [
    "TrainConfigError",
    "check_common",
    "check_env",
    "check_trained_on",
    "claim_run_folder",
    "config_path",
    "final_evaluation",
    "learning_curve",
    "print_summary",
    "swap_in_checkpoint",
]

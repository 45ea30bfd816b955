"""A trained run graded and shown the same way by every engine.

:func:`check_trained_on`  a trained run may be graded only on the agents, action spaces and
                          scenario it learned (the engines' grader loaders call it)
:func:`engine_loader`     an engine's grader loader: a spec that is one of its run folders
:func:`final_evaluation`  the trained policy and every reference policy on the same seeds
:func:`learning_curve`    ``learning_curve.png`` from the rows of ``metrics.csv``
:func:`finish`            the end of a run: the final evaluation into ``results.md`` and
                          ``results.json``, and the learning curve
:func:`print_summary`     what ``fleet-marl train`` prints at the end (:func:`print_result`
                          with ``--json``)

matplotlib is imported only when a curve is drawn.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleet_marl.evaluation.baselines import table
from fleet_marl.evaluation.loading import PolicyError, PolicyLoader, fleet_env_or_none
from fleet_marl.evaluation.score import Evaluation, evaluate
from fleet_marl.policies import POLICIES
from fleet_marl.suite import SUITE
from fleet_marl.tasks import make_config
from fleet_marl.training.engines import ENGINES
from fleet_marl.training.folder import TrainResult

#: The reference policies a learning curve draws as horizontal lines.
CURVE_REFERENCES = ("random", "fair_share", "precision_expert", "planner")


def engine_loader(name: str, load: Callable[..., Any], description: str) -> PolicyLoader:
    """The grader's loader of the engine ``name`` of :data:`~fleet_marl.training.engines.ENGINES`:
    it accepts a spec that is one of the engine's run folders or checkpoints (its sidecar
    beside), and loads it with ``load(spec, env)``."""
    folder = ENGINES[name].checkpoints.checkpoint_folder
    return PolicyLoader(name=name, accepts=lambda spec: folder(spec) is not None, load=load, description=description)


def check_trained_on(spec: str, meta: dict, env: Any) -> None:
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


def learning_curve(rows: list[dict], path: Path, title: str, references: dict[str, float] | None = None, x: str = "env_steps") -> Path:
    """Training welfare per iteration (``welfare``) and the grader's evaluations
    (``eval_welfare``) against ``x``, with the references' welfare as horizontal lines."""
    import matplotlib  # matplotlib: only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when plotting

    def series(name: str) -> tuple[list[float], list[float]]:
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
    ``task`` with ``overrides``, seeds ``0 .. episodes - 1``: (evaluations, markdown table). On a
    suite task the trained policy is graded on scenarios ``0 .. episodes - 1`` of its train split
    and of its held-out split (two rows), the references on the held-out ones."""
    names = list(POLICIES)
    # a suite task's learned policy is graded on its train scenarios and its held-out ones (the references on the held-out ones)
    splits = ["train", "heldout"] if task in SUITE else [None]
    bar = tqdm(total=len(splits) + len(names), desc="final evaluation", unit="policy", file=sys.stderr, leave=False) if progress else None
    evals = []
    for split in splits:
        over = overrides if split is None else {**overrides, "split": split}
        ev = evaluate(task, policy, episodes=episodes, seed=0, overrides=over, progress=False)
        ev.policy = label if split is None else f"{label} [{split}]"
        evals.append(ev)
        if bar is not None:
            bar.update(1)
    for name in names:
        evals.append(evaluate(task, name, episodes=episodes, seed=0, overrides=overrides, progress=False))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return evals, table(evals)


def finish(
    res: TrainResult,
    tc: Any,
    *,
    task: str,
    overrides: dict,
    policy: Callable[[Any], Any],
    label: str,
    episodes: int,
    progress: bool,
    trained: str,
    title: str,
) -> TrainResult:
    """The end of a run in ``res.run_dir``: with ``episodes``, the final evaluation of ``policy``
    (named ``label``) on ``task`` with ``overrides`` into ``res`` and ``results.md`` (headed
    ``trained``, what was trained) and ``results.json``; then the learning curve (``title``)
    with the references' welfare."""
    refs: dict[str, float] = {}
    if episodes:
        evals, tab = final_evaluation(task, overrides, policy, label, episodes, progress)
        res.final = [e.summary() for e in evals]
        res.table = tab
        refs = {e.policy: float(e.welfare.mean()) for e in evals if e.policy in POLICIES}
        text = f"# {tc.run_name}\n\n{trained}, seed {tc.seed}. Graded on seeds 0..{episodes - 1} of `{tc.task}`.\n\n{tab}\n"
        (res.run_dir / "results.md").write_text(text)
        (res.run_dir / "results.json").write_text(
            json.dumps(
                {"train_config": tc.to_dict(), "env_steps": res.env_steps, "seconds": res.seconds, "evaluations": res.final}, indent=2
            )
        )
    learning_curve(res.rows, res.run_dir / "learning_curve.png", title, {k: v for k, v in refs.items() if k in CURVE_REFERENCES})
    return res


def print_summary(res: TrainResult, task: str, env: dict, headline: str) -> None:
    """What ``fleet-marl train`` prints when a run ends: ``headline``, the final table, where
    the run's files are and how to grade it again."""
    print(headline)
    for note in res.notes:
        print(f"note: {note}")
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


def print_result(res: TrainResult, tc: Any, as_json: bool, headline: str) -> int:
    """``fleet-marl train``'s last words: the run's summary as JSON (``--json``), or
    :func:`print_summary`; returns the exit code (0)."""
    if as_json:
        print(json.dumps(res.summary(), indent=2))
    else:
        print_summary(res, tc.task, tc.env, headline)
    return 0


def usage_error(exc: Exception) -> int:
    """Print a bad option of ``fleet-marl train`` and the hint; returns the exit code (2)."""
    print(f"error: {exc}", file=sys.stderr)
    print("run 'fleet-marl train --help' for the options", file=sys.stderr)
    return 2


__all__ = [
    "CURVE_REFERENCES",
    "check_trained_on",
    "engine_loader",
    "final_evaluation",
    "finish",
    "learning_curve",
    "print_result",
    "print_summary",
    "usage_error",
]

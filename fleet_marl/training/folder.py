"""A training run's folder, ``<out>/<run name>/``, written the same way by every engine.

===================  ==========================================================================
``checkpoint/``      the engine's weights plus its sidecar (:class:`Engine`: the config, the
                     env's signature, the iteration), swapped in atomically
                     (:func:`swap_in_checkpoint`); read by ``--resume`` and by the grader
``metrics.csv``      one row per iteration, the engine's columns (:class:`MetricsLog`)
``tb/``              TensorBoard scalars (the engine writes them)
``learning_curve.png``, ``results.md``, ``results.json``
                     the end of the run (:mod:`fleet_marl.training.results`)
``config.yaml``      the run's config (:func:`start_run`)
===================  ==========================================================================

:func:`prepare_run` checks the folder (or the checkpoint to resume) before anything trains;
:func:`start_run` claims it. :class:`TrainResult` is what a run returns.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from fleet_marl.training.config import TrainConfigError, check_iterations_left

#: The checkpoint folder in a run folder.
CHECKPOINT = "checkpoint"

#: What a run writes into its folder (``--overwrite`` removes these first).
OUTPUTS = (CHECKPOINT, "checkpoint.tmp", "tb", "metrics.csv", "learning_curve.png", "results.md", "results.json", "config.yaml")


@dataclass(frozen=True)
class Engine:
    """An engine's name for its checkpoints: the ``sidecar`` JSON next to its weights in
    ``checkpoint/`` says which engine wrote a run, and holds the config and the env's signature.
    ``command`` is what wrote it (for messages); ``native`` the file the framework's own
    checkpoints hold (a folder with it and no sidecar was not written by ``command``)."""

    name: str
    sidecar: str
    command: str
    native: str = ""

    def checkpoint_folder(self, spec: str | Path) -> Path | None:
        """The checkpoint folder ``spec`` names (the run folder or its ``checkpoint/``), or None."""
        folder = Path(spec)
        if not folder.is_dir():
            return None
        for f in (folder, folder / CHECKPOINT):
            if (f / self.sidecar).is_file():
                return f
        return None

    def read_sidecar(self, folder: str | Path) -> dict:
        """The sidecar of a checkpoint folder, or a :class:`TrainConfigError` saying what is wrong."""
        path = Path(folder)
        if not path.is_dir():
            raise TrainConfigError(
                f"checkpoint {str(path)!r}: no such folder; pass the run folder or its 'checkpoint' folder that {self.command} wrote "
                "(runs/train/<run>/checkpoint)"
            )
        side = path / self.sidecar
        if not side.is_file():
            hint = (
                f" (a {self.name} checkpoint, but not one {self.command} wrote)" if self.native and (path / self.native).is_file() else ""
            )
            raise TrainConfigError(
                f"checkpoint {str(path)!r}: no {self.sidecar}{hint}; expected a checkpoint folder written by {self.command}"
            )
        try:
            return json.loads(side.read_text())
        except (OSError, ValueError) as exc:
            raise TrainConfigError(f"checkpoint {str(side)!r}: not valid JSON ({exc})") from None

    def find(self, spec: str | Path) -> Path:
        """The checkpoint folder of ``--resume spec``, or a :class:`TrainConfigError`."""
        folder = self.checkpoint_folder(spec)
        if folder is None:
            self.read_sidecar(spec)  # raises with what is wrong
            folder = Path(spec)
        return folder

    def save(
        self, run_dir: Path, write: Callable[[Path], None], tc: Any, signature: dict, iteration: int, env_steps: int, seconds: float
    ) -> Path:
        """``run_dir / "checkpoint"``: ``write(folder)`` writes the weights, and the sidecar records
        the engine, ``signature``, the config and how far the run got."""
        meta = {
            "engine": self.name,
            "signature": signature,
            "train_config": tc.to_dict(),
            "iteration": iteration,
            "env_steps": env_steps,
            "seconds": seconds,
        }
        return swap_in_checkpoint(run_dir, write, self.sidecar, meta)


@dataclass
class TrainResult:
    """What a run produced. ``agent_steps`` and ``train_seconds`` (collection and learning,
    without the grader) where the engine counts them."""

    run_dir: Path
    checkpoint: Path
    iterations: int
    env_steps: int
    seconds: float
    agent_steps: int | None = None
    train_seconds: float | None = None
    rows: list[dict] = field(default_factory=list)
    final: list[dict] = field(default_factory=list)  # summaries of the final evaluation
    table: str = ""
    notes: list[str] = field(default_factory=list)  # what the user must know about how the run went (a cap that bound, a resume)

    def summary(self) -> dict:
        """What ``fleet-marl train --json`` prints."""
        out: dict[str, Any] = {"run_dir": str(self.run_dir), "checkpoint": str(self.checkpoint), "env_steps": self.env_steps}
        if self.agent_steps is not None:
            out["agent_steps"] = self.agent_steps
        if self.notes:
            out["notes"] = self.notes
        return {**out, "seconds": self.seconds, "evaluations": self.final}


def claim_run_folder(run_dir: Path, outputs: tuple[str, ...], overwrite: bool) -> None:
    """Refuse ``run_dir`` if it holds a run (a checkpoint or metrics), unless ``overwrite``:
    then remove what a run writes (``outputs``) from it. Call it once every other check passed."""
    if not overwrite:
        if (run_dir / CHECKPOINT).exists() or (run_dir / "metrics.csv").exists():
            raise TrainConfigError(
                f"run folder {str(run_dir)!r} already holds a run; pass --resume {run_dir} to continue it, "
                "--overwrite to start it over, or --name to start another"
            )
        return
    for name in outputs:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def swap_in_checkpoint(run_dir: Path, write: Callable[[Path], None], sidecar: str, meta: dict) -> Path:
    """``run_dir / "checkpoint"`` written atomically: ``write(folder)`` and the ``sidecar`` JSON
    (``meta``) go into ``checkpoint.tmp/``, which then replaces the old checkpoint."""
    final, tmp, old = run_dir / CHECKPOINT, run_dir / "checkpoint.tmp", run_dir / "checkpoint.old"
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


def prepare_run(
    tc: Any, engine: Engine, resume: str | None, overwrite: bool, check_signature: Callable[[dict, str], None]
) -> tuple[Path | None, dict | None]:
    """Everything about the run folder checked before training starts: (checkpoint folder to
    resume or None, its sidecar or None). A new run's folder must hold no run unless
    ``overwrite``; a resumed one must be ``engine``'s, match ``check_signature(meta, folder)``
    and have iterations left."""
    if resume is None:
        if not overwrite:
            claim_run_folder(tc.run_dir, OUTPUTS, overwrite=False)
        return None, None
    folder = engine.find(resume)
    meta = engine.read_sidecar(folder)
    check_signature(meta, str(folder))
    check_iterations_left(resume, meta, tc.iterations)
    return folder, meta


def start_run(tc: Any, checkpoint: Path | None, overwrite: bool) -> Path:
    """The run folder, claimed: the resumed checkpoint's run folder, or ``tc.run_dir`` (cleared
    with ``overwrite``, once every check has passed), holding the run's ``config.yaml``."""
    run_dir = checkpoint.parent if checkpoint is not None else Path(tc.run_dir)
    if checkpoint is None and overwrite:
        claim_run_folder(run_dir, OUTPUTS, overwrite=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(tc.to_dict(), sort_keys=False))
    return run_dir


class MetricsLog:
    """A run's ``metrics.csv``: a row per iteration, appended as it comes (``columns`` in
    order). A resumed run (``resumed_at``, the checkpoint's iteration) keeps the rows up to its
    checkpoint; the later ones (trained after it, then lost) are dropped."""

    def __init__(self, run_dir: Path, columns: tuple[str, ...] | list[str], resumed_at: int | None = None):
        self.path = run_dir / "metrics.csv"
        self.columns = list(columns)
        self.rows: list[dict] = []
        if resumed_at is not None and self.path.is_file():
            with self.path.open() as f:
                self.rows = [r for r in csv.DictReader(f) if r.get("iteration") and int(float(r["iteration"])) <= resumed_at]
        with self.path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns)
            w.writeheader()
            w.writerows(self.rows)

    def append(self, row: dict) -> None:
        self.rows.append(row)
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.columns).writerow(row)


def progress_bar(tc: Any, first: int, progress: bool) -> Any:
    """The run's progress bar on stderr (iterations from ``first``), or None."""
    if not progress:
        return None
    return tqdm(total=tc.iterations, initial=first, desc=f"train {tc.run_name}", unit="iter", file=sys.stderr, dynamic_ncols=True)


def show_progress(bar: Any, steps: int, row: dict, shown: tuple[tuple[str, str, str], ...]) -> None:
    """One iteration more on the progress bar ``bar`` (None: no bar), with the env ``steps`` and
    each ``(column, label, format)`` of ``shown`` whose column of the metrics ``row`` has a value."""
    if bar is None:
        return
    post: dict[str, Any] = {"steps": steps}
    for column, label, fmt in shown:
        if row[column] != "":
            post[label] = format(row[column], fmt)
    bar.set_postfix(post)
    bar.update(1)


__all__ = [
    "CHECKPOINT",
    "OUTPUTS",
    "Engine",
    "MetricsLog",
    "TrainResult",
    "claim_run_folder",
    "prepare_run",
    "progress_bar",
    "show_progress",
    "start_run",
    "swap_in_checkpoint",
]

"""The OpenEnv manifest's generated block: ``openenv.yaml`` declares as many tasks as the task
registry holds (:data:`fleet_marl.tasks.TASKS`), written by ``fleet-marl docs``, so that a new
task is one ``register_task`` call and no hand edit of the manifest."""

from __future__ import annotations

from pathlib import Path

from fleet_marl.tasks import TASKS

DOC = "openenv.yaml"
START = "# tasks:start (written by fleet-marl docs: len(fleet_marl.tasks.TASKS), what the task API lists)"
END = "# tasks:end"


def block(n_tasks: int, indent: str = "    ") -> str:
    """The manifest's ``declared_task_count`` between its markers (the first line's indent is the file's)."""
    return f"{START}\n{indent}declared_task_count:\n{indent}  train: {n_tasks}\n{indent}{END}"


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The manifest's block under the checkout ``root`` (none when it has no manifest), for the publisher."""
    return [(DOC, START, END, block(len(TASKS)))] if (Path(root) / DOC).is_file() else []


__all__ = ["DOC", "END", "START", "block", "blocks"]

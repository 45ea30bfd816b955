"""The grader's reference cache under a study: its code version is the code a process imported
(a file edited while a study runs does not key the gradings apart from the references cached
before the runs), it leaves out the layers that never play an episode, and a suite study's
gradings find the references its reference jobs cached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fleet_marl
from fleet_marl.evaluation import evaluate, reference
from fleet_marl.evaluation.reference import NOT_EPISODE, code_version, package_digest, reference_episodes
from fleet_marl.studies.credit.suite_design import SuiteStudy

PACKAGE = Path(fleet_marl.__file__).resolve().parent


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_MARL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "grader"


def _refuse(*args, **kwargs):
    raise AssertionError("a reference episode was played again: the cache missed")


def test_a_file_of_the_package_edited_after_import_keeps_the_cached_references(cache, monkeypatch):
    """The pilot of ``fleet-marl compare --suite`` graded most runs' first hindsight gradings at
    60-130 CPU s: colleagues' edits to the package while it ran changed the digest of the files
    on disk, so the workers' gradings missed the references cached before the runs and played
    them again. The version is the code the process imported."""
    before = code_version()
    eps = reference_episodes("tiny", "random", [0, 1])
    real = Path.read_bytes

    def edited(self: Path) -> bytes:  # every file of the package, as a colleague's edit leaves it on disk
        data = real(self)
        return data + b"\n# edited\n" if PACKAGE in self.resolve().parents else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert package_digest(PACKAGE) != before  # the files on disk changed ...
    assert code_version() == before  # ... not the code this process runs
    monkeypatch.setattr(reference, "run_episode", _refuse)
    assert reference_episodes("tiny", "random", [0, 1]) == eps


def test_an_edit_of_a_layer_that_plays_no_episode_keeps_the_digest(tmp_path):
    root = tmp_path / "fleet_marl"
    files = {f"{layer}/m.py": "x = 1\n" for layer in sorted(NOT_EPISODE)} | {"policies/m.py": "x = 1\n", "kernel/t.yaml": "a: 1\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    d = package_digest(root)
    assert {"torchrl", "clients", "training", "studies"} <= NOT_EPISODE  # the trainers and the studies: edited while studies run
    for layer in NOT_EPISODE:
        (root / layer / "m.py").write_text("x = 2\n")
    (root / "torchrl" / "new.py").write_text("y = 1\n")
    assert package_digest(root) == d
    (root / "policies" / "m.py").write_text("x = 2\n")
    assert package_digest(root) != d
    (root / "kernel" / "t.yaml").write_text("a: 2\n")
    assert len({d, package_digest(root)}) == 2


def test_playing_the_references_imports_no_layer_the_digest_leaves_out(tmp_path):
    """What makes ``NOT_EPISODE`` sound: no module of its layers is imported to play the random,
    planner and hindsight references (a suite scenario, a registered task) or the open-loop
    baseline's table, in a fresh process."""
    code = """
import json, sys
from fleet_marl.evaluation import evaluate
from fleet_marl.evaluation.reference import open_loop_table
from fleet_marl.evaluation.runner import make_env
evaluate("power_n4", "planner", 1, 0, {"split": "heldout", "max_cycles": 3}, progress=False, cache=False, hindsight=True)
evaluate("tiny", "planner", 1, 0, {"max_cycles": 3}, progress=False, cache=False, hindsight=True)
open_loop_table(make_env("tiny", max_cycles=3).config, cache=False)
print(json.dumps(sorted({m.split(".")[1] for m in sys.modules if m.startswith("fleet_marl.")})))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path, timeout=600)
    layers = set(json.loads(out.stdout.splitlines()[-1]))
    assert {"environment", "policies", "kernel", "evaluation"} <= layers
    assert not layers & NOT_EPISODE


def test_a_suite_studys_gradings_find_the_references_its_reference_jobs_cached(cache, monkeypatch):
    """The keys agree: the runs' gradings (the graded split with the hindsight reference, then the
    train split) play no reference episode after :meth:`SuiteStudy.reference` of their jobs."""
    study = SuiteStudy(families=("power",), ns=(4,), arms=("local",), seeds=1, episodes=2, max_cycles=4)
    key = ("suite", "power", 4, "local", 0)
    for job in study.reference_jobs([key]):
        study.reference(job)
    assert any(cache.glob("*.json"))
    task, _ = study.env(*key[:3])
    grading = study.grading(key)
    monkeypatch.setattr(reference, "run_episode", _refuse)
    monkeypatch.setattr(reference, "hindsight_episode", _refuse)
    ev = evaluate(task, "fair_share", study.episodes, 0, grading["overrides"], progress=False, hindsight=grading["hindsight"])
    assert ev.hindsight_welfare is not None and len(ev.random_welfare) == study.episodes
    train = evaluate(
        task, "fair_share", study.episodes, 0, {**grading["overrides"], "split": "train"}, progress=False, hindsight=study.train_hindsight
    )
    assert len(train.reference_welfare) == study.episodes

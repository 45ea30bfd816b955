"""The docs are tied to their data: every generated block of the README and ``docs/`` is
rendered by the publisher (``fleet-marl docs``, ``fleet_marl.studies.publish``) from the data
committed under ``docs/data/``, and must equal what the docs say. A rerun that changes a number
changes the data and the block together, or this fails."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fleet_marl.evaluation import baselines
from fleet_marl.studies import learned, publish
from fleet_marl.studies.credit.report import DOC, docs_targets, write_docs
from fleet_marl.studies.store import StudyError

ROOT = Path(__file__).resolve().parents[1]


def _block(text: str, start: str, end: str) -> str:
    m = re.search(re.escape(start) + ".*?" + re.escape(end), text, re.S)
    assert m, f"no block between {start} and {end}"
    return m.group(0)


def test_the_committed_docs_are_what_the_publisher_renders_from_their_data():
    """``fleet-marl docs --check``: every generated block of every doc equals what its data renders."""
    rendered = publish.render(ROOT)
    assert {p.relative_to(ROOT).as_posix() for p in rendered} >= {"README.md", "docs/results.md", "docs/training.md", DOC}
    for path, text in rendered.items():
        assert path.read_text() == text, f"{path} differs from what its data renders: run fleet-marl docs"
    assert publish.stale(ROOT) == []


def test_the_publisher_writes_blocks_in_place_and_only_what_changes(tmp_path):
    doc = tmp_path / "docs" / "results.md"
    assert publish.write_block(doc, "<!-- x:start -->", "<!-- x:end -->", "<!-- x:start -->\nnew\n<!-- x:end -->")
    assert doc.read_text() == "<!-- x:start -->\nnew\n<!-- x:end -->\n"  # a new file: the block alone
    doc.write_text("before\n\n<!-- x:start -->\nold\n<!-- x:end -->\n\nafter\n")
    assert publish.write_block(doc, "<!-- x:start -->", "<!-- x:end -->", "<!-- x:start -->\nnew\n<!-- x:end -->")
    assert doc.read_text() == "before\n\n<!-- x:start -->\nnew\n<!-- x:end -->\n\nafter\n"
    assert not publish.write_block(doc, "<!-- x:start -->", "<!-- x:end -->", "<!-- x:start -->\nnew\n<!-- x:end -->")
    # a checkout with no data renders nothing: its docs stay as they are
    (tmp_path / "README.md").write_text("# x\n")
    assert publish.render(tmp_path) == {} and publish.publish(tmp_path, echo=lambda *_: None) == []


def test_fleet_marl_docs_checks_a_checkout(tmp_path, capsys):
    from fleet_marl.cli import main

    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs" / "data" / "learned", root / learned.DATA)
    (root / "docs").mkdir(exist_ok=True)
    for doc in learned.DOCS:
        (root / doc).write_text("# prose\n")
    assert main(["docs", "--check", "--root", str(root)]) == 1
    assert "README.md: differs from what its data renders" in capsys.readouterr().err
    assert main(["docs", "--root", str(root)]) == 0
    assert main(["docs", "--check", "--root", str(root)]) == 0
    assert (root / "README.md").read_text().startswith("# prose\n\n" + learned.START)


@pytest.mark.parametrize("doc", ["README.md", "docs/results.md"])
def test_the_baseline_table_is_its_data(doc):
    data = json.loads((ROOT / "docs" / baselines.DATA).read_text())
    assert {r["policy"] for r in data["rows"]} >= {"random", "planner", "hindsight"}
    shown = _block((ROOT / doc).read_text(), baselines.START, baselines.END)
    assert shown == baselines.block(data)


#: each committed study of the credit study's design -> the folder its reproduce line names (the study ran there)
STUDIES = {
    "docs/data/credit_study": "runs/credit_study",
    "docs/data/credit_study_n8-32-64": "runs/credit_study_n8-32-64",
}


@pytest.mark.slow
@pytest.mark.parametrize("data", sorted(STUDIES))
def test_each_credit_study_block_is_its_data(data, tmp_path):
    """``fleet-marl compare --report --docs`` of the committed study (from the folder it ran in)
    saves the same data and publishes the same block."""
    (tmp_path / "docs" / "img").mkdir(parents=True)
    shutil.copyfile(ROOT / DOC, tmp_path / DOC)
    study = shutil.copytree(ROOT / data, tmp_path / "study")  # a report writes into its study folder: a copy, not the checkout
    main = "docs/data/credit_study"  # a study at other N sets its verdicts next to this one's
    (tmp_path / main).mkdir(parents=True)
    shutil.copyfile(ROOT / main / "results.csv", tmp_path / main / "results.csv")
    write_docs(study, root=tmp_path, echo=lambda *a: None, run_out=STUDIES[data])
    where = docs_targets(json.loads((ROOT / data / "study.json").read_text()))
    assert where["data"] == data
    rendered = _block((tmp_path / DOC).read_text(), where["start"], where["end"])
    assert _block((ROOT / DOC).read_text(), where["start"], where["end"]) == rendered
    for name in ("results.csv", "curves.csv", "study.json", "sessions.csv", "published.json"):
        assert (tmp_path / data / name).read_bytes() == (ROOT / data / name).read_bytes(), name


#: the study summary's settings phrases -> the arbiters they name
_SETTINGS = {"both arbiters": ("proportional", "auction"), "proportional share": ("proportional",), "the auction": ("auction",)}


#: the "What the study found" sections of docs/credit_assignment.md's summary ("In short") -> (the next section's opening, the committed
#: results their verdicts are decided on, the docs block their numbers are quoted from)
_FINDINGS = {
    "**What the study found on the validated model**": (
        "**On the 0.3 cost model**",
        ("credit_study_n8-32-64",),
        ("<!-- credit-study-n8-32-64:start -->", "<!-- credit-study-n8-32-64:end -->"),
    ),
    "**On the 0.3 cost model**": (
        "**What the first study found**",
        ("credit_study", "credit_study_followup"),
        ("<!-- credit-study:start -->", "<!-- credit-study:end -->"),
    ),
}


@pytest.mark.parametrize("heading", sorted(_FINDINGS))
def test_the_summary_states_the_credit_studys_verdicts_and_numbers(heading):
    """The "What the study found" bullets of docs/credit_assignment.md's summary ("In short"), on the validated model (the re-test at
    N = 8, 32, 64) and on the 0.3 model: each prediction's verdicts are the ones the decision
    rules give on that section's committed results (the 0.3 study with its 20-seed follow-up,
    docs/data/credit_study_followup), and every "mean ± interval" it quotes is in that study's
    block of docs/credit_assignment.md (which the test above ties to the data) or in the
    verdicts' numbers on the section's results."""
    from fleet_marl.studies import store
    from fleet_marl.studies.credit import torchrl_tables

    until, studies, (start, end) = _FINDINGS[heading]
    doc = (ROOT / DOC).read_text()
    section = doc[doc.index(heading) : doc.index(until)]
    rows = [r for d in studies for r in store.read_rows(ROOT / "docs" / "data" / d / "results.csv")]
    decided = torchrl_tables.verdicts(rows)
    verdicts = {(v["prediction"], v["setting"]): v["verdict"] for v in decided}
    bullets = section.split("\n- ")[1:]
    assert len(bullets) == len(torchrl_tables.PREDICTIONS)
    for bullet in bullets:
        (prediction,) = [p for p in torchrl_tables.PREDICTIONS if p.lower() in bullet.lower().replace("\n", " ")]
        stated = re.findall(r"\*\*(held|did not hold|undecided)\*\*(?: under (both arbiters|proportional share|the auction))?", bullet)
        assert stated, bullet
        for verdict, where in stated:
            settings = _SETTINGS[where] if where else [s for p, s in verdicts if p == prediction]
            for s in settings:
                assert verdicts[(prediction, s)] == verdict, (prediction, s, verdict)
    block = _block((ROOT / DOC).read_text(), start, end)
    block += "\n".join(v["why"] for v in decided)
    pair = r"([−+-]?\d+\.(\d+)) ± (\d+\.\d+)"
    shown = [(float(m.replace("−", "-")), float(h)) for m, _, h in re.findall(pair, block)]
    quoted = re.findall(pair, section)
    assert len(quoted) >= 5
    for m, digits, h in quoted:  # the summary may round the block's figure (+16.20 ± 10.29 -> +16.2 ± 10.3)
        want, d = (float(m.replace("−", "-")), float(h)), len(digits)
        assert any((round(a, d), round(b, d)) == want for a, b in shown), f"{m} ± {h} is in no table of the study"


def _run(tmp_path, trained, planner, seeds=(0, 1, 2), task="tiny"):
    """A run folder as fleet-marl train leaves it, with made-up welfare per seed."""
    ev = lambda policy, w: {  # noqa: E731
        "policy": policy,
        "seeds": list(seeds),
        "welfare": w,
        "welfare_mean": sum(w) / len(w),
        "welfare_std": 0.5,
        "score": 0.9,
        "gap_to_hindsight": 0.2,
        "jain_mean": 0.8,
    }
    run = tmp_path / f"run-{task}"
    run.mkdir()
    res = {
        "train_config": {"task": task, "reward_scheme": "difference"},
        "env_steps": 1000,
        "seconds": 90.0,
        "evaluations": [
            ev("PPO", trained),
            ev("greedy", [1.0] * 3),
            ev("fair_share", [5.0] * 3),
            ev("planner", planner),
            ev("hindsight", [9.0] * 3),
        ],
    }
    (run / "results.json").write_text(json.dumps(res))
    (run / "metrics.csv").write_text("iteration,env_steps\n1,500\n2,1000\n")
    return run


def test_a_learned_row_pairs_the_seeds_and_names_the_best_heuristic(tmp_path, capsys):
    from fleet_marl.cli import main

    r = learned.row(learned.record(_run(tmp_path, [7.0, 8.0, 9.0], [6.0, 8.5, 7.0])))
    m, h, ahead, k = r["vs_planner"]  # differences +1.0, -0.5, +2.0
    assert m == pytest.approx(2.5 / 3) and ahead == 2 and k == 3 and h > 0
    assert r["best"] == ("fair_share", 5.0) and r["training"] == (1000, 2, 1.5) and r["hindsight"] == 9.0
    rec = learned.record(tmp_path / "run-tiny")
    rec["evaluations"][0]["seeds"] = [5, 6, 7]
    with pytest.raises(StudyError, match="different seeds"):
        learned.row(rec)
    assert main(["train", "--docs", str(tmp_path / "nothing")]) == 2
    assert "no results.json" in capsys.readouterr().err
    # a saved run is data; the publisher renders it, and the tasks without a run as "not trained yet"
    root = tmp_path / "checkout"
    learned.save([str(tmp_path / "run-tiny")], root, echo=lambda *_: None)
    (text,) = {t for _doc, _s, _e, t in learned.blocks(root)}
    assert "| tiny (`difference`) | 8.0 ± 0.5 |" in text
    for task in ("easy", "medium", "hard"):
        assert f"| {task} | {learned.NOT_TRAINED} | – |" in text


def test_a_capped_run_is_published_with_the_iterations_it_ran(tmp_path):
    """A run the max_minutes cap stopped after 2 of 100 iterations: with a constant learning
    rate its record's config names 2 iterations (what trains it again); annealed, it is refused."""
    run = _run(tmp_path, [7.0, 8.0, 9.0], [6.0, 8.5, 7.0])
    res = json.loads((run / "results.json").read_text())
    res["train_config"].update(iterations=100, anneal_lr=False)
    (run / "results.json").write_text(json.dumps(res))
    rec = learned.record(run)
    assert rec["train_config"]["iterations"] == rec["iterations"] == 2 and rec["capped_at"] == 100
    res["train_config"]["anneal_lr"] = True
    (run / "results.json").write_text(json.dumps(res))
    with pytest.raises(StudyError, match="anneal_lr on"):
        learned.record(run)
    res["train_config"]["iterations"] = 2  # it ran all its iterations: nothing to set
    (run / "results.json").write_text(json.dumps(res))
    assert "capped_at" not in learned.record(run)


def _protocol_rows(task, policy, welfare):
    ci = lambda m: [m, 0.5]  # noqa: E731
    return [
        {
            "task": task,
            "policy": policy,
            "protocol": p,
            "episodes": 2,
            "delta_welfare": None if p == "simultaneous" else ci(-1.0),
            "welfare": ci(welfare),
            "jain": ci(0.9),
            "oversubscribed": ci(0.25),
            "price": ci(1.0),
            "by_quarter": [ci(0.1)] * 4,
        }
        for p in ("simultaneous", "sequential")
    ]


def test_the_protocol_tables_are_saved_with_their_command_and_rendered_from_the_files(tmp_path):
    from fleet_marl.studies import protocols

    (tmp_path / "docs").mkdir()
    (tmp_path / protocols.DOC).write_text("# Results\n\nprose\n")
    protocols.write_docs(_protocol_rows("medium", "greedy", 10.0), ["--tasks", "medium", "--seeds", "2", "--docs"], tmp_path)
    for task, w in (("hard", 30.0), ("medium", 20.0)):  # written out of task order
        argv = ["--tasks", task, "--policies", "--run", f"simultaneous=runs/{task} a", "--docs"]
        protocols.write_docs(_protocol_rows(task, "trained", w), argv, tmp_path)
    text = (tmp_path / protocols.DOC).read_text()
    ref = _block(text, *protocols.BLOCKS["references"])
    assert (
        "python -m fleet_marl.studies.protocols --tasks medium --seeds 2\n" in ref
        and "| medium | greedy | sequential | 10.0 ± 0.5 | -1.0 ± 0.5 |" in ref
    )
    trained = _block(text, *protocols.BLOCKS["trained"])
    assert "--run 'simultaneous=runs/medium a'" in trained  # quoted as a shell would need it
    assert trained.index("| medium | trained | simultaneous | 20.0") < trained.index("| hard | trained | simultaneous | 30.0")
    assert json.loads((tmp_path / protocols.DATA / "trained_hard.json").read_text())["rows"][0]["welfare"] == [30.0, 0.5]
    protocols.write_docs(_protocol_rows("medium", "greedy", 10.0), ["--tasks", "medium", "--seeds", "2", "--docs"], tmp_path)
    assert (tmp_path / protocols.DOC).read_text() == text  # the same data: the same docs


@pytest.mark.parametrize("doc", learned.DOCS)
def test_the_learned_rows_are_their_data(doc):
    """Every published run's row is its data (a task without one says "not trained yet")."""
    from fleet_marl.tasks import TASKS

    recs = learned.load(ROOT)
    tasks = [r["train_config"]["task"] for r in recs]
    keys = [(r["train_config"]["task"], learned.engine(r)) for r in recs]
    # at most one run per task and engine, in task order
    assert sorted(tasks, key=list(TASKS).index) == tasks and len(set(keys)) == len(keys)
    assert all(learned.filename(r) in {f"{t}.json", f"{t}.{e}.json"} for r, (t, e) in zip(recs, keys, strict=True))
    shown = _block((ROOT / doc).read_text(), learned.START, learned.END)
    assert shown == learned.block(recs)
    for t in TASKS:
        assert (f"| {t} (`" in shown) == (t in tasks) and (f"| {t} | {learned.NOT_TRAINED}" in shown) == (t not in tasks)
    for r in recs:  # each run's config trains it again: the iterations it ran, and a learning rate that does not anneal when capped
        assert r["train_config"]["iterations"] == r["iterations"]
        assert "capped_at" not in r or not r["train_config"].get("anneal_lr", False)


@pytest.mark.parametrize("kind", ["references", "trained"])
def test_the_protocol_tables_are_their_data(kind):
    from fleet_marl.studies import protocols

    block = protocols.block(kind, ROOT)
    assert "| medium |" in block and "| hard |" in block
    assert _block((ROOT / protocols.DOC).read_text(), *protocols.BLOCKS[kind]) == block


def test_the_manifest_declares_the_task_count_the_registry_holds(tmp_path):
    """openenv.yaml's task count is a generated block: a stale count is rewritten by the publisher, the rest of the file kept."""
    from fleet_marl.studies import manifest, publish
    from fleet_marl.tasks import TASKS

    text = (ROOT / "openenv.yaml").read_text()
    assert manifest.block(len(TASKS)) in text
    (tmp_path / "openenv.yaml").write_text(text.replace(f"train: {len(TASKS)}\n", f"train: {len(TASKS) + 3}\n"))
    assert publish.stale(tmp_path, renderers=("fleet_marl.studies.manifest",)) == [tmp_path / "openenv.yaml"]
    publish.publish(tmp_path, echo=lambda *_: None, renderers=("fleet_marl.studies.manifest",))
    assert (tmp_path / "openenv.yaml").read_text() == text

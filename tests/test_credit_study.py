"""The credit-assignment study on the TorchRL engine (``fleet_marl.studies.credit``: its design,
runs, tables, verdicts and report) and ``fleet-marl compare`` (whose default engine it is), and
its docs reproduced from its committed data. The study's runs on RLlib and the first study's
(RLlib) tests are in ``tests/test_compare.py`` (and ``tests/test_rllib.py``)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_marl.studies import command
from fleet_marl.studies.credit import report, runs, torchrl_runs, torchrl_tables
from fleet_marl.studies.credit.torchrl_design import ARMS, CURVE_COLUMNS, KEY, RESULT_COLUMNS, SHARING_ARMS, Study
from fleet_marl.studies.store import StudyError

BIN = Path(sys.executable).parent


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


# --- the design --------------------------------------------------------------------------------


def test_the_full_study_has_every_run_the_issue_asks_for():
    s = Study()
    runs = s.runs()
    scaling = [r for r in runs if r[0] == "scaling"]
    sharing = [r for r in runs if r[0] == "sharing"]
    assert {r[3] for r in scaling} == set(ARMS) - {"difference_k4"} and len(ARMS) == 8 and ARMS["mappo"] == ("global", "mappo")
    assert {r[2] for r in scaling} == {2, 4, 8, 16, 32, 64} and {r[1] for r in scaling} == {"proportional", "auction"}
    assert {r[4] for r in runs} == set(range(10))
    # shapley runs at every N (16 sampled permutations above 8 tenants); shapley_max_n caps it, and the report says so
    assert {r[2] for r in scaling if r[3] == "shapley"} == {2, 4, 8, 16, 32, 64} and s.skipped() == [] and s.shapley_samples == 16
    capped = Study(shapley_max_n=16)
    assert capped.skipped() == [("scaling", m, n, "shapley") for m in ("proportional", "auction") for n in (32, 64)]
    assert len(capped.runs()) == len(runs) - 40
    assert len(scaling) == 7 * 6 * 2 * 10
    assert {(r[1], r[2], r[3]) for r in sharing} == {(t, n, a) for t, n in (("medium", 8), ("hard", 16)) for a in SHARING_ARMS}
    assert all(SHARING_ARMS[a][0] == "difference" for a in SHARING_ARMS) and len(sharing) == 4 * 2 * 10
    assert len(set(runs)) == len(runs) == 920
    # seed-major: a stopped study holds whole seeds
    assert [r[4] for r in runs] == sorted(r[4] for r in runs)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64])
def test_every_arm_has_the_same_budget_at_an_n(n):
    s = Study()
    tcs = [s.train_config(("scaling", "auction", n, arm, 3)) for arm in ARMS]
    steps = {tc.num_envs * tc.rollout * tc.iterations for tc in tcs}
    assert steps == {s.env_steps("scaling", n)}
    assert s.num_envs(n) * n == s.agents_per_step  # the same agent steps per iteration at every N
    for tc, arm in zip(tcs, ARMS, strict=False):
        assert (tc.reward_scheme, tc.sharing) == ARMS[arm] and tc.seed == 3 and tc.env["arbiter"]["mechanism"] == "auction"
        assert tc.collector == "sync" and tc.threads == 1 and tc.max_minutes == 0
        assert ("shapley_samples" in tc.env) == (arm == "shapley")


def test_the_grader_grades_at_the_fractions_including_80_percent():
    s = Study()
    assert s.eval_at("scaling") == [6, 12, 19, 24]  # 25%, 50%, 80%, 100% of 24 iterations
    assert s.eval_at("sharing")[-1] == s.sharing_iterations and round(0.8 * s.sharing_iterations) in s.eval_at("sharing")


@pytest.mark.parametrize(
    "change,match",
    [
        ({"arms": ("local", "nope")}, "--arms 'nope'"),
        ({"mechanisms": ("vickrey",)}, "--mechanisms 'vickrey'"),
        ({"sharing_tasks": ("nope",)}, "--sharing-tasks 'nope'"),
        ({"ns": (2, 2)}, "without repeats"),
        ({"ns": (0,)}, "--n 0"),
        ({"seeds": 0}, "--seeds 0"),
        ({"iterations": 2}, "--iterations 2: expected an integer >= 3"),
        ({"eval_fractions": (0.5, 1.0)}, "with 0.8 and 1.0"),
        ({"eval_fractions": (0.8, 0.5, 1.0)}, "increasing"),
        ({"converge_tol": 2.0}, "--converge-tol"),
    ],
)
def test_bad_settings_name_the_option(change, match):
    with pytest.raises(StudyError, match=match):
        Study(**change).check()


# --- one run's derived measures ------------------------------------------------------------------


def _fake_run(curve_welfare, scores, iterations=30):
    def run(tc, eval_at, episodes):
        curve = [
            {
                "iteration": it,
                "env_steps": it * 100,
                "agent_steps": it * 200,
                "train_welfare": "",
                "eval_welfare": w,
                "score": sc,
                "jain": 0.9,
                "starvation_events": 0.0,
                "degenerate": 0.0,
                "seconds": it,
            }
            for it, w, sc in zip(eval_at, curve_welfare, scores, strict=False)
        ]
        res = {
            "iterations": iterations,
            "env_steps": iterations * 100,
            "agent_steps": iterations * 200,
            "eval_welfare": curve_welfare[-1],
            "score": scores[-1],
            "jain": 0.9,
            "starvation_events": 0.0,
            "degenerate": 0.0,
            "illegal": 0.0,
            "random_welfare": 0.0,
            "planner_welfare": 1.0,
            "run_seconds": 1.0,
            "train_seconds": 0.5,
            "eval_seconds": 0.5,
            "credit_seconds": 0.1,
            "credit_ms_per_step": 0.01,
        }
        return res, curve

    return run


@pytest.mark.parametrize(
    "welfare,converged",
    [((50, 90, 100, 101.9), 1), ((50, 90, 100, 102.0), 0), ((50, 90, 100, 98.1), 1), ((50, 90, 100, 98.0), 0), ((50, 90, 100, 80), 0)],
)
def test_convergence_is_the_change_over_the_last_fifth_either_way(monkeypatch, welfare, converged):
    monkeypatch.setattr(torchrl_runs, "train_and_grade", _fake_run(welfare, (0.3, 0.85, 0.95, 1.0), iterations=Study().iterations))
    row, curve = torchrl_runs.run_one(Study(), ("scaling", "auction", 8, "global", 1))
    assert row["welfare_at_80"] == 100 and row["improvement_last_20"] == pytest.approx((welfare[-1] - 100) / 100)
    assert row["converged"] == converged
    # 90% of the final score 1.0 first reached at the 80% point (iteration 19)
    assert row["env_steps_to_90"] == 1900 and row["agent_steps_to_90"] == 3800
    assert [c["iteration"] for c in curve] == [6, 12, 19, 24] and all(c["arm"] == "global" and c["n"] == 8 for c in curve)
    assert (row["scheme"], row["sharing"]) == ("global", "shared")


# --- the store: resuming -----------------------------------------------------------------------------


def _row(key, score=0.5, **kw) -> dict:
    part, setting, n, arm, seed = key
    scheme, sharing = (ARMS if part == "scaling" else SHARING_ARMS)[arm]
    base = dict.fromkeys(RESULT_COLUMNS, 0)
    base.update(
        part=part,
        setting=setting,
        n=n,
        arm=arm,
        seed=seed,
        scheme=scheme,
        sharing=sharing,
        score=score,
        eval_welfare=100 * score,
        jain=0.9,
        converged=1,
        welfare_at_80=100 * score,
        run_seconds=10.0,
        credit_seconds=1.0,
        credit_ms_per_step=0.5,
        agent_steps_to_90="",
        finished="2026-11-25T15:00:00",
    )
    base.update(kw)
    return base


def _write(path: Path, columns, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows({c: r.get(c, "") for c in columns} for r in rows)


def test_prepare_resumes_drops_killed_runs_and_refuses_other_settings(tmp_path):
    s = Study.quick(out=str(tmp_path / "s"))
    out, done = runs.prepare(s)
    assert done == set() and json.loads((out / "study.json").read_text()) == s.settings()
    k1, k2 = s.runs()[0], s.runs()[1]
    _write(out / "results.csv", RESULT_COLUMNS, [_row(k1)])
    with (out / "results.csv").open("a") as f:
        f.write(",".join(map(str, k2)) + ",global")  # the process died in the middle of this row
    _write(out / "curves.csv", CURVE_COLUMNS, [dict(zip(KEY, k, strict=False)) | {"iteration": 1, "seconds": 1} for k in (k1, k2)])
    out, done = runs.prepare(s)
    assert done == {k1}
    assert [tuple(r[c] for c in ("arm", "seed")) for r in _csv(out / "curves.csv")] == [(k1[3], str(k1[4]))]  # k2's curve dropped
    with pytest.raises(StudyError, match="differs in: seeds"):
        runs.prepare(Study.quick(out=s.out, seeds=3))
    assert (out / "results.csv").is_file()  # refused: nothing deleted
    _, done = runs.prepare(Study.quick(out=s.out, seeds=3), overwrite=True)
    assert done == set() and not (out / "results.csv").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(StudyError, match="not empty"):
        runs.prepare(Study.quick(out=str(tmp_path / "other")))


# --- the verdicts ------------------------------------------------------------------------------------


def _rows(score_of, starvation_of=lambda arm, n, seed: 0.0, ms_of=lambda arm, n: 1.0, seeds=10, ns=(2, 4, 8, 16, 32, 64)):
    rows = []
    for m in ("proportional", "auction"):
        for n in ns:
            for arm in ARMS:
                if arm == "shapley" and n > 16:
                    continue
                for seed in range(seeds):
                    rows.append(
                        _row(
                            ("scaling", m, n, arm, seed),
                            score=score_of(arm, n, seed),
                            starvation_events=starvation_of(arm, n, seed),
                            credit_ms_per_step=ms_of(arm, n),
                        )
                    )
    return rows


def _verdict(vs, prediction, setting):
    return next(v for v in vs if v["prediction"] == prediction and v["setting"] == setting)["verdict"]


def test_the_verdicts_follow_their_rules():
    noise = lambda seed: 0.01 * ((seed * 7) % 5 - 2)  # noqa: E731 -- small, seed-dependent
    # global falls behind as N grows; local starves under the auction; shapley equals difference, and costs more
    falls = _rows(
        lambda arm, n, s: (0.9 - 0.1 * (n.bit_length() - 2) if arm == "global" else 0.9) + noise(s),
        starvation_of=lambda arm, n, s: 5.0 + s % 3 if arm == "local" else 0.0,
        ms_of=lambda arm, n: 10.0 * n if arm == "shapley" else 1.0,
    )
    vs = torchrl_tables.verdicts(falls)
    for m in ("proportional", "auction"):
        assert _verdict(vs, torchrl_tables.PREDICTIONS[0], m) == "held"
        assert _verdict(vs, torchrl_tables.PREDICTIONS[2], m) == "held"
    assert _verdict(vs, torchrl_tables.PREDICTIONS[1], "auction") == "held"
    # every arm the same, nobody starves, shapley no slower: the predictions did not hold
    flat = _rows(lambda arm, n, s: 0.9 + noise(s))
    vs = torchrl_tables.verdicts(flat)
    assert {v["verdict"] for v in vs} == {"did not hold"}
    # shapley clearly better than difference: not "the same"
    better = _rows(lambda arm, n, s: (0.95 if arm == "shapley" else 0.8) + noise(s), ms_of=lambda arm, n: 5.0 if arm == "shapley" else 1.0)
    assert _verdict(torchrl_tables.verdicts(better), torchrl_tables.PREDICTIONS[2], "auction") == "did not hold"
    # too few seeds and too much noise to tell
    wild = _rows(lambda arm, n, s: 0.5 + (0.4 if s == 0 else -0.4) * (1 if arm == "global" else -1), seeds=3)  # gaps +0.8, -0.8, -0.8
    assert _verdict(torchrl_tables.verdicts(wild), torchrl_tables.PREDICTIONS[0], "auction") == "undecided"
    # one seed has no interval: nothing is decided, however the numbers lean
    one = torchrl_tables.verdicts(
        _rows(
            lambda arm, n, s: 0.9 - (0.3 if arm == "global" and n > 4 else 0.0),
            seeds=1,
            starvation_of=lambda arm, n, s: 9.0 if arm == "local" else 0.0,
            ms_of=lambda arm, n: 9.0 if arm == "shapley" else 1.0,
        )
    )
    assert {v["verdict"] for v in one} == {"undecided"}


def test_a_study_at_other_n_gets_its_own_block_with_the_committed_verdicts_beside_its_own(tmp_path):
    """The re-test (issue 34: ``fleet-marl compare --n 8,32,64``) goes into a block of its own,
    never over the committed study's, and says for each prediction what the committed study
    found, whole and at the same N."""
    noise = lambda seed: 0.01 * ((seed * 7) % 5 - 2)  # noqa: E731 -- small, seed-dependent
    root = tmp_path / "checkout"
    (root / report.MAIN_DATA).mkdir(parents=True)
    falls = _rows(
        lambda arm, n, s: (0.9 - 0.1 * (n.bit_length() - 2) if arm == "global" else 0.9) + noise(s),
        starvation_of=lambda arm, n, s: 5.0 + s % 3 if arm == "local" else 0.0,
        ms_of=lambda arm, n: 10.0 * n if arm == "shapley" else 1.0,
    )
    _write(root / report.MAIN_DATA / "results.csv", RESULT_COLUMNS, falls)  # the committed study: every prediction held
    start, end = report.MARKERS
    (root / report.DOC).write_text(f"# Study\n\n{start}\nthe committed study\n{end}\n")
    s = Study(ns=(8, 32, 64), seeds=3, out=str(tmp_path / "retest"))
    out, _ = runs.prepare(s)
    _write(out / "results.csv", RESULT_COLUMNS, _rows(lambda arm, n, s: 0.9 + noise(s), seeds=3, ns=s.ns))  # nothing held
    _write(out / "curves.csv", CURVE_COLUMNS, [])
    report.write_docs(out, root=root, echo=lambda *_: None, run_out="runs/retest")
    where = report.docs_targets(s.settings())
    assert where["start"] == "<!-- credit-study-n8-32-64:start -->" and where["data"] == "docs/data/credit_study_n8-32-64"
    text = (root / report.DOC).read_text()
    assert f"{start}\nthe committed study\n{end}" in text  # untouched
    block = text.split(where["start"])[1].split(where["end"])[0]
    assert "`fleet-marl compare --n 8,32,64 --seeds 3 --out runs/retest`" in block
    assert "`fleet-marl compare --out runs/retest --report --docs`" in block
    assert "| prediction | arbiter | verdict here | before | before, at N = 8, 32, 64 only | changed |" in block
    assert "| global reward stalls as N grows | auction | **did not hold** | held | held | yes |" in block
    assert "| local reward starves under the auction | auction | **did not hold** | held | held | yes |" in block
    assert (root / where["data"] / "results.csv").is_file() and not (root / report.MAIN_DATA / "study.json").exists()
    # the same study as its own "before": nothing changed
    table = torchrl_tables.verdict_changes(falls, falls)
    assert "| yes |" not in table and table.count("| no |") == 5


def test_the_report_keeps_every_unconverged_run():
    rows = _rows(lambda arm, n, s: 0.9, seeds=2, ns=(2, 8))
    rows[3].update(converged=0, improvement_last_20=0.05, welfare_at_80=80.0, eval_welfare=84.0)
    text = torchrl_tables.unconverged_table(rows, 0.02)
    assert text.startswith(f"1 of {len(rows)} runs did not converge (graded welfare rose or fell by 2% or more") and "+5.0%" in text
    assert "1 rose, 0 fell" in text


def test_the_report_rederives_convergence_from_the_improvement():
    """The rule is the report's: a stored ``converged`` written under the old rule (a rise only)
    is re-derived from ``improvement_last_20``; a fall of 10% did not converge."""
    rows = _rows(lambda arm, n, s: 0.9, seeds=2, ns=(2, 8))
    for r in rows:
        r.update(converged=1, improvement_last_20=0.001)
    rows[1].update(improvement_last_20=-0.10, welfare_at_80=100.0, eval_welfare=90.0)  # fell: stored 1 by the old rule
    rows[2].update(improvement_last_20="", converged=0)  # no improvement: kept as stored
    got = torchrl_tables.with_convergence(rows, 0.02)
    assert [int(r["converged"]) for r in got] == [1, 0, 0] + [1] * (len(rows) - 3)
    assert rows[1]["converged"] == 1  # the input rows are left as they were
    text = torchrl_tables.unconverged_table(got, 0.02)
    assert text.startswith(f"2 of {len(rows)} runs did not converge") and "-10.0%" in text


# --- the command, end to end ------------------------------------------------------------------------------


def _cli(*args):
    return subprocess.run([str(BIN / "fleet-marl"), "compare", *args], capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_first_studys_options_and_what_rllib_does_not_do_are_refused_before_anything_runs(tmp_path):
    r = _cli("--schemes", "local", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "unrecognized arguments: --schemes" in r.stderr
    r = _cli("--engine", "rllib", "--arms", "local", "--device", "cuda", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--device 'cuda': the study's RLlib runs learn on cpu" in r.stderr
    r = _cli("--arms", "local,nope", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--arms 'nope'" in r.stderr
    assert not (tmp_path / "s").exists()


def test_study_from_args_builds_the_torchrl_study():
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    s = command.study_from_args(parser.parse_args(["--n", "2,8", "--arms", "global,mappo", "--mechanisms", "auction", "--seeds", "3"]))
    assert isinstance(s, Study) and s.ns == (2, 8) and s.arms == ("global", "mappo") and s.mechanisms == ("auction",) and s.seeds == 3
    q = command.study_from_args(parser.parse_args(["--quick"]))
    assert q.settings() == Study.quick().settings()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_ctrl_c_stops_the_study_and_its_workers_at_once(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) mid-study: the command
    exits, says how to resume, leaves no worker behind, and keeps the runs it finished."""
    out = tmp_path / "q"
    # SIGINT's default disposition in the command, as in a terminal: a test session started in the
    # background of a shell without job control (`cmd &` in a script) inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler
    p = subprocess.Popen(
        [str(BIN / "fleet-marl"), "compare", "--quick", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 -- no threads run between fork and exec here; the child must take SIGINT
    )
    try:
        deadline = time.monotonic() + 900
        while not (out / "results.csv").is_file() or len(_csv(out / "results.csv")) < 1:
            assert p.poll() is None and time.monotonic() < deadline, "the study ended or stalled before its first run"
            time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=120)  # a parent waiting on its pool would time out here
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and "the same command resumes the study" in err, err[-2000:]
    for _ in range(50):  # the workers were terminated and joined before the parent exited
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(p.pid, signal.SIGKILL)
        raise AssertionError("a worker process outlived the interrupted study")
    done = _csv(out / "results.csv")
    assert 1 <= len(done) < len(Study.quick().runs())
    assert [int(x["runs_done"]) for x in _csv(out / "sessions.csv")] == [len(done)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_compare_quick_runs_the_whole_pipeline_and_a_rerun_trains_nothing(tmp_path):
    """What CI runs: `fleet-marl compare --quick` (TorchRL, two worker processes), then again."""
    out = tmp_path / "q"
    r = _cli("--quick", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    s = Study.quick()
    rows = _csv(out / "results.csv")
    assert {(x["part"], x["setting"], int(x["n"]), x["arm"], int(x["seed"])) for x in rows} == set(s.runs())
    for x in rows:
        assert int(x["env_steps"]) == s.env_steps(x["part"], int(x["n"]))  # the same budget for every arm at an N
        assert float(x["score"]) >= 0.0 and 0.0 < float(x["jain"]) <= 1.0  # the score is floored at random, not capped
        assert float(x["run_seconds"]) >= float(x["train_seconds"]) > 0.0 and float(x["credit_seconds"]) > 0.0
        assert x["converged"] in ("0", "1")
    curves = _csv(out / "curves.csv")
    assert len(curves) == len(rows) * len(s.eval_fractions)
    summary = (out / "summary.md").read_text()
    assert "### Verdicts" in summary and "| global reward stalls as N grows | auction |" in summary and "`mappo`" in summary
    for name in ("scaling_proportional.png", "scaling_auction.png", "curves_auction.png", "sharing.png"):
        assert (out / name).is_file(), name
    again = _cli("--quick", "--out", str(out), "--no-progress")
    assert again.returncode == 0 and f"{len(rows)} done, 0 to go" in again.stdout
    assert _csv(out / "results.csv") == rows
    assert [int(x["runs_done"]) for x in _csv(out / "sessions.csv")] == [len(rows)]  # a session that ran nothing adds no row
    # --docs refuses the quick study's numbers; into a scratch checkout it writes with allow_quick
    bad = _cli("--quick", "--out", str(out), "--report", "--docs")
    assert bad.returncode == 2 and "its numbers mean nothing" in bad.stderr
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "credit_assignment.md").write_text("# The study\n\ntext before\n")
    report.write_docs(out, root=root, allow_quick=True, echo=lambda *_: None)
    doc = (root / "docs" / "credit_assignment.md").read_text()
    assert doc.startswith("# The study\n\ntext before\n") and report.MARKERS[0] in doc
    assert f"`fleet-marl compare --quick --out {out.as_posix()}`" in doc  # the command names the folder it ran in
    assert "(img/credit_study_scaling_auction.png)" in doc and (root / "docs" / "img" / "credit_study_scaling_auction.png").is_file()
    assert _csv(root / "docs" / "data" / "credit_study" / "results.csv") == rows


@pytest.mark.slow
def test_the_study_reproduces_its_docs_from_its_committed_data(tmp_path, monkeypatch):
    """``fleet-marl compare --report --docs`` on the committed data (docs/data/credit_study/,
    copied to where the study ran) writes back its block of docs/credit_assignment.md, byte for
    byte, and ``--report`` its summary."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    committed = (root / report.DOC).read_text()
    scratch = tmp_path / "checkout"
    (scratch / "docs").mkdir(parents=True)
    (scratch / report.DOC).write_text(committed)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(root / "docs" / "data" / "credit_study", tmp_path / "runs" / "credit_study")
    report.write_docs("runs/credit_study", root=scratch, echo=lambda *_: None)
    assert (scratch / report.DOC).read_text() == committed
    start, end = report.MARKERS
    block = committed.split(start)[1].split(end)[0]
    rep = report.report("runs/credit_study", echo=lambda *_: None)
    assert torchrl_tables.verdict_table(rep["verdicts"]) in block and "### Verdicts" in rep["text"]

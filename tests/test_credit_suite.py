"""The credit-assignment study on the suite (``fleet-marl compare --suite``): its design
(:class:`~fleet_marl.studies.credit.suite_design.SuiteStudy`: run keys, budgets, grading, checks),
its store and resuming, its report and verdicts from synthetic rows
(:mod:`fleet_marl.studies.credit.suite_report`), and the command end to end (``--quick``)."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleet_marl.studies import command
from fleet_marl.studies.credit import report, runs, suite_design, suite_report, torchrl_runs
from fleet_marl.studies.credit import torchrl_tables as tt
from fleet_marl.studies.credit.suite_design import SUITE_ARMS, SUITE_RESULT_COLUMNS, TRAIN_COLUMNS, SuiteStudy
from fleet_marl.studies.credit.torchrl_design import ARMS, CURVE_COLUMNS, KEY, RESULT_COLUMNS, Study
from fleet_marl.studies.store import StudyError

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _write(path: Path, columns, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows({c: r.get(c, "") for c in columns} for r in rows)


# --- the design --------------------------------------------------------------------------------


def test_the_full_suite_study_runs_every_family_n_arm_and_seed():
    s = SuiteStudy()
    s.check()
    keys = s.runs()
    assert s.families == ("aligned", "proportional", "scarce", "power") and s.ns == (8, 16, 32, 64) and s.seeds == 10
    assert s.arms == SUITE_ARMS == ("local", "global", "difference", "shapley", "mappo", "difference_k4")
    assert ARMS["local"] == ("local", "shared")  # the local arm: independent PPO on the local reward, shared parameters
    assert len(keys) == len(set(keys)) == 4 * 4 * 6 * 10
    assert {k[0] for k in keys} == {"suite"} and {k[1] for k in keys} == set(s.families) and {k[4] for k in keys} == set(range(10))
    assert [k[4] for k in keys] == sorted(k[4] for k in keys)  # seed-major: a stopped study holds whole seeds
    assert keys[:6] == [("suite", "aligned", 8, arm, 0) for arm in SUITE_ARMS]
    assert s.skipped() == []
    capped = SuiteStudy(shapley_max_n=16)
    assert capped.skipped() == [("suite", f, n, "shapley") for f in s.families for n in (32, 64)]
    assert len(capped.runs()) == len(keys) - 4 * 2 * 10


@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_every_arm_trains_on_the_suite_task_itself_with_the_same_budget(n):
    s = SuiteStudy()
    tcs = {arm: s.train_config(("suite", "scarce", n, arm, 3)) for arm in s.arms}
    assert {tc.num_envs * tc.rollout * tc.iterations for tc in tcs.values()} == {s.env_steps("suite", n)}
    assert s.num_envs(n) * n == s.agents_per_step == 2048 and s.iterations == 24
    for arm, tc in tcs.items():
        assert tc.task == f"scarce_n{n}" and (tc.reward_scheme, tc.sharing) == ARMS[arm] and tc.seed == 3
        assert tc.env == ({"shapley_samples": 16} if arm == "shapley" else {})  # the task as it is: no overrides
        assert tc.collector == "sync" and tc.threads == 1
        assert tc.credit_horizon == (4 if arm == "difference_k4" else 1)  # the k-round arm: D^4, relabelled in the loop
    assert s.env("suite", "scarce", n) == (f"scarce_n{n}", {})


def test_a_run_is_graded_on_the_held_out_split_then_on_the_train_split():
    s = SuiteStudy()
    g = s.grading(("suite", "power", 16, "shapley", 0))
    assert g["overrides"] == {"split": "heldout"}  # shapley_samples changes no welfare: the references stay shared
    assert g["hindsight"] is True and g["final"] == s.final
    q = SuiteStudy.quick()
    assert q.grading(("suite", "aligned", 4, "local", 1))["overrides"] == {"max_cycles": 20, "split": "heldout"}
    assert SuiteStudy(split="shift").grading(("suite", "aligned", 8, "local", 1))["overrides"] == {"split": "shift"}
    jobs = s.reference_jobs([("suite", "power", 8, "local", 0), ("suite", "power", 8, "global", 3), ("suite", "aligned", 16, "local", 0)])
    assert jobs == [(f, n, sp, k) for f, n in (("aligned", 16), ("power", 8)) for sp in ("heldout", "train") for k in range(4)]
    assert Study().grading(("scaling", "auction", 8, "local", 0)) == {}  # the scaling study's runs are graded as before


def test_the_hindsight_reference_is_played_on_the_graded_split_and_on_train_only_when_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(
        suite_design, "evaluate", lambda task, policy, episodes, seed, overrides, **kw: calls.append((task, seed, overrides, kw))
    )
    s = SuiteStudy()
    assert s.hindsight is True and s.train_hindsight is False
    for job in (("power", 8, "heldout", 2), ("power", 8, "train", 2)):
        s.reference(job)
    assert calls == [
        ("power_n8", 2, {"split": "heldout"}, {"progress": False, "hindsight": True}),
        ("power_n8", 2, {"split": "train"}, {"progress": False, "hindsight": False}),
    ]
    calls.clear()
    SuiteStudy(train_hindsight=True).reference(("power", 8, "train", 2))
    assert calls[0][3]["hindsight"] is True

    class Ev:  # what the grader returns, as far as final() reads it
        def __init__(self, hindsight):
            self.hindsight_welfare = [90.0] if hindsight else None
            self.gap_to_hindsight = 0.25 if hindsight else None
            self.random_welfare, self.reference_welfare = [10.0], [80.0]
            self.welfare, self.score, self.episodes = np.array([70.0]), 0.857, []

    played = []

    def play(changes, hindsight):
        played.append((changes, hindsight))
        return Ev(hindsight)

    monkeypatch.setattr(suite_design.rows, "graded", lambda ev: {"eval_welfare": 70.0, "score": ev.score})
    out = s.final(Ev(True), play)
    assert played == [({"split": "train"}, False)] and out["train_gap"] == "" and out["train_score"] == 0.857
    assert out["train_random_welfare"] == 10.0 and out["train_planner_welfare"] == 80.0
    assert SuiteStudy(train_hindsight=True).final(Ev(True), play)["train_gap"] == 0.25


def test_the_suite_results_keep_the_studys_columns_and_add_the_train_split_and_the_gap():
    assert SUITE_RESULT_COLUMNS[: len(RESULT_COLUMNS) - 1] == RESULT_COLUMNS[:-1] and SUITE_RESULT_COLUMNS[-1] == "finished"
    assert {"gap", "hindsight_welfare", "cpu_seconds", "eval_cpu_seconds", *TRAIN_COLUMNS} <= set(SUITE_RESULT_COLUMNS)
    assert "train_score" in TRAIN_COLUMNS and "train_starvation_events" in TRAIN_COLUMNS
    # the committed study's data still has the scaling study's columns, which are unchanged
    with (ROOT / "docs" / "data" / "credit_study" / "results.csv").open() as f:
        assert tuple(next(csv.reader(f))) == RESULT_COLUMNS
    assert SuiteStudy.RESULT_COLUMNS == SUITE_RESULT_COLUMNS and Study.RESULT_COLUMNS == RESULT_COLUMNS


def test_the_quick_suite_study_is_small():
    q = SuiteStudy.quick()
    q.check()
    assert q.out == "runs/credit_suite_quick" and SuiteStudy().out == "runs/credit_suite"
    assert len(q.runs()) == 2 * 1 * 3 * 2 and q.families == ("aligned", "power") and q.ns == (4,)
    assert q.episodes == 1 and q.max_cycles == 20 and q.env("suite", "power", 4) == ("power_n4", {"max_cycles": 20})
    assert q.train_hindsight is True  # the pipeline check fills every column
    assert "mechanisms" not in q.settings() and q.settings()["families"] == ["aligned", "power"]


@pytest.mark.parametrize(
    "change,match",
    [
        ({"families": ("nope",)}, "--families 'nope': expected values from aligned"),
        ({"families": ()}, "--families '': expected at least one"),
        ({"families": ("power", "power")}, "--families 'power,power': expected a list without repeats"),
        ({"arms": ("local", "nope")}, "--arms 'nope'"),
        ({"ns": (6,)}, "--n 6: expected team sizes family aligned has: 4, 8, 16, 32, 64, 128"),
        ({"families": ("trace_window",)}, "--n 8: expected team sizes family trace_window has: 6"),
        ({"ns": (8, 8)}, "--n '8,8': expected a list without repeats"),
        ({"split": "train"}, "--split 'train': expected heldout or shift"),
        ({"max_cycles": 1}, "--max-cycles 1"),
        ({"train_hindsight": 1}, "--train-hindsight 1: expected True or False"),
        ({"mechanisms": ("auction",)}, "--mechanisms .*the suite study has families"),
        ({"seeds": 0}, "--seeds 0: expected an integer >= 1"),
        ({"iterations": 2}, "--iterations 2"),
        ({"eval_fractions": (0.5, 1.0)}, "with 0.8 and 1.0"),
    ],
)
def test_bad_suite_settings_name_the_option(change, match):
    with pytest.raises(StudyError, match=match):
        SuiteStudy(**change).check()


def test_a_suite_run_passes_its_grading_and_keeps_its_columns(monkeypatch):
    """``run_one`` hands the design's grading to ``train_and_grade`` and keeps the design's columns."""
    seen = {}

    def fake(tc, eval_at, episodes, **kw):
        seen.update(kw, task=tc.task, eval_at=eval_at, episodes=episodes)
        curve = [{"iteration": it, "env_steps": it, "agent_steps": it, "eval_welfare": 1.0, "score": 0.5} for it in eval_at]
        res = {"iterations": tc.iterations, "eval_welfare": 1.0, "score": 0.5, "gap": 0.2, "cpu_seconds": 3.0, "not_a_column": 1}
        res.update(dict.fromkeys(TRAIN_COLUMNS, 0.4))
        return res, curve

    monkeypatch.setattr(torchrl_runs, "train_and_grade", fake)
    s = SuiteStudy()
    row, curve = torchrl_runs.run_one(s, ("suite", "scarce", 8, "difference", 2))
    assert seen["task"] == "scarce_n8" and seen["overrides"] == {"split": "heldout"} and seen["hindsight"] is True
    assert seen["eval_at"] == [6, 12, 19, 24] and seen["episodes"] == 4
    assert set(row) <= set(SUITE_RESULT_COLUMNS) and "not_a_column" not in row
    assert row["gap"] == 0.2 and row["train_score"] == 0.4 and row["part"] == "suite" and len(curve) == 4


@pytest.mark.parametrize("final,converged", [(101.0, 1), (99.0, 1), (110.0, 0), (90.0, 0)])
def test_a_suite_run_whose_welfare_falls_did_not_converge(monkeypatch, final, converged):
    """Converged iff the graded welfare moved by less than ``converge_tol`` (2%) over the last
    20% of the budget, either way: a fall of 10% (a collapse) did not converge, nor a rise of 10%."""

    def fake(tc, eval_at, episodes, **kw):
        welfare = dict(zip(eval_at, (60.0, 80.0, 100.0, final), strict=True))
        curve = [{"iteration": it, "env_steps": it, "agent_steps": it, "eval_welfare": welfare[it], "score": 0.5} for it in eval_at]
        return {"iterations": tc.iterations, "eval_welfare": final, "score": 0.5}, curve

    monkeypatch.setattr(torchrl_runs, "train_and_grade", fake)
    row, _ = torchrl_runs.run_one(SuiteStudy(), ("suite", "scarce", 8, "difference", 0))
    assert row["welfare_at_80"] == 100.0 and row["improvement_last_20"] == pytest.approx(final / 100 - 1)
    assert row["converged"] == converged
    # the report re-derives it from the improvement: a row stored as converged under the old rule (a rise only) is not
    rows = [_row(("suite", "scarce", 8, "difference", s), improvement_last_20=-0.1 if s == 0 else 0.0) for s in range(3)]
    assert "| scarce | 8 | `difference` | 3 |" in suite_report.summary_table(tt.with_convergence(rows, 0.02))
    assert "| 2/3 |" in suite_report.summary_table(tt.with_convergence(rows, 0.02)) and "| 3/3 |" in suite_report.summary_table(rows)


def test_the_suite_study_resumes_and_refuses_other_settings(tmp_path):
    s = SuiteStudy.quick(out=str(tmp_path / "s"))
    out, done = runs.prepare(s)
    assert done == set() and json.loads((out / "study.json").read_text()) == s.settings()
    k1, k2 = s.runs()[:2]
    _write(out / "results.csv", SUITE_RESULT_COLUMNS, [dict(zip(KEY, k1, strict=True)) | {"finished": "2026-01-01T00:00:00"}])
    with (out / "results.csv").open("a") as f:
        f.write(",".join(map(str, k2)) + ",difference")  # killed in the middle of this row
    _write(out / "curves.csv", CURVE_COLUMNS, [dict(zip(KEY, k, strict=True)) | {"iteration": 1, "seconds": 1} for k in (k1, k2)])
    _, done = runs.prepare(s)
    assert done == {k1} and len(_csv(out / "curves.csv")) == 1
    with pytest.raises(StudyError, match="differs in: families"):
        runs.prepare(SuiteStudy.quick(out=s.out, families=("power",)))
    with pytest.raises(StudyError, match="differs in"):  # the scaling study is not resumed in a suite folder
        runs.prepare(Study.quick(out=s.out))


# --- the report and the verdicts, from synthetic rows -----------------------------------------------


def _row(key, **values) -> dict:
    base = {
        "scheme": ARMS[key[3]][0],
        "sharing": ARMS[key[3]][1],
        "eval_welfare": 100.0,
        "score": 0.9,
        "train_score": 0.95,
        "gap": 0.1,
        "jain": 0.9,
        "starvation_events": 0.0,
        "train_starvation_events": 0.0,
        "converged": 1,
        "agent_steps_to_90": "",
        "run_seconds": 10.0,
        "cpu_seconds": 9.0,
        "credit_ms_per_step": 1.0,
        "finished": "2026-01-01T00:00:00",
    }
    return dict(zip(KEY, key, strict=True)) | base | values


def _suite_rows(score_of, starvation_of=lambda f, arm, n, s: 0.0, ms_of=lambda arm, n: 1.0, seeds=10, ns=(8, 16, 32, 64)):
    noise = lambda seed: 0.01 * ((seed * 7) % 5 - 2)  # noqa: E731 -- small, seed-dependent
    return [
        _row(
            ("suite", f, n, arm, seed),
            score=score_of(f, arm, n) + noise(seed),
            train_score=score_of(f, arm, n) + 0.05,
            starvation_events=starvation_of(f, arm, n, seed),
            credit_ms_per_step=ms_of(arm, n),
        )
        for f in ("scarce", "aligned")
        for n in ns
        for arm in SUITE_ARMS
        for seed in range(seeds)
    ]


def _verdict(vs, i, family):
    return next(v for v in vs if v["prediction"] == suite_report.PREDICTIONS[i] and v["setting"] == family)["verdict"]


def test_the_suite_verdicts_apply_the_studys_rules_per_family():
    # on scarce: global falls behind as N grows, local starves, shapley equals difference at a cost; on aligned: none of it
    rows = _suite_rows(
        lambda f, arm, n: 0.9 - (0.1 * (n.bit_length() - 4) if f == "scarce" and arm == "global" else 0.0),
        starvation_of=lambda f, arm, n, s: 5.0 + s % 3 if f == "scarce" and arm == "local" else 0.0,
        ms_of=lambda arm, n: 10.0 * n if arm == "shapley" else 1.0,
    )
    vs = suite_report.verdicts(rows)
    assert len(vs) == 6 and {v["setting"] for v in vs} == {"scarce", "aligned"}
    assert [_verdict(vs, i, "scarce") for i in range(3)] == ["held", "held", "held"]
    assert [_verdict(vs, i, "aligned") for i in range(3)] == ["did not hold", "did not hold", "held"]
    # the same rule as the scaling study's, on the same numbers
    assert vs[0]["why"] == tt.verdict_global(rows, "scarce", part="suite")["why"]
    # shapley no slower than difference: the third prediction did not hold
    flat = suite_report.verdicts(_suite_rows(lambda f, arm, n: 0.9))
    assert {v["verdict"] for v in flat} == {"did not hold"}
    # one seed: no interval, nothing decided
    one = suite_report.verdicts(
        _suite_rows(
            lambda f, arm, n: 0.9 - (0.3 if arm == "global" else 0.0),
            starvation_of=lambda f, arm, n, s: 9.0 if arm == "local" else 0.0,
            ms_of=lambda arm, n: 9.0 if arm == "shapley" else 1.0,
            seeds=1,
        )
    )
    assert {v["verdict"] for v in one} == {"undecided"}


def test_the_suite_tables_show_held_out_and_train_scores_and_the_arms_against_difference():
    rows = _suite_rows(lambda f, arm, n: 0.8 if arm == "local" else 0.9, seeds=3, ns=(8,))
    summary = suite_report.summary_table(rows)
    assert "| held-out score | train score | train − held-out |" in summary
    assert "| scarce | 8 | `local` | 3 | 0.800 ± 0.050 | 0.850 ± 0.000 | +0.050 ± 0.050 |" in summary
    paired = suite_report.paired_table(rows)
    assert "| scarce | 8 | `local` | -0.100 ± 0.000 | -0.100 ± 0.000 | +0.000 ± 0.000 | +0.0 ± 0.0 | 0/3 |" in paired
    assert "`difference` |" not in paired.split("\n", 2)[2]  # the baseline is not paired with itself


def test_a_baseline_within_the_best_arms_interval_is_flagged():
    rows = _suite_rows(lambda f, arm, n: 0.9 if arm == "difference" else 0.7, seeds=3, ns=(8,))
    table = suite_report.baseline_table(
        rows,
        [
            {"policy": "open_loop", "family": "scarce", "n": 8, "score": 0.89, "score_h": 0.01, "seeds": 3},
            {"policy": "open_loop", "family": "aligned", "n": 8, "score": 0.5},
            {"policy": "open_loop", "family": "power", "n": 8, "score": 0.5},
        ],
    )
    lines = table.splitlines()
    assert lines[2].startswith("| scarce | 8 | `open_loop` (3 scenarios) | 0.890 ± 0.010 |") and "`difference` 0.900 ± 0.050" in lines[2]
    assert lines[2].endswith(f"| {suite_report.FLAG} |") and "not testing what it claims" in suite_report.FLAG
    # the local arm, independent PPO on local, named as the baseline beside the same best arm (learned: not flagged)
    assert lines[3] == (
        "| scarce | 8 | `local`, independent PPO on local (3 seeds) | 0.700 ± 0.050 | 0.750 ± 0.000 | `difference` 0.900 ± 0.050 | learned: below |"
    )
    assert lines[4].startswith("| aligned | 8 | `open_loop` |") and lines[4].endswith("| below |")
    assert lines[5].startswith("| aligned | 8 | `local`, independent PPO on local") and "| no runs | – |" in lines[6] and len(lines) == 7
    best = suite_report.baseline_table(_suite_rows(lambda f, arm, n: 0.95 if arm == "local" else 0.7, seeds=3, ns=(8,)), [])
    assert best.splitlines()[2].endswith("| `local` 0.950 ± 0.050 | learned: the best arm |") and "open_loop" not in best


def _quick_rows(s: SuiteStudy) -> list[dict]:
    return [_row(k, score=0.9 if k[3] == "difference" else 0.6) for k in s.runs()]


def test_the_quick_studys_baselines_are_stored_before_the_runs_and_the_report_only_reads_them(tmp_path, monkeypatch):
    """The open_loop baseline of each task of the quick study is graded once, as its runs are
    graded (split, scenarios, max_cycles), into baselines.csv; the report shows it beside the
    learned arms, and neither searches nor plays an episode (the grader raises while it runs)."""
    import importlib

    from fleet_marl.evaluation import suite_open_loop
    from fleet_marl.studies.credit import suite_baselines

    score = importlib.import_module("fleet_marl.evaluation.score")  # the module (the package's `score` is a function)
    reference = importlib.import_module("fleet_marl.evaluation.reference")

    s = SuiteStudy.quick(out=str(tmp_path / "q"))
    out, _ = runs.prepare(s)
    said: list[str] = []
    assert suite_baselines.compute(s, out, jobs=1, progress=False, echo=said.append) == []
    assert said == ["open_loop baseline: 2 of 2 task(s) to search and grade (search budget 250,000 tenant-rounds)"]
    stored = _csv(out / suite_baselines.BASELINES)
    assert list(stored[0]) == list(suite_baselines.BASELINE_COLUMNS)
    assert [(r["task"], r["split"], r["seeds"], r["search_budget"]) for r in stored] == [
        ("aligned_n4", "heldout", "1", "250000"),
        ("power_n4", "heldout", "1", "250000"),
    ]
    assert all(int(r["search_episodes"]) > 0 and float(r["score"]) >= 0 and r["finished"] for r in stored)

    def played(*args, **kwargs):
        raise AssertionError("the report played an episode or searched")

    for where, name in (
        (score, "evaluate"),
        (score, "run_episode"),
        (score, "reference_episodes"),
        (reference, "run_episode"),
        (suite_baselines, "evaluate"),
        (suite_baselines, "suite_open_loop_entry"),
        (suite_open_loop, "search_scenarios"),
        (suite_open_loop, "run_episode"),
    ):
        monkeypatch.setattr(where, name, played)
    assert suite_baselines.compute(s, out, jobs=1, progress=False, echo=said.append) == [] and len(said) == 1  # written once
    assert _csv(out / suite_baselines.BASELINES) == stored
    _write(out / "results.csv", SUITE_RESULT_COLUMNS, _quick_rows(s))
    _write(out / "sessions.csv", ("started", "stopped", "wall_seconds", "runs_done", "jobs", "version"), [{"wall_seconds": 60, "jobs": 2}])
    text = suite_report.report(out, echo=lambda *_: None)["text"]
    section = text[text.index(suite_report.BASELINES_HEADING) :]
    for r in stored:
        family, n = r["task"].split("_n")
        assert (
            f"| {family} | {n} | `open_loop` (1 scenario) | {float(r['score']):.3f} | {float(r['train_score']):.3f} | `difference` 0.900"
            in section
        )
        assert f"| {family} | {n} | `local`, independent PPO on local (2 seeds) | 0.600 ± " in section
    assert "250,000 (`open_loop_budget`) tenant-rounds" in section and "No `open_loop` row yet" not in section
    # a study without its baselines.csv: the report says so, and still computes nothing
    (out / suite_baselines.BASELINES).unlink()
    text = suite_report.report(out, echo=lambda *_: None)["text"]
    assert "No `open_loop` row yet for aligned N=4, power N=4" in text and "| `local`, independent PPO on local" in text


def test_the_suite_baselines_are_graded_as_the_runs_are(monkeypatch):
    """``SuiteStudy.baseline`` grades the open_loop baseline on the runs' split, scenarios and env
    overrides, with the study's search budget (None: the grader's), once per task missing."""
    from fleet_marl.studies.credit import suite_baselines

    seen = []
    monkeypatch.setattr(suite_baselines, "open_loop_row", lambda *a, **kw: seen.append((a, kw)) or {"policy": "open_loop"})
    q, s = SuiteStudy.quick(), SuiteStudy(families=("scarce",), ns=(8, 16), split="shift")
    q.baseline(("power", 4))
    s.baseline(("scarce", 16))
    assert seen == [
        (("power_n4", "heldout", 1, {"max_cycles": 20}), {"budget": 250_000}),
        (("scarce_n16", "shift", 4, {}), {"budget": None}),
    ]
    assert s.baseline_jobs(set()) == [("scarce", 8), ("scarce", 16)] and s.baseline_jobs({("scarce", 8)}) == [("scarce", 16)]
    assert "open_loop_budget" not in s.settings() and q.settings()["open_loop_budget"] == 250_000  # older study.json still match
    assert "baselines.csv" in SuiteStudy.FILES
    with pytest.raises(StudyError, match="--open-loop-budget 0: expected None"):
        SuiteStudy(open_loop_budget=0).check()


def test_the_suite_report_writes_its_summary_and_the_scaling_report_refuses_the_folder(tmp_path):
    s = SuiteStudy(families=("scarce", "aligned"), ns=(8,), seeds=3, out=str(tmp_path / "s"))
    out, _ = runs.prepare(s)
    _write(out / "results.csv", SUITE_RESULT_COLUMNS, _suite_rows(lambda f, arm, n: 0.9, seeds=3, ns=(8,)))
    _write(out / "sessions.csv", ("started", "stopped", "wall_seconds", "runs_done", "jobs", "version"), [{"wall_seconds": 60, "jobs": 2}])
    said = []
    got = suite_report.report(out, echo=said.append, baselines=[{"policy": "open_loop", "family": "scarce", "n": 8, "score": 0.95}])
    text = (out / "summary.md").read_text()
    assert text.startswith(f"# Credit-assignment study on the suite: {out}") and said[0].startswith(got["text"])
    assert f"{2 * len(SUITE_ARMS) * 3} of {2 * len(SUITE_ARMS) * 3} runs finished" in text
    for head in ("### Verdicts, per family", "### Summary", "### Each arm against `difference`", suite_report.BASELINES_HEADING):
        assert head in text
    assert "independent PPO on the local reward (IPPO, de Witt et al. 2020" in text
    assert suite_report.is_suite(out) and not suite_report.is_suite(tmp_path)
    with pytest.raises(StudyError, match="holds the study on the suite: add --suite"):
        report.report(out, echo=lambda *_: None)
    with pytest.raises(StudyError, match="--docs with the study on the suite"):
        report.write_docs(out, root=tmp_path / "checkout", echo=lambda *_: None)


# --- the command -----------------------------------------------------------------------------------


def _args(*argv):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_compare_suite_builds_the_suite_study_and_refuses_what_it_does_not_take():
    q = command.study_from_args(_args("--suite", "--quick"))
    assert isinstance(q, SuiteStudy) and q.settings() == SuiteStudy.quick().settings()
    s = command.study_from_args(_args("--suite", "--families", "scarce,power", "--n", "8,32", "--arms", "local,difference", "--seeds", "3"))
    assert (s.families, s.ns, s.arms, s.seeds, s.out) == (("scarce", "power"), (8, 32), ("local", "difference"), 3, "runs/credit_suite")
    assert not isinstance(command.study_from_args(_args("--quick")), SuiteStudy)
    for argv, match in (
        (("--families", "scarce"), "--families 'scarce': the families are the study on the suite's; add --suite"),
        (("--suite", "--mechanisms", "auction"), "--mechanisms with --suite"),
        (("--suite", "--engine", "rllib"), "--engine with --suite"),
        (("--suite", "--docs"), "--docs with --suite"),
        (("--suite", "--families", "scarce", "--n", "6"), "--n 6: expected team sizes family scarce has"),
    ):
        with pytest.raises(StudyError, match=match):
            command.study_from_args(_args(*argv))


def test_compare_help_lists_every_arm_the_suite_takes():
    """``--arms``' help names every arm ``--suite`` accepts, the value-decomposition arms too, from the tables."""
    parser = argparse.ArgumentParser(formatter_class=lambda prog: argparse.HelpFormatter(prog, width=10_000))
    command.add_arguments(parser)
    line = next(x for x in parser.format_help().splitlines() if x.lstrip().startswith("--arms"))
    assert "qmix" in suite_design.ENGINES and "vdn" in suite_design.ENGINES
    assert f"with --suite of {','.join(suite_design.ENGINES)} (qmix,vdn: value decomposition on benchmarl;" in line
    assert f"default {','.join(SUITE_ARMS)})" in line and f"(of {','.join(ARMS)}; default {','.join(Study().arms)})" in line
    for arm in suite_design.ENGINES:  # each accepted by --suite
        assert command.study_from_args(_args("--suite", "--quick", "--arms", arm)).arms == (arm,)


def _cli(*args):
    return subprocess.run([str(BIN / "fleet-marl"), "compare", *args], capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_compare_suite_quick_runs_end_to_end_and_resumes_a_partial_study(tmp_path):
    """``fleet-marl compare --suite --quick`` (two worker processes), a rerun that trains nothing,
    then a study cut short (rows lost, one half-written) resumed: the runs trained again give
    the same numbers (same seed, same result)."""
    out = tmp_path / "q"
    r = _cli("--suite", "--quick", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    s = SuiteStudy.quick()
    rows = _csv(out / "results.csv")
    assert list(rows[0]) == list(SUITE_RESULT_COLUMNS)
    assert {(x["part"], x["setting"], int(x["n"]), x["arm"], int(x["seed"])) for x in rows} == set(s.runs())
    for x in rows:
        assert int(x["env_steps"]) == s.env_steps("suite", 4)
        assert 0.0 < float(x["jain"]) <= 1.0 and x["converged"] in ("0", "1")
        assert x["score"] != "" and x["train_score"] != "" and x["gap"] != "" and x["train_gap"] != ""  # quick: train_hindsight
        assert float(x["cpu_seconds"]) >= float(x["eval_cpu_seconds"]) > 0.0
    assert len(_csv(out / "curves.csv")) == len(rows) * len(s.eval_fractions)
    summary = (out / "summary.md").read_text()
    assert "### Verdicts, per family" in summary and "| aligned | 4 | `local` | 2 |" in summary
    # the open_loop baseline of each task, graded before the runs into baselines.csv, in the report beside the learned arms
    assert "open_loop baseline: 2 of 2 task(s) to search and grade" in r.stdout
    baselines = _csv(out / "baselines.csv")
    assert [(b["task"], b["search_budget"]) for b in baselines] == [("aligned_n4", "250000"), ("power_n4", "250000")]
    for f in s.families:
        assert (
            f"| {f} | 4 | `open_loop` (1 scenario) |" in summary and f"| {f} | 4 | `local`, independent PPO on local (2 seeds) |" in summary
        )
    again = _cli("--suite", "--quick", "--out", str(out), "--no-progress")
    assert again.returncode == 0 and f"{len(rows)} done, 0 to go" in again.stdout
    assert "open_loop baseline" not in again.stdout and _csv(out / "baselines.csv") == baselines  # written once
    # cut short: the last rows lost, one half written; the same command trains them again, to the same numbers
    kept = sorted(rows, key=lambda x: x["finished"])[:5]
    _write(out / "results.csv", SUITE_RESULT_COLUMNS, kept)
    with (out / "results.csv").open("a") as f:
        f.write("suite,power,4,local,1,local")
    resumed = _cli("--suite", "--quick", "--out", str(out), "--no-progress")
    assert resumed.returncode == 0 and f"5 done, {len(rows) - 5} to go" in resumed.stdout, resumed.stderr[-3000:]
    after = _csv(out / "results.csv")

    def measures(x):
        return tuple(x[c] for c in ("part", "setting", "n", "arm", "seed", "eval_welfare", "score", "train_score", "gap"))

    assert sorted(map(measures, after)) == sorted(map(measures, rows))
    assert [int(x["runs_done"]) for x in _csv(out / "sessions.csv")] == [len(rows), len(rows) - 5]
    rep = _cli("--suite", "--quick", "--out", str(out), "--report")
    assert rep.returncode == 0 and "### Each arm against `difference`" in rep.stdout
    bad = _cli("--quick", "--out", str(out), "--report")
    assert bad.returncode == 2 and "add --suite" in bad.stderr

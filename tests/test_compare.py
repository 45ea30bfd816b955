"""The first credit-assignment study (``fleet-marl compare --engine rllib``, ``fleet_marl.studies.credit``)
where it needs no Ray: the scaled scenario, the study's settings and their errors, the
``compare`` command, resuming (``credit.runs``), the statistics, the tables, the report and the
docs block (``credit.report``), and its docs reproduced from its committed data. The runs
themselves (Ray) are in ``tests/test_rllib.py``."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fleet_marl
from fleet_marl.config import REWARD_SCHEMES, ConfigError
from fleet_marl.environment import scheme_rewards
from fleet_marl.studies import command
from fleet_marl.studies.credit import report, rllib_tables, runs, stats
from fleet_marl.studies.credit.rllib_design import CURVE_COLUMNS, RESULT_COLUMNS
from fleet_marl.studies.credit.rllib_design import RLlibStudy as Study
from fleet_marl.studies.store import StudyError
from fleet_marl.tasks import make_config, scaled

BIN = Path(sys.executable).parent


# --- the scenario -------------------------------------------------------------------------------


def test_scaled_four_under_maxmin_is_easy():
    # the same config but for the rack size, which changes nothing with easy's two nodes
    assert make_config("easy", **scaled(4, "maxmin"))[0] == make_config("easy", cluster={"nodes_per_rack": 2})[0]
    a, b = fleet_marl.parallel_env(task="easy"), fleet_marl.parallel_env(task="easy", **scaled(4, "maxmin"))
    _oa, _ = a.reset(seed=3)
    _ob, _ = b.reset(seed=3)
    for _ in range(5):
        act = {ag: a.default_action_index[a.agent_index[ag]] for ag in a.agents}
        ra = a.step(act)
        rb = b.step(act)
        assert ra[1] == rb[1] and all(np.array_equal(ra[0][k], rb[0][k]) for k in ra[0])


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_the_power_cap_never_binds_at_any_n(n):
    """Otherwise the scenarios would differ by more than N (racks of 4 H100 nodes draw 22.4 kW)."""
    from fleet_marl import catalog

    cfg, _ = make_config("easy", **scaled(n))
    tdp = catalog.gpu("h100-sxm").tdp_w
    assert cfg.cluster.nodes_per_rack * cfg.cluster.gpus_per_node * tdp < cfg.cluster.rack_power_cap_w


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16])
def test_scaled_grows_the_cluster_with_the_tenants(n):
    cfg, _ = make_config("easy", **scaled(n))
    assert len(cfg.tenants) == n
    assert cfg.cluster.num_nodes == -(-n // 2)  # 4 GPUs per tenant (8 per node)
    assert cfg.arbiter.mechanism == "proportional"
    easy = make_config("easy")[0].tenants
    assert all(t == easy[i % 4] for i, t in enumerate(cfg.tenants))


def test_scaled_rejects_a_bad_count():
    with pytest.raises(ConfigError, match="n"):
        scaled(0)


def test_the_env_times_its_credit_engine():
    env = fleet_marl.parallel_env(task="easy", reward_scheme="shapley", compute_all=False, **scaled(2))
    assert env.credit_seconds == 0.0 and env.steps_taken == 0
    env.reset(seed=0)
    for _ in range(3):
        env.step({a: env.default_action_index[env.agent_index[a]] for a in env.agents})
    assert env.steps_taken == 3 and env.credit_seconds > 0.0
    env.reset(seed=1)  # over the env's lifetime: a reset keeps the totals
    assert env.steps_taken == 3


@pytest.mark.parametrize("scheme", REWARD_SCHEMES)
def test_a_study_run_computes_only_its_own_scheme(scheme):
    """So the env's reward seconds are that scheme's cost."""
    from fleet_marl.rllib.env import FleetRLlibEnv

    env = FleetRLlibEnv(Study().train_config(4, scheme, 0).env_config())
    env.reset(seed=0)
    pe = env.par_env
    *_, infos = env.step({a: pe.default_action_index[pe.agent_index[a]] for a in env.agents})
    assert infos and all(set(scheme_rewards(i)) == {scheme} for i in infos.values())


# --- settings and errors ------------------------------------------------------------------------


def test_the_full_study_runs_every_scheme_at_every_n_with_three_seeds():
    s = Study()
    s.check()
    assert set(s.schemes) == set(REWARD_SCHEMES) and s.ns == (2, 4, 8, 16) and s.seeds >= 3
    assert len(s.runs()) == 6 * 4 * 3
    # the same env-step budget for every scheme at an N: the train config depends on N only
    for n in s.ns:
        tcs = [s.train_config(n, sch, 0) for sch in s.schemes]
        assert {tc.iterations * tc.train_batch_size for tc in tcs} == {s.budgets[n]}
        assert all(tc.env == tcs[0].env for tc in tcs)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(schemes=("local", "selfish")), "--schemes 'selfish'"),
        (dict(ns=(2, 0)), "--n 0"),
        (dict(ns=(2, 6)), "missing N=6"),
        (dict(budgets={2: 10, 4: 24_000, 8: 16_000, 16: 16_000}), "--budget '2=10'"),
        (dict(budgets={2: 25_000, 4: 24_000, 8: 16_000, 16: 16_000}), "a multiple of the 2,000"),
        (dict(seeds=0), "--seeds 0"),
        (dict(mechanism="lottery"), "--mechanism 'lottery'"),
    ],
)
def test_bad_settings_name_the_option(change, match):
    with pytest.raises(StudyError, match=match):
        Study(**change).check()


def _cli(*args, cwd=None, engine="rllib"):
    return subprocess.run(
        [str(BIN / "fleet-marl"), "compare", "--engine", engine, *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_cli_errors_before_ray(tmp_path):
    r = _cli("--schemes", "local,nope", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--schemes 'nope'" in r.stderr and "fleet-marl compare --help" in r.stderr
    r = _cli("--budget", "2:100", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "N=STEPS" in r.stderr
    r = _cli("--budget", "2=", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--budget '2=': expected N=STEPS pairs of integers" in r.stderr
    r = _cli("--jobs", "0", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--jobs 0" in r.stderr
    r = _cli("--report", "--out", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no finished runs" in r.stderr
    assert not (tmp_path / "s").exists()


def test_help_has_examples():
    r = _cli("--help", engine="torchrl")
    assert r.returncode == 0 and "fleet-marl compare --quick" in r.stdout and "resumes" in r.stdout


def test_the_command_module_on_its_own(tmp_path, capsys):
    """The compare entry of the CLI's table: its own parser, errors before Ray, in-process."""
    parser = argparse.ArgumentParser(epilog=command.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_arguments(parser)
    assert command.run(parser.parse_args(["--engine", "rllib", "--schemes", "local,nope", "--out", str(tmp_path / "s")])) == 2
    assert "error: --schemes 'nope'" in capsys.readouterr().err
    assert command.run(parser.parse_args(["--engine", "rllib", "--n", "2,x", "--out", str(tmp_path / "s")])) == 2
    assert "--n '2,x': expected comma-separated integers" in capsys.readouterr().err
    args = parser.parse_args(["--engine", "rllib", "--quick", "--n", "2", "--budget", "2=200", "--out", str(tmp_path / "q")])
    study = command.study_from_args(args)
    assert study.ns == (2,) and study.budgets[2] == 200 and study.out == str(tmp_path / "q") and study.train_batch_size == 200
    assert not (tmp_path / "s").exists() and not (tmp_path / "q").exists()


def test_building_the_command_parsers_imports_no_ray_or_torch():
    code = (
        "import argparse, sys; from fleet_marl.studies import command; from fleet_marl.studies.bench import command as bench; "
        "from fleet_marl.rllib import command as train; "
        "[m.add_arguments(argparse.ArgumentParser()) for m in (bench, command, train)]; "
        "print(sorted(m for m in ('ray', 'torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# --- resuming -----------------------------------------------------------------------------------


def _row(n, scheme, seed, welfare=10.0, **kw) -> dict:
    base = dict.fromkeys(RESULT_COLUMNS, 0)
    base.update(
        n=n,
        scheme=scheme,
        seed=seed,
        eval_welfare=welfare,
        score=0.5,
        jain=0.9,
        run_seconds=10.0,
        credit_seconds=1.0,
        credit_ms_per_step=0.5,
        finished="2026-11-21T20:00:00",
    )
    base.update(kw)
    return base


def _curve(n, scheme, seed, iters=2) -> list[dict]:
    return [
        {
            "n": n,
            "scheme": scheme,
            "seed": seed,
            "iteration": i,
            "env_steps": 100 * i,
            "welfare": 5.0 * i + seed,
            "jain": 0.9,
            "starvation_events": 0,
            "degenerate": 0,
            "seconds": i,
        }
        for i in range(1, iters + 1)
    ]


def _write(path: Path, columns, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)


def test_prepare_resumes_and_drops_the_curve_of_a_killed_run(tmp_path):
    s = Study.quick(out=str(tmp_path / "s"))
    out, done = runs.prepare(s)
    assert done == set() and json.loads((out / "study.json").read_text()) == s.settings()
    _write(out / "results.csv", RESULT_COLUMNS, [_row(2, "local", 0)])
    _write(out / "curves.csv", CURVE_COLUMNS, _curve(2, "local", 0) + _curve(2, "global", 0))  # global was killed
    out, done = runs.prepare(s)
    assert done == {(2, "local", 0)}
    with (out / "curves.csv").open() as f:
        assert {r["scheme"] for r in csv.DictReader(f)} == {"local"}
    todo = [r for r in s.runs() if r not in done]
    assert len(todo) == len(s.runs()) - 1 and (2, "global", 0) in todo


def test_prepare_drops_a_row_cut_short_by_a_kill(tmp_path):
    s = Study.quick(out=str(tmp_path / "s"))
    out, _ = runs.prepare(s)
    _write(out / "results.csv", RESULT_COLUMNS, [_row(2, "local", 0)])
    with (out / "results.csv").open("a") as f:
        f.write("2,global,0,2,400")  # the process died in the middle of this row
    _, done = runs.prepare(s)
    assert done == {(2, "local", 0)}
    with (out / "results.csv").open() as f:
        assert [r["scheme"] for r in csv.DictReader(f)] == ["local"]


def test_prepare_refuses_other_settings_and_overwrite_starts_over(tmp_path):
    s = Study.quick(out=str(tmp_path / "s"))
    runs.prepare(s)
    _write(Path(s.out) / "results.csv", RESULT_COLUMNS, [_row(2, "local", 0)])
    other = Study.quick(out=s.out, seeds=3)
    with pytest.raises(StudyError, match="differs in: seeds"):
        runs.prepare(other)
    assert (Path(s.out) / "results.csv").is_file()  # refused: nothing deleted
    _, done = runs.prepare(other, overwrite=True)
    assert done == set() and not (Path(s.out) / "results.csv").exists()


def test_prepare_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(StudyError, match="not empty"):
        runs.prepare(Study.quick(out=str(tmp_path)))


# --- statistics and the report ------------------------------------------------------------------


def test_mean_ci_is_the_student_t_interval():
    m, h = stats.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.303 / np.sqrt(3))  # t(0.975, 2) * sd / sqrt(n), sd = 1
    m, h = stats.mean_ci([5.0])
    assert m == 5.0 and np.isnan(h)


def test_paired_differences_are_by_seed():
    rows = [_row(2, "difference", s, welfare=10 + s) for s in range(3)] + [_row(2, "global", s, welfare=8 + 2 * s) for s in range(3)]
    m, h, wins, k = rllib_tables.paired(rows, "difference", "global")[2]
    assert (m, wins, k) == (pytest.approx(1.0), 2, 3)  # differences 2, 1, 0
    rows += [_row(2, "local", s, welfare=20.0) for s in range(3)]
    m, _h, wins, k = rllib_tables.paired(rows, "local", rllib_tables.OTHERS)[2]  # others: mean of difference and global per seed
    assert m == pytest.approx(np.mean([20 - (10 + s + 8 + 2 * s) / 2 for s in range(3)])) and (wins, k) == (3, 3)


def test_the_reproducing_command_comes_from_the_study():
    assert report.command(Study().settings()) == "fleet-marl compare --engine rllib"
    assert report.command(Study.quick().settings()) == "fleet-marl compare --engine rllib --quick"
    s = Study(ns=(2, 4), seeds=5, budgets={2: 40_000, 4: 40_000}, mechanism="maxmin").settings()
    assert report.command(s) == "fleet-marl compare --engine rllib --n 2,4 --seeds 5 --budget 2=40000,4=40000 --mechanism maxmin"
    assert report.command(Study(lr=1e-3).settings()) == "fleet-marl compare --engine rllib (and, from Python, RLlibStudy(lr=0.001))"


def test_report_writes_tables_and_plots(tmp_path):
    s = Study.quick(out=str(tmp_path / "s"))
    out, _ = runs.prepare(s)
    rows, curves = [], []
    for n in s.ns:
        for seed in range(s.seeds):
            for sch in s.schemes:
                rows.append(_row(n, sch, seed, welfare=10.0 * n + seed))
                curves += _curve(n, sch, seed)
    _write(out / "results.csv", RESULT_COLUMNS, rows)
    _write(out / "curves.csv", CURVE_COLUMNS, curves)
    rep = report.report(out, echo=lambda *_: None)
    assert "| 4 | `shapley` | 2 | 40.5 ±" in rep["table"]
    assert "welfare: `difference` − `global`" in rep["prediction"]
    assert "Jain: `local` − the mean of the other schemes" in rep["prediction"]
    assert "growth of the welfare gap `difference` − `global` since N=2 | (reference) |" in rep["prediction"]
    for p in [*rep["curves"].values(), rep["scaling"]]:
        assert p.is_file() and p.stat().st_size > 5_000
    assert set(rep["curves"]) == {2, 4}
    # the docs block: written between markers, the text around it kept, idempotent
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    doc = root / report.DOC
    start, end = report.MARKERS["rllib"]
    doc.write_text(f"# Study\n\nprose before\n\n{start}\nold\n{end}\n\nprose after\n")
    with pytest.raises(StudyError, match="quick study"):
        report.write_docs(out, root=root, echo=lambda *_: None)
    report.write_docs(out, root=root, echo=lambda *_: None, allow_quick=True)
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "old" not in text.split(start)[1].split(end)[0]
    assert f"`fleet-marl compare --engine rllib --quick --out {out.as_posix()}`" in text and "img/credit_curves_n2.png" in text
    assert (root / "docs" / "img" / "credit_scaling.png").is_file()
    assert (root / "docs" / "data" / "credit_assignment" / "results.csv").read_text() == (out / "results.csv").read_text()
    report.write_docs(out, root=root, echo=lambda *_: None, allow_quick=True)
    assert doc.read_text() == text


def test_docs_of_a_study_under_another_arbiter_go_to_their_own_block(tmp_path):
    s = Study(ns=(2,), schemes=("local", "difference"), seeds=2, mechanism="auction", out=str(tmp_path / "a"))
    out, _ = runs.prepare(s)
    rows = [_row(2, sch, seed, welfare=5.0 + seed) for seed in range(2) for sch in s.schemes]
    _write(out / "results.csv", RESULT_COLUMNS, rows)
    _write(out / "curves.csv", CURVE_COLUMNS, [c for seed in range(2) for sch in s.schemes for c in _curve(2, sch, seed)])
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    where = report.docs_targets(s.settings())
    main_block = "{}\nthe main study\n{}".format(*report.MARKERS["rllib"])
    (root / report.DOC).write_text(f"# Study\n\n{main_block}\n\n## Auction\n\n{where['start']}\n{where['end']}\n")
    report.write_docs(out, root=root, echo=lambda *_: None)
    text = (root / report.DOC).read_text()
    assert main_block in text  # untouched
    block = text.split(where["start"])[1].split(where["end"])[0]
    assert "--mechanism auction" in block and "img/credit_auction_curves_n2.png" in block
    assert "(data/credit_assignment_auction/)" in block
    assert (root / "docs" / "img" / "credit_auction_scaling.png").is_file()
    assert not (root / "docs" / "img" / "credit_scaling.png").exists()
    assert (root / "docs" / "data" / "credit_assignment_auction" / "results.csv").read_text() == (out / "results.csv").read_text()
    assert report.docs_targets(Study().settings())["start"] == report.MARKERS["rllib"][0]
    # the reproducing commands name the study's folder, which is not the default one
    assert (
        f"--mechanism auction --out {out.as_posix()}`, then `fleet-marl compare --engine rllib --out {out.as_posix()} --report --docs`"
        in block
    )


def test_the_first_study_reproduces_from_its_committed_data(tmp_path, monkeypatch):
    """``fleet-marl compare --engine rllib --report --docs`` on the committed data of the first
    study (docs/data/credit_assignment*/, copied to where the study ran) writes back its blocks
    of docs/credit_assignment.md, byte for byte."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    committed = (root / report.DOC).read_text()
    scratch = tmp_path / "checkout"
    (scratch / "docs").mkdir(parents=True)
    (scratch / report.DOC).write_text(committed)
    monkeypatch.chdir(tmp_path)
    for data, out in (("credit_assignment", "runs/credit_assignment"), ("credit_assignment_auction", "runs/credit_auction")):
        shutil.copytree(root / "docs" / "data" / data, tmp_path / out)
        report.write_docs(out, root=scratch, echo=lambda *_: None, engine="rllib")
        settings = json.loads((tmp_path / out / "study.json").read_text())
        where = report.docs_targets(settings)
        block = committed.split(where["start"])[1].split(where["end"])[0]
        assert block.count("\n") > 30 and "#### The prediction, paired by seed" in block
    assert (scratch / report.DOC).read_text() == committed
    for data in ("credit_assignment", "credit_assignment_auction"):
        for name in ("results.csv", "curves.csv", "study.json"):
            assert (scratch / "docs" / "data" / data / name).read_bytes() == (root / "docs" / "data" / data / name).read_bytes()

"""``fleet-marl compare`` as a command (its options, the engines it runs on, the parsers it
builds without Ray or torch), the study's runs on RLlib (their config against the TorchRL
run's, a small study end to end and resumed), the scaled scenario the study grows, the statistics, and the first
credit-assignment study (RLlib), which is its committed data (``docs/data/credit_assignment*/``)
and the renderer of its blocks (``fleet_marl.studies.credit.first_study``). The study's design,
runs and report are in ``tests/test_credit_study.py``."""

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
from fleet_marl.config import ConfigError
from fleet_marl.studies import command
from fleet_marl.studies.credit import first_study, report, rllib_runs, runs, stats
from fleet_marl.studies.credit.torchrl_design import CURVE_COLUMNS, RESULT_COLUMNS, Study
from fleet_marl.studies.store import StudyError, append, read_rows
from fleet_marl.tasks import make_config, scaled
from fleet_marl.training import engines

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


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


# --- the command --------------------------------------------------------------------------------


def _cli(*args, cwd=None):
    return subprocess.run([str(BIN / "fleet-marl"), "compare", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_study_runs_on_the_engines_it_has_runs_for():
    """--engine picks an engine of the registry for the one study, the registry's default first."""
    assert command.ENGINES == ("torchrl", "rllib") and command.ENGINES[0] == engines.DEFAULT
    assert set(runs.RUNNERS) == set(engines.ENGINES) and runs.RUNNERS["rllib"] is rllib_runs


@pytest.mark.slow
def test_cli_errors_before_anything_runs(tmp_path):
    for args, says in (
        (("--engine", "rllib", "--jobs", "3"), "--jobs 3: the study's RLlib runs are Ray tasks of one CPU on a Ray of 2 CPUs"),
        (("--engine", "rllib", "--address", "auto"), "--address 'auto': the study's RLlib runs train on this machine's Ray"),
        (("--engine", "rllib", "--docs"), "--docs with --engine rllib: the docs publish the study's runs on torchrl"),
    ):
        r = _cli(*args, "--out", str(tmp_path / "s"))
        assert r.returncode == 2 and says in r.stderr and "fleet-marl compare --help" in r.stderr, (args, r.stderr)
    r = _cli("--engine", "nope", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = _cli("--jobs", "0", "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "--jobs 0" in r.stderr
    r = _cli("--report", "--out", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no finished runs" in r.stderr
    assert not (tmp_path / "s").exists()


def test_help_has_examples():
    r = _cli("--help")
    assert r.returncode == 0 and "fleet-marl compare --quick" in r.stdout and "resumes" in r.stdout


def test_the_command_module_on_its_own(tmp_path, capsys):
    """The compare entry of the CLI's table: its own parser, errors before anything trains, in-process."""
    parser = argparse.ArgumentParser(epilog=command.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_arguments(parser)
    assert command.run(parser.parse_args(["--arms", "local,nope", "--out", str(tmp_path / "s")])) == 2
    assert "error: --arms 'nope'" in capsys.readouterr().err
    assert command.run(parser.parse_args(["--n", "2,x", "--out", str(tmp_path / "s")])) == 2
    assert "--n '2,x': expected comma-separated integers" in capsys.readouterr().err
    assert command.run(parser.parse_args(["--engine", "rllib", "--device", "cuda", "--out", str(tmp_path / "s")])) == 2
    assert "--device 'cuda': the study's RLlib runs learn on cpu" in capsys.readouterr().err
    study = command.study_from_args(parser.parse_args(["--quick", "--n", "2", "--out", str(tmp_path / "q")]))
    assert study.ns == (2,) and study.out == str(tmp_path / "q")
    # the study on another engine than the default: a folder of its own unless --out names one
    assert command.study_from_args(parser.parse_args(["--quick", "--engine", "rllib"])).out == "runs/credit_study_quick_rllib"
    assert command.study_from_args(parser.parse_args(["--engine", "rllib"])).out == "runs/credit_study_rllib"
    assert command.study_from_args(parser.parse_args(["--engine", "torchrl"])).out == "runs/credit_study"
    assert not (tmp_path / "s").exists() and not (tmp_path / "q").exists()


def test_building_the_command_parsers_imports_no_ray_or_torch():
    code = (
        "import sys; from fleet_marl.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('ray', 'torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# --- the study on RLlib --------------------------------------------------------------------------


def test_an_rllib_run_is_the_torchrl_run_field_by_field():
    """Every field both engines' run configs have is the same; the RLlib iteration is the TorchRL
    iteration's env steps, so the budget is the study's on both."""
    pytest.importorskip("torchrl")  # the TorchRL run's config, to compare with
    study = Study.quick()
    keys = [("scaling", "auction", 4, "shapley", 1), ("scaling", "proportional", 2, "mappo", 0), ("sharing", "medium", 8, "per_kind", 1)]
    for key in keys:
        t, r = study.train_config(key), rllib_runs.train_config(study, key)
        assert {f: getattr(t, f) for f in rllib_runs.FIELDS} == {f: getattr(r, g) for f, g in rllib_runs.FIELDS.items()}, key
        assert r.num_env_runners == 0 and r.vectorized and r.envs_per_runner == t.num_envs
        assert r.train_batch_size == t.num_envs * t.rollout and r.iterations * r.train_batch_size == study.env_steps(key[0], key[2])
        assert (r.eval_interval, r.checkpoint_interval) == (0, 0)


def test_an_rllib_study_names_its_engine(tmp_path):
    """study.json names an engine other than the default: a folder of the other engine's runs is
    refused by name, the reproducing command says --engine, and --docs refuses it."""
    s = Study.quick(out=str(tmp_path / "s"))
    assert runs.settings(s) == s.settings() and runs.settings(s, "rllib") == {**s.settings(), "engine": "rllib"}
    runs.prepare(s)
    with pytest.raises(StudyError, match=r"other settings \(differs in: engine\)"):
        runs.prepare(s, engine="rllib")
    assert report.command(runs.settings(s, "rllib")) == "fleet-marl compare --engine rllib --quick"
    assert report.command(runs.settings(Study(seeds=3), "rllib"), "runs/r") == "fleet-marl compare --engine rllib --seeds 3 --out runs/r"
    s2 = Study.quick(out=str(tmp_path / "r"))
    runs.prepare(s2, engine="rllib")
    with pytest.raises(StudyError, match="run on rllib: the docs publish the study's runs on the default engine"):
        report.write_docs(s2.out, root=tmp_path)


@pytest.mark.slow
def test_the_study_runs_on_rllib_and_resumes(tmp_path):
    """A small study on RLlib (the tiny task, two runs): the TorchRL runs' CSV columns, the
    study's budget, one row per run; a run missing from results.csv is run again, the others are
    kept."""
    pytest.importorskip("ray.rllib")
    import ray

    study = runs.make_study(
        quick=True, arms=("global",), mechanisms=("proportional",), ns=(2,), sharing_tasks=("tiny",), sharing_arms=("per_tenant",), seeds=1
    )
    study.out = str(tmp_path / "s")
    said: list[str] = []
    try:
        out = runs.run(study, engine="rllib", progress=False, echo=said.append)
        assert said == [f"credit-assignment study in {out} on rllib: 2 runs, 0 done, 2 to go"]
        with (out / "results.csv").open() as f:
            assert tuple(next(csv.reader(f))) == RESULT_COLUMNS
        with (out / "curves.csv").open() as f:
            assert tuple(next(csv.reader(f))) == CURVE_COLUMNS
        rows = read_rows(out / "results.csv")
        assert sorted(Study.key(r) for r in rows) == sorted(study.runs())  # two at a time: in the order they finished
        for r in rows:
            key = Study.key(r)
            assert int(r["env_steps"]) == study.env_steps(key[0], key[2]) and int(r["agent_steps"]) == 2 * int(r["env_steps"])
            assert 0.0 <= float(r["score"]) <= 1.0 and r["credit_seconds"] != "" and r["finished"]
        curves = read_rows(out / "curves.csv")
        assert sorted(int(c["iteration"]) for c in curves) == sorted(study.eval_at("scaling") + study.eval_at("sharing"))
        assert json.loads((out / "study.json").read_text())["engine"] == "rllib"
        # a session that stopped after the first run: the second is run again, the first kept
        first, second = rows[0], Study.key(rows[1])
        keep = [c for c in curves if Study.key(c) != second]
        for name, columns, kept in (("results.csv", RESULT_COLUMNS, [first]), ("curves.csv", CURVE_COLUMNS, keep)):
            (out / name).unlink()
            append(out / name, columns, kept)
        said.clear()
        runs.run(study, engine="rllib", progress=False, echo=said.append)
        assert said == [f"credit-assignment study in {out} on rllib: 2 runs, 1 done, 1 to go"]
        again = read_rows(out / "results.csv")
        assert again[0] == first and [Study.key(r) for r in again] == [Study.key(first), second]
        said.clear()
        runs.run(study, engine="rllib", progress=False, echo=said.append)
        assert said == [f"credit-assignment study in {out} on rllib: 2 runs, 2 done, 0 to go"]
        assert len(read_rows(out / "sessions.csv")) == 2 and "ray " in read_rows(out / "sessions.csv")[0]["version"]
        assert "# Credit-assignment study (RLlib)" in report.report(out, echo=lambda *_: None)["summary"].read_text()
    finally:
        ray.shutdown()  # run_all keeps the Ray it started for the process's later studies


# --- statistics ---------------------------------------------------------------------------------


def test_mean_ci_is_the_student_t_interval():
    m, h = stats.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.303 / np.sqrt(3))  # t(0.975, 2) * sd / sqrt(n), sd = 1
    m, h = stats.mean_ci([5.0])
    assert m == 5.0 and np.isnan(h)


# --- the first study: its data and its blocks ---------------------------------------------------


def _row(n, scheme, seed, welfare=10.0) -> dict:
    return {"n": n, "scheme": scheme, "seed": seed, "eval_welfare": welfare}


def test_paired_differences_are_by_seed():
    rows = [_row(2, "difference", s, welfare=10 + s) for s in range(3)] + [_row(2, "global", s, welfare=8 + 2 * s) for s in range(3)]
    m, h, wins, k = first_study.paired(rows, "difference", "global")[2]
    assert (m, wins, k) == (pytest.approx(1.0), 2, 3)  # differences 2, 1, 0
    rows += [_row(2, "local", s, welfare=20.0) for s in range(3)]
    m, _h, wins, k = first_study.paired(rows, "local", first_study.OTHERS)[2]  # others: mean of difference and global per seed
    assert m == pytest.approx(np.mean([20 - (10 + s + 8 + 2 * s) / 2 for s in range(3)])) and (wins, k) == (3, 3)


def test_the_command_each_study_ran_as_comes_from_its_settings():
    assert first_study.command(dict(first_study.DEFAULTS)) == "fleet-marl compare --engine rllib"
    s = {**first_study.DEFAULTS, "ns": [2, 4], "seeds": 5, "budgets": {"2": 40_000, "4": 40_000}, "mechanism": "maxmin"}
    assert first_study.command(s) == "fleet-marl compare --engine rllib --n 2,4 --seeds 5 --budget 2=40000,4=40000 --mechanism maxmin"
    assert (
        first_study.command({**first_study.DEFAULTS, "lr": 1e-3})
        == "fleet-marl compare --engine rllib (and, from Python, RLlibStudy(lr=0.001))"
    )
    assert first_study.command(dict(first_study.DEFAULTS), "runs/x").endswith(" --out runs/x")


def test_each_arbiter_has_its_own_block():
    main = first_study.targets(dict(first_study.DEFAULTS))
    assert main["start"] == "<!-- credit-assignment:start -->" and main["data"] == "docs/data/credit_assignment"
    auction = first_study.targets({**first_study.DEFAULTS, "mechanism": "auction"})
    assert auction["start"] == "<!-- credit-assignment-auction:start -->" and auction["prefix"] == "credit_auction_"
    assert auction["data"] == "docs/data/credit_assignment_auction"


@pytest.mark.parametrize("data", ["credit_assignment", "credit_assignment_auction"])
def test_the_first_study_is_its_committed_data(data):
    """Each committed study's block of docs/credit_assignment.md is what its data renders, byte for
    byte; its settings are the defaults but for the options its command names; its plots are committed."""
    d = ROOT / "docs" / "data" / data
    settings = json.loads((d / "study.json").read_text())
    assert set(settings) == set(first_study.DEFAULTS)
    where = first_study.targets(settings)
    assert where["data"] == f"docs/data/{data}"
    doc = (ROOT / "docs" / "credit_assignment.md").read_text()
    shown = doc[doc.index(where["start"]) : doc.index(where["end"]) + len(where["end"])]
    assert shown == first_study.block(d)
    assert shown.count("\n") > 30 and "#### The prediction, paired by seed" in shown
    for img in (f"{where['prefix']}scaling.png", *(f"{where['prefix']}curves_n{n}.png" for n in settings["ns"])):
        assert f"(img/{img})" in shown and (ROOT / "docs" / "img" / img).is_file()
    rows = read_rows(d / "results.csv")
    assert len(rows) == len(settings["ns"]) * len(settings["schemes"]) * settings["seeds"]
    assert "| growth of the welfare gap `difference` − `global`" in first_study.prediction_table(rows)


def test_the_renderer_finds_every_committed_study():
    found = {start for _doc, start, _end, _text in first_study.blocks(ROOT)}
    assert found == {"<!-- credit-assignment:start -->", "<!-- credit-assignment-auction:start -->"}


def test_a_bad_folder_is_a_study_error(tmp_path):
    from fleet_marl.studies.credit import report

    with pytest.raises(StudyError, match="no finished runs"):
        report.load(tmp_path)

"""Shipped configs load, validate and evaluate; the README's Python snippets, and those of the docs they moved to, run."""

import re
from pathlib import Path

import numpy as np
import pytest

from fleet_marl.config import FleetConfig
from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate
from tests.conftest import random_actions

ROOT = Path(__file__).resolve().parents[1]


def test_every_experiment_yaml_loads_and_evaluates():
    files = sorted((ROOT / "experiments").glob("*.yaml"))
    assert files
    for f in files:
        cfg = FleetConfig.from_yaml(f)
        assert FleetConfig.from_dict(cfg.to_dict()) == cfg
        st = KernelStatic.from_config(cfg)
        out = evaluate(st, random_actions(st, np.random.default_rng(0), 8), RoundState.initial(st), Draws.expected(st))
        assert np.isfinite(out.welfare).all()


#: the pages whose Python examples run, each from the start of the part that holds them to the
#: next "## " heading (None: the whole page): the README's, and those moved out of it
SNIPPET_PAGES = {"README.md": None, "docs/policies.md": "### Writing one", "docs/configuration.md": None}


@pytest.mark.parametrize("page", sorted(SNIPPET_PAGES))
def test_the_python_snippets_run(page):
    text = (ROOT / page).read_text()
    if (start := SNIPPET_PAGES[page]) is not None:
        text = text[text.index(start) :]
        text = text[: text.index("\n## ")] if "\n## " in text else text
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    ns: dict = {}  # one namespace, top to bottom: a snippet may use what an earlier one defined
    for code in blocks:
        # a snippet may end with a line that shows an error on purpose: run it expecting that error
        lines = code.strip().splitlines()
        if lines[-1].startswith("# ConfigError"):
            from fleet_marl.config import ConfigError

            try:
                exec(compile("\n".join(lines[:-1]), page, "exec"), ns)
            except ConfigError as e:
                assert lines[-1].removeprefix("# ConfigError: ") == str(e)
            else:
                raise AssertionError(f"{page}'s error example did not raise")
        else:
            exec(compile(code, page, "exec"), ns)


@pytest.mark.slow
def test_planner_variants_script_runs():
    import subprocess
    import sys

    script = ROOT / "experiments" / "planner_variants.py"
    r = subprocess.run([sys.executable, str(script), "--tasks", "tiny", "--seeds", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "| default |" in r.stdout and "| horizon=3 |" in r.stdout
    r = subprocess.run([sys.executable, str(script), "--cost", "--tasks", "tiny"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ms per plan" in r.stdout, r.stderr


def _script(name: str):
    """The module of ``experiments/<name>.py`` (the experiments are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _credit_signal():
    return _script("credit_signal")


def test_credit_signal_fit_recovers_a_function_of_the_own_action():
    cs = _credit_signal()
    rng = np.random.default_rng(0)
    nvec = np.array([3, 4])
    x = np.stack([rng.integers(0, 3, 400), rng.integers(0, 4, 400)], axis=1)
    effect0, effect1 = np.array([0.0, 1.0, -2.0]), np.array([0.5, 0.0, 3.0, -1.0])
    exact = effect0[x[:, 0]] + effect1[x[:, 1]]
    y = np.stack([exact, exact + rng.normal(0, 10, 400)], axis=1)  # the second mostly noise
    fit, r2 = cs.own_action_fit(x, y, nvec)
    np.testing.assert_allclose(fit[:, 0], exact, atol=1e-9)
    assert r2[0] > 1 - 1e-9 and r2[1] < 0.2


def test_credit_signal_with_one_tenant_every_reward_is_the_same():
    # one tenant: G = L = D = its utility, so all three are explained alike and fully aligned
    r = _credit_signal().row(1, 1)
    assert r["agent_steps"] == 100
    assert r["r2_global"] == pytest.approx(r["r2_local"]) == pytest.approx(r["r2_difference"])
    assert r["r2_global"] > 0.1
    assert r["align_local"] == pytest.approx(1.0) and r["align_global"] == pytest.approx(1.0)
    assert r["bid_local"] == pytest.approx(r["bid_difference"])


def test_credit_signal_global_reward_loses_own_action_signal_as_n_grows():
    # the table in docs/credit_assignment.md: the share of G a tenant moves falls with N
    cs = _credit_signal()
    small, large = cs.row(2, 2), cs.row(8, 2)
    assert large["r2_global"] < small["r2_global"]
    assert large["r2_difference"] > large["r2_global"]


def test_credit_signal_table_has_a_row_per_arbiter_and_n(capsys):
    _credit_signal().main(["--n", "2,3", "--episodes", "1", "--mechanism", "proportional,auction"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| `proportional`", "2"],
        ["| `proportional`", "3"],
        ["| `auction`", "2"],
        ["| `auction`", "3"],
    ]
    with pytest.raises(SystemExit):
        _credit_signal().main(["--mechanism", "vickrey"])


@pytest.mark.slow
def test_credit_cost_script_prints_a_row_per_scheme_permutations_and_n():
    # experiments/credit_cost.py (docs/credit_assignment.md, "Why Shapley stops at N = 16"); a
    # subprocess, since it pins itself to one core
    import subprocess
    import sys

    script = ROOT / "experiments" / "credit_cost.py"
    r = subprocess.run(
        [sys.executable, str(script), "--n", "2,9", "--schemes", "difference,shapley", "--samples", "2", "--steps", "2", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split(" | ") for line in r.stdout.splitlines() if line.startswith("| difference") or line.startswith("| shapley")]
    assert [(c[0], c[1], c[2]) for c in rows] == [
        ("| difference", "–", "2"),
        ("| difference", "–", "9"),
        ("| shapley", "exact", "2"),
        ("| shapley", "2", "9"),
    ]
    for c in rows:
        rate, ms, per_run = float(c[3].replace(",", "")), float(c[4]), float(c[5].rstrip(" |"))
        assert rate > 0 and ms > 0 and per_run == pytest.approx(ms / 1e3 * 393216 / int(c[2]), rel=0.02, abs=0.2)
    # it times the one scheme a learner's env computes, with the permutations asked for
    mod = _script("credit_cost")
    venv = mod.make_env(16, "shapley", 16, "auction")
    reward = venv.config.reward
    assert venv.num_envs == 128 and reward.scheme == "shapley" and reward.compute_all is False and reward.shapley_samples == 16
    assert venv.config.arbiter.mechanism == "auction"


def test_credit_followup_is_the_study_at_one_setting_and_reuses_its_rows(tmp_path):
    # experiments/credit_followup.py (docs/credit_assignment.md, "Follow-up"): the study's settings
    # but N, arms, arbiter, sharing and seeds; the full study's rows of that setting are copied, no other
    from fleet_marl.studies import store
    from fleet_marl.studies.credit import torchrl_design

    mod = _script("credit_followup")
    s = mod.study(str(tmp_path / "f"))
    full, mine = torchrl_design.Study().settings(), s.settings()
    assert {k for k in full if full[k] != mine[k]} == {"ns", "arms", "mechanisms", "sharing_arms", "seeds"}
    assert s.runs() == [("scaling", "proportional", 64, arm, seed) for seed in range(20) for arm in ("difference", "shapley")]
    src = tmp_path / "src"
    src.mkdir()
    keys = [
        ("scaling", "proportional", 64, "shapley", 0),
        ("scaling", "auction", 64, "shapley", 0),
        ("scaling", "proportional", 32, "difference", 1),
    ]
    store.append(src / "results.csv", torchrl_design.RESULT_COLUMNS, [dict(zip(torchrl_design.KEY, k, strict=False)) for k in keys])
    store.append(src / "curves.csv", torchrl_design.CURVE_COLUMNS, [dict(zip(torchrl_design.KEY, k, strict=False)) for k in keys])
    assert mod.seed_from(src, tmp_path / "f", s) == 1
    got = store.read_rows(tmp_path / "f" / "results.csv")
    assert [(r["setting"], r["n"], r["arm"]) for r in got] == [("proportional", "64", "shapley")]


def test_server_costs_script_prints_a_row_per_size_with_the_servers_work_estimate():
    # experiments/server_costs.py (docs/llm_agents.md, "Security": the --max-work table)
    import io
    from contextlib import redirect_stdout

    import fleet_marl
    from fleet_marl.openenv.cost import work

    mod = _script("server_costs")
    out = io.StringIO()
    with redirect_stdout(out):
        mod.main(["--sizes", "2x1x8,4x2x16,2x1x8s", "--opponents", "planner,greedy", "--cpu", "-1"])
    rows = [line.strip("| ").split(" | ") for line in out.getvalue().splitlines()[2:]]
    assert [r[:4] for r in rows] == [["2", "1", "8", "easy's mix"], ["4", "2", "16", "easy's mix"], ["2", "1", "8", "servers"]]
    env = fleet_marl.parallel_env(task="easy", compute_all=True, **mod.scenario(4, 2, 16))
    w = work(env.config, "planner")
    assert rows[1][4] == f"{w.env:,}" and rows[1][7] == f"{w.opponents:,}"
    assert rows[1][11] == f"{work(env.config, 'greedy').opponents:,}"
    assert all(len(r) == 15 and float(x.replace(",", "")) >= 0 for r in rows for x in r[4:])


@pytest.mark.slow
def test_serve_capacity_script_measures_sessions_stepping_once_a_second():
    # experiments/serve_capacity.py (docs/llm_agents.md, "Capacity": the default --max-sessions)
    import io
    import socket
    from contextlib import redirect_stdout

    pytest.importorskip("openenv")
    mod = _script("serve_capacity")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = io.StringIO()
    with redirect_stdout(out):
        mod.main(["--sessions", "3", "--seconds", "2", "--port", str(port)])
    row = out.getvalue().splitlines()[2].strip("| ").split(" | ")
    sessions, steps, p50, p99, idle, rss, _per = row
    assert sessions == "3" and int(steps) >= 3 and 0 < float(p50) <= float(p99) and 0 < float(idle) <= float(rss)


def test_tiny_plays_pairs_each_play_with_the_planner():
    # experiments/tiny_plays.py (docs/results.md, "tiny is a coordination problem"): on seed 0
    # tenant_0 idles for 8 rounds, so holding the node loses to releasing it and handing it to
    # tenant_1 wins; the table pairs each play with the planner on the same seeds
    mod = _script("tiny_plays")
    w = mod.run(2)
    assert w["hold"][0] < w["planner"][0] < w["hand over"][0]
    text = mod.table(w, 1)
    assert "| planner |" in text and "| hold |" in text and "(0/1)" in text and "(1/1)" in text


def test_tiny_plays_partner_noise_plays_a_run_greedy_and_sampled(tmp_path):
    # tiny_plays.py --run: the table of docs/results.md (a trained run, its GPU request as trained
    # and raised to the whole node); here a one-iteration run on one seed
    from fleet_marl.torchrl.train import TorchRLTrainConfig, train

    mod = _script("tiny_plays")
    tc = TorchRLTrainConfig(
        task="tiny",
        iterations=1,
        num_envs=2,
        rollout=5,
        epochs=1,
        minibatch=10,
        hidden=[8],
        eval_interval=0,
        final_episodes=0,
        out=str(tmp_path),
    )
    run = train(tc, progress=False).run_dir
    rows = mod.partner_noise(str(run), 1).splitlines()
    assert rows[0].endswith("| the whole node (8) |")
    cells = [r.split("|")[1:5] for r in rows[2:]]
    assert [(a.strip(), b.strip()) for a, b, _, _ in cells] == [
        ("sampled", "sampled"),
        ("sampled", "greedy"),
        ("greedy", "sampled"),
        ("greedy", "greedy"),
    ]
    assert all(float(c) == float(c) for _, _, x, y in cells for c in (x, y))  # numbers, not NaN


def test_round_profile_ablations_and_stage_cuts_match_the_round():
    # the profiler rewrites engine.round_rows' text: each ablation's line and each stage it cuts
    # before must be there (the ablations had gone stale once, when the couplings entered the round)
    import inspect

    from fleet_marl.kernel import engine

    rp = _script("round_profile")
    text = (ROOT / "fleet_marl" / "kernel" / "engine.py").read_text()
    assert all(old in text for old, _ in rp.ABLATIONS.values())
    loop = [
        line.strip()
        for line in inspect.getsource(engine.round_rows.py_func).split("\n")
        if line.startswith(" " * 8) and not line.startswith(" " * 9)
    ]
    assert all(any(line.startswith(stage) for line in loop) for stage in rp.STAGES)

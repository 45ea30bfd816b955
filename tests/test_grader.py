"""The evaluation layer (grader) and ``fleet-marl evaluate`` / ``baselines`` / ``demo``: scores, determinism,
the reference cache, loading users' policies and the errors they get."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import fleet_marl
from fleet_marl import cli, policies
from fleet_marl.evaluation import GraderError, PolicyError, baselines, evaluate, load_policy, reference_episodes, score


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_MARL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_score_formula_floored_at_random_and_not_capped():
    assert score(5.0, 0.0, 10.0) == 0.5
    assert score(-3.0, 0.0, 10.0) == 0.0
    assert score(30.0, 0.0, 10.0) == 3.0  # three times the planner's lead over random: not cut to 1
    with pytest.raises(GraderError, match="does not exceed random"):
        score(1.0, 2.0, 2.0)


def test_random_scores_zero_and_planner_scores_one():
    # factories: played afresh, not taken from the reference episodes
    r = evaluate("tiny", lambda env: policies.make("random", env), episodes=2, progress=False)
    p = evaluate("tiny", lambda env: policies.make("planner", env), episodes=2, progress=False)
    assert r.score == 0.0 and p.score == 1.0
    assert r.welfare.tolist() == r.random_welfare
    assert p.welfare.tolist() == p.reference_welfare
    by_name = evaluate("tiny", "planner", episodes=2, progress=False)  # reuses the reference episodes
    assert by_name.welfare.tolist() == p.welfare.tolist() and by_name.policy == "planner"
    e = evaluate("tiny", "precision_expert", episodes=2, progress=False)
    assert e.score > 0.0
    expected = (e.welfare.mean() - np.mean(e.random_welfare)) / (np.mean(e.reference_welfare) - np.mean(e.random_welfare))
    assert e.score == pytest.approx(max(expected, 0.0))


@pytest.mark.slow
def test_evaluation_is_deterministic_and_the_cache_changes_nothing(cache):
    a = evaluate("easy", "bidder", episodes=2, seed=3, progress=False, cache=False).summary()
    b = evaluate("easy", "bidder", episodes=2, seed=3, progress=False).summary()  # fills the cache
    c = evaluate("easy", "bidder", episodes=2, seed=3, progress=False).summary()  # reads it
    assert a == b == c
    assert len(list((cache / "grader").glob("*.json"))) == 7  # 2 seeds x (random, planner, hindsight), the open-loop table
    assert a["seeds"] == [3, 4]


def test_damaged_cache_entries_are_recomputed(cache):
    first = reference_episodes("tiny", "random", [0])
    for p in (cache / "grader").glob("*.json"):
        p.write_text("{not json")
    again = reference_episodes("tiny", "random", [0])
    assert again[0].welfare == first[0].welfare


def test_summary_has_the_documented_keys():
    s = evaluate("tiny", "fair_share", episodes=2, progress=False).summary()
    for k in (
        "task",
        "policy",
        "episodes",
        "welfare_mean",
        "welfare_std",
        "score",
        "jain_mean",
        "starvation_events",
        "max_starvation_streak",
        "oom",
        "veto",
        "throttle",
        "degenerate",
        "illegal",
        "agents",
    ):
        assert k in s
    assert s["task"] == "tiny" and s["policy"] == "fair_share" and s["episodes"] == 2
    assert set(s["agents"]) == {"tenant_0", "tenant_1"}
    json.dumps(s)


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


GOOD = """
    import numpy as np

    class Mine:
        def __init__(self, env):
            self.env = env
        def reset(self, seed=None):
            pass
        def act(self, observations, infos):
            return {a: np.zeros(8, np.int64) for a in self.env.agents}
"""


def test_user_policy_file_module_and_object_load(tmp_path):
    env = fleet_marl.parallel_env(task="tiny")
    f = write(tmp_path, "mine.py", GOOD)
    assert type(load_policy(str(f), env)).__name__ == "Mine"
    assert type(load_policy(f"{f}:Mine", env)).__name__ == "Mine"
    assert isinstance(load_policy("fleet_marl.policies.heuristics:GreedyPolicy", env), policies.GreedyPolicy)
    obj = policies.make("random", env)
    assert load_policy(obj, env) is obj
    ev = evaluate("tiny", str(f), episodes=1, progress=False)
    assert ev.policy == str(f) and ev.welfare.tolist() == [0.0]  # asking for nothing earns and spends nothing
    factory = write(
        tmp_path,
        "factory.py",
        """
        from fleet_marl import policies
        def make_policy(env):
            return policies.make("fair_share", env)
    """,
    )
    assert isinstance(load_policy(str(factory), env), policies.FairSharePolicy)


@pytest.mark.parametrize(
    "body, match",
    [
        ("import nonexistent_module_xyz\n", r"mine\.py: failed to import: ModuleNotFoundError"),
        ("def broken(:\n", r"mine\.py: failed to import: SyntaxError"),
        ("class A:\n    def reset(self, seed=None): pass\n", r"defines no class with act\(\) and reset\(\)"),
        (
            "class A:\n    def __init__(self, env): pass\n    def reset(self, seed=None): pass\ndef make_policy(env):\n    return A(env)\n",
            r"A lacks act\(\)",
        ),
        (
            "class A:\n    def __init__(self, env): raise RuntimeError('boom')\n    def reset(self, s=None): pass\n    def act(self, o, i): return {}\n",
            r"constructing it raised RuntimeError: boom",
        ),
    ],
)
def test_user_policy_load_errors_name_the_file_and_the_problem(tmp_path, body, match):
    env = fleet_marl.parallel_env(task="tiny")
    f = write(tmp_path, "mine.py", body)
    with pytest.raises(PolicyError, match=match) as info:
        load_policy(str(f), env)
    assert "mine.py" in str(info.value)


def test_unknown_names_and_missing_files(tmp_path):
    env = fleet_marl.parallel_env(task="tiny")
    with pytest.raises(PolicyError, match="unknown policy; expected a reference policy"):
        load_policy("nope", env)
    with pytest.raises(PolicyError, match="not found"):
        load_policy(str(tmp_path / "absent.py"), env)
    with pytest.raises(PolicyError, match="no attribute 'Nope'"):
        load_policy("fleet_marl.policies.heuristics:Nope", env)
    with pytest.raises(PolicyError, match="failed to import module"):
        load_policy("no_such_pkg_xyz:Thing", env)


@pytest.mark.parametrize(
    "act, match",
    [
        ("return [0] * 8", r"act\(\) returned a list at round 0; expected a dict"),
        ("return {}", r"agent tenant_0: act\(\) returned no action at round 0"),
        (
            "return {a: np.zeros(3, np.int64) for a in self.env.agents}",
            r"agent tenant_0: malformed action at round 0: action.shape = \(3,\)",
        ),
        (
            "return {**{a: np.zeros(8, np.int64) for a in self.env.agents}, 'tenant_1': np.full(8, 99)}",
            r"agent tenant_1: malformed action at round 0: action\[0\] \(gpus\) = 99; expected an integer in \[0, 8\]",
        ),
        ("return {'ghost': np.zeros(8, np.int64)}", r"agent ghost: act\(\) returned an action for 'ghost'"),
        ("raise ValueError('oops')", r"act\(\) raised ValueError at round 0: oops"),
    ],
)
def test_malformed_actions_name_the_file_the_agent_and_the_problem(tmp_path, act, match):
    f = write(
        tmp_path,
        "bad.py",
        f"""
        import numpy as np

        class Bad:
            def __init__(self, env):
                self.env = env
            def reset(self, seed=None):
                pass
            def act(self, observations, infos):
                {act}
    """,
    )
    with pytest.raises(PolicyError, match=match) as info:
        evaluate("tiny", str(f), episodes=1, progress=False)
    assert "bad.py" in str(info.value)


def test_evaluate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="task = 'nope'"):
        evaluate("nope", "random", progress=False)
    with pytest.raises(ValueError, match="episodes = 0"):
        evaluate("tiny", "random", episodes=0, progress=False)
    with pytest.raises(ValueError, match="seed = -1"):
        evaluate("tiny", "random", seed=-1, progress=False)


def test_cli_evaluate_json_and_text(capsys):
    assert cli.main(["evaluate", "--task", "tiny", "--policy", "precision_expert", "--episodes", "2", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["task"] == "tiny" and s["policy"] == "precision_expert" and s["episodes"] == 2
    assert s["score"] >= 0.0
    assert cli.main(["evaluate", "--task", "tiny", "--policy", "precision_expert", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"score     {s['score']:.3f}" in out and "starvation events" in out and "tenant_1" in out


def test_cli_evaluate_errors_exit_2_with_the_reason(tmp_path, capsys):
    f = write(tmp_path, "broken.py", "import nonexistent_module_xyz\n")
    assert cli.main(["evaluate", "--task", "tiny", "--policy", str(f), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "broken.py: failed to import" in err and "fleet-marl evaluate --help" in err
    assert cli.main(["evaluate", "--task", "nope"]) == 2
    assert "--task 'nope': expected one of tiny" in capsys.readouterr().err
    assert cli.main(["evaluate", "--task", "tiny", "--episodes", "0"]) == 2


def test_baselines_table_and_marked_blocks(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nbefore\n\n<!-- baselines:start -->\nold\n<!-- baselines:end -->\n\nafter\n")
    results = tmp_path / "docs" / "results.md"
    args = [
        "baselines",
        "--tasks",
        "tiny",
        "--policies",
        "random,fair_share,planner",
        "--episodes",
        "2",
        "--results",
        str(results),
        "--readme",
        str(readme),
    ]
    assert cli.main(args) == 0  # a partial run writes nothing unless asked
    captured = capsys.readouterr()
    assert "| tiny | fair_share |" in captured.out and "pass --write" in captured.err
    assert "old" in readme.read_text() and not results.exists()
    assert cli.main(args + ["--write"]) == 0
    text = readme.read_text()
    assert "old" not in text and "before" in text and "after" in text and "| tiny | planner |" in text and "| 1.00 |" in text
    assert "--tasks tiny --policies random,fair_share,planner`" in text  # the command that reproduces it
    assert "| tiny | random |" in results.read_text()
    # a second run with the same results rewrites nothing
    from fleet_marl.studies.publish import write_block

    assert not write_block(
        readme,
        baselines.START,
        baselines.END,
        baselines.block(
            baselines.run_all(["tiny"], ["random", "fair_share", "planner"], 2, 0, progress=False),
            2,
            0,
            " --tasks tiny --policies random,fair_share,planner",
        ),
    )
    # a partial --write adds its cells to the saved table: the tiny rows stay beside greedy's
    more = ["baselines", "--tasks", "tiny", "--policies", "greedy", "--episodes", "2", "--results", str(results), "--readme", str(readme)]
    assert cli.main(more + ["--write"]) == 0
    saved = json.loads((results.parent / baselines.DATA).read_text())
    assert [r["policy"] for r in saved["rows"]] == ["random", "greedy", "fair_share", "planner"]
    assert saved["extra_args"] == " --tasks tiny --policies random,greedy,fair_share,planner"
    assert "| tiny | greedy |" in readme.read_text() and "| tiny | planner |" in readme.read_text()
    # rows of other seeds are not mixed in
    assert cli.main([*more[:6], "3", *more[7:], "--write"]) == 2
    assert "holds 2 episodes of tiny from seed 0, this run 3 from seed 0" in capsys.readouterr().err
    # ... unless the run replaces every row of the task (how tiny moved to 100 seeds); scores and gaps follow the references
    whole = [*more[:4], "random,greedy,fair_share,planner", *more[5:6], "3", *more[7:], "--write"]
    assert cli.main(whole) == 0
    saved = json.loads((results.parent / baselines.DATA).read_text())
    assert saved["episodes"] == 2 and saved["task_episodes"] == {"tiny": 3}
    assert "tiny: seeds 0..2, 3 episodes" in readme.read_text()


@pytest.mark.slow
def test_demo_prints_frames_and_a_summary_and_saves_a_gif(tmp_path, capsys):
    gif = tmp_path / "demo.gif"
    assert cli.main(["demo", "--task", "tiny", "--gif", str(gif), "--every", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("fleet_v0 tiny  round") >= 3
    assert "demo: task tiny, policy precision_expert, seed 0" in out and "welfare" in out and "saved" in out
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames >= 3
    assert cli.main(["demo", "--every", "0"]) == 2
    assert cli.main(["demo", "--seed", "-1"]) == 2
    assert cli.main(["demo", "--gif", str(tmp_path / "noext")]) == 2
    assert "expected a path ending in .gif" in capsys.readouterr().err


def test_policy_objects_bound_elsewhere_are_refused_and_classes_are_built():
    other = fleet_marl.parallel_env(task="easy")
    with pytest.raises(PolicyError, match="bound to another environment"):
        evaluate("tiny", policies.make("fair_share", other), episodes=1, progress=False)
    ev = evaluate("tiny", policies.GreedyPolicy, episodes=1, progress=False)
    assert ev.policy == "GreedyPolicy"
    assert ev.welfare.tolist() == evaluate("tiny", "greedy", episodes=1, progress=False).welfare.tolist()


def test_module_from_the_working_directory_and_sibling_imports(tmp_path, monkeypatch):
    write(tmp_path, "good_mod.py", GOOD)
    sibling = write(
        tmp_path,
        "uses_sibling.py",
        """
        from good_mod import Mine

        def make_policy(env):
            return Mine(env)
    """,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    env = fleet_marl.parallel_env(task="tiny")
    assert type(load_policy("good_mod:Mine", env)).__name__ == "Mine"
    assert type(load_policy(str(sibling), env)).__name__ == "Mine"


@pytest.mark.slow
def test_policies_that_sample_the_action_space_are_deterministic(tmp_path):
    f = write(
        tmp_path,
        "sampler.py",
        """
        class Sampler:
            def __init__(self, env):
                self.env = env
            def reset(self, seed=None):
                pass
            def act(self, observations, infos):
                return {a: self.env.action_space(a).sample(infos[a]["action_mask"]) for a in self.env.agents}
    """,
    )
    a = evaluate("easy", str(f), episodes=2, progress=False).welfare.tolist()
    b = evaluate("easy", str(f), episodes=2, progress=False).welfare.tolist()
    assert a == b and a[0] != a[1]


def test_the_cache_follows_the_trace_files(tmp_path, monkeypatch):
    from fleet_marl.workloads import traces_dir

    src = traces_dir()  # the shipped samples
    import shutil

    copy = tmp_path / "traces"
    shutil.copytree(src, copy)
    monkeypatch.setenv("FLEET_MARL_TRACES", str(copy))
    before = reference_episodes("trace", "random", [0])[0].welfare
    lines = (copy / "pollux_workload-1.csv").read_text().splitlines()
    (copy / "pollux_workload-1.csv").write_text("\n".join(lines[:4]) + "\n")  # only the first three jobs
    after = reference_episodes("trace", "random", [0])[0].welfare
    assert after != before


def test_policy_loader_plugins():
    """A package adds a kind of policy spec by registering a PolicyLoader (fleet_marl.rllib
    declares one for checkpoints as an entry point); the grader never imports the adapter."""
    from fleet_marl.evaluation import PolicyLoader, loaders, loading, register_loader

    assert "rllib" in loaders() and loaders()["rllib"].accepts("no/such/run") is False
    env = fleet_marl.parallel_env(task="tiny")
    made = []

    def load(spec, env):
        made.append(spec)
        return policies.make(spec.split(":", 1)[1], env)

    register_loader(PolicyLoader("zoo", accepts=lambda s: s.startswith("zoo:"), load=load, description="zoo:<name>"))
    try:
        assert isinstance(load_policy("zoo:fair_share", env), policies.FairSharePolicy) and made == ["zoo:fair_share"]
        with pytest.raises(PolicyError, match="zoo:<name>"):  # the error lists the plug-in kinds
            load_policy("nothing-like-it", env)
        with pytest.raises(TypeError):
            register_loader(object())
    finally:
        loading._REGISTERED.pop("zoo", None)
    with pytest.raises(PolicyError, match="failed to import module 'zoo'"):  # once unregistered, just a module:Name spec
        load_policy("zoo:fair_share", env)
    assert made == ["zoo:fair_share"]


def test_old_policy_paths_and_unclaimed_folders_say_how_to_fix_them(tmp_path):
    env = fleet_marl.parallel_env(task="tiny")
    with pytest.raises(PolicyError, match="moved to fleet_marl.policies"):
        load_policy("policies.heuristics:GreedyPolicy", env)
    with pytest.raises(PolicyError, match="no policy loader accepts.*reinstall"):
        load_policy(str(tmp_path), env)  # a folder, but not a run folder

"""The value-decomposition arms of the suite study (``qmix``, ``vdn``: BenchMARL's QMIX and VDN,
:mod:`fleet_marl.studies.credit.benchmarl_runs`): a real run end to end through the study's
workers, with the PPO arms' budget and grading; the menu env over a suite task's train
scenarios; the greedy grader policy, deterministic for a seed; refusals."""

from __future__ import annotations

import csv
import importlib.util
import math

import numpy as np
import pytest

from fleet_marl import suite
from fleet_marl.environment.parallel import FleetParallelEnv
from fleet_marl.environment.spaces import mask_dims
from fleet_marl.environment.vector import FleetVectorEnv
from fleet_marl.studies.credit import runs, suite_report
from fleet_marl.studies.credit.benchmarl_runs import VALUE_ARMS
from fleet_marl.studies.credit.suite_design import ENGINES, SUITE_RESULT_COLUMNS, TRAIN_COLUMNS, SuiteStudy
from fleet_marl.studies.store import StudyError

torch = pytest.importorskip("torch")
if importlib.util.find_spec("benchmarl") is None:  # importing it needs fleet_marl's bridge (clients.benchmarl.compat)
    pytest.skip("the [benchmarl] extra is not installed", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _csv(path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(1200)
def test_a_qmix_run_trains_on_the_suite_task_with_the_ppo_budget_and_is_graded_like_it(tmp_path):
    """The quick study on ``power`` at n = 4, arms qmix and difference, one seed, through the
    study's worker pool: both rows have the suite study's columns, the same env-step budget,
    curve points at the same env steps, a finite held-out score and gap and the train split's
    figures; the report's tables show the qmix arm."""
    study = SuiteStudy.quick(families=("power",), arms=("qmix", "difference"), seeds=1, out=str(tmp_path / "q"))
    out = runs.run(study, jobs=1, progress=False, echo=lambda *a, **k: None)
    rows = {r["arm"]: r for r in _csv(out / "results.csv")}
    assert set(rows) == {"qmix", "difference"}
    q, d = rows["qmix"], rows["difference"]
    assert list(q) == list(SUITE_RESULT_COLUMNS)
    assert (q["scheme"], q["sharing"]) == VALUE_ARMS["qmix"] == ("global", "qmix")
    budget = study.env_steps("suite", 4)
    tc = study.train_config(("suite", "power", 4, "difference", 0))
    assert int(q["env_steps"]) == int(d["env_steps"]) == budget == tc.iterations * tc.num_envs * tc.rollout
    assert int(q["agent_steps"]) == 4 * budget and int(q["iterations"]) == study.iterations
    for c in ("score", "eval_welfare", "gap", "hindsight_welfare", *TRAIN_COLUMNS):
        assert math.isfinite(float(q[c])), c  # quick: train_hindsight, so train_gap too
    assert float(q["planner_welfare"]) == float(d["planner_welfare"]) and float(q["train_random_welfare"]) == float(
        d["train_random_welfare"]
    )
    assert float(q["cpu_seconds"]) >= float(q["eval_cpu_seconds"]) > 0.0
    curves = _csv(out / "curves.csv")
    steps = {arm: [int(c["env_steps"]) for c in curves if c["arm"] == arm] for arm in rows}
    assert steps["qmix"] == steps["difference"] and steps["qmix"][-1] == budget and len(steps["qmix"]) == len(study.eval_fractions)
    table = suite_report.summary_table(list(rows.values()))
    assert "`qmix`" in table and "`difference`" in table


def test_the_value_arms_are_marked_benchmarl_and_bad_arm_names_are_named():
    assert ENGINES["qmix"] == ENGINES["vdn"] == "benchmarl" and ENGINES["difference"] == "torchrl"
    SuiteStudy(arms=("qmix", "vdn", "local")).check()
    assert SuiteStudy.arm(("suite", "power", 8, "vdn", 0)) == ("global", "vdn")
    with pytest.raises(StudyError, match=r"--arms 'qmx': expected values from .*qmix, vdn"):
        SuiteStudy(arms=("qmx",)).check()
    with pytest.raises(StudyError, match="a list without repeats"):
        SuiteStudy(arms=("qmix", "qmix")).check()
    from fleet_marl.clients.benchmarl.train import train

    with pytest.raises(ValueError, match="expected one of qmix, vdn, iql"):
        train("power_n4", "mappo", 1, 2, 2, 0)


def test_the_menu_env_spreads_a_suite_tasks_clusters_over_its_train_scenarios():
    from fleet_marl.clients.benchmarl import FleetMenuEnv
    from fleet_marl.environment.scenario_vector import ScenarioVectorEnv

    env = FleetMenuEnv(num_envs=6, task="power_n4", scenarios=3, max_cycles=4)
    assert isinstance(env.venv, ScenarioVectorEnv) and env.venv.sizes == [2, 2, 2]
    for k, e in enumerate(env.venv.envs):  # cluster block k: train scenario k
        assert e.config == FleetVectorEnv(1, config=suite.scenario("power_n4", k, "train"), max_cycles=4, compute_all=False).config
    assert env.venv.envs[0].config != env.venv.envs[1].config
    td = env.rollout(5, break_when_any_done=False)
    assert int(td["next", "done"].sum()) == 6 and env.ended_welfare and all(math.isfinite(w) for w in env.ended_welfare)


def _train(seed: int, algorithm: str = "qmix"):
    from fleet_marl.clients.benchmarl.train import train

    seen: list[tuple[int, int]] = []
    trained = train("power_n4", algorithm, 2, 4, 3, seed, overrides={"max_cycles": 6}, on_iteration=lambda i, s, t, w: seen.append((i, s)))
    return trained, seen


def _observe(policy, env):
    obs, _ = env.reset(seed=5)
    return policy.act(obs, {})


@pytest.mark.parametrize("algorithm", ["qmix", "vdn"])
def test_the_greedy_grader_policy_is_deterministic_for_a_seed_and_plays_the_menu(algorithm):
    """Two trainings with the same seed give the same greedy actions on a held-out scenario
    (another seed's Q-network differs); every action is allowed by the env's masks, its menu
    fields from the menu and the others the tenant's defaults; the budget is as asked."""
    a, seen = _train(3, algorithm)
    b, _ = _train(3, algorithm)
    c, _ = _train(4, algorithm)
    assert seen == [(1, 12), (2, 24)] and a.env_steps == 24 and a.iterations == 2
    pa, pb = (dict(t.q.state_dict()) for t in (a, b))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert any(not torch.equal(pa[k], v) for k, v in c.q.state_dict().items())  # the seed matters
    env = FleetParallelEnv(config=suite.scenario("power_n4", 0, "heldout"))
    acts = _observe(a.policy(env), env)
    assert acts and {k: v.tolist() for k, v in acts.items()} == {k: v.tolist() for k, v in _observe(b.policy(env), env).items()}
    assert {k: v.tolist() for k, v in acts.items()} == {k: v.tolist() for k, v in _observe(a.policy(env), env).items()}
    dims = a.menu.dims
    for agent, act in acts.items():
        i = env.possible_agents.index(agent)
        masks = mask_dims(env.action_mask(agent), env.nvec[i])
        assert all(bool(np.asarray(m)[x]) for m, x in zip(masks, act, strict=True))  # every choice allowed
        off = [d for d in range(8) if d not in dims]
        assert (act[off] == env.default_action_index[i][off]).all()

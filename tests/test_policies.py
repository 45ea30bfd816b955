"""Reference policies: legal over whole episodes, both PettingZoo loops, each one's rule, and
the planner's margin over random on every task."""

from __future__ import annotations

import numpy as np
import pytest

import fleet_marl
from fleet_marl import catalog, policies
from fleet_marl.environment import BATCH_LEVELS
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate
from fleet_marl.policies.base import OBS, PREC
from fleet_marl.policies.heuristics import EXPERT_MAP
from fleet_marl.tasks import TASKS, task_dict

TASK_NAMES = list(TASKS)
FP32, BF16, FP8 = (catalog.PRECISION_CODE[p] for p in ("fp32", "bf16", "fp8"))


def play(task, name, seed=0, obs_mode="flat", check=None, **kw):
    """One full episode of ``name`` on ``task`` with illegal actions raising; returns the
    last finisher's episode report. ``check(env, obs, infos, actions)`` sees every round."""
    env = fleet_marl.parallel_env(task=task, compute_all=False, illegal_action="raise", obs_mode=obs_mode)
    pol = policies.make(name, env, **kw)
    obs, infos = env.reset(seed=seed)
    pol.reset(seed)
    reports = {}
    while env.agents:
        actions = pol.act(obs, infos)
        assert set(actions) == set(env.agents)
        for a, act in actions.items():
            mask = env.action_mask(a)
            assert act.shape == (8,) and act.dtype.kind == "i"
            for k, m in enumerate(mask):
                assert m[act[k]] == 1, f"{name} on {task}: {a} chose masked {k}={act[k]} at round {env.round}"
        if check is not None:
            check(env, obs, infos, actions)
        obs, _, _, _, infos = env.step(actions)
        for info in infos.values():
            assert info["illegal"] is False and not info["illegal_fields"].any()
    reports = env.episode_reports
    assert set(reports) == set(env.possible_agents)
    return max(reports.values(), key=lambda r: r["rounds"])


@pytest.mark.parametrize("task", TASK_NAMES)
@pytest.mark.parametrize("name", list(policies.POLICIES))
def test_every_policy_is_legal_over_a_full_episode(task, name):
    report = play(task, name, seed=1)
    assert np.isfinite(report["welfare"])


@pytest.mark.parametrize("name", list(policies.POLICIES))
def test_policies_read_the_mask_from_dict_observations(name):
    """obs_mode='dict': the mask comes in the observation; same trajectory as flat mode."""
    flat = play("easy", name, seed=2)
    dict_ = play("easy", name, seed=2, obs_mode="dict")
    assert dict_["welfare"] == flat["welfare"]


@pytest.mark.parametrize("name", list(policies.POLICIES))
def test_aec_loop_matches_the_parallel_loop(name):
    """act_one in the AEC agent_iter loop plays the same episode as act in the parallel loop."""
    aec = fleet_marl.env(task="easy", compute_all=False, illegal_action="raise")
    pol = policies.make(name, aec)
    aec.reset(seed=4)
    pol.reset(4)
    aec_rewards = dict.fromkeys(aec.possible_agents, 0.0)
    for agent in aec.agent_iter():
        obs, r, term, trunc, info = aec.last()
        aec_rewards[agent] += r
        aec.step(None if term or trunc else pol.act_one(obs, agent, info))
    env = fleet_marl.parallel_env(task="easy", compute_all=False, illegal_action="raise")
    pol2 = policies.make(name, env)
    obs, infos = env.reset(seed=4)
    pol2.reset(4)
    par_rewards = dict.fromkeys(env.possible_agents, 0.0)
    while env.agents:
        obs, rew, _, _, infos = env.step(pol2.act(obs, infos))
        for a, r in rew.items():
            par_rewards[a] += r
    assert aec_rewards == pytest.approx(par_rewards, rel=0, abs=1e-12)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_planner_beats_random_by_a_clear_margin_and_heuristics_solve_every_task(task):
    """VMAS-style solvability: on every seed the planner (and precision_expert) beat both random
    and asking for nothing (welfare 0: random pays for GPUs it cannot use, so on tiny, medium
    and hard it does worse than nothing), by at least a quarter of random's magnitude plus one
    round's worth of welfare."""
    for seed in (0, 1):
        rand = play(task, "random", seed)["welfare"]
        plan = play(task, "planner", seed)["welfare"]
        expert = play(task, "precision_expert", seed)["welfare"]
        floor, margin = max(rand, 0.0), 0.25 * abs(rand) + 1.0
        assert plan > floor + margin, (task, seed, plan, rand)
        assert expert > floor + margin, (task, seed, expert, rand)


def test_greedy_asks_for_everything_at_fp32():
    def check(env, obs, infos, actions):
        for a, act in actions.items():
            mask = infos[a]["action_mask"] if infos else env.action_mask(a)
            assert act[0] == np.flatnonzero(mask[0])[-1]
            assert act[1] == len(env.bid_levels) - 1
            assert (act[PREC] == FP32).all()

    play("easy", "greedy", check=check)


def test_fair_share_asks_for_its_fair_share_in_bf16():
    def check(env, obs, infos, actions):
        st = env.kernel_static
        for a, act in actions.items():
            i = env.agent_index[a]
            fair = int(np.floor(obs[a][OBS["fair_share"]] * st.max_gpus[i] + 1e-3))
            assert act[0] == min(fair, np.flatnonzero(env.action_mask(a)[0])[-1])
            assert env.bid_levels[act[1]] == 1.0
            assert (act[PREC] == BF16).all()

    play("medium", "fair_share", check=check)


def fits_alone(env, i, act) -> bool:
    """Whether tenant i's action runs as asked, alone on a fresh cluster (the kernel's verdict)."""
    st = env.kernel_static
    gpus = np.zeros(st.T, np.int64)
    gpus[i] = act[0]
    prec = np.asarray(env.default_actions.precision).copy()
    prec[i] = act[PREC]
    batch = np.ones(st.T, np.int64)
    batch[i] = BATCH_LEVELS[act[-1]]
    present = np.zeros(st.T, bool)
    present[i] = True
    state = RoundState.initial(st)
    state = RoundState(
        prev_alloc=gpus, temp_c=state.temp_c, queue=state.queue, remaining_tokens=state.remaining_tokens, budget_left=np.full(st.T, 1e9)
    )
    out = evaluate(st, Actions(gpus=gpus, bid=np.ones(st.T), precision=prec, batch=batch), state, Draws.expected(st), present)
    return bool(out.alloc[i] == act[0] and not out.oom[i] and not out.vetoed[i] and not out.projected[i])


def test_precision_expert_map_and_the_largest_batch_that_fits():
    seen = set()

    def check(env, obs, infos, actions):
        st = env.kernel_static
        for a, act in actions.items():
            i = env.agent_index[a]
            fp8 = bool(st.supported[i, FP8])
            want = [catalog.PRECISION_CODE[EXPERT_MAP[g]] if (EXPERT_MAP[g] != "fp8" or fp8) else BF16 for g in catalog.GROUPS]
            assert act[PREC].tolist() == want
            if act[0] > 0 and (i, int(act[0])) not in seen:
                seen.add((i, int(act[0])))
                assert fits_alone(env, i, act)
                if act[-1] < len(BATCH_LEVELS) - 1:
                    bigger = act.copy()
                    bigger[-1] += 1
                    assert not fits_alone(env, i, bigger)

    play("medium", "precision_expert", check=check)
    assert len(seen) >= 4


def test_bidder_asks_for_nothing_without_work_and_bids_within_reach():
    rounds_idle = []

    def check(env, obs, infos, actions):
        pol = policies.make("bidder", env)
        low = pol.lowest_winning_bid()
        for a, act in actions.items():
            o = obs[a]
            idle = (o[OBS["job_left"]] == 0) if o[OBS["is_serve"]] == 0 else (max(o[OBS["queue"]], o[OBS["arrivals"]]) == 0)
            if idle:
                rounds_idle.append(a)
                assert act[0] == 0
            assert act[1] >= low

    play("hard", "bidder", check=check)
    play("easy", "bidder", check=check)
    assert rounds_idle  # the rule was exercised


def test_planner_plan_fits_each_pool_and_beats_its_starting_point():
    """The plan never asks a pool for more than it has, and its modelled welfare is at least
    that of precision_expert's joint action, where the search starts."""
    env = fleet_marl.parallel_env(task="medium", compute_all=False)
    planner = policies.make("planner", env)
    expert = policies.make("precision_expert", env)
    obs, infos = env.reset(seed=0)
    planner.reset(0)
    st = env.kernel_static
    for _ in range(15):
        plan = planner.plan()
        for q, cap in enumerate(st.pool_capacity):
            assert plan[st.pool == q, 0].sum() <= cap
        live, state, draws = planner._kernel_state(env.state())
        start = np.zeros_like(plan)
        for a, act in expert.act(obs, infos).items():
            start[env.agent_index[a]] = act
        start[:, 1] = planner.lowest_winning_bid()
        w_plan, w_start = planner._welfare(np.stack([plan, start]), state, draws, live[None])
        if sum(start[st.pool == q, 0].sum() <= cap for q, cap in enumerate(st.pool_capacity)) == len(st.pool_capacity):
            assert w_plan >= w_start - 1e-9
        obs, _, _, _, infos = env.step(planner.act(obs, infos))
        assert np.array_equal(env.last_outcome.alloc, plan[:, 0] * live)  # granted exactly


def test_planner_reads_state_back_into_the_kernel_state():
    env = fleet_marl.parallel_env(task="easy", compute_all=False)
    planner = policies.make("planner", env)
    obs, infos = env.reset(seed=0)
    for _ in range(6):
        obs, _, _, _, infos = env.step(planner.act(obs, infos))
    live, state, draws = planner._kernel_state(env.state())
    true = env.round_state
    st = env.kernel_static
    assert np.array_equal(state.prev_alloc, true.prev_alloc)
    np.testing.assert_allclose(state.budget_left, true.budget_left, rtol=1e-6)
    np.testing.assert_allclose(state.temp_c, true.temp_c, atol=1e-3)
    np.testing.assert_allclose(np.where(st.is_train, 0, state.queue), np.where(st.is_train, 0, true.queue), rtol=1e-4, atol=1e-3)
    assert live.all()
    # the planner reads the env's public inverse, counting the jobs queued behind each trainer's
    seen = env.observed_round(include_queued_jobs=True)
    assert np.array_equal(live, seen.live)
    for f in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left"):
        assert np.array_equal(getattr(state, f), getattr(seen.state, f)), f
    assert np.array_equal(draws.arrivals, np.where(live, seen.arrivals, 0.0))  # forecast: last round's


def test_observed_round_inverts_the_observation_normalization():
    """The round trip state -> state() -> observed_round() gives back the env's RoundState and
    last round's arrivals, up to float32 rounding, on every task and over whole episodes."""
    from fleet_marl.environment.observations import observed_round

    for task in ("tiny", "easy", "medium", "trace"):
        env = fleet_marl.parallel_env(task=task, max_cycles=12)
        st = env.kernel_static
        obs, infos = env.reset(seed=3)
        rng = np.random.default_rng(3)
        while env.agents:
            s = env.state()
            seen = env.observed_round()
            again = observed_round(st, s)  # the public function on the vector alone (as a remote client has it)
            assert all(
                np.array_equal(getattr(seen.state, f), getattr(again.state, f))
                for f in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left")
            )
            true = env.round_state
            assert np.array_equal(seen.live, [a in env.agents for a in env.possible_agents])
            assert np.array_equal(seen.state.prev_alloc, true.prev_alloc)
            np.testing.assert_allclose(seen.state.budget_left, true.budget_left, rtol=1e-6)
            hot = true.temp_c >= st.critical_temp_c  # clipped at critical in the vector
            np.testing.assert_allclose(seen.state.temp_c[~hot], true.temp_c[~hot], atol=1e-3)
            np.testing.assert_allclose(
                np.where(st.is_train, 0, seen.state.queue), np.where(st.is_train, 0, true.queue), rtol=1e-4, atol=1e-3
            )
            job = seen.rows[:, OBS["job_left"]] > 0
            np.testing.assert_allclose(
                np.where(st.is_train & job, seen.state.remaining_tokens, 0),
                np.where(st.is_train & job, true.remaining_tokens, 0),
                rtol=1e-5,
            )
            if env.round > 0:
                sched = env.arrival_schedule[env.round - 1]
                np.testing.assert_allclose(np.where(st.is_train, 0, seen.arrivals), np.where(st.is_train, 0, sched), rtol=1e-4, atol=1e-3)
            # include_queued_jobs adds job_tokens per queued job to the trainers' work, nothing else
            more = env.observed_round(include_queued_jobs=True)
            np.testing.assert_allclose(
                more.state.remaining_tokens - seen.state.remaining_tokens, seen.jobs_waiting * st.job_tokens * st.is_train, rtol=1e-9
            )
            _obs, _, _, _, infos = env.step(
                {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in env.agents}
            )


def test_policy_reset_makes_random_reproducible():
    a = play("easy", "random", seed=5)
    b = play("easy", "random", seed=5)
    c = play("easy", "random", seed=6)
    assert a == b
    assert a["welfare"] != c["welfare"]


def test_make_rejects_unknown_names_and_bad_planner_options():
    env = fleet_marl.parallel_env(task="tiny")
    with pytest.raises(KeyError, match="expected one of random, greedy"):
        policies.make("nope", env)
    with pytest.raises(ValueError, match="passes = 0"):
        policies.make("planner", env, passes=0)
    with pytest.raises(TypeError, match="expected a fleet_marl environment"):
        policies.make("random", object())


def test_policies_import_no_ray():
    import subprocess
    import sys

    code = "import sys, fleet_marl.policies, fleet_marl.evaluation; bad = [m for m in ('ray', 'torch') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


#: budget cuts that make tenants go broke within the episode (0.05 for a task not listed). Whether
#: greedy (always the top bid) goes broke depends on what is left once it cannot afford a GPU
#: at its bid, so the cuts for the bidding tasks were re-chosen with the 0.4 prices and budgets.
BUDGET_SCALE = {"tiny": 0.01, "easy": 0.02, "medium": 0.04, "hard": 0.09, "trace": 0.02}


@pytest.mark.parametrize("task", TASK_NAMES)
@pytest.mark.parametrize("name", ["random", "greedy", "fair_share", "precision_expert", "bidder", "planner"])
def test_policies_stay_legal_when_budgets_shrink_the_gpu_mask(task, name):
    """With budgets cut, the GPU mask shrinks as money runs out and tenants go broke: every
    choice stays within the mask (illegal_action='raise'; play() is not used here, but the
    env raises on any masked choice)."""
    d = task_dict(task)
    for t in d["tenants"]:
        t["budget"] *= BUDGET_SCALE.get(task, 0.05)
    # money out of the utility (cost_weight 0), so that even the planner spends until it is broke
    env = fleet_marl.parallel_env(task=task, tenants=d["tenants"], reward={"cost_weight": 0.0}, compute_all=False, illegal_action="raise")
    pol = policies.make(name, env)
    obs, infos = env.reset(seed=0)
    pol.reset(0)
    shrunk = broke = 0
    while env.agents:
        for a in env.agents:
            shrunk += int(env.action_mask(a)[0].sum() < len(env.action_mask(a)[0]))
        obs, _, terms, _, infos = env.step(pol.act(obs, infos))
        broke += sum(terms.values())
    assert shrunk > 0 and broke > 0


def test_a_model_that_fits_nowhere_gets_no_gpus():
    """precision_expert and bidder ask for nothing rather than pay for GPUs that OOM."""
    tenants = [
        {
            "kind": "train",
            "model": "llama-3.1-70b",
            "gpu_type": "l4",
            "budget": 100.0,
            "max_gpus": 2,
            "workload": {"seq_len": 2048, "job_tokens": 1e7, "rate": 6.0},
        },
        {
            "kind": "train",
            "model": "qwen2.5-0.5b",
            "gpu_type": "l4",
            "budget": 100.0,
            "max_gpus": 8,
            "workload": {"seq_len": 2048, "job_tokens": 1e8, "rate": 6.0},
        },
    ]
    env = fleet_marl.parallel_env(task="tiny", tenants=tenants, cluster={"gpu_types": ["l4"]}, compute_all=False)
    for name in ("precision_expert", "bidder", "planner"):
        pol = policies.make(name, env)
        obs, infos = env.reset(seed=0)
        pol.reset(0)
        assert pol.fits.fewest_gpus(0, pol.precision_map(0, env.action_mask("tenant_0"), EXPERT_MAP)) is None
        act = pol.act(obs, infos)
        assert act["tenant_0"][0] == 0 and act["tenant_1"][0] > 0, name


def test_bidder_bids_by_backlog_and_budget():
    """Same tenant, same round: a longer backlog or more budget to spare raises the bid."""
    env = fleet_marl.parallel_env(task="medium", compute_all=False)
    obs, infos = env.reset(seed=0)
    pol = policies.make("bidder", env)
    a = "tenant_1"  # a server
    base = obs[a].copy()
    base[OBS["round"]] = 0.5

    def bid(queue, budget):
        o = base.copy()
        o[OBS["queue"]], o[OBS["arrivals"]], o[OBS["budget_left"]] = queue, 0.0, budget
        return int(pol.act_one(o, a, infos[a])[1])

    assert bid(0.9, 0.5) > bid(0.3, 0.5)  # backlog
    assert bid(0.9, 0.5) > bid(0.9, 0.1)  # budget pace
    assert bid(0.0, 0.5) == pol.lowest_winning_bid() and pol.act_one(base * 0, a, infos[a])[0] == 0


def test_split_reads_the_mask_where_the_obs_mode_puts_it():
    from fleet_marl.policies.base import split

    env = fleet_marl.parallel_env(task="tiny", obs_mode="dict")
    obs, _infos = env.reset(seed=0)
    mask = tuple(np.zeros_like(m) for m in obs["tenant_0"]["action_mask"])
    vec, got = split({"observation": obs["tenant_0"]["observation"], "action_mask": mask}, "tenant_0", {"action_mask": None}, env)
    assert got is mask and vec.shape == (34,)
    flat_mask = env.action_mask("tenant_0")
    assert split(obs["tenant_0"]["observation"], "tenant_0", {"action_mask": flat_mask}, env)[1] is flat_mask
    assert split(obs["tenant_0"]["observation"], "tenant_0", None, env)[1][0].tolist() == flat_mask[0].tolist()


@pytest.mark.parametrize("name", ["random", "bidder", "planner"])
def test_aec_loop_in_dict_mode_with_early_terminations(name):
    """AEC with obs_mode='dict' on a budget-starved easy (tenants go broke before the horizon)."""
    d = task_dict("easy")
    for t in d["tenants"]:
        t["budget"] *= 0.02
    aec = fleet_marl.env(
        task="easy", tenants=d["tenants"], reward={"cost_weight": 0.0}, compute_all=False, illegal_action="raise", obs_mode="dict"
    )
    pol = policies.make(name, aec)
    aec.reset(seed=1)
    pol.reset(1)
    finished_at = {}
    for agent in aec.agent_iter():
        obs, _r, term, trunc, info = aec.last()
        if term or trunc:
            finished_at.setdefault(agent, policies.fleet_env(aec).round)
        aec.step(None if term or trunc else pol.act_one(obs, agent, info))
    assert set(finished_at) == set(aec.possible_agents)
    assert min(finished_at.values()) < aec.unwrapped.max_cycles  # broke before the horizon

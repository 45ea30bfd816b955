"""The environment's semantics: credit-assignment invariants, the tiny task's optimum, bad
input, termination and truncation, masks, starvation and degenerate strategies."""

from __future__ import annotations

import itertools
import pickle
from math import factorial

import gymnasium
import numpy as np
import pytest

import fleet_marl
from fleet_marl import catalog, fairness
from fleet_marl.config import MOVED_TO_FAIRNESS, ConfigError
from fleet_marl.environment import ACTION_FIELDS, BATCH_LEVELS, ActionError, core
from fleet_marl.environment.spaces import decode_actions
from fleet_marl.fairness import jain
from fleet_marl.kernel import Actions, Draws, RoundState, evaluate
from fleet_marl.tasks import task_dict
from tests.oracle import fair_share

BF, F8, I8, I4, F32 = (catalog.PRECISION_CODE[p] for p in ("bf16", "fp8", "int8", "int4", "fp32"))


def act(gpus, bid=2, prec=(BF,) * 5, batch=3):
    return np.array([gpus, bid, *prec, batch], dtype=np.int64)


def masked_random(env, infos, rng):
    return {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]]) for a in env.agents}


def degenerate(info):
    """The degenerate strategies an info flags, by name (``degenerate`` is True iff any)."""
    names = [k for k in ("lowest_precision", "hoarding") if info[k]]
    assert info["degenerate"] is bool(names)
    return names


def pre_step(env):
    """What the next step will use: state, draws (from a copy of the env's generator), live."""
    st = env.kernel_static
    live = np.array([a in env.agents for a in env.possible_agents])
    requests = np.where(st.is_train, 0.0, env.arrival_schedule[env.round])
    draws = Draws(
        arrivals=np.where(live, requests, 0.0), tiebreak=env._s.tiebreak[0, env.round].copy()
    )  # white box: the round's tie-breaks, drawn at reset, have no public view
    state = RoundState(
        **{k: np.array(getattr(env.round_state, k)) for k in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left")}
    )
    return state, draws, live


def welfare_of(env, acts_idx, state, draws, present):
    out = evaluate(env.kernel_static, decode_actions(acts_idx, env.bid_levels), state, draws, present)
    return float(out.welfare)


def index_matrix(env, actions):
    idx = np.zeros((env.kernel_static.T, len(ACTION_FIELDS)), np.int64)
    for a, x in actions.items():
        idx[env.agent_index[a]] = x
    return idx


def recorded_steps(env, seed, n):
    """Step ``env`` n times with random masked actions; yield what each step was given
    (actions, index matrix, state, draws, live) and what it returned (rewards, infos)."""
    obs, infos = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        actions = masked_random(env, infos, rng)
        state, draws, live = pre_step(env)
        idx = index_matrix(env, actions)
        _obs, rew, _term, _trunc, infos = env.step(actions)
        yield actions, idx, state, draws, live, rew, infos


# --- credit assignment ---------------------------------------------------------------------------


def test_difference_rewards_match_independent_removal_counterfactuals():
    env = fleet_marl.parallel_env(task="medium", compute_all=True)
    for actions, idx, state, draws, live, rew, infos in recorded_steps(env, 2, 4):
        G = welfare_of(env, idx, state, draws, live)
        for a in actions:
            i = env.agent_index[a]
            without = live.copy()
            without[i] = False
            assert infos[a]["welfare"] == pytest.approx(G, abs=1e-9)
            assert infos[a]["reward_difference"] == pytest.approx(G - welfare_of(env, idx, state, draws, without), abs=1e-9)
            # difference_default: i's action replaced by the documented default
            sub = idx.copy()
            sub[i] = env.default_action_index[i]
            assert infos[a]["reward_difference_default"] == pytest.approx(G - welfare_of(env, sub, state, draws, live), abs=1e-9)
            assert infos[a]["reward_local"] == pytest.approx(infos[a]["utility"])
            w = env.config.reward.mixed_weight
            assert infos[a]["reward_mixed"] == pytest.approx(w * infos[a]["utility"] + (1 - w) * G)
            # the chosen scheme (difference) is the reward unless the strategy was degenerate
            if not infos[a]["degenerate"]:
                assert rew[a] == infos[a]["reward_difference"]


def test_shapley_matches_brute_force_over_all_permutations():
    """Exact Shapley (N=4) equals the average marginal contribution over all 4! orders, each
    coalition's welfare computed by its own kernel call; and the values sum to G(all) - G(none)."""
    env = fleet_marl.parallel_env(task="easy", compute_all=True)
    for _actions, idx, state, draws, _live, _rew, infos in recorded_steps(env, 4, 3):
        T = env.kernel_static.T
        v = {}
        for S in itertools.product([False, True], repeat=T):
            v[S] = welfare_of(env, idx, state, draws, np.array(S)) if any(S) else 0.0
        phi = np.zeros(T)
        for order in itertools.permutations(range(T)):
            S = [False] * T
            for i in order:
                before = v[tuple(S)]
                S[i] = True
                phi[i] += v[tuple(S)] - before
        phi /= factorial(T)
        got = np.array([infos[a]["reward_shapley"] for a in env.possible_agents])
        np.testing.assert_allclose(got, phi, atol=1e-9)
        assert got.sum() == pytest.approx(v[(True,) * T] - v[(False,) * T], abs=1e-9)


def test_sampled_shapley_is_efficient_above_eight_tenants():
    env = fleet_marl.parallel_env(task="hard", shapley_samples=16, compute_all=True)
    obs, infos = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        _obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
        vals = [infos[a]["reward_shapley"] for a in infos]
        assert sum(vals) == pytest.approx(next(iter(infos.values()))["welfare"], abs=1e-9)
        assert len(set(np.round(vals, 12))) > 1  # not a uniform split


def test_rows_per_round_bounds_every_scheme_s_rows_exactly_where_nothing_is_shared():
    """credit.rows_per_round (what a server charges a step, fleet_marl.openenv.cost) is what the
    engine evaluates with every scheme and exact Shapley: the grand coalition, a removal and a
    default row per tenant, and every coalition."""
    from fleet_marl import credit

    env = fleet_marl.parallel_env(task="easy", compute_all=True)
    st = env.kernel_static
    engine = credit.CreditEngine(st, env.config.reward, tuple(credit.SCHEMES), env.default_actions)
    for _actions, idx, state, draws, live, _rew, _infos in recorded_steps(env, 0, 2):
        acts = decode_actions(idx, env.bid_levels)
        batch = lambda x: np.asarray(x)[None]  # noqa: E731 -- one cluster
        got = engine.compute(
            Actions(*(batch(getattr(acts, f)) for f in ("gpus", "bid", "precision", "batch"))),
            RoundState(*(batch(getattr(state, f)) for f in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left"))),
            Draws(batch(draws.arrivals), batch(draws.tiebreak)),
            live[None],
            [np.random.default_rng(0)],
        )
        n = int(live.sum())
        assert got.rows[0] <= credit.rows_per_round(n, tuple(credit.SCHEMES), env.config.reward.shapley_samples)
        assert credit.rows_per_round(n, tuple(credit.SCHEMES), 64) == 1 + 2 * n + 2**n


def test_sampled_shapley_evaluates_each_distinct_coalition_once():
    """Sampled Shapley (N = 16, 64 permutations) equals the average marginal contribution along
    the same permutations, each prefix's welfare from its own kernel call, while the credit
    engine evaluates each distinct coalition once: fewer rows than 1 + 64 x 15."""
    from fleet_marl import credit

    env = fleet_marl.parallel_env(task="hard", reward_scheme="shapley", compute_all=False)
    st, M = env.kernel_static, env.config.reward.shapley_samples
    engine = credit.CreditEngine(st, env.config.reward, ("shapley",), env.default_actions)
    for _actions, idx, state, draws, live, _rew, _infos in recorded_steps(env, 3, 2):
        n = int(live.sum())
        assert n > credit.EXACT_SHAPLEY_MAX
        acts = decode_actions(idx, env.bid_levels)
        batch = lambda x: np.asarray(x)[None]  # noqa: E731 -- one cluster
        got = engine.compute(
            Actions(*(batch(getattr(acts, f)) for f in ("gpus", "bid", "precision", "batch"))),
            RoundState(*(batch(getattr(state, f)) for f in ("prev_alloc", "temp_c", "queue", "remaining_tokens", "budget_left"))),
            Draws(batch(draws.arrivals), batch(draws.tiebreak)),
            live[None],
            [np.random.default_rng(11)],
        )
        assert got.rows[0] <= credit.rows_per_round(n, ("shapley",), M)  # the server's cost rule bounds what the engine evaluates
        perms = np.random.default_rng(11).permuted(np.tile(np.arange(n), (M, 1)), axis=1)
        players = np.flatnonzero(live)
        G = welfare_of(env, idx, state, draws, live)
        phi, memo = np.zeros(st.T), {}
        for perm in perms:
            S, before = np.zeros(st.T, bool), 0.0
            for j in perm:
                S[players[j]] = True
                key = S.tobytes()
                if key not in memo:
                    memo[key] = welfare_of(env, idx, state, draws, S) if S.sum() < n else G
                phi[players[j]] += memo[key] - before
                before = memo[key]
        np.testing.assert_allclose(got.rewards["shapley"][0], phi / M, rtol=1e-12, atol=1e-12)
        proper = len(memo) - 1  # the distinct proper prefixes, the grand coalition aside
        assert got.rows[0] == 1 + proper < 1 + M * (n - 1)


def test_tenant_requesting_no_gpus_has_difference_equal_to_its_utility():
    env = fleet_marl.parallel_env(task="easy")
    obs, infos = env.reset(seed=1)
    for _ in range(3):
        actions = {a: act(0 if a == "tenant_1" else 6) for a in env.agents}
        _obs, _rew, _term, _trunc, infos = env.step(actions)
        zero = infos["tenant_1"]
        assert zero["alloc"] == 0
        assert zero["reward_difference"] == pytest.approx(zero["utility"], abs=1e-12)
        # the others do impose externalities on each other (16 GPUs, 18 asked for)
        assert any(abs(infos[a]["reward_difference"] - infos[a]["utility"]) > 1e-6 for a in ("tenant_0", "tenant_2", "tenant_3"))


def test_tiny_hand_computed_optimum_scores_highest():
    """tiny: one 8-GPU H100 node, two trainers of qwen2.5-0.5b (s = 2048) with priority 2 and 1,
    max-min arbiter (pays list price, so bids do not matter), veto safety.

    By hand (docs/model.md sections 4-5): a GPU yields the same tokens whoever holds it (same
    model, same node), counted at priority 2 for tenant_0 and 1 for tenant_1, and costs the same;
    so every GPU goes to tenant_0 and tenant_1 asks for none.

    The map: FP8 halves a GEMM's time at the peak but casts its input and output gradient (6 B a
    value, per pass) through HBM. Per token and forward pass, on an H100 (989.4 TFLOPS BF16, GEMM
    efficiency 0.78, 3.35 TB/s at 0.92): attention's GEMMs (2 x 44,067,840 FLOPs) save
    88.1e6 / 1978.9e12 / 0.78 = 57.1 ns and cast 6 x (86,016 + 49,152) / 3 = 270,336 B = 87.7 ns, a
    loss (Qwen2.5-0.5B's hidden 896 makes small GEMMs); the MLP's (2 x 313,786,368) save 406.6 ns and
    cast 6 x (159,744 + 254,976) / 3 = 829,440 B = 269.1 ns, a gain; FP8 on the head, embedding or
    norm fails the numerics check. So FP8 on the MLP only.

    The batch: the largest level that fits. A step's peak holds the sharded weights (BF16: an FP8
    recipe keeps them), FP32 master and Adam moments, (2 + 4 + 8) x 494,032,768 / 8 = 0.865 GB, plus
    the larger of the gradients (0.12 GB) and the activations, b x 2048 tokens x (24 blocks x
    50,176 B + 4 x 896 + 12 x 151,936 B of logits and eager loss) = b x 6.21 GB; with 0.9 x the
    85.0 GB CUDA reports, b <= 12.2: level 8.
    """
    env = fleet_marl.parallel_env(task="tiny")
    env.reset(seed=0)
    st = env.kernel_static
    m = catalog.model("qwen2.5-0.5b")
    pg = m.params_by_group
    assert (m.hidden, m.layers, m.vocab, m.total_params) == (896, 24, 151936, 494_032_768)
    peak, eff, bw = 989.4e12, 0.78, 3.35e12 * 0.92
    save_att, cast_att = 2 * pg["attention"] / (2 * peak) / eff, 6 * (24 * (3 * 896 + 896) + 24 * (896 + 2 * 128 + 896)) / 3 / bw
    save_mlp, cast_mlp = 2 * pg["mlp"] / (2 * peak) / eff, 6 * (24 * (2 * 896 + 4864) + 24 * (2 * 4864 + 896)) / 3 / bw
    assert save_att < cast_att and save_mlp > cast_mlp
    fixed = (2 + 4 + 8) * m.total_params / 8
    per_seq = 2048 * (24 * 50_176 + 4 * 896 + 12 * 151936)
    b_fit = int((0.9 * 85_045_477_376 - fixed) // per_seq)
    assert b_fit == 12
    best_batch = int(np.searchsorted(BATCH_LEVELS, b_fit, side="right") - 1)
    assert BATCH_LEVELS[best_batch] == 8

    maps = {
        "bf16": (BF,) * 5,
        "fp8 att+mlp": (BF, F8, F8, BF, BF),
        "fp8 att": (BF, F8, BF, BF, BF),
        "fp32": (F32,) * 5,
        "fp8 mlp": (BF, BF, F8, BF, BF),
    }
    batches = [best_batch - 2, best_batch - 1, best_batch, best_batch + 1]
    rows = list(itertools.product(range(9), range(9), list(maps), list(maps), batches, batches))
    idx = np.zeros((len(rows), 2, len(ACTION_FIELDS)), np.int64)
    for r, (g0, g1, m0, m1, b0, b1) in enumerate(rows):
        idx[r, 0] = act(g0, 2, maps[m0], b0)
        idx[r, 1] = act(g1, 2, maps[m1], b1)
    acts = Actions(gpus=idx[..., 0], bid=env.bid_levels[idx[..., 1]], precision=idx[..., 2:7], batch=BATCH_LEVELS[idx[..., 7]])
    out = evaluate(st, acts, RoundState.initial(st), Draws.expected(st))
    G = out.welfare
    top = np.flatnonzero(G.max() - 1e-12 <= G)
    for r in top:
        g0, g1, m0, m1, b0, b1 = rows[r]
        assert (g0, g1, m0, b0) == (8, 0, "fp8 mlp", best_batch), rows[r]
    assert G.max() > 0


# --- bad input ---------------------------------------------------------------------------------------


def snapshot(env):
    return pickle.dumps(
        (
            env.state(),
            env._rng.bit_generator.state,
            env.round,
            list(env.agents),
            env.fairness,
            env._s,  # white box: the core's whole state (job queues, returns, the detector's arrays)
        )
    )


BAD = [
    ("wrong shape", lambda a: a[:5], "action.shape"),
    ("string", lambda a: "eight GPUs please", "action"),
    ("bool dtype", lambda a: a.astype(bool), "action"),
    ("fractional", lambda a: a.astype(float) + 0.5, "gpus"),
    ("NaN", lambda a: np.where(np.arange(8) == 1, np.nan, a.astype(float)), "bid_level"),
    ("out of range", lambda a: np.where(np.arange(8) == 7, 99, a), "batch_level"),
    ("negative", lambda a: np.where(np.arange(8) == 3, -1, a), "precision.attention"),
    ("None", lambda a: None, "action"),
]


@pytest.mark.parametrize("name,corrupt,field", BAD, ids=[b[0] for b in BAD])
def test_bad_action_is_a_clear_error_and_changes_nothing(name, corrupt, field):
    env = fleet_marl.parallel_env(task="easy")
    ref = fleet_marl.parallel_env(task="easy")
    env.reset(seed=9)
    ref.reset(seed=9)
    good = {a: act(2) for a in env.agents}
    env.step(good)
    ref.step(good)
    before = snapshot(env)
    bad = dict(good)
    bad["tenant_2"] = corrupt(act(2))
    with pytest.raises(ActionError) as e:
        env.step(bad)
    assert "tenant_2" in str(e.value) and field in str(e.value)
    assert e.value.agent == "tenant_2"
    assert snapshot(env) == before
    # and the episode goes on exactly as if the bad step never happened
    assert pickle.dumps(env.step(good)) == pickle.dumps(ref.step(good))


def test_unknown_missing_and_finished_agents():
    env = fleet_marl.parallel_env(task="tiny", max_cycles=5)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step({"tenant_0": act(1), "tenant_1": act(1)})
    env.reset(seed=0)
    before = snapshot(env)
    with pytest.raises(ActionError, match="tenant_7"):
        env.step({"tenant_0": act(1), "tenant_1": act(1), "tenant_7": act(1)})
    with pytest.raises(ActionError, match="missing tenant_1"):
        env.step({"tenant_0": act(1)})
    with pytest.raises(ActionError, match="dict"):
        env.step([act(1), act(1)])
    assert snapshot(env) == before
    for _ in range(5):
        env.step({a: act(1) for a in env.agents})
    assert env.agents == []


def test_step_with_no_live_agent_returns_empty_dicts_and_warns_once_per_episode():
    """PettingZoo's envs answer five empty dicts once every agent finished (SuperSuit's
    black_death and RLlib's ParallelPettingZooEnv step once more to see the end)."""
    env = fleet_marl.parallel_env(task="tiny", max_cycles=2)
    for episode in range(2):
        env.reset(seed=episode)
        while env.agents:
            env.step({a: act(1) for a in env.agents})
        before = snapshot(env)
        with pytest.warns(UserWarning, match="no live agent") as caught:
            assert env.step({}) == ({}, {}, {}, {}, {})
            assert env.step({"tenant_0": act(1), "tenant_1": act(1)}) == ({}, {}, {}, {}, {})  # actions of agents that left: ignored
        assert len([w for w in caught if "no live agent" in str(w.message)]) == 1  # once per episode
        assert snapshot(env) == before and env.steps_taken == 2 * (episode + 1)
        with pytest.raises(ActionError, match="tenant_7"):  # a name that never was an agent is still an error
            env.step({"tenant_7": act(1)})


def test_actions_of_agents_that_left_are_ignored():
    """TorchRL's PettingZooWrapper(use_mask=True) sends an action for every agent, every step:
    the actions of agents that left this episode are dropped unchecked; unknown names still
    raise, and check_action() of an agent that left (nothing to check) is an ActionError."""
    cfg = task_dict("tiny")
    cfg["tenants"][1]["budget"] = 4.35 * catalog.gpu("h100-sxm").price_per_hour / 60  # four GPU-rounds at list price
    env = fleet_marl.parallel_env(config=cfg)
    ref = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    ref.reset(seed=0)
    _obs, _rew, term, _trunc, _infos = env.step({"tenant_0": act(2), "tenant_1": act(4)})
    ref.step({"tenant_0": act(2), "tenant_1": act(4)})
    assert term["tenant_1"] and "tenant_1" not in env.agents
    out = env.step({"tenant_0": act(2), "tenant_1": act(4)})
    assert out[0].keys() == {"tenant_0"}
    out2 = env.step({"tenant_0": act(2), "tenant_1": "garbage"})  # not even checked
    assert pickle.dumps(out) == pickle.dumps(ref.step({"tenant_0": act(2)}))
    assert pickle.dumps(out2) == pickle.dumps(ref.step({"tenant_0": act(2)}))
    with pytest.raises(ActionError, match="tenant_1 has finished"):
        env.check_action("tenant_1", act(4))
    with pytest.raises(ActionError, match="tenant_7"):
        env.step({"tenant_0": act(2), "tenant_1": act(4), "tenant_7": act(1)})
    with pytest.raises(ActionError, match="missing tenant_0"):
        env.step({"tenant_1": act(4)})


# --- termination and truncation ----------------------------------------------------------------------


def test_budget_spent_terminates_and_horizon_truncates():
    cfg = task_dict("tiny")
    cfg["tenants"][1]["budget"] = 4.35 * catalog.gpu("h100-sxm").price_per_hour / 60  # four GPU-rounds at list price
    cfg["max_cycles"] = 4
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    obs, rew, term, trunc, infos = env.step({"tenant_0": act(2), "tenant_1": act(4)})
    assert term == {"tenant_0": False, "tenant_1": True} and not any(trunc.values())
    assert env.episode_reports["tenant_1"]["rounds"] == 1 and "episode" not in infos["tenant_1"]
    assert env.agents == ["tenant_0"]
    for _k in range(3):
        _obs, _rew, term, trunc, infos = env.step({"tenant_0": act(2)})
    assert trunc == {"tenant_0": True} and term == {"tenant_0": False}
    assert env.agents == [] and set(env.episode_reports) == {"tenant_0", "tenant_1"}


def test_work_done_terminates_a_trainer():
    cfg = task_dict("tiny")
    for t in cfg["tenants"]:
        t["workload"].update(rate=0.0, job_tokens=1e6)  # one small job, nothing after it
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    _obs, _rew, term, _trunc, _infos = env.step({"tenant_0": act(4), "tenant_1": act(0)})
    assert term["tenant_0"] is True  # its job is done and none will come
    assert term["tenant_1"] is False  # asked for nothing, its job is still there
    ep = env.episode_reports["tenant_0"]
    assert ep["jobs_done"] == 1 and ep["rho"] > 0


def test_jobs_queue_and_start_in_order():
    cfg = task_dict("tiny")
    cfg["tenants"][0]["workload"].update(rate=60.0)  # a job a minute: they pile up
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    queued, started = [], []
    for _ in range(4):
        env.step({a: act(0) for a in env.agents})
        queued.append(int(env._s.backlog_n[0, 0]))  # white box: the core's job queue (counts by arrival round)
        started.append(int(env._s.job_born[0, 0]))
    assert queued == sorted(queued) and queued[-1] >= 2
    assert env._s.pending[0, 0].sum() == queued[-1]
    assert started == sorted(started)  # nothing runs, so the first job keeps running: FIFO, never a newer one first


# --- action masks ------------------------------------------------------------------------------------


def test_masks_forbid_missing_precisions_weight_only_training_and_unaffordable_gpus():
    env = fleet_marl.parallel_env(task="medium")
    obs, infos = env.reset(seed=0)
    st = env.kernel_static
    for a in env.agents:
        i = env.agent_index[a]
        mask = infos[a]["action_mask"]
        assert isinstance(mask, tuple) and len(mask) == len(ACTION_FIELDS)
        assert all(m.dtype == np.int8 and m.shape == (n,) for m, n in zip(mask, env.nvec[i], strict=False))
        prec = mask[2]
        gpu = env.config.tenants[i].gpu_type
        assert prec[F8] == (1 if gpu == "h100-sxm" else 0)  # A100 has no FP8
        if st.is_train[i]:
            assert prec[I8] == 0 and prec[I4] == 0
        else:
            assert prec[I8] == 1 and prec[I4] == 1
    cfg = task_dict("tiny")
    cfg["tenants"][0]["budget"] = 3.5 * catalog.gpu("h100-sxm").price_per_hour / 60  # three GPU-rounds (and a half) at list price
    env = fleet_marl.parallel_env(config=cfg)
    _obs, infos = env.reset(seed=0)
    assert infos["tenant_0"]["action_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert env.action_mask("tenant_0")[0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]


def test_dict_observation_carries_the_mask_and_the_infos_do_not():
    """PettingZoo's convention (and what TorchRL's PettingZooWrapper needs): with obs_mode="dict"
    the mask is in the observation only; the infos keep every other key, in order."""
    env = fleet_marl.parallel_env(task="easy", obs_mode="dict")
    flat_env = fleet_marl.parallel_env(task="easy")
    obs, infos = env.reset(seed=0)
    _, flat_infos = flat_env.reset(seed=0)
    for _ in range(2):
        for a in env.agents:
            assert set(obs[a]) == {"observation", "action_mask"}
            for m1, m2 in zip(obs[a]["action_mask"], env.action_mask(a), strict=True):
                assert np.array_equal(m1, m2)
            assert list(infos[a]) == [k for k in flat_infos[a] if k != "action_mask"]
            sample = env.action_space(a).sample(mask=obs[a]["action_mask"])
            assert env.action_space(a).contains(sample)
        acts = {a: np.array([4, 2, 1, 1, 1, 1, 1, 3]) for a in env.agents}
        obs, _, _, _, infos = env.step(acts)
        _, _, _, _, flat_infos = flat_env.step(acts)


def test_the_dims_mask_reads_as_the_flat_vector_through_dlpack():
    """A "dims" mask is a tuple of 8 arrays that torch and numpy read, through DLPack, as the
    "flat" layout's vector: how TorchRL's PettingZooWrapper makes it a tensor."""
    import torch

    dims = fleet_marl.parallel_env(task="easy")
    flat = fleet_marl.parallel_env(task="easy", mask_layout="flat")
    _, infos = dims.reset(seed=0)
    _, flat_infos = flat.reset(seed=0)
    m = infos["tenant_0"]["action_mask"]
    assert isinstance(m, tuple) and len(m) == 8 and [len(d) for d in m] == dims.nvec[0].tolist()
    np.testing.assert_array_equal(torch.as_tensor(m).numpy(), flat_infos["tenant_0"]["action_mask"])
    np.testing.assert_array_equal(np.from_dlpack(m), flat_infos["tenant_0"]["action_mask"])
    assert torch.tensor(m, dtype=torch.bool).shape == (int(dims.nvec[0].sum()),)


@pytest.mark.parametrize("obs_mode", ["flat", "dict"])
def test_flat_mask_layout_is_the_dims_tuple_concatenated(obs_mode):
    """mask_layout="flat": one int8 vector of length sum(nvec) per agent, the 8 per-dimension
    masks one after another, in infos (obs_mode="flat") or in the dict observation (its space to
    match), from action_mask(); the action space samples from it; the episode is the same."""
    cfg = task_dict("tiny")
    cfg["tenants"][0]["budget"] = 0.35  # three GPU-rounds: the GPU mask is cut
    dims = fleet_marl.parallel_env(config=cfg, obs_mode=obs_mode)
    flat = fleet_marl.parallel_env(config=cfg, obs_mode=obs_mode, mask_layout="flat")
    assert dims.mask_layout == "dims" and flat.mask_layout == "flat"
    (do, di), (fo, fi) = dims.reset(seed=0), flat.reset(seed=0)
    rng = np.random.default_rng(0)
    while dims.agents:
        for a in dims.agents:
            i = dims.agent_index[a]
            m, dm = (fi[a]["action_mask"], di[a]["action_mask"]) if obs_mode == "flat" else (fo[a]["action_mask"], do[a]["action_mask"])
            assert isinstance(m, np.ndarray) and m.dtype == np.int8 and m.shape == (int(dims.nvec[i].sum()),)
            np.testing.assert_array_equal(m, np.concatenate(dm))
            np.testing.assert_array_equal(flat.action_mask(a), m)
            if obs_mode == "dict":
                assert "action_mask" not in fi[a] and "action_mask" not in di[a]  # in the observation only
                assert flat.observation_space(a).contains(fo[a]) and dims.observation_space(a).contains(do[a])
                assert isinstance(flat.observation_space(a)["action_mask"], gymnasium.spaces.MultiBinary)
            sample = flat.action_space(a).sample(mask=m)
            assert all(d[k] for d, k in zip(dm, sample, strict=False))
        acts = masked_random(dims, di if obs_mode == "flat" else do, rng)
        do, dr, dt, dtr, di = dims.step(acts)
        fo, fr, ft, ftr, fi = flat.step(acts)
        assert (dr, dt, dtr) == (fr, ft, ftr)
        assert {a: {k: v for k, v in i.items() if k not in ("action_mask", "illegal_fields")} for a, i in di.items()} == {
            a: {k: v for k, v in i.items() if k not in ("action_mask", "illegal_fields")} for a, i in fi.items()
        }
    assert flat.agents == []
    assert fleet_marl.env(task="tiny", mask_layout="flat").unwrapped.mask_layout == "flat"  # the AEC env passes it on


@pytest.mark.parametrize("bad", ["tuple", "Flat", None, 1])
def test_bad_mask_layout_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"mask_layout = .*expected 'dims'.*or 'flat'"):
        fleet_marl.parallel_env(task="tiny", mask_layout=bad)
    with pytest.raises(ValueError, match=r"mask_layout"):
        fleet_marl.env(task="tiny", mask_layout=bad)


@pytest.mark.parametrize("layout", ["dims", "flat"])
def test_reset_and_step_infos_have_the_same_keys_and_fixed_shapes(layout):
    """Every live agent's infos have the same keys after reset() and after every step, in
    the same order, and every value but the "dims" mask is a number or a fixed-shape array
    (what TorchRL's PettingZooWrapper builds its specs from, at reset)."""
    for compute_all in (True, False):
        env = fleet_marl.parallel_env(task="easy", mask_layout=layout, compute_all=compute_all, max_cycles=12)
        obs, infos = env.reset(seed=4)
        keys = list(infos["tenant_0"])
        schemes = env.reward_schemes
        assert keys[: len(schemes)] == [f"reward_{s}" for s in schemes] and "episode" not in keys
        shapes = {k: np.shape(v) for k, v in infos["tenant_0"].items() if not (k == "action_mask" and layout == "dims")}
        assert shapes["illegal_fields"] == (len(ACTION_FIELDS),) and all(
            shapes[k] == () for k in keys if k not in ("illegal_fields", "action_mask")
        )
        rng = np.random.default_rng(4)
        while env.agents:
            for a, info in infos.items():
                assert list(info) == keys, a
                for k, v in info.items():
                    if k == "action_mask" and layout == "dims":
                        assert isinstance(v, tuple) and len(v) == len(ACTION_FIELDS)
                        continue
                    assert isinstance(v, (bool, int, float, np.ndarray)) and np.shape(v) == shapes[k], (k, v)
            _obs, _rew, _term, _trunc, infos = env.step(
                masked_random(env, infos, rng)
                if layout == "dims"
                else {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
            )
        assert set(env.episode_reports) == set(env.possible_agents)


def test_illegal_action_is_vetoed_or_raises():
    env = fleet_marl.parallel_env(task="tiny")
    env.reset(seed=0)
    bad = act(4, prec=(BF, BF, I8, BF, BF))  # int8 is weight-only: not for a trainer
    _obs, _rew, _term, _trunc, infos = env.step({"tenant_0": bad, "tenant_1": act(4)})
    assert infos["tenant_0"]["illegal"] is True
    assert infos["tenant_0"]["illegal_fields"].tolist() == [f == "precision.mlp" for f in ACTION_FIELDS]
    assert infos["tenant_0"]["vetoed"] is True and infos["tenant_0"]["alloc"] == 4
    assert infos["tenant_1"]["illegal"] is False and not infos["tenant_1"]["illegal_fields"].any() and infos["tenant_1"]["vetoed"] is False
    strict = fleet_marl.parallel_env(task="tiny", illegal_action="raise")
    strict.reset(seed=0)
    with pytest.raises(ActionError, match=r"tenant_0: action\[4\] \(precision.mlp\)"):
        strict.step({"tenant_0": bad, "tenant_1": act(4)})


# --- fairness -------------------------------------------------------------------------------------------


def starvation_env(**knobs):
    """The tiny task under strict priority; ``knobs`` of FairnessSpec go to ``fairness``, the rest to ``reward``."""
    cfg = task_dict("tiny")
    cfg["arbiter"] = {"mechanism": "priority"}
    fair = {k: knobs.pop(k) for k in MOVED_TO_FAIRNESS if k in knobs}
    cfg["fairness"] = {"starvation_rounds": 3, "starvation_fraction": 0.5, **fair}
    cfg["reward"] = knobs
    return fleet_marl.parallel_env(config=cfg)


def test_starvation_streak_flag_and_penalty():
    env = starvation_env(starvation_penalty=0.5)
    env.reset(seed=0)
    seen = []
    for _k in range(4):
        _obs, _rew, _term, _trunc, infos = env.step({"tenant_0": act(8), "tenant_1": act(4)})
        low = infos["tenant_1"]
        seen.append((low["alloc"], low["starvation_streak"], low["starved"]))
        pen = 0.5 if low["starved"] else 0.0
        assert low["reward_global"] == pytest.approx(low["welfare"] - pen)
    assert seen == [(0, 1, False), (0, 2, False), (0, 3, True), (0, 4, True)]
    assert infos["tenant_0"]["starved"] is False
    assert infos["tenant_1"]["fair_share"] == 4.0


def test_hoarding_while_another_starves_is_degenerate():
    env = starvation_env(degenerate_floor=0.01, hoard_share=0.5)
    env.reset(seed=0)
    flags = []
    for _k in range(3):
        _obs, rew, _term, _trunc, infos = env.step({"tenant_0": act(8), "tenant_1": act(4)})
        i0 = infos["tenant_0"]
        flags.append((i0["degenerate"], i0["lowest_precision"], i0["hoarding"]))
    assert flags == [(False, False, False), (False, False, False), (True, False, True)]
    assert rew["tenant_0"] == 0.01
    assert infos["tenant_0"]["reward_difference"] != 0.01  # the raw value is still reported


def test_lowest_precision_everywhere_is_degenerate():
    env = fleet_marl.parallel_env(task="easy")
    env.reset(seed=0)
    acts = {a: act(2) for a in env.agents}
    acts["tenant_0"] = act(2, prec=(F8,) * 5)  # a trainer on H100: FP8 is its lowest
    acts["tenant_1"] = act(2, prec=(I4,) * 5)  # a server on H100: INT4 is its lowest
    acts["tenant_2"] = act(0, prec=(F8,) * 5)  # asks for nothing: not a strategy
    obs, rew, term, trunc, infos = env.step(acts)
    assert degenerate(infos["tenant_0"]) == ["lowest_precision"] and rew["tenant_0"] == 0.01
    assert degenerate(infos["tenant_1"]) == ["lowest_precision"]
    assert degenerate(infos["tenant_2"]) == [] and degenerate(infos["tenant_3"]) == []
    # an A100 trainer's lowest legal precision is BF16: no low-precision degenerate strategy
    med = fleet_marl.parallel_env(task="medium")
    med.reset(seed=0)
    acts = {a: act(2) for a in med.agents}
    _obs, rew, _term, _trunc, infos = med.step(acts)
    assert degenerate(infos["tenant_4"]) == []


def test_episode_report():
    env = fleet_marl.parallel_env(task="easy", max_cycles=30)
    obs, infos = env.reset(seed=0)
    rng = np.random.default_rng(0)
    reports = {}
    total_welfare = 0.0
    while env.agents:
        _obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
        total_welfare += next(iter(infos.values()))["welfare"]
    reports = env.episode_reports
    assert set(reports) == set(env.possible_agents)
    keys = {
        "welfare",
        "jain",
        "max_starvation_streak",
        "rho",
        "p99_wait_s",
        "oom",
        "veto",
        "throttle",
        "degenerate",
        "starvation_events",
        "return",
    }
    for r in reports.values():
        assert keys <= set(r)
        assert 0.0 < r["jain"] <= 1.0
    assert reports["tenant_0"]["welfare"] == pytest.approx(total_welfare)


EPISODE_KEYS = [
    "welfare",
    "return",
    "utility",
    "rounds",
    "jain",
    "service",
    "max_starvation_streak",
    "starvation_events",
    "rho",
    "jobs_done",
    "p99_wait_s",
    "oom",
    "veto",
    "throttle",
    "degenerate",
]


@pytest.mark.parametrize("task", ["easy", "hard"])
def test_summary_agrees_with_the_episode_reports(task):
    """``env.fairness`` (``fairness.summary()``) is what the episode reports are built from: a tenant's figures stop
    changing when it finishes, so the summary at the end of the episode repeats each report."""
    env = fleet_marl.parallel_env(task=task, max_cycles=20)
    obs, infos = env.reset(seed=1)
    rng = np.random.default_rng(1)
    reports, finished_at = {}, {}
    while env.agents:
        _obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
        for a in set(env.episode_reports) - set(reports):  # each report made on the step its agent finished
            reports[a], finished_at[a] = env.episode_reports[a], env.round
    s = env.fairness  # as of now, with the p99 waits
    assert set(s.counts) == {"oom", "veto", "throttle", "degenerate"} and s.p99_wait_s.shape == (env.kernel_static.T,)
    assert set(reports) == set(env.possible_agents)
    for a, r in reports.items():
        i = env.agent_index[a]
        assert list(r) == EPISODE_KEYS  # keys and their order
        assert r["service"] == float(s.service[i]) and r["rho"] == s.rho[i] and r["jobs_done"] == int(s.jobs_done[i])
        assert r["max_starvation_streak"] == int(s.max_streak[i]) and r["starvation_events"] == int(s.starvation_events[i])
        assert all(r[k] == int(s.counts[k][i]) for k in ("oom", "veto", "throttle", "degenerate"))
        if finished_at[a] == env.round:  # welfare and Jain's index are the episode's so far
            assert r["welfare"] == s.welfare and r["jain"] == s.jain
            if not env.kernel_static.is_train[i]:  # (a trainer's p99 also counts its queued jobs)
                assert r["p99_wait_s"] == float(s.p99_wait_s[i])
        assert s.episode_report(i, r["return"], r["utility"], r["rounds"])["service"] == r["service"]
    with pytest.raises(ValueError, match="p99_wait_s"):
        fairness.summary(env._s.fairness, 0).episode_report(0, 0.0, 0.0, 1)  # a summary without now has no p99
    s.counts["oom"][0] = 99  # a copy: the detector's state is untouched
    assert env.fairness.counts["oom"][0] != 99 or reports["tenant_0"]["oom"] == 99


def test_fair_share_and_jain():
    pool = np.array([0, 0, 0, 1])
    got = fair_share(pool, np.array([8, 8]), np.array([8.0, 8.0, 2.0, 8.0]), np.array([True, True, True, False]))
    np.testing.assert_allclose(got, [3.0, 3.0, 2.0, 0.0])
    assert jain(np.array([1.0, 1.0, 1.0])) == 1.0
    assert jain(np.array([1.0, 0.0])) == 0.5


def test_the_compiled_fair_shares_equal_the_numpy_oracle_bit_for_bit():
    rng = np.random.default_rng(0)
    for _ in range(200):
        T, Q, B = int(rng.integers(1, 9)), int(rng.integers(1, 4)), 5
        pool = rng.integers(0, Q, T)
        capacity = rng.integers(0, 33, Q).astype(np.int64)
        caps = rng.integers(0, 17, T).astype(np.float64)
        demanding = rng.random((B, T)) < 0.7
        out = np.empty((B, T))
        fairness.fair_shares(pool, capacity, caps, demanding, out)
        for b in range(B):
            assert np.array_equal(out[b], fair_share(pool, capacity, caps, demanding[b])), (pool, capacity, caps, demanding[b])


def test_p99_wait_follows_fifo_order():
    B, T, n = 1, 4, 10
    q = core.Queues(
        waiting=np.zeros((B, T, n)),
        waiting_head=np.zeros((B, T), np.int64),
        has_job=np.zeros((B, T), bool),
        job_born=np.full((B, T), -1, np.int64),
        pending=np.zeros((B, T, n), np.int64),
        backlog_n=np.zeros((B, T), np.int64),
        remaining=np.zeros((B, T)),
    )
    fs = fairness.FairnessState.zeros(B, T, n)
    live, is_train, no = np.ones((B, T), bool), np.array([True, False, True, True]), np.zeros((B, T), bool)

    def serve(t, arrivals, served):
        jobs = np.zeros((B, T), np.int64)
        queues = fairness.QueueRound(
            *core.advance_queues(np.array([t]), live, is_train, np.array([arrivals]), np.array([served]), jobs, np.zeros(T), q)
        )
        fairness.record(fs, live, np.zeros(B), (no, no, no, no), queues, np.zeros(T))

    serve(0, [0, 100.0, 0, 0], [0, 50.0, 0, 0])
    serve(1, [0, 0.0, 0, 0], [0, 49.0, 0, 0])
    # 50 waited 0 rounds, 49 waited 1, and 1 is still queued at round 3 (waited 3)
    summary = fairness.summary(fs, 0, now=3, round_seconds=60.0, queued_requests=q.waiting[0])
    assert summary.p99_wait_s[1] == pytest.approx(1 * 60.0)
    assert summary.waits[1] == {0: 50.0, 1: 49.0}
    assert q.waiting[0, 1, 0] == pytest.approx(1.0) and q.waiting_head[0, 1] == 0  # the core's FIFO, by arrival round
    assert fairness.summary(fs, 0).p99_wait_s is None  # only on request


# --- config and render -------------------------------------------------------------------------------------


def test_overrides_and_unknown_fields():
    env = fleet_marl.parallel_env(task="easy", reward_scheme="global", cluster={"rack_power_cap_w": 9000.0}, max_cycles=7)
    assert env.config.reward.scheme == "global" and env.config.cluster.rack_power_cap_w == 9000.0 and env.max_cycles == 7
    with pytest.raises(ConfigError, match="rewardscheme"):
        fleet_marl.parallel_env(task="easy", rewardscheme="global")
    with pytest.raises(ConfigError, match="cluster.rack_cap"):
        fleet_marl.parallel_env(task="easy", cluster={"rack_cap": 1})
    with pytest.raises(ConfigError, match="task"):
        fleet_marl.parallel_env(task="impossible")
    with pytest.raises(ValueError, match="obs_mode"):
        fleet_marl.parallel_env(task="easy", obs_mode="pixels")
    with pytest.raises(ConfigError, match="reward.scheme"):
        fleet_marl.parallel_env(task="easy", reward_scheme="vibes")


def test_render_ansi_and_rgb():
    env = fleet_marl.parallel_env(task="easy", render_mode="ansi")
    env.reset(seed=0)
    env.step({a: act(4) for a in env.agents})
    text = env.render()
    for col in ("tenant_3", "gpus", "precision", "tok/s", "mem", "temp", "starve"):
        assert col in text
    assert "4/4" in text and "bf/bf/bf/bf/bf" in text
    rgb = fleet_marl.parallel_env(task="easy", render_mode="rgb_array")
    rgb.reset(seed=0)
    first = rgb.render()
    rgb.step({a: act(4) for a in rgb.agents})
    second = rgb.render()
    assert first.shape == second.shape and first.ndim == 3 and first.dtype == np.uint8
    assert not np.array_equal(first, second)  # GPUs are now coloured by tenant


def test_trace_task_numbers_come_from_the_trace_files():
    """The trace task's serving rate and request lengths are the Azure trace's, and its
    arrivals in the env are the trace's rows, round by round."""
    from fleet_marl.workloads import read_trace, resolve_trace, trace_stats

    env = fleet_marl.parallel_env(task="trace")
    env.reset(seed=0)
    for i, t in enumerate(env.config.tenants):
        wl = t.workload
        stats = trace_stats(resolve_trace(wl.trace))
        if t.kind == "serve":
            assert wl.rate == pytest.approx(stats["rate_per_s"] / wl.trace_shards, rel=0.01)
            assert wl.prompt_tokens == round(stats["mean_context_tokens"])
            assert wl.output_tokens == round(stats["mean_generated_tokens"])
        rows = read_trace(resolve_trace(wl.trace))
        times = rows.time_s[wl.trace_shard :: wl.trace_shards] / wl.trace_speedup
        rs = env.config.cluster.round_seconds
        expected = np.bincount((times // rs).astype(int), minlength=env.max_cycles)[: env.max_cycles]
        got = env.arrival_schedule[:, i]  # requests for a server, jobs for a trainer
        np.testing.assert_array_equal(got, expected)


def test_auction_mask_and_starvation_respect_the_reserve():
    """In an auction a bid below the reserve cannot win: the mask's affordability is at the
    lowest winning bid, and a losing bid below the reserve is not starvation."""
    cfg = task_dict("hard")
    rounds_per_hour = 3600.0 / cfg["cluster"].get("round_seconds", 60.0)
    unit = catalog.gpu("h100-sxm").price_per_hour / rounds_per_hour  # one H100 for one round at list price
    cfg["tenants"][0]["budget"] = 3.5 * unit * 0.75  # three GPU-rounds at the 0.75 reserve
    env = fleet_marl.parallel_env(config=cfg)
    obs, infos = env.reset(seed=0)
    assert infos["tenant_0"]["action_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    for _ in range(4):
        acts = {a: act(1, bid=2) for a in env.agents}
        acts["tenant_1"] = act(4, bid=0)  # 0.5 x list price, below the 0.75 reserve
        _obs, _rew, _term, _trunc, infos = env.step(acts)
        assert infos["tenant_1"]["alloc"] == 0
        assert infos["tenant_1"]["starvation_streak"] == 0


def test_rounds_alone_is_themis_t_independent():
    """A trainer alone on its default action finishes its job in ceil(rounds_alone) rounds, so
    its finish-time fairness is ceil(x) / x: 1 up to the rounding to whole rounds."""
    cfg = task_dict("tiny")
    cfg["tenants"] = cfg["tenants"][:1]
    cfg["tenants"][0]["workload"]["rate"] = 0.0
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    x = env.rounds_alone[0]
    rounds = 0
    while env.agents:
        _obs, _rew, term, _trunc, _infos = env.step({"tenant_0": env.default_action_index[0]})
        rounds += 1
    assert term["tenant_0"] and rounds == int(np.ceil(x))
    assert env.episode_reports["tenant_0"]["rho"] == pytest.approx(np.ceil(x) / x)


def _rounded(x):
    if isinstance(x, float):
        return round(x, 9)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def run_documented_example():
    """The run behind the infos examples in docs/environment.md."""
    env = fleet_marl.parallel_env(task="easy", reward_scheme="difference")
    env.reset(seed=0)
    a = np.array([4, 2, 1, 1, 1, 1, 1, 3])
    first = None
    while env.agents:
        _obs, _rew, _term, _trunc, infos = env.step(dict.fromkeys(env.agents, a))
        if first is None:
            first = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in infos["tenant_1"].items() if k != "action_mask"}
    return first, env.episode_reports["tenant_0"]


def test_docs_infos_examples_are_current():
    import ast
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "environment.md").read_text()
    step_doc = ast.literal_eval(re.search(r"```python\n(\{'reward_local'.*?)```", text, re.S).group(1))
    ep_doc = ast.literal_eval(re.search(r'env.episode_reports\["tenant_0"\] == (\{.*?\})\n```', text, re.S).group(1))
    first, ep = run_documented_example()
    assert _rounded(first) == _rounded(step_doc)
    assert _rounded(ep) == _rounded(ep_doc)


# --- review follow-ups ---------------------------------------------------------------------------


def test_aec_checks_each_action_on_its_agents_turn():
    aec = fleet_marl.env(task="easy")
    aec.reset(seed=0)
    first = aec.agent_selection
    with pytest.raises(ActionError) as e:
        aec.step(np.array([99, 0, 1, 1, 1, 1, 1, 0]))
    assert e.value.agent == first and "gpus" in str(e.value)
    # nothing was stored: the same agent tries again and the round completes
    assert aec.agent_selection == first
    for _agent in aec.agent_iter(len(aec.agents)):
        aec.step(act(2))
    assert aec.unwrapped.round == 1


def test_calls_before_reset_are_clear_errors():
    env = fleet_marl.parallel_env(task="easy", render_mode="ansi")
    for call in (lambda: env.action_mask("tenant_0"), env.render, env.state, lambda: env.step({})):
        with pytest.raises(RuntimeError, match="reset"):
            call()
    with pytest.raises(ValueError, match="seed = -1"):
        env.reset(seed=-1)
    with pytest.raises(KeyError, match="tenant_9"):
        env.observation_space("tenant_9")


def test_overrides_do_not_touch_the_callers_dicts_and_task_with_config_is_an_error():
    r = {"starvation_penalty": 0.5}
    env = fleet_marl.parallel_env(task="easy", reward=r, reward_scheme="global")
    assert r == {"starvation_penalty": 0.5}
    assert env.config.reward.scheme == "global" and env.config.reward.starvation_penalty == 0.5
    with pytest.raises(ConfigError, match="task"):
        fleet_marl.parallel_env(task="hard", config=task_dict("tiny"))


def test_degenerate_strategy_never_gains():
    """The floor caps a degenerate strategy's reward: a raw reward already below it stays."""
    env = fleet_marl.parallel_env(task="easy", reward_scheme="local", reward={"degenerate_floor": 0.5})
    env.reset(seed=0)
    acts = {a: act(2) for a in env.agents}
    acts["tenant_0"] = act(8, prec=(F8,) * 5)
    _obs, rew, _term, _trunc, infos = env.step(acts)
    raw = infos["tenant_0"]["reward_local"]
    assert degenerate(infos["tenant_0"]) == ["lowest_precision"]
    assert rew["tenant_0"] == min(raw, 0.5) and raw < 0.5


def test_hoarding_needs_a_starved_tenant_in_the_same_pool():
    cfg = task_dict("medium")
    cfg["arbiter"] = {"mechanism": "priority"}
    cfg["fairness"] = {"starvation_rounds": 1}
    for i, t in enumerate(cfg["tenants"]):
        t["priority"] = 1.0 + (i == 0)
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    acts = {a: act(0) for a in env.agents}
    acts["tenant_0"] = act(8)  # H100 pool, priority 2
    acts["tenant_4"] = act(8)  # A100 pool, alone there
    acts["tenant_6"] = act(8)  # A100 pool: tenant_4 and tenant_6 split 16 GPUs
    acts["tenant_7"] = act(8)  # A100 pool: 24 asked, 16 GPUs; someone is short
    _obs, _rew, _term, _trunc, infos = env.step(acts)
    a100_starved = [a for a in ("tenant_4", "tenant_6", "tenant_7") if infos[a]["starved"]]
    assert a100_starved, "the A100 pool must have a starved tenant for this test"
    assert infos["tenant_0"]["alloc"] == 8 and degenerate(infos["tenant_0"]) == []


def test_trainer_p99_wait_counts_jobs_still_queued():
    cfg = task_dict("tiny")
    cfg["tenants"][0]["workload"].update(rate=60.0)
    cfg["max_cycles"] = 6
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    while env.agents:
        _obs, _rew, _term, _trunc, _infos = env.step({a: act(0) for a in env.agents})
    # tenant_0 asked for nothing, so every job that arrived is still queued; the earliest,
    # from round b, has waited 6 - b - 1 rounds (it could have started in round b + 1)
    first = int(np.flatnonzero(env.arrival_schedule[:, 0])[0])  # tenant_0 trains: its jobs
    assert first <= 4
    assert env.episode_reports["tenant_0"]["p99_wait_s"] == (6 - first - 1) * env.config.cluster.round_seconds


def test_sampled_shapley_converges_to_exact(monkeypatch):
    from fleet_marl import credit

    def run():
        env = fleet_marl.parallel_env(task="easy", shapley_samples=3000, compute_all=True)
        obs, infos = env.reset(seed=3)
        rng = np.random.default_rng(3)
        out = []
        for _ in range(2):
            _obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
            out.append([infos[a]["reward_shapley"] for a in env.possible_agents])
        return np.array(out)

    exact = run()
    monkeypatch.setattr(credit, "EXACT_SHAPLEY_MAX", 0)
    sampled = run()
    scale = np.abs(exact).max()
    np.testing.assert_allclose(sampled, exact, atol=0.05 * scale)


def test_one_kernel_call_per_step(monkeypatch):
    from fleet_marl import credit

    calls = []
    real = credit.evaluate_welfare
    monkeypatch.setattr(credit, "evaluate_welfare", lambda *a, **k: calls.append(1) or real(*a, **k))
    for task in ("easy", "hard"):
        env = fleet_marl.parallel_env(task=task)
        obs, infos = env.reset(seed=0)
        rng = np.random.default_rng(0)
        calls.clear()
        for _ in range(3):
            _obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
        assert len(calls) == 3


def test_episode_counts_oom_veto_throttle_and_starvation():
    cfg = task_dict("tiny")
    cfg["arbiter"] = {"mechanism": "priority"}
    cfg["max_cycles"] = 4
    cfg["cluster"]["rack_power_cap_w"] = 2000.0  # 8 x 85 W idle = 680 W: running GPUs are capped
    env = fleet_marl.parallel_env(config=cfg)
    env.reset(seed=0)
    plan = [  # batch level 3 = 8 sequences per GPU fits; level 8 = 256 does not (veto mode: OOM)
        {"tenant_0": act(4), "tenant_1": act(4, prec=(BF, BF, I8, BF, BF))},  # t1 vetoed
        {"tenant_0": act(8), "tenant_1": act(4)},  # t1 short
        {"tenant_0": act(8), "tenant_1": act(4)},  # t1 short
        {"tenant_0": act(4), "tenant_1": act(4, batch=8)},  # t1 OOM
    ]
    for acts in plan:
        _obs, _rew, _term, _trunc, _infos = env.step(acts)
    e0, e1 = env.episode_reports["tenant_0"], env.episode_reports["tenant_1"]
    assert (e1["veto"], e1["oom"]) == (1, 1), e1
    assert e1["max_starvation_streak"] == 2 and e0["max_starvation_streak"] == 0
    assert e0["throttle"] == 4 and e0["oom"] == 0 and e0["veto"] == 0


def test_observation_features_mean_what_the_docs_say():
    from fleet_marl.environment import OBS_FIELDS

    col = {name: i for i, (name, _) in enumerate(OBS_FIELDS)}
    env = fleet_marl.parallel_env(task="medium")
    obs, infos = env.reset(seed=1)
    rng = np.random.default_rng(1)
    st = env.kernel_static
    for _ in range(5):
        obs, _rew, _term, _trunc, infos = env.step(masked_random(env, infos, rng))
    o = env.last_outcome
    top = env.bid_levels[-1]
    for a, x in obs.items():
        i = env.agent_index[a]
        assert x[col["held"]] == pytest.approx(o.alloc[i] / st.max_gpus[i], abs=1e-6)
        assert x[col["budget_left"]] == pytest.approx(env.round_state.budget_left[i] / st.budget[i], abs=1e-6)
        want_price = o.price[i] / (st.list_price[i] * top) if o.alloc[i] else 0.0
        assert x[col["price"]] == pytest.approx(want_price, abs=1e-6)
        if not st.is_train[i]:
            m = max(st.arrival_rate[i] * st.round_seconds, 1.0)
            q = env.round_state.queue[i]
            assert x[col["queue"]] == pytest.approx(q / (q + m), abs=1e-6)
        assert x[col["round"]] == pytest.approx(5 / env.max_cycles)
    s = env.state()
    tail = s[-(st.K + st.n_racks) :]
    np.testing.assert_allclose(tail[st.K :], np.clip(o.rack_power_w / st.rack_power_cap_w, 0, 1), atol=1e-6)
    np.testing.assert_allclose(
        tail[: st.K], np.clip((env.node_temperatures - st.ambient_c) / (st.critical_temp_c - st.ambient_c), 0, 1), atol=1e-6
    )


def test_starvation_entitlement_is_the_smaller_of_fair_share_and_request_and_mixed_is_penalized():
    env = starvation_env(starvation_penalty=0.5, starvation_rounds=1)
    env.reset(seed=0)
    # tenant_1 asks for 1 of a fair 4 and gets the 1 left: not short
    obs, rew, term, trunc, infos = env.step({"tenant_0": act(7), "tenant_1": act(1)})
    assert infos["tenant_1"]["alloc"] == 1 and infos["tenant_1"]["starvation_streak"] == 0
    # asks for 4, gets 0: short, and starved at once (starvation_rounds=1)
    _obs, _rew, _term, _trunc, infos = env.step({"tenant_0": act(8), "tenant_1": act(4)})
    i1 = infos["tenant_1"]
    assert i1["starved"]
    w = env.config.reward.mixed_weight
    assert i1["reward_mixed"] == pytest.approx(w * i1["utility"] + (1 - w) * (i1["welfare"] - 0.5))


def test_work_finished_on_the_last_round_is_truncation():
    cfg = task_dict("tiny")
    cfg["tenants"] = cfg["tenants"][:1]
    cfg["tenants"][0]["workload"]["rate"] = 0.0
    env = fleet_marl.parallel_env(config=cfg)
    env.max_cycles = int(np.ceil(env.rounds_alone[0]))
    env.reset(seed=0)
    while env.agents:
        _obs, _rew, term, trunc, _infos = env.step({"tenant_0": env.default_action_index[0]})
    assert env.episode_reports["tenant_0"]["jobs_done"] == 1
    assert trunc["tenant_0"] is True and term["tenant_0"] is False


@pytest.mark.parametrize("played", [0, 5])
def test_reset_without_seed_continues_the_stream_as_if_each_round_drew_its_tiebreaks(played):
    """reset() draws the episode's schedule and every round's tie-breaks at once; a reset
    without a seed hands back the tie-breaks the last episode did not use, so the next
    schedule comes from where round-by-round draws would have left the generator."""
    from fleet_marl import workloads

    env = fleet_marl.parallel_env(task="medium")
    env.reset(seed=3)
    for _ in range(played):
        env.step({a: env.action_space(a).sample(mask=env.action_mask(a)) for a in env.agents})
    env.reset()
    cfg = env.config
    sc = workloads.schedules([t.workload for t in cfg.tenants], [t.kind for t in cfg.tenants], cfg.max_cycles, cfg.cluster.round_seconds)
    n, T = cfg.max_cycles, len(cfg.tenants)
    g = np.random.default_rng(np.random.SeedSequence(3).spawn(2)[0])
    first, second = np.empty((n, T)), np.empty((n, T))
    args = (sc.code, sc.lam, sc.lam_on, sc.lam_off, sc.p, sc.q, sc.shared, sc.shared_pq)
    workloads.draw_cluster(g, *args, first, np.empty((played, T)))  # the first episode: its schedule, then `played` rounds of draws
    workloads.draw_cluster(g, *args, second, np.empty((n, T)))
    np.testing.assert_array_equal(env.arrival_schedule, second)
    assert not np.array_equal(first, second)

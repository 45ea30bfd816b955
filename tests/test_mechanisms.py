"""The arbiter's mechanisms as data (``fleet_marl.config.mechanisms``): each says how it clears,
what a served tenant pays and whether it has a reserve, and the compiled round, the oracle,
the scenario and the reference policies read that, never the name. A mechanism registered from
its own file plays a whole episode; every combination of the clearing rules, keys, prices and
reserves agrees with the oracle."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import textwrap

import numpy as np
import pytest

import fleet_marl
from fleet_marl.config import ArbiterSpec, ConfigError, FleetConfig
from fleet_marl.config.mechanisms import CLEARING_RULES, KEYS, PRICES, REGISTRY, Mechanism, register_mechanism
from fleet_marl.environment.scenario import cheapest_gpu_round
from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate
from fleet_marl.policies import make as make_policy
from fleet_marl.tasks import task_dict
from tests import oracle
from tests.conftest import make_config, random_actions
from tests.test_oracle import assert_agree

MY_MECHANISM = """
    from fleet_marl.kernel import register_mechanism

    register_mechanism(
        "fair_pay_bid",
        clears="waterfill",
        pays="bid",
        reserve=True,
        description="max-min fair water-filling; a served tenant pays its bid; bids below the reserve get nothing (a throwaway test mechanism)",
    )
"""


@pytest.fixture
def fair_pay_bid(tmp_path):
    """The throwaway mechanism ``fair_pay_bid``, registered from its own file, removed afterwards."""
    path = tmp_path / "my_mechanism.py"
    path.write_text(textwrap.dedent(MY_MECHANISM))
    spec = importlib.util.spec_from_file_location("my_mechanism", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield REGISTRY["fair_pay_bid"]
    REGISTRY.pop("fair_pay_bid", None)


def test_a_mechanism_registered_in_one_file_plays_an_episode(fair_pay_bid):
    cfg = task_dict("easy")  # max-min fair at list price as shipped
    cfg["arbiter"] = {"mechanism": "fair_pay_bid", "reserve_price": 1.0}
    env = fleet_marl.parallel_env(config=cfg)
    st = env.kernel_static
    assert st.mechanism is fair_pay_bid and st.mechanism.afford_at_bid
    # the readers of the registry: the cheapest GPU-round and the lowest winning bid are at the reserve
    levels = env.bid_levels
    at_reserve = int(np.flatnonzero(levels == 1.0)[0])
    np.testing.assert_allclose(
        cheapest_gpu_round(st, levels), st.list_price * 1.0 * st.round_seconds / 3600.0, rtol=1e-15
    )  # equal up to the order of the products
    assert make_policy("bidder", env).lowest_winning_bid() == at_reserve
    _obs, infos = env.reset(seed=0)
    rng = np.random.default_rng(0)
    paid_other_than_list = below_reserve = rounds = 0
    while env.agents:
        acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]], np.int64) for a in env.agents}
        infos = env.step(acts)[4]
        o = env.last_outcome
        bid = np.array([levels[acts[a][1]] if a in acts else np.nan for a in env.possible_agents])
        live = ~np.isnan(bid)
        served = live & (o.alloc > 0)
        # its pricing shows in the money: a served tenant pays its bid x list price, not list price
        np.testing.assert_allclose(o.price[served], bid[served] * st.list_price[served], rtol=1e-12)
        np.testing.assert_allclose(o.spend[served], o.alloc[served] * o.price[served] * st.round_seconds / 3600.0, rtol=1e-12)
        # and its reserve: a bid below it asks for nothing
        assert (o.requested[live & (bid < 1.0)] == 0).all()
        paid_other_than_list += int((served & (bid != 1.0)).sum())
        below_reserve += int((live & (bid < 1.0)).sum())
        rounds += 1
    assert rounds == env.max_cycles or rounds > 1
    assert paid_other_than_list > 0 and below_reserve > 0, "the episode exercised neither the pricing nor the reserve"


def test_a_registered_mechanism_is_a_config_choice_until_removed(fair_pay_bid):
    assert ArbiterSpec(mechanism="fair_pay_bid").mechanism == "fair_pay_bid"
    with pytest.raises(ConfigError, match="already registered"):
        register_mechanism("fair_pay_bid", "greedy")
    REGISTRY.pop("fair_pay_bid")
    with pytest.raises(ConfigError, match="mechanism"):
        ArbiterSpec(mechanism="fair_pay_bid")


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(clears="lottery"), "clears"),
        (dict(clears="waterfill", by=("bid", "priority")), "by"),
        (dict(clears="greedy", by=("bid", "bid")), "by"),
        (dict(clears="greedy", by=("age",)), "by"),
        (dict(clears="greedy", pays="half"), "pays"),
        (dict(clears="greedy", reserve=1), "reserve"),
        (dict(clears="greedy", by=("priority", "bid"), pays="clearing"), "pays"),  # a served tenant could pay over its bid
        (dict(clears="waterfill", by=("bid",), pays="clearing"), "pays"),
    ],
)
def test_a_mechanism_is_checked_when_made(kw, field):
    kw = {"by": (), "pays": "list", "reserve": False, **kw}
    with pytest.raises(ConfigError, match=field):
        Mechanism("m", description="", **kw)


def _combinations():
    bys = {"waterfill": [(), *((k,) for k in KEYS)], "greedy": [(), *((k,) for k in KEYS), *itertools.permutations(KEYS, 2)]}
    for rule in CLEARING_RULES:
        for by, pays, reserve in itertools.product(bys[rule], PRICES, (False, True)):
            if pays != "clearing" or (rule == "greedy" and by[:1] == ("bid",)):  # the combinations Mechanism accepts
                yield rule, by, pays, reserve


@pytest.mark.parametrize("rule,by,pays,reserve", list(_combinations()))
def test_every_combination_of_rules_runs_and_agrees_with_the_oracle(rule, by, pays, reserve):
    name = f"combo_{rule}_{'_'.join(by) or 'none'}_{pays}_{int(reserve)}"
    register_mechanism(name, rule, by, pays, reserve)
    try:
        base = make_config(n_tenants=6, nodes=("h100-sxm", "a100-80gb", "h100-sxm"))
        cfg = dataclasses.replace(base, arbiter=ArbiterSpec(mechanism=name, reserve_price=1.0))
        assert isinstance(cfg, FleetConfig)
        st = KernelStatic.from_config(cfg)
        rng = np.random.default_rng(len(name))
        acts = random_actions(st, rng, 32, max_gpus=16)
        state = dataclasses.replace(RoundState.initial(st), budget_left=rng.choice([1.0, 50.0, 1e300], (32, st.T)))
        draws = Draws(arrivals=rng.poisson(50, (32, st.T)).astype(float), tiebreak=rng.random(st.T))
        out = evaluate(st, acts, state, draws)
        assert_agree(out, oracle.evaluate(st, acts, state, draws), name)
        mult = out.price / st.list_price
        if pays == "list":
            np.testing.assert_allclose(mult, 1.0, rtol=1e-12)
        elif pays == "bid":
            np.testing.assert_allclose(mult, acts.bid, rtol=1e-12)
        else:  # a uniform price per pool, at most the bid of anyone served
            assert (mult <= acts.bid + 1e-12)[out.alloc > 0].all()
        if reserve:
            assert (out.requested[acts.bid < 1.0] == 0).all()
        assert (out.spend <= state.budget_left * (1 + 1e-12)).all()  # a budget is never overspent
    finally:
        REGISTRY.pop(name, None)

"""The names ``config`` validates agree with the modules that implement them: every reward
scheme config accepts is computed by the credit engine (and nothing else is), config accepts
exactly the registered mechanisms and the compiled round has a code for each one's rules, and
an unknown code raises."""

import dataclasses

import numpy as np
import pytest

import fleet_marl
from fleet_marl import config, credit
from fleet_marl.environment import scheme_rewards
from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate, layout, mechanisms
from tests.conftest import make_config, random_actions


def test_reward_schemes_are_the_credit_engines():
    env = fleet_marl.parallel_env(task="tiny", compute_all=True)
    _obs, infos = env.reset(seed=0)
    acts = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
    _, _, _, _, infos = env.step(acts)
    assert tuple(scheme_rewards(next(iter(infos.values())))) == config.REWARD_SCHEMES == env.reward_schemes
    assert tuple(credit.SCHEMES) == config.REWARD_SCHEMES
    assert all(s.rows in credit.ROW_FAMILIES for s in credit.SCHEMES.values())
    st = env.kernel_static
    with pytest.raises(ValueError, match="reward scheme 'nope'"):
        credit.CreditEngine(st, env.config.reward, ("nope",), env.default_actions)


def test_mechanisms_are_the_arbiters():
    reg = mechanisms.REGISTRY
    assert tuple(reg)[: len(config.MECHANISMS)] == config.MECHANISMS
    # the first four as data: how each clears, what a served tenant pays, its reserve
    assert {n: (m.clears, m.by, m.pays, m.reserve) for n, m in reg.items() if n in config.MECHANISMS[:4]} == {
        "proportional": ("waterfill", ("bid",), "bid", False),
        "maxmin": ("waterfill", (), "list", False),
        "priority": ("greedy", ("priority", "bid"), "list", False),
        "auction": ("greedy", ("bid",), "clearing", True),
    }
    assert [reg[m].afford_at_bid for m in ("proportional", "maxmin", "priority", "auction")] == [True, False, False, True]
    # config accepts exactly the registered names; the kernel has a code for each one's rules
    for name, m in reg.items():
        assert config.ArbiterSpec(mechanism=name).mechanism == name
        assert mechanisms.codes(m)[0] in (mechanisms.WATERFILL, mechanisms.GREEDY)
    with pytest.raises(config.ConfigError, match="mechanism"):
        config.ArbiterSpec(mechanism="lottery")
    with pytest.raises(ValueError, match=r"arbiter.mechanism = 'lottery': expected one of 'proportional'"):
        mechanisms.mechanism("lottery")


@pytest.mark.parametrize("column,message", [("clears", "unknown clearing rule code"), ("pays", "unknown price code")])
def test_an_unknown_code_raises_instead_of_running_as_another_rule(column, message):
    st = KernelStatic.from_config(make_config(n_tenants=3))
    acts = random_actions(st, np.random.default_rng(0))
    with pytest.raises(ValueError, match="expected a Mechanism"):
        dataclasses.replace(st, mechanism=3)
    sc = st.packed[-1].copy()
    sc[layout.SC.index(column)] = 9.0  # a packed scenario with a code the compiled round does not know
    forged = dataclasses.replace(st)
    object.__setattr__(forged, "packed", st.packed[:-1] + (sc,))
    with pytest.raises(ValueError, match=message):
        evaluate(forged, acts, RoundState.initial(st), Draws.expected(st))

"""The names ``config`` validates agree with the modules that implement them: every reward
scheme config accepts is computed by the credit engine (and nothing else is), every mechanism
is registered with its own code in the arbiter, and an unknown code raises."""

import dataclasses

import numpy as np
import pytest

import fleet_marl
from fleet_marl import config, credit
from fleet_marl.environment import scheme_rewards
from fleet_marl.kernel import Draws, KernelStatic, RoundState, evaluate, mechanisms
from tests.conftest import make_config, random_actions


def test_reward_schemes_are_the_credit_engines():
    env = fleet_marl.parallel_env(task="tiny", compute_all=True)
    obs, infos = env.reset(seed=0)
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
    assert tuple(reg) == config.MECHANISMS
    assert sorted(m.code for m in reg.values()) == list(range(len(config.MECHANISMS)))
    assert (mechanisms.PROPORTIONAL, mechanisms.MAXMIN, mechanisms.PRIORITY, mechanisms.AUCTION) == tuple(reg[m].code for m in config.MECHANISMS)
    with pytest.raises(config.ConfigError, match="mechanism"):
        config.ArbiterSpec(mechanism="lottery")
    with pytest.raises(ValueError, match=r"mechanism code 7: expected one of 0 \(proportional\)"):
        mechanisms.check_code(7)


def test_an_unknown_mechanism_code_raises_instead_of_running_as_an_auction():
    st = KernelStatic.from_config(make_config(n_tenants=3))
    acts = random_actions(st, np.random.default_rng(0))
    with pytest.raises(ValueError, match="mechanism code 9"):
        dataclasses.replace(st, mechanism=9)
    sc = st.packed[-1].copy()
    sc[0] = 9.0  # a packed scenario with a code the compiled round does not know
    forged = dataclasses.replace(st)
    object.__setattr__(forged, "packed", st.packed[:-1] + (sc,))
    with pytest.raises(ValueError, match="unknown mechanism code"):
        evaluate(forged, acts, RoundState.initial(st), Draws.expected(st))

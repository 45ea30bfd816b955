"""The names ``config`` validates agree with the modules that implement them: every reward
scheme config accepts is computed by the credit engine (and nothing else is), every mechanism
has its own code in the arbiter, and every backend resolves."""

import warnings

import numpy as np
import pytest

import fleet_marl
from fleet_marl import config, credit
from fleet_marl.kernel import arbiter, backend


def test_reward_schemes_are_the_credit_engines():
    env = fleet_marl.parallel_env(task="tiny", compute_all=True)
    obs, infos = env.reset(seed=0)
    acts = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
    _, _, _, _, infos = env.step(acts)
    assert tuple(next(iter(infos.values()))["rewards"]) == config.REWARD_SCHEMES
    assert set(credit._NEEDS) <= set(config.REWARD_SCHEMES)
    st = env.kernel_static
    with pytest.raises(ValueError, match="reward scheme 'nope'"):
        credit.CreditEngine(st, env.config.reward, ("nope",), np.random.default_rng(0))


def test_mechanisms_are_the_arbiters():
    codes = {"proportional": arbiter.PROPORTIONAL, "maxmin": arbiter.MAXMIN, "priority": arbiter.PRIORITY, "auction": arbiter.AUCTION}
    assert set(codes) == set(config.MECHANISMS)
    assert sorted(codes.values()) == list(range(len(config.MECHANISMS)))
    assert all(config.MECHANISMS[c] == name for name, c in codes.items())
    with pytest.raises(config.ConfigError, match="mechanism"):
        config.ArbiterSpec(mechanism="lottery")


def test_backends_resolve():
    assert backend.BACKENDS == config.BACKENDS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in config.BACKENDS:
            assert backend.resolve_backend(name) in config.BACKENDS
    with pytest.raises(config.ConfigError, match="backend"):
        config.FleetConfig(backend="cuda")

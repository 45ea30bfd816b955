"""The example policies of the top-level ``policies/`` folder (written as a user writes one,
against the plain PettingZoo APIs) are graded by ``fleet-marl evaluate --policy policies/<file>.py``
as docs/policies.md says, and each does what its docstring says, well above a policy that asks for
nothing."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fleet_marl
from fleet_marl.environment import SEQUENTIAL_OBS_INDEX
from fleet_marl.evaluation.loading import load_policy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
IDLE = """import numpy as np
class Idle:
    def __init__(self, env): self.env = env
    def reset(self, seed=None): pass
    def act(self, observations, infos):
        return {a: np.array([0, 2, 1, 1, 1, 1, 1, 3]) for a in observations if a in self.env.agents}
"""


def grade(policy: str, *args: str) -> dict:
    exe = Path(sys.executable).parent / "fleet-marl"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fleet_marl.cli"]
    r = subprocess.run(
        [*cmd, "evaluate", "--policy", policy, "--episodes", "2", "--json", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    path = tmp_path_factory.mktemp("idle") / "idle.py"
    path.write_text(IDLE)
    return str(path)


@pytest.mark.parametrize(
    "example, args",
    [
        ("fair_bf16.py", ("--task", "easy")),
        ("kernel_lookahead.py", ("--task", "easy")),
        ("claim_reader.py", ("--task", "medium", "--protocol", "sequential", "--turn-order", "rotating")),
    ],
)
def test_each_example_is_graded_by_evaluate_well_above_asking_for_nothing(example, args, idle):
    assert (ROOT / "policies" / example).read_text().startswith('"""')  # a docstring says what it does and how to grade it
    got, nothing = grade(f"policies/{example}", *args), grade(idle, *args)
    assert got["score"] > nothing["score"] + 0.3, (example, got["score"], nothing["score"])


def obs_with(obs, unclaimed, after):
    """``obs`` with the claim features ``unclaimed`` and ``after_in_pool`` set."""
    o = np.array(obs, dtype=np.float64)
    o[SEQUENTIAL_OBS_INDEX["unclaimed"]], o[SEQUENTIAL_OBS_INDEX["after_in_pool"]] = unclaimed, after
    return o


def test_the_claim_reader_takes_what_the_tenants_before_it_left():
    env = fleet_marl.env(task="medium", protocol="sequential")
    env.reset(seed=0)
    policy = load_policy("policies/claim_reader.py", env)
    agent = env.agent_selection
    obs, _, _, _, info = env.last()
    top = len(info["action_mask"][0]) - 1
    info = {**info, "action_mask": (np.ones(top + 1, np.int8), *info["action_mask"][1:])}  # every GPU count allowed

    def gpus(unclaimed, after):
        return int(policy.act({agent: obs_with(obs, unclaimed, after)}, {agent: info})[agent][0])

    capacity, pool_tenants = policy._capacity(agent)
    assert gpus(0.0, 0.0) == 0  # nothing left: asks for nothing
    assert gpus(1.0, 0.0) == min(capacity, top)  # all left, nobody after it: takes all it may
    assert gpus(0.25, 0.0) == min(int(np.ceil(0.25 * capacity)), top)
    assert gpus(1.0, 1.0) < gpus(1.0, 0.0) and pool_tenants > 1  # others still to claim: it leaves them a share


def test_the_lookahead_asks_for_the_count_the_kernel_scores_best():
    from fleet_marl.kernel import Actions, Draws, evaluate

    env = fleet_marl.parallel_env(task="easy")
    obs, infos = env.reset(seed=3)
    policy = load_policy("policies/kernel_lookahead.py", env)
    actions = policy.act(obs, infos)
    st, seen, base = env.kernel_static, env.observed_round(), env.default_actions
    for agent, a in actions.items():
        i = env.agent_index[agent]
        best = -np.inf
        for k in np.flatnonzero(np.asarray(infos[agent]["action_mask"][0])):
            gpus = base.gpus.copy()
            gpus[i] = k
            w = evaluate(
                st, Actions(gpus[None], base.bid[None], base.precision[None], base.batch[None]), seen.state, Draws.expected(st), seen.live
            ).welfare[0]
            best = max(best, w)
        gpus = base.gpus.copy()
        gpus[i] = a[0]
        assert (
            evaluate(
                st, Actions(gpus[None], base.bid[None], base.precision[None], base.batch[None]), seen.state, Draws.expected(st), seen.live
            ).welfare[0]
            == best
        )

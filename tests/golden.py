"""Whole-episode digests: every task (and ``hard_04``, 0.4's ``hard``) x every mechanism x both
safety modes x {difference, shapley}, random masked actions from a fixed generator. ``python tests/golden.py --write``
records them in ``tests/data/golden_digests.json``; ``tests/test_golden.py`` checks them.

A digest covers every observation, reward, termination, truncation and info of the episode,
with floats rounded to 10 significant digits and those below ``TINY`` in magnitude read as 0
(so it survives harmless last-bit differences between CPUs, and not a change of the model). The infos are hashed in the layout the digests
were recorded with (:func:`recorded_layout`: the same numbers; issue 18 changed only how the
env lays them out).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import fleet_marl
from fleet_marl.builtin_tasks import tenant
from fleet_marl.environment import ACTION_FIELDS, scheme_rewards

PATH = Path(__file__).parent / "data" / "golden_digests.json"
TASKS = ("tiny", "easy", "medium", "hard", "hard_04", "trace", "trace_code", "capped_rack", "shared_fabric")
MECHANISMS = ("proportional", "maxmin", "priority", "auction")
SAFETY = ("veto", "project")
SCHEMES = ("difference", "shapley")


def hard_04() -> dict:
    """``hard`` as fleet_marl 0.4 built it (its digests are 0.4's ``hard`` digests). Issue 47
    revised the task (a deeper rack cap, five-minute rounds, long jobs, servers near capacity, the
    couplings on); these digests keep checking the model with every coupling switch off on this
    scenario (16 tenants, heat and power binding, the auction), which the revised task no longer is."""
    h = "h100-sxm"
    storm = dict(pattern="bursty", burst_factor=8.0, burst_fraction=0.15, burst_rounds=4.0, burst_shared=True)
    trainers = [("gpt2", 4.0e8), ("qwen2.5-0.5b", 1.0e8), ("qwen2.5-7b", 1.0e7), ("llama-3.1-8b", 1.0e7)]
    servers = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen2.5-0.5b"]
    tenants = []
    for i in range(16):
        if i % 2 == 0:
            m, tokens = trainers[(i // 2) % 4]
            seq = 1024 if m == "gpt2" else 2048
            t = tenant("train", m, h, 34.0, seq_len=seq, job_tokens=tokens, rate=6.0, priority=1.0 + (i % 3 == 0))
            t["activation_checkpointing"] = m in ("qwen2.5-7b", "llama-3.1-8b")
            tenants.append(t)
        else:
            m = servers[(i // 2) % 4]
            tenants.append(
                tenant("serve", m, h, 34.0, rate=3.0, prompt_tokens=1024, output_tokens=256, priority=1.0 + (i % 4 == 1), **storm)
            )
    return {
        "cluster": {"gpu_types": [h] * 4, "nodes_per_rack": 4, "rack_power_cap_w": 15_000.0, "ambient_c": 45.0},
        "tenants": tenants,
        "arbiter": {"mechanism": "auction", "reserve_price": 0.75},
        "fairness": {"hoard_share": 0.2},
        "max_cycles": 100,
    }


#: Scenarios digested under a name of their own (not a registered task's).
SCENARIOS = {"hard_04": hard_04}


#: Floats smaller than this in magnitude are digested as 0: a difference of two sums that are
#: equal in exact arithmetic (a tenant's difference reward when removing it changes nothing)
#: cancels to a last-bit residue (+-4.4e-16) whose size and sign depend on the CPU's libm and
#: summation (0a3c0f96 here against d8f1ecbe recorded on another CPU for hard/priority/project/
#: difference), so the digest would tell CPUs apart, not models.
TINY = 1e-9


def canon(x):
    """A JSON-able, order-preserving image of ``x`` with floats at 10 significant digits (and
    those below :data:`TINY` in magnitude as 0)."""
    if isinstance(x, dict):
        return [[str(k), canon(v)] for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    if isinstance(x, np.ndarray):
        return [str(x.dtype), list(x.shape), canon(x.tolist())]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return "0" if abs(x) < TINY else f"{x:.10g}"
    return x


#: The info keys of the layout the digests were recorded with (before issue 18), in order.
_RECORDED = ("utility", "welfare", "requested", "alloc", "throttled", "starved", "starvation_streak", "fair_share")
_FLAGS = ("action_mask", "oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted")


def recorded_layout(infos: dict, env, finished: dict | None) -> dict:
    """``infos`` in the layout the digests were recorded with, from the same numbers: reset
    infos held only ``action_mask``; step infos had ``rewards`` as a dict, ``degenerate`` and
    ``illegal`` as lists of names and ``episode`` on an agent's finishing step (now
    ``env.episode_reports``). ``finished`` is ``{agent: terminated or truncated}`` of the step
    (None after reset)."""
    if finished is None:
        return {a: {"action_mask": i["action_mask"]} for a, i in infos.items()}
    reports = env.episode_reports
    out = {}
    for a, i in infos.items():
        o = {"rewards": scheme_rewards(i), **{k: i[k] for k in _RECORDED}}
        o["degenerate"] = [k for k in ("lowest_precision", "hoarding") if i[k]]
        o["illegal"] = [ACTION_FIELDS[k] for k in np.flatnonzero(i["illegal_fields"])]
        o.update({k: i[k] for k in _FLAGS})
        if finished[a]:
            o["episode"] = reports[a]
        out[a] = o
    return out


def digest(task: str, mechanism: str, safety: str, scheme: str, seed: int = 3) -> str:
    where = {"config": SCENARIOS[task]()} if task in SCENARIOS else {"task": task}
    env = fleet_marl.parallel_env(**where, mechanism=mechanism, safety_mode=safety, reward_scheme=scheme, compute_all=True)
    obs, infos = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    h = hashlib.sha256(json.dumps(canon((obs, recorded_layout(infos, env, None)))).encode())
    while env.agents:
        acts = {a: np.array([rng.choice(np.flatnonzero(d)) for d in infos[a]["action_mask"]], np.int64) for a in env.agents}
        out = env.step(acts)
        infos = out[4]
        finished = {a: out[2][a] or out[3][a] for a in infos}
        h.update(json.dumps(canon(out[:4] + (recorded_layout(infos, env, finished),))).encode())
        h.update(json.dumps(canon(env.state())).encode())
    return h.hexdigest()[:24]


def cases():
    for t in TASKS:
        for m in MECHANISMS:
            for s in SAFETY:
                for r in SCHEMES:
                    yield f"{t}/{m}/{s}/{r}", (t, m, s, r)


def main() -> None:
    out = {}
    for key, args in cases():
        out[key] = digest(*args)
        print(key, out[key], flush=True)
    if "--write" in sys.argv:
        PATH.write_text(json.dumps(out, indent=1) + "\n")
    elif PATH.exists():
        want = json.loads(PATH.read_text())
        bad = [k for k in want if want[k] != out.get(k)]
        print("differ:", bad or "none")


if __name__ == "__main__":
    main()

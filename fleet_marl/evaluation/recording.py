"""A recorded episode: what the viewer (``fleet-marl view``, docs/viewer.md) replays, and what it
follows of a live server session.

A recording is JSON lines: a header (the cluster's layout and the tenants), then one frame per
round (the state after the round: round 0 is the state after ``reset()``), then a summary.
``fleet-marl demo --record episode.jsonl`` writes one. Every frame is read from the env's public
read-only views (``last_credit``, ``last_outcome``, ``fairness``, ``node_temperatures``), so a
live session of ``fleet-marl serve`` gives the same frames; the per-tenant figures are those the
step's infos carry (``tests/test_viewer.py`` compares them), and a recording's env computes every
reward scheme (``compute_all``).

>>> ep = record_episode("easy", "precision_expert", seed=0)
>>> len(ep["frames"]) == ep["summary"]["rounds"] + 1       # round 0 (after reset) to the last
True
>>> sum(ep["frames"][3]["alloc"]) <= 8 * len(ep["header"]["nodes"])   # GPUs granted in round 3
True
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import load_policy
from fleet_marl.evaluation.runner import make_env, run_episode

#: The first line's ``format`` of a recording (a reader refuses another).
FORMAT = "fleet_marl.episode/1"

#: The kernel outcome's per-tenant safety flags a frame carries, under these names.
SAFETY_FLAGS = ("oom", "vetoed", "unsafe_numerics", "projected", "tripped", "restarted")

#: The keys every frame has (``tests/test_viewer.py`` and the page read them).
FRAME_KEYS = (
    "kind",
    "round",
    "live",
    "welfare",
    "requested",
    "alloc",
    "utility",
    "rewards",
    "placement",
    "rack_power_w",
    "node_temp_c",
    "throttled",
    "starved",
    "streak",
    "counts",
    "starvation_events",
    "welfare_sum",
    "jain",
) + SAFETY_FLAGS


def _ints(a) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _num(x) -> float | None:
    """``x`` rounded to 6 decimals; None where it is not finite (JSON has no NaN)."""
    x = float(x)
    return round(x, 6) if np.isfinite(x) else None


def _floats(a) -> list[float | None]:
    return [_num(x) for x in np.asarray(a, np.float64).reshape(-1)]


def header(env, **about) -> dict:
    """The recording's first line: the cluster (racks, nodes and their GPU type, GPUs per node,
    the rack power cap, the temperatures that throttle and trip), the tenants, the reward
    schemes computed (the configured one first) and ``about`` (task, policy, seed ...)."""
    st, cfg = env.kernel_static, env.config
    schemes = list(env.reward_schemes)
    scheme = cfg.reward.scheme
    if scheme in schemes:
        schemes.remove(scheme)
        schemes.insert(0, scheme)
    return {
        "kind": "header",
        "format": FORMAT,
        **about,
        "max_rounds": int(env.max_cycles),
        "scheme": scheme,
        "schemes": schemes,
        "tenants": [
            {"agent": a, "kind": t.kind, "model": t.model, "gpu_type": t.gpu_type, "max_gpus": int(st.max_gpus[i])}
            for i, (a, t) in enumerate(zip(env.possible_agents, cfg.tenants, strict=True))
        ],
        "racks": int(st.n_racks),
        "nodes": [{"rack": int(st.node_rack[k]), "gpu_type": st.pools[int(st.node_pool[k])]} for k in range(st.K)],
        "gpus_per_node": int(st.gpus_per_node),
        "rack_power_cap_w": float(st.rack_power_cap_w),
        "ambient_c": float(st.ambient_c),
        "throttle_temp_c": float(st.throttle_temp_c),
        "critical_temp_c": float(st.critical_temp_c),
    }


def frame(env) -> dict:
    """The state of ``env``'s episode after its last round (after ``reset()``: round 0, nothing
    granted): who is live, each tenant's request, grant, utility and reward under every computed
    scheme, the GPUs it holds on each node, each rack's power, each node's temperature, the
    throttle, starvation and safety flags, and the fairness counts so far (``counts``: tenant-rounds
    of oom, veto, throttle and degenerate strategies, cumulative)."""
    st = env.kernel_static
    T = st.T
    credit, o, fair = env.last_credit, env.last_outcome, env.fairness
    live = set(env.agents)
    out: dict = {"kind": "frame", "round": int(env.round), "live": [a in live for a in env.possible_agents]}
    if o is None:  # after reset(): no round played
        zeros_t = [0] * T
        out.update(
            welfare=0.0,
            requested=zeros_t,
            alloc=zeros_t,
            utility=[0.0] * T,
            rewards={k: [0.0] * T for k in env.reward_schemes},
            placement=[[0] * st.K for _ in range(T)],
            rack_power_w=[0.0] * st.n_racks,
            throttled=[False] * T,
            **{k: [False] * T for k in SAFETY_FLAGS},
        )
    else:
        out.update(
            welfare=_num(credit.welfare),
            requested=_ints(o.requested),
            alloc=_ints(o.alloc),
            utility=_floats(o.utility),
            rewards={k: _floats(v) for k, v in credit.rewards.items()},
            placement=[_ints(row) for row in np.asarray(o.gpus_on_node)],
            rack_power_w=_floats(o.rack_power_w),
            throttled=[bool(x) for x in np.asarray(o.power_throttled) | np.asarray(o.thermal_throttled)],
            **{k: [bool(x) for x in np.asarray(getattr(o, k))] for k in SAFETY_FLAGS},
        )
    out.update(
        node_temp_c=_floats(env.node_temperatures),
        starved=[bool(x) for x in fair.starved],
        streak=_ints(fair.streak),
        counts={k: _ints(v) for k, v in fair.counts.items()},
        starvation_events=_ints(fair.starvation_events),
        welfare_sum=_num(fair.welfare),
        jain=_num(fair.jain),
    )
    return out


class _Recorder:
    """Wraps a policy: before each round's first action it records the frame of the round before."""

    def __init__(self, env, policy, frames: list):
        self.env, self.policy, self.frames = env, policy, frames
        self._shown = -1  # under the sequential protocol act() is called once per turn

    def reset(self, seed=None):
        self._shown = -1
        self.policy.reset(seed)

    def act(self, observations, infos):
        env = getattr(self.env, "unwrapped", self.env)
        if env.round != self._shown:
            self._shown = env.round
            self.frames.append(frame(env))
        return self.policy.act(observations, infos)


def recording_policy(env, policy, frames: list):
    """``policy`` wrapped so that playing it on ``env`` appends each round's frame to ``frames``
    (the last round's frame is the caller's: ``frame(env.unwrapped)`` after the episode)."""
    return _Recorder(env, policy, frames)


def record_episode(task: str, policy: str, seed: int = 0, overrides: dict | None = None) -> dict:
    """Play one episode of ``task`` with ``policy`` (anything ``fleet-marl evaluate --policy``
    takes) from ``seed``, every reward scheme computed; return ``{"header", "frames", "summary"}``."""
    overrides = {**(overrides or {}), "compute_all": True}
    env = make_env(task, **overrides)
    try:
        frames: list = []
        ep = run_episode(env, recording_policy(env, load_policy(policy, env), frames), seed, policy)
        base = env.unwrapped
        frames.append(frame(base))
        about = {"task": task, "policy": policy, "seed": seed, "protocol": overrides.get("protocol", "simultaneous")}
        return {"header": header(base, **about), "frames": frames, "summary": summary(ep)}
    finally:
        env.close()


def summary(ep) -> dict:
    """The recording's last line: the episode's figures (:class:`~fleet_marl.evaluation.runner.Episode`)."""
    return {
        "kind": "summary",
        "rounds": int(ep.rounds),
        "welfare": _num(ep.welfare),
        "jain": _num(ep.jain),
        "max_starvation_streak": int(ep.max_starvation_streak),
        "starvation_events": int(ep.starvation_events),
        "events": {k: int(v) for k, v in ep.events.items()},
    }


def write_episode(path: str | Path, episode: dict) -> Path:
    """Write ``episode`` (:func:`record_episode`) to ``path`` as JSON lines; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [episode["header"], *episode["frames"]] + ([episode["summary"]] if episode.get("summary") else [])
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")
    return path


def read_episode(path: str | Path) -> dict:
    """A recording written by :func:`write_episode`; a ``UsageError`` names the file, the line and
    what was expected of it."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file (record one with: fleet-marl demo --record {path})")
    head, frames, tail = None, [], None
    with path.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError as exc:
                raise UsageError(f"{path}, line {n}: not JSON ({exc}); expected a recording of fleet-marl demo --record") from None
            kind = line.get("kind") if isinstance(line, dict) else None
            if head is None:
                if kind != "header" or line.get("format") != FORMAT:
                    raise UsageError(f"{path}, line {n}: expected a header of format {FORMAT!r} (fleet-marl demo --record writes one)")
                head = line
            elif kind == "frame":
                missing = [k for k in FRAME_KEYS if k not in line]
                if missing:
                    raise UsageError(f"{path}, line {n}: a frame without {', '.join(missing)}")
                frames.append(line)
            elif kind == "summary":
                tail = line
            else:
                raise UsageError(f"{path}, line {n}: kind = {kind!r}: expected 'frame' or 'summary'")
    if head is None or not frames:
        raise UsageError(f"{path}: expected a header and at least one frame (fleet-marl demo --record writes them)")
    return {"header": head, "frames": frames, "summary": tail}


__all__ = [
    "FORMAT",
    "FRAME_KEYS",
    "SAFETY_FLAGS",
    "frame",
    "header",
    "read_episode",
    "record_episode",
    "recording_policy",
    "summary",
    "write_episode",
]

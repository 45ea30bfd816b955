"""The k-round difference reward of a recorded rollout of B clusters: what a learner trains on
when its credit looks k rounds ahead (issue 48, item 5; ``docs/credit_horizon.md``).

The ``difference`` reward looks one round ahead: ``D_i(t) = G_t(z) − G_t(z_−i)``. The k-round
difference carries tenant i's removal forward::

    D^k_i(t) = Σ_{s=t}^{t+k−1} [ G_s(actual) − G_s(branch_i) ]

``branch_i`` is cluster b's core state at the start of round t (a copy the :class:`Recorder`
took) with i taken out, played on by the env's own round (:func:`fleet_marl.environment.core.step`,
the dynamics written once) with the episode's draws and the other tenants' recorded actions
(a tenant live in a branch after it left the episode holds its last action). Two branches
(:data:`VARIANTS`): ``sits_out``, i out of round t only, back on its own actions from t + 1
(``D^k − D^1`` is what i's presence in round t did to the rounds after it), and ``withdrawn``,
i out from t to the window's end. A window stops at the episode's last round. ``D^1`` is the
env's ``difference`` reward, exactly; the reward is shaped as the env shapes ``difference``
(a degenerate strategy's is at most ``degenerate_floor``; 0 for a tenant not in its episode).

Where it is computed: :class:`Recorder` steps a vector env (:class:`FleetVectorEnv` or the
suite's :class:`~fleet_marl.environment.scenario_vector.ScenarioVectorEnv`) and keeps, per step,
a copy of each cluster's core state, who was live, the actions played (held for the tenants
that left), the welfare, whether the episode ended and the degenerate flags.
:meth:`Recorder.rewards` relabels the first steps whose windows the record holds; the
TorchRL learner (``credit_horizon`` of ``TorchRLTrainConfig``) trains k − 1 steps behind its
collector for that reason. :func:`k_round_difference` is the computation on arrays, checked
against the measurement tool ``fleet_marl.studies.credit_horizon`` (``tests/test_horizon.py``).

A branch copies what the round reads of its cluster's state (the episode's draws only for
the rounds it plays, :data:`WINDOWED`) and starts blank the histories that only the fairness
report reads (:data:`BLANK`): its welfare is the env's, bit for bit, at a fraction of the copy.
Cost: a branch is one kernel row per tenant and round, so ``D^k`` costs about k rows per
tenant-round on top of the env's own, in k sequential core steps of every live tenant's
branch (``chunk`` rows at a time).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet_marl.environment import core
from fleet_marl.environment.state import CoreStatic, EnvState
from fleet_marl.fairness import FairnessState

#: The branches: out of round t only (the default a learner trains on), or out from t on.
VARIANTS = ("sits_out", "withdrawn")
#: Branch rows stepped at once: a row is a copy of one cluster's state (tens of kilobytes on hard), and a
#: few hundred of them stay in the caches where thousands do not.
CHUNK = 256


def branch_static(config: Any) -> CoreStatic:
    """The array core of ``config`` (a ``FleetConfig``) computing ``local`` alone: one kernel row a
    cluster and round (a branch needs only each round's welfare, which every scheme shares)."""
    return CoreStatic.from_config(dataclasses.replace(config, reward=dataclasses.replace(config.reward, scheme="local", compute_all=False)))


def check_horizon(k: Any, variant: Any, name: str = "credit_horizon") -> None:
    """A ``ValueError`` naming the field when ``k`` is not an integer >= 1 or ``variant`` not one of :data:`VARIANTS`."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} = {k!r}: expected an integer >= 1 (the rounds the difference reward looks ahead; 1: the env's own)")
    if variant not in VARIANTS:
        raise ValueError(f"credit_branch = {variant!r}: expected one of {', '.join(map(repr, VARIANTS))}")


def window_ends(ended: np.ndarray, k: int, count: int) -> np.ndarray:
    """(count, B) int64: how many rounds the window of step t has in cluster b, ``min(k, rounds
    to the end of its episode)``; ``ended`` (W, B) bool is True at an episode's last step. A
    window that runs past the record (W) is a ``ValueError``."""
    W, B = ended.shape
    out = np.empty((count, B), np.int64)
    nxt = np.full(B, W, np.int64)  # the next episode end at or after t (W: none recorded)
    for t in range(W - 1, -1, -1):
        nxt = np.where(ended[t], t, nxt)
        if t < count:
            out[t] = np.minimum(k, nxt - t + 1)
            short = (nxt >= W) & (t + k > W)
            if short.any():
                raise ValueError(f"step {t}: its {k}-round window runs past the {W} recorded steps in cluster {int(np.argmax(short))}")
    return out


def k_round_difference(
    cs: CoreStatic,
    states: list[EnvState],
    held: np.ndarray,
    live: np.ndarray,
    welfare: np.ndarray,
    ended: np.ndarray,
    k: int,
    variant: str = "sits_out",
    count: int | None = None,
    chunk: int = CHUNK,
) -> np.ndarray:
    """``D`` (count, B, T) float64: ``D[t, b, i]`` is D^k_i(t) in cluster b (NaN where i was not
    live at t) for the first ``count`` steps (default: every step whose window the record holds,
    ``W − k + 1``) of a record of W steps of B clusters of one scenario (``cs``:
    :func:`branch_static`): ``states`` W copies of the clusters' core state at each step's start,
    ``held`` (W, B, T, 8) the actions played (a tenant not live: its last one), ``live`` (W, B, T)
    who acted, ``welfare`` (W, B) each round's, ``ended`` (W, B) the episode's last step. The
    branches of every step are stepped together, ``chunk`` rows at a time."""
    check_horizon(k, variant)
    W, B, T = live.shape
    count = W - k + 1 if count is None else count
    if not 0 <= count <= W:
        raise ValueError(f"count = {count}: expected 0 .. {W} steps")
    ends = window_ends(ended, k, count)
    D = np.full((count, B, T), np.nan)
    tt, bb, ii = np.nonzero(live[:count])  # every branch: (step, cluster, tenant), in that order
    for a in range(0, tt.size, chunk):
        t, b, i = tt[a : a + chunk], bb[a : a + chunk], ii[a : a + chunk]
        D[t, b, i] = _branches(cs, states, held, live, welfare, t, b, i, ends[t, b], variant)
    return D


#: Histories no round reads (the completed waits, the Themis ratios, each server's requests by
#: arrival round): only the fairness report does, so a branch starts them blank.
BLANK = {"waiting", "waits", "rho"}
#: What a round reads at its own index only (the episode's draws, the arrivals still to come): a
#: branch from round r copies the rounds r .. r + k of them (the rest stay 0 and unread).
WINDOWED = {"schedule", "tiebreak", "future"}


def _gather(states: list[EnvState], t: np.ndarray, b: np.ndarray, k: int) -> EnvState:
    """A new state whose row r is cluster ``b[r]`` of ``states[t[r]]`` (``t`` sorted), for the k
    rounds from ``t[r]``: every array the round reads copied (:data:`WINDOWED` for those rounds),
    :data:`BLANK` zeros, no last outcome (only observations read it)."""
    cuts = np.flatnonzero(np.diff(t)) + 1
    pieces = [(int(t[lo]), lo, hi) for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, t.size], strict=True)]

    def cat(get, name, axis=0):
        first = get(states[pieces[0][0]])
        shape = list(first.shape)
        shape[axis] = t.size
        if name in BLANK:
            return np.zeros(shape, first.dtype)
        if name in WINDOWED:  # (rows, rounds, T): the rounds from each row's own
            out = np.zeros(shape, first.dtype)
            for u, lo, hi in pieces:
                rounds = np.minimum(states[u].round[b[lo:hi], None] + np.arange(k + 1), shape[1] - 1)
                out[np.arange(lo, hi)[:, None], rounds] = get(states[u])[b[lo:hi, None], rounds]
            return out
        out = np.empty(shape, first.dtype)
        for u, lo, hi in pieces:  # one copy: each piece taken straight into its rows
            np.take(get(states[u]), b[lo:hi], axis=axis, out=out[(slice(None),) * axis + (slice(lo, hi),)])
        return out

    out: dict[str, Any] = {}
    for f in dataclasses.fields(EnvState):
        name = f.name
        if name == "fairness":
            fair = {
                g.name: cat(lambda s, g=g: getattr(s.fairness, g.name), g.name, 1 if g.name == "counts" else 0)
                for g in dataclasses.fields(FairnessState)
            }
            out[name] = FairnessState(**fair)
        elif name == "drawn_from":
            out[name] = [None] * t.size
        elif name == "last" or getattr(states[pieces[0][0]], name) is None:
            out[name] = None
        else:
            out[name] = cat(lambda s, name=name: getattr(s, name), name)
    return EnvState(**out)


class Blank:
    """What a recorded state keeps of a :data:`BLANK` array: its shape and dtype (a branch starts it at zeros)."""

    def __init__(self, a: np.ndarray):
        self.shape, self.dtype = a.shape, a.dtype


def _light(s: EnvState) -> EnvState:
    """``s`` without what a branch does not copy (:data:`BLANK` arrays as :class:`Blank`; no last
    outcome): what a :class:`Recorder` keeps of a step, and a checkpoint holds."""
    s.last = None
    for name in BLANK & {f.name for f in dataclasses.fields(EnvState)}:
        setattr(s, name, Blank(getattr(s, name)))
    for name in BLANK & {f.name for f in dataclasses.fields(FairnessState)}:
        setattr(s.fairness, name, Blank(getattr(s.fairness, name)))
    return s


def _branches(cs, states, held, live, welfare, t, b, i, h_end, variant) -> np.ndarray:
    """D^k of the branches (step ``t``, cluster ``b``, tenant ``i``), each window ``h_end`` rounds."""
    n = b.size
    acc = np.zeros(n)
    rows = np.arange(n)  # the branches still stepping
    s = _gather(states, t, b, int(h_end.max(initial=0)))
    s.live[rows, i] = False
    for h in range(int(h_end.max(initial=0))):
        u, bu, iu = t[rows] + h, b[rows], i[rows]
        if variant == "sits_out" and h > 0:
            s.live[np.arange(rows.size), iu] = live[u, bu, iu]
        r = core.step(cs, s, held[u, bu], [None] * rows.size)
        core.finish(s, r)
        acc[rows] += welfare[u, bu] - r.credit.welfare
        keep = h_end[rows] > h + 1
        if not keep.all():
            rows = rows[keep]
            if not rows.size:
                break
            s = s.take(np.flatnonzero(keep))
    return acc


def shaped(D: np.ndarray, live: np.ndarray, degenerate: np.ndarray, floor: float | np.ndarray) -> np.ndarray:
    """The reward of ``D`` as the env shapes ``difference``: at most ``floor`` (``degenerate_floor``;
    an array broadcast like ``D``, one a cluster's scenario) where the tenant's strategy was
    degenerate, 0 where it was not live (each (..., B, T))."""
    return np.where(live, np.where(degenerate, np.minimum(D, floor), D), 0.0)


@dataclass
class Step:
    """One recorded step of B clusters (each array's leading axis is B)."""

    states: list[EnvState]  # a copy of each scenario's clusters' core state at the step's start
    held: np.ndarray  # (B, T, 8) int64 the actions played; a tenant not live: its last one
    live: np.ndarray  # (B, T) bool who acted
    welfare: np.ndarray  # (B,) float64 the round's welfare
    ended: np.ndarray  # (B,) bool the cluster's episode ended at this step
    degenerate: np.ndarray  # (B, T) bool a degenerate strategy (the env floors its reward)


class Recorder:
    """Records the steps of a vector env for :meth:`rewards`: ``recorder.step(venv, actions)``
    steps ``venv`` (the one it was built on) and returns what ``venv.step`` returns. A
    :class:`~fleet_marl.environment.scenario_vector.ScenarioVectorEnv` is recorded per scenario
    (each its own core); the clusters are joined in the rewards."""

    def __init__(self, venv: Any):
        self.parts = list(getattr(venv, "envs", [venv]))  # a ScenarioVectorEnv's scenarios, or the vector env
        self.starts = np.concatenate(([0], np.cumsum([e.num_envs for e in self.parts])))
        self.statics = [branch_static(e.config) for e in self.parts]
        self.floors = np.concatenate([np.full(e.num_envs, e.config.reward.degenerate_floor) for e in self.parts])
        self.steps: list[Step] = []
        self.held = np.zeros((int(self.starts[-1]), venv.num_agents, 8), np.int64)  # each tenant's last action played

    def step(self, venv: Any, actions: Any):
        live = venv.alive
        states = [_light(e.core_state()) for e in self.parts]
        out = venv.step(actions)  # checks the actions; a rejected step records nothing
        idx = np.asarray(actions).astype(np.int64)  # a live tenant plays its index (FleetVectorEnv._validate)
        self.held = np.where(live[..., None], idx, self.held)
        infos = out[4]
        self.steps.append(
            Step(
                states=states,
                held=self.held.copy(),
                live=live,
                welfare=np.asarray(infos["welfare"], np.float64).copy(),
                ended=np.asarray(infos["_final"], bool).copy(),
                degenerate=np.asarray(infos["lowest_precision"], bool) | np.asarray(infos["hoarding"], bool),
            )
        )
        return out

    def differences(self, k: int, variant: str = "sits_out", count: int | None = None, chunk: int = CHUNK) -> np.ndarray:
        """(count, B, T) float64 D^k of the first ``count`` recorded steps (default ``len(steps) − k
        + 1``: every one whose window the record holds); NaN where a tenant was not live."""
        W = len(self.steps)
        count = W - k + 1 if count is None else count
        live = np.stack([s.live for s in self.steps])
        held = np.stack([s.held for s in self.steps])
        welfare = np.stack([s.welfare for s in self.steps])
        ended = np.stack([s.ended for s in self.steps])
        parts = []
        for p, cs in enumerate(self.statics):
            a, z = self.starts[p], self.starts[p + 1]
            states = [s.states[p] for s in self.steps]
            parts.append(
                k_round_difference(cs, states, held[:, a:z], live[:, a:z], welfare[:, a:z], ended[:, a:z], k, variant, count, chunk)
            )
        return np.concatenate(parts, axis=1)

    def rewards(self, k: int, variant: str = "sits_out", count: int | None = None, chunk: int = CHUNK) -> np.ndarray:
        """(count, B, T) float64 :meth:`differences` shaped as the env shapes ``difference``
        (:func:`shaped`): with ``k = 1`` the env's own rewards, bit for bit."""
        D = self.differences(k, variant, count, chunk)
        count = D.shape[0]
        live = np.stack([s.live for s in self.steps[:count]])
        degenerate = np.stack([s.degenerate for s in self.steps[:count]])
        return shaped(D, live, degenerate, self.floors[None, :, None])

    def drop(self, count: int) -> None:
        """Forget the first ``count`` recorded steps (relabelled already)."""
        del self.steps[:count]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "held": self.held.copy()}

    def load_state_dict(self, d: dict) -> None:
        self.steps, self.held = list(d["steps"]), d["held"].copy()


__all__ = [
    "BLANK",
    "CHUNK",
    "VARIANTS",
    "WINDOWED",
    "Blank",
    "Recorder",
    "Step",
    "branch_static",
    "check_horizon",
    "k_round_difference",
    "shaped",
    "window_ends",
]

"""Running episodes: one policy plays every tenant of one env for one seed, every action checked.

``run_episode(env, policy, seed)`` resets the env and the policy with ``seed`` (and seeds each
agent's action space, so ``action_space(a).sample(mask)`` is reproducible too), plays until no
agent is left, and returns an :class:`Episode`: welfare, rounds, Jain's index, starvation and
event counts, masked choices, and each agent's episode report (``env.episode_reports``, built
by the env from ``fleet_marl.fairness.summary()`` on the step the agent finished). A malformed
action or a policy that raises is a :class:`~fleet_marl.evaluation.loading.PolicyError` naming
the agent and round.

Under the sequential protocol (``overrides`` ``protocol="sequential"``, ``turn_order=...``)
:func:`make_env` builds the AEC env and :func:`run_episode` plays it through PettingZoo's AEC
loop: on each tenant's turn the policy's ``act`` gets that one agent's observation (which
holds the claims made before its turn) and info, and the action is checked before it is
stepped. ``act_one`` is not required: any policy of the ``Policy`` protocol plays both.

The grader stays strict where the env is lenient: the env ignores actions for agents that
already left (PettingZoo clients send them), the grader rejects them, because it grades our
own policies, whose contract is an action for each live agent and nothing else; an action for
an agent that left is a bug in the policy, and the grader names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pettingzoo import AECEnv

from fleet_marl.environment import ActionError, FleetParallelEnv, parallel_env
from fleet_marl.environment import env as aec_env
from fleet_marl.evaluation.loading import PolicyError

#: Event counts summed over tenants and episodes.
EVENTS = ("oom", "veto", "throttle", "degenerate")
#: The safety interventions counted per tenant-round, each the kernel Outcome's flag of that
#: name: a config that did not fit (``oom``), one refused (``vetoed``) or downgraded
#: (``projected``), clocks slowed by the rack power cap or by heat, a node at the critical
#: temperature (``tripped``).
INTERVENTIONS = {
    "oom": "oom",
    "veto": "vetoed",
    "projection": "projected",
    "power_throttle": "power_throttled",
    "thermal_throttle": "thermal_throttled",
    "trip": "tripped",
}


@dataclass
class Episode:
    """One episode's result."""

    seed: int
    welfare: float
    rounds: int
    jain: float
    max_starvation_streak: int
    starvation_events: int
    events: dict[str, int]
    illegal: int  # masked choices (vetoed or capped by the env)
    agents: dict[str, dict]  # each agent's episode report (``env.episode_reports[agent]``)
    #: each agent's safety interventions by kind (``INTERVENTIONS``), summed over the rounds it played
    interventions: dict[str, dict[str, int]] = field(default_factory=dict)
    #: each agent's rounds played (its tenant-rounds: the rounds it was live at the start of)
    tenant_rounds: dict[str, int] = field(default_factory=dict)


class _Interventions:
    """Counts each agent's safety interventions over an episode from the kernel Outcome of each
    round it played (``env.last_outcome``)."""

    def __init__(self, env) -> None:
        self.index = env.agent_index
        self.counts = {a: dict.fromkeys(INTERVENTIONS, 0) for a in env.possible_agents}
        self.rounds = dict.fromkeys(env.possible_agents, 0)

    def add(self, outcome, played) -> None:
        """Count the round of ``outcome`` for the agents in ``played`` (live at its start). An
        env without a kernel Outcome (a remote one) counts nothing: its rates are None, not 0."""
        if outcome is None:
            return
        flags = {k: np.asarray(getattr(outcome, f)) for k, f in INTERVENTIONS.items()}
        for a in played:
            i = self.index[a]
            self.rounds[a] += 1
            c = self.counts[a]
            for k, v in flags.items():
                c[k] += int(v[i])


def _checked_actions(source: str, env: FleetParallelEnv, actions, round_: int) -> dict:
    if not isinstance(actions, dict):
        raise PolicyError(
            source,
            f"act() returned a {type(actions).__name__} at round {round_}; expected a dict {{agent: action}} for the live agents {', '.join(env.agents)}",
        )
    for a in actions:
        if a not in env.agents:
            raise PolicyError(
                source,
                f"act() returned an action for {a!r} at round {round_}, which is not a live agent; live: {', '.join(env.agents)}. "
                "step() returns an observation for an agent on the round it finishes: act only for the agents in env.agents",
                agent=str(a),
            )
    for a in env.agents:
        if a not in actions:
            raise PolicyError(source, f"act() returned no action at round {round_}; expected one for every live agent", agent=a)
        try:
            env.check_action(a, actions[a])
        except ActionError as exc:
            raise PolicyError(
                source, f"malformed action at round {round_}: {exc.field} = {exc.value!r}; expected {exc.expected}", agent=a
            ) from None
    return actions


def _start(env, policy, seed: int, source: str) -> None:
    for k, a in enumerate(env.possible_agents):  # so action_space(a).sample(mask) is reproducible too
        env.action_space(a).seed(seed * 1_000_003 + k)
    try:
        policy.reset(seed)
    except Exception as exc:
        raise PolicyError(source, f"reset({seed}) raised {type(exc).__name__}: {exc}") from exc


def run_episode(env: FleetParallelEnv | AECEnv, policy, seed: int, source: str = "policy") -> Episode:
    """Play one episode of ``env`` with ``policy`` from ``seed``, checking every action (an
    AEC env, the sequential protocol's, through the AEC loop)."""
    if isinstance(env, AECEnv):
        return _run_turns(env, policy, seed, source)
    obs, infos = env.reset(seed=seed)
    _start(env, policy, seed, source)
    illegal = 0
    count = _Interventions(env)
    while env.agents:
        played = list(env.agents)
        try:
            actions = policy.act(obs, infos)
        except PolicyError:
            raise
        except Exception as exc:
            raise PolicyError(source, f"act() raised {type(exc).__name__} at round {env.round}: {exc}") from exc
        obs, _, _, _, infos = env.step(_checked_actions(source, env, actions, env.round))
        illegal += sum(bool(info["illegal"]) for info in infos.values())
        count.add(env.last_outcome, played)
    return _episode(env, seed, illegal, count)


def _run_turns(env: AECEnv, policy, seed: int, source: str) -> Episode:
    """The AEC loop: one turn per live tenant per round, the policy's ``act`` on that tenant's
    observation alone; each action checked before it is stepped."""
    env.reset(seed=seed)
    views = env.unwrapped  # the round, the episode reports
    _start(env, policy, seed, source)
    illegal = 0
    count = _Interventions(views)
    rounds = views.env  # the round engine (a ParallelEnv): its agents are those live at a round's start
    played = list(rounds.agents)
    for agent in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        round_ = views.round
        try:
            actions = policy.act({agent: obs}, {agent: info})
        except PolicyError:
            raise
        except Exception as exc:
            raise PolicyError(source, f"act() raised {type(exc).__name__} at round {round_}: {exc}", agent=agent) from exc
        if not isinstance(actions, dict) or agent not in actions or len(actions) != 1:
            got = type(actions).__name__ if not isinstance(actions, dict) else f"actions for {sorted(map(str, actions))}"
            raise PolicyError(
                source,
                f"act() on {agent}'s turn at round {round_} returned {got}; expected a dict with one action, for {agent} "
                "(the sequential protocol asks one tenant at a time)",
                agent=agent,
            )
        try:
            env.step(actions[agent])
        except ActionError as exc:
            raise PolicyError(
                source, f"malformed action at round {round_}: {exc.field} = {exc.value!r}; expected {exc.expected}", agent=agent
            ) from None
        if views.round != round_:  # the round cleared: its infos are every tenant's of that round
            illegal += sum(bool(i["illegal"]) for i in env.infos.values())
            count.add(views.last_outcome, played)
            played = list(rounds.agents)
    return _episode(views, seed, illegal, count)


def _episode(env, seed: int, illegal: int, count: _Interventions) -> Episode:
    reports = env.episode_reports
    last = max(reports.values(), key=lambda r: r["rounds"])  # the last to finish saw the whole episode
    return Episode(
        seed=seed,
        welfare=float(last["welfare"]),
        rounds=env.round,
        jain=float(last["jain"]),
        max_starvation_streak=max(r["max_starvation_streak"] for r in reports.values()),
        starvation_events=sum(r["starvation_events"] for r in reports.values()),
        events={k: sum(int(r[k]) for r in reports.values()) for k in EVENTS},
        illegal=illegal,
        agents={a: reports[a] for a in env.possible_agents if a in reports},
        interventions=count.counts,
        tenant_rounds=count.rounds,
    )


def intervention_rates(eps: Sequence[Episode], agent: str | None = None) -> dict[str, float | None]:
    """Safety interventions per tenant-round over the episodes ``eps`` (of one ``agent``, or
    of every tenant): each kind of ``INTERVENTIONS`` and ``total`` (every intervention, so a
    tenant-round with two counts twice); None when no tenant-round was played."""
    agents = [agent] if agent is not None else None
    n = sum(r for e in eps for a, r in e.tenant_rounds.items() if agents is None or a in agents)
    counts = {k: sum(c[k] for e in eps for a, c in e.interventions.items() if agents is None or a in agents) for k in INTERVENTIONS}
    counts["total"] = sum(counts.values())
    return {k: (v / n if n else None) for k, v in counts.items()}


def episode_means(eps: Sequence[Episode]) -> dict[str, float]:
    """The mean over the episodes ``eps`` of each one's measures: ``welfare``, ``jain``,
    ``starvation_events``, ``degenerate`` (its degenerate tenant-rounds), ``illegal`` (its masked
    choices) and ``rounds``."""
    return {
        "welfare": float(np.mean([e.welfare for e in eps])),
        "jain": float(np.mean([e.jain for e in eps])),
        "starvation_events": float(np.mean([e.starvation_events for e in eps])),
        "degenerate": float(np.mean([e.events["degenerate"] for e in eps])),
        "illegal": float(np.mean([e.illegal for e in eps])),
        "rounds": float(np.mean([e.rounds for e in eps])),
    }


def make_env(task: str, **overrides) -> FleetParallelEnv | AECEnv:
    """The evaluation env: ``task`` with ``overrides``; only the configured reward scheme is
    computed (welfare, the score's measure, does not depend on the schemes). With
    ``protocol="sequential"`` it is the AEC env (``fleet_marl.env``), else the ParallelEnv."""
    overrides.setdefault("compute_all", False)
    if overrides.get("protocol") == "sequential":
        return aec_env(task=task, **overrides)
    return parallel_env(task=task, **overrides)


__all__ = ["EVENTS", "INTERVENTIONS", "Episode", "episode_means", "intervention_rates", "make_env", "run_episode"]

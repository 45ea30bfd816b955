"""The PettingZoo environment ``fleet_v0``: tenants negotiate for one shared GPU cluster.

``FleetParallelEnv`` is a :class:`pettingzoo.ParallelEnv`; ``env()`` is its AEC form, and
``env(protocol="sequential", turn_order=...)`` the native AEC env :class:`FleetSequentialEnv`, in
which the tenants of a round claim one at a time, each observation ending with the claims
made before its turn (``CLAIM_FIELDS``; ``parallel_env`` refuses that protocol);
``vector_env(num_envs=B)`` steps B clusters as arrays (:class:`FleetVectorEnv`). All are thin
adapters over the array core (``core``: :class:`~fleet_marl.environment.core.EnvState` and
the round as functions on arrays): agent-ID dicts or arrays at the edge, the round inside. The
full reference, with every field, formula and task, is ``docs/environment.md``.

Agents
    ``tenant_0`` ... ``tenant_{N-1}``, one per ``config.tenants`` entry. Each runs a stream of
    jobs of its kind: a trainer works through training jobs one at a time (new jobs arrive by
    its workload's arrival process and queue); a server receives requests that queue FIFO.

Actions -- ``MultiDiscrete`` per tenant, ``ACTION_FIELDS``:
    ``gpus`` (0 .. max_gpus), ``bid_level`` (index into ``arbiter.bid_levels``, multipliers of
    the list price), ``precision.<group>`` for the five layer groups (index into
    ``catalog.PRECISIONS``: fp32, bf16, fp8, int8, int4) and ``batch_level`` (index into
    ``BATCH_LEVELS``: sequences per GPU per step for training, concurrent sequences for
    serving).

Action mask -- the env option ``mask_layout`` (``MASK_LAYOUTS``): ``"dims"`` (default) a
    tuple of 8 int8 arrays, one per action dimension, the layout gymnasium's
    ``MultiDiscrete.sample(mask=...)`` and PettingZoo's test suites take (a ``DimsMask``, which
    torch and numpy read through DLPack as the ``"flat"`` vector, so TorchRL's
    ``PettingZooWrapper`` takes it too); ``"flat"`` one int8 vector of length ``sum(nvec)``, the 8
    concatenated in action order, what TorchRL's ``MultiCategorical`` (and most learners) take;
    its action space samples from it too. Masked out: precisions the tenant's GPU lacks,
    INT8/INT4 for training (weight-only formats), and GPU counts the budget cannot pay for at
    the lowest bid. It is
    ``obs["action_mask"]`` in ``obs_mode="dict"`` (the observation space matches the layout),
    ``infos[agent]["action_mask"]`` in ``obs_mode="flat"`` (with ``"dict"`` the mask is in the
    observation only, PettingZoo's convention) and ``env.action_mask(agent)``. A masked
    choice sets ``infos[agent]["illegal"]`` and its fields in ``infos[agent]["illegal_fields"]``
    ((8,) bool over ``ACTION_FIELDS``): a masked precision is vetoed (the tenant runs nothing
    that round), a masked GPU count is capped at what the budget affords at the bid. With
    ``illegal_action="raise"`` either is an :class:`ActionError`.

Observations -- float32 in [0, 1], ``OBS_FIELDS`` (normalizations in the docs); with a coupling
    switch of the scenario on (``coupled(config)``) every observation ends with
    ``COUPLING_FIELDS`` (``env.obs_fields`` names an env's columns). ``state()`` is every
    tenant's ``OBS_FIELDS`` row followed by each node's temperature and each rack's power (then
    every tenant's ``COUPLING_FIELDS``, when coupled).

Rewards -- ``reward_scheme``: local, global, mixed, difference, difference_default, shapley
    (``fleet_marl.credit``). Each computed scheme's value is in ``infos[agent]["reward_<scheme>"]``
    (``env.reward_schemes``; ``scheme_rewards(info)`` gives them as a dict): by default the chosen
    scheme's and the free ``local``, ``global`` and ``mixed``; all six with ``compute_all=True``,
    only the chosen one with ``compute_all=False``. A degenerate strategy's reward is
    ``degenerate_floor``.
    ``env.credit_seconds`` is the wall time the env has spent in the credit engine (the one
    batched kernel call per round that every computed scheme needs, plus the schemes'
    arithmetic) since it was built, over all episodes, ``env.last_credit_seconds`` that of the
    last step; ``env.steps_taken`` counts the steps.

Infos -- after ``reset()`` and every ``step()`` each live agent's info has the same keys in
    the same order, each value a number or a fixed-shape array (the ``"dims"`` mask aside):
    ``reward_<scheme>`` per computed scheme, ``utility``, ``welfare``, ``requested``,
    ``alloc``, ``throttled``, ``starved``, ``starvation_streak``, ``fair_share``,
    ``degenerate`` (either of ``lowest_precision``, ``hoarding``), ``illegal``,
    ``illegal_fields``, ``action_mask`` (``obs_mode="flat"`` only), ``oom``, ``vetoed``,
    ``unsafe_numerics``, ``projected``, ``tripped``, ``restarted``, ``ttft_p50_s``,
    ``ttft_p99_s``, then what sharing the cluster cost it (``COUPLING_KEYS``: ``slowdown``,
    ``link_load``, ``restart_s``, ``power_headroom``, ``ttft_p99_over_slo``, ``restart_pending_s``, ``lost_tokens``); after ``reset()``
    all 0 / False but the mask.
    An agent's episode report (``fairness.summary()`` on the step it finished) is in
    ``env.episode_reports``, not in the infos (a key in some steps only breaks TorchRL's
    ``PettingZooWrapper``; SB3 reads ``info["episode"]`` as its own report).

Termination -- a tenant whose budget cannot pay for one GPU for one round at the lowest bid,
    or whose work is done (no job or request left, and none to come), is terminated.
    Reaching ``max_cycles`` rounds truncates everyone left. Actions for agents that already
    left this episode are ignored (PettingZoo clients send them); a name that never was an
    agent is an :class:`ActionError`. Once every agent has finished, ``step()`` returns five
    empty dicts (and warns once per episode), as PettingZoo's envs do; ``step()`` before
    ``reset()`` raises ``RuntimeError``.

Read-only views -- the scenario: ``config``, ``kernel_static``, ``bid_levels``, ``nvec``,
    ``default_action_index``, ``default_actions``, ``rounds_alone``, ``reward_schemes``; the
    episode: ``round``, ``last_outcome``, ``last_credit``, ``episode_reports``, ``node_temperatures``, ``round_state``,
    ``arrival_schedule``, ``observed_round()`` (the inverse of the observation normalization),
    ``core_state()`` (a copy of the array core's state, to branch the episode)
    and ``fairness`` (``fairness.summary()`` of the episode as of now). Render, remote clients, policies and benchmarks use
    only these.

Modules -- ``spaces`` (action and observation fields, masks, spaces, :class:`ActionError`),
    ``observations`` (the observation matrix, the state vector and their inverse),
    ``scenario`` (default actions and other static facts), ``core`` (the array core),
    ``parallel`` (:class:`FleetParallelEnv`), ``views`` (its read-only views), ``aec``
    (``env()``), ``sequential`` (:class:`FleetSequentialEnv`, the sequential protocol), ``vector`` (:class:`FleetVectorEnv`, and :class:`FleetSequentialVectorEnv`, the sequential protocol one turn per step) and ``render`` (ANSI and RGB frames).
"""

from fleet_marl.environment.aec import env, raw_env
from fleet_marl.environment.parallel import REWARD_PREFIX, FleetParallelEnv, parallel_env, scheme_rewards
from fleet_marl.environment.sequential import FleetSequentialEnv
from fleet_marl.environment.sequential_vector import FleetSequentialVectorEnv, vector_env
from fleet_marl.environment.spaces import (
    ACTION_FIELDS,
    BATCH_LEVELS,
    CLAIM_FIELDS,
    COUPLING_FIELDS,
    COUPLING_INDEX,
    MASK_LAYOUTS,
    N_ACT,
    N_CLAIM,
    N_COUPLING,
    N_OBS,
    OBS_FIELDS,
    OBS_MODES,
    SEQUENTIAL_OBS_INDEX,
    ActionError,
    coupled,
    has_claims,
    obs_fields,
)
from fleet_marl.environment.vector import FleetVectorEnv

__doc__ += "\nObservation fields (index, name, meaning)::\n\n" + "\n".join(
    f"    {i:2d}  {name:<13} {meaning}" for i, (name, meaning) in enumerate(OBS_FIELDS)
)

__all__ = [
    "ACTION_FIELDS",
    "BATCH_LEVELS",
    "CLAIM_FIELDS",
    "COUPLING_FIELDS",
    "COUPLING_INDEX",
    "MASK_LAYOUTS",
    "N_ACT",
    "N_CLAIM",
    "N_COUPLING",
    "N_OBS",
    "OBS_FIELDS",
    "OBS_MODES",
    "REWARD_PREFIX",
    "SEQUENTIAL_OBS_INDEX",
    "ActionError",
    "FleetParallelEnv",
    "FleetSequentialEnv",
    "FleetSequentialVectorEnv",
    "FleetVectorEnv",
    "coupled",
    "env",
    "has_claims",
    "obs_fields",
    "parallel_env",
    "raw_env",
    "scheme_rewards",
    "vector_env",
]

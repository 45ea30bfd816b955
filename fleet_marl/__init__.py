"""fleet_marl: a PettingZoo multi-agent environment in which tenants negotiate for one shared
GPU cluster.

>>> import fleet_marl
>>> env = fleet_marl.parallel_env(task="easy")      # PettingZoo ParallelEnv
>>> aec = fleet_marl.env(task="easy")               # its AEC form
>>> turns = fleet_marl.env(task="easy", protocol="sequential", turn_order="rotating")  # claims one at a time
>>> venv = fleet_marl.vector_env(num_envs=64, task="easy")  # 64 clusters as arrays

Layers, bottom up (docs/architecture.md): ``catalog``, ``config`` and ``traces`` (facts,
scenarios, trace readers and samples), ``workloads`` (arrival processes) and ``kernel`` (the
batched cost model, compiled), ``credit``, ``fairness`` and ``tasks`` (rewards, detectors, the
registry of named scenarios), ``environment`` (the array core and the PettingZoo and vector
APIs over it), ``policies`` (reference policies), ``evaluation`` (the
grader) and ``tools`` (estimate, sweep); the adapters ``rllib`` and ``openenv``, ``studies``
and the ``cli`` on top. See docs/environment.md for the env itself.

``parse_tenant_action(text)`` parses a tenant's action written as JSON by an LLM
(``fleet_marl.openenv.text_action``, which needs no extra; docs/llm_agents.md). The OpenEnv
server is the optional extra ``fleet_marl.openenv`` (``pip install fleet-marl[openenv]``),
whose server names load only when used. This root module only re-exports names lazily; it is
the one module the layer rules (tests/test_layers.py) leave out.

The environment names are imported lazily, so ``import fleet_marl.kernel`` does not import
PettingZoo.
"""

from fleet_marl._lazy import lazy_exports

_NAMES = {
    **dict.fromkeys(
        ("ActionError", "FleetParallelEnv", "FleetSequentialEnv", "FleetVectorEnv", "env", "parallel_env", "raw_env", "vector_env"),
        "environment",
    ),
    **dict.fromkeys(("TASKS", "make_config"), "tasks"),
    **dict.fromkeys(("parse_tenant_action", "TenantAction", "TextActionError"), "openenv.text_action"),
}

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)

__all__ = list(_NAMES)

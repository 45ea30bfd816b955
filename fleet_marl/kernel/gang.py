"""The round's gang stage, compiled: the GPUs of its grant a tenant's parallel layout can use
(``coupling.gang``; ``docs/model.md`` section 12.4), one batch row at a time, right after the
placement. With the switch off the round never calls it and every granted GPU is used.

* A **trainer** runs tensor-parallel groups of ``tensor_parallel`` GPUs, each inside one node
  (one NVLink domain: Megatron-LM's and Llama 3's layout keep the innermost parallelism inside
  a server), and data parallel (FSDP) across the groups: on each of its nodes it uses
  ``floor(GPUs there / tp) x tp`` GPUs.
* A **server** runs one tensor-parallel replica inside one node (the serving engines' custom
  all-reduce is an NVLink kernel), on the node where it holds the most GPUs (ties: the lower
  node index), at the largest degree ``d`` up to its GPUs there that vLLM accepts: ``d``
  divides the model's attention heads (``ModelConfig.verify_with_parallel_config``), and
  either divides its KV heads or is a multiple of them (``QKVParallelLinear``).

The GPUs it cannot use idle (they draw idle power only) but are paid for. The later stages read
the used GPUs (memory, throughput, activity, power, contention) where they read the grant.
"""

from __future__ import annotations

from fleet_marl.kernel.jit import jit, jit_inline
from fleet_marl.kernel.layout import T_HEADS, T_KVHEADS, T_TPAR, T_TRAIN


@jit_inline
def replica_degree(most, heads, kv_heads):
    """The largest tensor-parallel degree ``d <= most`` of a replica whose model has ``heads``
    attention heads and ``kv_heads`` KV heads that vLLM accepts (``heads % d == 0``, and ``kv_heads
    % d == 0`` or ``d % kv_heads == 0``); 0 when ``most`` is 0."""
    d = most
    while d > 1 and (heads % d != 0 or (kv_heads % d != 0 and d % kv_heads != 0)):
        d -= 1
    return d


@jit
def usable(ti, gon, t_nodes, n_nodes, used, ug, u_nodes, u_n):
    """Each tenant's usable GPUs in the row's placement ``gon`` (T, K) (its nodes
    ``t_nodes[t, :n_nodes[t]]``): per node into ``ug`` (T, K), their sum into ``used`` (T,), and
    the nodes it uses into ``u_nodes[t, :u_n[t]]`` (in the order of its nodes)."""
    T, K = gon.shape
    for t in range(T):
        for k in range(K):
            ug[t, k] = 0
        nodes = n_nodes[t]
        total = 0
        if ti[t, T_TRAIN] != 0:
            tp = ti[t, T_TPAR]
            for i in range(nodes):
                k = t_nodes[t, i]
                g = (gon[t, k] // tp) * tp
                ug[t, k] = g
                total += g
        else:
            best, most = -1, 0
            for i in range(nodes):
                k = t_nodes[t, i]
                g = gon[t, k]
                if g > most or (g == most and g > 0 and k < best):
                    best, most = k, g
            if best >= 0:
                total = replica_degree(most, ti[t, T_HEADS], ti[t, T_KVHEADS])
                ug[t, best] = total
        used[t] = total
        u_n[t] = 0
        for i in range(nodes):
            k = t_nodes[t, i]
            if ug[t, k] > 0:
                u_nodes[t, u_n[t]] = k
                u_n[t] += 1


__all__ = ["replica_degree", "usable"]

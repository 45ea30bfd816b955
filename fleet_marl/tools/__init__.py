"""Kernel tools for people sizing clusters, not training agents: ``estimate`` (one
configuration's memory, fit and throughput) and ``sweep`` (the best safe configuration of
each catalog model on each GPU type, by batched kernel search). Both sit on the kernel and
the catalog only (no env, no PettingZoo)."""

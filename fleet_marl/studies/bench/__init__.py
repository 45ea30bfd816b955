"""``fleet-marl bench``: how fast the environment, the batched kernel, training and the outside
clients are, against targets (``docs/benchmarks.md`` documents every key of its reports).

=============  ==================================================================================
``command``    the ``bench`` command: its options, and which run it makes
``suite``      the main run: its plans (full and ``--quick``), every measurement into one
               report, the report's table
``measures``   the scenario family (``bench_config``), its sizes, one function per measurement
               (VMAS and another checkout's kernel included)
``timing``     pinning to one core, RSS, pre-sampled actions, timed loops and their medians
``targets``    every run's targets and a target's verdict
``train``      ``--train``: end-to-end training throughput
``routes``     the outside clients' routes, each one's agent-steps/s
               (``python -m fleet_marl.studies.bench.routes``)
``clients``    ``--clients``: the routes and RLlib's training before and after
=============  ==================================================================================

``command`` imports the three runs (``suite``, ``train``, ``clients``, which imports ``routes``);
they import ``targets``, ``measures`` and ``timing``; ``targets`` imports ``measures``, which
imports ``timing``. No module imports one that imports it back.
"""

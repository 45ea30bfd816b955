"""fleet_marl in outside clients: one module per client, over the vector env at its speed
(``docs/environment.md``, "Outside clients").

=====================================  ==========================================================
``sb3``                                ``FleetSB3VecEnv``: the vector env as a Stable-Baselines3
                                       ``VecEnv``, one slot per tenant per cluster (``[sb3]``)
``pufferlib``                          ``FleetPufferEnv``: the vector env as a native
                                       ``pufferlib.PufferEnv`` of B*N agents (``[pufferlib]``)
``benchmarl/``                         ``FleetTask``, ``FleetMenuEnv``: fleet_marl as a BenchMARL
                                       task, a masked menu per tenant (``[benchmarl]``)
``base``                               what they share: the options' check, the vector env they
                                       open, the tenants as rows, the masks per dimension
=====================================  ==========================================================

A client module checks its extra when it is imported (a :class:`~fleet_marl.errors.MissingExtra`
naming the pip command), so ``from fleet_marl.clients.sb3 import FleetSB3VecEnv`` is the one
line that needs Stable-Baselines3; ``import fleet_marl.clients`` imports no client and no torch.

A new client is one module here (its ``check_options`` over :func:`~fleet_marl.clients.base.check_modes`,
its env over :func:`~fleet_marl.clients.base.open_vector` or :class:`~fleet_marl.clients.base.VectorClient`),
its test (``tests/test_<client>.py``) and its section in ``docs/environment.md``.
"""

"""Reference policies against the plain PettingZoo API (no Ray import).

The policies (random, greedy, fair_share, precision_expert, bidder, planner) arrive with the
environment; see the README's Status table.
"""

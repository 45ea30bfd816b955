"""``fleet-marl evaluate``: run a policy for K seeds and grade it against ``random`` and
``planner`` (:func:`fleet_marl.evaluation.evaluate`); prints the report or, with ``--json``,
the summary dict."""

from __future__ import annotations

from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.evaluation.reference import EPISODES, TASK_EPISODES, graded_episodes
from fleet_marl.evaluation.score import GraderError, evaluate
from fleet_marl.output import print_report
from fleet_marl.policies import POLICIES
from fleet_marl.tasks import PROTOCOLS, TASKS, TURN_ORDERS

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError, GraderError)

EXAMPLES = f"""examples:
  fleet-marl evaluate --task easy --policy precision_expert --episodes 10 --seed 0
  fleet-marl evaluate --task medium --policy my_policy.py --episodes 5 --json
  fleet-marl evaluate --task hard --policy mypackage.policies:MyPolicy
  fleet-marl evaluate --task easy --policy runs/train/easy-shared-mixed
  fleet-marl evaluate --task medium --policy bidder --protocol sequential --turn-order rotating

--policy takes a reference policy ({", ".join(POLICIES)}),
'package.module:Name', a path to a .py file ('my_policy.py' or 'my_policy.py:Name'), or a
fleet-marl train run folder. Name is a class or a function, called with the env; a file without
':Name' must define make_policy(env) or exactly one class with reset() and act().
score = (welfare - random's) / (planner's - random's), floored at 0 and not capped (above 1 beats
the planner), on the same seeds; gap to hindsight = (hindsight's - welfare) / (hindsight's -
random's), not clipped: the way left to the hindsight reference, the best of the grader's
searches with the episode's future in hand (docs/policies.md). --policy open_loop is the
open-loop baseline (one joint action per round, searched on seeds 1000..1009).
--protocol sequential plays every episode (the references' too) through the AEC loop, the
tenants claiming one at a time in --turn-order, each seeing the claims made before its turn.
"""


def positive(name: str, value, minimum=1) -> None:
    """A ``UsageError`` unless the option ``--name`` is an integer >= ``minimum``."""
    if value < minimum:
        raise UsageError(f"--{name} {value}: expected an integer >= {minimum}")


def add_protocol_arguments(parser) -> None:
    """``--protocol`` and ``--turn-order``, as ``evaluate``, ``baselines`` and ``demo`` take them."""
    parser.add_argument(
        "--protocol",
        default="simultaneous",
        help=f"one of {', '.join(PROTOCOLS)} (default simultaneous): sequential "
        "plays the AEC env, one tenant at a time, each seeing the claims before its turn",
    )
    parser.add_argument("--turn-order", default=None, help=f"with --protocol sequential: one of {', '.join(TURN_ORDERS)} (default fixed)")


def protocol_overrides(args) -> dict:
    """The env overrides of ``--protocol`` / ``--turn-order`` (checked; a ``UsageError`` names a
    bad one): ``{}`` for the simultaneous protocol, else ``protocol`` and ``turn_order``."""
    protocol, turn_order = getattr(args, "protocol", "simultaneous"), getattr(args, "turn_order", None)
    if protocol not in PROTOCOLS:
        raise UsageError(f"--protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if turn_order is not None and turn_order not in TURN_ORDERS:
        raise UsageError(f"--turn-order {turn_order!r}: expected one of {', '.join(TURN_ORDERS)}")
    if turn_order is not None and protocol != "sequential":
        raise UsageError(
            f"--turn-order {turn_order}: only with --protocol sequential (under the simultaneous protocol every tenant acts at once)"
        )
    if protocol == "sequential":
        return {"protocol": protocol, "turn_order": turn_order or "fixed"}
    return {}


def add_arguments(parser) -> None:
    parser.add_argument("--task", default="easy", help=f"one of {', '.join(TASKS)} (default easy)")
    parser.add_argument(
        "--policy",
        default="precision_expert",
        help="reference policy name, module:Name, path.py[:Name] or a fleet-marl train run folder (default precision_expert)",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=None,
        help=f"episodes, one per seed (default {EPISODES}; " + ", ".join(f"{n} on {t}" for t, n in TASK_EPISODES.items()) + ")",
    )
    parser.add_argument("--seed", type=int, default=0, help="first seed; episodes use seed .. seed+episodes-1 (default 0)")
    add_protocol_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-cache", action="store_true", help="recompute the reference episodes instead of reading the cache")


def print_evaluation(s: dict) -> None:
    seeds = s["seeds"]
    protocol = s.get("protocol", "simultaneous") + (f", turn order {s['turn_order']}" if s.get("turn_order") else "")
    print(
        f"fleet-marl evaluate: task {s['task']}, policy {s['policy']}, {s['episodes']} episodes (seeds {seeds[0]}..{seeds[-1]}), protocol {protocol}"
    )
    print(
        f"welfare   {s['welfare_mean']:.2f} ± {s['welfare_std']:.2f}   (random {s['random_welfare_mean']:.2f}, planner {s['reference_welfare_mean']:.2f})"
    )
    rate = s["intervention_rate"]
    if rate["total"] is not None:
        kinds = "   ".join(f"{k.replace('_', ' ')} {rate[k]:.3f}" for k in rate if k != "total")
        print(f"safety    {rate['total']:.3f} interventions per tenant-round   ({kinds})")
    print(f"score     {s['score']:.3f}")
    if s["gap_to_hindsight"] is not None:
        print(f"gap       {s['gap_to_hindsight']:.3f} to hindsight ({s['hindsight_welfare_mean']:.2f}; 0 = as good, 1 = random)")
    rho = "-" if s["rho_mean"] is None else f"{s['rho_mean']:.2f}"
    wait = "-" if s["p99_wait_s_max"] is None else f"{s['p99_wait_s_max']:.0f} s"
    print(
        f"fairness  Jain {s['jain_mean']:.3f}   max starvation streak {s['max_starvation_streak']}   starvation events {s['starvation_events']}   Themis rho {rho}   p99 wait {wait}"
    )
    print(
        f"events    oom {s['oom']}   veto {s['veto']}   throttle {s['throttle']}   degenerate {s['degenerate']}   illegal {s['illegal']}   (summed over tenants and episodes)"
    )
    print()
    print(
        f"{'agent':<10} {'return':>9} {'utility':>9} {'service':>8} {'jobs':>5} {'starved':>8} {'degenerate':>10} {'interventions':>13}   "
        "(means over episodes; counts summed; interventions per round played)"
    )
    for a, r in s["agents"].items():
        rate = "-" if r["intervention_rate"] is None else f"{r['intervention_rate']:.3f}"
        print(
            f"{a:<10} {r['return_mean']:>9.2f} {r['utility_mean']:>9.2f} {r['service_mean']:>8.2f} {r['jobs_done']:>5} {r['starvation_events']:>8} {r['degenerate']:>10} {rate:>13}"
        )


def run(args) -> int:
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    if args.episodes is None:
        args.episodes = graded_episodes(args.task)
    positive("episodes", args.episodes)
    positive("seed", args.seed, 0)
    overrides = protocol_overrides(args)
    s = evaluate(
        args.task, args.policy, episodes=args.episodes, seed=args.seed, overrides=overrides, progress=True, cache=not args.no_cache
    ).summary()
    return print_report(s, args.json, print_evaluation)


__all__ = ["EXAMPLES", "add_arguments", "add_protocol_arguments", "positive", "print_evaluation", "protocol_overrides", "run"]

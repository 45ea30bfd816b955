"""What each coupling mechanism of a task contributes (``fleet-marl coupling --ablate``).

A task is measured (:func:`fleet_marl.studies.coupling.measure`) with everything it turns on,
then once more with each mechanism off in turn, the rest as they were, on the same seeds and
settings:

* each switch of ``coupling`` the task turns on (``contention``, ``queueing``,
  ``persistent_placement``, ``gang``), set to ``False``;
* **power**, when a rack's GPU power cap is below the TDP of the GPUs it holds: the cap raised
  to the largest rack's TDP sum, so that no rack's cap can bind (the nodes' heat is left as it
  is).

An ablated row is the measure's row with ``ablated`` naming what was turned off. What a
mechanism contributes is the change it makes: the externality share ``Σ|D − L| / Σ|L|`` and the
selfish/team welfare ratio with everything on, against the same with it off
(:func:`contributions`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from fleet_marl import catalog
from fleet_marl.config import CouplingSpec
from fleet_marl.studies.coupling import Settings, measure
from fleet_marl.tasks import make_config, task_dict

#: The switches of ``coupling`` an ablation turns off, in this order (the fields of CouplingSpec).
SWITCHES = tuple(CouplingSpec.__dataclass_fields__)
#: The name of the power ablation (the rack cap raised to the TDP sum).
POWER = "power"


def tdp_sum(config: dict) -> float:
    """The largest TDP sum of one rack's GPUs (W) in the plain-dict ``config``."""
    cl = make_config(config=config)[0].cluster
    per_node = [catalog.gpu(g).tdp_w * cl.gpus_per_node for g in cl.gpu_types]
    racks = [per_node[k : k + cl.nodes_per_rack] for k in range(0, len(per_node), cl.nodes_per_rack)]
    return float(max(sum(r) for r in racks))


def variants(task: str) -> list[tuple[str, dict]]:
    """``(mechanism, config)`` for each mechanism of ``task`` turned off in turn (the module docstring)."""
    base = task_dict(task)
    on = make_config(config=base)[0].coupling
    out = []
    for name in SWITCHES:
        if getattr(on, name):
            cfg = copy.deepcopy(base)
            cfg.setdefault("coupling", {})[name] = False
            out.append((name, cfg))
    cap, full = make_config(config=base)[0].cluster.rack_power_cap_w, tdp_sum(base)
    if cap < full:
        cfg = copy.deepcopy(base)
        cfg["cluster"]["rack_power_cap_w"] = full
        out.append((POWER, cfg))
    return out


def ablate(task: str, policy, settings: Settings, progress: Callable[[], None] | None = None) -> list[dict]:
    """A row of :func:`measure` for each of ``task``'s mechanisms turned off in turn, under ``policy``."""
    rows = []
    for name, cfg in variants(task):
        row = measure(cfg, policy, settings, progress)
        rows.append({**row, "task": task, "ablated": name})
    return rows


def contributions(rows: list[dict], ablated: list[dict]) -> list[dict]:
    """For each ablated row, what its mechanism contributes: the externality share and the
    selfish/team ratio of the task and policy with every mechanism on (from ``rows``) and with
    it off."""
    full = {(r["task"], r["policy"]): r for r in rows}
    out = []
    for a in ablated:
        f = full[(a["task"], a["policy"])]
        ratio = lambda r: None if r["equilibrium"] is None else r["equilibrium"]["ratio"]  # noqa: E731
        out.append(
            {
                "task": a["task"],
                "policy": a["policy"],
                "off": a["ablated"],
                "share_on": f["externality_share"],
                "share_off": a["externality_share"],
                "ratio_on": ratio(f),
                "ratio_off": ratio(a),
            }
        )
    return out


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def markdown(contribs: list[dict]) -> str:
    """The table of :func:`contributions`."""
    out = [
        "| task | policy | turned off | Σ\\|D − L\\| / Σ\\|L\\| on → off | selfish / team welfare on → off |",
        "|---|---|---|---|---|",
    ]
    for c in contribs:
        out.append(
            f"| {c['task']} | {c['policy']} | {c['off']} | {c['share_on']:.3f} → {c['share_off']:.3f} "
            f"| {_num(c['ratio_on'])} → {_num(c['ratio_off'])} |"
        )
    return "\n".join(out)


__all__ = ["POWER", "SWITCHES", "ablate", "contributions", "markdown", "tdp_sum", "variants"]

"""The protocol study: the reference policies under the simultaneous and the sequential
protocols, on the same seeds.

For each task, policy and protocol it plays ``seeds`` episodes (the sequential protocol with
``turn_order``, default ``rotating``, so that every tenant claims at every place in turn) and
measures, per episode:

* ``welfare``: the episode's welfare ``sum_t G_t`` (the grader's measure);
* ``jain``: Jain's index of the episode report of the last tenant to finish;
* ``oversubscribed``: the share of rounds in which some pool was asked for more GPUs than it
  has (the kernel's ``requested``, after the budget caps, of the live tenants);
* ``price``: the price paid per GPU-hour as a multiple of the list price, GPU-weighted over the
  episode (what the GPUs cost, not what was bid);
* ``utility by place``: a tenant's utility in a round by its place in that round's order,
  grouped into quarters of the order (Q1 claims first). Under the simultaneous protocol the
  place is the one the rotating order would have given it (a function of the round and the
  tenant only; index order for any other ``turn_order``): a placebo, whose quarters differ
  only by noise.

Every figure is a mean over episodes with a 95% interval (1.96 standard errors of the
episodes' means); ``Δ welfare`` is the sequential protocol's welfare minus the simultaneous
one's, paired by seed.

Trained policies (``--run PROTOCOL=PATH``, one task): a run trained under a protocol (``fleet-marl
train``, either engine) plays that protocol on the same seeds as the references and adds a row
``trained`` in the same columns; with a run for each protocol, the sequential row's ``Δ welfare``
is against the simultaneous run's, paired by seed (each protocol with the policy trained for it).
A run trained on another task or under the other protocol is refused by name before any
episode is played (the grader's check, ``fleet_marl.training.check_trained_on``).

How to run::

    python -m fleet_marl.studies.protocols --tasks medium hard --seeds 10 > table.md
    python -m fleet_marl.studies.protocols --tasks medium --seeds 10 --policies \
        --run simultaneous=runs/train/medium-shared-difference-torchrl \
        --run sequential=runs/train/medium-shared-difference-sequential-torchrl > trained.md

(``--policies`` with no names: the trained rows alone.) ``--docs`` also saves the rows in
``docs/data/protocols/`` (:func:`save`) and publishes the docs (:mod:`fleet_marl.studies.publish`,
which renders the blocks of ``docs/results.md`` from those files: :func:`block`, :func:`blocks`).

Results to expect: docs/results.md, "The sequential protocol".
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import fleet_marl
from fleet_marl.errors import UsageError
from fleet_marl.evaluation.loading import PolicyError, load_policy
from fleet_marl.policies import POLICIES
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.tasks import PROTOCOLS, TASKS

#: The places in the order are grouped into this many quarters (Q1 first).
QUARTERS = 4
#: The reference policies the study plays (the hindsight reference reads the simultaneous
#: protocol's future draws: it is the grader's yardstick, not a policy of either protocol).
REFERENCES = tuple(p for p in POLICIES if p != "hindsight")
#: Where ``--docs`` puts the rows (one file per table: ``references``, ``trained_<task>``),
#: relative to the checkout, and the markers of the two blocks of ``docs/results.md``.
DATA = "docs/data/protocols"
DOC = "docs/results.md"
BLOCKS = {kind: (f"<!-- protocols-{kind}:start -->", f"<!-- protocols-{kind}:end -->") for kind in ("references", "trained")}


@dataclass
class EpisodeStats:
    welfare: float
    jain: float
    oversubscribed: float
    price: float
    by_quarter: list[float] = field(default_factory=list)  # mean utility per round at each quarter of the order (nan: none)


def _rotating(possible: list[str], live: list[str], round_: int) -> list[str]:
    T = len(possible)
    alive = set(live)
    return [possible[(round_ + k) % T] for k in range(T) if possible[(round_ + k) % T] in alive]


def _round_stats(env, order: list[str], util: list[list[float]], over: list[bool], paid: list[float], gpu_hours: list[float]) -> None:
    """Add the round just cleared (``env.last_outcome``) to the episode's sums; ``order`` the
    round's order of live tenants."""
    o, st = env.last_outcome, env.kernel_static
    idx = [env.agent_index[a] for a in order]
    req = np.zeros(len(st.pool_capacity))
    np.add.at(req, st.pool[idx], np.asarray(o.requested)[idx])
    over.append(bool((req > st.pool_capacity).any()))
    alloc = np.asarray(o.alloc, np.float64)[idx]
    paid.append(float(np.sum(alloc * np.asarray(o.price)[idx])))
    gpu_hours.append(float(np.sum(alloc * st.list_price[idx])))
    n = len(order)
    for k, i in enumerate(idx):
        util[min(QUARTERS * k // max(n, 1), QUARTERS - 1)].append(float(o.utility[i]))


def _env(task: str, protocol: str, turn_order: str):
    if protocol == "sequential":
        return fleet_marl.env(task=task, protocol="sequential", turn_order=turn_order, compute_all=False)
    return fleet_marl.parallel_env(task=task, compute_all=False)


def episode(task: str, policy: str, seed: int, protocol: str, turn_order: str = "rotating") -> EpisodeStats:
    """One episode of ``policy`` (a reference policy's name, or any spec the grader loads: a
    trained run's folder, ...) on ``task`` under ``protocol``, measured."""
    util: list[list[float]] = [[] for _ in range(QUARTERS)]
    over: list[bool] = []
    paid: list[float] = []
    gpu_hours: list[float] = []
    welfare = 0.0
    if protocol == "sequential":
        aec = _env(task, protocol, turn_order)
        u = aec.unwrapped
        pol = load_policy(policy, aec)
        aec.reset(seed=seed)
        pol.reset(seed)
        order, r = u.turn_sequence, 0
        for agent in aec.agent_iter():
            obs, _, term, trunc, info = aec.last()
            if term or trunc:
                aec.step(None)
                continue
            aec.step(pol.act({agent: obs}, {agent: info})[agent])
            if u.round != r:  # the round cleared
                _round_stats(u, order, util, over, paid, gpu_hours)
                welfare += u.last_credit.welfare
                r = u.round
                order = u.turn_sequence
        reports = u.episode_reports
    else:
        env = _env(task, protocol, turn_order)
        pol = load_policy(policy, env)
        obs, infos = env.reset(seed=seed)
        pol.reset(seed)
        while env.agents:
            order = _rotating(env.possible_agents, env.agents, env.round) if turn_order == "rotating" else list(env.agents)
            obs, _, _, _, infos = env.step(pol.act(obs, infos))
            _round_stats(env, order, util, over, paid, gpu_hours)
            welfare += env.last_credit.welfare
        reports = env.episode_reports
    last = max(reports.values(), key=lambda rep: rep["rounds"])
    return EpisodeStats(
        welfare=welfare,
        jain=float(last["jain"]),
        oversubscribed=float(np.mean(over)),
        price=sum(paid) / max(sum(gpu_hours), 1e-12),
        by_quarter=[float(np.mean(q)) if q else float("nan") for q in util],
    )


def _ci(xs) -> tuple[float, float]:
    x = np.asarray([v for v in xs if np.isfinite(v)], np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else float("nan")
    return float(x.mean()), float(half)


class StudyError(ValueError):
    """A bad option of the protocol study (``--run``), naming it and what was expected."""


def check_runs(tasks, runs: dict[str, str] | None, turn_order: str = "rotating") -> None:
    """``runs`` ({protocol: run folder}) need one task, known protocols, and each run trained on
    that task under that protocol (loaded once here, so a bad one is refused before any episode)."""
    if not runs:
        return
    if len(tasks) != 1:
        raise StudyError(f"--run with tasks = {list(tasks)!r}: expected one task (--tasks TASK), the one the runs were trained on")
    for protocol, path in runs.items():
        if protocol not in PROTOCOLS:
            raise StudyError(f"--run {protocol}={path}: protocol = {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        try:
            load_policy(path, _env(tasks[0], protocol, turn_order))
        except PolicyError as exc:
            raise StudyError(f"--run {protocol}={path}: {exc}") from None


def study(tasks, policies, seeds, turn_order: str = "rotating", progress=None, runs: dict[str, str] | None = None) -> list[dict]:
    """Rows ``{task, policy, protocol, <measure>: (mean, half-width)}`` over ``seeds``: each
    reference policy under both protocols, then (``runs``, {protocol: run folder}, one task) a
    ``trained`` row per run under the protocol it was trained on."""
    check_runs(tasks, runs, turn_order)
    rows = []
    plan = [(task, policy, [(p, policy) for p in ("simultaneous", "sequential")]) for task in tasks for policy in policies]
    if runs:
        plan.append((tasks[0], "trained", [(p, runs[p]) for p in ("simultaneous", "sequential") if p in runs]))
    for task, label, arms in plan:
        blind = None
        for protocol, policy in arms:
            eps = [episode(task, policy, int(s), protocol, turn_order) for s in seeds]
            row = {"task": task, "policy": label, "protocol": protocol, "episodes": len(eps)}
            if blind is None:
                blind = [e.welfare for e in eps]
                row["delta_welfare"] = None
            else:
                row["delta_welfare"] = _ci([e.welfare - w for e, w in zip(eps, blind, strict=True)])
            for k in ("welfare", "jain", "oversubscribed", "price"):
                row[k] = _ci([getattr(e, k) for e in eps])
            row["by_quarter"] = [_ci([e.by_quarter[q] for e in eps]) for q in range(QUARTERS)]
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def _f(ci: tuple[float, float], nd: int) -> str:
    m, h = ci
    return f"{m:.{nd}f} ± {h:.{nd}f}"


def markdown(rows: list[dict]) -> str:
    """The two tables: the measures, then utility by place in the order."""
    out = [
        "| task | policy | protocol | welfare | Δ welfare (paired) | Jain | oversubscribed rounds | price paid (x list) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        delta = "" if r.get("delta_welfare") is None else _f(r["delta_welfare"], 1)
        out.append(
            f"| {r['task']} | {r['policy']} | {r['protocol']} | {_f(r['welfare'], 1)} | {delta} | {_f(r['jain'], 3)} | "
            f"{_f(tuple(100 * v for v in r['oversubscribed']), 1)} % | {_f(r['price'], 3)} |"
        )
    out += [
        "",
        "| task | policy | protocol | " + " | ".join(f"utility Q{q + 1}" for q in range(QUARTERS)) + " |",
        "|---|---|---|" + "---|" * QUARTERS,
    ]
    for r in rows:
        out.append(f"| {r['task']} | {r['policy']} | {r['protocol']} | " + " | ".join(_f(c, 3) for c in r["by_quarter"]) + " |")
    return "\n".join(out)


def save(rows: list[dict], argv: list[str], root: str | Path) -> Path:
    """Write ``rows`` and the command that made them (``argv``) to the checkout ``root``'s
    :data:`DATA`: ``references.json`` for the reference policies' table, ``trained_<task>.json``
    for a task's trained rows."""
    trained = [r for r in rows if r["policy"] == "trained"]
    name = f"trained_{trained[0]['task']}" if trained else "references"
    path = Path(root) / DATA / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m fleet_marl.studies.protocols " + " ".join(shlex.quote(a) for a in argv if a != "--docs")
    path.write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    return path


def block(kind: str, root: str | Path) -> str:
    """The ``kind`` block (``references`` or ``trained``) of :data:`DOC`, rendered from the data
    files under ``root`` (every task's trained rows, in the order of :data:`~fleet_marl.tasks.TASKS`)."""
    d = Path(root) / DATA
    files = (
        [d / "references.json"] if kind == "references" else sorted(d.glob("trained_*.json"), key=lambda p: list(TASKS).index(p.stem[8:]))
    )
    recs = [json.loads(f.read_text()) for f in files if f.is_file()]
    start, end = BLOCKS[kind]
    commands = "\n".join(r["command"] for r in recs)
    rows = [row for r in recs for row in r["rows"]]
    return (
        f"{start}\n<!-- written by `python -m fleet_marl.studies.protocols ... --docs` from {DATA}/; edit the text around it, "
        f"not this block -->\n\n```bash\n{commands}\n```\n\n{markdown(rows)}\n{end}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """The blocks of :data:`DOC` whose data is under ``root`` (for the publisher, :mod:`fleet_marl.studies.publish`)."""
    d = Path(root) / DATA
    kinds = [k for k, pattern in (("references", "references.json"), ("trained", "trained_*.json")) if any(d.glob(pattern))]
    return [(DOC, *BLOCKS[kind], block(kind, root)) for kind in kinds]


def write_docs(rows: list[dict], argv: list[str], root: str | Path) -> Path:
    """Save ``rows`` (:func:`save`) and publish the docs under ``root`` from the data (:func:`fleet_marl.studies.publish.publish`)."""
    saved = save(rows, argv, root)
    publish(root, echo=lambda m: print(m, file=sys.stderr))
    return saved


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fleet_marl.studies.protocols", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["medium", "hard"])
    p.add_argument(
        "--policies",
        nargs="*",
        default=list(REFERENCES),
        help="reference policies (default: all); give none (--policies with no names) for the trained rows alone",
    )
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--turn-order", default="rotating")
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="PROTOCOL=PATH",
        help="a trained run (fleet-marl train, either engine) for the 'trained' row under PROTOCOL (simultaneous or sequential); "
        "repeat for the other protocol; needs one --tasks",
    )
    p.add_argument("--docs", action="store_true", help=f"also save the rows in {DATA}/ and write their block of {DOC}")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(argv)
    runs = {}
    for spec in a.run:
        protocol, sep, path = spec.partition("=")
        if not sep or not path:
            p.error(f"--run {spec!r}: expected PROTOCOL=PATH, e.g. sequential=runs/train/medium-shared-difference-sequential-torchrl")
        if protocol in runs:
            p.error(f"--run {spec!r}: a second run for protocol {protocol!r}; give one per protocol")
        runs[protocol] = path
    unknown = [x for x in a.policies if x not in REFERENCES]
    if unknown:
        p.error(f"--policies {' '.join(unknown)}: expected names from {', '.join(REFERENCES)}")
    if a.docs and a.policies and runs:
        p.error("--docs with reference policies and --run: the two go to separate tables; run them separately")
    if not a.policies and not runs:
        p.error("--policies with no names and no --run: nothing to play (give reference policies, a --run, or both)")
    try:
        check_runs(a.tasks, runs, a.turn_order)
    except StudyError as exc:
        p.error(str(exc))
    rows = study(
        a.tasks,
        a.policies,
        range(a.seeds),
        a.turn_order,
        runs=runs,
        progress=lambda r: print(f"{r['task']} {r['policy']} {r['protocol']}: welfare {_f(r['welfare'], 1)}", file=sys.stderr, flush=True),
    )
    print(markdown(rows))
    if a.docs:
        try:
            root = checkout_root("--docs")
        except UsageError as exc:
            p.error(f"{exc}; drop --docs")
        print(f"wrote {write_docs(rows, argv, root)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "BLOCKS",
    "DATA",
    "DOC",
    "QUARTERS",
    "REFERENCES",
    "EpisodeStats",
    "StudyError",
    "block",
    "blocks",
    "check_runs",
    "episode",
    "markdown",
    "save",
    "study",
    "write_docs",
]

"""The credit-assignment study's report: ``summary.md`` and the plots in the study folder
(:func:`report`), and its blocks of ``docs/credit_assignment.md``: :func:`write_docs`
(``fleet-marl compare --report --docs``) saves a study's CSVs under ``docs/data/`` and its plots
under ``docs/img/``, then publishes the docs; :func:`blocks` renders every committed study's
block from its data alone (for ``fleet-marl docs``, :mod:`fleet_marl.studies.publish`).

=====================  ========================================================================
:func:`report`         ``summary.md`` and the plots: the verdicts and the tables of
                       :mod:`~fleet_marl.studies.credit.torchrl_tables` (:func:`text`)
:func:`write_docs`     the study's CSVs into ``docs/data/...``, its plots into ``docs/img/``,
                       then every block from the data (where: :func:`docs_targets`)
:func:`block`          a committed study's block, with the command that reproduces it
:func:`command`        that command, for a study's settings
=====================  ========================================================================

The first study's blocks (RLlib, retired to its data) are :mod:`~fleet_marl.studies.credit.first_study`'s.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_marl.errors import UsageError
from fleet_marl.studies import store
from fleet_marl.studies.credit import plots
from fleet_marl.studies.credit import torchrl_tables as tt
from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.credit.torchrl_tables import select, settings_of, value
from fleet_marl.studies.publish import checkout_root, publish
from fleet_marl.studies.store import StudyError

DOC = "docs/credit_assignment.md"
#: The committed data of the study at its default N (the main block's).
MAIN_DATA = "docs/data/credit_study"
#: The markers of the main block in :data:`DOC`.
MARKERS = ("<!-- credit-study:start -->", "<!-- credit-study:end -->")
#: What a committed study's data folder records of where it ran (``{"out": folder}``), for its reproducing command.
PUBLISHED = "published.json"


def load(out: str | Path) -> dict:
    """The study in ``out``: its settings, results, curves and sessions (refused when empty)."""
    out = Path(out)
    rows = store.read_rows(out / "results.csv")
    if not rows:
        raise StudyError(f"--out {str(out)!r}: no finished runs in results.csv yet; run the study first")
    settings = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
    return {
        "out": out,
        "settings": settings,
        "rows": rows,
        "curves": store.read_rows(out / "curves.csv"),
        "sessions": store.read_rows(out / "sessions.csv"),
    }


def report(out: str | Path, echo: Callable[..., Any] = print) -> dict:
    """``summary.md`` and the plots of the study in ``out``, into the study folder; returns what it wrote."""
    data = load(out)
    if "families" in data["settings"]:  # study.json of a study on the suite (fleet_marl.studies.credit.suite_report)
        raise StudyError(f"--out {str(out)!r} holds the study on the suite: add --suite to report it")
    img = torchrl_plots(data, data["out"])
    body = text(data, img)
    path = data["out"] / "summary.md"
    engine = data["settings"].get("engine", "torchrl")  # study.json names the engine when it is not the default
    name = {"torchrl": "TorchRL", "rllib": "RLlib"}.get(engine, engine)
    path.write_text(f"# Credit-assignment study ({name}): {data['out']}\n\n{body}")
    echo(body + f"\nwrote {path}" + "".join(f", {p}" for p in img.values()))
    return {"summary": path, "plots": img, "text": body, "verdicts": tt.verdicts(data["rows"])}


def write_docs(
    out: str | Path,
    root: str | Path | None = None,
    echo: Callable[..., Any] = print,
    allow_quick: bool = False,
    run_out: str | Path | None = None,
) -> Path:
    """Save the study in ``out`` into the checkout's docs: its CSVs into its data folder (where:
    :func:`docs_targets`) with the folder the reproducing command names (``run_out``, default
    ``out``: the study ran there), its plots into ``docs/img/``; then publish every block of the
    docs from the data (:func:`fleet_marl.studies.publish.publish`). A ``--quick`` study is
    refused (it would replace the full study's numbers) unless ``allow_quick``, and so is a
    study run on another engine than the default (``study.json`` names it)."""
    try:
        root = Path(root) if root else checkout_root("--docs")
    except UsageError as exc:
        raise StudyError(f"{exc}; drop --docs") from None
    out = Path(out)
    if not (out / "study.json").is_file():
        raise StudyError(f"--out {str(out)!r}: no study.json; --docs needs a study run by fleet-marl compare")
    settings = json.loads((out / "study.json").read_text())
    if "families" in settings:
        raise StudyError(
            f"--docs with the study on the suite in {str(out)!r}: it is not published yet; drop --docs (the report is in the study folder)"
        )
    if "engine" in settings:
        raise StudyError(
            f"--docs with the study in {str(out)!r}, run on {settings['engine']}: the docs publish the study's runs on the "
            "default engine; drop --docs (the report is in the study folder)"
        )
    if "--quick" in command(settings).split() and not allow_quick:
        raise StudyError(
            f"--docs with the quick study in {str(out)!r}: its numbers mean nothing and would replace the full study's "
            "in docs/; drop --docs (the report is in the study folder)"
        )
    where = docs_targets(settings)
    dest = root / where["data"]
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "curves.csv", "study.json", "sessions.csv"):
        if (out / name).is_file() and (out / name).resolve() != (dest / name).resolve():
            shutil.copyfile(out / name, dest / name)
    (dest / PUBLISHED).write_text(json.dumps({"out": Path(run_out or out).as_posix()}, indent=1) + "\n")
    torchrl_plots(load(dest), root / "docs" / "img", where["prefix"])
    publish(root, echo=echo)
    echo(f"wrote {dest}/ and docs/img/{where['prefix']}*.png")
    return root / DOC


def _study(settings: dict) -> Study:
    fields = Study.__dataclass_fields__
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in fields}
    return Study(**values)


def text(data: dict, img: dict[str, Path], img_link: Callable[[Path], str] = lambda p: p.name) -> str:
    """The TorchRL study's whole report (Markdown); ``img`` maps a plot's name to its file."""
    settings, sessions = data["settings"], data["sessions"]
    study = _study(settings)
    rows = tt.with_convergence(data["rows"], study.converge_tol)  # the rule is the report's, whatever the CSV holds
    expected = len(study.runs())
    wall = sum(value(s, "wall_seconds") for s in sessions)
    cpu = sum(value(r, "run_seconds") for r in rows)
    budgets = ", ".join(f"N={n}: {study.env_steps('scaling', n):,}" for n in sorted(study.ns))
    sb = ", ".join(f"{t} (N={study.task_n(t)}): {study.env_steps('sharing', study.task_n(t)):,}" for t in study.sharing_tasks)
    skipped = study.skipped()
    parts = [
        f"{len(rows)} of {expected} runs finished"
        + ("" if len(rows) >= expected else " (the study is not complete: every number below is from the runs so far)")
        + f". {cpu / 3600:.2f} CPU-hours of runs; {wall / 3600:.2f} hours of wall time over {len(sessions)} session(s) of "
        f"`fleet-marl compare` with {', '.join(sorted({s['jobs'] for s in sessions}))} job(s). Code: {sessions[-1]['version'] if sessions else '?'}.",
        f"\nEnv-step budget per run (every arm the same at an N): scaling {budgets}; sharing {sb}. That is "
        f"{study.iterations * study.agents_per_step * study.rollout:,} agent steps per scaling run, "
        f"{study.sharing_iterations * study.agents_per_step * study.rollout:,} per sharing run. {study.seeds} seeds; "
        f"{study.episodes} grader episodes at {', '.join(f'{f:.0%}' for f in study.eval_fractions)} of each budget.",
    ]
    if skipped:
        parts.append(
            f"\nNot run: `shapley` at N = {', '.join(sorted({str(s[2]) for s in skipped}, key=int))} "
            f"(``shapley_max_n`` = {study.shapley_max_n}; the reward-cost table below says why)."
        )
    vs = tt.verdicts(rows)
    parts += [
        "\n### Verdicts\n",
        tt.verdict_table(vs),
        "\n### Scaling: summary (mean ± 95% interval across seeds)\n",
        tt.summary_table(rows, "scaling"),
        "\n### Scaling: each arm against `difference`, paired by seed\n",
        tt.paired_table(rows, "scaling"),
    ]
    for s in settings_of(rows, "scaling"):
        if f"scaling_{s}" in img:
            parts.append(f"\n![score against N, {s}]({img_link(img[f'scaling_{s}'])})")
        if f"curves_{s}" in img:
            parts.append(f"\n![learning curves, {s}]({img_link(img[f'curves_{s}'])})")
    parts += ["\n### What the reward costs (the env's credit engine, ms per env step, mean over runs)\n", tt.cost_table(rows, skipped)]
    if select(rows, "sharing"):
        parts += [
            "\n### Sharing schemes under `difference` (mean ± 95% interval across seeds)\n",
            tt.summary_table(rows, "sharing"),
            "\n### Sharing schemes against `shared`, paired by seed\n",
            tt.paired_table(rows, "sharing"),
        ]
        if "sharing" in img:
            parts.append(f"\n![sharing schemes]({img_link(img['sharing'])})")
    parts += ["\n### Convergence\n", tt.unconverged_table(rows, study.converge_tol)]
    return "\n".join(parts) + "\n"


def plot_names(data: dict, img_dir: Path, prefix: str = "") -> dict[str, Path]:
    """The plots :func:`torchrl_plots` draws of ``data`` (without drawing them): plot name -> file."""
    rows, curves = data["rows"], data["curves"]
    out: dict[str, Path] = {}
    for s in settings_of(rows, "scaling"):
        if select(rows, "scaling", s):
            out[f"scaling_{s}"] = img_dir / f"{prefix}scaling_{s}.png"
        if any(c["part"] == "scaling" and c["setting"] == s for c in curves):
            out[f"curves_{s}"] = img_dir / f"{prefix}curves_{s}.png"
    if select(rows, "sharing"):
        out["sharing"] = img_dir / f"{prefix}sharing.png"
    return out


def torchrl_plots(data: dict, img_dir: Path, prefix: str = "") -> dict[str, Path]:
    """The TorchRL study's plots in ``img_dir`` (names starting with ``prefix``): plot name -> file."""
    rows, curves = data["rows"], data["curves"]
    out: dict[str, Path] = {}
    for s in settings_of(rows, "scaling"):
        for name, fn, arg in ((f"scaling_{s}", plots.plot_scaling, rows), (f"curves_{s}", plots.plot_curves, curves)):
            p = fn(arg, s, img_dir / f"{prefix}{name}.png")
            if p:
                out[name] = p
    p = plots.plot_sharing(rows, img_dir / f"{prefix}sharing.png")
    if p:
        out["sharing"] = p
    return out


#: The TorchRL study's settings that ``fleet-marl compare`` takes as options: key -> (flag, how to write it).
FLAGS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "ns": ("--n", lambda v: ",".join(map(str, v))),
    "arms": ("--arms", ",".join),
    "mechanisms": ("--mechanisms", ",".join),
    "iterations": ("--iterations", str),
    "seeds": ("--seeds", str),
    "episodes": ("--episodes", str),
    "device": ("--device", str),
}


def command(settings: dict, out: str | Path | None = None) -> str:
    """The ``fleet-marl compare`` command that runs the study of ``settings`` (its study.json;
    ``out``: its folder, when not the default); settings that no option takes are named, to be
    set from Python; the engine (``study.json``'s ``engine``, when not the default) as ``--engine``."""
    out = None if out is None else Path(out).as_posix()
    suffix = f" --out {out}" if out else ""
    head = "fleet-marl compare" + (f" --engine {settings['engine']}" if "engine" in settings else "")
    settings = {k: v for k, v in settings.items() if k != "engine"}
    if settings == Study.quick().settings():
        return head + " --quick" + suffix
    base = Study().settings()
    norm = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}
    parts = [head] + [f"{flag} {fmt(norm[k])}" for k, (flag, fmt) in FLAGS.items() if k in norm and norm[k] != base[k]]
    rest = {k: v for k, v in norm.items() if k not in FLAGS and base.get(k) != v}
    text = " ".join(parts) + suffix
    return text + (", with Study(" + ", ".join(f"{k}={v!r}" for k, v in rest.items()) + ") from Python" if rest else "")


def block(data_dir: Path, root: Path) -> str:
    """The block of the committed study in ``data_dir`` (under the checkout ``root``), from its
    data alone: its CSVs, ``study.json`` and :data:`PUBLISHED` (the folder its command names)."""
    data = load(data_dir)
    settings = data["settings"]
    where = docs_targets(settings)
    start, end, DATA = where["start"], where["end"], where["data"]
    ran_in = Path(json.loads((data_dir / PUBLISHED).read_text())["out"]) if (data_dir / PUBLISHED).is_file() else Path(Study.out)
    out_arg = None if ran_in.resolve() == Path(Study.out).resolve() else ran_in.as_posix()  # the default folder goes unnamed
    cmd = command(settings, out_arg)
    report_cmd = "fleet-marl compare" + (f" --out {out_arg}" if out_arg else "")
    img = plot_names(data, root / "docs" / "img", where["prefix"])
    body = text(data, img, lambda p: f"img/{p.name}")
    main = root / MAIN_DATA / "results.csv"
    if DATA != MAIN_DATA and main.is_file():  # a study at other N: its verdicts next to the committed study's
        body = (
            f"### Verdicts against the committed study ([`{MAIN_DATA}/`]({MAIN_DATA.removeprefix('docs/')}/))\n\n"
            f"{tt.verdict_changes(data['rows'], store.read_rows(main))}\n\n{body}"
        )
    return (
        f"{start}\n<!-- written by `fleet-marl compare --report --docs`; edit the text around it, not this block -->\n\n"
        f"Reproduce: `{cmd}` (resumable: run it again after a stop), then `{report_cmd} --report --docs`. "
        f"The data: [`{DATA}/`]({DATA.removeprefix('docs/')}/).\n\n{body}{end}"
    )


def blocks(root: Path) -> list[tuple[str, str, str, str]]:
    """Every committed study's block of :data:`DOC` (``docs/data/credit_study*/`` whose settings
    place it there: :func:`docs_targets`), for ``fleet-marl docs``."""
    out = []
    for d in sorted(p.parent for p in (Path(root) / "docs" / "data").glob("credit_study*/study.json")):
        where = docs_targets(json.loads((d / "study.json").read_text()))
        if (Path(root) / where["data"]).resolve() == d.resolve():
            out.append((DOC, where["start"], where["end"], block(d, Path(root))))
    return out


def docs_targets(settings: dict) -> dict:
    """Where the study of ``settings`` goes in the docs: its block's markers (``start``,
    ``end``), its data folder and its plots' prefix. The study at its default N has the
    main block; at other N (the re-test on the validated model: ``--n 8,32,64``) it has a block,
    data folder and image prefix of its own (``credit-study-n8-32-64``), whose verdicts stand
    next to the main block's committed ones (:func:`~fleet_marl.studies.credit.torchrl_tables.verdict_changes`)."""
    ns = tuple(int(n) for n in settings.get("ns", Study.ns))
    if ns == Study.ns or settings == Study.quick().settings():  # the quick study stands in for the full one (allow_quick)
        start, end = MARKERS
        return {"start": start, "end": end, "data": MAIN_DATA, "prefix": "credit_study_"}
    tag = "n" + "-".join(map(str, ns))
    return {
        "start": f"<!-- credit-study-{tag}:start -->",
        "end": f"<!-- credit-study-{tag}:end -->",
        "data": f"{MAIN_DATA}_{tag}",
        "prefix": f"credit_study_{tag}_",
    }


__all__ = [
    "DOC",
    "MAIN_DATA",
    "MARKERS",
    "PUBLISHED",
    "block",
    "blocks",
    "command",
    "docs_targets",
    "load",
    "plot_names",
    "report",
    "text",
    "torchrl_plots",
    "write_docs",
]

"""The credit-assignment study's report, on either engine: ``summary.md`` and the plots in the
study folder (:func:`report`), and the study's block of ``docs/credit_assignment.md`` with the
data it came from (:func:`write_docs`, ``fleet-marl compare --report --docs``). It reads only
the study's CSVs and its ``study.json``, whose settings say its engine
(:func:`~fleet_marl.studies.credit.runs.engine_of`).

=====================  ========================================================================
:func:`report`         ``summary.md`` and the plots: on TorchRL the verdicts and the tables of
                       :mod:`~fleet_marl.studies.credit.torchrl_tables` (:func:`text`); for the
                       first study (RLlib) the summary and the prediction of
                       :mod:`~fleet_marl.studies.credit.rllib_tables`
:func:`write_docs`     the study's CSVs into ``docs/data/...``, its plots into ``docs/img/`` and
                       its block between the markers of ``docs/credit_assignment.md``
                       (:func:`docs_targets`), with the command that reproduces it
:func:`command`        that command (:func:`command`), for a study's settings
=====================  ========================================================================

The first study's committed data (``docs/data/credit_assignment*/``) reproduces its blocks.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_marl.evaluation.baselines import checkout
from fleet_marl.studies import store
from fleet_marl.studies.credit import plots, rllib_tables
from fleet_marl.studies.credit import torchrl_tables as tt
from fleet_marl.studies.credit.rllib_design import RLlibStudy
from fleet_marl.studies.credit.runs import engine_of
from fleet_marl.studies.credit.torchrl_design import Study
from fleet_marl.studies.credit.torchrl_tables import select, settings_of, value
from fleet_marl.studies.store import StudyError

DOC = "docs/credit_assignment.md"
#: The committed data of the TorchRL study at its default N (the main block's).
MAIN_DATA = "docs/data/credit_study"
#: The markers of each engine's main block in :data:`DOC`.
MARKERS = {
    "torchrl": ("<!-- credit-study:start -->", "<!-- credit-study:end -->"),
    "rllib": ("<!-- credit-assignment:start -->", "<!-- credit-assignment:end -->"),
}


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


def report(
    out: str | Path, engine: str | None = None, echo: Callable[..., Any] = print, img_dir: str | Path | None = None, img_prefix: str = ""
) -> dict:
    """``summary.md`` and the plots of the study in ``out`` (on ``engine``, by default the one
    its study.json says), into the study folder (the first study's plots: ``img_dir`` with
    ``img_prefix``); returns what it wrote."""
    data = load(out)
    if (engine or engine_of(data["settings"])) == "rllib":
        return _rllib_report(data, img_dir, img_prefix, echo)
    return _torchrl_report(data, echo)


def command(settings: dict, out: str | Path | None = None) -> str:
    """The ``fleet-marl compare`` command that runs the study of ``settings`` (its study.json;
    ``out``: the first study's folder, when not its default)."""
    if engine_of(settings) == "rllib":
        return _rllib_command(settings, out)
    return _torchrl_command(settings, None if out is None else Path(out).as_posix())


def write_docs(
    out: str | Path,
    root: str | Path | None = None,
    echo: Callable[..., Any] = print,
    allow_quick: bool = False,
    engine: str | None = None,
    run_out: str | Path | None = None,
) -> Path:
    """Copy the study in ``out`` into the checkout's docs: its CSVs, its plots and its report,
    with the command that reproduces it, between the markers of ``docs/credit_assignment.md``
    (where: :func:`docs_targets`). A ``--quick`` study is refused (it would replace the full
    study's numbers) unless ``allow_quick``. ``run_out`` is the folder the command names (default
    ``out``): the tests re-render the docs' blocks from their committed copy in ``docs/data``."""
    root = Path(root) if root else checkout()
    if root is None:
        raise StudyError("--docs: this fleet_marl is not a source checkout (no docs/ to write); drop --docs")
    out = Path(out)
    if not (out / "study.json").is_file():
        raise StudyError(f"--out {str(out)!r}: no study.json; --docs needs a study run by fleet-marl compare")
    settings = json.loads((out / "study.json").read_text())
    engine = engine or engine_of(settings)
    if "--quick" in command(settings).split() and not allow_quick:
        raise StudyError(
            f"--docs with the quick study in {str(out)!r}: its numbers mean nothing and would replace the full study's "
            "in docs/; drop --docs (the report is in the study folder)"
        )
    where = docs_targets(settings, engine)
    block = (_rllib_block if engine == "rllib" else _torchrl_block)(out, root, settings, where, Path(run_out) if run_out else out)
    dest = root / where["data"]
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "curves.csv", "study.json", "sessions.csv"):
        if (out / name).is_file() and (out / name).resolve() != (dest / name).resolve():
            shutil.copyfile(out / name, dest / name)
    path = root / DOC
    store.write_block(path, where["start"], where["end"], block)
    echo(f"wrote {path}, {dest}/ and docs/img/{where['prefix']}*.png")
    return path


# --- the TorchRL study ---------------------------------------------------------------------------


def _study(settings: dict) -> Study:
    fields = Study.__dataclass_fields__
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in fields}
    return Study(**values)


def text(data: dict, img: dict[str, Path], img_link: Callable[[Path], str] = lambda p: p.name) -> str:
    """The TorchRL study's whole report (Markdown); ``img`` maps a plot's name to its file."""
    rows, settings, sessions = data["rows"], data["settings"], data["sessions"]
    study = _study(settings)
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


def _torchrl_report(data: dict, echo: Callable[..., Any]) -> dict:
    img = torchrl_plots(data, data["out"])
    body = text(data, img)
    path = data["out"] / "summary.md"
    path.write_text(f"# Credit-assignment study (TorchRL): {data['out']}\n\n{body}")
    echo(body + f"\nwrote {path}" + "".join(f", {p}" for p in img.values()))
    return {"summary": path, "plots": img, "text": body, "verdicts": tt.verdicts(data["rows"])}


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


def _torchrl_command(settings: dict, out: str | None = None) -> str:
    """The command line of the study of ``settings`` (``out``: its folder, when not the default);
    settings that no option takes are named, to be set from Python."""
    suffix = f" --out {out}" if out else ""
    if settings == Study.quick().settings():
        return "fleet-marl compare --quick" + suffix
    base = Study().settings()
    norm = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}
    parts = ["fleet-marl compare"] + [f"{flag} {fmt(norm[k])}" for k, (flag, fmt) in FLAGS.items() if k in norm and norm[k] != base[k]]
    rest = {k: v for k, v in norm.items() if k not in FLAGS and base.get(k) != v}
    text = " ".join(parts) + suffix
    return text + (", with Study(" + ", ".join(f"{k}={v!r}" for k, v in rest.items()) + ") from Python" if rest else "")


def _torchrl_block(out: Path, root: Path, settings: dict, where: dict, run_out: Path) -> str:
    data, start, end, DATA = load(out), where["start"], where["end"], where["data"]
    out_arg = None if run_out.resolve() == Path(Study.out).resolve() else run_out.as_posix()  # the default folder goes unnamed
    cmd = command(settings, out_arg)
    report_cmd = "fleet-marl compare" + (f" --out {out_arg}" if out_arg else "")
    img = torchrl_plots(data, root / "docs" / "img", where["prefix"])
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


# --- the first study (RLlib) ----------------------------------------------------------------------


def _rllib_report(data: dict, img_dir: str | Path | None, img_prefix: str, echo: Callable[..., Any]) -> dict:
    out, rows, curves, settings = data["out"], data["rows"], data["curves"], data["settings"]
    img = Path(img_dir) if img_dir else out
    pngs = {}
    for n in sorted({int(r["n"]) for r in rows}):
        b = settings.get("budgets", {}).get(str(n))
        label = (f", {settings['mechanism']} arbiter" if "mechanism" in settings else "") + (f", {b:,} env steps" if b else "")
        p = plots.plot_rllib_curves(curves, n, img / f"{img_prefix}curves_n{n}.png", label)
        if p:
            pngs[n] = p
    scaling = plots.plot_rllib_scaling(rows, img / f"{img_prefix}scaling.png")
    table, pred = rllib_tables.summary_table(rows), rllib_tables.prediction_table(rows)
    total = sum(float(r["run_seconds"]) for r in rows)
    text = (
        f"# Credit-assignment study: {out}\n\n{len(rows)} runs, {total / 3600:.2f} CPU-hours of runs. Mean ± 95% interval "
        f"across seeds (Student t).\n\n## Summary\n\n{table}\n\n## The prediction, paired by seed\n\n"
        f"Mean difference ± 95% interval (seeds where the first is larger / seeds).\n\n{pred}\n"
    )
    (out / "summary.md").write_text(text)
    echo(f"\n{table}\n\n{pred}\n\nwrote {out / 'summary.md'}, " + ", ".join(str(p) for p in [*pngs.values(), scaling] if p))
    return {"summary": out / "summary.md", "table": table, "prediction": pred, "curves": pngs, "scaling": scaling, "rows": rows}


def _rllib_command(settings: dict, out: str | Path | None = None) -> str:
    quick = RLlibStudy.quick().settings()
    is_quick = settings.get("train_batch_size") == quick["train_batch_size"] and settings.get("max_cycles") == quick["max_cycles"]
    base = quick if is_quick else RLlibStudy().settings()
    parts = ["fleet-marl compare --engine rllib"] + (["--quick"] if is_quick else [])
    flags: dict[str, tuple[str, Callable[[Any], str]]] = {
        "ns": ("--n", lambda v: ",".join(map(str, v))),
        "schemes": ("--schemes", ",".join),
        "seeds": ("--seeds", str),
        "budgets": ("--budget", lambda v: ",".join(f"{k}={b}" for k, b in v.items())),
        "episodes": ("--episodes", str),
        "mechanism": ("--mechanism", str),
    }
    for key, (flag, fmt) in flags.items():
        if key in settings and settings[key] != base[key]:
            parts.append(f"{flag} {fmt(settings[key])}")
    rest = sorted(k for k in base if k not in flags and settings.get(k) != base[k])
    if out is not None:
        parts.append(f"--out {out}")
    text = " ".join(parts)
    return text + (f" (and, from Python, RLlibStudy({', '.join(f'{k}={settings.get(k)!r}' for k in rest)}))" if rest else "")


def wall_hours(rows: list[dict]) -> float:
    """Hours from the first run's start to the last run's end (includes any pause before a resume)."""
    ends = [dt.datetime.fromisoformat(r["finished"]) for r in rows]
    starts = [e - dt.timedelta(seconds=float(r["run_seconds"])) for e, r in zip(ends, rows, strict=True)]
    return (max(ends) - min(starts)).total_seconds() / 3600


def _rllib_block(out: Path, root: Path, settings: dict, where: dict, run_out: Path) -> str:
    start, end = where["start"], where["end"]
    quick = "--quick" in command(settings).split()
    default_out = RLlibStudy.quick().out if quick else RLlibStudy.out
    out_arg = "" if run_out.resolve() == Path(default_out).resolve() else f" --out {run_out.as_posix()}"
    cmd = command(settings, run_out.as_posix() if out_arg else None)
    rep = _rllib_report(load(out), root / "docs" / "img", where["prefix"], lambda *_: None)
    imgs = "\n\n".join(f"![N = {n}](img/{p.name})" for n, p in sorted(rep["curves"].items()))
    budgets = ", ".join(f"N={n}: {b:,}" for n, b in settings["budgets"].items() if int(n) in settings["ns"])
    total = sum(float(r["run_seconds"]) for r in rep["rows"])
    return (
        f"{start}\n<!-- written by `fleet-marl compare --report --docs`; edit the text around it, not this block -->\n\n"
        f"Reproduce: `{cmd}`, then `fleet-marl compare --engine rllib{out_arg} --report --docs`. {len(rep['rows'])} runs; env-step budget per run {budgets}; "
        f"{settings['seeds']} seeds; {settings['episodes']} grader episodes per run; arbiter `{settings['mechanism']}`; "
        f"sharing `{settings['sharing']}`. The runs took {total / 3600:.2f} CPU-hours, {wall_hours(rep['rows']):.2f} hours of "
        f"wall time from the first start to the last finish. The data: "
        f"[`{where['data']}/`]({where['data'].removeprefix('docs/')}/).\n\n"
        f"#### Summary (mean ± 95% interval across seeds)\n\n{rep['table']}\n\n"
        f"#### The prediction, paired by seed\n\nMean difference ± 95% interval; in brackets, the seeds where the first "
        f"scheme is larger.\n\n{rep['prediction']}\n\n#### Learning curves\n\n{imgs}\n\n"
        f"#### Score against N\n\n![score against N](img/{rep['scaling'].name})\n{end}"
    )


def docs_targets(settings: dict, engine: str | None = None) -> dict:
    """Where ``--docs`` writes the study of ``settings``: its block's markers (``start``,
    ``end``), its data folder and its plots' prefix. The TorchRL study at its default N has the
    main block; at other N (the re-test on the validated model: ``--n 8,32,64``) it has a block,
    data folder and image prefix of its own (``credit-study-n8-32-64``), whose verdicts stand
    next to the main block's committed ones (:func:`~fleet_marl.studies.credit.torchrl_tables.verdict_changes`). The first
    study (RLlib) under its own arbiter (proportional) has the main block of its section, and
    under another arbiter a block of its own (markers ``credit-assignment-<mechanism>``), data
    folder and image prefix, so it never replaces the main study's numbers."""
    if (engine or engine_of(settings)) == "torchrl":
        ns = tuple(int(n) for n in settings.get("ns", Study.ns))
        if ns == Study.ns or settings == Study.quick().settings():  # the quick study stands in for the full one (allow_quick)
            start, end = MARKERS["torchrl"]
            return {"start": start, "end": end, "data": MAIN_DATA, "prefix": "credit_study_"}
        tag = "n" + "-".join(map(str, ns))
        return {
            "start": f"<!-- credit-study-{tag}:start -->",
            "end": f"<!-- credit-study-{tag}:end -->",
            "data": f"{MAIN_DATA}_{tag}",
            "prefix": f"credit_study_{tag}_",
        }
    mechanism = settings.get("mechanism", RLlibStudy.mechanism)
    if mechanism == RLlibStudy.mechanism:
        start, end = MARKERS["rllib"]
        return {"start": start, "end": end, "data": "docs/data/credit_assignment", "prefix": "credit_"}
    return {
        "start": f"<!-- credit-assignment-{mechanism}:start -->",
        "end": f"<!-- credit-assignment-{mechanism}:end -->",
        "data": f"docs/data/credit_assignment_{mechanism}",
        "prefix": f"credit_{mechanism}_",
    }


__all__ = ["DOC", "MARKERS", "command", "docs_targets", "load", "report", "text", "torchrl_plots", "wall_hours", "write_docs"]

"""Trace readers, the registry, the shipped samples and ``fleet-marl traces`` (fleet_marl/traces).

The samples in fleet_marl/traces/data are checked against figures of the full public files
(row counts, first and last times, token and GPU sums, SHA-256). Formats that ship no sample are
read from hand-written fixtures in tests/data/traces. Downloads are tested against an HTTP server
on 127.0.0.1 run by the test; nothing here touches the internet.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import tarfile
import threading
import zipfile
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import fleet_marl
from fleet_marl import workloads
from fleet_marl.errors import UsageError
from fleet_marl.traces import (
    CACHE_ENV,
    DATA_DIR,
    TRACES,
    TRACES_ENV,
    JobTrace,
    TraceError,
    cache_dir,
    command,
    read_azure,
    read_burstgpt,
    read_helios,
    read_pai,
    read_philly,
    read_pollux,
    read_trace,
    resolve_trace,
    trace_stats,
    traces_dir,
)
from fleet_marl.traces.download import FetchError, fetch

FIXTURES = Path(__file__).resolve().parent / "data" / "traces"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SAMPLED = [t for t in TRACES.values() if t.sample]


@pytest.fixture(autouse=True)
def no_user_folders(tmp_path, monkeypatch):
    """Every test starts with no traces folder and an empty cache of its own."""
    monkeypatch.delenv(TRACES_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- shipped samples -----------------------------------------------------------------------


def test_the_samples_are_the_ones_documented():
    """The registry's samples are exactly the csv files in data/, each listed in LICENSES.md
    with its registry name, byte count, SHA-256 and licence, whose text ships beside it."""
    assert {t.sample for t in SAMPLED} == {p.name for p in DATA_DIR.glob("*.csv")}
    assert {p.name for p in DATA_DIR.iterdir() if p.suffix != ".csv"} == {"LICENSES.md", "LICENSE-Apache-2.0.txt", "LICENSE-CC-BY-4.0.txt"}
    table = {line.split("|")[1].strip(" `"): line for line in (DATA_DIR / "LICENSES.md").read_text().splitlines() if line.startswith("| `")}
    for t in SAMPLED:
        row = table[t.sample]
        p = t.sample_path
        assert f"`{t.name}`" in row and f"| {p.stat().st_size:,} |" in row and sha256(p) in row and row.rstrip(" |").endswith(t.licence)
        assert (DATA_DIR / f"LICENSE-{t.licence}.txt").read_text(encoding="utf-8-sig").strip()
        assert t.licence in ("Apache-2.0", "CC-BY-4.0") and t.citation and t.source and t.cut


@pytest.mark.parametrize("info", SAMPLED, ids=lambda t: t.name)
def test_samples_are_small(info):
    assert info.sample_path.stat().st_size <= 1_000_000


@pytest.mark.parametrize("info", [t for t in SAMPLED if t.cut.startswith("the whole file")], ids=lambda t: t.name)
def test_whole_file_samples_are_the_pinned_full_traces(info):
    assert info.sample == info.file  # so the name the trace task uses is the sample's
    assert info.sample_path.stat().st_size == info.size and sha256(info.sample_path) == info.sha256


# (rows, first time, last time, sum of GPUs, sum of batch sizes, first name, last name), read off the files
POLLUX = {
    1: (160, 107.0, 27695.0, 1092, 2467520, "cifar10-0", "ncf-159"),
    2: (160, 498.0, 27131.0, 1077, 2153664, "cifar10-0", "ncf-159"),
    3: (160, 791.0, 28739.0, 921, 2362368, "ncf-0", "cifar10-159"),
    4: (160, 259.0, 27731.0, 1043, 2480128, "bert-0", "cifar10-159"),
}


@pytest.mark.parametrize("i", POLLUX)
def test_pollux_samples(i):
    rows, first, last, gpus, batch, name0, name1 = POLLUX[i]
    tr = read_pollux(f"pollux-{i}")
    assert tr is read_trace(f"pollux_workload-{i}.csv") and tr.format == "pollux"
    assert len(tr.time_s) == len(tr.name) == len(tr.application) == rows
    assert (tr.time_s[0], tr.time_s[-1], tr.gpus.sum(), tr.batch_size.sum()) == (first, last, gpus, batch)
    assert (tr.name[0], tr.name[-1]) == (name0, name1) and tr.num_replicas is tr.gpus
    assert tr.gpus.dtype == np.int64 and np.isnan(tr.duration_s).all() and np.all(np.diff(tr.time_s) >= 0)
    s = trace_stats(f"pollux-{i}")
    assert (s["jobs"], s["gpu_jobs"], s["duration_s"]) == (rows, rows, last)
    assert s["mean_gpus"] == pytest.approx(gpus / rows) and s["jobs_per_hour"] == pytest.approx(rows / last * 3600)


def test_azure_conv_2023_sample_is_the_whole_hour():
    tr = read_azure("azure-conv-2023")
    assert type(tr).__name__ == "AzureTrace" and len(tr.time_s) == 19_366
    # 2023-11-16 18:15:46.6805900 -> 18:15:50.9951690 -> ... -> 19:14:08.4025270
    assert (tr.time_s[0], tr.time_s[1], tr.time_s[-1]) == (0.0, pytest.approx(4.314579, abs=1e-9), pytest.approx(3501.721937, abs=1e-9))
    assert (tr.context_tokens[0], tr.generated_tokens[0], tr.context_tokens[-1], tr.generated_tokens[-1]) == (374, 44, 197, 183)
    assert (tr.context_tokens.sum(), tr.generated_tokens.sum()) == (22_361_870, 4_088_665)
    s = trace_stats("azure_llm_inference_conv_2023.csv")
    assert round(s["mean_context_tokens"]) == 1155 and round(s["mean_generated_tokens"]) == 211  # the trace task's
    assert s["rate_per_s"] == pytest.approx(5.5304, abs=1e-4)


def test_azure_code_2023_sample_is_its_first_half_hour():
    tr = read_azure("azure-code-2023")
    assert resolve_trace("azure-code-2023") == DATA_DIR / "azure_llm_inference_code_2023_first30min.csv"
    assert len(tr.time_s) == 5_740 and tr.time_s[0] == 0.0 and tr.time_s[-1] < 1800.0
    assert tr.time_s[1] == pytest.approx(0.052, abs=1e-9) and tr.time_s[-1] == pytest.approx(1788.410675, abs=1e-9)
    assert (tr.context_tokens[0], tr.generated_tokens[0]) == (4808, 10)
    assert (tr.context_tokens.sum(), tr.generated_tokens.sum()) == (11_638_599, 157_030)
    # the full file's next row, 2023-11-16 18:47:07.0687220, is 1803.09 s in: past the cut
    assert (
        sha256(DATA_DIR / "azure_llm_inference_code_2023_first30min.csv")
        == "0abf8a2071e63ffdd15d8345471eff5d9cf3d141db9459fc191119261420bf37"
    )


# --- readers of the formats with no sample (hand-written fixtures) -------------------------


def test_philly_reader():
    tr = read_philly(FIXTURES / "philly_cluster_job_log.json")
    assert isinstance(tr, JobTrace) and tr.format == "philly" and tr is read_trace(FIXTURES / "philly_cluster_job_log.json")
    # sorted by submitted_time from 01:00:00; the two 01:11:39 jobs keep their file order
    assert tr.time_s.tolist() == [0.0, 699.0, 699.0, 1740.0]
    assert tr.gpus.tolist() == [0, 8, 1, 4]  # no attempt: 0; 8 on one server; 1; 2 + 2 on two servers
    d = tr.duration_s
    assert d[1] == 2 * 86_400 + 5 * 3600 + 41 * 60 + 3 and np.isnan(d[[0, 2, 3]]).all()  # first start to last end


def test_pai_reader():
    tr = read_pai(FIXTURES / "pai_task_table.csv")  # no header line, as released
    assert tr.format == "pai" and tr is read_trace(FIXTURES / "pai_task_table.csv")
    # jobs by first task launch from 1739100: PS + 2 workers (2 x 100 %), a 50 % task, a CPU-only running job
    assert tr.time_s.tolist() == [0.0, 62.0, 200.0]
    assert tr.gpus.tolist() == [2, 1, 0]
    assert tr.duration_s[:2].tolist() == [850.0, 38.0] and np.isnan(tr.duration_s[2])
    assert tr.unlaunched == 1  # the Waiting job has no launch time


def test_pai_reader_takes_the_header_line_too(tmp_path):
    p = tmp_path / "tasks.csv"
    p.write_text(
        "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n"
        + (FIXTURES / "pai_task_table.csv").read_text()
    )
    tr = read_trace(p)
    assert tr.format == "pai" and tr.gpus.tolist() == [2, 1, 0]


def test_helios_reader():
    tr = read_helios(FIXTURES / "helios_cluster_log.csv")
    assert tr.format == "helios" and tr is read_trace(FIXTURES / "helios_cluster_log.csv")
    assert tr.time_s.tolist() == [0.0, 19.0, 26.0, 27.0, 239.0]  # from 18:41:01; the CPU job (18:41:20) sorted in
    assert tr.gpus.tolist() == [1, 0, 4, 1, 16]
    assert tr.duration_s[:4].tolist() == [36848.0, 60.0, 249.0, 675233.0] and np.isnan(tr.duration_s[4])
    s = trace_stats(FIXTURES / "helios_cluster_log.csv")
    assert (s["jobs"], s["gpu_jobs"], s["mean_gpus"]) == (5, 4, 5.5)


def test_azure_2024_reader_takes_utc_offsets(tmp_path):
    tr = read_azure(FIXTURES / "azure_llm_inference_2024.csv")
    assert tr.time_s.tolist() == pytest.approx([0.0, 0.007405, 0.012384, 0.027915, 0.07396, 0.99007], abs=1e-12)
    assert tr.context_tokens.tolist() == [2162, 2399, 76, 2376, 7670, 100] and tr.generated_tokens[-1] == 0
    p = tmp_path / "tz.csv"  # the same instant written in two zones, then one second later
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 07:00:00-07:00,1,1\n"
        "2024-05-10 14:00:00+00:00,1,1\n2024-05-10 16:30:01.5+02:30,1,1\n"
    )
    assert read_azure(p).time_s.tolist() == [0.0, 0.0, 1.5]


@pytest.mark.parametrize(
    "name,times,ctx,gen,models,model,conv",
    [
        ("burstgpt_v1.csv", [5, 45, 118, 120], [472, 1087, 417, 300], [18, 230, 276, 0], ("ChatGPT", "GPT-4"), [0, 0, 1, 1], [1, 1, 1, 0]),
        ("burstgpt_v2.csv", [0.5, 0.5, 7.25], [1200, 64, 1400], [80, 0, 120], ("GPT-4", "ChatGPT"), [0, 1, 0], [1, 0, 1]),
    ],
)
def test_burstgpt_reader(name, times, ctx, gen, models, model, conv):
    tr = read_burstgpt(FIXTURES / name)
    assert tr is read_trace(FIXTURES / name) and tr.format == "burstgpt"
    assert tr.time_s.tolist() == times and tr.context_tokens.tolist() == ctx and tr.generated_tokens.tolist() == gen
    assert tr.models == models and tr.model.tolist() == model and tr.conversation.tolist() == [bool(c) for c in conv]


@pytest.mark.parametrize(
    "name",
    ["philly_cluster_job_log.json", "pai_task_table.csv", "helios_cluster_log.csv", "azure_llm_inference_2024.csv", "burstgpt_v1.csv"],
)
def test_arrays_are_read_only(name):
    tr = read_trace(FIXTURES / name)
    arrays = [v for v in vars(tr).values() if isinstance(v, np.ndarray)]
    assert len(arrays) >= 3
    for a in arrays:
        with pytest.raises(ValueError):
            a[0] = a[0]


# --- bad rows ------------------------------------------------------------------------------

PAI_OK = "j1,worker,1.0,Terminated,10.0,20.0,600.0,29.3,100.0,V100\n"
HELIOS_HEAD = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
HELIOS_OK = "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0\n"
B1 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
B_OK = "5,ChatGPT,472,18,490,Conversation log\n"


def philly(job: str, before: str = "") -> str:
    ok = '{"status": "Pass", "vc": "v", "jobid": "j0", "attempts": [], "submitted_time": "2017-10-07 01:00:00", "user": "u"}'
    return f"[\n  {ok},\n{before}  {job}\n]\n"


def attempt(start='"2017-10-07 01:00:00"', end='"2017-10-07 02:00:00"', gpus='["gpu0"]') -> str:
    job = (
        '{{"status": "Pass", "vc": "v", "jobid": "j1", "submitted_time": "2017-10-07 01:00:00", "user": "u", '
        '"attempts": [{{"start_time": {s}, "end_time": {e}, "detail": [{{"ip": "m1", "gpus": {g}}}]}}]}}'
    )
    return job.format(s=start, e=end, g=gpus)


BAD = [
    # (reader, file name, text, line, column)
    (
        "philly",
        "log.json",
        philly('{"status": "Lost", "vc": "v", "jobid": "j1", "attempts": [], "submitted_time": "2017-10-07 01:00:00", "user": "u"}'),
        3,
        "status",
    ),
    ("philly", "log.json", philly('{"status": "Pass", "vc": "v", "jobid": "j1", "attempts": []}'), 3, "submitted_time"),
    (
        "philly",
        "log.json",
        philly('{"status": "Pass", "vc": "v", "jobid": "", "attempts": [], "submitted_time": "2017-10-07 01:00:00", "user": "u"}'),
        3,
        "jobid",
    ),
    (
        "philly",
        "log.json",
        philly(attempt().replace('"submitted_time": "2017-10-07 01:00:00"', '"submitted_time": "2017-10-07T01:00"'), "\n\n"),
        5,
        "submitted_time",
    ),
    ("philly", "log.json", philly(attempt(start='"2017-13-07 01:00:00"')), 3, "attempts[0].start_time"),
    ("philly", "log.json", philly(attempt(end="17")), 3, "attempts[0].end_time"),
    ("philly", "log.json", philly(attempt(end='"2017-10-07 00:59:59"')), 3, "attempts[0].end_time"),
    ("philly", "log.json", philly(attempt(gpus='"gpu0"')), 3, "attempts[0].detail[0].gpus"),
    ("philly", "log.json", philly(attempt().replace('"attempts": [', '"attempts": 5, "x": [')), 3, "attempts"),
    ("philly", "log.json", philly("[1, 2]"), 3, "job"),
    ("philly", "log.json", philly('{"status": "Pass",, }'), 3, "json"),
    ("philly", "log.json", "[\n]\n", 2, "file"),
    ("philly", "log.json", philly(attempt()).rstrip() + "\nextra\n", 5, "json"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,one,Terminated,10.0,20.0,600.0,29.3,100.0,V100\n", 2, "inst_num"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Done,10.0,20.0,600.0,29.3,100.0,V100\n", 2, "status"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Terminated,-1.0,20.0,600.0,29.3,100.0,V100\n", 2, "start_time"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Terminated,30.0,20.0,600.0,29.3,100.0,V100\n", 2, "end_time"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Terminated,,20.0,600.0,29.3,100.0,V100\n", 2, "end_time"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Terminated,10.0,20.0,600.0,29.3,inf,V100\n", 2, "plan_gpu"),
    ("pai", "pai_task_table.csv", PAI_OK + ",worker,1.0,Terminated,10.0,20.0,600.0,29.3,100.0,V100\n", 2, "job_name"),
    ("pai", "pai_task_table.csv", PAI_OK + "j2,worker,1.0,Terminated\n", 2, "row"),
    ("pai", "pai_task_table.csv", "j2,worker,1.0,Waiting,,,600.0,29.3,100.0,\n", 1, "start_time"),
    ("helios", "log.csv", HELIOS_HEAD + HELIOS_OK + HELIOS_OK.replace(",1,1,1,", ",-1,1,1,"), 3, "gpu_num"),
    ("helios", "log.csv", HELIOS_HEAD + HELIOS_OK + HELIOS_OK.replace("COMPLETED", "RUNNING"), 3, "state"),
    (
        "helios",
        "log.csv",
        HELIOS_HEAD + HELIOS_OK + HELIOS_OK.replace(",2020-06-09 18:41:01,2020", ",2020-06-09 25:41:01,2020"),
        3,
        "submit_time",
    ),
    ("helios", "log.csv", HELIOS_HEAD + HELIOS_OK + HELIOS_OK.replace(",60,0", ",-60,0"), 3, "duration"),
    ("helios", "log.csv", HELIOS_HEAD + HELIOS_OK + HELIOS_OK.replace("1,u,", "x,u,"), 3, "job_id"),
    ("helios", "log.csv", HELIOS_HEAD.replace("gpu_num", "gpus") + HELIOS_OK, 1, "header"),
    (
        "azure",
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.1+00:00,1,1\n2024-05-10 00:00:00+25:00,1,1\n",
        3,
        "TIMESTAMP",
    ),
    (
        "azure",
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.1+00:00,1,1\n2024-05-10 00:00:00+00:00,1,1\n",
        3,
        "TIMESTAMP",
    ),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1969-12-31 23:59:59,1,1\n", 2, "TIMESTAMP"),
    ("burstgpt", "b.csv", B1 + B_OK + "4,ChatGPT,1,1,2,API log\n", 3, "Timestamp"),
    ("burstgpt", "b.csv", B1 + B_OK + "6,,1,1,2,API log\n", 3, "Model"),
    ("burstgpt", "b.csv", B1 + B_OK + "6,GPT-4,-1,1,0,API log\n", 3, "Request tokens"),
    ("burstgpt", "b.csv", B1 + B_OK + "6,GPT-4,1,1.5,2,API log\n", 3, "Response tokens"),
    ("burstgpt", "b.csv", B1 + B_OK + "6,GPT-4,1,1,x,API log\n", 3, "Total tokens"),
    ("burstgpt", "b.csv", B1 + B_OK + "6,GPT-4,1,1,2,Batch log\n", 3, "Log Type"),
    ("burstgpt", "b.csv", B1 + "abc,GPT-4,1,1,2,API log\n", 2, "Timestamp"),
    ("burstgpt", "b.csv", B1.replace("Log Type", "Type") + B_OK, 1, "header"),
    ("burstgpt", "b.csv", B1, 2, "row"),
]
READERS = {"philly": read_philly, "pai": read_pai, "helios": read_helios, "azure": read_azure, "burstgpt": read_burstgpt}


@pytest.mark.parametrize("reader,name,text,line,column", BAD)
def test_bad_row_names_file_line_and_column(tmp_path, reader, name, text, line, column):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    for read in (READERS[reader], read_trace):
        with pytest.raises(TraceError) as ei:
            read(p)
        e = ei.value
        assert str(e).startswith(f"{p.resolve()}:{line}: {column} = ") and e.expected in str(e)
        assert (e.path, e.line, e.column) == (str(p.resolve()), line, column)


def test_unknown_first_line_lists_every_format(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match=r":1: header = 'a,b'") as ei:
        read_trace(p)
    for head in (
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "Timestamp,Model,Request tokens",
        "job_id,user,vc,gpu_num",
        "name,time,application",
        "job_name,task_name",
        "JSON list",
    ):
        assert head in str(ei.value)


# --- registry and name resolution ----------------------------------------------------------


def test_every_entry_is_complete():
    assert len(TRACES) == 15 and all(t.name == n for n, t in TRACES.items())
    for t in TRACES.values():
        assert t.kind in ("jobs", "requests") and t.url.startswith("https://") and t.licence in ("Apache-2.0", "CC-BY-4.0")
        assert t.citation and t.source and t.cut and t.file
        assert (t.member is None) == (t.download is None)
        assert t.sha256 is None or len(t.sha256) == 64
    kinds = {t.format: t.kind for t in TRACES.values()}
    assert kinds == {"pollux": "jobs", "philly": "jobs", "pai": "jobs", "helios": "jobs", "azure": "requests", "burstgpt": "requests"}


def test_resolution_order(tmp_path, monkeypatch):
    """A path, then $FLEET_MARL_TRACES, then the shipped sample, then the cache."""
    name = "pollux_workload-2.csv"
    mine, cache = tmp_path / "mine", cache_dir()
    cache.mkdir(parents=True)
    assert resolve_trace(name) == DATA_DIR / name and traces_dir() == DATA_DIR
    (cache / name).write_text("x")
    assert resolve_trace(name) == DATA_DIR / name  # the sample before the cache
    mine.mkdir()
    (mine / name).write_text("x")
    monkeypatch.setenv(TRACES_ENV, str(mine))
    assert resolve_trace(name) == mine / name and traces_dir() == mine
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("x")
    assert resolve_trace(name) == Path(name)  # an existing path first
    # registry names: the sample, else the fetched full file
    assert resolve_trace("azure-conv-2023") == DATA_DIR / "azure_llm_inference_conv_2023.csv"
    with pytest.raises(FileNotFoundError) as ei:
        resolve_trace("burstgpt-1")
    msg = str(ei.value)
    assert "fleet-marl traces fetch burstgpt-1" in msg and TRACES["burstgpt-1"].url in msg and str(cache / "BurstGPT_1.csv") in msg
    (cache / "BurstGPT_1.csv").write_text("x")
    assert resolve_trace("burstgpt-1") == cache / "BurstGPT_1.csv" == resolve_trace("BurstGPT_1.csv")


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" / "traces"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_dir() == Path.home() / ".cache" / "fleet_marl" / "traces"


def test_workloads_keeps_its_names():
    assert workloads.TraceError is TraceError and issubclass(TraceError, ValueError)
    assert workloads.read_trace is read_trace and workloads.resolve_trace is resolve_trace
    assert workloads.trace_stats is trace_stats and workloads.traces_dir is traces_dir


def test_training_tenants_replay_only_gpu_jobs():
    from fleet_marl.config import WorkloadSpec

    spec = WorkloadSpec(pattern="trace", trace=str(FIXTURES / "helios_cluster_log.csv"))
    x = workloads.arrival_schedule(spec, "train", 5, 60.0, np.random.default_rng(0))
    assert x.tolist() == [3.0, 0.0, 0.0, 1.0, 0.0]  # the CPU job (19 s) is no arrival; 239 s is round 3
    half = dataclasses.replace(spec, trace_shards=2, trace_shard=1)
    assert workloads.arrival_schedule(half, "train", 5, 60.0, np.random.default_rng(0)).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    with pytest.raises(TraceError, match="Azure LLM inference trace, BurstGPT trace") as ei:
        workloads.arrival_schedule(spec, "serve", 5, 60.0, np.random.default_rng(0))
    assert ei.value.column == "format" and "Helios" in str(ei.value)


# --- the trace task from the shipped samples -----------------------------------------------


def times_by_csv(path: Path) -> np.ndarray:
    """Arrival seconds of a Pollux or Azure 2023 file, computed without fleet_marl."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if "time" in rows[0]:
        return np.array([float(r["time"]) for r in rows])
    stamps = [(datetime.strptime(r["TIMESTAMP"][:19], "%Y-%m-%d %H:%M:%S"), float("0" + r["TIMESTAMP"][19:])) for r in rows]
    return np.array([(s - stamps[0][0]).total_seconds() + (f - stamps[0][1]) for s, f in stamps])


def play(env, seed=0, rounds=None):
    """Rewards of an episode of masked-random actions (its own generator, so the same for equal envs)."""
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    out = []
    while env.agents and (rounds is None or len(out) < rounds):
        acts = {a: np.array([rng.choice(np.flatnonzero(m)) for m in infos[a]["action_mask"]]) for a in env.agents}
        _obs, rew, _term, _trunc, infos = env.step(acts)
        out.append(rew)
    return out


def test_trace_task_runs_from_the_samples_alone(tmp_path, monkeypatch):
    """With an empty $FLEET_MARL_TRACES, an empty cache and no shared folder in reach, the trace
    task replays the shipped samples, round by round, to the end of an episode."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(TRACES_ENV, str(empty))
    monkeypatch.chdir(tmp_path)
    env = fleet_marl.parallel_env(task="trace", compute_all=False)
    env.reset(seed=0)
    rs, n = env.config.cluster.round_seconds, env.max_cycles
    for i, t in enumerate(env.config.tenants):
        wl = t.workload
        path = resolve_trace(wl.trace)
        assert path.parent == DATA_DIR
        times = (times_by_csv(path)[wl.trace_shard :: wl.trace_shards] - wl.trace_offset_s) / wl.trace_speedup
        expected = np.bincount((times // rs).astype(int), minlength=n)[:n]
        np.testing.assert_array_equal(env.arrival_schedule[:, i], expected)
        assert expected.sum() > 30
    assert len(play(env)) == n


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no shared traces at {SHARED} to compare the samples with")
def test_samples_give_the_same_episodes_as_the_shared_traces(monkeypatch):
    """The check behind shipping the samples: the trace task's arrivals and episodes are the
    same from the samples as from the full files in ../shared/traces."""
    env = fleet_marl.parallel_env(task="trace", compute_all=False)
    from_samples = play(env, rounds=20)
    sched = env.arrival_schedule.copy()
    monkeypatch.setenv(TRACES_ENV, str(SHARED))
    env2 = fleet_marl.parallel_env(task="trace", compute_all=False)
    assert {resolve_trace(t.workload.trace).parent for t in env2.config.tenants} == {SHARED}
    from_shared = play(env2, rounds=20)
    np.testing.assert_array_equal(env2.arrival_schedule, sched)
    assert from_shared == from_samples


# --- fetch ---------------------------------------------------------------------------------


class Server:
    """A one-folder HTTP server on 127.0.0.1 with Range support and scripted failures."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.next: dict[str, str] = {}  # path -> what the next request gets: truncate, error, ignore-range
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                body, mode = server.files.get(self.path), server.next.pop(self.path, "")
                if body is None or mode == "error":
                    self.send_error(404 if body is None else 500)
                    return
                start = int(rng.removeprefix("bytes=").rstrip("-")) if rng and mode != "ignore-range" else 0
                if start >= len(body) > 0:
                    self.send_response(416)
                    self.end_headers()
                    return
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:] if mode != "truncate" else body[start : start + (len(body) - start) // 2])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


BODY = (DATA_DIR / "pollux_workload-3.csv").read_bytes()


def entry(server, body=BODY, name="pollux-3", **kw):
    """The registry entry ``name`` downloading ``body`` from the test server."""
    server.files["/t.csv"] = body
    pins = dict(size=len(body), sha256=hashlib.sha256(body).hexdigest())
    return dataclasses.replace(TRACES[name], url=server.url("/t.csv"), **{**pins, **kw})


def test_fetch_downloads_verifies_and_keeps(server, tmp_path):
    info = entry(server)
    got = fetch(info, tmp_path, progress=False)
    assert got.path == tmp_path / "pollux_workload-3.csv" and got.path.read_bytes() == BODY
    assert got.verified and got.downloaded and got.sha256 == info.sha256
    assert not (tmp_path / "pollux_workload-3.csv.part").exists()
    again = fetch(info, tmp_path, progress=False)
    assert not again.downloaded and len(server.requests) == 1  # already there: no request


def test_fetch_resumes_a_broken_download(server, tmp_path):
    info = entry(server)
    server.next["/t.csv"] = "truncate"
    with pytest.raises(FetchError) as ei:
        fetch(info, tmp_path, progress=False)
    part = tmp_path / "pollux_workload-3.csv.part"
    half = len(BODY) // 2
    assert part.stat().st_size == half
    msg = str(ei.value)
    assert info.url in msg and f"{half:,} bytes" in msg and "to resume" in msg and str(part) in msg
    got = fetch(info, tmp_path, progress=False)
    assert server.requests[-1] == ("/t.csv", f"bytes={half}-") and got.path.read_bytes() == BODY
    # a .part left by anything else resumes the same way; a server ignoring the Range rewrites it
    got.path.unlink()
    part.write_bytes(BODY[:100])
    server.next["/t.csv"] = "ignore-range"
    assert fetch(info, tmp_path, progress=False).path.read_bytes() == BODY
    assert server.requests[-1] == ("/t.csv", "bytes=100-")


def test_fetch_rejects_a_file_that_is_not_the_pinned_one(server, tmp_path):
    info = entry(server, sha256="0" * 64)
    with pytest.raises(FetchError) as ei:
        fetch(info, tmp_path, progress=False)
    msg = str(ei.value)
    assert info.url in msg and "0" * 64 in msg and hashlib.sha256(BODY).hexdigest() in msg and "SHA-256" in msg
    assert not any(tmp_path.iterdir())  # the bad download is removed
    info = entry(server, size=len(BODY) - 1)
    with pytest.raises(FetchError, match=f"size .* is {len(BODY):,} bytes, expected {len(BODY) - 1:,} bytes"):
        fetch(info, tmp_path, progress=False)


def test_fetch_reports_a_server_error(server, tmp_path):
    info = entry(server)
    server.next["/t.csv"] = "error"
    with pytest.raises(FetchError) as ei:
        fetch(info, tmp_path, progress=False)
    msg = str(ei.value)
    assert "HTTP 500" in msg and info.url in msg and "fleet-marl traces fetch pollux-3" in msg
    assert str(tmp_path / "pollux_workload-3.csv") in msg
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch(dataclasses.replace(info, url=server.url("/gone.csv")), tmp_path, progress=False)


def test_fetch_without_pins_is_reported_unverified(server, tmp_path):
    got = fetch(
        entry(
            server,
            name="azure-code-2024",
            body=b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,1,1\n",
            size=None,
            sha256=None,
        ),
        tmp_path,
        progress=False,
    )
    assert not got.verified and got.sha256 == sha256(got.path) and read_trace(got.path).format == "azure"


def tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_fetch_unpacks_the_trace_from_its_archive(server, tmp_path):
    log = (FIXTURES / "philly_cluster_job_log.json").read_bytes()
    info = entry(server, name="philly", body=tar_gz({"trace-data/cluster_gpu_util": b"x", "trace-data/cluster_job_log": log}))
    got = fetch(info, tmp_path, progress=False)
    assert got.path == tmp_path / "philly_cluster_job_log.json" and got.path.read_bytes() == log
    assert got.download == tmp_path / "philly-trace-data.tar.gz" and read_trace(got.path).gpus.tolist() == [0, 8, 1, 4]
    # Helios: one zip for four clusters, pinned by its git object id
    z = zip_of({"data/Earth/cluster_log.csv": b"", "data/Venus/cluster_log.csv": (FIXTURES / "helios_cluster_log.csv").read_bytes()})
    blob = hashlib.sha1(b"blob %d\0" % len(z) + z).hexdigest()
    venus = entry(server, name="helios-venus", body=z, size=None, sha256=None, git_blob=blob)
    assert read_trace(fetch(venus, tmp_path, progress=False).path).format == "helios"
    with pytest.raises(FetchError, match="git object id"):
        fetch(dataclasses.replace(venus, git_blob="1" * 40, file="other.csv", download="other.zip"), tmp_path, progress=False)
    with pytest.raises(FetchError, match=r"holds no 'Mars/cluster_log.csv' \(it holds data/Earth/cluster_log.csv"):
        fetch(dataclasses.replace(venus, member="Mars/cluster_log.csv", file="mars.csv"), tmp_path, progress=False)


# --- fleet-marl traces ---------------------------------------------------------------------


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="fleet-marl traces")
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))


def test_traces_list(capsys, tmp_path):
    assert cli("list", "--dir", str(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["name", "kind", "sample", "rows", "sample", "full", "licence", "fetched"]
    rows = {line.split()[0]: line.split() for line in out[1 : len(TRACES) + 1]}
    assert list(rows) == list(TRACES)
    assert rows["pollux-1"] == ["pollux-1", "jobs", "160", "4.8", "kB", "4.8", "kB", "Apache-2.0", "no"]
    assert rows["azure-conv-2023"][2] == "19,366" and rows["azure-code-2023"][2] == "5,740"
    assert rows["philly"] == ["philly", "jobs", "-", "-", "1.1", "GB", "CC-BY-4.0", "no"]
    assert rows["pai-2020"][3:5] == ["-", "?"]
    (tmp_path / "BurstGPT_1.csv").write_text("x")
    cli("list", "--dir", str(tmp_path))
    assert capsys.readouterr().out.splitlines()[list(TRACES).index("burstgpt-1") + 1].endswith("yes")


def test_traces_fetch(capsys, server, tmp_path, monkeypatch):
    monkeypatch.setitem(TRACES, "pollux-3", entry(server))
    assert cli("fetch", "pollux-3", "--dir", str(tmp_path / "d")) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "d" / "pollux_workload-3.csv") in out and "Apache-2.0" in out and "not verified" not in out
    assert (tmp_path / "d" / "pollux_workload-3.csv").read_bytes() == BODY
    assert cli("fetch", "pollux-3") == 0  # default: the cache, replayed by file name
    assert (cache_dir() / "pollux_workload-3.csv").is_file() and "trace='pollux_workload-3.csv'" in capsys.readouterr().out
    with pytest.raises(UsageError, match="'nope': expected one of pollux-1"):
        cli("fetch", "nope")
    assert "examples:" in command.EXAMPLES and FetchError in command.ERRORS


def test_serving_tenants_are_priced_at_the_lengths_of_their_rounds_requests(monkeypatch):
    """A serving tenant replaying a request trace is priced at the mean prompt and output
    tokens of the requests that arrive in each round (computed here from the CSV without
    fleet_marl); rounds with none at the episode's means. Those lengths reach the kernel."""
    from fleet_marl import credit

    env = fleet_marl.parallel_env(task="trace", compute_all=False)
    env.reset(seed=0)
    rs, n = env.config.cluster.round_seconds, env.max_cycles
    seen = []
    real = credit.evaluate_welfare
    monkeypatch.setattr(credit, "evaluate_welfare", lambda st, a, s, d, *args, **kw: (seen.append(d), real(st, a, s, d, *args, **kw))[1])
    play(env, rounds=3)
    servers = [i for i, t in enumerate(env.config.tenants) if t.kind == "serve"]
    assert servers
    for i in servers:
        wl = env.config.tenants[i].workload
        path = resolve_trace(wl.trace)
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))[wl.trace_shard :: wl.trace_shards]
        times = (times_by_csv(path)[wl.trace_shard :: wl.trace_shards] - wl.trace_offset_s) / wl.trace_speedup
        rounds = (times // rs).astype(int)
        kept = [
            (r, float(row["ContextTokens"]), max(float(row["GeneratedTokens"]), 1.0))
            for r, row, t in zip(rounds, rows, times, strict=False)
            if t >= 0 and r < n
        ]
        mean_p = np.mean([p for _, p, _ in kept])
        for r in range(3):
            mine = [(p, o) for rr, p, o in kept if rr == r]
            want_p = np.mean([p for p, _ in mine]) if mine else mean_p
            want_o = np.mean([o for _, o in mine]) if mine else np.mean([o for _, _, o in kept])
            d = seen[r]
            assert d.prompt_tokens[0, i] == pytest.approx(want_p, rel=1e-12) and d.output_tokens[0, i] == pytest.approx(want_o, rel=1e-12)
        assert not np.all(env._core.schedules.prompt_tokens[:, i] == wl.prompt_tokens)  # white box: not the config's mean

"""Arrival schedules (fleet_marl/workloads.py) and the Pollux and Azure readers it re-exports.

The real traces are the samples that ship with the package (fleet_marl/traces/data), found by
name with no folder configured; tests/test_traces.py covers the other formats, the registry and
fetching. Bad-row tests write small CSVs to ``tmp_path``.
"""

from __future__ import annotations

import csv
from datetime import datetime

import numpy as np
import pytest

from fleet_marl import workloads as wl
from fleet_marl.config import WorkloadSpec

AZURE = "azure_llm_inference_conv_2023.csv"
POLLUX = [f"pollux_workload-{i}.csv" for i in range(1, 5)]
P_HEAD = "name,time,application,num_replicas,batch_size"
A_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.fixture(autouse=True)
def shipped_samples_only(monkeypatch):
    """Names resolve to the shipped samples, whatever the environment sets."""
    monkeypatch.delenv(wl.TRACES_ENV, raising=False)


def write(tmp_path, text: str, name: str = "t.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- real traces ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", POLLUX)
def test_pollux_traces_parse(name):
    tr = wl.read_pollux(name)
    assert len(tr.name) == len(tr.application) == len(tr.time_s) == len(tr.num_replicas) == 160
    assert tr.time_s.dtype == np.float64 and tr.num_replicas.dtype == np.int64
    assert np.all(np.diff(tr.time_s) >= 0) and tr.time_s[0] >= 0
    assert set(tr.application) <= set(wl.POLLUX_APPLICATIONS)
    assert tr.num_replicas.min() >= 1 and tr.batch_size.min() >= 1
    s = wl.trace_stats(name)
    assert s["jobs"] == 160
    assert s["duration_s"] == tr.time_s[-1] and 20_000 < s["duration_s"] < 40_000
    assert s["jobs_per_hour"] == pytest.approx(160 / s["duration_s"] * 3600)
    assert 1 <= s["mean_gpus"] <= 16 and s["gpu_jobs"] == 160


def test_azure_trace_parses():
    path = wl.resolve_trace(AZURE)
    tr = wl.read_azure(path)
    assert len(tr.time_s) == len(tr.context_tokens) == len(tr.generated_tokens) == 19_366
    assert tr.time_s[0] == 0.0 and np.all(np.diff(tr.time_s) >= 0)
    # 18:15:46.6805900 -> 18:15:50.9951690: the 7th fractional digit is kept
    assert tr.time_s[1] == pytest.approx(4.314579, abs=1e-9)
    s = wl.trace_stats(path)
    assert s["requests"] == 19_366
    assert 3_400 < s["duration_s"] <= 3_600
    assert s["rate_per_s"] == pytest.approx(19_366 / s["duration_s"]) and 5.0 < s["rate_per_s"] < 6.0
    assert s["mean_context_tokens"] == pytest.approx(1155, abs=1)
    assert s["mean_generated_tokens"] == pytest.approx(211, abs=1)


def test_read_trace_dispatches_on_header_and_resolves_names():
    assert isinstance(wl.read_trace(AZURE), wl.AzureTrace)
    assert isinstance(wl.read_trace(POLLUX[0]), wl.PolluxTrace)
    assert wl.resolve_trace(AZURE) == wl.traces_dir() / AZURE


def test_cache_returns_the_same_read_only_arrays(tmp_path):
    p = write(tmp_path, f"{P_HEAD}\na,0,ncf,1,32\nb,5.5,bert,4,384\n")
    tr = wl.read_pollux(p)
    assert wl.read_pollux(str(p)) is tr and wl.read_trace(p) is tr
    for a in (tr.time_s, tr.num_replicas, tr.batch_size):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 99
    assert tr.time_s.tolist() == [0.0, 5.5] and tr.num_replicas.tolist() == [1, 4]
    az = wl.read_azure(write(tmp_path, f"{A_HEAD}\n2023-11-16 18:15:46,10,0\n", "a.csv"))
    assert not az.time_s.flags.writeable and not az.context_tokens.flags.writeable


def test_cache_rereads_a_changed_file(tmp_path):
    p = write(tmp_path, f"{P_HEAD}\na,0,ncf,1,32\n")
    assert len(wl.read_pollux(p).name) == 1
    p.write_text(f"{P_HEAD}\na,0,ncf,1,32\nb,1,ncf,1,32\nc,2,ncf,1,32\n", encoding="utf-8")
    assert len(wl.read_pollux(p).name) == 3


def test_azure_timestamp_fractions(tmp_path):
    # no fraction, 1, 9 and 0 fractional digits; crossing midnight
    rows = ["2023-11-16 23:59:59", "2023-11-17 00:00:00.5", "2023-11-17 00:00:01.123456789", "2023-11-17 00:00:03."]
    p = write(tmp_path, A_HEAD + "\n" + "".join(f"{r},5,1\n" for r in rows))
    assert wl.read_azure(p).time_s.tolist() == pytest.approx([0.0, 1.5, 2.123456789, 4.0], abs=1e-12)


# --- bad rows ------------------------------------------------------------------------------

GOOD_P = "j0,0,ncf,1,32\nj1,10,bert,2,64\n"
GOOD_A = "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"

BAD = [
    # (reader, text, line, column)
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,-5,ncf,1,32\n", 4, "time"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,9,ncf,1,32\n", 4, "time"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,abc,ncf,1,32\n", 4, "time"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,10,resnet,1,32\n", 4, "application"),
    ("pollux", f"{P_HEAD}\nj0,0,ncf,2.5,32\n", 2, "num_replicas"),
    ("pollux", f"{P_HEAD}\nj0,0,ncf,0,32\n", 2, "num_replicas"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,11,ncf,1,-8\n", 4, "batch_size"),
    ("pollux", f"{P_HEAD}\n,0,ncf,1,32\n", 2, "name"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}j2,11,ncf,1\n", 4, "row"),
    ("pollux", f"{P_HEAD}\n{GOOD_P}\nj2,11,ncf,1,32\n", 4, "row"),
    ("pollux", f"name,time,app,num_replicas,batch_size\n{GOOD_P}", 1, "header"),
    ("pollux", f"{P_HEAD}\n", 2, "row"),
    ("pollux", "", 1, "header"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:5x,1,1\n", 4, "TIMESTAMP"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16T18:15:51,1,1\n", 4, "TIMESTAMP"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-02-30 18:15:51,1,1\n", 4, "TIMESTAMP"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:51.1234567890,1,1\n", 4, "TIMESTAMP"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:50.9,1,1\n", 4, "TIMESTAMP"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:51,0,1\n", 4, "ContextTokens"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:51,5,-1\n", 4, "GeneratedTokens"),
    ("azure", f"{A_HEAD}\n{GOOD_A}2023-11-16 18:15:51,5,1,7\n", 4, "row"),
    ("azure", f"{A_HEAD}\r\n", 2, "row"),
    ("trace", f"a,b,c\n{GOOD_P}", 1, "header"),
    ("trace", "", 1, "header"),
]


@pytest.mark.parametrize("reader,text,line,column", BAD)
def test_bad_row_names_file_line_and_column(tmp_path, reader, text, line, column):
    p = write(tmp_path, text)
    read = {"pollux": wl.read_pollux, "azure": wl.read_azure, "trace": wl.read_trace}[reader]
    with pytest.raises(wl.TraceError) as ei:
        read(p)
    e, msg = ei.value, str(ei.value)
    assert msg.startswith(f"{p.resolve()}:{line}: {column} = ")
    assert (e.path, e.line, e.column) == (str(p.resolve()), line, column)
    assert isinstance(e, ValueError) and e.expected in msg


def test_unknown_header_lists_the_formats(tmp_path):
    with pytest.raises(wl.TraceError, match=r":1: header = 'a,b,c'") as ei:
        wl.read_trace(write(tmp_path, "a,b,c\n1,2,3\n"))
    assert P_HEAD in str(ei.value) and A_HEAD in str(ei.value)


def test_missing_trace_names_both_places(tmp_path, monkeypatch):
    monkeypatch.setenv(wl.TRACES_ENV, str(tmp_path))
    assert wl.traces_dir() == tmp_path
    with pytest.raises(FileNotFoundError) as ei:
        wl.resolve_trace("nope.csv")
    msg = str(ei.value)
    assert str(tmp_path / "nope.csv") in msg and "nope.csv" in msg and wl.TRACES_ENV in msg
    write(tmp_path, f"{P_HEAD}\n{GOOD_P}", "mine.csv")
    assert wl.resolve_trace("mine.csv") == tmp_path / "mine.csv"
    assert len(wl.read_pollux("mine.csv").name) == 2


# --- arrival schedules ---------------------------------------------------------------------

RS = 60.0  # round seconds


def sched(seed=0, kind="serve", n=20_000, shared_bursts=None, **kw):
    spec = WorkloadSpec(**kw)
    return wl.arrival_schedule(spec, kind, n, RS, np.random.default_rng(seed), shared_bursts)


def test_mean_per_round_units():
    assert wl.mean_per_round(WorkloadSpec(rate=2.0), "serve", 60.0) == 120.0  # requests/s
    assert wl.mean_per_round(WorkloadSpec(rate=6.0), "train", 60.0) == pytest.approx(0.1)  # jobs/hour


def test_poisson_mean_and_variance():
    m = wl.mean_per_round(WorkloadSpec(rate=0.05), "serve", RS)  # 3 per round
    x = sched(pattern="poisson", rate=0.05)
    assert x.shape == (20_000,) and x.dtype == np.float64 and np.all(x == np.round(x)) and x.min() >= 0
    se = np.sqrt(m / len(x))
    assert abs(x.mean() - m) < 5 * se
    assert x.var() == pytest.approx(m, rel=0.05)
    xt = sched(kind="train", pattern="poisson", rate=30.0)  # 0.5 jobs per round
    assert abs(xt.mean() - 0.5) < 5 * np.sqrt(0.5 / len(xt))


def test_bursty_preserves_mean_and_is_overdispersed():
    m = 3.0
    x = sched(pattern="bursty", rate=m / RS, burst_factor=5.0, burst_fraction=0.2, burst_rounds=4.0)
    p = sched(pattern="poisson", rate=m / RS)
    assert x.mean() == pytest.approx(m, rel=0.05)
    # variance of the MMPP: m + f(1-f)(lam_on - lam_off)^2 (plus autocorrelation, not in the single-round var)
    lam_off = m / (0.2 * 5 + 0.8)
    assert x.var() == pytest.approx(m + 0.16 * (4 * lam_off) ** 2, rel=0.15)
    assert x.var() > 2 * p.var()


@pytest.mark.parametrize("f,rounds", [(0.2, 3.0), (0.5, 10.0), (0.05, 1.0)])
def test_burst_chain_on_fraction_and_run_length(f, rounds):
    c = wl.burst_chain(50_000, f, rounds, np.random.default_rng(1))
    assert c.dtype == bool and c.shape == (50_000,)
    assert c.mean() == pytest.approx(f, abs=0.03)
    starts = np.flatnonzero(np.diff(c.astype(int)) == 1) + 1
    ends = np.flatnonzero(np.diff(c.astype(int)) == -1) + 1
    ends = ends[ends > starts[0]][: len(starts) - 1]
    assert (ends - starts[: len(ends)]).mean() == pytest.approx(rounds, rel=0.1)  # mean burst length


def test_burst_chain_clips_entry_probability():
    c = wl.burst_chain(20_000, 0.9, 1.0, np.random.default_rng(2))  # p = 9 -> 1: on-fraction 1/(1+q)
    assert c.mean() == pytest.approx(0.5, abs=0.03)
    with pytest.raises(ValueError):
        wl.burst_chain(10, 1.0, 3.0, np.random.default_rng(0))


def test_shared_chain_makes_tenants_burst_together():
    n = 5_000
    chain = wl.burst_chain(n, 0.2, 5.0, np.random.default_rng(7))
    kw = dict(pattern="bursty", rate=2.0 / RS, burst_factor=10.0, burst_fraction=0.2, burst_rounds=5.0)
    a = sched(1, n=n, shared_bursts=chain, burst_shared=True, **kw)
    b = sched(2, n=n, shared_bursts=chain, burst_shared=True, **kw)
    assert not np.array_equal(a, b)  # own Poisson draws
    for x in (a, b):
        assert x[chain].mean() > 4 * x[~chain].mean()
    assert np.corrcoef(a, b)[0, 1] > 0.5
    # without burst_shared the chain is ignored: private chains are independent
    c = sched(1, n=n, shared_bursts=chain, **kw)
    d = sched(2, n=n, shared_bursts=chain, **kw)
    assert abs(np.corrcoef(c, d)[0, 1]) < 0.1
    with pytest.raises(ValueError, match="shape"):
        sched(1, n=n, shared_bursts=chain[:-1], burst_shared=True, **kw)


def test_diurnal_follows_the_sine():
    period_rounds = 100
    kw = dict(pattern="diurnal", rate=5.0 / RS, diurnal_amplitude=0.8, diurnal_period_s=period_rounds * RS)
    x = sched(n=200 * period_rounds, **kw).reshape(-1, period_rounds)
    first, second = x[:, :50].mean(), x[:, 50:].mean()
    assert first > second
    assert first == pytest.approx(5.0 * (1 + 0.8 * 2 / np.pi), rel=0.03)  # mean of 1 + A sin over a half period
    assert second == pytest.approx(5.0 * (1 - 0.8 * 2 / np.pi), rel=0.05)
    phase = x.mean(axis=0)
    assert np.argmax(phase) in range(20, 31) and np.argmin(phase) in range(70, 81)


def test_diurnal_rate_is_taken_at_mid_round():
    # period = 2 rounds, A = 1: mid-round rates are 2m, 0, 2m, 0, ... (round starts would give m, m, ...)
    x = sched(n=1000, pattern="diurnal", rate=3.0 / RS, diurnal_amplitude=1.0, diurnal_period_s=2 * RS)
    assert np.all(x[1::2] == 0) and x[0::2].mean() == pytest.approx(6.0, rel=0.1)


@pytest.mark.parametrize("pattern", ["poisson", "bursty", "diurnal"])
def test_schedules_are_determined_by_the_seed(pattern):
    kw = dict(pattern=pattern, rate=2.0 / RS, diurnal_period_s=3600.0)
    a, b, c = sched(11, n=500, **kw), sched(11, n=500, **kw), sched(12, n=500, **kw)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    np.random.seed(0)
    d = sched(11, n=500, **kw)
    np.random.seed(1)
    assert np.array_equal(a, d) and np.array_equal(d, sched(11, n=500, **kw))  # global state is not used


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="kind = 'infer'"):
        sched(kind="infer", n=5)
    with pytest.raises(ValueError, match="kind = 'batch'"):
        wl.mean_per_round(WorkloadSpec(), "batch", 60.0)


# --- trace replay --------------------------------------------------------------------------


def azure_times_by_csv(path) -> list[float]:
    """Seconds since the first row, computed independently of workloads.py."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    stamps = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
    return [(s - stamps[0]).total_seconds() for s in stamps]


def test_trace_counts_match_rows_in_window():
    path = wl.resolve_trace(AZURE)
    t = azure_times_by_csv(path)
    offset, n = 600.0, 20
    x = sched(kind="serve", n=n, pattern="trace", trace=AZURE, trace_offset_s=offset)
    expect = sum(offset <= s < offset + n * RS for s in t)  # 7-digit fractions cut to 6: no row sits that close to an edge
    assert x.sum() == expect and expect > 20 * 60 * 4
    assert x[3] == sum(offset + 3 * RS <= s < offset + 4 * RS for s in t)
    assert np.array_equal(x, sched(99, kind="serve", n=n, pattern="trace", trace=AZURE, trace_offset_s=offset))


def test_trace_sharding_splits_rows():
    kw = dict(kind="serve", n=60, pattern="trace", trace=AZURE)
    whole = sched(**kw)
    parts = [sched(trace_shard=k, trace_shards=3, **kw) for k in range(3)]
    assert np.array_equal(sum(parts), whole) and whole.sum() == 19_366
    assert all(abs(p.sum() - whole.sum() / 3) <= 1 for p in parts)


def test_trace_speedup_packs_rows():
    kw = dict(kind="serve", n=10, pattern="trace", trace=AZURE)
    t = np.asarray(azure_times_by_csv(wl.resolve_trace(AZURE)))
    x1, x2 = sched(**kw), sched(trace_speedup=2.0, **kw)
    assert x1.sum() == np.sum(t < 600) and x2.sum() == np.sum(t < 1200)
    assert x2.sum() == pytest.approx(2 * x1.sum(), rel=0.1)


def test_pollux_trace_replay_for_training(tmp_path):
    p = write(tmp_path, f"{P_HEAD}\na,0,ncf,1,32\nb,59.5,ncf,1,32\nc,60,bert,2,64\nd,200,ncf,1,32\ne,400,ncf,1,32\n")
    x = sched(kind="train", n=4, pattern="trace", trace=str(p))
    assert x.tolist() == [2.0, 1.0, 0.0, 1.0]  # e (round 6) is past the horizon
    y = sched(kind="train", n=5, pattern="trace", trace=str(p), trace_offset_s=59.5, trace_speedup=0.5)
    assert y.tolist() == [2.0, 0.0, 0.0, 0.0, 1.0]  # a dropped (before the offset); b at 0 s, c at 1 s, d at 281 s


def test_real_pollux_trace_replays_every_job():
    x = sched(kind="train", n=500, pattern="trace", trace=POLLUX[0])  # 500 min covers the 27,695 s trace
    assert x.sum() == 160 and x[: 107 // 60].sum() == 0 and x[107 // 60] >= 1  # first job at 107 s


def test_serve_with_a_pollux_file_is_an_error(tmp_path):
    p = write(tmp_path, f"{P_HEAD}\n{GOOD_P}")
    with pytest.raises(wl.TraceError, match="Azure") as ei:
        sched(kind="serve", n=5, pattern="trace", trace=str(p))
    assert "serve" in str(ei.value) and str(p.resolve()) in str(ei.value)
    a = write(tmp_path, f"{A_HEAD}\n{GOOD_A}", "a.csv")
    with pytest.raises(wl.TraceError, match="Pollux"):
        sched(kind="train", n=5, pattern="trace", trace=str(a))

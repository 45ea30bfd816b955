"""The TorchRL credit study on a Ray cluster (issue 33): ``fleet-marl compare --address`` runs
each (arm, N, seed) as a Ray task on a two-node local cluster (``ray.cluster_utils.Cluster``),
resumes after its driver is killed mid-study, and gives the local pool's results bit for bit."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_marl.studies.credit.torchrl_design import CURVE_COLUMNS, KEY, RESULT_COLUMNS, Study

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
#: The smallest study of the tests: the quick study at N = 2 under one arbiter, two arms, one seed (and its sharing part).
ARGS = ("compare", "--quick", "--n", "2", "--arms", "local,difference", "--mechanisms", "proportional", "--seeds", "1", "--no-progress")
#: What differs between two runs of the same study: the clock.
CLOCK = {"run_seconds", "train_seconds", "eval_seconds", "credit_seconds", "credit_ms_per_step", "finished", "seconds"}


def _rows(path: Path, columns) -> list[dict]:
    with path.open() as f:
        rows = [{c: r[c] for c in columns if c not in CLOCK} for r in csv.DictReader(f)]
    return sorted(rows, key=lambda r: tuple(r[k] for k in (*KEY, "iteration") if k in r))


def _env() -> dict:
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONHASHSEED": "0"}


@pytest.fixture(scope="module")
def cluster():
    """A head node and a worker node of one CPU each, on this machine."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes(timeout=120)
    yield c
    c.shutdown()


@pytest.mark.timeout(1800)
def test_a_study_on_a_two_node_cluster_survives_its_driver_and_matches_the_local_pool(tmp_path, cluster):
    out = tmp_path / "on_ray"
    runs = Study.quick(ns=(2,), arms=("local", "difference"), mechanisms=("proportional",), seeds=1).runs()
    argv = [str(BIN / "fleet-marl"), *ARGS, "--address", cluster.address, "--out", str(out)]
    # the driver, killed (SIGKILL: no cleanup) once a run is in the store
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=_env())
    try:
        deadline = time.monotonic() + 900
        while not (out / "results.csv").is_file() or len(_rows(out / "results.csv", RESULT_COLUMNS)) < 1:
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no run finished on the cluster"
            time.sleep(0.2)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=60)
    done = len(_rows(out / "results.csv", RESULT_COLUMNS))
    assert 1 <= done < len(runs)
    # the same command resumes: only the missing runs
    again = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=1200, env=_env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(runs)} runs, {done} done, {len(runs) - done} to go" in again.stdout
    sessions = list(csv.DictReader((out / "sessions.csv").open()))
    assert len(sessions) == 2 and sum(int(s["runs_done"]) for s in sessions) == len(runs)
    # the local pool, the same study: the same numbers, bit for bit
    local = tmp_path / "local"
    r = subprocess.run(
        [str(BIN / "fleet-marl"), *ARGS, "--out", str(local)], check=False, capture_output=True, text=True, timeout=1200, env=_env()
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ray_results, local_results = _rows(out / "results.csv", RESULT_COLUMNS), _rows(local / "results.csv", RESULT_COLUMNS)
    assert len(ray_results) == len(runs) and {tuple(x[k] for k in KEY) for x in ray_results} == {tuple(map(str, k)) for k in runs}
    assert ray_results == local_results
    assert _rows(out / "curves.csv", CURVE_COLUMNS) == _rows(local / "curves.csv", CURVE_COLUMNS)


def test_address_that_nobody_answers_is_an_error_naming_it(tmp_path):
    r = subprocess.run(
        [str(BIN / "fleet-marl"), *ARGS, "--address", "127.0.0.1:9", "--out", str(tmp_path / "s")],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert r.returncode == 2 and "--address '127.0.0.1:9'" in r.stderr, r.stderr[-2000:]
    r = subprocess.run(
        [str(BIN / "fleet-marl"), *ARGS, "--gpus-per-run", "1", "--out", str(tmp_path / "t")],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert r.returncode == 2 and "--gpus-per-run 1.0 is the Ray request of a run on a cluster: give --address too" in r.stderr

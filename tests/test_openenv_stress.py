"""``fleet-marl serve`` as a real process under attack on loopback, bounded in time: 8 concurrent
sessions sending valid steps mixed with random and garbage frames and file-read attempts, a 9th
refused, a client killed mid-episode and its slot freed, 64 MB bodies refused unread, and
through it all the server answers, its memory stays bounded and no session sees another's
episode. docs/llm_agents.md, "Security"."""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

pytest.importorskip("openenv")
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests import servers

pytestmark = pytest.mark.slow

TOKEN = "stress-test-token-5e1d"
CANARY = "canary-value-in-the-servers-environment-41b7"  # /proc/self/environ of the server holds it
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACTION = [1, 2, 1, 1, 1, 1, 1, 3]  # 1 GPU at list price, BF16, batch 8: legal for tiny's tenants
FILE_ATTEMPTS = ["/proc/self/environ", "/etc/passwd", "../../../../proc/self/environ", "/proc/self/cmdline", "~/.bashrc"]
SESSIONS = 8


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def trace_reset(path: str) -> dict:
    tenant = {
        "kind": "train",
        "model": "qwen2.5-0.5b",
        "gpu_type": "h100-sxm",
        "budget": 40.0,
        "workload": {"pattern": "trace", "trace": path},
    }
    return {"type": "reset", "data": {"config": {"tenants": [tenant, tenant]}}}


def garbage(rng: random.Random):
    """One hostile frame: (kind, payload)."""
    choice = rng.randrange(9)
    if choice == 0:
        return "bytes", rng.randbytes(rng.randrange(1, 4096))
    if choice == 1:
        return "text", rng.randbytes(rng.randrange(1, 512)).decode("latin-1")
    if choice == 2:
        return "text", json.dumps(rng.choice([[1, 2], "s", 3, None, True, [{"type": "reset"}]]))
    if choice == 3:
        n = rng.randrange(50, 50_000)
        return "text", "[" * n + "]" * n
    if choice == 4:
        return "text", json.dumps({"type": "".join(rng.choice("abcxyz") for _ in range(rng.randrange(1, 3000)))})
    if choice == 5:
        return "text", json.dumps({"type": "step", "data": {"actions": {"tenant_0": "x" * rng.randrange(1, 50_000)}}})
    if choice == 6:
        return "text", json.dumps(trace_reset(rng.choice(FILE_ATTEMPTS)))
    if choice == 7:
        return "text", json.dumps({"type": "reset", "data": {"config": {"tenants": [{}] * rng.randrange(65, 3000)}}})
    return "text", json.dumps({"type": "reset", "data": {"seed": "not-a-seed", "config": {"max_cycles": 10**9}}})


def client_session(url: str, i: int, connected: threading.Barrier, release: threading.Event, errors: list, answers: list) -> None:
    rng = random.Random(i)
    try:
        with connect(url.replace("http", "ws") + "/ws", additional_headers=AUTH, max_size=None, open_timeout=60) as ws:

            def call(msg):
                ws.send(json.dumps(msg))
                return json.loads(ws.recv(timeout=60))

            episode = f"episode-of-session-{i}"
            first = call({"type": "reset", "data": {"seed": i, "episode_id": episode, "config": {"max_cycles": 6}}})
            assert first["type"] == "observation", first
            connected.wait(timeout=120)
            release.wait(timeout=120)
            rounds = 0
            for _ in range(60):
                if rng.random() < 0.5:
                    kind, payload = garbage(rng)
                    ws.send(payload)
                    r = json.loads(ws.recv(timeout=60))
                    answers.append(r)
                    assert r["type"] == "error" and r["data"]["code"] != "INTERNAL_ERROR", (i, kind, str(payload)[:100], r)
                    continue
                r = call({"type": "step", "data": {"actions": {"tenant_0": ACTION, "tenant_1": ACTION}}})
                if r["type"] == "error":  # the episode ended: start the next one of this session
                    assert "reset" in r["data"]["message"] or r["data"]["code"] == "EXECUTION_ERROR", r
                    assert (
                        call({"type": "reset", "data": {"seed": i, "episode_id": episode, "config": {"max_cycles": 6}}})["type"]
                        == "observation"
                    )
                    rounds = 0
                    continue
                rounds += 1
                obs = r["data"]["observation"]
                assert obs["round"] == rounds, (i, obs["round"], rounds)  # only this session's steps count
                if obs["round"] == 6:
                    assert r["data"]["done"] is True
                    assert (
                        call({"type": "reset", "data": {"seed": i, "episode_id": episode, "config": {"max_cycles": 6}}})["type"]
                        == "observation"
                    )
                    rounds = 0
                state = call({"type": "state"})["data"]
                assert state["episode_id"] == episode and state["round"] == rounds, (i, state)
    except BaseException as exc:  # noqa: BLE001 -- any failure of a client thread, reported by the main thread
        errors.append((i, repr(exc)))


KILLED_CLIENT = textwrap.dedent("""
    import json, sys, time
    from websockets.sync.client import connect
    ws = connect(sys.argv[1], additional_headers={"Authorization": "Bearer " + sys.argv[2]})
    ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
    ws.recv(timeout=60)
    ws.send(json.dumps({"type": "step", "data": {"actions": {"tenant_0": [1, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]}}}))
    ws.recv(timeout=60)
    print("mid-episode", flush=True)
    time.sleep(600)
""")


def open_session(url: str):
    """``(socket, first answer)``: a reset's observation, or the error frame of a refused session."""
    ws = connect(url.replace("http", "ws") + "/ws", additional_headers=AUTH, open_timeout=60)
    with contextlib.suppress(ConnectionClosed):  # refused: the error frame is waiting
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
    return ws, json.loads(ws.recv(timeout=60))


def big_body(url: str, size: int, chunked: bool) -> bytes:
    """POST /reset with a ``size``-byte body over a raw socket; the status line the server sent."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        length = b"Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n".encode()
        s.sendall(
            b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + length
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        block = b"x" * (1 << 20)
        try:
            for _ in range(size // len(block)):
                s.sendall(b"100000\r\n" + block + b"\r\n" if chunked else block)
        except OSError:
            pass  # the server answered and closed before the body was all sent: the point
        return s.recv(4096).split(b"\r\n", 1)[0]


@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
def test_the_server_survives_a_hostile_load_with_bounded_memory(monkeypatch):
    monkeypatch.setenv("FLEET_MARL_STRESS_CANARY", CANARY)
    monkeypatch.setenv("FLEET_MARL_TOKEN", TOKEN)
    proc, url = servers.serve(
        "--mode", "multi", "--task", "tiny", "--max-sessions", str(SESSIONS), token=TOKEN
    )  # the token from the variable
    try:
        # the token guards the running server, as in process
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/health", timeout=30)
        assert refused.value.code == 401
        warm, _ = open_session(url)  # compile and warm up before measuring memory
        warm.close()
        base = rss_kib(proc.pid)

        connected, release = threading.Barrier(SESSIONS + 1), threading.Event()
        errors, answers = [], []
        threads = [
            threading.Thread(target=client_session, args=(url, i, connected, release, errors, answers), daemon=True)
            for i in range(SESSIONS)
        ]
        for t in threads:
            t.start()
        connected.wait(timeout=180)
        extra, first = open_session(url)  # a 9th while 8 are live: refused
        assert first["type"] == "error" and first["data"]["code"] == "CAPACITY_REACHED", first
        with pytest.raises(ConnectionClosed):
            extra.recv(timeout=30)
        release.set()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors[:3]
        assert len(answers) > 100  # the garbage frames were answered, one error frame each
        assert all(CANARY not in json.dumps(a) and "root:" not in json.dumps(a) for a in answers)

        # a client killed mid-episode frees its slot
        holders = [open_session(url)[0] for _ in range(SESSIONS - 1)]
        killed = subprocess.Popen(
            [sys.executable, "-c", KILLED_CLIENT, url.replace("http", "ws") + "/ws", TOKEN],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert killed.stdout.readline().strip() == "mid-episode"
        assert open_session(url)[1]["data"]["code"] == "CAPACITY_REACHED"
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        deadline, ok = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            ws, first = open_session(url)
            if first["type"] == "observation":
                ok = ws
                break
            time.sleep(0.2)
        assert ok is not None, "the killed client's slot was not freed within 30 s"
        for ws in [ok, *holders]:
            ws.close()

        # file reads over HTTP, and bodies of 64 MB, declared and chunked
        for path in FILE_ATTEMPTS:
            req = urllib.request.Request(
                url + "/reset",
                data=json.dumps(trace_reset(path)["data"]).encode(),
                method="POST",
                headers={**AUTH, "Content-Type": "application/json"},
            )
            with pytest.raises(urllib.error.HTTPError) as bad:
                urllib.request.urlopen(req, timeout=60)
            body = bad.value.read().decode()
            assert bad.value.code == 422 and "workload.trace" in body and CANARY not in body and "root:" not in body
        for chunked in (False, True):
            assert big_body(url, 64 << 20, chunked).startswith(b"HTTP/1.1 413"), chunked
        grown = rss_kib(proc.pid) - base
        print(f"server RSS {base / 1024:.0f} MB before the attack, grew by {grown / 1024:.1f} MB; {len(answers)} garbage frames answered")
        assert grown < 64 << 10, f"the server's memory grew by {grown / 1024:.0f} MB under the attack"
        with urllib.request.urlopen(urllib.request.Request(url + "/health", headers=AUTH), timeout=30) as r:
            assert json.load(r)["status"] == "healthy"
        assert proc.poll() is None
    finally:
        if proc is not None:
            servers.stop(proc)

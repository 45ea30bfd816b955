"""``fleet-marl serve`` as a real process, attacked over loopback the way a hostile client
would: more slow and silent connections than the server takes, slow bodies, and sockets that
send worst-case frames. Each test checks the bound docs/llm_agents.md ("Security") states.
Bounded in time: each test runs its own server for well under a minute."""

import contextlib
import json
import os
import socket
import statistics
import threading
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip("openenv")
from websockets.sync.client import connect

from tests import servers
from tests.test_openenv_stress import rss_kib

pytestmark = pytest.mark.slow

ACTIONS = {"actions": {f"tenant_{i}": [1, 2, 1, 1, 1, 1, 1, 3] for i in range(4)}}  # legal for easy's four tenants


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def hostport(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def timed_health(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        assert json.load(r)["status"] == "healthy"
    return time.perf_counter() - t0


def timed_session(url: str) -> float:
    t0 = time.perf_counter()
    with connect(url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
    return time.perf_counter() - t0


def closed_by_server(s: socket.socket, wait: float) -> bool:
    """Whether the server closed ``s`` (EOF, a reset, or an answer then EOF) within ``wait`` seconds."""
    s.settimeout(wait)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.mark.timeout(300)
def test_slow_and_silent_connections_beyond_the_cap_leave_health_and_sessions_answering():
    """More slow (a partial head, a byte now and then) and silent connections than
    --max-connections: the server holds at most its cap, closes the oldest idle one to admit
    a fresh one, so /health and a new session answer within 2 s, and every slow or silent
    connection is closed once --header-timeout has passed; an upgrade whose header line is
    over --max-header-bytes is answered 431, not left hanging."""
    cap, timeout = 64, 3
    proc, url = servers.serve("--task", "easy", "--max-connections", str(cap), "--header-timeout", str(timeout))
    socks: list[socket.socket] = []
    try:
        timed_session(url)  # warm: the first env of the process
        base_fds = fds(proc.pid)
        addr = hostport(url)
        for i in range(3 * cap):  # silent, then slow: a partial head
            s = socket.create_connection(addr, timeout=10)
            if i % 2:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            socks.append(s)
        time.sleep(0.5)
        held = fds(proc.pid) - base_fds
        assert held <= cap + 2, f"the server holds {held} connections; its cap is {cap}"
        health, session = timed_health(url), timed_session(url)
        print(f"{len(socks)} slow and silent connections: /health in {health * 1000:.0f} ms, a session in {session * 1000:.0f} ms")
        assert health < 2.0 and session < 2.0
        # a 9 KB header line in a WebSocket upgrade: refused at once (the head is over the limit)
        big = socket.create_connection(addr, timeout=10)
        big.sendall(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n"
        )
        big.settimeout(timeout + 2)
        assert big.recv(4096).startswith(b"HTTP/1.1 431"), "the oversized upgrade was not answered"
        big.close()
        # a slow one that keeps sending a byte at a time is still closed at its deadline
        slow = socket.create_connection(addr, timeout=10)
        slow.sendall(b"GET /health HTTP/1.1\r\n")
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout + 2:
            try:
                slow.sendall(b"X")
            except OSError:
                break
            time.sleep(0.5)
        assert closed_by_server(slow, 2.0), "a connection dribbling its head was not closed at --header-timeout"
        # every silent or slow connection left is closed once its deadline passed
        time.sleep(timeout + 1)
        alive = [s for s in socks if not closed_by_server(s, 0.05)]
        assert not alive, f"{len(alive)} slow or silent connections still open after --header-timeout"
        assert fds(proc.pid) - base_fds <= 2
        assert timed_health(url) < 2.0
    finally:
        for s in socks:
            s.close()
        servers.stop(proc)


def slow_body(addr, size: int) -> socket.socket:
    """A POST /reset declaring ``size`` bytes that sends all but the last one and waits."""
    s = socket.create_connection(addr, timeout=10)
    s.sendall(b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + f"Content-Length: {size}\r\n\r\n".encode())
    with contextlib.suppress(OSError):  # answered 503 and closed: the budget is spent
        s.sendall(b" " * (size - 1))
    return s


@pytest.mark.timeout(300)
def test_slow_bodies_are_bounded_in_memory_and_time():
    """Hundreds of connections each holding a body of 1 MiB - 1 byte: at most --max-bodies-bytes
    of them are held (the rest get 503 before a byte is read), each held one gets 408 at
    --body-timeout, the server's memory stays within the budget plus a stated margin while they
    are open and comes back near where it started once they close."""
    budget, timeout, n = 8 << 20, 4, 300
    proc, url = servers.serve(
        "--task",
        "easy",
        "--max-bodies-bytes",
        str(budget),
        "--body-timeout",
        str(timeout),
        "--max-body-bytes",
        str(1 << 20),
        "--max-connections",
        "512",
        "--header-timeout",
        "30",
    )
    socks: list[socket.socket] = []
    try:
        timed_session(url)
        base = rss_kib(proc.pid)
        addr = hostport(url)
        t0 = time.monotonic()
        for _ in range(n):
            socks.append(slow_body(addr, (1 << 20) - 1))
        peak = rss_kib(proc.pid)
        statuses = []
        for s in socks:
            s.settimeout(timeout + 5)
            try:
                statuses.append(s.recv(4096).split(b"\r\n", 1)[0])
            except (TimeoutError, ConnectionResetError):
                statuses.append(b"")
        elapsed = time.monotonic() - t0
        peak = max(peak, rss_kib(proc.pid))
        busy = sum(x.startswith(b"HTTP/1.1 503") for x in statuses)
        slow = sum(x.startswith(b"HTTP/1.1 408") for x in statuses)
        for s in socks:
            s.close()
        time.sleep(1.0)
        after = rss_kib(proc.pid)
        print(
            f"{n} slow bodies: {busy} answered 503, {slow} answered 408 in {elapsed:.1f} s; RSS {base / 1024:.0f} MB, "
            f"peak +{(peak - base) / 1024:.1f} MB, after +{(after - base) / 1024:.1f} MB"
        )
        assert slow + busy == n and 1 <= slow <= budget // ((1 << 20) - 1)
        assert elapsed < timeout + 30
        assert peak - base < 64 << 10, "memory beyond the body budget's bound"
        assert after - base < 24 << 10, "memory not returned after the bodies closed"
        assert timed_health(url) < 2.0
    finally:
        for s in socks:
            s.close()
        servers.stop(proc)


def worst_frames(limit: int) -> list:
    """Frames that cost a server most per byte, each just under (or over) ``limit`` bytes:
    many small numbers, nested lists, many keys, one long string, a binary frame, an over-long
    message, a lone surrogate."""

    def fill(prefix: str, unit: str, suffix: str) -> str:
        return prefix + unit.join([""] * ((limit - len(prefix) - len(suffix)) // len(unit))) + suffix

    ints = fill('{"type":"step","data":{"actions":{"tenant_0":[0', ",0", "]}}}")
    deep = fill('{"type":"reset","data":{"x":[[[1]]', ",[[[1]]]", "]}}")
    keys = json.dumps({"type": "reset", "data": {"config": {f"k{i}": i for i in range(limit // 16)}}})[: limit - 2]
    keys = keys[: keys.rfind(",")] + "}}}"
    text = json.dumps({"type": "step", "data": {"actions": {"tenant_0": "x" * (limit - 60)}}})
    return [ints, deep, keys, text, b"\x00" * limit, "x" * (2 * limit), '{"type":"reset","data":{"config":{"\\ud800":1}}}']


def attacker(url: str, frames: list, stop: threading.Event, sent: list) -> None:
    while not stop.is_set():
        with connect(url.replace("http", "ws") + "/ws", max_size=None, open_timeout=30) as ws:
            for f in frames:
                if stop.is_set():
                    break
                ws.send(f)
                json.loads(ws.recv(timeout=60))
                sent.append(len(f))


def bystander(url: str, steps: int) -> list[float]:
    out = []
    with connect(url.replace("http", "ws") + "/ws", open_timeout=30) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "config": {"max_cycles": 1000}}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        for _ in range(steps):
            t0 = time.perf_counter()
            ws.send(json.dumps({"type": "step", "data": ACTIONS}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)
    return out


@pytest.mark.timeout(300)
def test_four_attacking_sockets_do_not_stall_a_bystander():
    """Four sockets sending worst-case frames back to back: the bystander's step p99 stays
    within 2x its unloaded p99 + 20 ms (parsing runs on the session's thread, messages are
    counted before they are parsed, each socket is read at --max-bytes-per-s, and there is no
    permessage-deflate to inflate a small frame into a large message)."""
    proc, url = servers.serve("--task", "easy")
    try:
        with connect(url.replace("http", "ws") + "/ws", compression="deflate") as ws:
            assert not ws.protocol.extensions, "the server accepted permessage-deflate"
        bystander(url, 30)  # warm
        quiet = bystander(url, 300)
        limit = 256 << 10
        stop, sent = threading.Event(), []
        threads = [
            threading.Thread(target=attacker, args=(url, worst_frames(limit)[k:] + worst_frames(limit)[:k], stop, sent)) for k in range(4)
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)
        loaded = bystander(url, 300)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        p_quiet, p_loaded = np.percentile(quiet, 99), np.percentile(loaded, 99)
        print(
            f"bystander step p50/p99: {statistics.median(quiet) * 1e3:.1f}/{p_quiet * 1e3:.1f} ms alone, "
            f"{statistics.median(loaded) * 1e3:.1f}/{p_loaded * 1e3:.1f} ms beside 4 attackers ({len(sent)} frames, "
            f"{sum(sent) / 2**20:.1f} MiB)"
        )
        assert len(sent) >= 8, "the attackers did not attack"
        assert p_loaded <= 2 * p_quiet + 0.020
        assert timed_health(url) < 2.0
    finally:
        servers.stop(proc)


def test_session_ids_never_reach_the_log_and_no_server_header_is_sent():
    """With --allow-attach a session id is a capability: the access log writes it redacted.
    No ``server`` header names the software."""
    import signal

    proc, url = servers.serve("--task", "tiny", "--allow-attach", "--log-level", "info")
    try:
        req = urllib.request.Request(
            url + "/mcp",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}).encode(),
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            sid = json.load(r)["result"]["session_id"]
            assert "server" not in {k.lower() for k in r.headers}
        with connect(url.replace("http", "ws") + f"/ws?session_id={sid}", open_timeout=30) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        with urllib.request.urlopen(url + f"/health?session_id={sid}", timeout=30) as r:
            assert r.status == 200
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert sid not in out, "a session id reached the server's log"
    assert "session_id=<redacted>" in out, out[-2000:]


def _frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A masked client frame (RFC 6455) of a payload under 64 KiB."""
    mask = os.urandom(4)
    head = bytes([0x80 | opcode]) + (
        bytes([0x80 | len(payload)]) if len(payload) < 126 else bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    )
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_frame(s: socket.socket) -> bytes:
    head = s.recv(2)
    n = head[1] & 0x7F
    if n == 126:
        n = int.from_bytes(s.recv(2), "big")
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    return data


def test_text_that_is_not_utf8_is_an_error_frame_and_the_session_lives():
    """RFC 6455 lets a server fail the connection on a text frame of bad UTF-8; this one answers
    it with an error frame, as every other bad frame, and the session goes on."""
    proc, url = servers.serve("--task", "tiny")
    try:
        s = socket.create_connection(hostport(url), timeout=30)
        s.sendall(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 101")
        s.sendall(_frame(b'{"type": "reset", "data": {"task": "\xff\xfe"}}'))
        r = json.loads(_read_frame(s))
        assert r["type"] == "error" and r["data"]["message"].startswith("Invalid text: the message is not valid UTF-8")
        s.sendall(_frame(json.dumps({"type": "reset", "data": {"seed": 0}}).encode()))
        assert json.loads(_read_frame(s))["type"] == "observation"
        s.close()
    finally:
        servers.stop(proc)


def test_a_ping_flood_closes_its_own_connection_only():
    """Pings are answered on the event loop: past a burst, a flood of them closes that socket
    (1008), and another session goes on as before."""
    proc, url = servers.serve("--task", "tiny")
    try:
        with connect(url.replace("http", "ws") + "/ws", open_timeout=30) as calm:
            calm.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(calm.recv(timeout=30))["type"] == "observation"
            s = socket.create_connection(hostport(url), timeout=30)
            s.sendall(
                b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            assert s.recv(4096).startswith(b"HTTP/1.1 101")
            with contextlib.suppress(OSError):  # the server closes it mid-flood
                for _ in range(5000):
                    s.sendall(_frame(b"p", 0x9))
            data = b""
            with contextlib.suppress(OSError):
                s.settimeout(5)
                while chunk := s.recv(65536):
                    data += chunk
            s.close()
            close_at = data.find(b"\x88")
            assert close_at >= 0 and int.from_bytes(data[close_at + 2 : close_at + 4], "big") == 1008, data[-40:]
            calm.send(json.dumps({"type": "state"}))
            assert json.loads(calm.recv(timeout=30))["type"] == "state"
    finally:
        servers.stop(proc)


def test_concurrent_http_env_routes_run_one_at_a_time_and_never_queue():
    """/reset, /step and /state build an env per request: one runs at a time and the others are
    answered 503 at once, so a flood of them cannot hold connections or session slots."""
    import urllib.error

    proc, url = servers.serve("--task", "easy")
    try:
        timed_session(url)
        statuses: list[int] = []

        def reset() -> None:
            req = urllib.request.Request(url + "/reset", data=b'{"seed": 0}', method="POST", headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    statuses.append(r.status)
            except urllib.error.HTTPError as e:
                assert e.code == 503 and json.load(e)["code"] == "SERVER_BUSY" and e.headers["Retry-After"] == "1"
                statuses.append(e.code)

        for _ in range(5):
            threads = [threading.Thread(target=reset) for _ in range(16)]
            for t in threads:
                t.start()
            assert timed_health(url) < 2.0
            for t in threads:
                t.join(timeout=60)
        assert len(statuses) == 80 and statuses.count(200) >= 5 and set(statuses) <= {200, 503}
        print(f"80 concurrent HTTP resets: {statuses.count(200)} ran, {statuses.count(503)} answered 503 at once")
    finally:
        servers.stop(proc)

"""``fleet-marl`` server processes for the tests that run one for real (``serve``, ``view``):
started on 127.0.0.1 at a free port in a session of their own, awaited until they answer, and
stopped with their whole process group."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str, port: int, ready_path: str = "/health", token: str | None = None, timeout: float = 120.0) -> subprocess.Popen:
    """``fleet-marl COMMAND --host 127.0.0.1 --port PORT --log-level warning ARGS`` (``args`` is
    the command and its options) as a process, once a
    GET of ``ready_path`` answers 200 (for ``/health``: with ``"status": "healthy"``), sending
    ``token`` as a bearer token if given. Fails with the process's output if it exits first, and
    stops it if it does not answer within ``timeout`` seconds."""
    exe = BIN / "fleet-marl"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fleet_marl.cli"]
    proc = subprocess.Popen(  # ARGS after the defaults, so that a test's own --log-level wins
        [*cmd, args[0], "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *args[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"http://127.0.0.1:{port}{ready_path}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"fleet-marl {args[0]} exited with {proc.returncode}:\n{out}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as r:
                if r.status == 200 and (ready_path != "/health" or json.load(r)["status"] == "healthy"):
                    return proc
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(f"fleet-marl {args[0]} did not answer {ready_path} within {timeout:.0f} s")
        time.sleep(0.3)


def serve(*args: str, token: str | None = None) -> tuple[subprocess.Popen, str]:
    """``fleet-marl serve ARGS`` on a free port once ``/health`` answers healthy (:func:`start`):
    the process and its base URL."""
    port = free_port()
    return start("serve", *args, port=port, token=token), f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group, SIGKILL after 20 s; its output pipe closed."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
    if proc.stdout:
        proc.stdout.close()

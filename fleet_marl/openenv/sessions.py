"""The server's one session table: every live session, each counted once against
``ServerLimits.max_sessions`` (:mod:`fleet_marl.openenv.server` opens and closes them).

A session is a WebSocket's (``ws``), one created over HTTP with ``openenv/session/create``
(``http``: it expires after ``http_session_idle_s`` with no socket on it, and any new session
that finds the server full takes the slot of the least recently used one), or one HTTP
``/reset``, ``/step`` or ``/state`` while it runs (``request``). Each runs its env on a thread of
its own: an env is used by one thread.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fleet_marl.openenv.limits import ServerLimits


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved. :meth:`take` spends ``n`` and returns
    the seconds until the balance is back to zero (0 when nothing is owed): a caller waits that
    long (:class:`Pace`) or refuses (the server's ping limit)."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = float(rate), float(burst)
        self.tokens, self.at = self.burst, time.monotonic()

    def take(self, n: float) -> float:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate) - n
        self.at = now
        return max(-self.tokens / self.rate, 0.0)


class Pace(TokenBucket):
    """A token bucket over the bytes one socket sends: ``rate`` bytes a second, bursts up to
    ``burst``. :meth:`wait` waits (never refuses) until the message's bytes are earned, so a
    client that floods the server with large messages is slowed to ``rate`` while the socket's
    unread frames wait in TCP's buffers; one that sends small messages is never slowed."""

    async def wait(self, n: int) -> None:
        owed = self.take(n)
        if owed > 0:
            await asyncio.sleep(owed)


class CapacityError(RuntimeError):
    def __init__(self, active: int, limit: int):
        self.active, self.limit = active, limit
        super().__init__(f"Server at capacity ({active}/{limit} sessions); try again when a session ends")


@dataclass(eq=False)
class Session:
    """One live session: its env, who opened it and whether a socket holds it."""

    id: str
    env: Any
    origin: str  # "ws", "http" (openenv/session/create) or "request" (one HTTP /reset or /step)
    executor: ThreadPoolExecutor
    attached: bool = False
    last_active: float = field(default_factory=time.monotonic)


class SessionTable:
    """Every live session of the server, each counted once against ``limits.max_sessions``."""

    def __init__(self, factory: Callable[[], Any], limits: ServerLimits):
        self.factory, self.limits = factory, limits
        self.sessions: dict[str, Session] = {}
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        return len(self.sessions)

    def _expired(self, now: float) -> list[Session]:
        idle = self.limits.http_session_idle_s
        return [s for s in self.sessions.values() if s.origin == "http" and not s.attached and now - s.last_active > idle]

    async def open(self, origin: str) -> Session:
        """A new session; ``CapacityError`` when ``max_sessions`` are live and none can be
        freed. The same rule for every origin: an expired HTTP session is closed first, then,
        if the table is still full, the least recently used HTTP session that no socket holds
        (so sessions created over HTTP and never attached cannot lock anyone out)."""
        async with self._lock:
            freed = self._expired(time.monotonic())
            if len(self.sessions) - len(freed) >= self.limits.max_sessions:
                idle = sorted(
                    (s for s in self.sessions.values() if s.origin == "http" and not s.attached and s not in freed),
                    key=lambda s: s.last_active,
                )
                freed += idle[:1]
            for s in freed:
                self._drop(s)
            if len(self.sessions) >= self.limits.max_sessions:
                raise CapacityError(len(self.sessions), self.limits.max_sessions)
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-session")
            session = Session(uuid.uuid4().hex, None, origin, executor)
            self.sessions[session.id] = session  # holds the slot while the env is built
        try:
            session.env = await asyncio.get_running_loop().run_in_executor(executor, self.factory)
        except BaseException:
            self.sessions.pop(session.id, None)
            executor.shutdown(wait=False)
            raise
        return session

    def _drop(self, s: Session) -> None:
        self.sessions.pop(s.id, None)
        env, s.env = s.env, None
        if env is not None:
            s.executor.submit(env.close)
        s.executor.shutdown(wait=False)

    async def close(self, session: Session | None) -> None:
        if session is not None:
            async with self._lock:
                self._drop(session)

    async def reap(self) -> int:
        """Close the expired HTTP sessions; return how many."""
        async with self._lock:
            gone = self._expired(time.monotonic())
            for s in gone:
                self._drop(s)
        return len(gone)

    async def attach(self, session_id: str) -> Session:
        """The session created over HTTP with this id, now held by a socket."""
        async with self._lock:
            s = self.sessions.get(session_id)
            if s is not None and s in self._expired(time.monotonic()):
                self._drop(s)  # expired: the reaper has not run yet, but it is gone
                s = None
            if s is None or s.origin != "http" or s.attached or s.env is None:
                raise LookupError("no session created over HTTP with this id is free to attach")
            s.attached, s.last_active = True, time.monotonic()
            return s

    async def run(self, session: Session, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the session's own thread (an env is used by one thread)."""
        session.last_active = time.monotonic()
        try:
            return await asyncio.get_running_loop().run_in_executor(session.executor, functools.partial(fn, *args, **kwargs))
        finally:
            session.last_active = time.monotonic()


__all__ = ["CapacityError", "Pace", "Session", "SessionTable", "TokenBucket"]

"""The server's connections, bounded before any route or token check runs: how many are open,
how long a request's head, a WebSocket's handshake or an idle keep-alive connection may take,
and how large a head may be. ``fleet-marl serve`` runs uvicorn with :func:`uvicorn_config`.

uvicorn answers a connection as soon as it is accepted and waits for its request for ever; one
client that opens connections and sends nothing (or a byte now and then) would hold every file
descriptor of the server. Here every connection is counted by a :class:`ConnectionGate`:

- a request's head (and a WebSocket upgrade's handshake) must arrive within
  ``header_timeout_s``, in at most ``max_header_bytes`` (431 past it); a connection idle
  between requests is closed after ``keep_alive_s``;
- at most ``max_connections`` are open: one more closes the oldest connection that has not
  sent a whole head yet, is idle between requests or is still sending a body (in that order of
  preference), and when every open connection is serving a request or holds a WebSocket
  session, the new one is answered 503 and closed;
- what the access log writes has every ``session_id`` value replaced by ``<redacted>``;
- a WebSocket text message that is not valid UTF-8 reaches the session, which answers it with
  an error frame, instead of closing the connection (:class:`TextTolerantWebSockets`).

The body of an HTTP request (its size, the bodies held at once, its read deadline) is the ASGI
guard's (:mod:`fleet_marl.openenv.guard`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.openenv.sessions import TokenBucket

log = logging.getLogger("fleet_marl.openenv")

#: File descriptors a server keeps beside its connections (listening socket, log files, threads' pipes).
SPARE_FDS = 64

_BUSY = json.dumps(
    {"detail": "the server has as many open connections as it takes (--max-connections); try again shortly", "code": "SERVER_BUSY"}
).encode()
_TOO_LARGE = json.dumps(
    {"detail": "the request's line and headers are over this server's limit (--max-header-bytes)", "code": "HEADERS_TOO_LARGE"}
).encode()
HEADERS_TOO_LARGE_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
    + f"content-length: {len(_TOO_LARGE)}\r\n\r\n".encode()
    + _TOO_LARGE
)
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n"
    + f"content-length: {len(_BUSY)}\r\n\r\n".encode()
    + _BUSY
)


class ConnectionGate:
    """The open connections of one server, oldest first, and the rule that admits one more."""

    #: Eviction order: the states a connection may be closed in to admit another, best first.
    EVICTABLE = ("head", "keepalive", "handshake", "body")

    def __init__(self, limits: ServerLimits):
        self.limits = limits
        self.open: dict[Any, GuardedH11Protocol] = {}  # transport -> protocol, in the order they connected
        self.refused = 0
        self.evicted = 0

    def _purge(self) -> None:
        for t in [t for t in self.open if t.is_closing()]:
            del self.open[t]

    def admit(self, proto: GuardedH11Protocol) -> bool:
        """Count ``proto``'s connection in; False when it must be refused (every open connection busy)."""
        self._purge()
        if len(self.open) >= self.limits.max_connections:
            for state in self.EVICTABLE:
                victim = next((p for p in self.open.values() if p.phase == state), None)
                if victim is not None:
                    victim.drop()
                    self.evicted += 1
                    break
            else:
                self.refused += 1
                return False
        self.open[proto.transport] = proto
        return True

    def release(self, proto: GuardedH11Protocol) -> None:
        self.open.pop(proto.transport, None)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, counted by a :class:`ConnectionGate` and timed from its first
    byte to its whole head (``gate`` is set on the subclass :func:`guarded_protocol` makes)."""

    gate: ConnectionGate

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.state = "head"  # head -> body -> busy -> keepalive -> head ...; or head -> handshake -> ws
        self.head_bytes = 0  # of the head being read
        self.ws: WebSocketsSansIOProtocol | None = None
        self._deadline: asyncio.TimerHandle | None = None
        if not self.gate.admit(self):
            self.state = "refused"
            transport.write(BUSY_RESPONSE)
            transport.close()
            return
        self._arm()

    @property
    def phase(self) -> str:
        """``state``, with a WebSocket whose handshake is done as ``"ws"`` (a session: never evicted)."""
        if self.state == "handshake" and self.ws is not None and self.ws.handshake_complete:
            return "ws"
        return self.state

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.gate.limits.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.phase in ("head", "handshake"):
            self.drop()

    def drop(self) -> None:
        """Close the connection now (a slow or idle one, or one evicted for a new one)."""
        self._disarm()
        self.gate.release(self)
        self.state = "closed"
        self.transport.abort()  # the WebSocket's too, after an upgrade: one transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.gate.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.state == "keepalive":  # the next request's head starts: its own deadline
            self.state, self.head_bytes = "head", 0
            self._arm()
        if self.state == "head":
            # h11 bounds a head that arrives in pieces, not one that arrives whole: count it here
            end = data.find(b"\r\n\r\n")
            self.head_bytes += end + 4 if end >= 0 else len(data)
            if self.head_bytes > self.gate.limits.max_header_bytes:
                self._disarm()
                self.gate.release(self)
                self.state = "closed"
                self.transport.write(HEADERS_TOO_LARGE_RESPONSE)
                self.transport.close()
                return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.state == "head" and self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the head is in; the guard bounds the body
            self.state = "body" if self.cycle.more_body else "busy"
        elif self.state == "body" and self.cycle is not None and not self.cycle.more_body:
            self.state = "busy"

    def handle_websocket_upgrade(self, event) -> None:
        self.state = "handshake"  # the deadline stays armed until the WebSocket's handshake completes
        super().handle_websocket_upgrade(event)
        proto = self.transport.get_protocol()
        self.ws = proto if isinstance(proto, WebSocketsSansIOProtocol) else None  # TextTolerantWebSockets

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.state in ("busy", "body"):
            self.state = "keepalive"


class TextTolerantWebSockets(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, except that a text message that is not valid UTF-8 reaches
    the app (its bad bytes as lone surrogates, ``surrogateescape``) instead of closing the
    connection with 1007: the session answers it with an error frame and lives
    (:meth:`fleet_marl.openenv.protocol.Protocol.decode`), as it does every other bad frame; and
    that a client's pings are answered at most ``PINGS_PER_S`` a second (bursts of
    ``PING_BURST``): a flood of them, which the event loop would answer one by one, closes the
    connection with 1008 (policy violation)."""

    PINGS_PER_S, PING_BURST = 10.0, 50.0

    def handle_ping(self) -> None:
        if not hasattr(self, "pings"):
            self.pings = TokenBucket(self.PINGS_PER_S, self.PING_BURST)
        if self.pings.take(1) > 0:
            self.conn.send_close(1008, "too many pings")
            self.handle_parser_exception()
            return
        super().handle_ping()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type != "text" or self.close_sent:
            return super().send_receive_event_to_app()
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        self.queue.put_nowait({"type": "websocket.receive", "text": data.decode("utf-8", "surrogateescape")})
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()


def guarded_protocol(limits: ServerLimits) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` subclass with a gate of its own (one per server)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"gate": ConnectionGate(limits)})


class RedactSessionIds(logging.Filter):
    """Replaces every ``session_id=<value>`` of a log record's text by ``session_id=<redacted>``."""

    PATTERN = re.compile(r"(session_id=)[^&\s\"']*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any("session_id=" in str(a) for a in record.args):
            record.args = tuple(self.PATTERN.sub(r"\1<redacted>", a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "session_id=" in record.msg:
            record.msg = self.PATTERN.sub(r"\1<redacted>", record.msg)
        return True


def redact_session_ids() -> None:
    """Install :class:`RedactSessionIds` on uvicorn's loggers (the access log and the WebSocket lines)."""
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSessionIds) for f in logger.filters):
            logger.addFilter(RedactSessionIds())


def ensure_fds(limits: ServerLimits) -> None:
    """Raise the soft file-descriptor limit so that ``max_connections`` connections and the
    sessions' threads fit; ValueError naming ``--max-connections`` when the hard limit is lower."""
    need = limits.max_connections + limits.max_sessions + SPARE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise ValueError(
                f"--max-connections {limits.max_connections}: this process may open at most {hard} files (ulimit -n); "
                f"expected --max-connections + --max-sessions + {SPARE_FDS} <= {hard}"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def uvicorn_config(app, limits: ServerLimits, host: str, port: int, log_level: str = "info"):
    """The ``uvicorn.Config`` that serves ``app`` within ``limits``: the guarded h11 protocol,
    WebSocket messages of at most 4 x ``max_message_bytes`` (a longer one closes with 1009
    before it is read in full; up to that, the session answers an error frame), no
    permessage-deflate (a small compressed frame cannot inflate into a large message), no
    ``server`` header."""
    ensure_fds(limits)
    redact_session_ids()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_protocol(limits),
        ws=TextTolerantWebSockets,
        ws_max_size=4 * limits.max_message_bytes,
        ws_per_message_deflate=False,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # a float works (loop.call_later)
        server_header=False,
    )


__all__ = [
    "BUSY_RESPONSE",
    "HEADERS_TOO_LARGE_RESPONSE",
    "ConnectionGate",
    "GuardedH11Protocol",
    "RedactSessionIds",
    "TextTolerantWebSockets",
    "ensure_fds",
    "guarded_protocol",
    "redact_session_ids",
    "uvicorn_config",
]

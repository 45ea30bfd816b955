"""The server's ASGI guard (:func:`fleet_marl.openenv.make_app` wraps the app in it), checked
before any route runs: the ``Host`` header, the bearer token, a WebSocket's ``Origin``, and the
HTTP request bodies (each one's size and read deadline, and the bytes held over all of them).
The connections themselves are bounded below it (:mod:`fleet_marl.openenv.transport`)."""

from __future__ import annotations

import asyncio
import hmac
import json
from urllib.parse import urlsplit

from fleet_marl.openenv.limits import ServerLimits, count_items, json_depth, without_strings

UNAUTHORIZED = {"detail": "a bearer token is required: send 'Authorization: Bearer <token>'"}


def _header(scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope.get("headers", ()) if k == name), None)


def host_name(host: str) -> str:
    """The name of a ``Host`` header value, without its port (``[::1]:8000`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware.

    - ``Host`` must name one of ``limits.allowed_hosts`` (``"*"``: any), else 400: a page that
      points its own name at a loopback server (DNS rebinding) reaches nothing;
    - a bearer token on every HTTP route and on every WebSocket, when ``token`` is set (401),
      apart from a ``GET`` or ``HEAD`` of a path in ``public``: the viewer's page files, which
      hold no data (:data:`fleet_marl.openenv.viewer.PAGE_PATHS`; its data routes need the token);
    - a WebSocket whose ``Origin`` header (a browser's) is neither the server's own host nor in
      ``limits.allowed_origins`` is refused (403): another site's page cannot drive a session;
    - an HTTP body of at most ``max_body_bytes`` (a larger declared ``Content-Length`` gets 413
      unread; a chunked body is read up to the limit, then 413), in whole within
      ``body_timeout_s`` (408), and at most ``max_bodies_bytes`` held over every request at
      once (503 with ``Retry-After``: a declared length is reserved before a byte is read); a
      body of more than ``max_items`` JSON values (413) or nested deeper than ``max_depth``
      (400) never reaches the app, which parses it on the event loop.
    """

    def __init__(self, app, token: str | None, limits: ServerLimits, public: frozenset[str] = frozenset()):
        self.app, self.limits, self.public = app, limits, frozenset(public)
        self.token = token.encode() if token else None
        self.bodies_bytes = 0  # held now, over every request

    def _authorized(self, scope) -> bool:
        if self.token is None:
            return True
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and scope.get("path") in self.public:
            return True
        v = _header(scope, b"authorization")
        if v is None:
            return False
        scheme, _, given = v.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)

    def _host_allowed(self, scope) -> bool:
        allowed = self.limits.allowed_hosts
        if "*" in allowed:
            return True
        host = _header(scope, b"host")
        return host is not None and host_name(host.decode("latin-1")) in allowed

    def _origin_allowed(self, scope) -> bool:
        origin = _header(scope, b"origin")
        if origin is None:  # not a browser: the token (if any) decides
            return True
        allowed = self.limits.allowed_origins
        text = origin.decode("latin-1").strip().lower()
        if "*" in allowed or text in allowed:
            return True
        host = _header(scope, b"host")
        return host is not None and urlsplit(text).netloc == host.decode("latin-1").strip().lower()

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        refusal = None
        if not self._host_allowed(scope):
            refusal = 400, {"detail": "Host: not a name this server answers (its operator sets --allowed-host)", "code": "BAD_HOST"}
        elif not self._authorized(scope):
            refusal = 401, UNAUTHORIZED
        elif kind == "websocket" and not self._origin_allowed(scope):
            refusal = 403, {"detail": "Origin: not this server's host nor an origin it allows (--allowed-origin)", "code": "BAD_ORIGIN"}
        if refusal is not None:
            return await _refuse(scope, receive, send, *refusal)
        if kind == "websocket":
            return await self.app(scope, receive, send)
        return await self._http(scope, receive, send)

    async def _http(self, scope, receive, send):
        limits = self.limits
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return await _send_json(send, 400, {"detail": "Content-Length: expected a non-negative integer"})
            if int(declared) > limits.max_body_bytes:
                return await _send_json(send, 413, _too_large(limits.max_body_bytes, int(declared)))
        held = int(declared) if declared is not None else 0
        if self.bodies_bytes + held > limits.max_bodies_bytes:
            return await _send_json(send, 503, _busy(limits), retry=True)
        self.bodies_bytes += held
        try:
            chunks, size = [], 0
            loop = asyncio.get_running_loop()
            deadline = loop.time() + limits.body_timeout_s
            while True:
                try:
                    message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
                except TimeoutError:
                    return await _send_json(send, 408, _slow(limits))
                if message["type"] == "http.disconnect":
                    return
                body = message.get("body", b"")
                size += len(body)
                if size > limits.max_body_bytes:
                    return await _send_json(send, 413, _too_large(limits.max_body_bytes, None))
                if size > held:  # a chunked body, or more than declared: hold what arrived
                    if self.bodies_bytes + size - held > limits.max_bodies_bytes:
                        return await _send_json(send, 503, _busy(limits), retry=True)
                    self.bodies_bytes += size - held
                    held = size
                chunks.append(body)
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            if body:  # the app parses it on the event loop: bound what that costs, as for a message
                bare = without_strings(body.decode("utf-8", "surrogateescape"))
                if count_items(bare) > limits.max_items:
                    return await _send_json(send, 413, _too_many(limits))
                if json_depth(bare) > limits.max_depth + 4:
                    return await _send_json(send, 400, _too_deep(limits))
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        finally:
            self.bodies_bytes -= held


def _too_large(limit: int, declared: int | None) -> dict:
    what = f"a body of {declared} bytes" if declared is not None else "a body"
    return {"detail": f"{what} is over this server's limit of {limit} bytes (--max-body-bytes)", "code": "BODY_TOO_LARGE"}


def _too_many(limits: ServerLimits) -> dict:
    return {"detail": f"a body of more than {limits.max_items} JSON values (--max-items)", "code": "BODY_TOO_LARGE"}


def _too_deep(limits: ServerLimits) -> dict:
    return {"detail": f"a body nested more than {limits.max_depth} levels deep", "code": "VALIDATION_ERROR"}


def _busy(limits: ServerLimits) -> dict:
    return {
        "detail": f"the server holds {limits.max_bodies_bytes} bytes of request bodies at most (--max-bodies-bytes); try again shortly",
        "code": "SERVER_BUSY",
    }


def _slow(limits: ServerLimits) -> dict:
    return {"detail": f"the body did not arrive within {limits.body_timeout_s:g} s (--body-timeout)", "code": "BODY_TIMEOUT"}


async def _refuse(scope, receive, send, status: int, payload: dict) -> None:
    if scope["type"] == "http":
        return await _send_json(send, status, payload, auth=status == 401)
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await _send_json(send, status, payload, prefix="websocket.http.response", auth=status == 401)
    else:
        await send({"type": "websocket.close", "code": 1008})


async def _send_json(send, status: int, payload: dict, prefix: str = "http.response", auth: bool = False, retry: bool = False) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if auth:
        headers.append((b"www-authenticate", b"Bearer"))
    if retry:
        headers.append((b"retry-after", b"1"))
    if prefix == "http.response":
        headers.append((b"connection", b"close"))
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": body})


__all__ = ["Guard", "host_name"]

"""The server's ASGI guard (:func:`fleet_marl.openenv.make_app` wraps the app in it): the bearer
token and the size of HTTP bodies, checked before any route runs."""

from __future__ import annotations

import hmac
import json


class Guard:
    """ASGI middleware: a bearer token on every HTTP route and on every WebSocket (when
    ``token`` is set), and HTTP request bodies of at most ``max_body_bytes`` (a larger declared
    ``Content-Length`` gets 413 without a byte of the body read; a chunked body is read up to the
    limit, then 413)."""

    def __init__(self, app, token: str | None, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.token = token.encode() if token else None

    def _authorized(self, scope) -> bool:
        if self.token is None:
            return True
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                scheme, _, given = v.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            if not self._authorized(scope):
                await receive()  # websocket.connect
                if "websocket.http.response" in scope.get("extensions", {}):
                    await _send_json(
                        send,
                        401,
                        {"detail": "a bearer token is required: send 'Authorization: Bearer <token>'"},
                        prefix="websocket.http.response",
                        auth=True,
                    )
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self._authorized(scope):
            return await _send_json(send, 401, {"detail": "a bearer token is required: send 'Authorization: Bearer <token>'"}, auth=True)
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
        if declared is not None:
            if not declared.strip().isdigit():
                return await _send_json(send, 400, {"detail": "Content-Length: expected a non-negative integer"})
            if int(declared) > self.max_body_bytes:
                return await _send_json(send, 413, _too_large(self.max_body_bytes, int(declared)))
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                return await _send_json(send, 413, _too_large(self.max_body_bytes, None))
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def _too_large(limit: int, declared: int | None) -> dict:
    what = f"a body of {declared} bytes" if declared is not None else "a body"
    return {"detail": f"{what} is over this server's limit of {limit} bytes (--max-body-bytes)", "code": "BODY_TOO_LARGE"}


async def _send_json(send, status: int, payload: dict, prefix: str = "http.response", auth: bool = False) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if auth:
        headers.append((b"www-authenticate", b"Bearer"))
    if prefix == "http.response":
        headers.append((b"connection", b"close"))
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": body})


__all__ = ["Guard"]

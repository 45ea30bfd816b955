"""The server's own routes and guards: sessions, the WebSocket, the HTTP episode routes, auth and
size limits. :func:`fleet_marl.openenv.make_app` puts them on OpenEnv's app.

OpenEnv's ``create_fastapi_app`` gives the read-only routes (``/health``, ``/metadata``,
``/schema``, the task API, the OpenAPI docs); every route that builds or reaches an env is this
module's (``/ws``, ``/reset``, ``/step``, ``/state``, ``/mcp``), and any other route OpenEnv
registers is dropped (deny by default). What they guarantee (docs/llm_agents.md, "Security"):

- **one session table**: every live session -- a WebSocket's, one created over HTTP with
  ``openenv/session/create``, an HTTP ``/reset`` or ``/step`` while it runs -- counts once
  against ``max_sessions``; a session created over HTTP that no socket holds expires after
  ``http_session_idle_s`` and gives its slot to a WebSocket client that needs it;
- **sessions belong to their connection**: ``/ws?session_id=`` is refused unless the operator
  sets ``allow_attach``, and then only a session created over HTTP that no socket holds;
- **an error frame never ends a session**, whatever the frame (binary, not JSON, not an object,
  nested too deep, too long, too many values, a lone surrogate, not UTF-8); the frame names
  what was wrong and quotes at most a short prefix of what the client sent; only the
  project's own messages reach the client (:func:`public_error`): an error the client did not
  cause (a file the server could not read, a bug) is ``INTERNAL_ERROR`` with no detail;
- **one client cannot stall the others**: a message is sized and counted before it is parsed,
  and parsing, the step and the answer run on the session's thread, never on the event loop;
  each socket is read at ``max_bytes_per_s`` at most (:class:`Pace`); the HTTP smoke-test
  routes run one at a time;
- :class:`~fleet_marl.openenv.guard.Guard`, an ASGI middleware around it all: the ``Host``
  header, a bearer token on every route and on ``/ws`` when one is set, a browser's ``Origin``
  on ``/ws``, and the HTTP bodies (size, read deadline, the bytes held over all requests).
  The connections themselves are bounded below the app (:mod:`fleet_marl.openenv.transport`).

The session table is :mod:`fleet_marl.openenv.sessions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Body, FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import (
    ResetRequest,
    ResetResponse,
    StepRequest,
    StepResponse,
    WSErrorResponse,
    WSObservationResponse,
    WSStateResponse,
)
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.websockets import WebSocketDisconnect

from fleet_marl.errors import ClientError, short_repr
from fleet_marl.openenv.limits import ServerLimits, count_items, json_depth, without_strings
from fleet_marl.openenv.sessions import CapacityError, Pace, Session, SessionTable
from fleet_marl.traces import TraceError

log = logging.getLogger("fleet_marl.openenv")

#: The routes of OpenEnv's app that are kept: read-only, no env, no session.
KEPT_ROUTES = frozenset(
    {
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/health",
        "/metadata",
        "/schema",
        "/list_environments",
        "/{env_name}/splits",
        "/{env_name}/tasks",
        "/{env_name}/num_tasks",
        "/{env_name}/task",
        "/{env_name}/task_range",
    }
)
#: The longest error message sent back (the values in it are cut at the source; this is the backstop).
MAX_MESSAGE_CHARS = 1000
#: Error codes of this server beyond OpenEnv's ``WSErrorCode`` values.
INTERNAL_ERROR = "INTERNAL_ERROR"
ATTACH_REFUSED = "ATTACH_REFUSED"
IDLE_TIMEOUT = "IDLE_TIMEOUT"
MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
#: Exceptions a client may cause (the HTTP routes answer them as errors, not crashes).
CLIENT_ERRORS = (ValueError, TypeError)
#: A lone UTF-16 surrogate written as a JSON escape (``"\\ud800"``): the one way a message of valid
#: UTF-8 text decodes to a string that cannot be encoded back (a valid pair decodes to one character).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by fleet_marl's own Python code (its text is the project's)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith("fleet_marl.")


def public_error(exc: BaseException) -> tuple[str, str]:
    """``(message, code)`` to send for ``exc``. Only the project's own messages reach a client:
    a :class:`~fleet_marl.errors.ClientError` (``ConfigError``, ``ActionError``, the views'
    argument checks: each names the field, the value and what was expected) and a
    ``RuntimeError`` raised by fleet_marl's code (a step before a reset). Any other bad value
    (a library's ``ValueError`` or ``TypeError``) is a generic ``EXECUTION_ERROR``; a trace or
    file error, a recursion error or anything unexpected is ``INTERNAL_ERROR`` with no detail.
    Both are logged here: their text may quote a library's internals, a file or the server's state."""
    if isinstance(exc, ClientError) or (type(exc) is RuntimeError and _raised_here(exc)):
        text = str(exc)
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 20] + f"... ({len(text)} characters)"
        return text, "EXECUTION_ERROR"
    if isinstance(exc, CLIENT_ERRORS) and not isinstance(exc, (TraceError, UnicodeError)):
        log.info("a client's request failed: %s", type(exc).__name__, exc_info=exc)
        return (
            "invalid request: a value of this request has the wrong type or shape for its field "
            "(docs/llm_agents.md lists every message and field)",
            "EXECUTION_ERROR",
        )
    log.warning("internal error while serving a request: %s", type(exc).__name__, exc_info=exc)
    return "internal error: the server could not carry out this request (its log has the details)", INTERNAL_ERROR


def validation_errors(exc: ValidationError | RequestValidationError) -> list[dict]:
    """Pydantic's errors without the client's input echoed: location (each part cut), message and type."""

    def part(x):
        return x if isinstance(x, int) or len(str(x)) <= 60 else short_repr(str(x), 60)

    return [
        {"loc": [part(x) for x in e.get("loc", ())][:10], "msg": str(e.get("msg", ""))[:200], "type": e.get("type")}
        for e in exc.errors()[:20]
    ]


def _error_frame(message: str, code: str, **extra: Any) -> str:
    return WSErrorResponse(data={"message": message, "code": code, **extra}).model_dump_json()


class Protocol:
    """The frames of one WebSocket session (OpenEnv's protocol: reset, step, state, close)."""

    TYPES = ("reset", "step", "state", "close")

    def __init__(self, table: SessionTable, action_cls: type[BaseModel], limits: ServerLimits):
        self.table, self.action_cls, self.limits = table, action_cls, limits

    def decode(self, text: str) -> dict | str:
        """The message object of ``text``, or the error frame that answers it (run on the
        session's thread: parsing a large message does not hold the event loop)."""
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 (fleet-marl serve hands them on as lone surrogates)
                return _error_frame("Invalid text: the message is not valid UTF-8; nothing was run", "INVALID_JSON")
        bare = without_strings(text)
        items = count_items(bare)
        if items > self.limits.max_items:
            return _error_frame(
                f"message of up to {items} JSON values: expected at most {self.limits.max_items} (--max-items)", MESSAGE_TOO_LARGE
            )
        try:
            msg = json.loads(text)
        except json.JSONDecodeError as exc:
            return _error_frame(f"Invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "INVALID_JSON")
        except ValueError:  # an integer literal of more digits than Python converts
            return _error_frame("Invalid JSON: a number too long to convert", "INVALID_JSON")
        except RecursionError:
            return _error_frame(f"JSON nested too deeply: expected at most {self.limits.max_depth} levels", "INVALID_JSON")
        if not isinstance(msg, dict):
            return _error_frame(
                f'a message is a JSON object such as {{"type": "reset", "data": {{}}}}; got a JSON {type(msg).__name__}', "INVALID_JSON"
            )
        depth = json_depth(bare)
        if depth > self.limits.max_depth + 2:  # the message and its data wrap the arguments
            return _error_frame(
                f"JSON nested {depth} levels deep: expected at most {self.limits.max_depth} levels in data", "VALIDATION_ERROR"
            )
        if _SURROGATE_ESCAPE.search(text) is not None:
            try:
                json.dumps(msg, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                return _error_frame(
                    "Invalid text: a string holds a lone UTF-16 surrogate (an escape \\ud800-\\udfff not in a pair): "
                    "expected valid Unicode; nothing was run",
                    "INVALID_JSON",
                )
        return msg

    def run(self, session: Session, kind: str, data: Any) -> str:
        """The frame answering a ``reset``, ``step`` or ``state`` with ``data`` (on the session's thread)."""
        if kind == "state":
            return WSStateResponse(data=session.env.state.model_dump()).model_dump_json()
        if not isinstance(data, dict):
            return _error_frame(f"data = {short_repr(data, 40)}: expected a JSON object", "VALIDATION_ERROR")
        if kind == "reset":
            obs = session.env.reset(**data)
        else:
            obs = session.env.step(self.action_cls.model_validate(data))
        return WSObservationResponse(data=serialize_observation(obs)).model_dump_json()

    async def answer(self, session: Session, message: Mapping[str, Any]) -> tuple[str | None, bool]:
        """``(frame, close)`` for one message (``frame`` None: send nothing). Every error is a
        frame and the session lives on."""
        if "text" not in message or message.get("text") is None:
            return _error_frame("binary frames are not part of the protocol: send each message as JSON text", "INVALID_JSON"), False
        text = message["text"]
        if len(text) > self.limits.max_message_bytes:
            return _error_frame(
                f"message of {len(text)} characters: expected at most {self.limits.max_message_bytes}", MESSAGE_TOO_LARGE
            ), False
        try:
            msg = await self.table.run(session, self.decode, text)
            if isinstance(msg, str):
                return msg, False
            kind, data = msg.get("type"), msg.get("data", {})
            if kind not in self.TYPES:
                return _error_frame(
                    f"Unknown message type: type = {short_repr(kind, 40)}: expected one of {', '.join(self.TYPES)}", "UNKNOWN_TYPE"
                ), False
            if kind == "close":
                return None, True
            return await self.table.run(session, self.run, session, kind, data), False
        except ValidationError as exc:
            return _error_frame("Invalid message", "VALIDATION_ERROR", errors=validation_errors(exc)), False
        except Exception as exc:  # noqa: BLE001 - every error is a frame (public_error picks what a client may read); the session lives on
            text, code = public_error(exc)
            return _error_frame(text, code), False

    async def serve(self, websocket: WebSocket) -> None:
        """The ``/ws`` endpoint."""
        await websocket.accept()
        session = None
        try:
            requested = websocket.query_params.get("session_id")
            if requested is not None:
                if not self.limits.allow_attach:
                    await websocket.send_text(
                        _error_frame(
                            "attaching to a session from another connection is off on this server (its operator enables it with "
                            "--allow-attach): open /ws without session_id for a session of your own",
                            ATTACH_REFUSED,
                        )
                    )
                    return
                try:
                    session = await self.table.attach(requested)
                except LookupError as exc:
                    await websocket.send_text(_error_frame(str(exc), ATTACH_REFUSED))
                    return
            else:
                try:
                    session = await self.table.open("ws")
                except CapacityError as exc:
                    await websocket.send_text(
                        _error_frame(str(exc), "CAPACITY_REACHED", active_sessions=exc.active, max_sessions=exc.limit)
                    )
                    return
            pace = Pace(self.limits.max_bytes_per_s, max(self.limits.max_bytes_per_s, 4 * self.limits.max_message_bytes))
            while True:
                try:
                    message = await asyncio.wait_for(websocket.receive(), timeout=self.limits.ws_idle_s)
                except TimeoutError:
                    await websocket.send_text(
                        _error_frame(f"no message for {self.limits.ws_idle_s:g} s: the session is closed", IDLE_TIMEOUT)
                    )
                    return
                if message["type"] == "websocket.disconnect":
                    return
                await pace.wait(len(message.get("text") or message.get("bytes") or b""))
                frame, stop = await self.answer(session, message)
                if frame is not None:
                    await websocket.send_text(frame)
                if stop:
                    return
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away
        finally:
            await self.table.close(session)
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # already closed by the client
                await websocket.close()


def _http_error(exc: BaseException) -> JSONResponse:
    if isinstance(exc, CapacityError):
        return JSONResponse({"detail": str(exc), "code": "CAPACITY_REACHED"}, status_code=503, headers={"Retry-After": "1"})
    if isinstance(exc, ValidationError):
        return JSONResponse({"detail": validation_errors(exc), "code": "VALIDATION_ERROR"}, status_code=422)
    text, code = public_error(exc)
    return JSONResponse({"detail": text, "code": code}, status_code=500 if code == INTERNAL_ERROR else 422)


def add_routes(
    app: FastAPI, factory: Callable[[], Any], action_cls: type[BaseModel], state_cls: type, limits: ServerLimits
) -> SessionTable:
    """Drop every route of OpenEnv's ``app`` that is not in ``KEPT_ROUTES`` and add this
    module's; return the session table."""
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in KEPT_ROUTES]
    table = SessionTable(factory, limits)
    protocol = Protocol(table, action_cls, limits)

    async def reaper() -> None:
        while True:
            await asyncio.sleep(max(min(limits.http_session_idle_s / 4, 5.0), 0.05))
            await table.reap()

    tasks: list[asyncio.Task] = []
    app.router.on_startup.append(lambda: tasks.append(asyncio.get_running_loop().create_task(reaper())))
    app.router.on_shutdown.append(lambda: [t.cancel() for t in tasks])

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_errors(exc), "code": "VALIDATION_ERROR"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # OpenEnv's kept routes raise these; a 404 of theirs would quote the request's path at any length
        detail = exc.detail if isinstance(exc.detail, str) else "see the route's documentation (/docs)"
        return JSONResponse(
            {"detail": detail if len(detail) <= 200 else short_repr(detail, 200)},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    async def _raised(request: Request, exc: Exception) -> JSONResponse:
        # what a kept route of OpenEnv's raises (a bad split of the task API: a ValueError), as /reset answers it
        return _http_error(exc)

    for cls in (*CLIENT_ERRORS, RuntimeError, Exception):  # Exception last: Starlette logs it, then sends this answer
        app.add_exception_handler(cls, _raised)

    one_at_a_time = asyncio.Semaphore(1)

    async def one_shot(call: Callable[[Session], Any]) -> Any:
        """Run ``call`` on a fresh session that lives for this request (it counts as one). These
        routes are a smoke test: one runs at a time and another is answered 503 at once (none
        waits), so a flood of them holds one session slot, one thread and no connection."""
        if one_at_a_time.locked():
            return JSONResponse(
                {
                    "detail": "another /reset, /step or /state is running: these routes run one at a time (episodes live on /ws)",
                    "code": "SERVER_BUSY",
                },
                status_code=503,
                headers={"Retry-After": "1"},
            )
        session = None
        try:
            async with one_at_a_time:
                session = await table.open("request")
                return await call(session)
        except Exception as exc:  # noqa: BLE001 - every error is an HTTP answer (_http_error picks what a client may read)
            return _http_error(exc)
        finally:
            await table.close(session)

    @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"])
    async def reset(request: Annotated[ResetRequest, Body(default_factory=ResetRequest)]):
        """A fresh env, reset with the request's arguments (a smoke test: episodes live on /ws)."""
        kwargs = request.model_dump(exclude_unset=True)

        async def call(s: Session):
            return ResetResponse(**serialize_observation(await table.run(s, s.env.reset, **kwargs)))

        return await one_shot(call)

    @app.post("/step", response_model=StepResponse, tags=["Environment Control"])
    async def step(request: StepRequest):
        """A fresh env stepped once (it was never reset, so this is an error frame's HTTP twin)."""

        async def call(s: Session):
            action = action_cls.model_validate(request.action)
            return StepResponse(**serialize_observation(await table.run(s, s.env.step, action)))

        return await one_shot(call)

    @app.get("/state", response_model=state_cls, tags=["State Management"])
    async def state():
        """The state of a fresh env."""

        async def call(s: Session):
            return await table.run(s, lambda: s.env.state)

        return await one_shot(call)

    @app.post("/mcp")
    async def mcp(request: Request) -> dict:
        """JSON-RPC: ``openenv/session/create`` and ``openenv/session/close`` (sessions created
        over HTTP expire when idle and no socket holds them), ``tools/list`` (no tools)."""
        try:
            rpc = JsonRpcRequest(**json.loads(await request.body()))
        except (ValueError, TypeError, RecursionError):
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_REQUEST, "expected a JSON-RPC 2.0 request object").model_dump()
        rid = rpc.id
        if isinstance(rid, str) and len(rid) > 200:
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_REQUEST, "id: expected at most 200 characters").model_dump()
        if rpc.method == "openenv/session/create":
            try:
                s = await table.open("http")
            except CapacityError as exc:
                return JsonRpcResponse.error_response(JsonRpcErrorCode.SERVER_ERROR, str(exc), request_id=rid).model_dump()
            except Exception as exc:  # noqa: BLE001 - every error is a JSON-RPC error (public_error picks what a client may read)
                return JsonRpcResponse.error_response(JsonRpcErrorCode.SERVER_ERROR, public_error(exc)[0], request_id=rid).model_dump()
            return JsonRpcResponse.success({"session_id": s.id, "idle_timeout_s": limits.http_session_idle_s}, request_id=rid).model_dump()
        if rpc.method == "openenv/session/close":
            found = table.sessions.get(str(rpc.params.get("session_id")))
            if found is None or found.origin != "http" or found.attached:
                return JsonRpcResponse.error_response(
                    JsonRpcErrorCode.INVALID_PARAMS, "no session created over HTTP with this id is free to close", request_id=rid
                ).model_dump()
            await table.close(found)
            return JsonRpcResponse.success({"session_id": found.id, "closed": True}, request_id=rid).model_dump()
        if rpc.method == "tools/list":
            return JsonRpcResponse.success({"tools": []}, request_id=rid).model_dump()
        return JsonRpcResponse.error_response(
            JsonRpcErrorCode.METHOD_NOT_FOUND,
            f"method = {short_repr(rpc.method, 60)}: expected "
            "openenv/session/create, openenv/session/close or tools/list (this env has no MCP tools)",
            request_id=rid,
        ).model_dump()

    app.add_api_websocket_route("/ws", protocol.serve)
    return table


__all__ = ["CLIENT_ERRORS", "KEPT_ROUTES", "Protocol", "add_routes", "public_error", "validation_errors"]

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

The session table is :mod:`fleet_marl.openenv.sessions`; the frames of one WebSocket session
are :mod:`fleet_marl.openenv.protocol`'s; what a client may read of an error is
:mod:`fleet_marl.openenv.public_errors`' (this module re-exports its public names).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import ResetRequest, ResetResponse, StepRequest, StepResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from fleet_marl.errors import short_repr
from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.openenv.protocol import Protocol
from fleet_marl.openenv.public_errors import CLIENT_ERRORS, http_error, public_error, validation_errors
from fleet_marl.openenv.sessions import CapacityError, Session, SessionTable

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
        return http_error(exc)

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
        except Exception as exc:  # noqa: BLE001 - every error is an HTTP answer (http_error picks what a client may read)
            return http_error(exc)
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

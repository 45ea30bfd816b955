"""The WebSocket session: :class:`Protocol`, the frames of one ``/ws`` connection (OpenEnv's
reset, step, state and close), each message sized and counted before it is parsed, parsed and
run on the session's thread, every error answered as a frame while the session lives on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from fastapi import WebSocket
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import WSObservationResponse, WSStateResponse
from pydantic import BaseModel, ValidationError
from starlette.websockets import WebSocketDisconnect

from fleet_marl.errors import short_repr
from fleet_marl.openenv.limits import ServerLimits, count_items, json_depth, without_strings
from fleet_marl.openenv.public_errors import (
    ATTACH_REFUSED,
    IDLE_TIMEOUT,
    MESSAGE_TOO_LARGE,
    error_frame,
    public_error,
    validation_errors,
)
from fleet_marl.openenv.sessions import CapacityError, Pace, Session, SessionTable

#: A lone UTF-16 surrogate written as a JSON escape (``"\\ud800"``): the one way a message of valid
#: UTF-8 text decodes to a string that cannot be encoded back (a valid pair decodes to one character).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


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
                return error_frame("Invalid text: the message is not valid UTF-8; nothing was run", "INVALID_JSON")
        bare = without_strings(text)
        items = count_items(bare)
        if items > self.limits.max_items:
            return error_frame(
                f"message of up to {items} JSON values: expected at most {self.limits.max_items} (--max-items)", MESSAGE_TOO_LARGE
            )
        try:
            msg = json.loads(text)
        except json.JSONDecodeError as exc:
            return error_frame(f"Invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "INVALID_JSON")
        except ValueError:  # an integer literal of more digits than Python converts
            return error_frame("Invalid JSON: a number too long to convert", "INVALID_JSON")
        except RecursionError:
            return error_frame(f"JSON nested too deeply: expected at most {self.limits.max_depth} levels", "INVALID_JSON")
        if not isinstance(msg, dict):
            return error_frame(
                f'a message is a JSON object such as {{"type": "reset", "data": {{}}}}; got a JSON {type(msg).__name__}', "INVALID_JSON"
            )
        depth = json_depth(bare)
        if depth > self.limits.max_depth + 2:  # the message and its data wrap the arguments
            return error_frame(
                f"JSON nested {depth} levels deep: expected at most {self.limits.max_depth} levels in data", "VALIDATION_ERROR"
            )
        if _SURROGATE_ESCAPE.search(text) is not None:
            try:
                json.dumps(msg, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                return error_frame(
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
            return error_frame(f"data = {short_repr(data, 40)}: expected a JSON object", "VALIDATION_ERROR")
        if kind == "reset":
            obs = session.env.reset(**data)
        else:
            obs = session.env.step(self.action_cls.model_validate(data))
        return WSObservationResponse(data=serialize_observation(obs)).model_dump_json()

    async def answer(self, session: Session, message: Mapping[str, Any]) -> tuple[str | None, bool]:
        """``(frame, close)`` for one message (``frame`` None: send nothing). Every error is a
        frame and the session lives on."""
        if "text" not in message or message.get("text") is None:
            return error_frame("binary frames are not part of the protocol: send each message as JSON text", "INVALID_JSON"), False
        text = message["text"]
        if len(text) > self.limits.max_message_bytes:
            return error_frame(
                f"message of {len(text)} characters: expected at most {self.limits.max_message_bytes}", MESSAGE_TOO_LARGE
            ), False
        try:
            msg = await self.table.run(session, self.decode, text)
            if isinstance(msg, str):
                return msg, False
            kind, data = msg.get("type"), msg.get("data", {})
            if kind not in self.TYPES:
                return error_frame(
                    f"Unknown message type: type = {short_repr(kind, 40)}: expected one of {', '.join(self.TYPES)}", "UNKNOWN_TYPE"
                ), False
            if kind == "close":
                return None, True
            return await self.table.run(session, self.run, session, kind, data), False
        except ValidationError as exc:
            return error_frame("Invalid message", "VALIDATION_ERROR", errors=validation_errors(exc)), False
        except Exception as exc:  # noqa: BLE001 - every error is a frame (public_error picks what a client may read); the session lives on
            text, code = public_error(exc)
            return error_frame(text, code), False

    async def serve(self, websocket: WebSocket) -> None:
        """The ``/ws`` endpoint."""
        await websocket.accept()
        session = None
        try:
            requested = websocket.query_params.get("session_id")
            if requested is not None:
                if not self.limits.allow_attach:
                    await websocket.send_text(
                        error_frame(
                            "attaching to a session from another connection is off on this server (its operator enables it with "
                            "--allow-attach): open /ws without session_id for a session of your own",
                            ATTACH_REFUSED,
                        )
                    )
                    return
                try:
                    session = await self.table.attach(requested)
                except LookupError as exc:
                    await websocket.send_text(error_frame(str(exc), ATTACH_REFUSED))
                    return
            else:
                try:
                    session = await self.table.open("ws")
                except CapacityError as exc:
                    await websocket.send_text(error_frame(str(exc), "CAPACITY_REACHED", active_sessions=exc.active, max_sessions=exc.limit))
                    return
            pace = Pace(self.limits.max_bytes_per_s, max(self.limits.max_bytes_per_s, 4 * self.limits.max_message_bytes))
            while True:
                try:
                    message = await asyncio.wait_for(websocket.receive(), timeout=self.limits.ws_idle_s)
                except TimeoutError:
                    await websocket.send_text(
                        error_frame(f"no message for {self.limits.ws_idle_s:g} s: the session is closed", IDLE_TIMEOUT)
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


__all__ = ["Protocol"]

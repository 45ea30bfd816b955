"""What a client may read of an error: :func:`public_error` (only the project's own messages,
anything else generic or ``INTERNAL_ERROR`` and logged), :func:`validation_errors` (pydantic's
errors without the client's input), and the WebSocket error frame and HTTP answer that carry them
(:func:`error_frame`, :func:`http_error`), with this server's error codes.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.types import WSErrorResponse
from pydantic import ValidationError

from fleet_marl.errors import ClientError, short_repr
from fleet_marl.openenv.sessions import CapacityError
from fleet_marl.traces import TraceError

log = logging.getLogger("fleet_marl.openenv")

#: The longest error message sent back (the values in it are cut at the source; this is the backstop).
MAX_MESSAGE_CHARS = 1000
#: Error codes of this server beyond OpenEnv's ``WSErrorCode`` values.
INTERNAL_ERROR = "INTERNAL_ERROR"
ATTACH_REFUSED = "ATTACH_REFUSED"
IDLE_TIMEOUT = "IDLE_TIMEOUT"
MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
#: Exceptions a client may cause (the HTTP routes answer them as errors, not crashes).
CLIENT_ERRORS = (ValueError, TypeError)


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


def error_frame(message: str, code: str, **extra: Any) -> str:
    """The WebSocket error frame of ``message`` and ``code`` (and any ``extra`` fields), as JSON text."""
    return WSErrorResponse(data={"message": message, "code": code, **extra}).model_dump_json()


def http_error(exc: BaseException) -> JSONResponse:
    """The HTTP answer to ``exc``: 503 when the server is full, 422 for a bad request, else
    :func:`public_error`'s message (500 for an internal error)."""
    if isinstance(exc, CapacityError):
        return JSONResponse({"detail": str(exc), "code": "CAPACITY_REACHED"}, status_code=503, headers={"Retry-After": "1"})
    if isinstance(exc, ValidationError):
        return JSONResponse({"detail": validation_errors(exc), "code": "VALIDATION_ERROR"}, status_code=422)
    text, code = public_error(exc)
    return JSONResponse({"detail": text, "code": code}, status_code=500 if code == INTERNAL_ERROR else 422)


__all__ = [
    "ATTACH_REFUSED",
    "CLIENT_ERRORS",
    "IDLE_TIMEOUT",
    "INTERNAL_ERROR",
    "MAX_MESSAGE_CHARS",
    "MESSAGE_TOO_LARGE",
    "error_frame",
    "http_error",
    "public_error",
    "validation_errors",
]

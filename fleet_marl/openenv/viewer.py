"""The viewer: a read-only web page that replays a recorded episode (``fleet-marl view``) or
follows a live session of ``fleet-marl serve`` (docs/viewer.md).

The page is four static files shipped in the package (``static/viewer/``: HTML, plain JS drawing
SVG, CSS, an icon; nothing from a CDN). They hold no data, so the guard lets any client ``GET`` them
without the token (``PAGE_PATHS``); every data route below needs the bearer token when the server
has one, and the page sends it from the URL's fragment (``#token=...``, which a browser never
sends to a server nor puts in a ``Referer``). Every answer carries a Content-Security-Policy
that allows only the page's own script, style and ``connect-src 'self'`` (no inline script, no
``eval``, no frame), and the page writes every value with ``textContent``, never as HTML.

==========================================  ========================================================
``GET /viewer/``                            the page (``/viewer`` redirects to it)
``GET /viewer/api/source``                  ``{"mode": "replay"}`` or ``{"mode": "live"}``
``GET /viewer/api/episode``                 the recorded episode: header, frames, summary (replay)
``GET /viewer/api/sessions``                the live sessions: a viewer id each (not the session's
                                            id, which attaches a socket), task, round (live)
``GET /viewer/api/sessions/{id}``           one live session's header and its last round's frame
==========================================  ========================================================

Nothing here changes a session: a frame is read on the session's own thread (an env is used by
one thread), one read at a time over the whole server (however many pages watch, the sessions'
threads do at most one viewer read at once), and does not count as activity (an idle session
still expires).
"""

from __future__ import annotations

import asyncio
import hashlib
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse, Response

from fleet_marl.evaluation.recording import frame, header
from fleet_marl.openenv.guard import Guard
from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.openenv.sessions import Session, SessionTable

#: The page's files: URL path -> (file in ``static/viewer/``, media type). They carry no data.
PAGE = {
    "/viewer/": ("index.html", "text/html; charset=utf-8"),
    "/viewer/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
    "/viewer/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
#: The paths the guard answers without a token (``GET`` and ``HEAD`` only): the page and its redirect
#: (``fleet-marl view`` adds ``/``, its redirect to the page).
PAGE_PATHS = frozenset({*PAGE, "/viewer"})

#: The Content-Security-Policy of every viewer answer: the page's own files, fetches to its own
#: server, nothing else (no inline script or style, no eval, no plug-in, no frame, no form).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: The headers of every viewer answer.
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def page_file(name: str) -> bytes:
    """One of the page's files, as shipped in the package."""
    return files("fleet_marl.openenv").joinpath("static", "viewer", name).read_bytes()


def viewer_id(session: Session) -> str:
    """The id the viewer shows for ``session``: a digest of its id, which cannot attach a socket."""
    return hashlib.sha256(b"fleet_marl.viewer:" + session.id.encode()).hexdigest()[:12]


def _json(content: dict, status: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers=HEADERS)


def _not_found(what: str) -> JSONResponse:
    return _json({"detail": what, "code": "NOT_FOUND"}, 404)


def _snapshot(session: Session, with_frame: bool) -> dict | None:
    """What the viewer reads of a live session (on its thread): its state, and with ``with_frame``
    its header and last frame; None before its first reset."""
    view = session.env
    env = getattr(view, "env", None)
    if env is None or (not env.agents and env.round == 0):
        return None
    state = view.state
    about = {"id": viewer_id(session), "task": state.task, "mode": state.mode, "round": int(env.round), "max_rounds": int(env.max_cycles)}
    if not with_frame:
        return about
    return {"header": header(env, **{k: v for k, v in about.items() if k != "round"}), "frame": frame(env)}


async def _read(session: Session, with_frame: bool, one_at_a_time: asyncio.Semaphore) -> dict | None:
    async with one_at_a_time:  # however many watch, the sessions' threads do one viewer read at a time
        try:
            return await asyncio.get_running_loop().run_in_executor(session.executor, _snapshot, session, with_frame)
        except RuntimeError:  # the session closed meanwhile (its thread is shut down), or its env is not reset
            return None


def add_viewer(app: FastAPI, episode: dict | None = None, sessions: SessionTable | None = None) -> None:
    """Add the viewer's routes to ``app``: a replay of ``episode`` (:func:`~fleet_marl.evaluation.recording.read_episode`)
    or the live ``sessions`` of a server (exactly one of them)."""
    if (episode is None) == (sessions is None):
        raise ValueError("add_viewer: give episode (a replay) or sessions (a live server), not both nor neither")
    mode = "replay" if episode is not None else "live"
    reads = asyncio.Semaphore(1)

    def _page(path: str):
        name, media = PAGE[path]
        body = page_file(name)

        async def serve() -> Response:
            return Response(body, media_type=media, headers=HEADERS)

        return serve

    for path in PAGE:
        app.add_api_route(path, _page(path), methods=["GET"], include_in_schema=False)

    @app.get("/viewer", include_in_schema=False)
    async def _viewer() -> Response:
        return RedirectResponse("/viewer/", headers=HEADERS)

    @app.get("/viewer/api/source", tags=["Viewer"])
    async def source() -> JSONResponse:
        """What the page shows: a recorded episode (``replay``) or the server's live sessions (``live``)."""
        return _json({"mode": mode})

    @app.get("/viewer/api/episode", tags=["Viewer"])
    async def replay() -> JSONResponse:
        """The recorded episode: its header, every round's frame and its summary."""
        if episode is None:
            return _not_found("this server follows live sessions; there is no recorded episode (see /viewer/api/sessions)")
        return _json(episode)

    @app.get("/viewer/api/sessions", tags=["Viewer"])
    async def live() -> JSONResponse:
        """The live sessions that have been reset: viewer id, task, view, round."""
        if sessions is None:
            return _json({"sessions": []})
        found = [await _read(s, False, reads) for s in list(sessions.sessions.values())]
        return _json({"sessions": [s for s in found if s is not None]})

    @app.get("/viewer/api/sessions/{vid}", tags=["Viewer"])
    async def follow(vid: str) -> JSONResponse:
        """One live session: its header and the frame of its last round."""
        match = next((s for s in list((sessions.sessions if sessions else {}).values()) if viewer_id(s) == vid), None)
        snap = None if match is None else await _read(match, True, reads)
        if snap is None:
            return _not_found("no live session with this viewer id (it may have ended): see /viewer/api/sessions")
        return _json(snap)

    if mode == "replay":

        @app.get("/", include_in_schema=False)
        async def _root() -> Response:
            return RedirectResponse("/viewer/", headers=HEADERS)


def make_viewer_app(episode: dict, token: str | None, limits: ServerLimits | None = None) -> FastAPI:
    """The app of ``fleet-marl view``: the page replaying ``episode``, behind the server's guard
    (Host, the bearer ``token`` on the data routes, bodies) and nothing else (no API docs)."""
    app = FastAPI(title="fleet_marl viewer", openapi_url=None, docs_url=None, redoc_url=None)
    add_viewer(app, episode=episode)
    app.add_middleware(Guard, token=token, limits=ServerLimits() if limits is None else limits, public=PAGE_PATHS | {"/"})
    return app


__all__ = ["CSP", "HEADERS", "PAGE", "PAGE_PATHS", "add_viewer", "make_viewer_app", "page_file", "viewer_id"]

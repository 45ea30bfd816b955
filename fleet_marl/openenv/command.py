"""``fleet-marl serve``: the OpenEnv server (``fleet_marl.openenv``) under uvicorn.

Importing this module imports neither OpenEnv, FastAPI nor uvicorn; they load when the command
runs, and without the ``openenv`` extra it prints how to install
it and exits with code 2. docs/llm_agents.md describes the two views and the protocol.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from fleet_marl.openenv.limits import LOOPBACK_HOSTS, ServerLimits  # core only: the limits need no extra

INSTALL_HINT = (
    "fleet-marl serve needs the optional 'openenv' extra (OpenEnv, FastAPI, uvicorn):\n"
    "  pip install 'fleet-marl[openenv]'\n"
    "or, from a checkout:\n"
    "  pip install -e '.[openenv]'"
)

EXAMPLES = """examples:
  fleet-marl serve                                     # multi-agent view of easy on 127.0.0.1:8000
  fleet-marl serve --mode ego --task medium --opponents bidder --port 8001
  fleet-marl serve --mode ego --ego random --invalid-penalty 0.5 --max-invalid-streak 5
  FLEET_MARL_TOKEN=$(openssl rand -hex 32) fleet-marl serve --host 0.0.0.0 --port 7860   # as in the Docker Space
  fleet-marl serve --host 0.0.0.0 --insecure --allowed-host my.host.example     # no token: an explicit choice
  fleet-marl serve --max-tenants 16 --max-rounds 200 --max-body-bytes 262144   # tighter limits for a public server

watch the live sessions in a browser: http://127.0.0.1:8000/viewer/  (with a token: /viewer/#token=<token>; docs/viewer.md)

then, from Python:
  from fleet_marl.openenv import RemoteParallelEnv
  env = RemoteParallelEnv.connect("http://127.0.0.1:8000", task="easy")   # a PettingZoo ParallelEnv
  env = RemoteParallelEnv.connect(url, token=os.environ["FLEET_MARL_TOKEN"])  # a server with a token

and check a running server with:  openenv validate --url http://127.0.0.1:8000
Episodes run on the WebSocket /ws (one env per connection). See docs/llm_agents.md, and its
"Security" section for the limits and the token.
"""

#: The environment variable the server reads its bearer token from when --token is not given
#: (the Docker image passes it on; a token on the command line is visible to other local users).
TOKEN_ENV = "FLEET_MARL_TOKEN"


DESCRIPTION = (
    "Start an OpenEnv server of fleet_marl with uvicorn. --mode multi serves every tenant (a joint action per "
    "round; RemoteParallelEnv is a PettingZoo ParallelEnv over it); --mode ego serves one tenant to an LLM (a text "
    "prompt in, JSON text out), the others played by a reference policy. Needs the 'openenv' extra."
)


def add_arguments(s) -> None:
    """The ``serve`` options, added to the parser ``s``."""
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--mode", choices=("multi", "ego"), default="multi", help="the view: every tenant (multi) or one for an LLM (ego); default multi"
    )
    s.add_argument(
        "--max-sessions",
        type=int,
        default=ServerLimits().max_sessions,
        help=f"live sessions, WebSocket and HTTP, each counted once; one more is refused (default {ServerLimits().max_sessions})",
    )
    s.add_argument("--task", default="easy", help="default task of a reset that names none (default easy)")
    s.add_argument("--reward-scheme", default=None, help="default credit scheme (default: the task's)")
    g = s.add_argument_group("ego view")
    g.add_argument("--ego", default="tenant_0", help="the LLM's tenant: tenant_<i>, an index, or 'random' (default tenant_0)")
    g.add_argument("--opponents", default="precision_expert", help="reference policy of the other tenants (default precision_expert)")
    g.add_argument(
        "--fallback",
        choices=("default", "idle"),
        default="default",
        help="action run in place of an invalid answer (default: the env's default action)",
    )
    g.add_argument("--invalid-penalty", type=float, default=1.0, help="subtracted from the reward after an invalid answer (default 1.0)")
    g.add_argument("--max-invalid-streak", type=int, default=3, help="invalid answers in a row that end the episode (default 3)")
    a = s.add_argument_group("access and limits (docs/llm_agents.md, Security)")
    a.add_argument("--token", default=None, help=f"bearer token every route and /ws require (default: ${TOKEN_ENV} if set, else none)")
    d = ServerLimits()
    for flag, dest, kind, what in _LIMIT_OPTIONS:
        v = getattr(d, dest)
        a.add_argument(flag, dest=dest, type=kind, default=v, help=f"{what} (default {v:,})" if kind is int else f"{what} (default {v:g})")
    a.add_argument("--max-planner-work", dest="max_planner_work", type=int, default=None, help=argparse.SUPPRESS)
    a.add_argument(
        "--allow-attach", action="store_true", help="let /ws?session_id=<id> attach to a session created over HTTP (default: refused)"
    )
    a.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=None,
        metavar="NAME",
        help="a Host header value to answer (repeat for more; '*': any). Default: 127.0.0.1, localhost and [::1] when "
        "--host is a loopback address, any otherwise",
    )
    a.add_argument(
        "--allowed-origin",
        dest="allowed_origins",
        action="append",
        default=None,
        metavar="ORIGIN",
        help="a browser Origin (scheme://host:port) /ws accepts besides the server's own host (repeat for more; '*': any)",
    )
    a.add_argument(
        "--no-viewer",
        dest="viewer",
        action="store_false",
        help="do not serve the read-only page /viewer/ that follows the live sessions (docs/viewer.md; its data need the token)",
    )
    a.add_argument(
        "--insecure",
        action="store_true",
        help=f"serve on a non-loopback --host with no token (refused otherwise: set {TOKEN_ENV} or --token)",
    )
    s.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"), help="uvicorn log level (default info)"
    )


#: (flag, ServerLimits field, type, help) of the limit options.
_LIMIT_OPTIONS = (
    ("--max-body-bytes", "max_body_bytes", int, "largest HTTP request body; a larger one gets 413 unread"),
    ("--max-message-bytes", "max_message_bytes", int, "largest WebSocket message"),
    ("--max-items", "max_items", int, "most JSON values in one WebSocket message (counted before parsing)"),
    ("--max-bytes-per-s", "max_bytes_per_s", int, "bytes a second one WebSocket's messages are read at, at most (larger bursts wait)"),
    ("--max-tenants", "max_tenants", int, "most tenants a client's scenario may have"),
    ("--max-nodes", "max_nodes", int, "most nodes a client's scenario may have"),
    ("--max-rounds", "max_rounds", int, "largest max_cycles a client may ask for"),
    ("--max-gpus", "max_gpus", int, "largest max_gpus of a client's tenant"),
    ("--max-shapley-samples", "max_shapley_samples", int, "largest reward.shapley_samples a client may ask for"),
    ("--max-rate", "max_rate", float, "largest workload arrival rate a client may ask for"),
    ("--max-work", "max_work", int, "the most work one step may cost, the round's and the opponents' plan (kernel row-columns)"),
    ("--http-session-idle", "http_session_idle_s", float, "seconds after which an idle session created over HTTP expires"),
    ("--ws-idle", "ws_idle_s", float, "seconds of silence after which a WebSocket session is closed"),
    ("--max-connections", "max_connections", int, "open TCP connections; one more closes the oldest idle one, else gets 503"),
    ("--header-timeout", "header_timeout_s", float, "seconds a request's head or a WebSocket's handshake may take"),
    ("--keep-alive", "keep_alive_s", float, "seconds an HTTP connection may idle between requests"),
    ("--max-header-bytes", "max_header_bytes", int, "largest request line and headers, together"),
    ("--body-timeout", "body_timeout_s", float, "seconds an HTTP body may take to arrive (408 past it)"),
    ("--max-bodies-bytes", "max_bodies_bytes", int, "HTTP body bytes held at once over every request (503 past it)"),
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _import_server():
    """``(make_app, uvicorn)``; ImportError when the extra is missing."""
    import uvicorn  # the optional extra

    from fleet_marl.openenv import make_app  # OpenEnv and FastAPI: the optional extra

    return make_app, uvicorn


def build_app(args):
    """The FastAPI app for parsed ``args`` (raises ImportError without the extra)."""
    make_app, _ = _import_server()
    return make_app(**app_kwargs(args))


def limits_from(args):
    """The :class:`~fleet_marl.openenv.limits.ServerLimits` of parsed ``args`` (ValueError names a bad one)."""
    if getattr(args, "max_planner_work", None) is not None:
        raise ValueError(
            "--max-planner-work: replaced by --max-work, which bounds every opponent by its cost (docs/llm_agents.md, Security)"
        )
    kw = {dest: getattr(args, dest) for _, dest, _, _ in _LIMIT_OPTIONS}
    host = getattr(args, "host", "127.0.0.1")
    hosts = getattr(args, "allowed_hosts", None) or (LOOPBACK_HOSTS if is_loopback(host) else ("*",))
    origins = tuple(getattr(args, "allowed_origins", None) or ())
    try:
        return ServerLimits(
            max_sessions=args.max_sessions, allow_attach=args.allow_attach, allowed_hosts=tuple(hosts), allowed_origins=origins, **kw
        )
    except ValueError as exc:  # name the option, not the field
        text = str(exc)
        for flag, dest, _, _ in _LIMIT_OPTIONS:
            if text.startswith(dest + " "):
                text = flag + text[len(dest) :]
        raise ValueError(text) from None


def token_from(args) -> str | None:
    """``--token``, else ``$FLEET_MARL_TOKEN``, else None."""
    return args.token or os.environ.get(TOKEN_ENV) or None


def app_kwargs(args) -> dict:
    kw: dict = {"mode": args.mode, "task": args.task, "limits": limits_from(args), "token": token_from(args)}
    if not getattr(args, "viewer", True):
        kw["viewer"] = False
    if args.reward_scheme:
        kw["config"] = {"reward_scheme": args.reward_scheme}
    if args.mode == "ego":
        ego = int(args.ego) if args.ego.isdigit() else args.ego
        kw.update(
            ego=ego,
            opponents=args.opponents,
            fallback=args.fallback,
            invalid_penalty=args.invalid_penalty,
            max_invalid_streak=args.max_invalid_streak,
        )
    return kw


def run(args) -> int:
    """Run ``fleet-marl serve`` with parsed ``args``; return the exit code."""
    if not 0 < args.port < 65536:
        print(f"error: --port {args.port}: expected an integer in [1, 65535]", file=sys.stderr)
        return 2
    if args.max_sessions < 1:
        print(f"error: --max-sessions {args.max_sessions}: expected an integer >= 1", file=sys.stderr)
        return 2
    try:
        make_app, uvicorn = _import_server()
    except ImportError as exc:
        print(f"error: {INSTALL_HINT}\n({exc})", file=sys.stderr)
        return 2
    try:
        kw = app_kwargs(args)
        if kw["token"] is None and not is_loopback(args.host) and not args.insecure:
            raise ValueError(
                f"--host {args.host}: serving beyond this machine with no token lets anyone who reaches port {args.port} open "
                f"sessions; set {TOKEN_ENV} (or --token) and give clients the token, or pass --insecure to serve without one"
            )
        app = make_app(**kw)
        from fleet_marl.openenv.transport import uvicorn_config  # uvicorn: the optional extra, loaded when the command runs

        config = uvicorn_config(app, kw["limits"], args.host, args.port, args.log_level)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl serve --help' for the options", file=sys.stderr)
        return 2
    print(
        f"fleet-marl serve: {args.mode} view of {args.task} on http://{args.host}:{args.port} "
        f"(WebSocket /ws, at most {args.max_sessions} sessions, {'a bearer token required' if kw['token'] else 'no token'})",
        file=sys.stderr,
        flush=True,
    )
    if kw.get("viewer", True):
        fragment = "#token=<the token>" if kw["token"] else ""
        print(f"the viewer (read-only): http://{args.host}:{args.port}/viewer/{fragment}", file=sys.stderr, flush=True)
    if kw["token"] is None and not is_loopback(args.host):
        print(
            f"warning: serving on {args.host} with no token (--insecure): anyone who can reach port {args.port} can open sessions.",
            file=sys.stderr,
            flush=True,
        )
    uvicorn.Server(config).run()
    return 0


__all__ = [
    "DESCRIPTION",
    "EXAMPLES",
    "INSTALL_HINT",
    "TOKEN_ENV",
    "add_arguments",
    "app_kwargs",
    "build_app",
    "is_loopback",
    "limits_from",
    "run",
    "token_from",
]

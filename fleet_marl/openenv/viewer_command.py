"""``fleet-marl view``: the viewer's read-only page (:mod:`fleet_marl.openenv.viewer`) replaying one
episode, served by uvicorn behind the server's guard and connection limits (docs/viewer.md).

The episode is a recording (``fleet-marl demo --record episode.jsonl``), or is played here, every
reward scheme computed, by anything ``fleet-marl evaluate --policy`` takes (a reference policy, a
``.py`` file, ``module:Name``, a ``fleet-marl train`` run folder) on ``--task`` from ``--seed``.
Importing this module imports neither FastAPI nor uvicorn; they load when the command runs, and
without the ``openenv`` extra it says how to install it and exits with code 2.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from fleet_marl.errors import UsageError, require
from fleet_marl.evaluation.command import add_protocol_arguments, positive, protocol_overrides
from fleet_marl.evaluation.loading import PolicyError
from fleet_marl.evaluation.recording import read_episode, record_episode
from fleet_marl.openenv.command import TOKEN_ENV, is_loopback
from fleet_marl.openenv.limits import LOOPBACK_HOSTS, ServerLimits
from fleet_marl.tasks import TASKS

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError)

DESCRIPTION = (
    "Serve a read-only web page that replays one episode: the cluster's racks, nodes and GPUs coloured by tenant, each "
    "round's requests and grants, power and heat per rack, every tenant's reward under each scheme, starvation, "
    "degenerate and safety events. Needs the 'openenv' extra (FastAPI, uvicorn). 'fleet-marl serve' serves the same "
    "page at /viewer/, following its live sessions."
)

EXAMPLES = """examples:
  fleet-marl demo --record runs/easy.jsonl --every 1000 && fleet-marl view runs/easy.jsonl
  fleet-marl view precision_expert --task medium --seed 3          # played here, then served
  fleet-marl view runs/train/easy-shared-mixed --task easy --seed 0   # a trained run's episode
  fleet-marl view runs/easy.jsonl --port 8051 --token "$FLEET_MARL_TOKEN"

It prints the page's address with a fresh token in its fragment (http://127.0.0.1:8050/viewer/#token=...);
the page sends the token with every data request, and the fragment never reaches a server log.
"""


def add_arguments(parser) -> None:
    parser.add_argument(
        "source",
        metavar="RUN_OR_EPISODE",
        help="a recording (*.jsonl, from fleet-marl demo --record) or a policy to play: a reference policy, "
        "path.py[:Name], module:Name or a fleet-marl train run folder",
    )
    parser.add_argument("--task", default="easy", help="task of a policy's episode (default easy; a recording names its own)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a policy's episode (default 0)")
    add_protocol_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    parser.add_argument(
        "--token", default=None, help=f"the data routes' bearer token (default: ${TOKEN_ENV} if set, else a fresh random one)"
    )
    parser.add_argument("--insecure", action="store_true", help="serve with no token (anyone who reaches the port sees the episode)")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn log level (default warning)",
    )


def load_source(args) -> dict:
    """The episode ``args.source`` names: a recording read, or a policy's episode played."""
    if args.source.endswith(".jsonl"):
        return read_episode(Path(args.source))
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    positive("seed", args.seed, 0)
    return record_episode(args.task, args.source, args.seed, protocol_overrides(args))


def run(args) -> int:
    """Run ``fleet-marl view`` with parsed ``args``; return the exit code."""
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: expected an integer in [1, 65535]")
    if args.insecure and args.token:
        raise UsageError("--insecure serves with no token: leave out --token")
    require(("fastapi", "uvicorn"), "openenv", "fleet-marl view")
    from fleet_marl.openenv.transport import uvicorn_config  # uvicorn: the optional extra, loaded when the command runs
    from fleet_marl.openenv.viewer import make_viewer_app  # FastAPI: the optional extra, loaded when the command runs

    episode = load_source(args)
    token = None if args.insecure else (args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24))
    limits = ServerLimits(allowed_hosts=LOOPBACK_HOSTS if is_loopback(args.host) else ("*",))
    app = make_viewer_app(episode, token, limits)
    config = uvicorn_config(app, limits, args.host, args.port, args.log_level)
    head = episode["header"]
    url = f"http://{args.host}:{args.port}/viewer/" + (f"#token={token}" if token else "")
    print(
        f"fleet-marl view: {head.get('task')} played by {head.get('policy')} (seed {head.get('seed')}), "
        f"{len(episode['frames']) - 1} rounds\nopen {url}",
        file=sys.stderr,
        flush=True,
    )
    import uvicorn  # the optional extra (checked above)

    uvicorn.Server(config).run()
    return 0


__all__ = ["DESCRIPTION", "ERRORS", "EXAMPLES", "add_arguments", "load_source", "run"]

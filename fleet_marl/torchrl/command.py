"""``fleet-marl train --engine torchrl``: the command-line front of :mod:`fleet_marl.torchrl.train`.

Importing this module imports no torch: the options are parsed and checked first, and without
the ``[torchrl]`` extra (:data:`NEEDS`) the command says how to install it and exits with code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from fleet_marl.errors import require
from fleet_marl.torchrl.loader import ENGINE
from fleet_marl.training import TrainConfigError, config_path, from_command, print_result, usage_error

#: What training imports, all from the ``[torchrl]`` extra.
NEEDS = ("torch", "torchrl", "tensordict", "tensorboardX", "matplotlib")

#: The options that only the RLlib engine has.
RLLIB_ONLY = ("num_env_runners", "address")
#: The options that only this engine has (``fleet-marl train --engine rllib`` refuses them).
TORCHRL_ONLY = ("num_envs", "collector", "collectors", "device")


def add_arguments(t: argparse.ArgumentParser) -> None:
    """The options of ``fleet-marl train`` that only the torchrl engine has (:data:`TORCHRL_ONLY`)."""
    t.add_argument(
        "--num-envs", type=int, default=None, metavar="B", help="torchrl: clusters stepped together by the vector env (default 1024)"
    )
    t.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        metavar="M",
        help="both engines: a safety cap on wall time (default 15; 0: none): stop after the iteration that passes M minutes, "
        "and say so (how far a capped run gets depends on the machine)",
    )
    t.add_argument(
        "--collector",
        default=None,
        choices=("sync", "async"),
        help="torchrl: sync (default): collect, then learn; the same config and seed give a bit-identical run, and --resume "
        "continues it bit for bit. async: collect the next batch with the previous weights while learning; faster on 2 cores, "
        "NOT reproducible (which weights a batch is sampled with depends on timing)",
    )
    t.add_argument(
        "--collectors",
        type=int,
        default=None,
        metavar="K",
        help="torchrl: collect in K processes (TorchRL's multi-process collectors; default 1). With sync, each steps num_envs / K "
        "clusters and a run is reproducible for the same K (not across K); a resumed run starts fresh episodes",
    )
    t.add_argument(
        "--device",
        default=None,
        metavar="DEV",
        help="torchrl: where the learner runs: cpu (default) or cuda[:i]; the env and collection stay on CPU",
    )


def resolve(args: argparse.Namespace) -> tuple[Any, Any]:
    """(TorchRLTrainConfig, resume) from the parsed ``fleet-marl train`` arguments."""
    from fleet_marl.torchrl.config import TorchRLTrainConfig  # torch: only when the command runs

    for name in RLLIB_ONLY:
        if getattr(args, name, None) is not None:
            raise TrainConfigError(
                f"--{name.replace('_', '-')} is an option of --engine rllib (Ray); the torchrl engine trains in this process"
            )
    options = {
        "num_envs": args.num_envs,
        "max_minutes": args.max_minutes,
        "collector": getattr(args, "collector", None),
        "collectors": getattr(args, "collectors", None),
        "device": getattr(args, "device", None),
    }
    return from_command(args, TorchRLTrainConfig, ENGINE, _read_config, options)


def _read_config(name: str) -> Any:
    """The torchrl engine's config of ``--config NAME`` (a file with ``engine: torchrl``)."""
    from fleet_marl.torchrl.config import TorchRLTrainConfig  # torch: only once the extra is checked

    p = config_path(name)
    if not p.is_file():
        raise TrainConfigError(f"--config {name!r}: no such file")
    try:
        data = yaml.safe_load(Path(p).read_text()) or {}
    except yaml.YAMLError as exc:
        raise TrainConfigError(f"--config {name!r}: not valid YAML ({exc})") from None
    if data.get("engine", "rllib") != "torchrl":
        raise TrainConfigError(
            f"--config {name!r} is a config of the RLlib engine (no 'engine: torchrl' in it); "
            "pass --engine rllib, or add 'engine: torchrl' and the torchrl engine's keys"
        )
    return TorchRLTrainConfig.from_dict(data, source=str(p))


def run(args: argparse.Namespace) -> int:
    """Run ``fleet-marl train --engine torchrl`` with parsed ``args``; returns the exit code."""
    require(NEEDS, "torchrl", "fleet-marl train --engine torchrl")
    from fleet_marl.torchrl.train import prepare, train  # torch: after the extra is checked

    try:
        tc, resume = resolve(args)
        if args.resume and args.overwrite:
            raise TrainConfigError("--resume and --overwrite: pick one (continue the run, or start it over)")
        prepare(tc, resume, args.overwrite)
    except (TrainConfigError, ValueError) as exc:
        return usage_error(exc)
    res = train(tc, resume=resume, overwrite=args.overwrite, progress=not args.no_progress, final_episodes=args.final_episodes)
    agent_steps, train_seconds = res.agent_steps or 0, res.train_seconds or 0.0
    return print_result(
        res,
        tc,
        args.json,
        f"trained {tc.run_name} with TorchRL: {res.iterations} iterations, {res.env_steps:,} env steps "
        f"({agent_steps:,} agent steps, {agent_steps / max(train_seconds, 1e-9):,.0f} agent steps/s) in {res.seconds / 60:.1f} min",
    )


__all__ = ["NEEDS", "RLLIB_ONLY", "TORCHRL_ONLY", "add_arguments", "resolve", "run"]

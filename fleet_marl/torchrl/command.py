"""``fleet-marl train --engine torchrl``: the command-line front of :mod:`fleet_marl.torchrl.train`.

Importing this module imports no torch: the options are parsed and checked first, and without
the ``[torchrl]`` extra (:data:`NEEDS`) the command says how to install it and exits with code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from fleet_marl.errors import require
from fleet_marl.evaluation import runs
from fleet_marl.evaluation.runs import config_path
from fleet_marl.torchrl.loader import TrainConfigError, checkpoint_folder, read_sidecar

#: What training imports, all from the ``[torchrl]`` extra.
NEEDS = ("torch", "torchrl", "tensordict", "tensorboardX", "matplotlib")

#: The options that only the RLlib engine has.
RLLIB_ONLY = ("num_env_runners", "address")


def resolve(args):
    """(TorchRLTrainConfig, resume) from the parsed ``fleet-marl train`` arguments."""
    from fleet_marl.torchrl.train import TorchRLTrainConfig  # torch: only when the command runs

    for name in RLLIB_ONLY:
        if getattr(args, name, None) is not None:
            raise TrainConfigError(
                f"--{name.replace('_', '-')} is an option of --engine rllib (Ray); the torchrl engine trains in this process"
            )
    if args.config:
        p = config_path(args.config)
        if not p.is_file():
            raise TrainConfigError(f"--config {args.config!r}: no such file")
        try:
            data = yaml.safe_load(Path(p).read_text()) or {}
        except yaml.YAMLError as exc:
            raise TrainConfigError(f"--config {args.config!r}: not valid YAML ({exc})") from None
        if data.get("engine", "rllib") != "torchrl":
            raise TrainConfigError(
                f"--config {args.config!r} is a config of the RLlib engine (no 'engine: torchrl' in it); "
                "pass --engine rllib, or add 'engine: torchrl' and the torchrl engine's keys"
            )
        tc = TorchRLTrainConfig.from_dict(data, source=str(p))
    elif args.resume:
        folder = checkpoint_folder(args.resume)
        if folder is None:
            raise TrainConfigError(f"--resume {args.resume}: no torchrl run there (expected checkpoint/fleet_marl_torchrl.json)")
        tc = TorchRLTrainConfig.from_dict(read_sidecar(folder).get("train_config", {}), source=f"{args.resume} (the run's config)")
    else:
        tc = TorchRLTrainConfig()
    if args.final_episodes is not None and args.final_episodes < 0:
        raise TrainConfigError(f"--final-episodes {args.final_episodes}: expected an integer >= 0")
    changes = {
        "task": args.task,
        "reward_scheme": args.reward_scheme,
        "sharing": args.sharing,
        "iterations": args.iterations,
        "seed": args.seed,
        "num_envs": args.num_envs,
        "max_minutes": args.max_minutes,
        "out": args.out,
        "name": args.name,
    }
    return tc.replace(source="command line", **changes), args.resume


def run(args) -> int:
    """Run ``fleet-marl train --engine torchrl`` with parsed ``args``; returns the exit code."""
    require(NEEDS, "torchrl", "fleet-marl train --engine torchrl")
    from fleet_marl.torchrl.train import prepare, train  # torch: after the extra is checked

    try:
        tc, resume = resolve(args)
        if args.resume and args.overwrite:
            raise TrainConfigError("--resume and --overwrite: pick one (continue the run, or start it over)")
        prepare(tc, resume, args.overwrite)
    except (TrainConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("run 'fleet-marl train --help' for the options", file=sys.stderr)
        return 2
    res = train(tc, resume=resume, overwrite=args.overwrite, progress=not args.no_progress, final_episodes=args.final_episodes)
    if args.json:
        print(
            json.dumps(
                {
                    "run_dir": str(res.run_dir),
                    "checkpoint": str(res.checkpoint),
                    "env_steps": res.env_steps,
                    "agent_steps": res.agent_steps,
                    "seconds": res.seconds,
                    "evaluations": res.final,
                },
                indent=2,
            )
        )
        return 0
    runs.print_summary(
        res,
        tc.task,
        tc.env,
        f"trained {tc.run_name} with TorchRL: {res.iterations} iterations, {res.env_steps:,} env steps "
        f"({res.agent_steps:,} agent steps, {res.agent_steps / max(res.train_seconds, 1e-9):,.0f} agent steps/s) in {res.seconds / 60:.1f} min",
    )
    return 0


__all__ = ["NEEDS", "RLLIB_ONLY", "resolve", "run"]

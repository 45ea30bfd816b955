"""``fleet-marl demo``: one episode, rendered, with a summary at the end.

By default ``easy`` played by ``precision_expert``: each round's ANSI frame (the env's
``ansi`` render) is printed, ``record`` saves the episode as JSON lines for ``fleet-marl view``
(:mod:`fleet_marl.evaluation.recording`), and ``gif`` saves the ``rgb_array`` frames as an animated GIF,
which needs the ``[plot]`` extra (matplotlib draws the frames, Pillow writes the GIF): without
it the command says how to install it before the episode starts, and exits with code 2.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from fleet_marl.environment.render import render_ansi
from fleet_marl.errors import UsageError, require
from fleet_marl.evaluation.command import add_protocol_arguments, positive, protocol_overrides
from fleet_marl.evaluation.loading import PolicyError, load_policy
from fleet_marl.evaluation.recording import frame, header, recording_policy, write_episode
from fleet_marl.evaluation.recording import summary as episode_summary
from fleet_marl.evaluation.runner import make_env, run_episode
from fleet_marl.tasks import TASKS

#: User errors this command reports as ``error: ...`` (exit code 2).
ERRORS = (UsageError, PolicyError)
EXAMPLES = """examples:
  fleet-marl demo                               # easy, precision_expert, seed 0
  fleet-marl demo --gif runs/demo.gif --every 10
  fleet-marl demo --task medium --record runs/medium.jsonl --every 1000   # then: fleet-marl view runs/medium.jsonl
  fleet-marl demo --task medium --policy planner --delay 0.2
  fleet-marl demo --task medium --policy bidder --protocol sequential --turn-order rotating
"""


class _Recorder:
    """Wraps a policy: before each action it prints the frame and grabs the picture."""

    def __init__(self, env, policy, out, every: int, delay: float, frames: list | None):
        self.env, self.policy, self.out = env, policy, out
        self.every, self.delay, self.frames = every, delay, frames
        self._shown = -1  # the round last shown: under the sequential protocol act() is called once per turn

    def reset(self, seed=None):
        self._shown = -1
        self.policy.reset(seed)

    def act(self, observations, infos):
        if getattr(self.env, "unwrapped", self.env).round != self._shown:
            self._frame()
        return self.policy.act(observations, infos)

    def _frame(self):
        env = getattr(self.env, "unwrapped", self.env)
        self._shown = env.round
        if env.round % self.every == 0:
            print(render_ansi(env), file=self.out, end="\n\n", flush=True)
            if self.delay:
                time.sleep(self.delay)
        if self.frames is not None:
            self.frames.append(env.render())


def save_gif(frames: list[np.ndarray], path: Path, fps: float) -> Path:
    require("PIL", "plot", "fleet-marl demo --gif")
    from PIL import Image  # Pillow (the [plot] extra), needed only for --gif

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path


def demo(
    task: str = "easy",
    policy: str = "precision_expert",
    seed: int = 0,
    gif: str | None = None,
    fps: float = 4.0,
    every: int = 1,
    delay: float = 0.0,
    out=None,
    overrides: dict | None = None,
    record: str | None = None,
) -> dict:
    """Run and print the episode to ``out`` (default: ``sys.stdout`` at call time); return the
    summary dict. ``overrides``: the env's (``protocol="sequential"`` and ``turn_order``: the AEC
    env, one frame per round). ``record``: a path to save the episode to as JSON lines, every
    reward scheme computed (``fleet-marl view`` replays it)."""
    out = sys.stdout if out is None else out
    if gif:  # before the episode: the frames need matplotlib, the GIF Pillow
        require(("matplotlib", "PIL"), "plot", "fleet-marl demo --gif")
    overrides = dict(overrides or {})
    if record:
        overrides["compute_all"] = True
    env = make_env(task, render_mode="rgb_array" if gif else None, **overrides)
    pol = load_policy(policy, env)
    recorded: list = []
    if record:
        pol = recording_policy(env, pol, recorded)
    frames: list | None = [] if gif else None
    ep = run_episode(env, _Recorder(env, pol, out, every, delay, frames), seed, policy)
    print(render_ansi(env.unwrapped), file=out, end="\n\n")  # the final round
    if frames is not None:
        frames.append(env.render())
    lines = [
        f"demo: task {task}, policy {policy}, seed {seed}"
        + (f", protocol sequential ({overrides.get('turn_order', 'fixed')} turns)" if overrides.get("protocol") == "sequential" else "")
        + f": {ep.rounds} rounds",
        f"welfare {ep.welfare:.2f}   Jain {ep.jain:.2f}   max starvation streak {ep.max_starvation_streak}   starvation events {ep.starvation_events}",
        "events  " + "  ".join(f"{k} {v}" for k, v in ep.events.items()) + f"  illegal {ep.illegal}",
        f"{'agent':<10} {'return':>8} {'utility':>8} {'service':>8} {'jobs':>5} {'rho':>6} {'p99 wait':>9}",
    ]
    for a, r in ep.agents.items():
        rho = "-" if r["rho"] is None else f"{r['rho']:.2f}"
        wait = "-" if r["p99_wait_s"] is None else f"{r['p99_wait_s']:.0f}s"
        lines.append(f"{a:<10} {r['return']:>8.2f} {r['utility']:>8.2f} {r['service']:>8.2f} {r['jobs_done']:>5} {rho:>6} {wait:>9}")
    summary = {"task": task, "policy": policy, "seed": seed, "rounds": ep.rounds, "welfare": ep.welfare, "jain": ep.jain}
    if record:
        recorded.append(frame(env.unwrapped))
        about = {"task": task, "policy": policy, "seed": seed, "protocol": overrides.get("protocol", "simultaneous")}
        episode = {"header": header(env.unwrapped, **about), "frames": recorded, "summary": episode_summary(ep)}
        summary["record"] = str(write_episode(record, episode))
        lines.append(f"saved {len(recorded)} frames (round 0 to {ep.rounds}) to {summary['record']} (fleet-marl view {summary['record']})")
    if gif and frames is not None:
        summary["gif"] = str(save_gif(frames, Path(gif), fps))
        lines.append(f"saved {len(frames)} frames to {summary['gif']}")
    print("\n".join(lines), file=out)
    env.close()
    return summary


def add_arguments(parser) -> None:
    parser.add_argument("--task", default="easy", help="task (default easy)")
    parser.add_argument("--policy", default="precision_expert", help="policy, as for evaluate (default precision_expert)")
    parser.add_argument("--seed", type=int, default=0, help="episode seed (default 0)")
    parser.add_argument("--gif", default=None, metavar="PATH", help="also save the rgb_array frames as an animated GIF")
    parser.add_argument(
        "--record",
        default=None,
        metavar="PATH",
        help="also save the episode as JSON lines, every reward scheme computed, for 'fleet-marl view PATH' (docs/viewer.md)",
    )
    parser.add_argument("--fps", type=float, default=4.0, help="GIF frames per second (default 4)")
    parser.add_argument("--every", type=int, default=1, help="print every N-th frame (default 1)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to pause after each printed frame (default 0)")
    add_protocol_arguments(parser)


def run(args) -> int:
    positive("every", args.every)
    positive("seed", args.seed, 0)
    if args.gif and Path(args.gif).suffix.lower() != ".gif":
        raise UsageError(f"--gif {args.gif}: expected a path ending in .gif")
    if args.record and Path(args.record).suffix.lower() != ".jsonl":
        raise UsageError(f"--record {args.record}: expected a path ending in .jsonl")
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    if not args.fps > 0:
        raise UsageError(f"--fps {args.fps}: expected a number > 0")
    if args.delay < 0:
        raise UsageError(f"--delay {args.delay}: expected a number >= 0")
    overrides = protocol_overrides(args)
    demo(
        args.task,
        args.policy,
        seed=args.seed,
        gif=args.gif,
        fps=args.fps,
        every=args.every,
        delay=args.delay,
        overrides=overrides,
        record=args.record,
    )
    return 0


__all__ = ["EXAMPLES", "add_arguments", "demo", "run", "save_gif"]

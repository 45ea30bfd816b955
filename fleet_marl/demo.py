"""``fleet-marl demo``: one episode, rendered, with a summary at the end.

By default ``easy`` played by ``precision_expert``: each round's ANSI frame (the env's
``ansi`` render) is printed, and ``gif`` saves the ``rgb_array`` frames as an animated GIF.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from fleet_marl.environment import parallel_env
from fleet_marl.grader import load_policy, run_episode
from fleet_marl.render import render_ansi


class _Recorder:
    """Wraps a policy: before each action it prints the frame and grabs the picture."""

    def __init__(self, env, policy, out, every: int, delay: float, frames: list | None):
        self.env, self.policy, self.out = env, policy, out
        self.every, self.delay, self.frames = every, delay, frames

    def reset(self, seed=None):
        self.policy.reset(seed)

    def act(self, observations, infos):
        self._frame()
        return self.policy.act(observations, infos)

    def _frame(self):
        env = self.env
        if env.round % self.every == 0:
            print(render_ansi(env), file=self.out, end="\n\n", flush=True)
            if self.delay:
                time.sleep(self.delay)
        if self.frames is not None:
            self.frames.append(env.render())


def save_gif(frames: list[np.ndarray], path: Path, fps: float) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path


def demo(task: str = "easy", policy: str = "precision_expert", seed: int = 0, gif: str | None = None, fps: float = 4.0,
         every: int = 1, delay: float = 0.0, out=sys.stdout) -> dict:
    """Run and print the episode; return the summary dict."""
    env = parallel_env(task=task, compute_all=False, render_mode="rgb_array" if gif else None)
    pol = load_policy(policy, env)
    frames: list | None = [] if gif else None
    ep = run_episode(env, _Recorder(env, pol, out, every, delay, frames), seed, policy)
    print(render_ansi(env), file=out, end="\n\n")  # the final round
    if frames is not None:
        frames.append(env.render())
    lines = [
        f"demo: task {task}, policy {policy}, seed {seed}: {ep.rounds} rounds",
        f"welfare {ep.welfare:.2f}   Jain {ep.jain:.2f}   max starvation streak {ep.max_starvation_streak}   starvation events {ep.starvation_events}",
        "events  " + "  ".join(f"{k} {v}" for k, v in ep.events.items()) + f"  illegal {ep.illegal}",
        f"{'agent':<10} {'return':>8} {'utility':>8} {'service':>8} {'jobs':>5} {'rho':>6} {'p99 wait':>9}",
    ]
    for a, r in ep.agents.items():
        rho = "-" if r["rho"] is None else f"{r['rho']:.2f}"
        wait = "-" if r["p99_wait_s"] is None else f"{r['p99_wait_s']:.0f}s"
        lines.append(f"{a:<10} {r['return']:>8.2f} {r['utility']:>8.2f} {r['service']:>8.2f} {r['jobs_done']:>5} {rho:>6} {wait:>9}")
    summary = {"task": task, "policy": policy, "seed": seed, "rounds": ep.rounds, "welfare": ep.welfare, "jain": ep.jain}
    if gif:
        summary["gif"] = str(save_gif(frames, Path(gif), fps))
        lines.append(f"saved {len(frames)} frames to {summary['gif']}")
    print("\n".join(lines), file=out)
    env.close()
    return summary


__all__ = ["demo", "save_gif"]

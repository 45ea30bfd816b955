"""An LLM agent on the single-tenant (ego) view, with a GRPO-style rollout loop.

The "LLM" here is scripted -- a function from the prompt text to an answer text -- so the
script runs anywhere in seconds; swap in a real model's ``generate`` and nothing else changes.
It reads only the prompt (never the structured copy), as a model would, and it sometimes
answers badly on purpose (prose without JSON, a field that does not exist) so the server's
handling of invalid answers shows up in the table.

How to run::

    .venv/bin/python experiments/llm_agent.py                      # in-process server (TestClient)
    .venv/bin/python experiments/llm_agent.py --group 8 --task easy --rounds 20
    fleet-marl serve --mode ego --port 8001 &                       # or against a real server
    .venv/bin/python experiments/llm_agent.py --url http://127.0.0.1:8001

What it does: for each of ``--prompts`` seeds, it plays a *group* of ``--group`` episodes from
the same seed (the same prompt), each with a differently seeded sampling "temperature", sums
each episode's rewards, and computes GRPO's group-relative advantages
``A = (R - mean(R)) / (std(R) + 1e-6)`` -- the numbers a GRPO trainer would weight each
episode's tokens with. Results to expect: returns differ within a group when the sampled
answers differ; episodes with invalid answers (``invalid`` column) pay the penalty and get
negative advantages.

Training a real model with TRL's ``GRPOTrainer`` against the server is
``experiments/trl_grpo.py`` (the ``[llm]`` extra; its ``rollout_func``, ``EgoRollout``, is what
tests/test_trl_grpo.py runs). :class:`FleetTenantEnv` below is the shape of TRL's other route,
``environment_factory``, for a tool-calling model: ``reset(**kwargs)`` opens an episode and
returns the first prompt, and its one public method, ``act(answer)``, is the tool TRL offers
the model (its docstring is the tool's description); the accumulated return is ``total``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

try:
    from fleet_marl.openenv import FleetEgoAction, FleetEgoClient, WebSocketSession, make_app
except ImportError as exc:  # pragma: no cover
    sys.exit(f"{exc}")


@dataclass
class Args:
    """Experiment arguments."""

    task: str = "tiny"  # scenario
    prompts: int = 2  # distinct seeds (prompts)
    group: int = 4  # episodes per prompt (GRPO's group size)
    rounds: int = 12  # rounds per episode (max_cycles override)
    seed: int = 0  # first seed
    url: str | None = None  # a running `fleet-marl serve --mode ego`; default: in-process


def scripted_llm(temperature_seed: int) -> Callable[[str], str]:
    """A stand-in for a model: reads the legal GPU range and precisions from the prompt, asks
    for about half the GPUs it may, FP8 on attention and MLP when allowed, and -- with a small
    probability set by its seed -- answers with prose only or an unknown field."""
    rng = np.random.default_rng(temperature_seed)

    def llm(prompt: str) -> str:
        most = int(re.search(r"request_gpus: 0 to (\d+)", prompt).group(1))
        allowed = re.search(r"precision per layer group \([^)]*\): ([a-z0-9, ]+)\.", prompt).group(1).split(", ")
        u = rng.random()
        if u < 0.06:
            return "I think we should wait and see what the others do."
        answer = {
            "request_gpus": int(min(most, max(1, round(most * rng.uniform(0.3, 0.7))))),
            "bid": str(rng.choice(["list", "high"])),
            "batch": int(rng.choice([8, 16, 32])),
            "precision": {
                g: ("fp8" if g in ("attn", "mlp") and "fp8" in allowed else "bf16") for g in ("embed", "attn", "mlp", "norm", "head")
            },
        }
        if u < 0.10:
            answer["priority"] = "urgent"  # an unknown field: rejected, the fallback runs
        return "Reasoning: keep utilization high without starving anyone.\n```json\n" + json.dumps(answer) + "\n```"

    return llm


def play_episode(session, llm: Callable[[str], str], seed: int, task: str, rounds: int) -> dict:
    """One episode: reset, then prompt -> llm -> text action until done. ``session`` is a sync
    ``FleetEgoClient`` or a :class:`WebSocketSession`."""
    result = session.reset(seed=seed, task=task, config={"max_cycles": rounds})
    total, invalid, turns = 0.0, 0, 0
    while not result.done:
        text = llm(result.observation.prompt)
        result = session.step(FleetEgoAction(text=text))
        total += float(result.reward)
        invalid = result.observation.invalid_actions
        turns += 1
    return {"return": total, "invalid": invalid, "turns": turns, "ego": result.observation.ego}


def advantages(returns: list[float]) -> list[float]:
    """GRPO's group-relative advantages."""
    mu = statistics.fmean(returns)
    sd = statistics.pstdev(returns)
    return [(r - mu) / (sd + 1e-6) for r in returns]


class FleetTenantEnv:
    """A sketch of a TRL ``environment_factory`` class over a running ego server (not used by
    the script; TRL calls ``reset`` per episode and offers ``act`` to the model as a tool)."""

    url = "http://127.0.0.1:8001"

    def __init__(self):
        self.client = FleetEgoClient(base_url=self.url).sync()
        self.total = 0.0
        self.done = False

    def reset(self, **kwargs) -> str:
        result = self.client.reset(seed=kwargs.get("seed"), task=kwargs.get("task", "easy"))
        self.total, self.done = 0.0, False
        return result.observation.prompt

    def act(self, answer: str) -> str:
        """Play one round as your tenant. Args: answer: a JSON object with request_gpus, bid, batch and precision."""
        if self.done:
            raise ValueError("the episode is over")
        result = self.client.step(FleetEgoAction(text=answer))
        self.total += float(result.reward)
        self.done = result.done
        return result.observation.prompt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python experiments/llm_agent.py\n  python experiments/llm_agent.py --url http://127.0.0.1:8001 --group 8",
    )
    for name, default in vars(Args()).items():
        p.add_argument(f"--{name}", type=type(default) if default is not None else str, default=default)
    a = Args(**vars(p.parse_args(argv)))
    if a.group < 2 or a.prompts < 1 or a.rounds < 1:
        p.error("--group must be >= 2, --prompts and --rounds >= 1")

    def run(session) -> list[dict]:
        rows = []
        for k in range(a.prompts):
            seed = a.seed + k
            group = [play_episode(session, scripted_llm(1000 * seed + g), seed, a.task, a.rounds) for g in range(a.group)]
            for g, (ep, adv) in enumerate(zip(group, advantages([e["return"] for e in group]), strict=False)):
                rows.append({"seed": seed, "sample": g, **ep, "advantage": adv})
        return rows

    if a.url:
        with FleetEgoClient(base_url=a.url).sync() as client:
            rows = run(client)
    else:
        from fastapi.testclient import TestClient

        with TestClient(make_app(mode="ego", max_sessions=1, task=a.task)) as tc, tc.websocket_connect("/ws") as ws:
            rows = run(WebSocketSession(ws, mode="ego"))
    print(f"{'seed':>4} {'sample':>6} {'ego':>9} {'turns':>5} {'invalid':>7} {'return':>9} {'advantage':>9}")
    for r in rows:
        print(
            f"{r['seed']:>4} {r['sample']:>6} {r['ego']:>9} {r['turns']:>5} {r['invalid']:>7} {r['return']:>9.3f} {r['advantage']:>+9.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

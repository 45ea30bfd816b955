"""TRL's ``GRPOTrainer`` trains a causal LM against a live ``fleet-marl serve --mode ego``.

Every reward comes from the server: TRL's ``rollout_func`` (:class:`EgoRollout`) generates the
answers with the trainer's model, opens a WebSocket session on the server (``FleetEgoClient``),
and for each answer resets the episode the prompt came from and plays the answer as the ego
tenant's action for that round; the server's reward (the ego's reward in the task's credit
scheme, minus the invalid-answer penalty when the answer is not a legal JSON action) is the
sample's reward, which :func:`env_reward` hands to TRL, which turns each group's rewards into
advantages and the loss.

What one sample is: the prompt is the server's first observation (``prompt``) of an episode
(``reset(seed=s, task, ego, opponents)``; the dataset holds the first prompt of seeds
``0 .. --seeds - 1``, one row per distinct prompt), and the completion is the answer to that
round: a one-round (contextual bandit) GRPO, the GRPO group being ``--num-generations``
answers to the same prompt, each played from the same seed, so their rewards differ only by
the answer. ``--answer-prefix`` / ``--answer-suffix`` wrap the generated text before it is
sent (the prefix is also where generation starts), for a model too small to write the whole
JSON action: ``--answer-prefix '{"bid": "list", "batch": 8, "precision": "bf16",
"request_gpus": ' --answer-suffix '}'`` leaves it the GPU count (tests/test_trl_grpo.py does
this with a tiny random model). By default the model writes the whole answer.

How to run (needs the ``[llm]`` and ``[openenv]`` extras; any local causal LM with a chat
template, e.g. a downloaded ``Qwen/Qwen2.5-0.5B-Instruct``)::

    python experiments/trl_grpo.py --model /path/to/Qwen2.5-0.5B-Instruct          # starts a server
    fleet-marl serve --mode ego --token "$FLEET_MARL_TOKEN" &                      # or use yours
    python experiments/trl_grpo.py --model PATH --url http://127.0.0.1:8000

Without ``--url`` the script starts ``fleet-marl serve --mode ego`` on a free loopback port with
a random token and stops it at the end; with ``--url``, ``--token`` (or ``$FLEET_MARL_TOKEN``)
is the server's token. It prints each training step's mean and spread of the server's rewards
and the share of valid answers, and saves the model to ``--output-dir`` unless ``--no-save``.
docs/llm_agents.md ("Training with GRPO") has the settings for a run on one GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

try:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from fleet_marl.openenv import FleetEgoAction, FleetEgoClient
except ImportError as exc:  # pragma: no cover
    sys.exit(f"{exc}: pip install -e '.[llm,openenv]'")


@dataclass
class Args:
    """Experiment arguments (``--name value``; docs/llm_agents.md has a one-GPU setting)."""

    model: str = ""  # a local model folder (AutoModelForCausalLM + its tokenizer with a chat template)
    url: str = ""  # a running `fleet-marl serve --mode ego`; empty: start one on loopback
    token: str = ""  # the server's token; empty: $FLEET_MARL_TOKEN (or the started server's own)
    task: str = "easy"  # the scenario each episode plays
    ego: str = "random"  # the tenant the model plays: tenant_<i>, an index, or random (drawn from the seed)
    opponents: str = "precision_expert"  # the reference policy of every other tenant
    seeds: int = 64  # the dataset: the first prompt of seeds 0 .. seeds-1 (one row per distinct prompt)
    num_generations: int = 8  # GRPO's group: answers per prompt
    prompts_per_step: int = 2  # prompts in a training step (the batch is prompts_per_step * num_generations)
    max_steps: int = 200  # training steps
    max_completion_length: int = 192  # tokens per answer
    temperature: float = 1.0  # sampling temperature of the rollouts
    learning_rate: float = 1e-6  # AdamW's learning rate
    beta: float = 0.0  # KL coefficient (0: no reference model)
    answer_prefix: str = ""  # text the answer starts with (generation continues it); sent before the completion
    answer_suffix: str = ""  # text appended to the completion before it is sent
    bf16: bool = False  # bfloat16 training (on a GPU)
    cpu: bool = False  # train on the CPU even where a GPU is
    activation_checkpointing: bool = False  # recompute activations in the backward pass (less memory, slower)
    seed: int = 0  # the trainer's seed (sampling, shuffling)
    output_dir: str = "runs/trl_grpo"  # where the trained model and tokenizer are saved
    no_save: bool = False  # do not save the trained model


# --- the server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@contextlib.contextmanager
def local_server(token: str, *options: str, wait_s: float = 120.0) -> Iterator[str]:
    """``fleet-marl serve --mode ego --token TOKEN *options`` on a free port of 127.0.0.1, as its
    own process group; yields its URL once ``/health`` answers, and stops it on exit."""
    exe = Path(sys.executable).parent / "fleet-marl"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fleet_marl.cli"]
    port = _free_port()
    env = {**os.environ, "FLEET_MARL_TOKEN": token}  # not on the command line, where other users could read it
    proc = subprocess.Popen(
        [*cmd, "serve", "--mode", "ego", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"fleet-marl serve exited with {proc.returncode}:\n{proc.stdout.read() if proc.stdout else ''}")
            request = urllib.request.Request(url + "/health", headers={"Authorization": f"Bearer {token}"})
            with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=2) as r:
                if json.load(r).get("status") == "healthy":
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fleet-marl serve did not answer /health within {wait_s:.0f} s")
            time.sleep(0.3)
        yield url
    finally:
        _stop(proc)
        if proc.stdout:
            proc.stdout.close()


# --- the rollout ------------------------------------------------------------------------------


def _messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


class EgoRollout:
    """TRL's ``rollout_func`` over a live ego server.

    ``EgoRollout(url, token, task=..., ego=..., opponents=...)``; :meth:`dataset` builds the
    training prompts from the server (and remembers each prompt's seed); the trainer then calls
    the instance with the prompts of a batch (each repeated ``num_generations`` times) and gets
    ``prompt_ids``, ``completion_ids``, ``logprobs`` (of the sampling distribution) and
    ``env_reward``, the server's reward for each answer. ``history`` keeps every answer played:
    the training step, the seed, the text sent, the reward and the server's
    ``last_action_error``.
    """

    #: seconds a server answer may take (a fresh server compiles the round for a new scenario size once)
    timeout_s = 300.0

    def __init__(self, url: str, token: str | None = None, answer_prefix: str = "", answer_suffix: str = "", **reset_args: Any):
        self.url, self.token = url, token or None
        self.answer_prefix, self.answer_suffix = answer_prefix, answer_suffix
        self.reset_args = reset_args
        self.seed_of: dict[str, int] = {}
        self.history: list[dict[str, Any]] = []

    def client(self):
        """A sync ``FleetEgoClient`` session on the server (use it in a ``with``)."""
        return FleetEgoClient(base_url=self.url, token=self.token, connect_timeout_s=60.0, message_timeout_s=self.timeout_s).sync()

    def dataset(self, seeds: range) -> Dataset:
        """The first prompt of each seed's episode, one row per distinct prompt (conversational)."""
        with self.client() as c:
            for seed in seeds:
                prompt = c.reset(seed=seed, **self.reset_args).observation.prompt
                self.seed_of.setdefault(prompt, seed)
        return Dataset.from_dict({"prompt": [_messages(p) for p in self.seed_of]})

    def play(self, client, seed: int, text: str, prompt: str | None = None):
        """Reset the episode of ``seed`` and play ``text`` as the ego's answer; the step's result."""
        first = client.reset(seed=seed, **self.reset_args)
        if prompt is not None and first.observation.prompt != prompt:
            raise RuntimeError(f"seed {seed}: the server's first prompt is not the dataset's (another task, config or fleet_marl version?)")
        return client.step(FleetEgoAction(text=text))

    def generate(self, trainer, prompts: list[str]) -> tuple[list[list[int]], list[list[int]], list[list[float]]]:
        """Sample one answer per prompt with the trainer's model: prompt ids (the chat template and
        the answer prefix), completion ids (up to and including the first end-of-sequence token)
        and their log-probabilities under the sampling distribution."""
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        prefix = tok(self.answer_prefix, add_special_tokens=False)["input_ids"] if self.answer_prefix else []
        prompt_ids = [list(tok.apply_chat_template(_messages(p), add_generation_prompt=True, return_dict=False)) + prefix for p in prompts]
        width = max(len(ids) for ids in prompt_ids)
        pad = tok.pad_token_id  # TRL sets it (to the end-of-sequence token) where the tokenizer has none
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids], device=model.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids], device=model.device)
        # TRL's own sampling settings (temperature, top_p, top_k, min_p, repetition_penalty, the
        # end-of-sequence ids, max_completion_length, GRPOConfig.generation_kwargs)
        config = copy.deepcopy(trainer.generation_config)
        config.return_dict_in_generate, config.output_scores = True, True
        out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        eos = {config.eos_token_id} if isinstance(config.eos_token_id, int) else set(config.eos_token_id or ())
        completion_ids, logprobs = [], []
        for row, lp in zip(out.sequences[:, width:].tolist(), scores.tolist(), strict=True):
            n = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            completion_ids.append(row[:n])
            logprobs.append(lp[:n])
        return prompt_ids, completion_ids, logprobs

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        texts = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        unknown = [t[:60] for t in texts if t not in self.seed_of]
        if unknown:
            raise ValueError(f"prompts: {unknown[0]!r}...: expected prompts of EgoRollout.dataset (their seeds are known)")
        prompt_ids, completion_ids, logprobs = self.generate(trainer, texts)
        tok = trainer.processing_class
        rewards = []
        with self.client() as c:
            for prompt, ids in zip(texts, completion_ids, strict=True):
                answer = self.answer_prefix + tok.decode(ids, skip_special_tokens=True) + self.answer_suffix
                seed = self.seed_of[prompt]
                result = self.play(c, seed, answer, prompt)
                rewards.append(float(result.reward))
                self.history.append(
                    {
                        "step": trainer.state.global_step,
                        "seed": seed,
                        "text": answer,
                        "reward": rewards[-1],
                        "error": result.observation.last_action_error,
                    }
                )
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "env_reward": rewards}


def env_reward(completions: list, **kwargs: Any) -> list[float]:
    """TRL's reward function: the server's reward of each completion (``EgoRollout``'s ``env_reward``)."""
    return [float(r) for r in kwargs["env_reward"]]


def grpo_config(a: Args, **overrides: Any) -> GRPOConfig:
    """The trainer's config from the script's arguments (``overrides`` replace any field)."""
    settings: dict[str, Any] = {
        "output_dir": a.output_dir,
        "num_generations": a.num_generations,
        "per_device_train_batch_size": a.prompts_per_step * a.num_generations,
        "max_steps": a.max_steps,
        "max_completion_length": a.max_completion_length,
        "temperature": a.temperature,
        "learning_rate": a.learning_rate,
        "beta": a.beta,
        "bf16": a.bf16,
        "use_cpu": a.cpu,
        "activation_checkpointing": a.activation_checkpointing,
        "seed": a.seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
    }
    return GRPOConfig(**{**settings, **overrides})


def make_trainer(model, tokenizer, rollout: EgoRollout, dataset: Dataset, config: GRPOConfig, reward=env_reward) -> GRPOTrainer:
    """``GRPOTrainer`` with ``rollout`` as its ``rollout_func`` and ``reward`` (default: the server's) as its reward."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.x
    tokenizer.padding_side = "left"
    return GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tokenizer, rollout_func=rollout
    )


def step_table(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training step: answers played, the mean and spread of their rewards, valid answers."""
    rows = []
    for step in sorted({h["step"] for h in history}):
        rs = [h for h in history if h["step"] == step]
        r = [h["reward"] for h in rs]
        rows.append(
            {
                "step": step + 1,
                "answers": len(rs),
                "reward": statistics.fmean(r),
                "std": statistics.pstdev(r),
                "valid": sum(h["error"] is None for h in rs) / len(rs),
            }
        )
    return rows


def run(a: Args, url: str, token: str | None, reward=env_reward) -> tuple[EgoRollout, GRPOTrainer]:
    """Train ``a.model`` (a local folder) against the ego server at ``url``; the rollout (its
    ``history``) and the trainer (its ``state.log_history``), the model saved unless ``a.no_save``."""
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16 if a.bf16 else torch.float32)
    rollout = EgoRollout(url, token, a.answer_prefix, a.answer_suffix, task=a.task, ego=a.ego, opponents=a.opponents)
    dataset = rollout.dataset(range(a.seeds))
    trainer = make_trainer(model, tokenizer, rollout, dataset, grpo_config(a), reward)
    trainer.train()
    if not a.no_save:
        trainer.save_model(a.output_dir)
    return rollout, trainer


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python experiments/trl_grpo.py --model PATH\n  python experiments/trl_grpo.py --model PATH --url http://127.0.0.1:8000",
    )
    # each option's help is its field's comment in Args
    comments = dict(re.findall(r"^    (\w+): .*?  # (.*)$", inspect.getsource(Args), re.MULTILINE))
    for f in fields(Args):
        name, help_ = "--" + f.name.replace("_", "-"), comments.get(f.name, "")
        if isinstance(f.default, bool):
            p.add_argument(name, action="store_true", help=help_)
        else:
            p.add_argument(name, type=type(f.default), default=f.default, help=f"{help_} (default: %(default)r)".lstrip())
    return p


def parse_args(argv: list[str] | None = None) -> Args:
    """The script's arguments, checked (argparse's usage error, exit code 2, names the bad one)."""
    p = parser()
    a = Args(**vars(p.parse_args(argv)))
    if not a.model:
        p.error("--model: missing; expected a local model folder (its config, weights and a tokenizer with a chat template)")
    for field, least in (("num_generations", 2), ("prompts_per_step", 1), ("seeds", 1), ("max_steps", 1), ("max_completion_length", 1)):
        if getattr(a, field) < least:
            p.error(f"--{field.replace('_', '-')} = {getattr(a, field)}: expected an integer >= {least}")
    if a.temperature <= 0 or a.learning_rate <= 0 or a.beta < 0:
        bad = "temperature" if a.temperature <= 0 else "learning-rate" if a.learning_rate <= 0 else "beta"
        p.error(f"--{bad} = {getattr(a, bad.replace('-', '_'))}: expected a number > 0 (--beta: >= 0)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    token = a.token or os.environ.get("FLEET_MARL_TOKEN") or None
    if a.url:
        rollout, _ = run(a, a.url, token)
    else:
        token = token or secrets.token_urlsafe(24)
        with local_server(token, "--task", a.task) as url:
            rollout, _ = run(a, url, token)
    print(f"{'step':>5} {'answers':>7} {'reward':>9} {'std':>8} {'valid':>6}")
    for r in step_table(rollout.history):
        print(f"{r['step']:>5} {r['answers']:>7} {r['reward']:>9.4f} {r['std']:>8.4f} {r['valid']:>6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

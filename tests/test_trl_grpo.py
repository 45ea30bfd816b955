"""TRL's ``GRPOTrainer`` trains a tiny causal LM against a live ``fleet-marl serve --mode ego``
(experiments/trl_grpo.py): the model and its tokenizer are built here from a config (no
download, no network), the server runs on loopback with a token, and every reward comes from it.

The model is random, so the answer is scaffolded (``--answer-prefix``/``--answer-suffix``): it
writes only the GPU count of an otherwise fixed JSON action, one token from a vocabulary of
digits, a space and a brace, and the server rewards a legal count by its outcome and charges an
illegal answer (``"9"`` on an 8-GPU cluster, ``"}"``, nothing) the invalid-answer penalty, so a
group's rewards differ."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# no network: the model and its tokenizer are built here, and the hub's clients read these when
# they are imported (below), so they are set first
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

pytest.importorskip("openenv")
pytest.importorskip("trl")

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

pytestmark = pytest.mark.slow

PREFIX = '{"bid": "list", "batch": 8, "precision": "bf16", "request_gpus": '
SPECIAL = ["<pad>", "<unk>", "<eos>", "<user>", "<assistant>"]
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<eos>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"


@pytest.fixture(scope="module")
def grpo():
    path = Path(__file__).resolve().parents[1] / "experiments" / "trl_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_grpo", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("trl_grpo", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """One token a character: digits, space and '}'; every other character is <unk>."""
    vocab = {t: i for i, t in enumerate([*SPECIAL, *"0123456789", " ", "}"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = TEMPLATE
    return fast


def tiny_model(tok: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def train(mod, url: str, token: str, tmp_path: Path, reward=None, steps: int = 3):
    """The script's run on a tiny model saved to a local folder (as ``--model PATH`` loads it)."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    before = model.state_dict()
    argv = ["--model", str(tmp_path / "model"), "--task", "tiny", "--seeds", "4", "--num-generations", "4", "--prompts-per-step", "1"]
    argv += [*f"--max-steps {steps} --max-completion-length 1 --learning-rate 1e-2 --cpu".split(), "--output-dir", str(tmp_path / "out")]
    a = mod.parse_args([*argv, "--answer-prefix", PREFIX, "--answer-suffix", "}"])
    rollout, trainer = mod.run(a, url, token, **({"reward": reward} if reward else {}))
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v.cpu(), before[k])]
    return rollout, trainer, changed


def test_grpo_trainer_learns_from_the_live_servers_rewards(grpo, tmp_path):
    token = "trl-test-token"
    with grpo.local_server(token, "--task", "tiny", "--max-sessions", "4") as url:
        rollout, trainer, changed = train(grpo, url, token, tmp_path / "env")
        assert len(rollout.seed_of) == 2  # the ego drawn from the seed: tenant_0 or tenant_1, one prompt each
        assert (tmp_path / "env" / "out" / "config.json").exists()  # the trained model is saved
        history = rollout.history
        assert len(history) == 3 * 4  # 3 steps of one group of 4 answers, each played on the server
        assert all(h["text"].startswith(PREFIX) and h["text"].endswith("}") for h in history)
        # the rewards TRL logged are the server's, step by step
        logs = [e for e in trainer.state.log_history if "rewards/env_reward/mean" in e]
        assert len(logs) == 3
        for step, (entry, row) in enumerate(zip(logs, grpo.step_table(history), strict=True)):
            rewards = torch.tensor([h["reward"] for h in history if h["step"] == step], dtype=torch.float64)
            assert entry["rewards/env_reward/mean"] == pytest.approx(rewards.mean().item(), abs=1e-6)
            assert entry["reward_std"] == pytest.approx(rewards.std().item(), abs=1e-6)
            assert row["step"] == step + 1 and row["reward"] == pytest.approx(rewards.mean().item())
        # they vary inside a group (legal counts, illegal answers), so the advantages are not zero
        assert all(e["reward_std"] > 0 for e in logs), history
        assert any(h["error"] is None for h in history) and any(h["error"] is not None for h in history)
        assert len({h["reward"] for h in history if h["error"] is None}) > 1, history  # legal answers differ too
        # and they are the server's rewards for those answers: played again, each gets the same one
        with rollout.client() as c:
            for h in history:
                assert rollout.play(c, h["seed"], h["text"]).reward == pytest.approx(h["reward"], abs=1e-9)
        assert changed, "GRPO left every weight as it was"
        # the control: the same run with a constant reward has zero advantages and changes no weight,
        # so the change above came from the server's rewards through the loss
        _, control, unchanged = train(
            grpo, url, token, tmp_path / "control", reward=lambda completions, **kw: [1.0] * len(completions), steps=1
        )
        assert [e["reward_std"] for e in control.state.log_history if "reward_std" in e] == [0.0]
        assert unchanged == []


def test_the_script_names_a_bad_argument(grpo, capsys):
    usage = grpo.parser().format_help()
    assert all(f"--{f.replace('_', '-')}" in usage for f in grpo.Args.__dataclass_fields__)
    assert "GRPO's group: answers per prompt (default: 8)" in usage  # each option's help is its field's comment
    for argv, message in [
        ([], "--model: missing; expected a local model folder"),
        (["--model", "m", "--num-generations", "1"], "--num-generations = 1: expected an integer >= 2"),
        (["--model", "m", "--temperature", "0"], "--temperature = 0.0: expected a number > 0"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            grpo.parse_args(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err

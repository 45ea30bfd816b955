"""The fleet-marl command: estimate and sweep, run in-process and as the installed script."""

import json
import subprocess
import sys

import pytest

from fleet_marl import catalog
from fleet_marl.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_fields(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--mode",
        "train",
        "--gpus",
        "8",
        "--gpu-type",
        "h100-sxm",
        "--batch-size",
        "1",
        "--seq-len",
        "4096",
        "--json",
    )
    assert code == 0
    r = json.loads(out)
    m = catalog.model("llama-3.1-8b")
    assert r["params"] == m.total_params
    b = r["bytes_per_gpu"]
    assert {"total", "weights", "gradients", "master_fp32", "optimizer", "activations"} <= set(b)
    assert b["weights"] == pytest.approx(2 * m.total_params / 8)
    # the peak: gradients and activations are never held together (docs/model.md section 4)
    rest = sum(v for k, v in b.items() if k not in ("total", "gradients", "activations"))
    assert b["total"] == pytest.approx(rest + max(b["gradients"], b["activations"]))
    assert r["fits"] is True and r["tokens_per_s"] > 0


def test_estimate_serve_reports_kv_bytes_per_token(capsys):
    code, out, _ = run(
        capsys,
        "estimate",
        "--model",
        "llama-3.1-70b",
        "--mode",
        "serve",
        "--precision",
        "attention=int4,mlp=int4",
        "--gpus",
        "2",
        "--gpu-type",
        "a100-80gb",
        "--batch-size",
        "8",
        "--json",
    )
    assert code == 0
    r = json.loads(out)
    m = catalog.model("llama-3.1-70b")
    assert r["kv_bytes_per_token"] == 2 * m.layers * m.kv_heads * m.head_dim * 2
    assert set(r["bytes_per_gpu"]) == {"weights", "kv_cache", "total"}
    assert r["numerically_safe"] is True


def test_estimate_reports_oom_and_unsafe_numerics(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-3.1-70b", "--gpus", "1", "--precision", "fp8")
    assert code == 0
    assert "DOES NOT FIT" in out and "numerically UNSAFE: embedding, norm, head" in out


def test_unknown_model_and_gpu_list_valid_keys(capsys):
    code, _, err = run(capsys, "estimate", "--model", "llama-9")
    assert code == 2 and "unknown model 'llama-9'" in err and "llama-3.1-8b" in err
    code, _, err = run(capsys, "estimate", "--model", "gpt2", "--seq-len", "512", "--gpu-type", "v100")
    assert code == 2 and "unknown GPU type 'v100'" in err and "h100-sxm" in err


def test_impossible_combination_says_why(capsys):
    code, _, err = run(capsys, "estimate", "--model", "llama-3.1-8b", "--precision", "fp8", "--gpu-type", "a100-80gb")
    assert code == 2 and "a100-80gb does not support fp8" in err
    code, _, err = run(capsys, "estimate", "--model", "llama-3.1-8b", "--precision", "int4", "--mode", "train")
    assert code == 2 and "weight-only" in err
    code, _, err = run(capsys, "estimate", "--model", "llama-3.1-8b", "--gpus", "0")
    assert code == 2 and "--gpus 0" in err


def test_sweep_quick_writes_table_csv_and_plot(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "sweep",
        "--quick",
        "--models",
        "qwen2.5-0.5b,llama-3.1-8b",
        "--gpu-types",
        "h100-sxm,a100-80gb",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert code == 0
    r = json.loads(out)
    assert r["summary"]["configs_evaluated"] > 1000
    best = {(b["model"], b["gpu_type"]): b for b in r["best"]}
    # FP8 exists on H100 only; the winner never uses an unsafe or unsupported format
    assert "fp8" not in best[("llama-3.1-8b", "a100-80gb")]["precision"]
    for b in r["best"]:
        p = dict(x.split("=") for x in b["precision"].split(","))
        assert p["embedding"] in ("fp32", "bf16") and p["norm"] in ("fp32", "bf16") and p["head"] in ("fp32", "bf16")
    assert (tmp_path / "sweep_train.csv").exists() and (tmp_path / "sweep_train.png").stat().st_size > 0


def test_help_has_examples():
    out = subprocess.run([sys.executable, "-m", "fleet_marl.cli", "estimate", "--help"], capture_output=True, text=True, check=True).stdout
    assert "examples:" in out and "fleet-marl estimate --model" in out
    out = subprocess.run([sys.executable, "-m", "fleet_marl.cli", "--help"], capture_output=True, text=True, check=True).stdout
    assert "estimate" in out and "sweep" in out


def test_make_train_runs_an_existing_subcommand():
    from pathlib import Path

    from fleet_marl.cli import build_parser

    lines = (Path(__file__).resolve().parents[1] / "Makefile").read_text().splitlines()
    recipe = lines[lines.index(next(x for x in lines if x.startswith("train:"))) + 1].split()
    assert recipe[0].endswith("fleet-marl")
    build_parser().parse_args(recipe[1:])  # exits (SystemExit) on an unknown subcommand


def test_a_command_imports_only_its_own_module():
    """The table names each command's module; running ``estimate`` loads the kernel tools, not
    the env (PettingZoo), the grader, the RLlib adapter or OpenEnv."""
    code = (
        "import sys, io, contextlib; from fleet_marl.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['estimate', '--model', 'gpt2', '--seq-len', '512', '--json']) == 0\n"
        "print(','.join(m for m in ('pettingzoo', 'fleet_marl.environment', 'fleet_marl.evaluation', 'fleet_marl.rllib', 'openenv', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"fleet-marl estimate imported {out}"


def test_every_command_has_help_examples_and_a_runner():
    from fleet_marl.cli import COMMANDS, command_module

    for name, (module, help_) in COMMANDS.items():
        mod = command_module(name)
        assert mod.__name__ == module and help_
        assert callable(mod.add_arguments) and callable(mod.run)
        assert "examples:" in mod.EXAMPLES, f"{name}: EXAMPLES has no examples"

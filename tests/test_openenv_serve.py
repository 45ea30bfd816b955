"""``fleet-marl serve`` as a real process: uvicorn on 127.0.0.1 and a free port, checked by
``openenv validate --url`` and driven by the real OpenEnv client (``FleetEnvClient`` over
``websockets``), then stopped with its whole process group."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv")

import fleet_marl
from fleet_marl import policies
from fleet_marl.evaluation import run_episode
from fleet_marl.openenv import FleetEgoAction, FleetEgoClient, RemoteParallelEnv
from tests import servers

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def test_serve_multi_passes_openenv_validate_and_runs_a_policy_remotely():
    proc, url = servers.serve("--mode", "multi", "--task", "tiny", "--max-sessions", "2")
    try:
        openenv_cli = BIN / "openenv"
        assert openenv_cli.exists(), "the openenv extra installs the 'openenv' CLI"
        r = subprocess.run(
            [str(openenv_cli), "validate", "--url", url, "--json", "--timeout", "30"], capture_output=True, text=True, timeout=180
        )
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert report["passed"] is True and report["mode"] == "simulation"
        # the real EnvClient (websockets) under RemoteParallelEnv, a reference policy unchanged
        env = RemoteParallelEnv.connect(url, task="tiny", config={"max_cycles": 6})
        try:
            remote = run_episode(env, policies.make("precision_expert", env), seed=4)
        finally:
            env.close()
        local_env = fleet_marl.parallel_env(task="tiny", max_cycles=6)
        assert remote.welfare == run_episode(local_env, policies.make("precision_expert", local_env), seed=4).welfare
    finally:
        servers.stop(proc)
    assert proc.returncode is not None


def test_serve_ego_with_the_real_client():
    proc, url = servers.serve("--mode", "ego", "--task", "tiny", "--opponents", "fair_share", "--max-invalid-streak", "2")
    try:
        with FleetEgoClient(base_url=url).sync() as client:
            first = client.reset(seed=0)
            assert "You are tenant_0" in first.observation.prompt
            step = client.step(FleetEgoAction(text='```json\n{"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}\n```'))
            assert step.observation.last_action_error is None and step.observation.round == 1
            bad = client.step(FleetEgoAction(text="no"))
            assert bad.observation.last_action_error.startswith("input: no JSON object found")
            assert bad.reward == pytest.approx(bad.observation.metadata["rewards"][bad.observation.metadata["scheme"]] - 1.0)
        # the TRL environment_factory sketch of experiments/llm_agent.py works against it
        import importlib.util

        spec = importlib.util.spec_from_file_location("llm_agent", Path(__file__).resolve().parents[1] / "experiments" / "llm_agent.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules.setdefault("llm_agent", mod)  # dataclasses look their module up
        spec.loader.exec_module(mod)
        mod.FleetTenantEnv.url = url
        tenant = mod.FleetTenantEnv()
        try:
            prompt = tenant.reset(seed=1, task="tiny")
            assert "You are tenant_0" in prompt
            nxt = tenant.act('{"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}')
            assert "Last round: asked 2" in nxt and tenant.total != 0.0
        finally:
            tenant.client.close()
    finally:
        servers.stop(proc)

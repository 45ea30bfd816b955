"""The viewer (docs/viewer.md): a recording's frames are the env's infos, the file round-trips and
a bad one is named, and the page's routes, in ``fleet-marl view`` and in ``fleet-marl serve``, are
read-only, token-protected (the page's own files excepted: they hold no data) and carry a
Content-Security-Policy. The page itself in Chromium: tests/test_viewer_browser.py."""

import json

import numpy as np
import pytest

pytest.importorskip("openenv")
from fastapi.testclient import TestClient

from fleet_marl.cli import main
from fleet_marl.environment import FleetParallelEnv, scheme_rewards
from fleet_marl.errors import UsageError
from fleet_marl.evaluation.recording import FRAME_KEYS, frame, header, read_episode, record_episode, write_episode
from fleet_marl.openenv import make_app
from fleet_marl.openenv.limits import ServerLimits
from fleet_marl.openenv.viewer import CSP, PAGE, make_viewer_app, page_file
from fleet_marl.policies import POLICIES

TOKEN = "viewer-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def episode():
    return record_episode("tiny", "precision_expert", seed=3)


def test_frames_are_the_steps_infos():
    env = FleetParallelEnv(task="easy", compute_all=True)
    policy = POLICIES["precision_expert"](env)
    obs, infos = env.reset(seed=1)
    policy.reset(1)
    prev = frame(env)
    assert prev["round"] == 0 and sum(prev["alloc"]) == 0 and set(prev) == set(FRAME_KEYS)
    degenerate_seen = 0
    while env.agents:
        obs, _, _, _, infos = env.step(policy.act(obs, infos))
        f = json.loads(json.dumps(frame(env)))  # as the page reads it
        for a, info in infos.items():
            i = env.agent_index[a]
            assert f["requested"][i] == info["requested"] and f["alloc"][i] == info["alloc"]
            assert f["utility"][i] == pytest.approx(info["utility"], abs=1e-6)
            for scheme, r in scheme_rewards(info).items():
                assert f["rewards"][scheme][i] == pytest.approx(r, abs=1e-6)
            assert f["starved"][i] == info["starved"] and f["streak"][i] == info["starvation_streak"]
            assert f["throttled"][i] == info["throttled"] and f["oom"][i] == info["oom"] and f["vetoed"][i] == info["vetoed"]
            # the page's "degenerate" event: the fairness count's growth since the previous frame
            grew = f["counts"]["degenerate"][i] - prev["counts"]["degenerate"][i]
            assert grew == int(info["degenerate"])
            degenerate_seen += grew
            assert sum(f["placement"][i]) == info["alloc"]
        assert f["welfare"] == pytest.approx(next(iter(infos.values()))["welfare"], abs=1e-6)
        assert len(f["rack_power_w"]) == env.kernel_static.n_racks and len(f["node_temp_c"]) == env.kernel_static.K
        prev = f
    assert set(env.reward_schemes) == set(prev["rewards"])
    assert env.round == prev["round"] == env.max_cycles
    assert degenerate_seen == int(np.sum(env.fairness.counts["degenerate"]))


def test_recording_round_trips_and_is_reproducible(tmp_path, episode):
    h, frames = episode["header"], episode["frames"]
    assert [f["round"] for f in frames] == list(range(len(frames))) and episode["summary"]["rounds"] == len(frames) - 1
    assert h["scheme"] == h["schemes"][0] and len(h["tenants"]) == len(frames[0]["alloc"])
    path = write_episode(tmp_path / "ep.jsonl", episode)
    assert read_episode(path) == json.loads(json.dumps(episode))
    assert record_episode("tiny", "precision_expert", seed=3) == episode


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["not json"], "line 1: not JSON"),
        ([{"kind": "frame"}], "line 1: expected a header of format"),
        (["HEADER", {"kind": "frame", "round": 0}], "line 2: a frame without live"),
        (["HEADER", {"kind": "nope"}], "line 2: kind = 'nope'"),
        (["HEADER"], "at least one frame"),
    ],
)
def test_a_bad_recording_is_named(tmp_path, episode, lines, message):
    text = [json.dumps(episode["header"]) if x == "HEADER" else x if isinstance(x, str) else json.dumps(x) for x in lines]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(UsageError, match=message):
        read_episode(path)
    with pytest.raises(UsageError, match="no such file"):
        read_episode(tmp_path / "missing.jsonl")


def test_demo_records_and_view_refuses_bad_input(tmp_path, capsys):
    path = tmp_path / "demo.jsonl"
    assert main(["demo", "--task", "tiny", "--seed", "2", "--every", "1000", "--record", str(path)]) == 0
    ep = read_episode(path)
    assert ep["header"]["task"] == "tiny" and ep["header"]["seed"] == 2 and len(ep["frames"]) == ep["summary"]["rounds"] + 1
    assert set(ep["frames"][1]["rewards"]) == set(ep["header"]["schemes"]) and len(ep["header"]["schemes"]) > 1  # compute_all
    assert main(["demo", "--task", "tiny", "--record", str(tmp_path / "demo.txt")]) == 2
    assert "--record" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: no such file" in capsys.readouterr().err
    assert main(["view", "precision_expert", "--task", "nope"]) == 2
    assert "--task 'nope'" in capsys.readouterr().err
    assert main(["view", "no_such_policy", "--task", "tiny", "--port", "0"]) == 2
    assert "--port 0" in capsys.readouterr().err


def _page_checks(client):
    for path, (name, media) in PAGE.items():
        r = client.get(path)  # no token: the page's files hold no data
        assert r.status_code == 200 and r.content == page_file(name) and r.headers["content-type"].startswith(media.split(";")[0])
        assert r.headers["content-security-policy"] == CSP and r.headers["x-content-type-options"] == "nosniff"
    html = page_file("index.html").decode()
    assert "<script>" not in html and " on" not in html.replace(" one", "")  # no inline script or handler: the CSP forbids them
    js = page_file("viewer.js").decode()
    assert "innerHTML" not in js and "eval(" not in js and "http://" not in js.replace("http://www.w3.org/2000/svg", "")


def test_view_app_is_read_only_and_token_protected(episode):
    with TestClient(make_viewer_app(episode, TOKEN)) as client:
        _page_checks(client)
        assert client.get("/viewer", follow_redirects=False).headers["location"] == "/viewer/"
        for path in ("/viewer/api/source", "/viewer/api/episode", "/viewer/api/sessions", "/viewer/../viewer/api/episode"):
            r = client.get(path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert client.get("/viewer/api/episode", headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = client.get("/viewer/api/episode", headers=AUTH)
        assert r.status_code == 200 and r.json() == json.loads(json.dumps(episode)) and r.headers["cache-control"] == "no-store"
        assert client.get("/viewer/api/source", headers=AUTH).json() == {"mode": "replay"}
        assert client.post("/viewer/", content=b"{}").status_code == 401  # only GET of the page skips the token
        for method in ("post", "put", "delete"):
            assert getattr(client, method)("/viewer/api/episode", headers=AUTH).status_code == 405
        assert client.get("/docs", headers=AUTH).status_code == 404 and client.get("/viewer/static/../../app.py").status_code == 401


def test_serve_follows_live_sessions_behind_its_token():
    app = make_app(mode="multi", task="tiny", limits=ServerLimits(max_sessions=4), token=TOKEN)
    with TestClient(app) as client:
        _page_checks(client)
        assert client.get("/viewer/api/sessions").status_code == 401
        assert client.get("/viewer/api/sessions", headers=AUTH).json() == {"sessions": []}
        assert client.get("/viewer/api/source", headers=AUTH).json() == {"mode": "live"}
        assert client.get("/viewer/api/episode", headers=AUTH).status_code == 404
        with client.websocket_connect("/ws", headers=AUTH) as ws:
            ws.send_json({"type": "reset", "data": {"seed": 4}})
            obs = ws.receive_json()["data"]["observation"]
            actions = {a: [0] * 8 for a in obs["agents"]}
            for _ in range(3):
                ws.send_json({"type": "step", "data": {"actions": actions}})
                step = ws.receive_json()["data"]["observation"]
            (live,) = client.get("/viewer/api/sessions", headers=AUTH).json()["sessions"]
            assert live["round"] == 3 and live["task"] == "tiny" and live["mode"] == "multi"
            assert all(live["id"] not in s for s in app.state.sessions.sessions)  # not the id that attaches a socket
            assert client.get(f"/viewer/api/sessions/{live['id']}").status_code == 401
            snap = client.get(f"/viewer/api/sessions/{live['id']}", headers=AUTH).json()
            assert snap["frame"]["round"] == 3 and snap["header"]["task"] == "tiny"
            for a, info in step["infos"].items():
                i = int(a.split("_")[1])
                assert snap["frame"]["alloc"][i] == info["alloc"] and snap["frame"]["requested"][i] == info["requested"]
                for scheme, r in step["reward_schemes"][a].items():
                    assert snap["frame"]["rewards"][scheme][i] == pytest.approx(r, abs=1e-6)
            ws.send_json({"type": "state"})
            assert ws.receive_json()["data"]["round"] == 3  # reading it changed nothing
        assert client.get(f"/viewer/api/sessions/{live['id']}", headers=AUTH).status_code == 404
    with TestClient(make_app(mode="multi", task="tiny", token=TOKEN, viewer=False)) as client:
        assert client.get("/viewer/").status_code == 401
        assert client.get("/viewer/", headers=AUTH).status_code == 404


def test_header_names_the_cluster():
    env = FleetParallelEnv(task="medium", compute_all=True)
    env.reset(seed=0)
    h = header(env, task="medium")
    st = env.kernel_static
    assert len(h["nodes"]) == st.K and h["racks"] == st.n_racks and {n["gpu_type"] for n in h["nodes"]} == set(st.pools)
    assert [t["agent"] for t in h["tenants"]] == env.possible_agents and h["scheme"] == env.config.reward.scheme


def test_serve_follows_an_ego_session_too():
    client = TestClient(make_app(mode="ego", task="tiny", limits=ServerLimits(max_sessions=2)))
    with client, client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 0}})
        ws.receive_json()
        assert client.get("/viewer/api/sessions").json()["sessions"][0]["round"] == 0
        for _ in range(2):
            ws.send_json({"type": "step", "data": {"text": '{"request_gpus": 4, "bid": "high", "batch": 32, "precision": "bf16"}'}})
            assert ws.receive_json()["type"] == "observation"
        (live,) = client.get("/viewer/api/sessions").json()["sessions"]
        assert live["mode"] == "ego" and live["round"] == 2
        snap = client.get(f"/viewer/api/sessions/{live['id']}").json()
        assert snap["frame"]["round"] == 2 and snap["header"]["mode"] == "ego" and 0 < snap["frame"]["requested"][0] <= 4

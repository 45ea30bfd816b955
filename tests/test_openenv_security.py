"""The server against a hostile client, in process (FastAPI's TestClient): no route opens a file a
client names or sends back a file's content, a reset is bounded by the server's limits, sessions
belong to their connection, HTTP bodies are bounded, the bearer token guards every route, and
bad frames get error frames without ending the session. docs/llm_agents.md, "Security"."""

import copy
import json
import time

import pytest

pytest.importorskip("openenv")
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from fleet_marl.config import ConfigError
from fleet_marl.openenv import make_app
from fleet_marl.openenv.limits import LOOPBACK_HOSTS, ServerLimits
from fleet_marl.policies import POLICIES
from fleet_marl.tasks import make_config, scaled, task_dict

SECRET = "fleet-marl-canary-7f3a9c"  # written into every file a test tries to read
TRACE_FIELD = "tenants[0].workload.trace"


@pytest.fixture(scope="module")
def secret_files(tmp_path_factory):
    """A secret file, a symlink to it, and a trace-looking CSV whose first line is the secret."""
    d = tmp_path_factory.mktemp("secrets")
    secret = d / "secret.env"
    secret.write_text(f"TOKEN={SECRET}\nOTHER=1\n")
    link = d / "link.csv"
    link.symlink_to(secret)
    fake = d / "pollux_workload-1.csv"
    fake.write_text(f"{SECRET},time,application\n1,2,3\n")
    return {"secret": secret, "link": link, "fake": fake, "dir": d}


@pytest.fixture(scope="module")
def multi():
    with TestClient(make_app(mode="multi", task="tiny", limits=ServerLimits(max_sessions=4))) as client:
        yield client


@pytest.fixture(scope="module")
def ego():
    with TestClient(make_app(mode="ego", task="tiny", limits=ServerLimits(max_sessions=4))) as client:
        yield client


def call(ws, type_, data=None):
    ws.send_json({"type": type_, **({"data": data} if data is not None else {})})
    return ws.receive_json()


def trace_config(value) -> dict:
    tenants = copy.deepcopy(task_dict("tiny")["tenants"])
    tenants[0]["workload"] = {**tenants[0]["workload"], "pattern": "trace", "trace": value}
    return {"tenants": tenants}


def attempts(files) -> list[str]:
    return [
        "/etc/passwd",
        "/proc/self/environ",
        "/proc/self/cmdline",
        "/proc/self/status",
        "../../../../etc/passwd",
        "..",
        "~/.bashrc",
        str(files["secret"]),
        str(files["link"]),
        str(files["fake"]),
        "fleet_marl/traces/data/pollux_workload-1.csv",
        "./pollux_workload-1.csv",
        "data/LICENSES.md",
        "LICENSES.md",
        "/nonexistent/file.csv",
        "file:///etc/passwd",
        "pollux-1/../../x",
    ]


def assert_no_leak(text: str) -> None:
    assert SECRET not in text
    assert "root:" not in text and "PATH=" not in text and "HOME=" not in text


@pytest.mark.parametrize("view", ["multi", "ego"])
def test_no_trace_path_is_opened_over_the_websocket(request, view, secret_files):
    client = request.getfixturevalue(view)
    with client.websocket_connect("/ws") as ws:
        for value in attempts(secret_files):
            r = call(ws, "reset", {"seed": 0, "config": trace_config(value)})
            text = json.dumps(r)
            assert r["type"] == "error" and r["data"]["code"] == "EXECUTION_ERROR", (value, r)
            assert r["data"]["message"].startswith(f"{TRACE_FIELD} = "), r
            # the same answer whether the path exists or not: nothing tells a file exists
            assert "not a path: a served env opens no file a client names" in r["data"]["message"]
            assert_no_leak(text)
        # the session survives every refusal, and a registry name plays
        ok = call(ws, "reset", {"seed": 0, "config": trace_config("pollux-1")})
        assert ok["type"] == "observation", ok
        if view == "multi":
            assert ok["data"]["observation"]["config"]["tenants"][0]["workload"]["trace"] == "pollux-1"
        ok = call(ws, "reset", {"seed": 0, "config": trace_config("pollux_workload-2.csv")})  # a sample's file name, as tasks use
        assert ok["type"] == "observation", ok


def test_no_trace_path_is_opened_over_http(multi, secret_files):
    for value in attempts(secret_files):
        r = multi.post("/reset", json={"seed": 0, "config": trace_config(value)})
        assert r.status_code == 422 and TRACE_FIELD in r.json()["detail"], (value, r.text)
        assert_no_leak(r.text)
    assert multi.post("/reset", json={"seed": 0, "task": "trace"}).status_code == 200  # the task's own traces are registry names


def test_a_registry_name_missing_here_or_shadowed_by_a_local_file_is_refused(multi, secret_files, monkeypatch, tmp_path):
    monkeypatch.setenv("FLEET_MARL_CACHE", str(tmp_path / "cache"))  # nothing fetched
    with multi.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"config": trace_config("philly")})
        assert r["type"] == "error" and "a trace this server has" in r["data"]["message"]
        # the server's working directory holds a file named like a registry trace (a symlink to a
        # secret): resolve_trace would read it first, so the name is refused, unread
        monkeypatch.chdir(secret_files["dir"])
        r = call(ws, "reset", {"config": trace_config("pollux_workload-1.csv")})
        assert r["type"] == "error" and "a file of that name in the server's working directory" in r["data"]["message"], r
        assert_no_leak(json.dumps(r))


def test_an_unreadable_operator_trace_is_an_internal_error_that_quotes_nothing(secret_files):
    """The operator's own config may name any file; if it is no trace, the client still gets no line of it."""
    app = make_app(mode="multi", task="tiny", config=trace_config(str(secret_files["secret"])))
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"seed": 0})
        assert r["type"] == "error" and r["data"]["code"] == "INTERNAL_ERROR", r
        assert_no_leak(json.dumps(r))
        assert call(ws, "reset", {"seed": 0, "config": {"tenants": task_dict("tiny")["tenants"]}})["type"] == "observation"
        assert client.post("/reset", json={}).status_code == 500 and SECRET not in client.post("/reset", json={}).text


# --- limits on a client's config --------------------------------------------------------------------


def largest(limits: ServerLimits) -> dict:
    """The largest scenario the limits admit, with the costliest reward (sampled Shapley)."""
    d = scaled(limits.max_tenants)
    d["cluster"]["gpu_types"] = ["h100-sxm"] * limits.max_nodes
    for t in d["tenants"]:
        t["max_gpus"] = limits.max_gpus
    return {**d, "max_cycles": limits.max_rounds, "reward": {"scheme": "shapley", "shapley_samples": limits.max_shapley_samples}}


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda c: c["tenants"].append(c["tenants"][0]), "tenants"),
        (lambda c: c["cluster"]["gpu_types"].append("h100-sxm"), "cluster.gpu_types"),
        (lambda c: c.update(max_cycles=c["max_cycles"] + 1), "max_cycles"),
        (lambda c: c["reward"].update(shapley_samples=c["reward"]["shapley_samples"] + 1), "reward.shapley_samples"),
        (lambda c: c["tenants"][3].update(max_gpus=c["tenants"][3]["max_gpus"] + 1), "tenants[3].max_gpus"),
        (lambda c: c["tenants"][1]["workload"].update(rate=2e6), "tenants[1].workload.rate"),
        (lambda c: c.update(tenants=[c["tenants"][0]] * 700), "tenants"),  # within --max-message-bytes and --max-items: named
    ],
)
def test_a_config_over_a_limit_is_refused_by_name(multi, change, field):
    config = largest(ServerLimits())
    change(config)
    with multi.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"config": config})
        assert r["type"] == "error" and r["data"]["message"].startswith(f"{field} = "), r["data"]
        assert "this server's limit" in r["data"]["message"] and len(r["data"]["message"]) < 400
    r = multi.post("/reset", json={"config": config})
    assert r.status_code == 422 and r.json()["detail"].startswith(f"{field} = ")


def test_the_largest_allowed_config_resets_and_steps_in_bounded_time(multi):
    """docs/llm_agents.md states it: the largest scenario the default limits admit (64 tenants,
    64 nodes, 1000 rounds, 64 GPUs each, Shapley over 64 permutations) resets and steps in well
    under a second on one core once compiled; the bound here is 30 s, for a cold, shared CI core."""
    from fleet_marl.openenv.limits import count_items, without_strings

    config = largest(ServerLimits())
    text = json.dumps({"type": "reset", "data": {"seed": 1, "config": config}})
    items = count_items(without_strings(text))
    print(f"the largest allowed config's reset: {items} JSON values, {len(text) / 1000:.0f} KB")  # docs/llm_agents.md quotes it
    assert (
        items * 10 < ServerLimits().max_items and len(text) * 10 < ServerLimits().max_message_bytes
    )  # far inside --max-items and the size
    with multi.websocket_connect("/ws") as ws:
        t0 = time.perf_counter()
        r = call(ws, "reset", {"seed": 1, "config": config})
        assert r["type"] == "observation", r.get("data")
        agents = r["data"]["observation"]["agents"]
        assert len(agents) == 64
        r = call(ws, "step", {"actions": {a: [1, 2, 1, 1, 1, 1, 1, 3] for a in agents}})
        elapsed = time.perf_counter() - t0
        assert r["type"] == "observation" and r["data"]["observation"]["round"] == 1
        assert set(r["data"]["observation"]["reward_schemes"]["tenant_0"]) >= {"shapley"}
    print(f"the largest allowed config: reset and one step in {elapsed:.2f} s")
    assert elapsed < 30.0, f"the largest allowed config took {elapsed:.1f} s to reset and step"


def test_limits_are_the_operators_to_set():
    app = make_app(mode="multi", task="tiny", limits=ServerLimits(max_tenants=1))
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {})  # tiny has 2 tenants: over this operator's limit
        assert (
            r["type"] == "error"
            and r["data"]["message"] == "tenants = '2 tenants': expected at most 1 tenants (this server's limit, --max-tenants)"
        )
    with pytest.raises(ValueError, match="max_rounds = 0"):
        ServerLimits(max_rounds=0)


# --- sessions ---------------------------------------------------------------------------------------


def mcp(client, method, **params):
    return client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).json()


def test_attaching_to_another_connections_session_is_refused_by_default(multi):
    sid = mcp(multi, "openenv/session/create")["result"]["session_id"]
    with multi.websocket_connect(f"/ws?session_id={sid}") as ws:
        r = ws.receive_json()
        assert r["type"] == "error" and r["data"]["code"] == "ATTACH_REFUSED" and "--allow-attach" in r["data"]["message"]
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
    assert mcp(multi, "openenv/session/close", session_id=sid)["result"]["closed"] is True
    assert "error" in mcp(multi, "openenv/session/close", session_id=sid)


def test_with_attach_enabled_one_socket_may_hold_a_session_created_over_http():
    app = make_app(mode="multi", task="tiny", limits=ServerLimits(max_sessions=2, allow_attach=True))
    with TestClient(app) as client:
        sid = mcp(client, "openenv/session/create")["result"]["session_id"]
        with client.websocket_connect(f"/ws?session_id={sid}") as ws:
            assert call(ws, "reset", {"seed": 3})["type"] == "observation"
            with client.websocket_connect(f"/ws?session_id={sid}") as second:  # the session is held now
                assert second.receive_json()["data"]["code"] == "ATTACH_REFUSED"
            assert "error" in mcp(client, "openenv/session/close", session_id=sid)  # nor closed from outside
            assert len(app.state.sessions) == 1  # counted once, not once per route
        assert len(app.state.sessions) == 0


def test_http_sessions_expire_and_never_lock_out_websocket_clients():
    app = make_app(mode="multi", task="tiny", limits=ServerLimits(max_sessions=2, http_session_idle_s=0.5))
    with TestClient(app) as client:
        ids = [mcp(client, "openenv/session/create")["result"]["session_id"] for _ in range(2)]
        assert len(set(ids)) == 2
        # a session created over HTTP that no socket holds locks nobody out: a third create, an
        # HTTP reset and a socket each take the slot of the least recently used one
        third = mcp(client, "openenv/session/create")["result"]["session_id"]
        assert third not in ids and len(app.state.sessions) == 2 and ids[0] not in app.state.sessions.sessions
        assert client.post("/reset", json={}).status_code == 200
        assert len(app.state.sessions) == 1  # the reset's own session closed with its request
        mcp(client, "openenv/session/create")
        with client.websocket_connect("/ws") as ws:
            assert call(ws, "reset", {"seed": 0})["type"] == "observation"
            assert len(app.state.sessions) == 2
            with client.websocket_connect("/ws") as ws2:  # two sockets: no HTTP session left to take
                assert call(ws2, "reset", {"seed": 0})["type"] == "observation"
                assert mcp(client, "openenv/session/create")["error"]["message"].startswith("Server at capacity (2/2 sessions)")
                assert client.post("/reset", json={}).status_code == 503
        mcp(client, "openenv/session/create")
        with client.websocket_connect("/ws") as ws:
            deadline = time.monotonic() + 10
            while len(app.state.sessions) > 1 and time.monotonic() < deadline:
                time.sleep(0.1)  # the reaper closes the other one once idle
            assert len(app.state.sessions) == 1
            with client.websocket_connect("/ws") as ws2:
                assert call(ws2, "reset", {"seed": 1})["type"] == "observation"
                with client.websocket_connect("/ws") as ws3:  # two sockets hold both slots: refused
                    refused = ws3.receive_json()
                    assert refused["data"]["code"] == "CAPACITY_REACHED" and refused["data"]["active_sessions"] == 2
                assert mcp(client, "openenv/session/create")["error"]["message"].startswith("Server at capacity")


# --- HTTP bodies --------------------------------------------------------------------------------------


def test_an_oversized_body_gets_413_unread(multi):
    big = b'{"seed": 0, "episode_id": "' + b"x" * (2 << 20) + b'"}'
    for route in ("/reset", "/step", "/mcp"):
        r = multi.post(route, content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE", route

    def chunks():  # no Content-Length: read up to the limit, then refused
        for _ in range(40):
            yield b"x" * (64 << 10)

    r = multi.post("/reset", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert multi.post("/reset", content=b"{}", headers={"content-length": "abc", "content-type": "application/json"}).status_code == 400
    assert multi.post("/reset", json={"seed": 0}).status_code == 200


# --- the token ----------------------------------------------------------------------------------------


def test_a_token_guards_every_route_and_the_websocket():
    app = make_app(mode="multi", task="tiny", token="s3cret-token")
    good = {"Authorization": "Bearer s3cret-token"}
    with TestClient(app) as client:
        for method, route in (
            ("get", "/health"),
            ("get", "/metadata"),
            ("get", "/schema"),
            ("post", "/reset"),
            ("get", "/state"),
            ("post", "/mcp"),
            ("get", "/openapi.json"),
            ("get", "/docs"),
            ("post", "/fleet_marl/tasks"),
            ("get", "/nope"),
        ):
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": "s3cret-token"},
                {"Authorization": "Basic s3cret-token"},
            ):
                r = getattr(client, method)(route, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (route, headers)
        assert client.get("/health", headers=good).status_code == 200
        assert client.post("/reset", json={"seed": 0}, headers=good).status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            # the handshake is answered 401, no socket opens
            with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect("/ws", headers=headers) as ws:
                ws.receive_json()
            assert refused.value.status_code == 401
        with client.websocket_connect("/ws", headers=good) as ws:
            assert call(ws, "reset", {"seed": 0})["type"] == "observation"


def test_serve_warns_without_a_token_on_a_public_host_and_reads_the_token_variable(monkeypatch):
    from fleet_marl.cli import build_parser
    from fleet_marl.openenv.command import app_kwargs, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    args = build_parser().parse_args(["serve", "--max-tenants", "8", "--allow-attach"])
    monkeypatch.setenv("FLEET_MARL_TOKEN", "from-env")
    kw = app_kwargs(args)
    assert kw["token"] == "from-env" and kw["limits"].max_tenants == 8 and kw["limits"].allow_attach
    args = build_parser().parse_args(["serve", "--token", "from-flag"])
    assert app_kwargs(args)["token"] == "from-flag"


@pytest.mark.parametrize("host, token, warned", [("0.0.0.0", None, True), ("0.0.0.0", "t0k", False), ("127.0.0.1", None, False)])
def test_serve_warns_at_start_on_a_public_host_with_no_token(monkeypatch, capsys, host, token, warned):
    import uvicorn

    from fleet_marl.cli import build_parser
    from fleet_marl.openenv import command

    ran = {}

    class FakeServer:
        def __init__(self, config):
            ran["config"] = config

        def run(self):
            ran["ran"] = True

    class FakeUvicorn:
        Server = FakeServer

    monkeypatch.delenv("FLEET_MARL_TOKEN", raising=False)
    monkeypatch.setattr(command, "_import_server", lambda: (make_app, FakeUvicorn))
    # a real uvicorn.Config is built: keep it from pointing uvicorn's log handlers at this test's captured stderr
    monkeypatch.setattr(uvicorn.Config, "configure_logging", lambda self: None)
    base = ["serve", "--host", host, "--max-message-bytes", "1000", *(["--token", token] if token else [])]
    if warned:  # no token on a public address: refused unless the operator says --insecure
        assert command.run(build_parser().parse_args(base)) == 2
        assert "error: --host 0.0.0.0: serving beyond this machine with no token" in capsys.readouterr().err and not ran
        base.append("--insecure")
    assert command.run(build_parser().parse_args(base)) == 0 and ran["ran"]
    err = capsys.readouterr().err
    assert ("warning: serving on 0.0.0.0 with no token (--insecure)" in err) == warned
    config = ran["config"]
    assert isinstance(config, uvicorn.Config) and config.host == host
    assert config.ws_max_size == 4000 and config.ws_per_message_deflate is False and config.server_header is False
    assert config.h11_max_incomplete_event_size == ServerLimits().max_header_bytes
    assert config.app.state.limits.allowed_hosts == (("*",) if host == "0.0.0.0" else LOOPBACK_HOSTS)
    with TestClient(config.app, base_url=f"http://{'127.0.0.1' if host == '127.0.0.1' else 'example.org'}:8000") as client:
        assert client.get("/health").status_code == (401 if token else 200)


# --- errors as documented -----------------------------------------------------------------------------


def test_bad_frames_get_error_frames_and_the_session_lives(multi):
    with multi.websocket_connect("/ws") as ws:
        assert call(ws, "reset", {"seed": 2})["type"] == "observation"
        frames = [
            ("bytes", b"\x00\xff binary"),
            ("text", "[1, 2, 3]"),
            ("text", '"a string"'),
            ("text", "42"),
            ("text", "null"),
            ("text", "[" * 100_000 + "]" * 100_000),
            ("text", '{"type": "reset", "data": ' + "[" * 500 + "]" * 500 + "}"),
            ("text", "{not json"),
            ("text", '{"type": "reset", "data": {"seed": ' + "9" * 100_000 + "}}"),
            ("text", json.dumps({"type": "x" * 100_000})),
            ("text", json.dumps({"type": "reset", "data": [1]})),
            ("text", json.dumps({"type": "step", "data": "x" * 100_000})),
            ("text", json.dumps({"type": "reset", "data": {"task": "y" * 100_000}})),
            ("text", json.dumps({"type": "reset", "data": {"seed": -1}})),
            ("text", json.dumps({"type": "reset", "data": {"self": 1}})),
            ("text", json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}})),
            ("text", json.dumps({"type": "step", "data": {"actions": {"tenant_0": "z" * 100_000}}})),
            ("text", json.dumps({"type": "reset", "data": {"config": {"cluster": {"rack_power_cap_w": "w" * 100_000}}}})),
        ]
        for kind, payload in frames:
            ws.send_bytes(payload) if kind == "bytes" else ws.send_text(payload)
            r = ws.receive_json()
            assert r["type"] == "error" and r["data"]["code"] != "INTERNAL_ERROR", (payload[:80], r)
            assert len(json.dumps(r)) < 2000, (payload[:80], len(json.dumps(r)))
        # the episode goes on where it was
        assert call(ws, "state")["data"]["round"] == 0
        assert (
            call(ws, "step", {"actions": {"tenant_0": [1, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]}})["data"][
                "observation"
            ]["round"]
            == 1
        )


def test_http_argument_errors_are_4xx_naming_the_field(multi):
    cases = [
        ({"seed": -3}, "seed"),
        ({"task": "nope"}, "task = 'nope'"),
        ({"config": {"max_cycles": 0}}, "max_cycles = 0"),
        ({"config": {"nope": 1}}, "nope = 1"),
        ({"index": 99}, "index = 99"),
        ({"bogus": 1}, "unknown argument 'bogus'"),
        ({"config": "x" * 100_000}, "config = 'xxx"),
        ({"episode_id": "e" * 300}, "episode_id"),
    ]
    for body, needle in cases:
        r = multi.post("/reset", json=body)
        assert 400 <= r.status_code < 500, (body if len(str(body)) < 100 else "long", r.status_code, r.text[:300])
        assert needle in json.dumps(r.json()), (needle, r.text[:300])
        assert len(r.text) < 2000
    r = multi.post("/step", json={"action": {"actions": {"tenant_0": [0] * 8}}})
    assert r.status_code == 422 and "reset" in r.json()["detail"]
    r = multi.post("/step", json={"action": {"nope": "q" * 100_000}})
    assert r.status_code == 422 and len(r.text) < 2000
    r = multi.post("/mcp", content=b"[" * 100_000, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE"  # counted before anything parses it
    r = multi.post("/mcp", content=b"[" * 30 + b"]" * 30, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nested" in r.json()["detail"]
    r = multi.post("/mcp", content=b"[" * 5, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["error"]["code"] == -32600


def test_openenv_routes_that_reach_an_env_are_replaced_and_the_rest_dropped(monkeypatch):
    monkeypatch.setenv("ENABLE_WEB_INTERFACE", "true")  # OpenEnv's web UI would build envs of its own: never mounted
    app = make_app(mode="multi", task="tiny")
    paths = [getattr(r, "path", None) for r in app.router.routes]
    assert {"/ws", "/reset", "/step", "/state", "/mcp", "/health", "/schema", "/metadata"} <= set(paths)
    assert "/harness" not in paths and "/web" not in paths and paths.count("/mcp") == 1 and paths.count("/ws") == 1
    with TestClient(app) as client:
        assert client.get("/web").status_code == 404


# --- found by attacking the server (docs/llm_agents.md, Security) ------------------------------------


@pytest.mark.timeout(120)
def test_millions_of_queued_jobs_cost_no_more_than_a_few(multi):
    """A long round and the highest allowed rate queue ~3e10 jobs; the fairness report counted
    them one by one (hours of CPU per state frame). It adds them per arrival round now."""
    config = {
        "cluster": {"round_seconds": 1e5},
        "tenants": [{**t, "workload": {**t["workload"], "rate": 1e6}} for t in task_dict("tiny")["tenants"]],
        "max_cycles": 3,
    }
    with multi.websocket_connect("/ws") as ws:
        assert call(ws, "reset", {"seed": 0, "config": config})["type"] == "observation"
        for _ in range(3):
            r = call(ws, "step", {"actions": {"tenant_0": [1, 2, 1, 1, 1, 1, 1, 3], "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]}})
            assert r["type"] == "observation"
        assert r["data"]["done"] is True
        assert call(ws, "state")["type"] == "state"


def test_p99_wait_adds_queued_jobs_as_the_job_by_job_count_did():
    import numpy as np

    from fleet_marl.fairness.report import p99_wait_s as _p99_wait_s

    rng = np.random.default_rng(0)
    for _ in range(50):
        now = int(rng.integers(2, 30))
        waits = rng.integers(0, 5, now + 1).astype(float)
        queued = rng.integers(0, 4, now).astype(float)
        w = waits.copy()  # the oracle: one job at a time
        for r in range(now):
            for _ in range(int(queued[r])):
                w[now - r - 1] += 1.0
        keys = np.flatnonzero(w)
        want = 0.0 if keys.size == 0 else float(keys[np.searchsorted(np.cumsum(w[keys]), 0.99 * w[keys].sum())] * 60.0)
        assert _p99_wait_s(waits, now, np.zeros(0), queued, 60.0) == want


def test_a_trace_of_the_wrong_kind_or_a_tiny_speedup_is_a_named_client_error(multi):
    with multi.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"config": trace_config("azure-conv-2023")})  # a request trace for a trainer
        assert r["data"]["code"] == "EXECUTION_ERROR" and r["data"]["message"].startswith(
            f"{TRACE_FIELD} = 'azure-conv-2023': expected a jobs trace"
        )
        config = trace_config("pollux-1")
        config["tenants"][0]["workload"]["trace_speedup"] = 1e-300  # every job lands past the episode
        assert call(ws, "reset", {"seed": 0, "config": config})["type"] == "observation"


def test_the_task_api_and_unknown_routes_answer_4xx_without_echoing_the_request(multi):
    r = multi.post("/fleet_marl/task", json={"split": "x", "index": 0})
    assert r.status_code == 422 and r.json()["detail"] == "split = 'x': expected 'train'"
    r = multi.get("/" + "a" * 8000 + "/splits")
    assert r.status_code == 404 and len(r.text) < 400
    r = multi.post("/reset", json={"k" * 3000: 1})
    assert r.status_code == 422 and len(r.text) < 600
    r = multi.post("/reset", json={"config": {"cluster": {"k" * 3000: 1}}})
    assert r.status_code == 422 and len(r.text) < 800


@pytest.mark.parametrize(
    "text, error",
    [
        ('{"request_gpus": ' + "[" * 30_000, "input: invalid JSON: nested too deeply"),
        (
            '{"request_gpus": ' + "9" * 5000 + ', "bid": "list", "batch": 8, "precision": "bf16"}',
            "input: invalid JSON: a number too long to convert",
        ),
        ('{"' + "k" * 60_000 + '": 1}', "unknown field; expected only request_gpus, bid, batch, precision"),
        (
            '{"request_gpus": 1, "bid": "list", "batch": 8, "precision": {"' + "p" * 60_000 + '": "bf16"}}',
            "unknown field; expected only embed",
        ),
    ],
)
def test_a_hostile_ego_answer_is_an_invalid_answer_with_its_penalty(ego, text, error):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0})
        r = call(ws, "step", {"text": text})
        assert r["type"] == "observation", r
        o = r["data"]["observation"]
        assert error in o["last_action_error"] and len(o["last_action_error"]) < 300 and o["invalid_streak"] == 1
        assert len(json.dumps(r)) < 60_000


ANSWER = '{"request_gpus": 2, "bid": "list", "batch": 8, "precision": "bf16"}'


@pytest.mark.parametrize("opponents", ["planner", "hindsight"])
def test_an_opponent_over_the_work_limit_is_refused_by_its_cost_and_changes_nothing(ego, opponents):
    """Every opponent is bounded by its cost (cost.work: the round's and the opponent's own
    ``work``), not its name: the searches are refused on the largest scenario, before the session changes."""
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0})
        first = call(ws, "step", {"text": ANSWER})["data"]["observation"]
        r = call(ws, "reset", {"seed": 1, "opponents": opponents, "config": largest(ServerLimits())})
        assert r["type"] == "error" and r["data"]["message"].startswith(f"opponents = '{opponents}': expected opponents whose step fits")
        assert "--max-work" in r["data"]["message"]
        r = call(ws, "reset", {"seed": 1, "ego": 5})  # tiny has 2 tenants
        assert r["type"] == "error" and r["data"]["message"].startswith("reset: ego = 5")
        assert call(ws, "state")["data"]["round"] == first["round"] == 1  # the episode is where it was
        assert call(ws, "step", {"text": ANSWER})["data"]["observation"]["round"] == 2
        assert call(ws, "reset", {"seed": 1, "opponents": opponents, "config": {**scaled(16), "max_cycles": 5}})["type"] == "observation"


def costliest(opponents: str, limits: ServerLimits) -> dict:
    """The config of the costliest step (``cost.work``) that ``limits`` admit with ``opponents``:
    a grid of sizes up to every limit, every tenant a server (the costliest kind) or easy's mix."""
    from fleet_marl.openenv.cost import work
    from tests.test_experiments import _script

    server_costs = _script("server_costs")
    best, best_work = None, -1
    for t in (8, 16, 32, limits.max_tenants):
        for n in (4, 16, limits.max_nodes):
            for g in (8, 16, 32, limits.max_gpus):
                for servers in (False, True):
                    d = server_costs.scenario(t, n, g, servers)  # the sizes experiments/server_costs.py times
                    c = {
                        **d,
                        "max_cycles": limits.max_rounds,
                        "reward": {"scheme": "shapley", "shapley_samples": limits.max_shapley_samples},
                        "compute_all": True,
                    }
                    cfg, _ = make_config("easy", None, **copy.deepcopy(c))
                    w = work(cfg, opponents).step
                    if best_work < w <= limits.max_work:
                        best, best_work = c, w
    assert best is not None
    return best


@pytest.mark.slow
@pytest.mark.parametrize("opponents", sorted(POLICIES))
def test_the_costliest_config_the_limits_allow_resets_and_steps_in_bounded_time(opponents):
    """For every opponent, the costliest scenario the default limits admit: its reset and two
    steps (the first fills the opponent's tables) take seconds, not the 10-40 s an unbounded
    search did. docs/llm_agents.md quotes the times (``pytest -s`` prints them)."""
    limits = ServerLimits()
    config = costliest(opponents, limits)
    with TestClient(make_app(mode="ego", task="easy", limits=limits)) as client, client.websocket_connect("/ws") as ws:
        t0 = time.perf_counter()
        r = call(ws, "reset", {"seed": 0, "opponents": opponents, "config": config})
        reset_s = time.perf_counter() - t0
        assert r["type"] == "observation", r
        steps = []
        for _ in range(2):
            t0 = time.perf_counter()
            assert call(ws, "step", {"text": ANSWER})["type"] == "observation"
            steps.append(time.perf_counter() - t0)
    n = len(config["tenants"])
    print(
        f"{opponents}: {n} tenants, {len(config['cluster']['gpu_types'])} nodes, max_gpus {config['tenants'][0]['max_gpus']}: "
        f"reset {reset_s:.2f} s, steps {steps[0]:.2f} s and {steps[1]:.2f} s"
    )
    assert reset_s + sum(steps) < 30.0, (reset_s, steps)  # a cold, shared CI machine; here a few seconds at most


def test_numbers_no_float_holds_are_named_client_errors(multi):
    """A round so long that its expected arrivals overflow the 64-bit draw, and an integer too
    large for a float in a float field: both named, neither an internal error."""
    tenants = copy.deepcopy(task_dict("tiny")["tenants"])
    for t in tenants:
        t["workload"]["rate"] = 1e6
    with multi.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"config": {"tenants": tenants, "cluster": {"round_seconds": 1e20, "restart_seconds": 0}}})
        assert r["type"] == "error" and r["data"]["code"] == "EXECUTION_ERROR"
        assert (
            r["data"]["message"].startswith("tenants[0].workload.rate = 1000000.0: expected at most")
            and "arrivals a round" in r["data"]["message"]
        )
        r = call(ws, "reset", {"config": {"cluster": {"rack_power_cap_w": 10**400}}})
        assert (
            r["data"]["code"] == "EXECUTION_ERROR"
            and r["data"]["message"].startswith("cluster.rack_power_cap_w = 1000")
            and "(401 characters): expected a finite number" in r["data"]["message"]
        )
    r = multi.post("/reset", content=b'{"config": {"mixed_weight": ' + b"9" * 400 + b"}}", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "mixed_weight" in r.text


def test_a_bug_s_text_is_internal_and_an_overlong_json_rpc_id_is_refused(multi):
    from fleet_marl.openenv.server import public_error

    assert public_error(IndexError("index 1 is out of bounds for axis 0 with size 1"))[1] == "INTERNAL_ERROR"
    assert public_error(KeyError("tenant_3"))[1] == "INTERNAL_ERROR"
    assert public_error(ConfigError("x", 1, "2")) == ("x = 1: expected 2", "EXECUTION_ERROR")
    # a library's text (numpy's, Python's) never reaches the client: the project's generic message
    for exc in (
        ValueError("setting an array element with a sequence. The requested array has an inhomogeneous shape"),
        TypeError("'<' not supported between instances of 'str' and 'int'"),
    ):
        text, code = public_error(exc)
        assert code == "EXECUTION_ERROR" and text.startswith("invalid request:") and str(exc) not in text
    r = multi.post("/mcp", json={"jsonrpc": "2.0", "id": "i" * 200_000, "method": "tools/list", "params": {}})
    assert r.status_code == 200 and len(r.text) < 300 and r.json()["error"]["message"] == "id: expected at most 200 characters"


def test_a_task_s_own_trace_name_on_a_tenant_of_the_wrong_kind_is_named(multi):
    config = {"tenants": copy.deepcopy(task_dict("trace")["tenants"])}
    trainer = next(i for i, t in enumerate(config["tenants"]) if t["kind"] == "train")
    server = next(i for i, t in enumerate(config["tenants"]) if t["kind"] == "serve")
    config["tenants"][server]["workload"]["trace"] = config["tenants"][trainer]["workload"]["trace"]  # a jobs trace for a server
    r = multi.post("/reset", json={"task": "trace", "config": config})
    assert r.status_code == 422 and r.json()["detail"].startswith(
        f"tenants[{server}].workload.trace = 'pollux_workload-1.csv': expected a requests trace"
    )


def test_a_bad_limit_on_the_command_line_is_named_by_its_option(capsys):
    from fleet_marl.cli import build_parser
    from fleet_marl.openenv import command

    assert command.run(build_parser().parse_args(["serve", "--max-rounds", "0"])) == 2
    assert "error: --max-rounds = 0: expected a finite number > 0" in capsys.readouterr().err
    assert command.run(build_parser().parse_args(["serve", "--max-planner-work", "150000"])) == 2
    assert "error: --max-planner-work: replaced by --max-work" in capsys.readouterr().err


# --- the LOW items of the third attack: each class closed -------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "reset", "data": {"config": {"\\ud800": 1}}}',
        '{"type": "reset", "data": {"\\udfff": 1}}',
        '{"type": "step", "data": {"actions": {"\\ud800": [1, 2, 1, 1, 1, 1, 1, 3]}}}',
        '{"type": "reset", "data": {"task": "easy\\ud800"}}',
    ],
)
def test_a_lone_surrogate_is_an_error_frame_and_the_session_lives(multi, frame):
    with multi.websocket_connect("/ws") as ws:
        assert call(ws, "reset", {"seed": 0})["type"] == "observation"
        ws.send_text(frame)
        r = ws.receive_json()
        assert r["type"] == "error" and r["data"]["code"] == "INVALID_JSON" and "lone UTF-16 surrogate" in r["data"]["message"]
        assert call(ws, "state")["data"]["round"] == 0  # nothing ran
        assert call(ws, "step", {"actions": {a: [1, 2, 1, 1, 1, 1, 1, 3] for a in ("tenant_0", "tenant_1")}})["type"] == "observation"


def test_a_lone_surrogate_in_an_ego_answer_does_not_run_the_step(ego):
    with ego.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0})
        # a lone surrogate in the message itself: refused before anything runs
        ws.send_text('{"type": "step", "data": {"text": "{\\"request_gpus\\": 2} \\ud800"}}')
        r = ws.receive_json()
        assert r["type"] == "error" and "nothing was run" in r["data"]["message"]
        assert call(ws, "state")["data"]["round"] == 0  # the step did not run: no penalty, no round
        r = call(ws, "step", {"text": ANSWER})
        assert r["type"] == "observation" and r["data"]["observation"]["round"] == 1 and r["data"]["observation"]["invalid_actions"] == 0
        # one escaped inside the model's answer (valid text): an invalid answer, the step runs and says so
        r = call(ws, "step", {"text": '{"request_gpus": 2, "bid": "list\\ud800", "batch": 8, "precision": "bf16"}'})
        o = r["data"]["observation"]
        assert r["type"] == "observation" and o["round"] == 2 and o["invalid_actions"] == 1 and o["last_action_error"]


@pytest.mark.parametrize("action", [[[1, 2], [3]], [[1] * 8, [2] * 7], [1, [2, 3], 1, 1, 1, 1, 1, 3]])
def test_a_ragged_action_is_an_action_error_naming_the_agent(multi, action):
    with multi.websocket_connect("/ws") as ws:
        call(ws, "reset", {"seed": 0})
        r = call(ws, "step", {"actions": {"tenant_0": action, "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]}})
        assert r["type"] == "error", r
        message = r["data"]["message"]
        assert message.startswith("tenant_0: action") or r["data"]["code"] == "VALIDATION_ERROR", r
        assert "inhomogeneous" not in message and "setting an array element" not in message
    import fleet_marl
    from fleet_marl.environment import ActionError

    env = fleet_marl.parallel_env(task="tiny")
    env.reset(seed=0)
    with pytest.raises(ActionError, match=r"^tenant_0: action = .*expected an integer array of shape \(8,\)"):
        env.step({"tenant_0": action, "tenant_1": [1, 2, 1, 1, 1, 1, 1, 3]})
    assert env.round == 0


def test_host_and_origin_are_checked():
    """A loopback server answers only loopback names (DNS rebinding), and /ws refuses a browser
    page of another origin (cross-site WebSocket hijacking); both allow-lists are configurable."""
    limits = ServerLimits(allowed_hosts=LOOPBACK_HOSTS, allowed_origins=("http://app.example",))
    with TestClient(make_app(mode="multi", task="tiny", limits=limits), base_url="http://127.0.0.1:8000") as client:
        assert client.get("/health").status_code == 200
        assert client.get("/health", headers={"host": "localhost:8000"}).status_code == 200
        assert client.get("/health", headers={"host": "[::1]:8000"}).status_code == 200
        bad = client.get("/health", headers={"host": "rebound.attacker.example:8000"})
        assert bad.status_code == 400 and bad.json()["code"] == "BAD_HOST"
        with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect("ws://rebound.attacker.example/ws"):
            pass
        assert denied.value.status_code == 400
        for origin, ok in [
            ("http://evil.example", False),
            ("http://127.0.0.1:8000", True),
            ("http://app.example", True),
            ("http://127.0.0.1:9999", False),
            ("null", False),
        ]:
            if ok:
                with client.websocket_connect("ws://127.0.0.1:8000/ws", headers={"origin": origin}) as ws:
                    assert call(ws, "reset", {"seed": 0})["type"] == "observation"
            else:
                with (
                    pytest.raises(WebSocketDenialResponse) as denied,
                    client.websocket_connect("ws://127.0.0.1:8000/ws", headers={"origin": origin}),
                ):
                    pass
                assert denied.value.status_code == 403 and denied.value.json()["code"] == "BAD_ORIGIN"
        with client.websocket_connect("ws://127.0.0.1:8000/ws") as ws:  # no Origin: not a browser
            assert call(ws, "reset", {"seed": 0})["type"] == "observation"


def test_a_tasks_own_trace_name_is_read_only_from_the_registry(secret_files, monkeypatch):
    """A file in the server's working directory named like the trace task's own sample is never
    opened: the reset is refused, naming the file's place, and quotes nothing of it."""
    monkeypatch.chdir(secret_files["dir"])  # holds pollux_workload-1.csv, whose first line is the secret
    with TestClient(make_app(mode="multi", task="tiny")) as client, client.websocket_connect("/ws") as ws:
        r = call(ws, "reset", {"task": "trace"})
        assert r["type"] == "error" and "working directory" in r["data"]["message"] and SECRET not in json.dumps(r)
    monkeypatch.chdir(secret_files["dir"].parent)
    with TestClient(make_app(mode="multi", task="tiny")) as client, client.websocket_connect("/ws") as ws:
        assert call(ws, "reset", {"task": "trace"})["type"] == "observation"


def test_an_expired_http_session_cannot_be_attached_before_the_reaper_runs():
    import asyncio

    from fleet_marl.openenv.sessions import SessionTable

    async def run():
        table = SessionTable(lambda: None, ServerLimits(http_session_idle_s=5.0, allow_attach=True))

        class Env:
            def close(self):
                pass

        s = await table.open("http")
        s.env = Env()
        s.last_active -= 10.0  # idle past its limit; no reaper in this table
        with pytest.raises(LookupError):
            await table.attach(s.id)
        assert len(table) == 0

    asyncio.run(run())


def test_the_docker_image_installs_pinned_packages_from_one_index_and_needs_a_token():
    """The image installs every package pinned (docker/requirements.txt, 'make docker-lock') from
    PyPI alone with --no-deps, and its server starts on 0.0.0.0 only with a token or an explicit
    FLEET_MARL_INSECURE (``fleet-marl serve`` refuses otherwise: the serve tests above)."""
    import re
    from importlib.metadata import requires
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = Path(__file__).resolve().parents[1]
    docker = (root / "Dockerfile").read_text()
    installs = [line for line in docker.replace("\\\n", " ").splitlines() if "pip install" in line]
    assert installs and all(
        part.count("--index-url https://pypi.org/simple") == 1 and "--no-deps" in part
        for line in installs
        for part in line.split("&&")
        if "pip install" in part
    )
    assert "extra-index-url" not in docker and "download.pytorch.org" not in docker
    pins = [line for line in (root / "docker" / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+!\-]+", line) for line in pins), pins
    pinned = {canonicalize_name(line.split("==")[0]) for line in pins}
    for text in requires("fleet-marl") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": "openenv"}):
            assert canonicalize_name(req.name) in pinned, f"{req.name} is not pinned in docker/requirements.txt"
    assert "${FLEET_MARL_INSECURE:+--insecure}" in docker and "--host 0.0.0.0" in docker

"""The viewer's page in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium; ``make browser`` installs them, ``.ci/run`` calls it): ``fleet-marl view`` replays a
recording and ``fleet-marl serve`` follows a live session behind its token; the DOM shows each
round's grants as the recording (or the session's infos) says, and a screenshot of each is saved
to ``$FLEET_MARL_ARTIFACTS`` (default ``build/artifacts/``): ``viewer.png``, ``viewer-live.png``."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("selenium")
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from fleet_marl.evaluation.recording import read_episode
from fleet_marl.openenv import RemoteParallelEnv
from fleet_marl.policies import POLICIES
from tests import servers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "browser-test-token"
CHROMIUM = ("chromium", "chromedriver")


def artifacts() -> Path:
    out = Path(os.environ.get("FLEET_MARL_ARTIFACTS") or ROOT / "build" / "artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser():
    missing = [b for b in CHROMIUM if shutil.which(b) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: install Debian's chromium and chromium-driver (make browser; docs/viewer.md)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1300"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


#: What the page shows, read in one go (the page may redraw between two separate reads).
SHOWN = """
const rows = [...document.querySelectorAll('#tenants tbody tr')];
const gpus = {};
document.querySelectorAll('#cluster rect.gpu[data-tenant]').forEach((r) => { gpus[r.dataset.tenant] = (gpus[r.dataset.tenant] || 0) + 1; });
const scheme = arguments[0];
return {
  round: document.getElementById('round').dataset.round,
  granted: Object.fromEntries(rows.map((r) => [r.dataset.agent, Number(r.querySelector('td.granted').textContent)])),
  gpus: gpus,
  rewards: scheme ? rows.map((r) => Number(r.querySelector(`td.reward[data-scheme="${scheme}"]`).textContent)) : null,
};
"""


def shown(driver, scheme: str | None = None) -> dict:
    s = driver.execute_script(SHOWN, scheme)
    s["round"] = int(s["round"]) if s["round"] else None
    return s


def _wait_round(driver, k: int) -> dict:
    WebDriverWait(driver, 30).until(lambda d: shown(d)["round"] == k, message=f"the page did not reach round {k}")
    return shown(driver)


def _drawn(s: dict, n_tenants: int) -> list[int]:
    return [s["gpus"].get(str(t), 0) for t in range(n_tenants)]


def test_view_replays_a_recording_round_by_round(browser, tmp_path):
    path = tmp_path / "easy.jsonl"
    subprocess.run(
        [sys.executable, "-m", "fleet_marl.cli", "demo", "--task", "easy", "--seed", "1", "--every", "1000", "--record", str(path)],
        check=True,
        capture_output=True,
    )
    ep = read_episode(path)
    agents = [t["agent"] for t in ep["header"]["tenants"]]
    port = servers.free_port()
    proc = servers.start("view", str(path), "--token", TOKEN, ready_path="/viewer/", port=port)
    try:
        browser.get(f"http://127.0.0.1:{port}/viewer/")  # no token: the page asks for it
        WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "token-box").is_displayed())
        assert shown(browser)["round"] is None
        browser.get(f"http://127.0.0.1:{port}/viewer/#token={TOKEN}")
        _wait_round(browser, 0)
        assert "token" not in browser.current_url  # the page takes the token out of the address bar
        for k in range(1, 13):
            browser.find_element(By.ID, "next").click()
            _wait_round(browser, k)
            f, scheme = ep["frames"][k], ep["header"]["scheme"]
            s = shown(browser, scheme)
            assert s["granted"] == dict(zip(agents, f["alloc"], strict=True)), f"round {k}"
            assert _drawn(s, len(agents)) == f["alloc"], f"round {k}"
            assert s["rewards"] == pytest.approx(f["rewards"][scheme], abs=6e-4)
        browser.find_element(By.ID, "play").click()  # plays on from round 12
        WebDriverWait(browser, 30).until(lambda d: shown(d)["round"] >= 20)
        browser.find_element(By.ID, "play").click()
        s = shown(browser)
        assert s["granted"] == dict(zip(agents, ep["frames"][s["round"]]["alloc"], strict=True))
        browser.find_element(By.ID, "last").click()
        _wait_round(browser, len(ep["frames"]) - 1)
        browser.find_element(By.ID, "first").click()
        _wait_round(browser, 0)
        for _ in range(7):
            browser.find_element(By.ID, "next").click()
        _wait_round(browser, 7)
        assert browser.find_element(By.ID, "error").is_displayed() is False
        assert browser.save_screenshot(str(artifacts() / "viewer.png"))
    finally:
        servers.stop(proc)


def test_serve_page_follows_a_live_session(browser):
    port = servers.free_port()
    proc = servers.start("serve", "--token", TOKEN, "--task", "medium", ready_path="/viewer/", port=port)
    url = f"http://127.0.0.1:{port}"
    env = RemoteParallelEnv.connect(url, token=TOKEN, task="medium")
    try:
        policy = POLICIES["planner"](env)
        obs, infos = env.reset(seed=2)
        policy.reset(2)
        for _ in range(3):
            obs, _, _, _, infos = env.step(policy.act(obs, infos))
        browser.get(f"{url}/viewer/#token={TOKEN}")
        s = _wait_round(browser, 3)
        assert s["granted"] == {a: int(info["alloc"]) for a, info in infos.items()}
        for _ in range(4):
            obs, _, _, _, infos = env.step(policy.act(obs, infos))
        s = _wait_round(browser, 7)  # it follows the session
        assert s["granted"] == {a: int(info["alloc"]) for a, info in infos.items()}
        assert _drawn(s, len(env.possible_agents)) == [int(infos[a]["alloc"]) for a in env.possible_agents]
        assert browser.save_screenshot(str(artifacts() / "viewer-live.png"))
    finally:
        env.close()
        servers.stop(proc)

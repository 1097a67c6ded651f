"""The web inspector in a real browser: Debian's chromium, headless, driven
by selenium through Debian's chromedriver (tools/test.sh installs both).

The review job runs on the local runner with a SQLite journal (the
``agent:`` section of ``$FLINK_CONF_DIR/config.yaml``); one callback and one
approval are registered in the same store, as the engine would; then
``flink-agents ui`` serves it as a subprocess and the test looks at the page
as a person would. Screenshots under the test's tmp dir, and, with
``FLINK_AGENTS_UPDATE_SCREENSHOTS=1``, as ``docs/images/inspector-runs.png``
and ``inspector-run.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.stores.callbacks import CallbackRef
from flink_agents.stores.sqlite_store import SQLiteJournalStore

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
HOSTILE = "<img src=x onerror=alert(1)>"



def _need_chromium() -> None:
    """Skip without Debian's chromium and chromedriver; under ``CI=true``
    (whose set-up installs them) fail instead."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    reason = "Debian's chromium and chromium-driver are not installed (tools/test.sh installs them)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _cli(*args: str, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flink_agents.cli.main", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _journal(tmp_path: Path) -> Path:
    """The review job's journal, with a callback and an approval pending."""
    conf = tmp_path / "conf"
    conf.mkdir()
    journal = tmp_path / "journal.db"
    (conf / "config.yaml").write_text(
        f"agent:\n  journal.store: sqlite\n  journal.sqlite.path: {json.dumps(str(journal))}\n")
    env = {**os.environ, "FLINK_CONF_DIR": str(conf), "PYTHONPATH": str(REPO_ROOT)}
    done = _cli("run", "review-analysis", "--runner", "local", "--output", str(tmp_path / "out.jsonl"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    store = SQLiteJournalStore(journal)
    now_ms = int(time.time() * 1000)
    store.register(CallbackRef("claims", '"C01"', 0, "claim@0", 0), "c" * 32, "approve refund", now_ms,
                   now_ms + 600_000)
    store.register(CallbackRef("claims", '"C02"', 0, "refund@0", 0), "a" * 32, "approval", now_ms, now_ms + 600_000,
                   details=json.dumps({"tool": "refund", "tool_call_id": "call_1", "model": "m",
                                       "arguments": {"order": HOSTILE}}))
    store.close()
    return journal


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1500"):
        options.add_argument(arg)
    # An explicit driver and binary: selenium-manager is never asked to download one.
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def _wait(condition: Any, what: str, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _post(url: str, body: Dict[str, Any], headers: Dict[str, str]) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    """Keep a screenshot under the test's tmp dir; with
    ``FLINK_AGENTS_UPDATE_SCREENSHOTS=1`` also as docs/images/<name> (the
    docs' pictures are renewed on purpose, not by every test run)."""
    shot = tmp_path / name
    assert driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000, "an empty screenshot"
    if os.environ.get("FLINK_AGENTS_UPDATE_SCREENSHOTS") == "1":
        images = REPO_ROOT / "docs" / "images"
        images.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, images / name)


def test_a_person_sees_runs_a_timeline_and_a_pending_callback(tmp_path: Path) -> None:
    _need_chromium()
    from selenium.webdriver.common.by import By

    journal = _journal(tmp_path)
    listed: List[Dict[str, Any]] = [json.loads(line) for line in _cli(
        "runs", "list", "--journal", str(journal), "--json", "--limit", "500").stdout.splitlines()]
    assert len(listed) == 60
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("FLINK_AGENTS_UI_TOKEN", None)
    server = subprocess.Popen([sys.executable, "-m", "flink_agents.cli.main", "ui", "--journal", str(journal),
                               "--port", "0"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    driver = None
    try:
        line = server.stdout.readline()
        assert line.startswith("flink-agents ui: http://127.0.0.1:"), line + server.stderr.read()
        url = line.split(" ", 2)[2].strip()
        base, token = url.split("/?token=")

        # Controls without the token, or from another origin, are refused.
        pause = {"action": "pause", "journal_id": listed[0]["job"], "key": listed[0]["key"], "seq": None}
        assert _post(f"{base}/api/controls", pause, {}) == 401
        assert _post(f"{base}/api/approvals/{'a' * 32}", {"approve": True}, {}) == 401

        driver = _browser()
        driver.get(url)
        _wait(lambda: driver.current_url == f"{base}/", "the redirect that drops the token from the address")
        rows = _wait(lambda: driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr"), "the runs table")
        assert len(rows) == len(listed)
        assert driver.find_element(By.ID, "runs-count").text == f"{len(listed)} runs"
        first = rows[0].find_elements(By.TAG_NAME, "td")
        assert [first[0].text, first[1].text, first[3].text] == [listed[0]["job"], listed[0]["key"], "finished (ok)"]

        pending = _wait(lambda: driver.find_elements(By.CSS_SELECTOR, "#callbacks tbody tr"), "pending callbacks")
        assert sorted(r.find_elements(By.TAG_NAME, "td")[5].text for r in pending) == ["approval", "approve refund"]
        assert all(r.find_elements(By.TAG_NAME, "td")[0].text.startswith("[callback ") for r in pending)
        assert "c" * 32 not in driver.page_source
        approval = _wait(lambda: driver.find_elements(By.CSS_SELECTOR, "#approvals tbody tr"), "the approval")
        assert HOSTILE in approval[0].text  # shown as text, never as markup:
        assert driver.find_elements(By.CSS_SELECTOR, "#approvals img") == []
        _screenshot(driver, tmp_path, "inspector-runs.png")

        # The run with a tool round: its timeline shows its steps, model calls and tool call.
        tooled = next(r for r in listed if r["tool_calls"] > 0)
        index = listed.index(tooled)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", rows[index])
        rows[index].click()
        _wait(lambda: driver.find_element(By.ID, "run").is_displayed(), "the run panel")
        title = _wait(lambda: driver.find_element(By.ID, "run-title").text, "the run title")
        assert title == f"{tooled['job']} · key {tooled['key']} · #{tooled['seq']}"
        labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#timeline .bar-label")]
        assert labels[0] == "run (ok)"
        assert sum(label.startswith("chat ") for label in labels) == tooled["model_calls"]
        assert sum(label.startswith("tool ") for label in labels) == tooled["tool_calls"]
        assert any(label.startswith("_chat_model_action@") for label in labels)
        said = [e.get_attribute("class") for e in driver.find_elements(By.CSS_SELECTOR, "#conversation li")]
        assert "msg role-request" in said and "msg role-assistant" in said and "msg role-tool" in said
        driver.execute_script("window.scrollTo(0, 0)")
        _screenshot(driver, tmp_path, "inspector-run.png")

        # The session cookie is HttpOnly and SameSite=Strict; even replayed by hand, it works from the page's
        # own origin only.
        cookie = driver.get_cookie("flink_agents_ui")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        forged = {"Cookie": f"flink_agents_ui={cookie['value']}", "Origin": "http://evil.example"}
        assert _post(f"{base}/api/controls", pause, forged) == 403

        # Pause from the page: a control request lands in the store.
        driver.find_element(By.CSS_SELECTOR, "#run-controls button[data-action=pause]").click()
        _wait(lambda: "pause requested" in driver.find_element(By.ID, "status").text, "the pause confirmation")
        from flink_agents.inspection.control import list_controls

        (requested,) = list_controls(str(journal))
        assert (requested["action"], requested["key"], requested["requested_by"]) == ("pause", tooled["key"], "ui")
    finally:
        if driver is not None:
            driver.quit()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert server.returncode == 0
    rest = server.stdout.read() + server.stderr.read()
    assert token not in rest  # printed once, in the URL line, and nowhere else

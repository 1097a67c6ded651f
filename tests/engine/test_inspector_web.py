"""The web inspector's API (``flink_agents.inspection.web``) over the real
SQLite journal of ``tests/support/inspection_journal`` plus one approval
waiting (registered through the store, as the engine does), served by
aiohttp's test server on 127.0.0.1: what it answers, and whom it refuses."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from flink_agents.inspection.web import STATIC_DIR, make_app
from flink_agents.inspection.web_auth import COOKIE, UiAuth, check_ui_bind
from flink_agents.stores.callbacks import CallbackRef
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support.inspection_journal import build_journal

TOKEN = "test-token-0123456789"
APPROVAL_ID = "a" * 32
HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    path = tmp_path_factory.mktemp("inspector") / "journal.db"
    info = build_journal(path)
    store = SQLiteJournalStore(path)
    now_ms = int(time.time() * 1000)
    store.register(CallbackRef("claims", '"A01"', 0, "refund@0", 0), APPROVAL_ID, "approval", now_ms,
                   now_ms + 600_000, details=json.dumps({"tool": "refund", "tool_call_id": "call_1", "model": "m",
                                                         "arguments": {"order": HOSTILE}}))
    store.close()
    return {"path": str(path), **info}


Call = Tuple[int, Dict[str, str], Any]


def _serve(journal: str, *requests: Tuple[str, str, Dict[str, Any]]) -> list:
    """Each ``(method, path, options)`` against one fresh server, in order:
    ``(status, headers, JSON or text)``. ``options``: ``headers``, ``json``,
    ``data``, ``cookie`` (send the session cookie the token gives);
    ``{origin}`` in a header value is the server's own origin."""

    async def go() -> list:
        server = TestServer(make_app(journal, UiAuth(TOKEN, "file")), host="127.0.0.1")
        await server.start_server()
        answers = []
        try:
            async with ClientSession() as session:
                async with session.get(server.make_url(f"/?token={TOKEN}"), allow_redirects=False) as login:
                    cookie = login.cookies[COOKIE].value
                for method, path, options in requests:
                    own_origin = str(server.make_url("/")).rstrip("/")
                    headers = {k: v.replace("{origin}", own_origin) for k, v in options.get("headers", {}).items()}
                    if options.get("cookie"):
                        headers["Cookie"] = f"{COOKIE}={cookie}"
                    async with ClientSession() as fresh:  # no cookie jar: only what the case sends
                        async with fresh.request(method, server.make_url(path), headers=headers,
                                                 json=options.get("json"), data=options.get("data"),
                                                 allow_redirects=False) as response:
                            body = await response.text()
                            try:
                                body = json.loads(body)
                            except ValueError:
                                pass
                            answers.append((response.status, dict(response.headers), body))
        finally:
            await server.close()
        return answers

    return asyncio.run(go())


def test_the_token_gives_a_strict_cookie_and_every_api_call_needs_it(journal):
    async def login() -> Tuple[int, str, str]:
        server = TestServer(make_app(journal["path"], UiAuth(TOKEN, "file")), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession() as session:
                async with session.get(server.make_url("/?token=wrong"), allow_redirects=False) as wrong:
                    assert wrong.status == 401 and COOKIE not in wrong.cookies
                async with session.get(server.make_url(f"/?token={TOKEN}"), allow_redirects=False) as right:
                    return right.status, right.headers["Location"], right.headers["Set-Cookie"]
        finally:
            await server.close()

    status, location, set_cookie = asyncio.run(login())
    assert (status, location) == (303, "/")
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and TOKEN not in set_cookie

    answers = _serve(journal["path"], ("GET", "/api/runs", {}), ("GET", "/", {}),
                     ("GET", "/api/runs", {"headers": {"Authorization": "Bearer nope"}}),
                     ("GET", "/api/runs", {"cookie": True}), ("GET", "/", {"cookie": True}),
                     ("GET", "/api/runs", {"headers": {"Authorization": f"Bearer {TOKEN}"}}),
                     ("GET", "/static/app.js", {}),
                     ("GET", "/api/runs", {"cookie": True, "headers": {"Host": "evil.example"}}))
    assert [a[0] for a in answers] == [401, 401, 401, 200, 200, 200, 200, 403]
    for _, headers, _ in answers:
        csp = headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert "<script src=\"/static/app.js\"" in answers[4][2]


def test_posts_from_another_origin_are_refused(journal):
    from flink_agents.inspection.control import list_controls

    pause = {"action": "pause", "journal_id": "claims", "key": "C01", "seq": None}
    before = list_controls(journal["path"])
    answers = _serve(journal["path"],
                     ("POST", "/api/controls", {"json": pause}),  # no credentials
                     ("POST", "/api/controls", {"json": pause, "cookie": True}),  # cookie, no Origin: refused
                     ("POST", "/api/controls", {"json": pause, "cookie": True,
                                                "headers": {"Origin": "http://evil.example"}}),
                     ("POST", "/api/controls", {"json": pause, "cookie": True,
                                                "headers": {"Sec-Fetch-Site": "cross-site"}}),
                     ("POST", "/api/controls", {"data": "action=pause", "headers": {
                         "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded"}}))
    assert [a[0] for a in answers] == [401, 403, 403, 403, 415]
    assert list_controls(journal["path"]) == before  # none of them wrote anything


def test_runs_run_detail_and_callbacks(journal):
    runs, parked, future, bad, detail, missing, callbacks = _serve(
        journal["path"], ("GET", "/api/runs", {"cookie": True}), ("GET", "/api/runs?state=parked", {"cookie": True}),
        ("GET", "/api/runs?since=2999-01-01", {"cookie": True}), ("GET", "/api/runs?since=yesterday", {"cookie": True}),
        ("GET", "/api/runs/reviews/B01/0", {"cookie": True}), ("GET", "/api/runs/reviews/B01/7", {"cookie": True}),
        ("GET", "/api/callbacks?state=pending", {"cookie": True}))
    assert [(r["job"], r["key"], r["state"]) for r in runs[2]["runs"]] == [
        ("reviews", "B01", "finished"), ("claims", "C02", "failed"), ("claims", "C01", "parked")]
    assert [r["key"] for r in parked[2]["runs"]] == ["C01"] and future[2]["runs"] == []
    assert bad[0] == 400 and "yesterday" in bad[2]["error"]
    assert missing[0] == 404

    run = detail[2]["run"]
    kinds = [(bar["kind"], bar["label"]) for bar in run["timeline"]]
    assert kinds[0] == ("run", "run (ok)")
    assert [label for kind, label in kinds if kind == "model"] == ["chat reviewer", "chat reviewer"]
    assert ("tool", "tool notify_shipping_manager") in kinds
    assert kinds.index(("step", "_chat_model_action@1")) < kinds.index(("model", "chat reviewer"))
    assert sum(bar["tokens"] for bar in run["timeline"] if bar["kind"] == "model") == run["tokens"] > 0
    assert all(bar["offset_ms"] >= 0 and bar["duration_ms"] >= 0 for bar in run["timeline"])
    assert [m["role"] for m in run["conversation"]] == ["request", "assistant", "tool", "assistant", "output"]
    assert run["conversation"][1]["tool_calls"][0]["name"] == "notify_shipping_manager"
    assert "secret" not in json.dumps(run) and "postgresql://u:***@h/db" in run["conversation"][3]["content"]

    pending = callbacks[2]["callbacks"]
    (callback_id,) = journal["callback_ids"]
    assert {c["purpose"] for c in pending} == {"approve refund", "approval"}
    assert callback_id not in json.dumps(callbacks[2]) and all(c["callback"].startswith("[callback ") for c in pending)


def test_approvals_and_controls_through_the_api(journal):
    pytest.importorskip("flink_agents.inspection.approvals", reason="the approvals module is not on this branch")
    pytest.importorskip("flink_agents.inspection.control", reason="the run-control module is not on this branch")
    listed, bad_action, retry_without_seq, foreign, paused, controls, decided, again, after = _serve(
        journal["path"], ("GET", "/api/approvals", {"cookie": True}),
        ("POST", "/api/controls", {"json": {"action": "explode", "key": "C01"},
                                   "headers": {"Authorization": f"Bearer {TOKEN}"}}),
        ("POST", "/api/controls", {"json": {"action": "retry", "key": "C01", "journal_id": "claims", "seq": None},
                                   "headers": {"Authorization": f"Bearer {TOKEN}"}}),
        ("POST", "/api/controls", {"json": {"action": "pause", "key": "C01", "journal_id": "claims", "seq": None},
                                   "cookie": True, "headers": {"Sec-Fetch-Site": "same-origin",
                                                               "Origin": "http://127.0.0.1:1"}}),
        ("POST", "/api/controls", {"json": {"action": "pause", "key": "C01", "journal_id": "claims", "seq": None},
                                   "cookie": True, "headers": {"Origin": "{origin}"}}),
        ("GET", "/api/controls?job=claims", {"cookie": True}),
        ("POST", f"/api/approvals/{APPROVAL_ID}", {"json": {"approve": False, "reason": "not this one"},
                                                   "cookie": True, "headers": {"Sec-Fetch-Site": "same-origin"}}),
        ("POST", f"/api/approvals/{APPROVAL_ID}", {"json": {"approve": True, "reason": ""},
                                                   "headers": {"Authorization": f"Bearer {TOKEN}"}}),
        ("GET", "/api/approvals?state=rejected", {"cookie": True}))
    (approval,) = listed[2]["approvals"]
    assert approval["tool"] == "refund" and approval["arguments"] == {"order": HOSTILE}
    assert bad_action[0] == 400 and "action must be one of" in bad_action[2]["error"]
    assert retry_without_seq[0] == 400 and "seq" in retry_without_seq[2]["error"]
    assert foreign[0] == 403  # Origin decides over Sec-Fetch-Site: another port is another origin
    assert paused[0] == 200 and paused[2]["control"]["state"] == "pending"
    assert (paused[2]["control"]["action"], paused[2]["control"]["requested_by"]) == ("pause", "ui")
    assert decided[0] == 200 and decided[2] == {"outcome": "accepted"}
    assert again[2] == {"outcome": "finished"}  # first decision wins
    assert [(a["state"], a["reason"]) for a in after[2]["approvals"]] == [("rejected", "not this one")]
    assert [(c["control_id"], c["key"], c["action"]) for c in controls[2]["controls"]][-1] == (
        paused[2]["control"]["control_id"], "C01", "pause")


def test_a_missing_control_module_answers_501(journal, monkeypatch):
    monkeypatch.setitem(sys.modules, "flink_agents.inspection.control", None)  # as if not installed
    (answer,) = _serve(journal["path"], ("POST", "/api/controls", {
        "json": {"action": "pause", "key": "C01", "journal_id": "claims", "seq": None},
        "headers": {"Authorization": f"Bearer {TOKEN}"}}))
    assert answer[0] == 501 and "flink_agents.inspection.control" in answer[2]["error"]


def test_binding_beyond_loopback_needs_a_chosen_token(tmp_path, monkeypatch):
    monkeypatch.delenv("FLINK_AGENTS_UI_TOKEN", raising=False)
    generated = UiAuth.load()
    assert generated.source == "generated" and len(generated.token) >= 40
    check_ui_bind("127.0.0.1", generated)
    with pytest.raises(ValueError, match="--token-file"):
        check_ui_bind("0.0.0.0", generated)
    token_file = tmp_path / "token"
    token_file.write_text("chosen-token\n")
    token_file.chmod(0o600)
    chosen = UiAuth.load(str(token_file))
    assert (chosen.token, chosen.source) == ("chosen-token", "file") and "chosen-token" not in repr(chosen)
    check_ui_bind("0.0.0.0", chosen)
    monkeypatch.setenv("FLINK_AGENTS_UI_TOKEN", "from-env")
    assert UiAuth.load().source == "environment"
    from flink_agents.cli.main import main

    monkeypatch.delenv("FLINK_AGENTS_UI_TOKEN")
    with pytest.raises(SystemExit, match="generated token"):
        main(["ui", "--journal", str(tmp_path / "x.db"), "--host", "0.0.0.0"])


def test_the_page_ships_in_the_wheel_and_renders_data_as_text_only():
    import re

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["flink_agents.inspection"]
    files = sorted(p.relative_to(STATIC_DIR.parent) for p in STATIC_DIR.iterdir())
    assert [str(f) for f in files] == ["static/app.css", "static/app.js", "static/index.html"]
    assert all(any(f.match(g) for g in globs) for f in files)
    script = (STATIC_DIR / "app.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
    page = (STATIC_DIR / "index.html").read_text()
    assert "<script>" not in page and " style=" not in page and "http" not in page.replace("http-equiv", "")

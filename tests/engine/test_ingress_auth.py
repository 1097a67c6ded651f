"""Authentication of the callback ingress, on a real ingress on 127.0.0.1
over the real stores: a bearer token (401 without it, the callback stays
pending), signed URLs (a tampered, unsigned or expired one is refused), the
refusal to listen beyond loopback without either, and ``flink-agents
callbacks serve`` taking the token from a file or the environment without
ever printing it."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.ingress import CallbackIngress, IngressAuth, IngressLimits
from flink_agents.stores.callbacks import PENDING, RESOLVED, CallbackRef
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support.journal_stores import journal, store  # noqa: F401 (fixtures)
from tests.support.serve_command import serve_command

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cr3t-bearer-token-for-the-carrier"
KEY = "url-signing-key-shared-by-job-and-ingress"


def _post(url: str, body: bytes = b"{}", headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, Any], Any]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def _resolve_url(base_url: str, record) -> str:
    return f"{base_url}/callbacks/{record.callback_id}/resolve/{record.resolve_token}"




def _register(store, deadline_ms: int = 4_000_000_000_000, seq: int = 0):
    return store.register(CallbackRef("job", "k", seq, "wait@0", 0), f"callback-{seq:04d}-" + "y" * 20,
                          "approval", 1_700_000_000_000, deadline_ms)


# -- the bearer token ----------------------------------------------------------------


def test_without_the_bearer_token_a_post_is_401_and_the_callback_stays_pending(store) -> None:
    record = _register(store)
    with CallbackIngress(store, port=0, auth=IngressAuth(bearer_token=TOKEN)) as ingress:
        url = _resolve_url(ingress.base_url, record)
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):
            status, answer_headers, answer = _post(url, b'{"decision": "forged"}', headers)
            assert (status, answer) == (401, {"error": "authentication required"}), headers
            assert answer_headers["WWW-Authenticate"].startswith("Bearer")
            assert store.get_callback(record.callback_id).state == PENDING

        status, _, answer = _post(url, b"ok", {"Authorization": f"Bearer {TOKEN}"})
        assert (status, answer) == (202, {"callback_id": record.callback_id, "state": "resolved"})
    assert (store.get_callback(record.callback_id).state, store.get_callback(record.callback_id).body) == (
        RESOLVED, b"ok")


def test_a_post_without_the_token_is_refused_before_its_body_is_sent(store) -> None:
    record = _register(store)
    with CallbackIngress(store, port=0, auth=IngressAuth(bearer_token=TOKEN)) as ingress, \
            socket.create_connection(("127.0.0.1", ingress.port), 10) as sock:
        sock.sendall(f"POST /callbacks/{record.callback_id}/resolve/{record.resolve_token} HTTP/1.1\r\n"
                     "Host: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 401 ")
    assert store.get_callback(record.callback_id).state == PENDING


# -- signed URLs ---------------------------------------------------------------------


def test_a_tampered_unsigned_or_expired_signed_url_is_refused(store) -> None:
    from flink_agents.stores.capabilities import signed_url

    now_s = 1_800_000_000.0
    live = _register(store, deadline_ms=int(now_s * 1000) + 60_000, seq=0)
    overdue = _register(store, deadline_ms=int(now_s * 1000) - 1_000, seq=1)
    with CallbackIngress(store, port=0, clock=lambda: now_s, auth=IngressAuth(signing_key=KEY)) as ingress:
        good = signed_url(_resolve_url(ingress.base_url, live), KEY, live.deadline_ms)
        unsigned, _, query = good.partition("?")
        exp = query.split("&")[0].split("=")[1]
        refused = {
            unsigned: "the URL is not signed",
            good[:-2] + ("AA" if not good.endswith("AA") else "BB"): "the URL's signature does not match",
            good.replace(f"exp={exp}", f"exp={int(exp) + 86_400}"): "the URL's signature does not match",
            signed_url(_resolve_url(ingress.base_url, live), "another key", live.deadline_ms):
                "the URL's signature does not match",
            signed_url(_resolve_url(ingress.base_url, overdue), KEY, overdue.deadline_ms): "the URL has expired",
        }
        for url, error in refused.items():
            assert _post(url)[::2] == (403, {"error": error}), url
        assert store.get_callback(live.callback_id).state == PENDING
        assert store.get_callback(overdue.callback_id).state == PENDING

        assert _post(good, b"ok")[0] == 202
    assert store.get_callback(live.callback_id).state == RESOLVED


def try_signed(resolve_url: str) -> List[int]:
    """The run's signed URL as handed out, unsigned, and re-signed by
    someone without the key."""
    unsigned = resolve_url.partition("?")[0]
    forged = resolve_url.rpartition("&sig=")[0] + "&sig=" + "A" * 43
    return [_post(url)[0] for url in (unsigned, forged, resolve_url)]


async def _await_signed(event: InputEvent, ctx: Any) -> None:
    cb = await ctx.create_callback("approval", 30)
    statuses = await ctx.durable_execute_async(try_signed, cb.resolve_url)
    ctx.send_event(OutputEvent(output={"statuses": statuses, "url": cb.resolve_url, "body": await cb}))


class SignedAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_action("wait", [InputEvent], _await_signed)


def test_a_job_signs_its_urls_with_the_key_the_ingress_checks(journal, store, tmp_path: Path) -> None:
    key_file = tmp_path / "signing.key"
    key_file.write_text(KEY + "\n")
    with CallbackIngress(store, port=0, auth=IngressAuth.from_config(
            {"callbacks.ingress.signing_key_file": str(key_file)}, environ={})) as ingress:
        env = AgentsExecutionEnvironment.get_execution_environment(**journal, **{
            "callbacks.base_url": ingress.base_url, "callbacks.poll_interval_ms": 10,
            "callbacks.signing_key_file": str(key_file),
        })
        collected = env.from_list([{"key": "k", "value": {}}]).apply(SignedAgent()).to_list()
        env.execute()
    (output,) = [value for record in collected for value in record.values()]
    assert output["statuses"] == [403, 403, 202]
    assert "?exp=" in output["url"] and "&sig=" in output["url"] and KEY not in output["url"]
    assert output["body"] == "{}"


# -- binding beyond loopback ---------------------------------------------------------


def test_an_ingress_beyond_loopback_needs_authentication_or_an_explicit_flag(tmp_path: Path) -> None:
    store = SQLiteJournalStore(tmp_path / "journal.db")
    try:
        with pytest.raises(ValueError, match="refusing to serve callbacks on 0.0.0.0 without authentication"):
            CallbackIngress(store, host="0.0.0.0", port=0)
        for auth in (IngressAuth(bearer_token=TOKEN), IngressAuth(signing_key=KEY),
                     IngressAuth(allow_unauthenticated=True)):
            with CallbackIngress(store, host="0.0.0.0", port=0, auth=auth) as ingress:
                assert ingress.port > 0
        for loopback in ("127.0.0.1", "localhost", "::1"):
            CallbackIngress(store, host=loopback, port=0)  # no error: built, not started
    finally:
        store.close()


def test_the_auth_options_are_callbacks_ingress_keys_and_never_show_their_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    token_file.chmod(0o600)
    config = {"callbacks.ingress.auth_token_file": str(token_file),
              "callbacks.ingress.allow_unauthenticated": "false", "callbacks.ingress.max_connections": "9"}
    auth = IngressAuth.from_config(config, environ={"FLINK_AGENTS_CALLBACK_SIGNING_KEY": KEY})
    assert (auth.bearer_token, auth.signing_key, auth.allow_unauthenticated) == (TOKEN, KEY, False)
    assert TOKEN not in repr(auth) and KEY not in repr(auth)
    assert IngressLimits.from_config(config) == IngressLimits(max_connections=9)  # the auth keys are known
    assert IngressAuth.from_config({}, environ={"FLINK_AGENTS_CALLBACK_AUTH_TOKEN": TOKEN}).bearer_token == TOKEN
    token_file.chmod(0o644)
    with caplog.at_level(logging.WARNING, "flink_agents.stores.capabilities"):
        IngressAuth.from_config(config, environ={})
    assert "can be read by other users (mode 644)" in caplog.text and TOKEN not in caplog.text
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="callbacks.ingress.auth_token_file"):
        IngressAuth.from_config({"callbacks.ingress.auth_token_file": str(empty)}, environ={})


# -- the command ---------------------------------------------------------------------


def test_callbacks_serve_beyond_loopback_without_authentication_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.cli.main", "callbacks", "serve", "--host", "0.0.0.0", "--port", "0",
         "--sqlite-path", str(path), "--create"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
        env={k: v for k, v in os.environ.items() if not k.startswith("FLINK_AGENTS_CALLBACK_")},
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "refusing to serve callbacks on 0.0.0.0 without authentication" in done.stderr
    assert "--auth-token-file" in done.stderr


@pytest.mark.parametrize("source", ["file", "env"])
def test_callbacks_serve_takes_the_bearer_token_from_a_file_or_the_environment_and_never_prints_it(
    tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path)
    record = _register(store)
    arguments = ["--sqlite-path", str(path)]
    if source == "file":
        (tmp_path / "token").write_text(TOKEN + "\n")
        arguments += ["--auth-token-file", str(tmp_path / "token")]
    else:
        monkeypatch.setenv("FLINK_AGENTS_CALLBACK_AUTH_TOKEN", TOKEN)
    try:
        with serve_command(*arguments) as (process, match):
            base = f"http://127.0.0.1:{match.group(1)}"
            assert _post(_resolve_url(base, record))[0] == 401
            assert store.get_callback(record.callback_id).state == PENDING
            assert _post(_resolve_url(base, record), b"ok", {"Authorization": f"Bearer {TOKEN}"})[0] == 202
            process.terminate()
            assert process.wait(timeout=5) == 0
            printed = process.stdout.read().decode() + process.stderr.read().decode()
            assert "authentication: bearer token" in printed
            assert TOKEN not in printed and TOKEN not in " ".join(process.args)
    finally:
        store.close()

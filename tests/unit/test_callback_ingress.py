"""The callback ingress over real HTTP on 127.0.0.1: status codes, the stored
bytes, the body limit, late completions, store failures, durability before
the 202, and the ``flink-agents callbacks serve`` command."""

from __future__ import annotations

import http.client
import json
import logging
import secrets
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flink_agents.ingress import CallbackIngress, make_app
from flink_agents.stores.callbacks import PENDING, REJECTED, RESOLVED, TIMED_OUT, CallbackRef
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support.serve_command import serve_command

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
NOW_S = 1_700_000_000.25  # the ingress clock in these tests

# --- helpers --------------------------------------------------------------------------


# Callback id -> its (resolve, reject) tokens, for ``_path``.
TOKENS: Dict[str, Tuple[str, str]] = {}


def _register(store, deadline_ms: int = 2_000_000_000_000) -> str:
    callback_id = secrets.token_urlsafe(24)
    ref = CallbackRef("job-1", f"key-{callback_id}", 0, "wait@0", 0)
    record = store.register(ref, callback_id, "approval", 1_700_000_000_000, deadline_ms)
    TOKENS[callback_id] = (record.resolve_token, record.reject_token)
    return callback_id


def _path(callback_id: str, action: str) -> str:
    """The route's URL path, with the callback's token for that route (none
    for an id this module did not register)."""
    tokens = TOKENS.get(callback_id)
    path = f"/callbacks/{callback_id}/{action}"
    return path if tokens is None else f"{path}/{tokens[0] if action == 'resolve' else tokens[1]}"


def _request(
    port: int,
    method: str,
    path: str,
    body: Optional[bytes] = None,
    *,
    chunks: Optional[Iterable[bytes]] = None,
    headers: Optional[Dict[str, str]] = None,
) -> Tuple[int, Dict[str, str], bytes]:
    """(status, headers, body) of one request; ``chunks`` sends the body with
    ``Transfer-Encoding: chunked`` and no Content-Length."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        if chunks is not None:
            connection.request(method, path, body=iter(chunks), headers=headers or {}, encode_chunked=True)
        else:
            connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _post(port: int, callback_id: str, action: str, body: bytes = b"", **kwargs) -> Tuple[int, dict]:
    status, _, data = _request(port, "POST", _path(callback_id, action), body, **kwargs)
    return status, json.loads(data)


def _metrics(port: int) -> Dict[str, int]:
    """The POST counts of the ingress's ``/metrics`` page, read with
    Prometheus's own parser."""
    status, headers, data = _request(port, "GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")  # the Prometheus text format
    return {
        sample.labels["outcome"]: int(sample.value)
        for family in text_string_to_metric_families(data.decode())
        for sample in family.samples
        if sample.name == "flink_agents_callback_posts_total"
    }


def _pieces(data: bytes, size: int = 64 * 1024) -> List[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


class SpyStore(InMemoryJournalStore):
    """Counts ``complete`` and ``get_callback`` calls; raises from
    ``complete`` when ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.complete_calls = 0
        self.lookups = 0
        self.fail = False

    def get_callback(self, *args, **kwargs):
        self.lookups += 1
        return super().get_callback(*args, **kwargs)

    def complete(self, *args, **kwargs):
        self.complete_calls += 1
        if self.fail:
            raise RuntimeError("the disk is on fire")
        return super().complete(*args, **kwargs)


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield SpyStore()
        return
    sqlite_store = SQLiteJournalStore(tmp_path / "journal.db")
    yield sqlite_store
    sqlite_store.close()


@pytest.fixture
def ingress(store):
    with CallbackIngress(store, port=0, clock=lambda: NOW_S) as running:
        yield running


# --- completing -----------------------------------------------------------------------


def test_resolve_answers_202_after_storing_exactly_the_bytes_sent(store, ingress):
    callback_id = _register(store)
    body = b"\xff\xfe\x00 not utf-8 \x80\x81\r\n"

    status, answer = _post(ingress.port, callback_id, "resolve", body, headers={"Content-Type": "image/x-weird"})

    assert (status, answer) == (202, {"callback_id": callback_id, "state": "resolved"})
    record = store.get_callback(callback_id)
    assert (record.state, record.body, record.completed_ms) == (RESOLVED, body, 1_700_000_000_250)
    assert _metrics(ingress.port)["accepted"] == 1


def test_two_ingresses_in_one_process_count_apart(store, ingress):
    with CallbackIngress(store, port=0, clock=lambda: NOW_S) as other:
        _post(other.port, _register(store), "resolve", b"x")

        assert _metrics(other.port)["accepted"] == 1
        assert _metrics(ingress.port)["accepted"] == 0  # its own registry, not the global one


def test_metrics_are_openmetrics_when_the_scraper_asks(store, ingress):
    _post(ingress.port, _register(store), "resolve", b"x")

    status, headers, data = _request(
        ingress.port, "GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )

    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    text = data.decode()
    assert text.endswith("# EOF\n")
    assert 'flink_agents_callback_posts_total{outcome="accepted"} 1.0' in text.splitlines()


def test_reject_answers_202_and_stores_the_reason(store, ingress):
    callback_id = _register(store)

    status, answer = _post(ingress.port, callback_id, "reject", b'{"reason": "denied by reviewer"}')

    assert (status, answer) == (202, {"callback_id": callback_id, "state": "rejected"})
    record = store.get_callback(callback_id)
    assert (record.state, record.body) == (REJECTED, b'{"reason": "denied by reviewer"}')


def test_an_empty_body_resolves_with_empty_bytes(store, ingress):
    callback_id = _register(store)

    assert _post(ingress.port, callback_id, "resolve")[0] == 202
    assert store.get_callback(callback_id).body == b""


def test_a_second_post_is_late_changes_nothing_and_is_counted(store, ingress):
    callback_id = _register(store)
    assert _post(ingress.port, callback_id, "resolve", b"first")[0] == 202
    before = store.get_callback(callback_id)

    status, answer = _post(ingress.port, callback_id, "reject", b"second")

    assert (status, answer) == (404, {"error": "callback is no longer pending", "state": "resolved"})
    after = store.get_callback(callback_id)
    assert (after.state, after.body, after.completed_ms) == (before.state, b"first", before.completed_ms)
    assert after.late_completions == 1
    assert _metrics(ingress.port) == {
        "accepted": 1, "unknown": 0, "late": 1, "too_large": 0, "store_errors": 0, "body_timeout": 0,
        "forbidden": 0, "unauthorized": 0,
    }


def test_a_post_after_the_deadline_won_reports_timed_out(store, ingress):
    callback_id = _register(store)
    store.complete(callback_id, TIMED_OUT, None, 1_700_000_000_000)

    status, answer = _post(ingress.port, callback_id, "resolve", b"too late")

    assert (status, answer) == (404, {"error": "callback is no longer pending", "state": "timed_out"})
    assert store.get_callback(callback_id).body is None


def test_an_unknown_id_is_404(store, ingress):
    status, answer = _post(ingress.port, secrets.token_urlsafe(24), "resolve", b"x")

    assert (status, answer) == (404, {"error": "unknown callback"})
    assert _metrics(ingress.port)["unknown"] == 1


@pytest.mark.parametrize(
    "path_id",
    ["short", "a" * 15, "a" * 129, "dots.are.not.allowed.here", "bang%21" + "a" * 20, "%2e%2e"],
    ids=["short", "15-chars", "129-chars", "dots", "escaped-bang", "escaped-dots"],
)
def test_a_malformed_id_is_404_without_a_store_call(path_id):
    spy = SpyStore()
    with CallbackIngress(spy, port=0) as ingress:
        status, answer = _post(ingress.port, path_id, "resolve", b"x")

        assert (status, answer) == (404, {"error": "unknown callback"})
        assert (spy.complete_calls, spy.lookups) == (0, 0)
        assert _metrics(ingress.port)["unknown"] == 1


def test_the_id_pattern_bounds_are_inclusive():
    spy = SpyStore()
    with CallbackIngress(spy, port=0) as ingress:
        for path_id in ("a" * 16, "Z_-9" * 32):  # 16 and 128 characters
            assert _post(ingress.port, path_id, "resolve", b"x") == (404, {"error": "unknown callback"})
    assert spy.lookups == 2


def test_other_methods_on_the_post_routes_are_405(store, ingress):
    callback_id = _register(store)

    for method, action in (("GET", "resolve"), ("PUT", "resolve"), ("DELETE", "reject")):
        status, headers, _ = _request(ingress.port, method, _path(callback_id, action))
        assert status == 405, method
        assert "POST" in headers["Allow"]
    assert store.get_callback(callback_id).state == PENDING


# --- the body limit -------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_exactly_one_mib_is_accepted(store, ingress, chunked):
    callback_id = _register(store)
    body = secrets.token_bytes(MIB)
    sending = {"chunks": _pieces(body)} if chunked else {"body": body}

    status, answer = _post(ingress.port, callback_id, "resolve", **sending)

    assert status == 202, answer
    assert store.get_callback(callback_id).body == body


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_one_byte_over_one_mib_is_413_and_the_callback_stays_pending(store, ingress, chunked):
    callback_id = _register(store)
    body = b"x" * (MIB + 1)
    sending = {"chunks": _pieces(body)} if chunked else {"body": body}

    status, headers, data = _request(ingress.port, "POST", _path(callback_id, "resolve"), **sending)

    assert status == 413
    assert json.loads(data) == {"error": "body too large", "max_body_bytes": MIB}
    assert headers.get("Connection", "").lower() == "close"
    record = store.get_callback(callback_id)
    assert (record.state, record.body) == (PENDING, None)
    assert _metrics(ingress.port)["too_large"] == 1


def test_a_declared_oversized_body_is_refused_before_it_is_sent():
    """With ``Expect: 100-continue`` the client waits for the server's go-ahead;
    an oversized Content-Length gets a 413 instead, so the body never travels.
    (A raw socket: the stdlib client does not speak 100-continue.)"""
    spy = SpyStore()
    callback_id = _register(spy)
    with CallbackIngress(spy, port=0) as ingress, socket.create_connection(("127.0.0.1", ingress.port), 10) as sock:
        sock.sendall(
            f"POST {_path(callback_id, 'resolve')} HTTP/1.1\r\nHost: test\r\n"
            f"Content-Length: {MIB + 1}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        head = sock.recv(4096)

        assert head.startswith(b"HTTP/1.1 413 ")
    assert spy.complete_calls == 0
    assert spy.get_callback(callback_id).state == PENDING


def test_a_small_body_after_100_continue_is_accepted():
    spy = SpyStore()
    callback_id = _register(spy)
    with CallbackIngress(spy, port=0) as ingress, socket.create_connection(("127.0.0.1", ingress.port), 10) as sock:
        sock.sendall(
            f"POST {_path(callback_id, 'resolve')} HTTP/1.1\r\nHost: test\r\n"
            "Content-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(b"ok")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk

        assert answer.startswith(b"HTTP/1.1 202 ")
    assert spy.get_callback(callback_id).body == b"ok"


def test_a_smaller_limit_applies(store):
    callback_id = _register(store)
    with CallbackIngress(store, port=0, max_body_bytes=10) as ingress:
        assert _post(ingress.port, callback_id, "resolve", b"x" * 11)[0] == 413
        assert _post(ingress.port, callback_id, "resolve", b"x" * 10)[0] == 202


def test_a_chunked_body_far_over_the_limit_is_413_after_reading_at_most_one_byte_past_it(monkeypatch):
    """A chunked body (no Content-Length) is answered 413 as soon as it passes
    ``max_body_bytes``: the application has then taken exactly ``limit + 1``
    bytes from the request's stream, and the answer comes while the client is
    still sending (it never sends the body's end)."""
    from aiohttp import streams

    limit, piece = 8 * 1024, 1000
    # Bytes the application took from each request stream; every read method
    # of aiohttp's StreamReader takes its bytes through _read_nowait_chunk.
    taken: Dict[int, int] = {}
    original = streams.StreamReader._read_nowait_chunk

    def counting(stream, n):
        data = original(stream, n)
        taken[id(stream)] = taken.get(id(stream), 0) + len(data)
        return data

    monkeypatch.setattr(streams.StreamReader, "_read_nowait_chunk", counting)
    taken_when_answered: List[int] = []
    spy = SpyStore()
    callback_id = _register(spy)
    ingress = CallbackIngress(spy, port=0, max_body_bytes=limit)

    async def on_answer(request, response):  # before the answer's first byte is sent
        taken_when_answered.append(taken.get(id(request.content), 0))

    ingress.app.on_response_prepare.append(on_answer)  # the production app object
    with ingress, socket.create_connection(("127.0.0.1", ingress.port), 10) as sock:
        sock.sendall(
            f"POST {_path(callback_id, 'resolve')} HTTP/1.1\r\nHost: test\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        sent, answer, waited = 0, b"", False
        while sent < 50 * limit:  # far over the limit, a chunk at a time
            sock.sendall(b"%x\r\n%s\r\n" % (piece, b"x" * piece))
            sent += piece
            # Once past the limit, give the server time to answer before sending more.
            wait_s = 0.005 if sent <= limit or waited else 5.0
            waited = waited or sent > limit
            if select.select([sock], [], [], wait_s)[0]:
                answer = sock.recv(65536)
                break

        assert answer.startswith(b"HTTP/1.1 413 "), (sent, answer[:200])
        assert sent - piece <= limit < sent  # answered before anything past the first chunk over it
    assert taken_when_answered == [limit + 1], (taken_when_answered, sent)
    assert spy.complete_calls == 0 and spy.get_callback(callback_id).state == PENDING


# --- store failures -------------------------------------------------------------------


def test_a_failing_store_is_503_with_a_logged_traceback(caplog):
    spy = SpyStore()
    callback_id = _register(spy)
    spy.fail = True
    with CallbackIngress(spy, port=0) as ingress, caplog.at_level(logging.ERROR, "flink_agents.ingress"):
        status, answer = _post(ingress.port, callback_id, "resolve", b"result")

        assert (status, answer) == (503, {"error": "callback store unavailable"})
        assert _metrics(ingress.port)["store_errors"] == 1
    assert spy.complete_calls == 1
    assert "RuntimeError: the disk is on fire" in caplog.text  # the traceback
    assert callback_id not in caplog.text  # the id is the capability: never logged whole
    assert spy.get_callback(callback_id).state == PENDING


# --- durability -----------------------------------------------------------------------


def test_a_202_is_visible_to_a_fresh_sqlite_store_on_the_same_file(tmp_path):
    path = tmp_path / "journal.db"
    serving = SQLiteJournalStore(path)
    callback_id = _register(serving)
    with CallbackIngress(serving, port=0) as ingress:
        status, _ = _post(ingress.port, callback_id, "resolve", b"\x00durable\xff")

        assert status == 202
        reader = SQLiteJournalStore(path)  # another connection, opened after the answer
        try:
            record = reader.get_callback(callback_id)
        finally:
            reader.close()
    serving.close()
    assert (record.state, record.body) == (RESOLVED, b"\x00durable\xff")


# --- the other routes and the server --------------------------------------------------


def test_healthz_and_metrics_start_at_zero():
    with CallbackIngress(SpyStore(), port=0) as ingress:
        status, _, data = _request(ingress.port, "GET", "/healthz")

        assert (status, json.loads(data)) == (200, {"status": "ok"})
        assert _metrics(ingress.port) == dict.fromkeys(
            ["accepted", "unknown", "late", "too_large", "store_errors", "body_timeout", "forbidden", "unauthorized"], 0
        )


def test_start_picks_a_port_and_stop_closes_it():
    ingress = CallbackIngress(SpyStore(), port=0).start()
    port = ingress.port
    assert port > 0 and ingress.base_url == f"http://127.0.0.1:{port}"
    assert _request(port, "GET", "/healthz")[0] == 200

    ingress.stop()

    assert not any(t.name == "flink-agents-callback-ingress" for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), 2).close()
    ingress.stop()  # idempotent
    with pytest.raises(RuntimeError):
        ingress.start()  # single use


def test_a_taken_port_fails_start():
    with CallbackIngress(SpyStore(), port=0) as first:
        with pytest.raises(OSError):
            CallbackIngress(SpyStore(), port=first.port).start()


def test_make_app_refuses_a_store_without_callbacks_and_a_bad_limit():
    with pytest.raises(TypeError):
        make_app(object())
    with pytest.raises(ValueError):
        make_app(SpyStore(), max_body_bytes=0)


# --- the command ----------------------------------------------------------------------


def test_callbacks_serve_command_completes_a_callback_and_stops_on_sigterm(tmp_path):
    path = tmp_path / "journal.db"  # created by --create: the ingress starts before the job
    with serve_command("--sqlite-path", str(path), "--create") as (process, match):
        port = int(match.group(1))
        assert port > 0 and match.group(2) == f"sqlite {path}"
        assert path.is_file()  # --create made the journal at start
        store = SQLiteJournalStore(path)
        callback_id = _register(store)

        status, answer = _post(port, callback_id, "resolve", b"from the command")

        assert (status, answer) == (202, {"callback_id": callback_id, "state": "resolved"})
        assert (store.get_callback(callback_id).state, store.get_callback(callback_id).body) == (
            RESOLVED,
            b"from the command",
        )
        store.close()
        process.terminate()
        # A clean exit (0) on SIGTERM, within 5 s (TimeoutExpired otherwise).
        assert process.wait(timeout=5) == 0
        stderr = process.stderr.read().decode()
        assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize("arguments, message", [
    (["--sqlite-path", "{tmp}/typo.db"], "no journal at"),
    (["--journal-store", "memory"], "in-memory journal"),
])
def test_callbacks_serve_refuses_a_journal_that_cannot_hold_the_jobs_callbacks(tmp_path, arguments, message):
    """A typo must not start an ingress answering every id 'unknown' (a 404
    the sender takes as final): it refuses to start, in one line."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.cli.main", "callbacks", "serve", "--port", "0", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "typo.db").exists()


def test_callbacks_serve_on_a_taken_port_is_a_one_line_error(tmp_path):
    path = tmp_path / "journal.db"
    SQLiteJournalStore(path).count_entries()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "flink_agents.cli.main", "callbacks", "serve", "--port", str(port),
             "--sqlite-path", str(path)],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
        )
    assert done.returncode != 0
    assert "cannot serve on 127.0.0.1" in done.stderr and "Traceback" not in done.stderr

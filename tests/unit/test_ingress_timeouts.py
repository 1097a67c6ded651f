"""The callback ingress against slow and greedy clients, on 127.0.0.1 with raw
sockets: the body timeout, the header timeout, the idle keep-alive timeout,
the connection limit, and an honest client that is slow but within bounds.

Each test shortens the limit it tests to about 1 s, opens at most a handful
of sockets and ends within a few seconds (a socket timeout of ``WAIT_S``
bounds every read even when the ingress never answers).
"""

from __future__ import annotations

import json
import re
import secrets
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flink_agents.ingress import METRICS_KEY, CallbackIngress, IngressLimits
from flink_agents.ingress.connections import REFUSED_ANSWER
from flink_agents.stores.callbacks import PENDING, RESOLVED, CallbackRef
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support.serve_command import serve_command

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
WAIT_S = 5.0  # the longest any read waits: a test fails rather than hangs
SHORT_S = 1.0  # the limit under test


def _samples(page: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """A Prometheus page's samples: ``(name, sorted labels) -> value``."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def _register(store) -> str:
    callback_id = secrets.token_urlsafe(24)
    store.register(CallbackRef("job-1", f"key-{callback_id}", 0, "wait@0", 0), callback_id, "approval",
                   1_700_000_000_000, 2_000_000_000_000)
    return callback_id


def _resolve_path(store, callback_id: str) -> str:
    return f"/callbacks/{callback_id}/resolve/{store.get_callback(callback_id).resolve_token}"


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _head(method: str, path: str, length: Optional[int] = None, *, close: bool = False) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_answer(sock: socket.socket) -> Tuple[int, Dict[str, str], bytes]:
    """One HTTP answer read off ``sock``: (status, headers, body by
    Content-Length). Raises ``socket.timeout`` after ``WAIT_S`` of silence."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole answer head: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside an answer body")
        body += chunk
    return int(status_line.split()[1]), headers, body


def _closed_after(sock: socket.socket) -> Tuple[float, bytes]:
    """Seconds until the ingress closed ``sock`` (EOF or reset), and the bytes
    it sent before. Raises ``socket.timeout`` if it stays open ``WAIT_S``."""
    start = time.monotonic()
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return time.monotonic() - start, received


def _wait_for(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)


# --- the body timeout -------------------------------------------------------------------


def test_a_trickled_body_is_cut_after_the_body_timeout_and_the_callback_stays_pending():
    """1 byte per 0.2 s of a 100-byte body: 408 and a closed connection about
    ``body_timeout_s`` after the headers; the store is never asked."""
    store = InMemoryJournalStore()
    callback_id = _register(store)
    limits = IngressLimits(body_timeout_s=SHORT_S, header_timeout_s=WAIT_S * 2)
    with CallbackIngress(store, port=0, limits=limits) as ingress, _connect(ingress.port) as sock:
        sock.sendall(_head("POST", _resolve_path(store, callback_id), 100))
        start = time.monotonic()
        sent = 0
        # Trickle until the ingress answers or closes, for at most WAIT_S.
        while not select.select([sock], [], [], 0.2)[0]:
            assert time.monotonic() - start < WAIT_S, f"still reading the body after {sent} bytes"
            sock.sendall(b"x")
            sent += 1
        waited_s, answer = _closed_after(sock)
        elapsed_s = time.monotonic() - start

        assert SHORT_S - 0.05 <= elapsed_s - waited_s < SHORT_S + 1.5
        assert sent < 100
        if answer:  # a reset may beat the answer to a client still sending
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {
                "error": "body not received in time", "body_timeout_s": SHORT_S
            }
        assert ingress.app[METRICS_KEY].snapshot()["body_timeout"] == 1
    record = store.get_callback(callback_id)
    assert (record.state, record.body) == (PENDING, None)


# --- the header timeout -----------------------------------------------------------------


@pytest.mark.parametrize("sends", [b"", b"POST /callbacks/abc/resolve HTTP/1.1\r\nHost: test\r\n"],
                         ids=["nothing", "a-partial-head"])
def test_a_request_head_not_finished_is_closed_after_the_header_timeout(sends):
    limits = IngressLimits(header_timeout_s=SHORT_S, idle_timeout_s=WAIT_S * 2)
    with CallbackIngress(InMemoryJournalStore(), port=0, limits=limits) as ingress, _connect(ingress.port) as sock:
        start = time.monotonic()
        sock.sendall(sends)
        # One more header byte every 0.2 s does not extend the deadline.
        while sends and not select.select([sock], [], [], 0.2)[0]:
            assert time.monotonic() - start < WAIT_S, "the head is still being read"
            sock.sendall(b"X")
        _, answer = _closed_after(sock)

        assert SHORT_S - 0.05 <= time.monotonic() - start < SHORT_S + 1.5
        assert answer == b""  # closed without an answer
        assert ingress.app[METRICS_KEY].connections()["header_timeouts"] == 1


def test_a_later_requests_head_is_timed_from_its_first_byte_not_from_the_previous_answer():
    """Idle for longer than the header timeout between two requests is fine
    (the idle timeout governs that); the next head's own clock starts with
    its first byte."""
    limits = IngressLimits(header_timeout_s=SHORT_S, idle_timeout_s=WAIT_S * 2)
    with CallbackIngress(InMemoryJournalStore(), port=0, limits=limits) as ingress, _connect(ingress.port) as sock:
        sock.sendall(_head("GET", "/healthz"))
        assert _read_answer(sock)[0] == 200
        time.sleep(SHORT_S * 1.5)

        sock.sendall(_head("GET", "/healthz"))
        assert _read_answer(sock)[0] == 200  # still open after 1.5 header timeouts of idling
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # and now a head that never ends
        start = time.monotonic()
        waited_s, answer = _closed_after(sock)

        assert answer == b"" and SHORT_S - 0.05 <= waited_s < SHORT_S + 1.5
        assert time.monotonic() - start < SHORT_S + 1.5
        assert ingress.app[METRICS_KEY].connections()["header_timeouts"] == 1


# --- the idle timeout -------------------------------------------------------------------


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout():
    limits = IngressLimits(idle_timeout_s=SHORT_S, header_timeout_s=WAIT_S * 2)
    with CallbackIngress(InMemoryJournalStore(), port=0, limits=limits) as ingress, _connect(ingress.port) as sock:
        sock.sendall(_head("GET", "/healthz"))
        status, headers, _ = _read_answer(sock)
        assert status == 200 and headers.get("connection", "keep-alive").lower() != "close"
        time.sleep(SHORT_S / 2)
        sock.sendall(_head("GET", "/healthz"))  # within the idle timeout: the connection serves it
        assert _read_answer(sock)[0] == 200

        waited_s, answer = _closed_after(sock)

        assert answer == b""
        assert SHORT_S - 0.05 <= waited_s < SHORT_S + 1.5


# --- the connection limit ---------------------------------------------------------------


def test_connections_over_the_limit_are_refused_while_the_open_ones_keep_working():
    store = InMemoryJournalStore()
    callback_id = _register(store)
    limits = IngressLimits(max_connections=3)
    with CallbackIngress(store, port=0, limits=limits) as ingress:
        metrics = ingress.app[METRICS_KEY]
        held = [_connect(ingress.port) for _ in range(3)]
        try:
            _wait_for(lambda: metrics.connections()["open"] == 3, "three connections admitted")

            with _connect(ingress.port) as extra:
                waited_s, answer = _closed_after(extra)

            assert answer == REFUSED_ANSWER and answer.startswith(b"HTTP/1.1 503 ")
            assert waited_s < 2.0  # answered and closed on accept, nothing read
            # A connection already open resolves the callback as usual...
            body = b'{"decision": "approved"}'
            held[0].sendall(_head("POST", _resolve_path(store, callback_id), len(body)) + body)
            status, _, answer_body = _read_answer(held[0])
            assert (status, json.loads(answer_body)) == (202, {"callback_id": callback_id, "state": "resolved"})
            assert (store.get_callback(callback_id).state, store.get_callback(callback_id).body) == (RESOLVED, body)
            # ... and reads the count of refusals.
            held[1].sendall(_head("GET", "/metrics"))
            page = _samples(_read_answer(held[1])[2].decode())
            assert page[("flink_agents_callback_connections_total", (("outcome", "refused"),))] == 1
            assert page[("flink_agents_callback_connections_open", ())] == 3

            # A slot that frees up is used again.
            held.pop().close()
            _wait_for(lambda: metrics.connections()["open"] == 2, "the closed connection released")
            with _connect(ingress.port) as again:
                again.sendall(_head("GET", "/healthz", close=True))
                assert _read_answer(again)[0] == 200
        finally:
            for sock in held:
                sock.close()
        assert metrics.connections()["refused"] == 1


# --- an honest, slow client -------------------------------------------------------------


def test_a_slow_but_reasonable_client_resolves_with_one_mib():
    """Head in pieces over 55% of the header timeout, then 1 MiB in 16 pieces
    over 55% of the body timeout: more than either timeout in all, and still
    202 with every byte stored. The clocks are per phase, not per request.
    The timeouts are 2.5 s here, so each phase has over a second to spare on
    a loaded machine (at 1 s, a body phase of 0.8 s broke on one)."""
    timeout_s = 2.5
    store = InMemoryJournalStore()
    callback_id = _register(store)
    body = bytes(range(256)) * (MIB // 256)
    head = _head("POST", _resolve_path(store, callback_id), len(body), close=True)
    limits = IngressLimits(header_timeout_s=timeout_s, body_timeout_s=timeout_s)
    with CallbackIngress(store, port=0, limits=limits) as ingress, _connect(ingress.port) as sock:
        start = time.monotonic()
        for piece in (head[:10], head[10:30]):
            sock.sendall(piece)
            time.sleep(0.55 * timeout_s / 2)
        sock.sendall(head[30:])
        for offset in range(0, len(body), MIB // 16):
            time.sleep(0.55 * timeout_s / 16)
            sock.sendall(body[offset : offset + MIB // 16])
        status, _, answer = _read_answer(sock)

        assert time.monotonic() - start > timeout_s
        assert (status, json.loads(answer)) == (202, {"callback_id": callback_id, "state": "resolved"})
    assert store.get_callback(callback_id).body == body


# --- configuration ----------------------------------------------------------------------


def test_limits_come_from_callbacks_ingress_keys_and_errors_name_the_key():
    assert IngressLimits.from_config({
        "callbacks.ingress.body_timeout_s": "2.5", "callbacks.ingress.max_connections": 7,
        "journal.store": "sqlite",  # another group's key: not ours
    }) == IngressLimits(body_timeout_s=2.5, max_connections=7)
    assert IngressLimits.from_config({}) == IngressLimits()
    for config, key in [
        ({"callbacks.ingress.header_timeout_s": "0"}, "callbacks.ingress.header_timeout_s"),
        ({"callbacks.ingress.idle_timeout_s": "soon"}, "callbacks.ingress.idle_timeout_s"),
        ({"callbacks.ingress.max_connections": "2.5"}, "callbacks.ingress.max_connections"),
        ({"callbacks.ingress.max_body_bytes": -1}, "callbacks.ingress.max_body_bytes"),
        ({"callbacks.ingress.body_timeout": 5}, "callbacks.ingress.body_timeout"),  # a typo
    ]:
        with pytest.raises(ValueError, match=re.escape(key)):
            IngressLimits.from_config(config)


def test_the_serve_command_rejects_a_bad_limit_naming_its_key(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.cli.main", "callbacks", "serve", "--port", "0",
         "--sqlite-path", str(tmp_path / "journal.db"), "--create", "--body-timeout-s", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert "callbacks.ingress.body_timeout_s" in done.stderr and "Traceback" not in done.stderr


def test_the_serve_command_applies_its_connection_limit_and_header_timeout(tmp_path):
    path = tmp_path / "journal.db"
    SQLiteJournalStore(path).count_entries()
    with serve_command("--sqlite-path", str(path), "--max-connections", "1",
                       "--header-timeout-s", str(SHORT_S)) as (process, match):
        port = int(match.group(1))
        with _connect(port) as first:
            time.sleep(0.2)  # admitted before the next one arrives
            with _connect(port) as second:
                assert _closed_after(second)[1] == REFUSED_ANSWER
            waited_s, answer = _closed_after(first)  # silent: closed by the header timeout
            assert answer == b"" and waited_s < SHORT_S + 1.5
        process.terminate()
        assert process.wait(timeout=5) == 0

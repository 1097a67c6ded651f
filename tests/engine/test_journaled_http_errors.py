"""Errors of HTTP clients keep what callers check, on the first run and on a
replay (runtime/durability/codec_http.py; docs/durability.md).

A server on 127.0.0.1 answers 503 with ``Retry-After``, a body and a session
cookie. An async action calls it through httpx, requests, aiohttp and the
OpenAI SDK, each inside ``durable_execute_async``, and reads the error the
way users do (``e.response.status_code``, ``e.status``, ``e.headers``,
``e.request_info.real_url``). The run is then replayed from its SQLite
journal (the steps' completions removed, as a crash leaves them): no call
reaches the server again and the action reads the same. The journal file
holds neither the cookie nor the request's API key.
"""

from __future__ import annotations

import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List

import aiohttp
import anthropic
import httpx
import ollama
import openai
import pytest
import requests

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment

API_KEY = "sk-test-0123456789abcdef"


class _Overloaded(BaseHTTPRequestHandler):
    hits: List[str] = []

    def _answer(self) -> None:
        _Overloaded.hits.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"error": {"message": "overloaded, retry later", "type": "server_error"}}'
        self.send_response(503)
        self.send_header("Retry-After", "7")
        self.send_header("Set-Cookie", "session=abc123; HttpOnly")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Overloaded)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Overloaded.hits = []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def call_httpx(url: str) -> str:
    httpx.get(f"{url}/httpx?api_key={API_KEY}", headers={"Authorization": f"Bearer {API_KEY}"}).raise_for_status()
    return "ok"


def call_requests(url: str) -> str:
    requests.get(f"{url}/requests", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10).raise_for_status()
    return "ok"


async def call_aiohttp(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/aiohttp", headers={"Authorization": f"Bearer {API_KEY}"}) as response:
            response.raise_for_status()
    return "ok"


def call_openai(url: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return "ok"


def call_anthropic(url: str) -> str:
    client = anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0)
    client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    return "ok"


def call_ollama(url: str) -> str:
    ollama.Client(host=url).chat(model="m", messages=[{"role": "user", "content": "hi"}])
    return "ok"


class HttpAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def fetch(event: InputEvent, ctx: Any) -> None:
        url = event.input
        seen: Dict[str, Any] = {}
        try:
            await ctx.durable_execute_async(call_httpx, url)
        except httpx.HTTPStatusError as e:
            seen["httpx"] = [e.response.status_code, e.response.headers["retry-after"], e.response.json()["error"]["type"],
                             e.request.method, e.request.url.path, e.response.headers.get("set-cookie")]
        try:
            await ctx.durable_execute_async(call_requests, url)
        except requests.HTTPError as e:
            seen["requests"] = [e.response.status_code, e.response.headers["Retry-After"], e.response.text[:10],
                                e.response.url.endswith("/requests"), e.response.reason]
        try:
            await ctx.durable_execute_async(call_aiohttp, url)
        except aiohttp.ClientResponseError as e:
            seen["aiohttp"] = [e.status, e.headers["Retry-After"], str(e.request_info.real_url).endswith("/aiohttp"),
                               e.request_info.method]
        try:
            await ctx.durable_execute_async(call_openai, url)
        except openai.APIStatusError as e:
            seen["openai"] = [type(e).__name__, e.status_code, e.response.headers["retry-after"], e.body]
        try:
            await ctx.durable_execute_async(call_anthropic, url)
        except anthropic.APIStatusError as e:
            seen["anthropic"] = [type(e).__name__, e.status_code, e.response.headers["retry-after"],
                                 e.response.request.url.path]
        try:
            await ctx.durable_execute_async(call_ollama, url)
        except ollama.ResponseError as e:
            seen["ollama"] = [type(e).__name__, e.status_code, "overloaded, retry later" in str(e.error)]
        ctx.send_event(OutputEvent(output=seen))


EXPECTED = {
    "httpx": [503, "7", "server_error", "GET", "/httpx", None],
    "requests": [503, "7", '{"error": ', True, "Service Unavailable"],
    "aiohttp": [503, "7", True, "GET"],
    "openai": ["InternalServerError", 503, "7", {"message": "overloaded, retry later", "type": "server_error"}],
    "anthropic": ["ServiceUnavailableError", 503, "7", "/v1/messages"],
    "ollama": ["ResponseError", 503, True],
}


def _run(url: str, journal: Path) -> list:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({"job-identifier": "http-errors", "journal.store": "sqlite",
                             "journal.sqlite.path": str(journal)})
    outputs = env.from_list([{"key": "k", "value": url}]).apply(HttpAgent()).to_list()
    env.execute()
    return outputs


def test_http_client_errors_keep_status_headers_and_body_on_the_first_run_and_on_a_replay(
    server: str, tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.db"

    assert _run(server, journal) == [{"k": EXPECTED}]
    assert len(_Overloaded.hits) == 6

    with sqlite3.connect(journal) as db:  # as a crash after the calls leaves the run
        db.execute("DELETE FROM journal WHERE function_id = ''")
    assert _run(server, journal) == [{"k": EXPECTED}]
    assert len(_Overloaded.hits) == 6  # replayed, not called again

    stored = b"".join(Path(f"{journal}{suffix}").read_bytes() for suffix in ("", "-wal") if Path(f"{journal}{suffix}").exists())
    assert b"503" in stored and b"Retry-After" in stored.replace(b"retry-after", b"Retry-After")
    assert API_KEY.encode() not in stored and b"abc123" not in stored


def test_an_arg_the_codec_cannot_carry_becomes_none_and_is_named() -> None:
    from flink_agents.runtime.durability.codec import decode, encode
    from flink_agents.runtime.durability.codec_classes import register_class

    class Handle:
        pass

    register_class(LookupFailed)  # as a job's plan registers the classes its actions reach
    back = decode(encode(LookupFailed("sku-1", Handle())))

    assert type(back) is LookupFailed and back.args == ("sku-1", None)
    assert any("args[1]" in note and "Handle" in note for note in back.__notes__)


class LookupFailed(Exception):
    pass


def test_what_an_http_error_journals_is_bounded() -> None:
    """A 2 MB body and 500 headers: the replayed error keeps the first
    ``MAX_TEXT_CHARS`` of text and ``MAX_HEADERS`` headers, each cut to
    ``MAX_HEADER_CHARS``; the status stays."""
    from flink_agents.runtime.durability.codec import decode, encode
    from flink_agents.runtime.durability.codec_http import MAX_HEADER_CHARS, MAX_HEADERS, MAX_TEXT_CHARS

    headers = [(f"x-h{i}", "v" * 5000) for i in range(500)]
    response = httpx.Response(503, headers=headers, text="e" * 2_000_000,
                              request=httpx.Request("GET", "http://127.0.0.1/big"))
    error = httpx.HTTPStatusError("overloaded", request=response.request, response=response)

    stored = encode(error)
    back = decode(stored)

    assert type(back) is httpx.HTTPStatusError and back.response.status_code == 503
    assert back.response.text == "e" * MAX_TEXT_CHARS
    assert len([name for name in back.response.headers if name.startswith("x-h")]) == MAX_HEADERS
    assert all(len(value) == MAX_HEADER_CHARS for name, value in back.response.headers.items() if name.startswith("x-h"))
    assert len(repr(stored)) < MAX_TEXT_CHARS + MAX_HEADERS * (MAX_HEADER_CHARS + 64) + 4096

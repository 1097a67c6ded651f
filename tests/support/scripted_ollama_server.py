"""A scripted Ollama server (the fixture style of ``tests.support.scripted_http``).

Speaks Ollama's REST API as its reference documents it (``docs/api.md`` of
ollama/ollama, "Generate a chat completion" and "Generate Embeddings"):

* ``POST /api/chat``: ``{"model", "messages", "tools"?, "format"?,
  "options"?, "stream"?, "keep_alive"?, "think"?, "logprobs"?,
  "top_logprobs"?}``; a message is ``{"role": system|user|assistant|tool,
  "content", "thinking"?, "images"?, "tool_calls"?, "tool_name"?}``, a tool
  call ``{"function": {"name", "arguments": <object>}}`` (no id). Answered
  with ``{"model", "created_at", "message": {"role": "assistant",
  "content", "thinking"?, "tool_calls"?}, "done": true, "done_reason",
  "total_duration", "load_duration", "prompt_eval_count",
  "prompt_eval_duration", "eval_count", "eval_duration"}`` (durations in
  nanoseconds).
* ``POST /api/embed``: ``{"model", "input": str | [str], "truncate"?,
  "options"?, "keep_alive"?, "dimensions"?}``, answered with ``{"model",
  "embeddings", "total_duration", "load_duration", "prompt_eval_count"}``.
* Errors: ``{"error": "<message>"}`` with the HTTP status.

``stream`` defaults to true in Ollama; the script answers whole replies only,
so a request must send ``"stream": false`` (chat). ``content`` may be left
out (the SDK drops an empty one; the server reads it as ``""``).

Replies are dialect-neutral (``scripted_http``): an OpenAI chat message dict
(``arguments`` a dict or JSON text; an optional ``"thinking"`` string becomes
the message's ``thinking``) for chat, ``{"embeddings": [[...], ...]}`` for
embeddings, or a ``ScriptedError``. ``sent`` holds the bodies answered.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Dict, List

from tests.support.scripted_http import Exchange, ScriptedServer

__all__ = ["CHAT_PATH", "EMBED_PATH", "OllamaScriptedServer"]

CHAT_PATH = "/api/chat"
EMBED_PATH = "/api/embed"

_CHAT_FIELDS = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think", "logprobs",
                "top_logprobs"}
_EMBED_FIELDS = {"model", "input", "truncate", "options", "keep_alive", "dimensions"}
_MESSAGE_FIELDS = {"role", "content", "thinking", "images", "tool_calls", "tool_name"}
_ROLES = {"system", "user", "assistant", "tool"}
_THINK_LEVELS = {"low", "medium", "high", "max"}


def _words(value: Any) -> int:
    """A crude, deterministic token count: whitespace-separated words."""
    if not value:
        return 0
    return len((value if isinstance(value, str) else json.dumps(value, sort_keys=True)).split())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unknown(where: str, value: Dict[str, Any], allowed: set) -> List[str]:
    return [f"{where}: unknown field {name!r}" for name in sorted(set(value) - allowed)]


def _check_tool_call(where: str, call: Any) -> List[str]:
    if not isinstance(call, dict):
        return [f"{where} must be an object"]
    problems = _unknown(where, call, {"function"})
    function = call.get("function")
    if not isinstance(function, dict):
        return problems + [f"{where}.function must be an object"]
    problems += _unknown(f"{where}.function", function, {"name", "arguments"})
    if not isinstance(function.get("name"), str) or not function["name"]:
        problems.append(f"{where}.function.name must be a non-empty string")
    if "arguments" in function and not isinstance(function["arguments"], dict):
        problems.append(f"{where}.function.arguments must be a JSON object, got {function['arguments']!r:.80}")
    return problems


def _check_message(where: str, message: Any) -> List[str]:
    if not isinstance(message, dict):
        return [f"{where} must be an object"]
    problems = _unknown(where, message, _MESSAGE_FIELDS)
    role = message.get("role")
    if role not in _ROLES:
        problems.append(f"{where}.role must be one of {sorted(_ROLES)}, got {role!r}")
    for name in ("content", "thinking", "tool_name"):
        if name in message and not isinstance(message[name], str):
            problems.append(f"{where}.{name} must be a string")
    if "images" in message and not (isinstance(message["images"], list)
                                    and all(isinstance(i, str) for i in message["images"])):
        problems.append(f"{where}.images must be a list of base64 strings")
    if "tool_calls" in message:
        if role != "assistant":
            problems.append(f"{where}: only an assistant message has tool_calls")
        if not isinstance(message["tool_calls"], list):
            problems.append(f"{where}.tool_calls must be a list")
        else:
            for n, call in enumerate(message["tool_calls"]):
                problems += _check_tool_call(f"{where}.tool_calls[{n}]", call)
    if "tool_name" in message and role != "tool":
        problems.append(f"{where}: only a tool message has tool_name")
    return problems


def _check_tool(where: str, tool: Any) -> List[str]:
    if not isinstance(tool, dict):
        return [f"{where} must be an object"]
    problems = _unknown(where, tool, {"type", "function"})
    if tool.get("type") != "function":
        problems.append(f"{where}.type must be 'function'")
    function = tool.get("function")
    if not isinstance(function, dict):
        return problems + [f"{where}.function must be an object"]
    problems += _unknown(f"{where}.function", function, {"name", "description", "parameters"})
    if not isinstance(function.get("name"), str) or not function["name"]:
        problems.append(f"{where}.function.name must be a non-empty string")
    if not isinstance(function.get("parameters"), dict):
        problems.append(f"{where}.function.parameters must be a JSON schema object")
    return problems


def _check_common(body: Dict[str, Any]) -> List[str]:
    problems = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model (the model name) is required")
    if "options" in body and not isinstance(body["options"], dict):
        problems.append("options must be an object")
    if "keep_alive" in body and not (isinstance(body["keep_alive"], str) or _is_number(body["keep_alive"])):
        problems.append(f"keep_alive must be a duration string or a number, got {body['keep_alive']!r}")
    return problems


def _check_chat(body: Dict[str, Any]) -> List[str]:
    problems = _unknown("body", body, _CHAT_FIELDS) + _check_common(body)
    if body.get("stream") is not False:
        problems.append("stream must be false (Ollama streams by default; the script answers whole replies)")
    messages = body.get("messages")
    if not isinstance(messages, list):
        problems.append("messages must be a list")
    else:
        for n, message in enumerate(messages):
            problems += _check_message(f"messages[{n}]", message)
    if "tools" in body:
        if not isinstance(body["tools"], list):
            problems.append("tools must be a list")
        else:
            for n, tool in enumerate(body["tools"]):
                problems += _check_tool(f"tools[{n}]", tool)
    if "format" in body and not (body["format"] == "json" or isinstance(body["format"], dict)):
        problems.append(f"format must be 'json' or a JSON schema object, got {body['format']!r:.80}")
    if "think" in body and not (isinstance(body["think"], bool) or body["think"] in _THINK_LEVELS):
        problems.append(f"think must be a boolean or one of {sorted(_THINK_LEVELS)}, got {body['think']!r}")
    if "logprobs" in body and not isinstance(body["logprobs"], bool):
        problems.append("logprobs must be a boolean")
    if "top_logprobs" in body and not isinstance(body["top_logprobs"], int):
        problems.append("top_logprobs must be an integer")
    return problems


def _check_embed(body: Dict[str, Any]) -> List[str]:
    problems = _unknown("body", body, _EMBED_FIELDS) + _check_common(body)
    texts = body.get("input")
    if not (isinstance(texts, str) or (isinstance(texts, list) and all(isinstance(t, str) for t in texts))):
        problems.append(f"input must be a string or a list of strings, got {texts!r:.80}")
    if "truncate" in body and not isinstance(body["truncate"], bool):
        problems.append("truncate must be a boolean")
    if "dimensions" in body and not (isinstance(body["dimensions"], int) and body["dimensions"] > 0):
        problems.append("dimensions must be a positive integer")
    return problems


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class OllamaScriptedServer(ScriptedServer):
    """Ollama's ``/api/chat`` and ``/api/embed`` answering from a script."""

    routes = {
        ("POST", CHAT_PATH): "_chat",
        ("POST", EMBED_PATH): "_embed",
    }

    def __init__(self, replies: list | None = None, latency_s: float = 0.0) -> None:
        super().__init__(replies, latency_s)
        self.sent: List[Dict[str, Any]] = []  # the bodies answered (200s), in order

    @property
    def base_url(self) -> str:
        """The server root the Ollama connections take, ``http://127.0.0.1:PORT``."""
        return self.root_url

    def check(self, exchange: Exchange) -> List[str]:
        body = exchange.json
        if not isinstance(body, dict):
            return ["the body must be a JSON object"]
        return _check_chat(body) if exchange.path.rstrip("/") == CHAT_PATH else _check_embed(body)

    def error_body(self, status: int, message: str) -> dict:
        return {"error": message}

    def _chat(self, exchange: Exchange, reply: Dict[str, Any], index: int) -> tuple[int, dict]:
        request = exchange.json
        message: Dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
        if reply.get("thinking"):
            message["thinking"] = reply["thinking"]
        calls = []
        for call in reply.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            calls.append({"function": {"name": function.get("name"), "arguments": arguments or {}}})
        if calls:
            message["tool_calls"] = calls
        body = {
            "model": request["model"],
            "created_at": _now(),
            "message": message,
            "done": True,
            "done_reason": "stop",
            "total_duration": 1_000_000 * (index + 1),
            "load_duration": 1_000,
            "prompt_eval_count": 1 + sum(_words(m.get("content")) for m in request["messages"]),
            "prompt_eval_duration": 100_000,
            "eval_count": 1 + _words(message["content"]) + _words(calls),
            "eval_duration": 500_000,
        }
        self.sent.append(body)
        return 200, body

    def _embed(self, exchange: Exchange, reply: Dict[str, Any], index: int) -> tuple[int, dict]:
        request = exchange.json
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        body = {
            "model": request["model"],
            "embeddings": reply["embeddings"],
            "total_duration": 1_000_000 * (index + 1),
            "load_duration": 1_000,
            "prompt_eval_count": sum(_words(t) for t in texts),
        }
        self.sent.append(body)
        return 200, body

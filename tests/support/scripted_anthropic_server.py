"""A scripted Anthropic Messages API server, in the fixture style of
``tests.support.scripted_http``.

Route (Anthropic's public API reference): ``POST /v1/messages`` with headers
``anthropic-version``, ``content-type: application/json`` and the key, in
``x-api-key`` (the reference's header) or ``Authorization: Bearer <key>``
(how the ``anthropic`` SDK 2.x sends an ``api_key``);
body ``{"model", "max_tokens", "messages", "system"?, "tools"?,
"tool_choice"?, "temperature"?, "top_p"?, "top_k"?, "stop_sequences"?,
"metadata"?, "stream"?, "thinking"?, ...}``. It answers ``{"id", "type":
"message", "role": "assistant", "content": [text / tool_use blocks], "model",
"stop_reason", "stop_sequence", "usage": {"input_tokens", "output_tokens"}}``.
Errors use Anthropic's body ``{"type": "error", "error": {"type",
"message"}, "request_id"}`` with the documented type of each status.

A dialect-neutral reply (an OpenAI chat message dict) becomes that body: its
text a ``text`` block, each of its ``tool_calls`` a ``tool_use`` block
(``id`` given or ``toolu_<index>_<n>``), stop reason ``tool_use`` when it
calls tools, else ``end_turn`` (or the reply's own ``stop_reason`` key).

Restrictions of this server (not of Anthropic): no streaming.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List

from tests.support.scripted_http import Exchange, ScriptedServer

__all__ = ["AnthropicScriptedServer", "MESSAGES_PATH"]

MESSAGES_PATH = "/v1/messages"

# https://docs.anthropic.com/en/api/errors: the error type of each status.
_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 529: "overloaded_error",
}
_NUMBER = (int, float)
_TOP_LEVEL = {
    "model": str, "max_tokens": int, "messages": list, "system": (str, list), "tools": list,
    "tool_choice": dict, "temperature": _NUMBER, "top_p": _NUMBER, "top_k": int,
    "stop_sequences": list, "metadata": dict, "stream": bool, "thinking": dict,
    "service_tier": str, "container": (str, type(None)), "output_config": dict,
}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
}
_BLOCKS_OF_ROLE = {"user": {"text", "image", "tool_result"}, "assistant": {"text", "tool_use"}}


def _words(value: Any) -> int:
    """A crude, deterministic token count: whitespace-separated words."""
    if value is None:
        return 0
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return len(value.split())


def _type_problem(where: str, value: Any, kind: Any) -> List[str]:
    if isinstance(value, bool) and kind in (int, _NUMBER):
        return [f"{where} must be a number, got a bool"]
    return [] if isinstance(value, kind) else [f"{where} has type {type(value).__name__}, not {kind}"]


def _check_block(where: str, role: str, block: Any) -> List[str]:
    if not isinstance(block, dict) or block.get("type") not in _BLOCK_KEYS:
        return [f"{where} must be a text, image, tool_use or tool_result block, got {block!r:.120}"]
    kind = block["type"]
    problems = []
    if kind not in _BLOCKS_OF_ROLE[role]:
        problems.append(f"{where}: a {kind} block cannot be in a {role} message")
    unknown = set(block) - _BLOCK_KEYS[kind]
    if unknown:
        problems.append(f"{where} ({kind}) has unknown fields {sorted(unknown)}")
    if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
        problems.append(f"{where}: text content blocks must be non-empty strings")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not _TOOL_USE_ID.match(block["id"]):
            problems.append(f"{where}.id must match {_TOOL_USE_ID.pattern}, got {block.get('id')!r}")
        if not isinstance(block.get("name"), str) or not _TOOL_NAME.match(block["name"]):
            problems.append(f"{where}.name must match {_TOOL_NAME.pattern}, got {block.get('name')!r}")
        if not isinstance(block.get("input"), dict):
            problems.append(f"{where}.input must be an object, got {block.get('input')!r:.80}")
    if kind == "tool_result":
        content = block.get("content", "")
        if not isinstance(block.get("tool_use_id"), str):
            problems.append(f"{where}.tool_use_id must be a string")
        if not (isinstance(content, str) or (isinstance(content, list) and all(
            isinstance(c, dict) and c.get("type") in ("text", "image") for c in content
        ))):
            problems.append(f"{where}.content must be a string or a list of text/image blocks")
    return problems


def _check_messages(messages: Any) -> List[str]:
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty list"]
    problems: List[str] = []
    pending: List[str] = []  # tool_use ids of the previous assistant turn
    for n, message in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(message, dict) or message.get("role") not in _BLOCKS_OF_ROLE:
            problems.append(f"{where}: role must be 'user' or 'assistant', got {message!r:.120}")
            continue
        role, content = message["role"], message.get("content")
        if set(message) - {"role", "content"}:
            problems.append(f"{where} has unknown fields {sorted(set(message) - {'role', 'content'})}")
        blocks = [] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            problems.append(f"{where}.content must be a string or a list of blocks")
            blocks = []
        for b, block in enumerate(blocks):
            problems += _check_block(f"{where}.content[{b}]", role, block)
        blocks = [b for b in blocks if isinstance(b, dict)]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        for result in results:
            if result not in pending:
                problems.append(f"{where}: tool_result {result!r} answers no tool_use of the previous assistant message")
        missing = [p for p in pending if p not in results]
        if missing:
            problems.append(f"{where}: tool_use ids were found without tool_result blocks immediately after: {missing}")
        kinds = [b.get("type") for b in blocks]
        if any(k != "tool_result" for k in kinds[: len(results)]):
            problems.append(f"{where}: tool_result blocks must come first in the content")
        pending = [b.get("id") for b in blocks if b.get("type") == "tool_use"] if role == "assistant" else []
    if pending:
        problems.append("the last assistant message has tool_use blocks but no tool_result follows")
    return problems


def _check_tools(tools: List[Any], tool_choice: Any, thinking: Any) -> List[str]:
    problems: List[str] = []
    names = []
    for n, tool in enumerate(tools):
        where = f"tools[{n}]"
        if not isinstance(tool, dict):
            problems.append(f"{where} must be an object")
            continue
        unknown = set(tool) - {"name", "description", "input_schema", "cache_control", "type"}
        if unknown:
            problems.append(f"{where} has unknown fields {sorted(unknown)}")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            problems.append(f"{where}.name must match {_TOOL_NAME.pattern}, got {name!r}")
        names.append(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"{where}.input_schema must be a JSON schema with type 'object'")
    if len(set(names)) != len(names):
        problems.append(f"tool names must be unique, got {names}")
    if tool_choice is None:
        return problems
    kind = tool_choice.get("type")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    if kind not in ("auto", "any", "tool", "none"):
        problems.append(f"tool_choice.type must be auto, any, tool or none, got {kind!r}")
    if set(tool_choice) - allowed:
        problems.append(f"tool_choice has unknown fields {sorted(set(tool_choice) - allowed)}")
    if kind == "tool" and tool_choice.get("name") not in names:
        problems.append(f"tool_choice names {tool_choice.get('name')!r}, which is not among the tools")
    if kind in ("any", "tool") and not tools:
        problems.append(f"tool_choice {kind!r} needs tools")
    if kind in ("any", "tool") and isinstance(thinking, dict) and thinking.get("type") == "enabled":
        problems.append("tool_choice 'any' or 'tool' cannot be combined with extended thinking")
    return problems


class AnthropicScriptedServer(ScriptedServer):
    """Anthropic's Messages API, scripted (see the module docstring).

    Attributes:
        sent: The bodies of the successful responses, in order (what the
            SDK received; tests compare the client's reading with them).
    """

    routes = {("POST", MESSAGES_PATH): "_messages"}

    def __init__(self, replies: list | None = None, latency_s: float = 0.0) -> None:
        super().__init__(replies, latency_s)
        self.sent: List[dict] = []

    @property
    def base_url(self) -> str:
        """What ``AnthropicChatModelConnection.base_url`` takes: the root,
        ``http://127.0.0.1:PORT`` (the SDK appends ``/v1/messages``)."""
        return self.root_url

    def error_body(self, status: int, message: str) -> dict:
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}, "request_id": f"req_{uuid.uuid4().hex}"}

    def check(self, exchange: Exchange) -> List[str]:
        problems = []
        bearer = exchange.headers.get("authorization", "")
        if not exchange.headers.get("x-api-key") and not (bearer.startswith("Bearer ") and bearer[7:].strip()):
            problems.append("missing credentials: an x-api-key header or 'Authorization: Bearer <key>'")
        if not exchange.headers.get("anthropic-version"):
            problems.append("missing anthropic-version header")
        if "application/json" not in exchange.headers.get("content-type", ""):
            problems.append("content-type must be application/json")
        body = exchange.json
        if not isinstance(body, dict):
            return [*problems, "the body must be a JSON object"]
        for name, value in body.items():
            if name not in _TOP_LEVEL:
                problems.append(f"{name}: Extra inputs are not permitted")
            else:
                problems += _type_problem(name, value, _TOP_LEVEL[name])
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                problems.append(f"{name}: Field required")
        if isinstance(body.get("max_tokens"), int) and body["max_tokens"] < 1:
            problems.append("max_tokens must be at least 1")
        if body.get("stream"):
            problems.append("streaming is not supported by the scripted server; send stream=false")
        if isinstance(body.get("temperature"), _NUMBER) and not 0 <= body["temperature"] <= 1:
            problems.append("temperature must be between 0 and 1")
        system = body.get("system")
        if isinstance(system, list) and not all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"]
            for b in system
        ):
            problems.append("system must be a string or a list of non-empty text blocks")
        if "stop_sequences" in body and not all(isinstance(s, str) for s in body["stop_sequences"] or []):
            problems.append("stop_sequences must be strings")
        if isinstance(body.get("metadata"), dict) and set(body["metadata"]) - {"user_id"}:
            problems.append("metadata takes only user_id")
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") not in ("enabled", "disabled", "adaptive"):
            problems.append("thinking.type must be enabled, disabled or adaptive")
        problems += _check_messages(body.get("messages"))
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        return problems + _check_tools(tools, body.get("tool_choice"), thinking)

    def _messages(self, exchange: Exchange, reply: Dict[str, Any], index: int) -> tuple[int, dict]:
        request = exchange.json
        content: List[Dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        for n, call in enumerate(reply.get("tool_calls") or []):
            function = call.get("function") or {}
            arguments = function.get("arguments") or {}
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            content.append({
                "type": "tool_use", "id": call.get("id") or f"toolu_{index}_{n}",
                "name": function.get("name"), "input": arguments,
            })
        calls_tools = any(block["type"] == "tool_use" for block in content)
        system = request.get("system")
        input_tokens = _words(system) + sum(_words(m.get("content")) for m in request.get("messages") or [])
        body = {
            "id": f"msg_scripted_{index}_{uuid.uuid4().hex[:8]}",
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": request.get("model"),
            "stop_reason": reply.get("stop_reason") or ("tool_use" if calls_tools else "end_turn"),
            "stop_sequence": None,
            # a reply's usage_extra (cache_read_input_tokens, ...) is merged in
            "usage": {"input_tokens": input_tokens, "output_tokens": _words(content), **(reply.get("usage_extra") or {})},
        }
        self.sent.append(body)
        return 200, body

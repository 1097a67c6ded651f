"""A scripted chat-model HTTP server for tests.

``ScriptedChatServer`` speaks the OpenAI chat-completions dialect on
127.0.0.1 (ephemeral port), leniently (any body fields): ``POST
/v1/chat/completions`` returns a ``chat.completion`` object, each request
answered from a script of replies. (Ollama's dialect, strictly:
``tests/support/scripted_ollama_server.py``.)

A reply is an OpenAI chat ``message`` dict, e.g. ``{"role": "assistant",
"content": "hi"}`` or one carrying ``tool_calls``; its ``usage_extra``
(``{"prompt_tokens_details": {"cached_tokens": 3}}``) is merged into the
response's ``usage``. Replies are served in order,
one per request. Once
the script is exhausted the server answers 500 with a JSON error naming the
request index. Every request received takes the next index, including one
rejected with 400 (e.g. ``"stream": true``, which is also kept in
``violations``). Instead of a list, a callable ``reply_fn(request_json, index)``
can produce each reply (see :meth:`ScriptedChatServer.set_reply_fn`).

``OpenAIScriptedServer`` (OpenAI chat and embeddings) and
``AzureOpenAIScriptedServer`` check each request strictly against the
provider's reference (see the section at the end).
"""
from __future__ import annotations

import base64
import copy
import json
import re
import struct
import time
import uuid
from typing import Any

from tests.support.scripted_http import Exchange, ScriptedServer


def _count_tokens(value: Any) -> int:
    """A crude, deterministic token estimate: whitespace-separated words."""
    if value is None:
        return 0
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return len(value.split())


class ScriptedChatServer(ScriptedServer):
    """OpenAI-compatible chat server answering from a script
    (the fixture style of ``tests.support.scripted_http``)."""

    routes = {
        ("GET", "/v1/models"): "_models",
        ("POST", "/v1/chat/completions"): "_openai_chat",
    }
    unscripted = frozenset({"_models"})

    def check(self, exchange: Exchange) -> list[str]:
        body = exchange.json
        if exchange.method == "GET":
            return []
        if not isinstance(body, dict):
            return ["the body must be a JSON object"]
        if exchange.path.startswith("/v1/") and body.get("stream"):
            return ["streaming is not supported by the scripted server; send stream=false"]
        return []

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.root_url}/v1"

    def _models(self, exchange: Exchange, reply: Any, index: int) -> tuple[int, dict]:
        return 200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}]}

    def _openai_chat(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        return 200, _openai_response(exchange.json, reply, index)


def _openai_response(request: dict, message: dict, index: int) -> dict:
    message = copy.deepcopy(message)
    usage_extra = message.pop("usage_extra", None) or {}  # e.g. prompt_tokens_details: merged into usage
    message.setdefault("role", "assistant")
    message.setdefault("content", None)
    tool_calls = message.get("tool_calls")
    if tool_calls:
        for n, call in enumerate(tool_calls):
            call.setdefault("id", f"call_{index}_{n}")
            call.setdefault("type", "function")
            fn = call.setdefault("function", {})
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {})
    else:
        message.pop("tool_calls", None)
    prompt_tokens = sum(_count_tokens(m.get("content")) for m in request.get("messages") or [])
    completion_tokens = _count_tokens(message.get("content")) + _count_tokens(tool_calls)
    return {
        "id": f"chatcmpl-scripted-{index}-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            **usage_extra,
        },
    }


# -- strict dialects: OpenAI (chat + embeddings) and Azure OpenAI -------------------------
#
# What follows checks request bodies against the public references: OpenAI's
# "Create chat completion" and "Create embeddings", and Azure OpenAI's
# data-plane inference reference (same bodies; deployment in the path,
# api-version query, api-key or Entra ID bearer header).

# Body fields of POST /chat/completions (OpenAI reference; Azure adds data_sources
# and user_security_context).
CHAT_FIELDS = frozenset({
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
    "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
    "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
})
AZURE_CHAT_FIELDS = CHAT_FIELDS | {"data_sources", "user_security_context"}
EMBEDDINGS_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user"})
MAX_EMBEDDING_INPUTS = 2048
_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}
_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_REASONING_EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                404: "invalid_request_error", 429: "requests"}


def openai_error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    """OpenAI's documented error body: ``{"error": {"message", "type",
    "param", "code"}}`` (also Azure OpenAI's for these routes)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_tool_calls(where: str, calls: Any, seen_ids: set) -> list[str]:
    if not isinstance(calls, list) or not calls:
        return [f"{where}.tool_calls must be a non-empty array"]
    problems = []
    for n, call in enumerate(calls):
        at = f"{where}.tool_calls[{n}]"
        if not isinstance(call, dict) or set(call) - {"id", "type", "function"}:
            problems.append(f"{at} must be {{id, type, function}}, got {call!r:.120}")
            continue
        if not isinstance(call.get("id"), str) or not call["id"]:
            problems.append(f"{at}.id must be a non-empty string")
        else:
            seen_ids.add(call["id"])
        if call.get("type") != "function":
            problems.append(f"{at}.type must be 'function'")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments"), str):
            problems.append(f"{at}.function must be {{name: string, arguments: JSON text}}, got {function!r:.120}")
    return problems


def _check_messages(messages: Any) -> list[str]:
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty array"]
    problems: list[str] = []
    call_ids: set = set()
    for n, message in enumerate(messages):
        at = f"messages[{n}]"
        if not isinstance(message, dict):
            problems.append(f"{at} must be an object")
            continue
        role = message.get("role")
        if role not in _MESSAGE_FIELDS:
            problems.append(f"{at}.role {role!r} is not one of {sorted(_MESSAGE_FIELDS)}")
            continue
        unknown = set(message) - _MESSAGE_FIELDS[role]
        if unknown:
            problems.append(f"{at} ({role}) has unknown fields {sorted(unknown)}")
        content = message.get("content")
        if role == "assistant" and "tool_calls" in message:
            problems.extend(_check_tool_calls(at, message["tool_calls"], call_ids))
            if content is not None and not isinstance(content, (str, list)):
                problems.append(f"{at}.content must be a string, an array or null")
        elif not isinstance(content, (str, list)):
            problems.append(f"{at}.content must be a string or an array of parts, got {content!r:.80}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                problems.append(f"{at}.tool_call_id must be a non-empty string")
            elif call_id not in call_ids:
                problems.append(f"{at}.tool_call_id {call_id!r} answers no earlier assistant tool call")
    return problems


def _check_response_format(value: Any) -> list[str]:
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        return [f"response_format must have type text, json_object or json_schema, got {value!r:.120}"]
    if value["type"] != "json_schema":
        return [] if set(value) == {"type"} else [f"response_format {value['type']} takes only 'type'"]
    if set(value) != {"type", "json_schema"}:
        return [f"response_format json_schema must be {{type, json_schema}}, got keys {sorted(value)}"]
    spec = value["json_schema"]
    if not isinstance(spec, dict) or set(spec) - {"name", "description", "schema", "strict"}:
        return [f"response_format.json_schema has unknown fields: {spec!r:.120}"]
    problems = []
    if not isinstance(spec.get("name"), str) or not _FUNCTION_NAME.match(spec["name"]):
        problems.append(f"response_format.json_schema.name must match [a-zA-Z0-9_-]{{1,64}}, got {spec.get('name')!r}")
    if "schema" in spec and not isinstance(spec["schema"], dict):
        problems.append("response_format.json_schema.schema must be an object")
    if "strict" in spec and not isinstance(spec["strict"], (bool, type(None))):
        problems.append("response_format.json_schema.strict must be a boolean")
    return problems


def _check_tools(tools: Any) -> list[str]:
    if not isinstance(tools, list):
        return ["tools must be an array"]
    problems = []
    for n, spec in enumerate(tools):
        at = f"tools[{n}]"
        if not isinstance(spec, dict) or set(spec) != {"type", "function"} or spec["type"] != "function":
            problems.append(f"{at} must be {{type: 'function', function}}, got {spec!r:.120}")
            continue
        function = spec["function"]
        if not isinstance(function, dict) or set(function) - {"name", "description", "parameters", "strict"}:
            problems.append(f"{at}.function has unknown fields: {function!r:.120}")
            continue
        if not isinstance(function.get("name"), str) or not _FUNCTION_NAME.match(function["name"]):
            problems.append(f"{at}.function.name must match [a-zA-Z0-9_-]{{1,64}}")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            problems.append(f"{at}.function.parameters must be a JSON schema object")
        if "description" in function and not isinstance(function["description"], str):
            problems.append(f"{at}.function.description must be a string")
    return problems


def check_chat_body(body: Any, fields: frozenset = CHAT_FIELDS, model_required: bool = True) -> list[str]:
    """What in a chat-completions body the reference does not allow."""
    if not isinstance(body, dict):
        return ["the body must be a JSON object"]
    problems = [f"unknown body field {name!r}" for name in sorted(set(body) - fields)]
    if model_required and not isinstance(body.get("model"), str):
        problems.append("model (a string) is required")
    if body.get("stream"):
        problems.append("streaming is not supported by the scripted server; send stream=false")
    problems.extend(_check_messages(body.get("messages")))
    if "response_format" in body:
        problems.extend(_check_response_format(body["response_format"]))
    if "tools" in body:
        problems.extend(_check_tools(body["tools"]))
    if "temperature" in body and not (_is_number(body["temperature"]) and 0 <= body["temperature"] <= 2):
        problems.append(f"temperature must be a number in 0..2, got {body['temperature']!r}")
    for name in ("max_tokens", "max_completion_tokens"):
        if name in body and not (isinstance(body[name], int) and not isinstance(body[name], bool) and body[name] > 0):
            problems.append(f"{name} must be a positive integer, got {body[name]!r}")
    if "logprobs" in body and not isinstance(body["logprobs"], bool):
        problems.append("logprobs must be a boolean")
    if "top_logprobs" in body:
        value = body["top_logprobs"]
        if not (isinstance(value, int) and 0 <= value <= 20):
            problems.append(f"top_logprobs must be an integer in 0..20, got {value!r}")
        elif body.get("logprobs") is not True:
            problems.append("top_logprobs needs logprobs=true")
    if "reasoning_effort" in body and body["reasoning_effort"] not in _REASONING_EFFORTS:
        problems.append(f"reasoning_effort must be one of {sorted(_REASONING_EFFORTS)}")
    return problems


def check_embeddings_body(body: Any) -> list[str]:
    """What in an embeddings body the reference does not allow."""
    if not isinstance(body, dict):
        return ["the body must be a JSON object"]
    problems = [f"unknown body field {name!r}" for name in sorted(set(body) - EMBEDDINGS_FIELDS)]
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model (a string) is required")
    value = body.get("input")
    if isinstance(value, str):
        pass
    elif isinstance(value, list) and value:
        if len(value) > MAX_EMBEDDING_INPUTS:
            problems.append(f"input has {len(value)} items; at most {MAX_EMBEDDING_INPUTS} per request")
        tokens = all(isinstance(x, int) for x in value)
        token_lists = all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in value)
        texts = all(isinstance(x, str) and x for x in value)
        if not (texts or tokens or token_lists):
            problems.append("input must be a string, or an array of non-empty strings, of token ids, or of "
                            "token id arrays")
    else:
        problems.append(f"input must be a string or a non-empty array, got {value!r:.80}")
    if "encoding_format" in body and body["encoding_format"] not in ("float", "base64"):
        problems.append(f"encoding_format must be 'float' or 'base64', got {body['encoding_format']!r}")
    if "dimensions" in body and not (isinstance(body["dimensions"], int) and body["dimensions"] >= 1):
        problems.append(f"dimensions must be a positive integer, got {body['dimensions']!r}")
    if "user" in body and not isinstance(body["user"], str):
        problems.append("user must be a string")
    return problems


def _embeddings_response(request: dict, reply: dict, index: int) -> dict:
    """OpenAI's embeddings body for a neutral ``{"embeddings": [[...], ...]}``
    reply. ``data`` is listed in reverse index order (the reference orders it
    by nothing but ``index``), so a client that ignores ``index`` fails."""
    vectors = reply["embeddings"]
    base64_wanted = request.get("encoding_format") == "base64"
    data = []
    for n, vector in enumerate(vectors):
        value: Any = [float(x) for x in vector]
        if base64_wanted:
            value = base64.b64encode(struct.pack(f"<{len(value)}f", *value)).decode("ascii")
        data.append({"object": "embedding", "index": n, "embedding": value})
    inputs = request.get("input")
    tokens = sum(_count_tokens(x) for x in inputs) if isinstance(inputs, list) else _count_tokens(inputs)
    return {
        "object": "list", "data": data[::-1], "model": request.get("model") or "scripted",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


class OpenAIScriptedServer(ScriptedChatServer):
    """OpenAI's API, strictly: ``POST /v1/chat/completions`` and
    ``POST /v1/embeddings`` with ``Authorization: Bearer <key>``, bodies
    checked against the reference (``check_chat_body``,
    ``check_embeddings_body``), errors in OpenAI's documented shape
    (``openai_error_body``). Chat replies are neutral chat messages,
    embeddings replies ``{"embeddings": [[float, ...], ...]}``."""

    routes = {
        ("GET", "/v1/models"): "_models",
        ("POST", "/v1/chat/completions"): "_openai_chat",
        ("POST", "/v1/embeddings"): "_openai_embeddings",
    }

    def check(self, exchange: Exchange) -> list[str]:
        problems = []
        if not exchange.headers.get("authorization", "").startswith("Bearer "):
            problems.append("missing 'Authorization: Bearer <key>' header")
        if exchange.path.rstrip("/").endswith("/embeddings"):
            return problems + check_embeddings_body(exchange.json)
        return problems + check_chat_body(exchange.json)

    def error_body(self, status: int, message: str) -> dict:
        return openai_error_body(status, message)

    def _openai_embeddings(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        return 200, _embeddings_response(exchange.json, reply, index)


class AzureOpenAIScriptedServer(ScriptedServer):
    """Azure OpenAI's data-plane API: ``POST
    /openai/deployments/{deployment}/chat/completions`` and ``.../embeddings``,
    each with an ``api-version`` query parameter and an ``api-key`` header
    (or ``Authorization: Bearer <Entra ID token>``); bodies as OpenAI's
    (``model`` optional). ``deployments`` lists each request's deployment
    name; ``base_url`` is the endpoint (``azure_endpoint``). Replies as
    ``OpenAIScriptedServer``'s."""

    routes = {
        ("POST", r"/openai/deployments/[^/]+/chat/completions"): "_chat",
        ("POST", r"/openai/deployments/[^/]+/embeddings"): "_embeddings",
    }

    def __init__(self, replies: list | None = None, latency_s: float = 0.0) -> None:
        super().__init__(replies, latency_s)
        self.deployments: list[str] = []

    @property
    def base_url(self) -> str:
        """The endpoint, e.g. ``http://127.0.0.1:PORT`` (``azure_endpoint``)."""
        return self.root_url

    def check(self, exchange: Exchange) -> list[str]:
        self.deployments.append(exchange.path.split("/")[3])
        problems = []
        if not (exchange.query.get("api-version") or [""])[0]:
            problems.append("missing the api-version query parameter")
        if not exchange.headers.get("api-key") and not exchange.headers.get("authorization", "").startswith("Bearer "):
            problems.append("missing the 'api-key' header (or 'Authorization: Bearer <token>')")
        if exchange.path.rstrip("/").endswith("/embeddings"):
            return problems + check_embeddings_body(exchange.json)
        return problems + check_chat_body(exchange.json, AZURE_CHAT_FIELDS, model_required=False)

    def error_body(self, status: int, message: str) -> dict:
        return openai_error_body(status, message)

    def _chat(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        return 200, _openai_response(exchange.json, reply, index)

    def _embeddings(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        return 200, _embeddings_response(exchange.json, reply, index)

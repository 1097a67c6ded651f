"""A scripted DashScope server: the native (non OpenAI-compatible) API the
``dashscope`` SDK speaks, in the fixture style of ``tests.support.scripted_http``.

Routes (DashScope's public API reference):

* ``POST /api/v1/services/aigc/text-generation/generation``: body ``{"model",
  "input": {"messages": [...]}, "parameters": {"result_format", "tools",
  "temperature", "response_format", ...}}``; answers ``{"request_id",
  "output": {"choices": [{"finish_reason", "message"}]}, "usage":
  {"input_tokens", "output_tokens", "total_tokens"}}``.
* ``POST /api/v1/services/embeddings/text-embedding/text-embedding``: body
  ``{"model", "input": {"texts": [...]}, "parameters": {"text_type"?,
  "dimension"?, ...}}``; answers ``{"request_id", "output": {"embeddings":
  [{"text_index", "embedding"}]}, "usage": {"total_tokens"}}``.

Errors use DashScope's body ``{"request_id", "code", "message"}``.

Replies are dialect-neutral: an OpenAI chat message dict for generation (a
``reasoning_content`` key is passed through, as thinking models send it),
``{"embeddings": [[float, ...], ...]}`` (one per text, in text order) for
embeddings, or a ``ScriptedError``. Embeddings are listed in reverse
``text_index`` order: the reference pairs each vector with its
``text_index`` instead of promising an order, so a client must sort.

Restrictions of this server (not of DashScope): no streaming (``X-DashScope-SSE``)
and only ``result_format: "message"``.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any, Dict, List

from tests.support.scripted_http import Exchange, ScriptedServer

__all__ = ["DashScopeScriptedServer", "GENERATION_PATH", "EMBEDDING_PATH"]

GENERATION_PATH = "/api/v1/services/aigc/text-generation/generation"
EMBEDDING_PATH = "/api/v1/services/embeddings/text-embedding/text-embedding"

_ERROR_CODES = {
    400: "InvalidParameter", 401: "InvalidApiKey", 403: "AccessDenied", 404: "ModelNotFound",
    429: "Throttling", 500: "InternalError", 503: "ServiceUnavailable",
}
_GENERATION_PARAMETERS = {
    "result_format": str, "temperature": (int, float), "top_p": (int, float), "top_k": int,
    "max_tokens": int, "seed": int, "stop": (str, list), "repetition_penalty": (int, float),
    "presence_penalty": (int, float), "incremental_output": bool, "enable_search": bool,
    "search_options": dict, "tools": list, "tool_choice": (str, dict), "parallel_tool_calls": bool,
    "response_format": dict, "enable_thinking": bool, "thinking_budget": int, "n": int,
    "logprobs": bool, "top_logprobs": int,
}
_MESSAGE_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls", "partial", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id", "name"},
}
_EMBEDDING_PARAMETERS = {"text_type": str, "dimension": int, "output_type": str, "instruct": str}
_TEXTS_PER_REQUEST = {"text-embedding-v1": 25, "text-embedding-v2": 25}
_DIMENSIONS = {2048, 1536, 1024, 768, 512, 256, 128, 64}


def _words(value: Any) -> int:
    """A crude, deterministic token count: whitespace-separated words."""
    if value is None:
        return 0
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return len(value.split())


def _check_type(where: str, value: Any, kind: Any) -> List[str]:
    if kind in (int, (int, float)) and isinstance(value, bool):
        return [f"{where} must be a number, got a bool"]
    return [] if isinstance(value, kind) else [f"{where} must be {kind}, got {type(value).__name__}"]


def _check_tool(n: int, tool: Any) -> List[str]:
    where = f"parameters.tools[{n}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or set(tool) != {"type", "function"}:
        return [f"{where} must be {{'type': 'function', 'function': {{...}}}}, got {tool!r:.120}"]
    function = tool["function"]
    problems = []
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return [f"{where}.function needs a string name"]
    unknown = set(function) - {"name", "description", "parameters"}
    if unknown:
        problems.append(f"{where}.function has unknown fields {sorted(unknown)}")
    if not isinstance(function.get("parameters", {}), dict):
        problems.append(f"{where}.function.parameters must be a JSON schema object")
    if len(function.get("description") or "") > 1024:
        problems.append(f"{where}.function.description is longer than 1024 characters")
    return problems


def _check_message(n: int, message: Any, call_ids: set) -> List[str]:
    where = f"input.messages[{n}]"
    if not isinstance(message, dict) or message.get("role") not in _MESSAGE_KEYS:
        return [f"{where} needs a role among {sorted(_MESSAGE_KEYS)}, got {message!r:.120}"]
    role = message["role"]
    problems = []
    unknown = set(message) - _MESSAGE_KEYS[role]
    if unknown:
        problems.append(f"{where} ({role}) has unknown fields {sorted(unknown)}")
    if not isinstance(message.get("content"), str):
        problems.append(f"{where}.content must be a string, got {type(message.get('content')).__name__}")
    if role == "system" and n != 0:
        problems.append(f"{where}: a system message must be the first message")
    for c, call in enumerate(message.get("tool_calls") or []):
        ok = (
            isinstance(call, dict) and isinstance(call.get("id"), str) and call.get("type") == "function"
            and isinstance(call.get("function"), dict) and isinstance(call["function"].get("name"), str)
            and isinstance(call["function"].get("arguments"), str)
        )
        if not ok:
            problems.append(
                f"{where}.tool_calls[{c}] must be {{id, type: 'function', function: {{name, arguments: JSON text}}}}, "
                f"got {call!r:.160}"
            )
        else:
            call_ids.add(call["id"])
    if role == "tool" and message.get("tool_call_id") not in call_ids:
        problems.append(f"{where}: tool_call_id {message.get('tool_call_id')!r} answers no earlier assistant tool call")
    return problems


class DashScopeScriptedServer(ScriptedServer):
    """DashScope's native text-generation and text-embedding API, scripted
    (see the module docstring).

    Attributes:
        sent: The bodies of the successful responses, in order (what the
            SDK received; tests compare the client's reading with them).
    """

    routes = {
        ("POST", GENERATION_PATH): "_generation",
        ("POST", EMBEDDING_PATH): "_embedding",
    }

    def __init__(self, replies: list | None = None, latency_s: float = 0.0) -> None:
        super().__init__(replies, latency_s)
        self.sent: List[dict] = []

    @property
    def base_url(self) -> str:
        """What ``TongyiChatModelConnection.base_url`` takes: ``http://127.0.0.1:PORT/api/v1``."""
        return f"{self.root_url}/api/v1"

    def error_body(self, status: int, message: str) -> dict:
        code = _ERROR_CODES.get(status, "InternalError" if status >= 500 else "InvalidParameter")
        return {"request_id": str(uuid.uuid4()), "code": code, "message": message}

    # -- what the reference allows ----------------------------------------------------
    def check(self, exchange: Exchange) -> List[str]:
        problems = []
        auth = exchange.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[len("Bearer "):].strip():
            problems.append("missing 'Authorization: Bearer <api key>' header")
        if "application/json" not in exchange.headers.get("content-type", ""):
            problems.append("Content-Type must be application/json")
        if exchange.headers.get("x-dashscope-sse", "").lower() == "enable":
            problems.append("streaming (X-DashScope-SSE) is not supported by the scripted server")
        body = exchange.json
        if not isinstance(body, dict):
            return [*problems, "the body must be a JSON object"]
        unknown = set(body) - {"model", "input", "parameters"}
        if unknown:
            problems.append(f"unknown top-level fields {sorted(unknown)}")
        if not isinstance(body.get("model"), str) or not body.get("model"):
            problems.append("model must be a non-empty string")
        if not isinstance(body.get("input"), dict):
            return [*problems, "input must be an object"]
        if not isinstance(body.get("parameters", {}), dict):
            return [*problems, "parameters must be an object"]
        if exchange.path.rstrip("/") == GENERATION_PATH:
            return problems + self._check_generation(body)
        return problems + self._check_embedding(body)

    def _check_generation(self, body: dict) -> List[str]:
        problems: List[str] = []
        inputs, parameters = body["input"], body.get("parameters", {})
        if set(inputs) != {"messages"}:
            problems.append(f"input must hold exactly 'messages' (this server scripts chat), got {sorted(inputs)}")
        messages = inputs.get("messages")
        if not isinstance(messages, list) or not messages:
            return [*problems, "input.messages must be a non-empty list"]
        call_ids: set = set()
        for n, message in enumerate(messages):
            problems += _check_message(n, message, call_ids)
        for name, value in parameters.items():
            if name not in _GENERATION_PARAMETERS:
                problems.append(f"unknown parameter {name!r}")
            else:
                problems += _check_type(f"parameters.{name}", value, _GENERATION_PARAMETERS[name])
        if parameters.get("result_format") != "message":
            problems.append("parameters.result_format must be 'message' (the scripted server answers only that format)")
        temperature = parameters.get("temperature")
        if isinstance(temperature, (int, float)) and not 0 <= temperature < 2:
            problems.append(f"parameters.temperature must be in [0, 2), got {temperature}")
        for n, tool in enumerate(parameters.get("tools") or []):
            problems += _check_tool(n, tool)
        response_format = parameters.get("response_format")
        if isinstance(response_format, dict):
            kind = response_format.get("type")
            if kind not in ("text", "json_object", "json_schema"):
                problems.append(f"parameters.response_format.type {kind!r} is not text, json_object or json_schema")
            prompt_text = " ".join(
                m.get("content") or "" for m in messages if isinstance(m, dict) and m.get("role") in ("system", "user")
            )
            if kind == "json_object" and "json" not in prompt_text.lower():
                # DashScope's own error text for this case (structured-output guide).
                problems.append(
                    "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'"
                )
        return problems

    def _check_embedding(self, body: dict) -> List[str]:
        problems: List[str] = []
        inputs, parameters = body["input"], body.get("parameters", {})
        texts = inputs.get("texts")
        if set(inputs) != {"texts"} or not isinstance(texts, list) or not texts:
            return [*problems, f"input must be {{'texts': [str, ...]}} with at least one text, got {inputs!r:.120}"]
        if not all(isinstance(t, str) for t in texts):
            problems.append("input.texts must all be strings")
        limit = _TEXTS_PER_REQUEST.get(body.get("model"), 10)
        if len(texts) > limit:
            problems.append(f"batch size is invalid: {len(texts)} texts, {body.get('model')} takes at most {limit}")
        for name, value in parameters.items():
            if name not in _EMBEDDING_PARAMETERS:
                problems.append(f"unknown parameter {name!r}")
            else:
                problems += _check_type(f"parameters.{name}", value, _EMBEDDING_PARAMETERS[name])
        if parameters.get("text_type", "document") not in ("query", "document"):
            problems.append(f"parameters.text_type must be 'query' or 'document', got {parameters['text_type']!r}")
        if "dimension" in parameters and parameters["dimension"] not in _DIMENSIONS:
            problems.append(f"parameters.dimension must be one of {sorted(_DIMENSIONS)}, got {parameters['dimension']}")
        return problems

    # -- neutral replies -> DashScope bodies ----------------------------------------------
    def _generation(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        request = exchange.json
        message: Dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
        if reply.get("reasoning_content"):
            message["reasoning_content"] = reply["reasoning_content"]
        calls = []
        for n, call in enumerate(reply.get("tool_calls") or []):
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments or {})
            calls.append({
                "index": n,
                "id": call.get("id") or f"call_{index}_{n}",
                "type": "function",
                "function": {"name": function.get("name"), "arguments": arguments},
            })
        if calls:
            message["tool_calls"] = calls
        input_tokens = sum(_words(m.get("content")) for m in request["input"]["messages"])
        output_tokens = _words(message["content"]) + _words(calls or None)
        body = {
            "request_id": str(uuid.uuid4()),
            "output": {"choices": [{"finish_reason": "tool_calls" if calls else "stop", "message": message}]},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens,
                      **(reply.get("usage_extra") or {})},  # e.g. prompt_tokens_details

        }
        return self._sent(body)

    def _embedding(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        texts = exchange.json["input"]["texts"]
        vectors = reply.get("embeddings") or []
        if len(vectors) != len(texts):
            return 500, self.error_body(500, f"script reply #{index} holds {len(vectors)} embeddings "
                                             f"for {len(texts)} texts")
        items = [{"text_index": i, "embedding": list(v)} for i, v in enumerate(vectors)]
        body = {
            "request_id": str(uuid.uuid4()),
            "output": {"embeddings": items[::-1]},
            "usage": {"total_tokens": sum(_words(t) for t in texts)},
        }
        return self._sent(body)

    def _sent(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.sent.append(copy.deepcopy(body))
        return 200, body

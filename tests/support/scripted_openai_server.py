"""A scripted chat-model HTTP server for tests.

Speaks two dialects on 127.0.0.1 (ephemeral port), each request answered from
a script of replies:

* OpenAI: ``POST /v1/chat/completions`` returns a ``chat.completion`` object.
* Ollama: ``POST /api/chat`` returns a non-streaming chat response.

A reply is an OpenAI chat ``message`` dict, e.g. ``{"role": "assistant",
"content": "hi"}`` or one carrying ``tool_calls``. Replies are served in order,
one per request (both dialects share the script and the request counter). Once
the script is exhausted the server answers 500 with a JSON error naming the
request index. Every request received takes the next index, including one
rejected with 400 (e.g. ``"stream": true``, which is also kept in
``violations``). Instead of a list, a callable ``reply_fn(request_json, index)``
can produce each reply (see :meth:`ScriptedChatServer.set_reply_fn`).
"""
from __future__ import annotations

import copy
import json
import time
import uuid
from datetime import datetime, timezone
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
    """OpenAI- and Ollama-compatible chat server answering from a script
    (the fixture style of ``tests.support.scripted_http``)."""

    routes = {
        ("GET", "/v1/models"): "_models",
        ("POST", "/v1/chat/completions"): "_openai_chat",
        ("POST", "/api/chat"): "_ollama_chat",
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

    def _ollama_chat(self, exchange: Exchange, reply: dict, index: int) -> tuple[int, dict]:
        return 200, _ollama_response(exchange.json, reply)


def _openai_response(request: dict, message: dict, index: int) -> dict:
    message = copy.deepcopy(message)
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
        },
    }


def _ollama_response(request: dict, message: dict) -> dict:
    out: dict[str, Any] = {
        "role": message.get("role") or "assistant",
        "content": message.get("content") or "",
    }
    tool_calls = message.get("tool_calls")
    if tool_calls:
        converted = []
        for call in tool_calls:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                args = json.loads(args) if args.strip() else {}
            converted.append({"function": {"name": fn.get("name"), "arguments": args or {}}})
        out["tool_calls"] = converted
    prompt_tokens = sum(_count_tokens(m.get("content")) for m in request.get("messages") or [])
    eval_tokens = _count_tokens(out["content"]) + _count_tokens(tool_calls)
    return {
        "model": request.get("model") or "scripted",
        "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        "message": out,
        "done": True,
        "done_reason": "stop",
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": 0,
        "eval_count": eval_tokens,
        "eval_duration": 0,
    }

"""Conversions between the runtime's messages and the OpenAI chat-completions
API (also spoken by Azure OpenAI), the one copy both connections use; names
and parameters as Flink Agents 0.3.1's ``openai_utils``.

Also the error mapping of the ``openai`` SDK (``openai_call_error``) and the
structured-output ``response_format`` (``json_schema_response_format``),
shared by the chat and embedding connections.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Sequence, Tuple

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.errors import (
    ModelCallError,
    ModelContextTooLong,
    ModelResponseError,
    ModelUnreachable,
    error_for_status,
    retry_after_s,
)
from flink_agents.api.tools.tool import Tool
from flink_agents.integrations.chat_models.chat_model_utils import parse_tool_arguments, to_openai_tool

__all__ = [
    "DEFAULT_OPENAI_API_BASE_URL",
    "PLACEHOLDER_API_KEY",
    "api_key_or_placeholder",
    "convert_from_openai_message",
    "convert_to_openai_message",
    "convert_to_openai_messages",
    "from_openai_completion",
    "json_schema_response_format",
    "openai_call_error",
    "resolve_openai_credentials",
    "to_openai_messages",
    "to_openai_tools",
]

DEFAULT_OPENAI_API_BASE_URL = "https://api.openai.com/v1"
# OpenAI's error code for a prompt over the model's context window.
_CONTEXT_LENGTH_CODE = "context_length_exceeded"


def resolve_openai_credentials(api_key: str | None = None, api_base_url: str | None = None) -> Tuple[str, str]:
    """The API key and base URL to use, as Flink Agents 0.3.1 resolves them.

    Each is taken from the argument, else the environment (``OPENAI_API_KEY``;
    ``OPENAI_API_BASE_URL``, then the SDK's own ``OPENAI_BASE_URL``), else
    the ``openai`` module's globals (``openai.api_key``, ``openai.base_url``),
    else a default (``""``; ``https://api.openai.com/v1``).

    Returns:
        ``(api_key, base_url)``; the key is ``""`` when none is configured.
    """
    import openai

    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or openai.api_key or ""
    url = api_base_url
    if url is None:
        url = (os.environ.get("OPENAI_API_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
               or openai.base_url or DEFAULT_OPENAI_API_BASE_URL)
    return key, str(url)


# Sent when no key is configured to a server of the user's own (a local
# OpenAI-compatible server ignores it; the SDK refuses to start without one).
PLACEHOLDER_API_KEY = "unused"


def api_key_or_placeholder(api_key: str | None, base_url: str | None, owner: str) -> str:
    """The key a client of ``owner`` (a connection's class name) sends: the
    configured one (``resolve_openai_credentials``), else a placeholder for a
    server of the user's own.

    Raises:
        ModelAuthenticationError: No key is configured and the requests
            would go to OpenAI's own API (``https://api.openai.com``), which
            refuses every request without one: said before the first
            request, naming where a key comes from, instead of as a 401 (or,
            offline, as an unreachable server).
    """
    key, url = resolve_openai_credentials(api_key, base_url)
    if key:
        return key
    if url.startswith(DEFAULT_OPENAI_API_BASE_URL.rsplit("/", 1)[0]):  # https://api.openai.com
        from flink_agents.api.chat_models.errors import ModelAuthenticationError

        raise ModelAuthenticationError(
            f"{owner}: no API key for {url}: set api_key, or OPENAI_API_KEY where the job runs "
            "(a base_url of your own, such as a local server, needs none)", provider="openai",
        )
    return PLACEHOLDER_API_KEY


def _tool_call_to_openai(call: Dict[str, Any]) -> Dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments or {})
    # The runtime's id, never original_id: providers reuse ids across turns.
    return {
        "id": str(call["id"]),
        "type": "function",
        "function": {"name": function.get("name"), "arguments": arguments},
    }


def convert_to_openai_message(message: ChatMessage) -> Dict[str, Any]:
    """One chat-completions message for ``message``.

    Returns:
        ``{"role", "content"}``; an assistant message that calls tools has
        ``content`` None when empty and ``tool_calls`` (ids the runtime's,
        arguments as JSON text); a tool message has ``tool_call_id`` (from
        ``extra_args["tool_call_id"]``).

    Raises:
        ValueError: A tool message has no ``tool_call_id``, or the role is unknown.
    """
    role = MessageRole(message.role)
    if role == MessageRole.TOOL:
        call_id = message.extra_args.get("tool_call_id")
        if not call_id:
            raise ValueError(f"tool message has no extra_args['tool_call_id']: {message.content[:80]!r}")
        return {"role": "tool", "tool_call_id": str(call_id), "content": message.content}
    if role == MessageRole.ASSISTANT and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [_tool_call_to_openai(call) for call in message.tool_calls],
        }
    return {"role": role.value, "content": message.content}


def convert_to_openai_messages(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """Chat-completions ``messages`` for a conversation, oldest first (see
    ``convert_to_openai_message``).

    Args:
        messages: An assistant message's ``tool_calls`` are in the runtime's
            shape (``{"id", "type", "function": {"name", "arguments": dict},
            "original_id"}``); a tool message carries the call's runtime id in
            ``extra_args["tool_call_id"]``.
    """
    return [convert_to_openai_message(m) for m in messages]


# This project's earlier name, kept for callers of openai_chat_model.
to_openai_messages = convert_to_openai_messages


def to_openai_tools(tools: Sequence[Tool]) -> List[Dict[str, Any]]:
    """Chat-completions ``tools`` for the tools offered: one
    ``{"type": "function", "function": {"name", "description", "parameters"}}``
    each (``chat_model_utils.to_openai_tool``; a description over 1024
    characters is sent as it is: the API does not bound it)."""
    return [to_openai_tool(metadata=t.metadata, skip_length_check=True) for t in tools]


def convert_from_openai_message(message: Any, extra_args: Dict[str, Any], *, provider: str = "openai") -> ChatMessage:
    """The runtime's message for a chat-completions reply message.

    Args:
        message: The SDK's ``ChatCompletionMessage`` (a choice's ``message``).
        extra_args: Becomes the reply's ``extra_args`` (usage, model name...).
        provider: Named in errors (``"openai"``, ``"azure"``).

    Returns:
        ``ChatMessage(role=ASSISTANT)`` with the text (``""`` if none) and the
        tool calls as ``{"id", "type": "function", "function": {"name",
        "arguments": dict}, "original_id"}`` (both ids the provider's; the
        runtime assigns its own); arguments that are not a JSON object stay
        the text the model sent (``parse_tool_arguments``: the tool action
        answers them with an error result the model can correct).

    Raises:
        ModelResponseError: A tool call is not a function call.
    """
    calls = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if getattr(call, "type", "function") != "function" or function is None:
            raise ModelResponseError(
                f"the model made a {call.type!r} tool call; only function calls are supported", provider
            )
        calls.append({
            "id": call.id,
            "type": "function",
            "function": {"name": function.name, "arguments": parse_tool_arguments(function.name, function.arguments,
                                                                             provider)},
            "original_id": call.id,
        })
    return ChatMessage(
        role=MessageRole.ASSISTANT, content=message.content or "", tool_calls=calls, extra_args=dict(extra_args)
    )


def openai_usage(usage: Any) -> Dict[str, int]:
    """A ``CompletionUsage`` as ``{"prompt_tokens", "completion_tokens"[,
    "cached_tokens"][, "reasoning_tokens"]}`` (the details only when
    reported: ``runtime.execution.usage``)."""
    fields: Dict[str, int] = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    if isinstance(cached, int):
        fields["cached_tokens"] = cached
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if isinstance(reasoning, int):
        fields["reasoning_tokens"] = reasoning
    return fields


def from_openai_completion(completion: Any, *, provider: str = "openai", model_name: str | None = None) -> ChatMessage:
    """The reply message of a ``ChatCompletion`` (its first choice).

    Args:
        completion: The SDK's ``ChatCompletion``.
        provider: Named in errors.
        model_name: Reported as ``extra_args["model_name"]``; None takes the
            completion's ``model``.

    Returns:
        As ``convert_from_openai_message``, with ``extra_args``:
        ``"usage": {"prompt_tokens", "completion_tokens"[, "cached_tokens"][,
        "reasoning_tokens"]}`` when reported (the last two from
        ``prompt_tokens_details.cached_tokens`` and
        ``completion_tokens_details.reasoning_tokens``, only when the
        provider reports them; ``prompt_tokens`` counts the cached ones,
        ``completion_tokens`` the reasoning ones, as OpenAI does),
        ``"model_name"`` and ``"stop_reason"`` (the choice's ``finish_reason``).

    Raises:
        ModelResponseError: No choice came back, or a tool call is not a function call.
    """
    if not completion.choices:
        raise ModelResponseError(f"chat completion {getattr(completion, 'id', '?')!r} has no choices", provider)
    choice = completion.choices[0]
    extra: Dict[str, Any] = {}
    usage = getattr(completion, "usage", None)
    if usage is not None:
        extra["usage"] = openai_usage(usage)
    name = model_name or getattr(completion, "model", None)
    if name:
        extra["model_name"] = name
    if getattr(choice, "finish_reason", None):
        extra["stop_reason"] = choice.finish_reason
    return convert_from_openai_message(choice.message, extra, provider=provider)


def json_schema_response_format(schema: Any, strict: bool) -> Dict[str, Any]:
    """The chat-completions ``response_format`` asking for JSON matching an
    ``OutputSchema`` (OpenAI's Structured Outputs): ``{"type": "json_schema",
    "json_schema": {"name", "schema", "strict"}}``. With ``strict`` the
    schema is first made strict (``strict_json_schema``).

    For a pydantic model class (immutable, unlike a JSON schema ``dict``)
    the format is built once per class and returned again: pydantic's
    schema generation and its copy cost about 40 us a call. Callers must
    not change it (the SDK reads it into a request of its own).
    """
    if isinstance(schema.output_schema, type):
        return _model_response_format(schema, bool(strict))
    return _response_format(schema, strict)


def _response_format(schema: Any, strict: bool) -> Dict[str, Any]:
    body = schema.json_schema()
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.name, "schema": strict_json_schema(body) if strict else body, "strict": bool(strict)},
    }


# (model class, strict) -> its response format; bounded by the classes a job declares.
_MODEL_FORMATS: Dict[Tuple[type, bool], Dict[str, Any]] = {}


def _model_response_format(schema: Any, strict: bool) -> Dict[str, Any]:
    key = (schema.output_schema, strict)
    made = _MODEL_FORMATS.get(key)
    if made is None:
        made = _MODEL_FORMATS[key] = _response_format(schema, strict)
    return made


def strict_json_schema(schema: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``schema`` that OpenAI's strict mode accepts: every object
    (at any depth, in ``$defs`` too) sets ``additionalProperties: false``
    and lists all its properties as ``required``, as the Structured Outputs
    guide requires ("all fields must be required"; an optional field stays
    optional in meaning when its schema allows ``null``, as pydantic's
    ``Optional`` fields do). Defaults are dropped: strict mode does not take
    the ``default`` keyword."""
    if not isinstance(schema, dict):
        return schema
    out: Dict[str, Any] = {}
    for key, value in schema.items():
        if key == "default":
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: strict_json_schema(sub) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            out[key] = [strict_json_schema(sub) for sub in value]
        elif key in ("items", "not", "additionalProperties") and isinstance(value, dict):
            out[key] = strict_json_schema(value)
        else:
            out[key] = value
    if out.get("type") == "object" or isinstance(out.get("properties"), dict):
        out["additionalProperties"] = False
        out["required"] = list((out.get("properties") or {}).keys())
    return out


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(getattr(exc, "message", None) or exc)


def openai_call_error(exc: Exception, provider: str) -> ModelCallError:
    """The ``ModelCallError`` for an ``openai`` SDK error (after the SDK's
    own retries); raise it ``from exc``.

    * ``APITimeoutError``, ``APIConnectionError``: ``ModelUnreachable``;
    * ``APIStatusError``: the class for its HTTP status
      (``errors.error_for_status``) with the message of the error body
      (``{"error": {"message", "type", "param", "code"}}``); the code
      ``context_length_exceeded`` is ``ModelContextTooLong``;
    * ``APIResponseValidationError`` (a body the SDK cannot read):
      ``ModelResponseError``.

    Raises:
        TypeError: ``exc`` is not an ``openai.APIError``.
    """
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ModelUnreachable(f"request timed out: {exc}", provider)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return ModelUnreachable(f"{exc}{detail}", provider)
    if isinstance(exc, openai.APIStatusError):
        message = _error_message(exc)
        if getattr(exc, "code", None) == _CONTEXT_LENGTH_CODE:
            return ModelContextTooLong(message, provider, exc.status_code)
        return error_for_status(
            exc.status_code, message, provider, retry_after_s=retry_after_s(getattr(exc.response, "headers", None)),
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelResponseError(f"unreadable response: {exc}", provider, exc.status_code)
    if isinstance(exc, openai.APIError):
        return ModelResponseError(str(exc), provider)
    raise TypeError(f"not an openai SDK error: {type(exc).__name__}: {exc}")

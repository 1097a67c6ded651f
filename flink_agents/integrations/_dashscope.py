"""What the DashScope (Tongyi) chat and embedding connections share: the API
key, and turning the SDK's responses and exceptions into
``api.chat_models.errors`` (the SDK returns HTTP errors as responses, it
does not raise them)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelCallError,
    ModelResponseError,
    ModelUnreachable,
    error_for_status,
)

__all__ = ["API_KEY_ENV", "PROVIDER", "check_response", "dashscope_failure", "resolve_api_key"]

PROVIDER = "tongyi"
API_KEY_ENV = "DASHSCOPE_API_KEY"


def resolve_api_key(api_key: str | None) -> str:
    """``api_key``, else the ``DASHSCOPE_API_KEY`` environment variable.

    Raises:
        ModelAuthenticationError: Neither is set (terminal: no call is made).
    """
    key = api_key or os.environ.get(API_KEY_ENV)
    if not key:
        raise ModelAuthenticationError(
            f"no DashScope API key: set the connection's api_key or the {API_KEY_ENV} environment variable",
            PROVIDER,
        )
    return key


def dashscope_failure(exc: BaseException, what: str) -> ModelCallError:
    """The ``ModelCallError`` for an exception the SDK (or its HTTP library) raised.

    A reply that is not JSON is ``ModelResponseError``; transport failures
    (``requests.RequestException``, ``aiohttp.ClientError``, timeouts,
    ``OSError``) are ``ModelUnreachable``; anything else is a request the
    SDK refused to build (``dashscope.common.error.*``): ``ModelBadRequest``.
    """
    # requests and aiohttp are the SDK's own dependencies: installed with it.
    import aiohttp
    import requests

    text = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, (json.JSONDecodeError, requests.exceptions.InvalidJSONError, aiohttp.ContentTypeError)):
        return ModelResponseError(text, PROVIDER)
    if isinstance(exc, (OSError, asyncio.TimeoutError, requests.RequestException, aiohttp.ClientError)):
        return ModelUnreachable(text, PROVIDER)
    return error_for_status(400, text, PROVIDER)


def check_response(response: Any) -> None:
    """Raise the ``ModelCallError`` of a DashScope response that is not HTTP 200.

    Args:
        response: The SDK's ``DashScopeAPIResponse`` (or a subclass): its
            ``status_code``, ``code`` and ``message`` come from DashScope's
            error body ``{"request_id", "code", "message"}``.
    """
    status = int(response.status_code)
    if status == 200:
        return
    code = response.code or "Unknown"
    message = f"{code}: {response.message}"
    if response.request_id:
        message += f" (request_id {response.request_id})"
    raise error_for_status(status, message, PROVIDER)

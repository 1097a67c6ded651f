"""Errors of model providers (chat and embedding calls), classified once.

Every built-in connection turns its SDK's exceptions into one of these (the
SDK's exception stays the ``__cause__``), after the SDK's own retries, so an
agent's error strategy sees one vocabulary whatever the provider:

===========================  ==========  ======================================
class                        retryable   typical cause
===========================  ==========  ======================================
``ModelRateLimited``         yes         HTTP 429, a quota per minute
``ModelOverloaded``          yes         Anthropic 529 ``overloaded_error``, 503
``ModelServerError``         yes         any other 5xx
``ModelUnreachable``         yes         connection refused, reset, timed out
``ModelContextTooLong``      no          the prompt exceeds the context window
``ModelBadRequest``          no          400/404/422: a setting or message the
                                         provider refuses
``ModelAuthenticationError`` no          401/403: key missing, wrong or denied
``ModelResponseError``       no          a reply the runtime cannot read (a tool
                                         call whose arguments are not JSON, ...),
                                         or ``StructuredOutputError``: an answer
                                         still not matching its output schema
===========================  ==========  ======================================

The runtime (``runtime.errors.classify``) treats a non-retryable one as
terminal: the record fails (or goes to the error output under ``skip``)
without the retries of the ``retry`` strategy, since a retry would send the
same request and get the same answer.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ModelAuthenticationError", "ModelBadRequest", "ModelCallError", "ModelContextTooLong", "ModelOverloaded",
    "ModelRateLimited", "ModelResponseError", "ModelServerError", "ModelUnreachable", "StructuredOutputError",
    "error_for_status", "retry_after_s",
]


class ModelCallError(Exception):
    """A model provider refused or failed a call.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, ``"ollama"``, ``"azure"``,
            ``"tongyi"``, ...
        status: The HTTP status code, None when no response came back.
        retryable: Whether sending the same request again may succeed.
        retry_after_s: How long the provider asked to wait before the next
            request (its ``Retry-After``/``retry-after-ms`` header), in
            seconds; None when it did not say. The runtime's rate limits
            hold the connection's calls in the subtask that long
            (``runtime.features.rate_limits``).
    """

    retryable = False

    def __init__(
        self, message: str, provider: str = "", status: int | None = None, retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, provider, status)
        self.provider = provider
        self.status = status
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        message = self.args[0] if self.args else ""
        where = f"{self.provider} " if self.provider else ""
        code = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{where}{code}{message}".strip()


class ModelRateLimited(ModelCallError):
    """Too many requests (HTTP 429); retry after a while."""

    retryable = True


class ModelOverloaded(ModelCallError):
    """The provider is overloaded (Anthropic's 529, a 503); retry later."""

    retryable = True


class ModelServerError(ModelCallError):
    """The provider failed (HTTP 5xx other than overload)."""

    retryable = True


class ModelUnreachable(ModelCallError):
    """No response: connection refused or reset, or the request timed out."""

    retryable = True


class ModelContextTooLong(ModelCallError):
    """The request exceeds the model's context window (terminal: the same
    conversation is as long next time)."""


class ModelBadRequest(ModelCallError):
    """The provider refused the request as malformed (HTTP 400, 404 for an
    unknown model or deployment, 422)."""


class ModelAuthenticationError(ModelCallError):
    """The credentials are missing, wrong or lack permission (HTTP 401, 403)."""


class ModelResponseError(ModelCallError):
    """The reply cannot be read (e.g. a tool call's arguments are not a JSON
    object); asking again is not expected to help."""


_CONTEXT_HINTS = (
    "context length", "context_length", "context window", "maximum context", "too many tokens",
    "prompt is too long", "input is too long", "range of input length", "exceeds the max",
)


def retry_after_s(headers: Any) -> float | None:
    """Seconds a response's ``retry-after-ms`` or ``Retry-After`` header asks
    to wait (``Retry-After`` in seconds or as an HTTP date); None when
    ``headers`` (any mapping with ``get``, or None) hold neither, or an
    unreadable one."""
    if headers is None:
        return None
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return max(0.0, float(value) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            import email.utils
            import time

            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, AttributeError):
        return None


def error_for_status(
    status: int | None, message: str, provider: str, retry_after_s: float | None = None, **_: Any,
) -> ModelCallError:
    """The ``ModelCallError`` for an HTTP error response.

    Args:
        status: The HTTP status code (None: no response, the call did not
            reach the provider or timed out).
        message: The provider's error message (from its error body).
        provider: The provider's name, for the message.
        retry_after_s: The response's ``Retry-After`` (``retry_after_s``),
            kept on a rate-limited or overloaded error.

    Returns:
        An instance of the class the table in this module's docstring gives;
        a 400 whose message speaks of the context window is
        ``ModelContextTooLong`` (OpenAI ``context_length_exceeded``,
        Anthropic "prompt is too long", DashScope "Range of input length").
    """
    lowered = message.lower()
    if status is None:
        return ModelUnreachable(message, provider, status)
    if status in (400, 413, 422) and any(hint in lowered for hint in _CONTEXT_HINTS):
        return ModelContextTooLong(message, provider, status)
    if status == 429:
        return ModelRateLimited(message, provider, status, retry_after_s)
    if status in (503, 529) or "overloaded" in lowered:
        return ModelOverloaded(message, provider, status, retry_after_s)
    if status >= 500:
        return ModelServerError(message, provider, status)
    if status in (401, 403):
        return ModelAuthenticationError(message, provider, status)
    if status == 408:
        return ModelUnreachable(message, provider, status)
    return ModelBadRequest(message, provider, status)


class StructuredOutputError(ModelResponseError):
    """A chat model's final answer still did not match the request's output
    schema after ``chat.output_schema.max_retries`` re-asks. Terminal (a
    ``ModelResponseError``): the record fails, or goes to the error output
    under ``skip``; ``retry`` does not run the action again.

    Attributes:
        model: The chat model setup's resource name (the constructor's
            ``mismatch`` is the last ``api.agents.types.OutputValidationError``).
        schema_name: The schema's name (``OutputSchema.name``).
        field: Where the last answer's first problem is (``""``: the whole
            answer, e.g. not JSON).
        problem: What is wrong there.
        text: The last answer's text.
        reasks: How many times the model was asked again.
    """

    def __init__(self, model: str, mismatch: Any, reasks: int, option: str = "chat.output_schema.max_retries") -> None:
        shown = mismatch.text if len(mismatch.text) <= 300 else mismatch.text[:300] + "..."
        where = f"field {mismatch.field!r}" if mismatch.field else "the answer"
        super().__init__(
            f"chat model {model!r} gave no answer matching output schema {mismatch.schema_name!r} "
            f"after {reasks} re-ask(s) ({option}): {where}: {mismatch.problem}; "
            f"last answer: {shown!r}"
        )
        self.model = model
        self.schema_name = mismatch.schema_name
        self.field = mismatch.field
        self.problem = mismatch.problem
        self.text = mismatch.text
        self.reasks = reasks

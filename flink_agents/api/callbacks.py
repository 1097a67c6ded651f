"""Callbacks: an action hands out a URL, an outside system completes it.

In an async action::

    cb = await ctx.create_callback("carrier claim for order 17", timeout_s=3600)
    await ctx.durable_execute_async(file_claim, order, cb.resolve_url, cb.reject_url)
    try:
        decision = await cb            # the body POSTed to cb.resolve_url
    except CallbackRejected as rejected:
        ...                            # rejected.reason: the body POSTed to cb.reject_url
    except CallbackTimeout:
        ...                            # nobody answered within timeout_s

The outside system POSTs to ``resolve_url`` or ``reject_url`` on the callback
ingress (``flink-agents callbacks serve``). Each URL carries its own token:
the resolve URL cannot reject, nor the reject URL resolve, so hand each only
to whoever may take that decision. The first completion wins, and
anything later is answered 404 and counted. The wait holds no thread and no
run slot, and survives failovers: the callback, its deadline and its outcome
are durable, so a replayed run gets the same id and the same outcome.

Models get the same through two built-in tools a chat model setup may list
in its ``tools``: ``create_callback(purpose, timeout_seconds)`` (returns at
once with the URLs; the outcome reaches the model in a later message, marked
as untrusted data) and ``cancel_operation(operation_id)``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Generator, Union

__all__ = [
    "ApprovalTimedOut",
    "BUILTIN_CALLBACK_TOOLS",
    "Callback",
    "CallbackCancelled",
    "CallbackError",
    "CallbackRejected",
    "CallbackTimeout",
    "MAX_CALLBACK_TIMEOUT_S",
    "MIN_CALLBACK_TIMEOUT_S",
]

MIN_CALLBACK_TIMEOUT_S = 1.0
MAX_CALLBACK_TIMEOUT_S = 86_400.0  # 24 h: an upper bound on journal and keyed-state retention

# Tool names a chat model setup may list without registering a resource.
CREATE_CALLBACK_TOOL = "create_callback"
CANCEL_OPERATION_TOOL = "cancel_operation"
BUILTIN_CALLBACK_TOOLS = (CREATE_CALLBACK_TOOL, CANCEL_OPERATION_TOOL)


class CallbackError(Exception):
    """A callback ended without a result (base of the three below).

    Attributes:
        callback_id: The callback's id.
    """

    def __init__(self, callback_id: str, message: str) -> None:
        super().__init__(message)
        self.callback_id = callback_id


class CallbackRejected(CallbackError):
    """The outside system POSTed to the reject URL.

    Attributes:
        reason: The POSTed body (text if it is UTF-8, else bytes).
    """

    def __init__(self, callback_id: str, reason: Union[str, bytes]) -> None:
        shown = reason if isinstance(reason, str) else f"<{len(reason)} bytes>"
        super().__init__(callback_id, f"callback {callback_id} rejected: {shown}")
        self.reason = reason


class CallbackTimeout(CallbackError):
    """The deadline passed before a completion arrived.

    Attributes:
        timeout_s: The timeout the callback was created with, in seconds.
    """

    def __init__(self, callback_id: str, timeout_s: float) -> None:
        super().__init__(callback_id, f"callback {callback_id} timed out after {timeout_s:g} s")
        self.timeout_s = timeout_s


class CallbackCancelled(CallbackError):
    """The run cancelled the callback (``cancel()``) before a completion arrived."""

    def __init__(self, callback_id: str) -> None:
        super().__init__(callback_id, f"callback {callback_id} was cancelled")


class ApprovalTimedOut(RuntimeError):
    """A tool call needing approval got no reviewer's decision within
    ``approvals.timeout_s``, under ``approvals.on_timeout: fail``: the
    action fails (terminal: a retry would replay the same timeout).

    Attributes:
        tool: The tool's name.
        call_id: The runtime's id of the call (``<request>-<round>-<index>``).
        timeout_s: How long it waited, in seconds.
    """

    retryable = False

    def __init__(self, tool: str, call_id: str, timeout_s: float) -> None:
        super().__init__(
            f"the call {call_id} of tool {tool!r} got no reviewer's decision within {timeout_s:g} s "
            "(approvals.on_timeout: fail)"
        )
        self.tool = tool
        self.call_id = call_id
        self.timeout_s = timeout_s


class Callback:
    """A pending callback, as ``RunnerContext.create_callback`` returns it.

    Attributes:
        callback_id: Unguessable id (192 random bits, URL-safe base64).
        purpose: What the run waits for.
        timeout_s: Seconds from creation to the deadline.
        created_ms: Creation time, Unix milliseconds (kept across replays).
        deadline_ms: ``created_ms + timeout_s * 1000``.
        resolve_url: POST the result here.
        reject_url: POST the reason here.
    """

    callback_id: str
    purpose: str
    timeout_s: float
    created_ms: int
    deadline_ms: int
    resolve_url: str
    reject_url: str

    @property
    def id(self) -> str:
        return self.callback_id

    def wait(self) -> Awaitable[Union[str, bytes]]:
        """Wait for the outcome; ``await cb`` is the same.

        Returns:
            The resolve body: ``str`` if it is valid UTF-8, else ``bytes``.

        Raises:
            CallbackRejected: The reject URL was POSTed.
            CallbackTimeout: The deadline passed first.
            CallbackCancelled: ``cancel()`` came first.
        """
        raise NotImplementedError

    def cancel(self) -> Awaitable[bool]:
        """End the wait now, unless a completion arrived first (that one stays).

        Takes effect when called; await the result to learn the winner.

        Returns:
            An awaitable of True if this cancel won, False if the callback
            had already finished.
        """
        raise NotImplementedError

    def __await__(self) -> Generator[Any, None, Union[str, bytes]]:
        return self.wait().__await__()

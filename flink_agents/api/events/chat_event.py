"""Events of the built-in chat action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List
from uuid import UUID

from pydantic import Field

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.events.event import Event

__all__ = ["ChatRequestEvent", "ChatResponseEvent"]


class ChatRequestEvent(Event):
    """Asks the chat model setup named ``model`` to answer ``messages``.

    The built-in chat action fills the setup's prompt with ``prompt_args``,
    runs the tool-call loop, and sends a ``ChatResponseEvent`` with the final
    answer. Built as in 0.3.1: ``ChatRequestEvent(model, messages,
    prompt_args=None)`` (None means no arguments). 0.3.1's
    ``output_schema`` (structured output) is not supported yet.
    """

    EVENT_TYPE: ClassVar[str] = "_chat_request_event"

    model: str
    messages: List[ChatMessage]
    prompt_args: Dict[str, Any] = Field(default_factory=dict)

    def __init__(
        self,
        model: str,
        messages: List[ChatMessage],
        prompt_args: Dict[str, Any] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(model=model, messages=messages, prompt_args={} if prompt_args is None else prompt_args, **data)


class ChatResponseEvent(Event):
    """The final answer (no tool calls) to the request ``request_id``.

    Built as in 0.3.1: ``ChatResponseEvent(request_id, response,
    retry_count=0, total_retry_wait_sec=0)``.

    Attributes:
        retry_count: 0.3.1's count of model-call retries over the request's
            tool rounds. The built-in chat action here leaves it 0: a failed
            model call fails its step, which is retried under the action's
            error strategy (the retry replays the calls that completed from
            the journal and runs the failed one again), and the count is
            not carried in the event.
        total_retry_wait_sec: 0.3.1's time spent waiting between those
            retries, in seconds; 0 here, as ``retry_count``.
    """

    EVENT_TYPE: ClassVar[str] = "_chat_response_event"

    request_id: UUID
    response: ChatMessage
    retry_count: int = 0
    total_retry_wait_sec: int = 0

    def __init__(
        self,
        request_id: UUID,
        response: ChatMessage,
        retry_count: int = 0,
        total_retry_wait_sec: int = 0,
        **data: Any,
    ) -> None:
        super().__init__(
            request_id=request_id,
            response=response,
            retry_count=retry_count,
            total_retry_wait_sec=total_retry_wait_sec,
            **data,
        )

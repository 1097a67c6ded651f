"""Events of the built-in chat action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional
from uuid import UUID

from pydantic import Field, PrivateAttr

from flink_agents.api.agents.types import OutputSchema

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.events.event import Event

__all__ = ["ChatRequestEvent", "ChatResponseEvent", "as_output_schema"]


class ChatRequestEvent(Event):
    """Asks the chat model setup named ``model`` to answer ``messages``.

    The built-in chat action fills the setup's prompt with ``prompt_args``,
    runs the tool-call loop, and sends a ``ChatResponseEvent`` with the final
    answer. Built as in 0.3.1: ``ChatRequestEvent(model, messages,
    prompt_args=None, output_schema=None)`` (None means no arguments, no
    schema).

    Structured output (as 0.3.1's ``output_schema``): with a schema, the
    final answer must be JSON matching it. The action validates it
    (``OutputSchema.parse``), re-asks the model on a mismatch (up to
    ``chat.output_schema.max_retries`` times) and puts the validated value in
    the response's ``extra_args[STRUCTURED_OUTPUT]``
    (``flink_agents.api.agents.agent.STRUCTURED_OUTPUT``). A request without
    one uses its setup's ``output_schema``, if any.

    Attributes:
        output_schema: The schema as an ``OutputSchema`` (a property: given
            as an ``OutputSchema``, a pydantic model class, a
            ``RowTypeInfo`` or a JSON schema ``dict``, it is normalised to an
            ``OutputSchema``), or None.
        output_schema_spec: The same schema in its serialized form
            (``OutputSchema.model_dump()``: module and class of a model,
            names and types of a row type, or the JSON schema), which is what
            travels in the journal and keyed state; None without a schema.
    """

    EVENT_TYPE: ClassVar[str] = "_chat_request_event"
    JSON_RENAMES: ClassVar[Dict[str, str]] = {"output_schema_spec": "output_schema"}  # 0.3.1's attribute

    model: str
    messages: List[ChatMessage]
    prompt_args: Dict[str, Any] = Field(default_factory=dict)
    output_schema_spec: Optional[Dict[str, Any]] = None

    # The schema as given (a class defined where it cannot be imported by
    # name still works in this process); rebuilt from the spec otherwise.
    _output_schema: Optional[OutputSchema] = PrivateAttr(default=None)

    def __init__(
        self,
        model: str,
        messages: List[ChatMessage],
        prompt_args: Dict[str, Any] | None = None,
        output_schema: Any = None,
        **data: Any,
    ) -> None:
        schema = as_output_schema(output_schema)
        if schema is not None:
            data["output_schema_spec"] = schema.model_dump()
        super().__init__(model=model, messages=messages, prompt_args={} if prompt_args is None else prompt_args, **data)
        self._output_schema = schema

    @property
    def output_schema(self) -> Optional[OutputSchema]:
        """The schema the final answer must match, or None (see the class docstring)."""
        if self._output_schema is None and self.output_schema_spec is not None:
            self._output_schema = OutputSchema.model_validate(self.output_schema_spec)
        return self._output_schema

    def get_attr(self, name: str) -> Any:
        """As ``Event.get_attr``; ``"output_schema"`` gives the ``OutputSchema``."""
        if name == "output_schema" and name not in self.attributes:
            return self.output_schema
        return super().get_attr(name)


def as_output_schema(value: Any) -> Optional[OutputSchema]:
    """``value`` as an ``OutputSchema``: None stays None; an ``OutputSchema``
    is kept; its serialized form (``{"output_schema": {...}}``, from
    ``OutputSchema.model_dump()``) is read back; a pydantic model class, a
    ``RowTypeInfo`` or a JSON schema ``dict`` is wrapped.

    Raises:
        TypeError: ``value`` is none of these (the message names its type).
    """
    if value is None or isinstance(value, OutputSchema):
        return value
    if isinstance(value, dict) and set(value) == {"output_schema"}:
        return OutputSchema.model_validate(value)
    return OutputSchema(value)


class ChatResponseEvent(Event):
    """The final answer (no tool calls) to the request ``request_id``.

    Built as in 0.3.1: ``ChatResponseEvent(request_id, response,
    retry_count=0, total_retry_wait_sec=0)``.

    When the request had an output schema, ``response.content`` is the
    model's JSON text and ``response.extra_args[STRUCTURED_OUTPUT]`` the
    validated value (a model instance, a ``pyflink.common.Row``, or the JSON
    value of a JSON schema; ``flink_agents.api.agents.agent.STRUCTURED_OUTPUT``).

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

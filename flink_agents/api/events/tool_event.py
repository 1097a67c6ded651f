"""Events of the built-in tool action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Hashable, List, Optional
from uuid import UUID

from pydantic import Field, field_validator

from flink_agents.api.events.event import Event

__all__ = ["ToolRequestEvent", "ToolResponseEvent"]


def _nested_call(call: Dict[str, Any]) -> Dict[str, Any]:
    """0.3.1's Java form of a tool call, ``{"id", "name", "arguments"}``, in
    the form the built-in actions read: ``{"id", "type": "function",
    "function": {"name", "arguments"}}`` (other keys kept)."""
    rest = {k: v for k, v in call.items() if k not in ("name", "arguments")}
    return {**rest, "type": rest.get("type", "function"),
            "function": {"name": call["name"], "arguments": call.get("arguments", {})}}


class ToolRequestEvent(Event):
    """Asks the built-in tool action to run ``tool_calls`` for ``model``.

    Each call is ``{"id": <hashable>, "type": "function", "function":
    {"name": str, "arguments": dict | list | str}, "original_id": <any> |
    None}``. The id may be any hashable value, e.g. a ``uuid.UUID`` as 0.3.1
    user code creates with ``uuid.uuid4()``: the tool action answers with
    the same ids (of the same type, also after a replay, since the journal
    keeps types). ``arguments`` as a dict are passed by name, as a list
    positionally (``Tool.call(*args)``), as a str parsed as JSON first.
    A call in 0.3.1's Java form, ``{"id", "name", "arguments"}``, is
    converted to this form.

    Built as in 0.3.1: ``ToolRequestEvent(model, tool_calls)``.

    Attributes:
        offered_tools: Names of the tools the request offered the model (the
            ``tools`` of its chat model setup, built-in callback tools
            included); the tool action runs only these, and answers a call
            to any other name with an error result that lists them. The
            built-in chat action fills it in; ``None`` (an event built by
            user code, or queued by an earlier release) means the ``tools``
            of the chat model setup named ``model``.
    """

    EVENT_TYPE: ClassVar[str] = "_tool_request_event"
    JSON_OMIT_DEFAULT: ClassVar[frozenset] = frozenset({"offered_tools"})

    model: str
    tool_calls: List[Dict[str, Any]]
    offered_tools: Optional[List[str]] = None

    def __init__(self, model: str, tool_calls: List[Dict[str, Any]], **data: Any) -> None:
        super().__init__(model=model, tool_calls=tool_calls, **data)

    @field_validator("tool_calls")
    @classmethod
    def _ids_are_hashable(cls, calls: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """Responses are keyed by call id, so each id must be hashable."""
        for index, call in enumerate(calls):
            if "id" not in call:
                raise ValueError(f"tool_calls[{index}] has no 'id'")
            if not isinstance(call["id"], Hashable):
                raise ValueError(
                    f"tool_calls[{index}].id is a {type(call['id']).__name__}, which is not hashable; "
                    "use a str, an int or a uuid.UUID"
                )
            if "function" not in call and isinstance(call.get("name"), str):
                calls[index] = call = _nested_call(call)
            function = call.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError(f"tool_calls[{index}].function must be a dict with a str 'name'")
        return calls


class ToolResponseEvent(Event):
    """Results of the calls of the request ``request_id``, keyed by the
    calls' ids (any hashable type, as the request gave them).

    Built as in 0.3.1: ``ToolResponseEvent(request_id, responses, external_ids)``.

    Attributes:
        responses: Call id -> the tool's result (or error text).
        external_ids: Call id -> the provider's call id (``original_id``),
            of whatever type the model gave (a str, a UUID, ...), or None.
        errors: Call id -> error text, for calls that raised.
    """

    EVENT_TYPE: ClassVar[str] = "_tool_response_event"
    JSON_OMIT_DEFAULT: ClassVar[frozenset] = frozenset({"errors"})

    request_id: UUID
    responses: Dict[Hashable, Any]
    external_ids: Dict[Hashable, Any] = Field(default_factory=dict)
    errors: Dict[Hashable, str] = Field(default_factory=dict)

    def __init__(
        self,
        request_id: UUID,
        responses: Dict[Hashable, Any],
        external_ids: Dict[Hashable, Any] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(
            request_id=request_id,
            responses=responses,
            external_ids={} if external_ids is None else external_ids,
            **data,
        )

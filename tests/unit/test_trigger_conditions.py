"""Trigger condition entries (Flink Agents HEAD): which are exact event
types, which expressions, and what an expression means on an event."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from flink_agents.api.events.event import Event, InputEvent
from flink_agents.api.trigger_conditions import (
    ConditionEvaluationError, TriggerConditionError, classify, compile_condition, event_variables,
)


@pytest.mark.parametrize(("entry", "expected"), [
    ("my_event", ("event_type", "my_event")),
    ("  a.b.c  ", ("event_type", "a.b.c")),
    ("order-created", ("event_type", "order-created")),
    ("in", ("event_type", "in")),
    ("'order:created'", ("event_type", "order:created")),
    ('"true"', ("event_type", "true")),
    ("'EventType.custom'", ("event_type", "EventType.custom")),
    ("true", ("expression", "true")),
    ("EventType.InputEvent", ("expression", "EventType.InputEvent")),
    ("'order created'", ("expression", "'order created'")),
    ("score > 5", ("expression", "score > 5")),
])
def test_an_entry_is_an_event_type_or_an_expression(entry: str, expected: Any) -> None:
    assert classify(entry) == expected


def _holds(text: str, event: Event) -> bool:
    return compile_condition(text).matches(event_variables(event, lambda: event.model_dump(mode="json")))


ORDER = Event(type="order", attributes={"score": 7, "tags": ["vip"], "a.b": 1, "type": "x", "nested": {"ok": True}})


@pytest.mark.parametrize(("text", "expected"), [
    ("type == 'order' && score > 5", True),
    ("attributes.score == 7.0", True),  # numbers compare across int and double
    ("score == true", False),  # a bool equals no number
    ("'vip' in tags && size(tags) == 1", True),
    ('"a.b" in attributes && attributes["a.b"] == 1', True),
    ('attributes["type"] == "x" && type == "order"', True),  # framework variables win a clash
    ("nested.ok == true && !has(nested.missing)", True),
    ("has(attributes.missing) && missing > 1", False),  # has() guards the read
    ("missing > 1 || score > 5", True),  # an error absorbed by a decisive side
    ("7 / -2 == -3 && -7 % 2 == -1", True),  # integer division truncates
    ("score > 5 ? tags[0] == 'vip' : false", True),
    ("type.startsWith('ord') && !type.endsWith('x')", True),
])
def test_expressions_follow_cel(text: str, expected: bool) -> None:
    assert _holds(text, ORDER) is expected


@pytest.mark.parametrize(("text", "complaint"), [
    ("missing > 1", "no such attribute: missing"),
    ("missing > 1 && score > 5", "no such attribute: missing"),
    ("score > 'a'", "cannot compare int > str"),
    ("score / 0 == 1", "division by zero"),
    ("nested", None),
])
def test_an_expression_that_cannot_be_evaluated_says_why(text: str, complaint: str | None) -> None:
    if complaint is None:
        with pytest.raises(TriggerConditionError, match="a path alone"):
            compile_condition(text)
        return
    with pytest.raises(ConditionEvaluationError, match=complaint):
        _holds(text, ORDER)


def test_declared_fields_are_attributes() -> None:
    event: Dict[str, Any] = {"status": "ok"}
    assert _holds("type == EventType.InputEvent && input.status == 'ok'", InputEvent(input=event))
    assert not _holds("has(attributes.status)", InputEvent(input=event))  # nested values are not flattened

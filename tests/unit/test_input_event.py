"""The run's InputEvent, built without validation, is the event validation
builds: the same fields, fields set, JSON form and journaled form."""

from __future__ import annotations

import datetime
import uuid

import pytest

from flink_agents.api.events.event import InputEvent
from flink_agents.runtime.execution.event_codec import decode_event, encode_event
from flink_agents.runtime.execution.input_event import input_event


@pytest.mark.parametrize("value", [
    "a review", 7, None, {"id": "P1", "review": "ok", "tags": ("a", "b")}, [1, 2.5, {"x": None}],
    datetime.datetime(2026, 12, 6, 9, 0, tzinfo=datetime.timezone.utc),
], ids=["str", "int", "none", "dict", "list", "datetime"])
def test_the_runtime_input_event_is_the_validated_one(value) -> None:
    event_id = uuid.uuid5(uuid.NAMESPACE_URL, "job/k/0/_input/0")
    fast, validated = input_event(value, event_id), InputEvent(input=value, id=event_id)
    assert type(fast) is InputEvent
    assert fast == validated
    assert list(fast.__dict__.items()) == list(validated.__dict__.items())
    assert fast.model_fields_set == validated.model_fields_set
    assert fast.model_extra == validated.model_extra
    assert fast.model_dump_json() == validated.model_dump_json()
    assert encode_event(fast) == encode_event(validated)
    assert decode_event(encode_event(fast)) == validated
    assert fast.get_type() == InputEvent.EVENT_TYPE and fast.get_attr("input") == value


def test_the_runtime_input_event_takes_changes_as_a_validated_one_does() -> None:
    event = input_event({"n": 1}, uuid.uuid4())
    event.set_attr("seen", True)
    event.input["n"] = 2
    assert event.get_attr("seen") is True and event.input == {"n": 2}
    other = input_event({"n": 1}, uuid.uuid4())
    assert other.attributes == {} and other.model_fields_set == {"input", "id"}

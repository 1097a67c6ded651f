"""0.3.1's data forms and small API behaviours: events as JSON in 0.3.1's
``{id, type, attributes}`` form (which its Java side reads), a chat setup
filled from ``prompt_args``, ``_record_token_metrics`` and the Flink version
helpers."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, List, Sequence
from unittest.mock import patch

import pytest
from pydantic import ValidationError

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent
from flink_agents.api.events.context_retrieval_event import ContextRetrievalRequestEvent
from flink_agents.api.events.event import EVENT_FIELDS_FLAT, Event, InputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.version_compatibility import FlinkVersionManager, _normalize_version
from flink_agents.runtime.execution.metrics import MetricRegistry

ID = uuid.UUID(int=1)
REQUEST = uuid.UUID(int=2)


def test_events_are_written_in_031s_form_and_read_back() -> None:
    event = InputEvent(input={"n": 1}, id=ID)
    written = json.loads(event.model_dump_json())
    assert written == {"id": str(ID), "type": "_input_event", "attributes": {"input": {"n": 1}}}
    back = InputEvent.from_json(json.dumps(written))
    assert (back.id, back.input, back.attributes) == (ID, {"n": 1}, {})
    assert InputEvent.from_event(Event.from_json(json.dumps(written))).input == {"n": 1}

    custom = Event(type="my_event", extra=[1], attributes={"a": "b"})
    assert json.loads(custom.model_dump_json())["attributes"] == {"extra": [1], "a": "b"}
    # The event log's records keep the fields beside id and type.
    assert custom.model_dump(mode="json", context={EVENT_FIELDS_FLAT: True})["extra"] == [1]


def test_fields_added_here_are_written_only_when_set() -> None:
    response = ToolResponseEvent(request_id=REQUEST, responses={"c1": "ok"}, id=ID)
    assert set(json.loads(response.model_dump_json())["attributes"]) == {"request_id", "responses", "external_ids"}
    failed = ToolResponseEvent(request_id=REQUEST, responses={"c1": "boom"}, errors={"c1": "boom"})
    assert json.loads(failed.model_dump_json())["attributes"]["errors"] == {"c1": "boom"}
    assert ToolResponseEvent.from_json(failed.model_dump_json()).errors == {"c1": "boom"}

    query = ContextRetrievalRequestEvent(query="q", vector_store="s", filters={"lang": "en"})
    assert ContextRetrievalRequestEvent.from_json(query.model_dump_json()).filters == {"lang": "en"}
    assert "filters" not in json.loads(ContextRetrievalRequestEvent(query="q", vector_store="s").model_dump_json())[
        "attributes"]


def test_the_output_schema_travels_under_031s_name() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    request = ChatRequestEvent(model="m", messages=[], output_schema=schema)
    attributes = json.loads(request.model_dump_json())["attributes"]
    assert "output_schema" in attributes and "output_schema_spec" not in attributes
    assert ChatRequestEvent.from_json(request.model_dump_json()).output_schema.json_schema() == schema


def test_031s_java_tool_call_form_is_read_as_the_nested_form() -> None:
    request = ToolRequestEvent(model="m", tool_calls=[{"id": "c1", "name": "add", "arguments": {"a": 1}}])
    assert request.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    ]
    with pytest.raises(ValidationError, match=r"tool_calls\[0\]\.function must be a dict"):
        ToolRequestEvent(model="m", tool_calls=[{"id": "c1", "arguments": {}}])


def test_an_event_of_the_base_class_needs_a_type() -> None:
    with pytest.raises(ValidationError, match="an Event needs a type"):
        Event(a=1)
    assert InputEvent(input=1).type == "_input_event"


class _Echo(BaseChatModelConnection):
    seen: List[List[str]] = []

    def chat(self, messages: Sequence[ChatMessage], tools: Any = None, **kwargs: Any) -> ChatMessage:
        self.seen.append([m.content for m in messages])
        return ChatMessage(role=MessageRole.ASSISTANT, content="ok")


class _Setup(BaseChatModelSetup):
    pass


def test_a_setup_with_its_connection_set_chats_outside_a_runtime_filling_prompt_args() -> None:
    setup = _Setup(connection="c", model="m", prompt=Prompt.from_text("Task: {key}"))
    connection = _Echo()
    setup._resolved_connection = connection
    setup.chat([ChatMessage(role=MessageRole.USER, content="go", extra_args={"key": "no"})], prompt_args={"key": "yes"})
    assert connection.seen[-1] == ["Task: yes", "go"]

    named = _Setup(connection="c", model="m", prompt="a_prompt")
    with pytest.raises(RuntimeError, match="created outside a runtime: its prompt, tools or skills"):
        named.chat([], prompt_args={})
    unset = _Setup(connection="c", model="m")
    with pytest.raises(RuntimeError, match="its connection 'c' is a named resource"):
        unset.chat([])


def test_record_token_metrics_counts_per_model_under_the_bound_group() -> None:
    setup = _Setup(connection="c", model="m")
    setup._record_token_metrics("gpt", 10, 2)  # no group bound: nothing, no error
    group = MetricRegistry().root
    setup.set_metric_group(group)
    setup._record_token_metrics("gpt", 10, 2)
    setup._record_token_metrics("gpt", 5, 1)
    model = group.get_sub_group("model", "gpt")
    assert (model.get_counter("promptTokens").get_count(), model.get_counter("completionTokens").get_count()) == (15, 3)


def test_flink_versions_normalize_and_unreadable_metadata_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert [_normalize_version(v) for v in ("2.2", "1.20.3", "2.2.0-SNAPSHOT", "1.20.dev0")] == [
        "2.2.0", "1.20.3", "2.2.0", "1.20.0"]
    manager = FlinkVersionManager()
    with patch("importlib.metadata.version", side_effect=OSError("bad METADATA")), caplog.at_level(logging.WARNING):
        assert manager.version is None and not manager.ge("1.0")
    assert "cannot read the apache-flink version (OSError: bad METADATA)" in caplog.text

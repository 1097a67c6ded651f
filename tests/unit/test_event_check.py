"""``send_event``'s check refuses exactly what encoding the event would; an
action's sent events are encoded when it returns, or, holding only plain
values, when first read (``encode_sent``)."""

from __future__ import annotations

import json
import uuid

import pytest

from pydantic import BaseModel

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.event import Event, OutputEvent
from flink_agents.runtime.durability.codec import encode, json_text, surely_encodes
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.runtime.execution import event_codec
from flink_agents.runtime.execution.event_codec import DeferredEvent, check_event, encode_event, encode_sent


trust_package(__name__)  # Unseen is read back by name


class Unseen(BaseModel):
    """A model class no test encodes before ``encode_sent`` sees it."""

    n: int


@pytest.mark.parametrize("output", [1, -2**62, 1.5, "text", None, True, uuid.uuid4(), {}, [],
                                    {"a": [1, "x", {"b": None}]}, [[2.5]]])
def test_an_event_of_plain_values_is_checked_without_encoding(output, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(event):  # noqa: ANN001, ANN202
        raise AssertionError("encoded")

    monkeypatch.setattr(event_codec, "encode_event", refuse)
    check_event(OutputEvent(output=output))


@pytest.mark.parametrize("output", [object(), {"items": [1, object()]}, 10**5000], ids=["object", "nested", "huge_int"])
def test_a_value_the_codec_refuses_fails_the_check_as_encoding_does(output) -> None:
    event = OutputEvent(output=output)
    with pytest.raises(TypeError) as encoding:
        encode_event(event)
    with pytest.raises(TypeError) as checking:
        check_event(event)
    assert str(checking.value) == str(encoding.value)
    assert "event OutputEvent.output" in str(checking.value)


@pytest.mark.parametrize("output", [float("nan"), 2**70, {"a": (1,)}, [1, {"$b": 2}], (1, 2), {1: "a"}])
def test_values_that_need_encoding_are_encoded_by_the_check(output) -> None:
    check_event(OutputEvent(output=output))  # encodable: no error


def test_a_plain_sent_event_is_encoded_once_when_first_read_and_journals_as_encoding_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    event = OutputEvent(output="a", id=uuid.uuid4())
    sent = encode_sent(event)
    assert isinstance(sent, DeferredEvent)
    expected = encode_event(event)
    encoded = []
    real = event_codec.encode_event
    monkeypatch.setattr(event_codec, "encode_event", lambda e: encoded.append(e) or real(e))
    completion = {"events": [sent], "stm": {"set": {}, "del": []}}
    assert json.loads(json_text(completion)) == {"events": [expected], "stm": {"set": {}, "del": []}}
    assert sent.get() == expected and len(encoded) == 1  # once, however often read


@pytest.mark.parametrize("output", [[2**64], {1: "a"}, {"a": {1, 2}}, [[[1]]], Unseen(n=1)],
                         ids=["big_int", "int_key", "set", "too_deep", "model_never_encoded"])
def test_an_event_the_check_is_unsure_of_is_encoded_when_sent(output, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_codec, "_PLAIN_DEPTH", 2)  # [[[1]]]: deeper than that
    event = OutputEvent(output=output)
    sent = encode_sent(event)
    assert isinstance(sent, dict) and sent == encode_event(event)


@pytest.mark.parametrize("output", [(1, 2), {"a": [float("inf")]}, {"$a": 1}, MessageRole.USER,
                                   [ChatMessage(role=MessageRole.USER, content="hi", extra_args={"k": (1,)})]],
                         ids=["tuple", "inf", "dollar_key", "enum", "models"])
def test_an_event_that_surely_encodes_is_deferred_and_encodes_as_when_sent(output) -> None:
    encode_event(OutputEvent(output=output))  # its classes' names checked once, as a first event's are
    event = OutputEvent(output=output)
    sent = encode_sent(event)
    assert isinstance(sent, DeferredEvent) and sent.get() == encode_event(event)


def test_an_event_class_that_cannot_be_found_by_name_fails_when_sent_even_if_plain() -> None:
    def make() -> Event:
        class Local(Event):
            tag: str = ""

        return Local(tag="x")

    with pytest.raises(TypeError, match="Local"):
        encode_sent(make())


SURE = [None, True, 1, -2**63 + 1, 2.5, float("nan"), "s", uuid.uuid4(), (1, "a"), [1, [2]], {"$x": [None]},
        MessageRole.USER, ChatMessage(role=MessageRole.USER, content="c", tool_calls=[{"id": "1"}])]
class NeverEncoded(BaseModel):
    """Only ``surely_encodes`` sees it: its name is never checked."""

    n: int


UNSURE = [2**63, 10**5000, {1: 2}, {1, 2}, b"x", object(), [object()], NeverEncoded(n=1), ChatMessage(role=MessageRole.USER,
          content="c", extra_args={"x": object()})]


@pytest.mark.parametrize("value", SURE + UNSURE, ids=lambda v: type(v).__name__)
def test_surely_encodes_only_what_encoding_accepts(value) -> None:
    """``surely_encodes`` may say False for an encodable value (the codec
    then decides), never True for one the codec refuses."""
    encode(ChatMessage(role=MessageRole.USER, content=""))  # names checked, as a first encoding does
    expected = value in SURE if not isinstance(value, float) else True
    assert surely_encodes(value) is expected
    if expected:
        encode(value)

"""``send_event``'s check refuses exactly what encoding the event would."""

from __future__ import annotations

import uuid

import pytest

from flink_agents.api.events.event import OutputEvent
from flink_agents.runtime.execution import event_codec
from flink_agents.runtime.execution.event_codec import check_event, encode_event


@pytest.mark.parametrize("output", [1, -2**62, 1.5, "text", None, True, uuid.uuid4(), {}, []])
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


@pytest.mark.parametrize("output", [float("nan"), 2**70, {"a": 1}, [1, 2], (1, 2)])
def test_values_that_need_encoding_are_encoded_by_the_check(output) -> None:
    check_event(OutputEvent(output=output))  # encodable: no error

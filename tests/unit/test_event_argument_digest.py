"""An event passed to a journaled call is digested in the flat form earlier
releases used: neither 0.3.1's nested JSON form (``model_dump``) nor HEAD's
lineage changes the digest, so a run journaled before an upgrade replays."""

from __future__ import annotations

from uuid import UUID

from flink_agents.api.events.event import OutputEvent
from flink_agents.runtime.durability.journal import _canonical

EVENT_ID = UUID("bf5b01c6-5a20-43db-8d09-949e3779a37c")


def test_an_event_argument_digests_as_before_nested_json_and_lineage() -> None:
    event = OutputEvent(id=EVENT_ID, output={"a": 1})
    before = {"id": str(EVENT_ID), "type": "_output_event", "attributes": {}, "output": {"a": 1}}
    assert "attributes" in event.model_dump(mode="json")  # the nested form users see
    assert _canonical(event) == before
    event.upstream_event_id = UUID(int=7)
    event.upstream_action_name = "report"
    assert _canonical([event]) == [before]

"""Ids are derived in one module and never change between releases: they are
journaled (event ids in step completions, sub-agent call ids in journal ids
and call digests, callback refs in the callback store), so a run in flight
at an upgrade must derive the same ones. Pinned to values written by hand
from the earlier release's derivation."""

from __future__ import annotations

import uuid

from flink_agents.runtime.durability.ids import (
    RunIdentity, callback_ref, event_id, key_text, session_path, sub_agent_call_id, sub_agent_journal_id, tool_call_id,
)
from flink_agents.stores.callbacks import CallbackRef

RUN = RunIdentity("job", "k", 3)


def test_event_ids_are_the_earlier_releases() -> None:
    assert event_id(RUN, "act@0", 1) == uuid.UUID("c7940e97-e5da-50a2-8e0f-be3dbe962e2a")
    assert RUN.event_id("act@0", 1) == event_id(RUN, "act@0", 1)


def test_sub_agent_ids_are_the_earlier_releases_and_follow_the_branch() -> None:
    assert sub_agent_call_id(RUN, "act@0/1", "child", 0) == "aeb921e8-e5de-5433-90e9-4321a67d9ebd"
    assert sub_agent_call_id(RUN, "act@0/2", "child", 0) != sub_agent_call_id(RUN, "act@0/1", "child", 0)
    assert sub_agent_journal_id(RUN, "abc") == "job/abc"
    assert session_path("s1") == "_flink_agents.sessions.e8bc163c82eee18733288c7d4ac636db"


def test_keys_as_text_callback_refs_and_tool_call_ids() -> None:
    assert key_text("k") == '"k"' and key_text(("a", 1)) == '["a",1]' and key_text(7) == "7"
    assert callback_ref(RUN, "act@0/1", 2) == CallbackRef("job", '"k"', 3, "act@0/1", 2)
    assert tool_call_id("0b4e7c1a-9a5f-5d7e-8c1b-2f3a4b5c6d7e", 2, 1) == "0b4e7c1a9a5f-2-1"


def test_event_ids_are_the_uuid5_ids_journals_already_hold() -> None:
    """``RunIdentity.event_id`` hashes the run's part of the name once per
    run; the ids are still exactly ``uuid5(namespace, name)``, as journaled
    by every earlier release (pinned values)."""
    import uuid

    from flink_agents.runtime.durability.ids import RunIdentity, event_id

    run = RunIdentity("job-1", "k", 3)
    assert str(run.event_id("_input", 0)) == "257ab14f-2fc9-5e4d-b6dd-b947e84463fd"
    assert str(run.event_id("review@1", 2)) == "37aacec3-ced6-5e46-9583-cea1ffee0fee"
    other = RunIdentity("j/ünïcode", {"id": [1, 2.5, None]}, 10**12)
    for step, ordinal in [("_input", 0), ("act@0/1.2", 7), ("sub:ä@3", 123456)]:
        made = other.event_id(step, ordinal)
        assert made == event_id(other, step, ordinal)
        assert (made.version, made.variant, made.is_safe, hash(made), repr(made)) == (
            5, uuid.RFC_4122, uuid.SafeUUID.unknown, hash(event_id(other, step, ordinal)),
            repr(event_id(other, step, ordinal)))


def test_an_event_id_is_hashed_when_first_read_and_travels_as_a_plain_uuid() -> None:
    """A run's event ids are made for every event but read for few
    (``derived_uuid``): none is hashed until read; once read, it pickles,
    encodes and compares as the ``uuid.UUID`` it stands for."""
    import pickle

    from flink_agents.runtime.durability.codec import decode, encode

    class CountingRun(RunIdentity):
        __slots__ = ("prefixes",)

        def event_prefix(self):  # noqa: ANN202
            self.prefixes += 1
            return super().event_prefix()

    run = CountingRun("job-1", "k", 3)
    run.prefixes = 0
    made = [run.event_id("act@0", i) for i in range(3)]
    assert run.prefixes == 0  # nothing read, nothing hashed
    assert str(made[2]) == str(event_id(run, "act@0", 2)) and run.prefixes == 1
    assert made[2].int == event_id(run, "act@0", 2).int and run.prefixes == 1  # once per id
    for value in (pickle.loads(pickle.dumps(made[0])), decode(encode(made[1]))):
        assert type(value) is uuid.UUID
    assert pickle.loads(pickle.dumps(made[0])) == event_id(run, "act@0", 0)
    assert encode(made[1]) == {"$uuid": str(event_id(run, "act@0", 1))}

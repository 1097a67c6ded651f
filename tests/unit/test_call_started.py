"""The started mark of a durable call with a reconciler
(``runtime.durability.call_started``): its format, that no outcome reads as
one, and what the journal's readers make of it."""

from __future__ import annotations

import json

import pytest

from flink_agents.inspection.records import entry_records
from flink_agents.runtime.durability.call_started import STARTED_VERSION, is_started, started_mark
from flink_agents.runtime.durability.codec import encode_outcome
from flink_agents.runtime.durability.input_digest import INPUT_MARK, stamp
from flink_agents.stores.journal import COMPLETION, JournalEntry


def _mark() -> JournalEntry:
    return started_mark("pay@0", 0, "shop.payments:submit", "ab" * 32)


def test_the_mark_names_its_call_and_carries_its_version_and_start():
    mark = _mark()
    payload = json.loads(mark.payload)
    assert (mark.step, mark.ordinal, mark.function_id, mark.args_digest) == ("pay@0", 0, "shop.payments:submit", "ab" * 32)
    assert payload["started"] == STARTED_VERSION == 1
    start, duration = payload["t"]
    assert start > 1.7e18 and duration == 0
    assert is_started(mark)


@pytest.mark.parametrize("payload", [
    encode_outcome("pay-1", call="submit"),
    encode_outcome(error=ValueError("declined"), call="submit"),
    '{"ok": "pay-1"}',  # an earlier release's outcome
    '{"error": {"type": "builtins:ValueError", "message": "declined"}}',
    '{"ok": {"started": 1}}',  # a result that looks like a mark inside
])
def test_no_outcome_reads_as_a_mark(payload: str):
    assert not is_started(JournalEntry("pay@0", 0, "shop.payments:submit", "", payload))


def test_a_step_completion_is_no_mark_whatever_it_holds():
    assert not is_started(JournalEntry("pay@0", COMPLETION, "", "", '{"started": 1}'))


def test_the_input_digest_is_not_stamped_on_a_mark_its_outcome_will_replace():
    only_marks = [_mark()]
    assert not stamp(only_marks, "d" * 64, skip=is_started)
    assert INPUT_MARK not in only_marks[0].args_digest
    with_a_call = [_mark(), JournalEntry("pay@0", 1, "f", "ef", encode_outcome(1, call="f"))]
    assert stamp(with_a_call, "d" * 64, skip=is_started)
    assert INPUT_MARK not in with_a_call[0].args_digest and with_a_call[1].args_digest == f"ef{INPUT_MARK}{'d' * 64}"


def test_inspection_shows_a_mark_as_a_started_call():
    (record,) = entry_records(_mark())
    assert record["kind"] == "call_started" and record["function"] == "shop.payments:submit"
    assert record["step"] == "pay@0" and record["duration_ms"] == 0.0

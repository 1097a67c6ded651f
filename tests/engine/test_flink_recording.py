"""What the Flink host does with a key's state, timers and outputs, as the
recording Flink host shows it (``tests/support/recording_flink.py``: the
real operator and ``FlinkDriver``, fake keyed state and timer service, no
JVM), on the invariants a user relies on:

- a record's outputs leave in a callback of its own key that also wrote the
  key's state with the record applied (off the pending queue, counted as
  finished): a checkpoint holds both or neither, so a record whose output
  went out never runs again after a restore;
- a key's polls stop once it is idle: no timer is registered for it after
  its last record was applied, and at most its two outstanding polls fire;
  a record that finishes within ``flink.inline_wait_ms`` registers no timer;
- a callback's deadline is a processing-time timer of its key, kept in keyed
  state with the callback's id (``KeyState.callback_deadlines``), and its
  firing times the callback out;
- a key's queue is encoded once per record and not decoded while the
  runner holds the key (the state is written at every record's arrival and
  end), and what is written reads back as itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.callbacks import CallbackTimeout
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.runtime.flink.driver import KEY_STATE_NAME
from tests.engine.test_driver_contract import CountingAgent, _records
from tests.support import recording_flink
from tests.support.recording_flink import Callback, Emission, RecordedRun, StateWrite, TimerRegistration

pytestmark = pytest.mark.timeout(120)


def _key_states(run: RecordedRun, key: Any) -> List[StateWrite]:
    return [w for w in run.writes if w.key == key and w.state == KEY_STATE_NAME]


def test_a_records_output_leaves_in_the_callback_of_its_key_that_stored_it_applied() -> None:
    run = recording_flink.run(CountingAgent(), _records("abcd", 6))

    assert run.failure is None and len(run.outputs) == 24
    callbacks = {c.index: c for c in run.callbacks}
    for position, entry in enumerate(run.log):
        if not isinstance(entry, Emission):
            continue
        key, seq = entry.value["k"], entry.value["i"]  # the key's records have seq == i
        assert entry.key == key and callbacks[entry.callback].key == key, entry
        # The same callback wrote the key's state with the record applied.
        applied = [
            w for w in run.log[:position]
            if isinstance(w, StateWrite) and w.callback == entry.callback and w.key == key
            and w.state == KEY_STATE_NAME
            and seq not in [p["seq"] for p in json.loads(w.text)["pending"]]
            and json.loads(w.text)["runs_finished"] > seq
        ]
        assert applied, f"output of {key!r} #{seq} emitted before its state was written: {entry}"
    # Each record's output once; a key's state last written with nothing pending.
    assert sorted((o["k"], o["i"]) for o in run.outputs) == sorted((k, i) for k in "abcd" for i in range(6))
    for key in "abcd":
        last = json.loads(_key_states(run, key)[-1].text)
        assert (last["pending"], last["runs_finished"], last["next_seq"]) == ([], 6, 6)


def test_a_keys_polls_stop_once_it_is_idle() -> None:
    run = recording_flink.run(CountingAgent(), _records("abcd", 6))

    assert run.failure is None
    polled = {t.key for t in run.timers if t.domain == recording_flink.PROCESSING}
    assert polled, "no key was ever polled: the scenario no longer exercises polls"
    for key in "abcd":
        done = max(w.callback for w in _key_states(run, key) if not json.loads(w.text)["pending"])
        later = [t for t in run.timers if t.key == key and t.callback >= done]
        assert later == [], f"{key!r} registered timers after it was idle: {later}"
        polls_after = [
            c for c in run.callbacks if c.key == key and c.index > done and c.kind == recording_flink.PROCESSING
        ]
        assert len(polls_after) <= 2, f"{key!r} was polled {len(polls_after)} times after it was idle"

    # A record that finishes within the inline wait is applied in its own
    # process_element: no timer at all.
    fast = recording_flink.run(CountingAgent(), _records("a", 1), **{"flink.inline_wait_ms": 5000})
    assert [c.kind for c in fast.callbacks] == ["process"] and fast.timers == []
    assert fast.outputs == [{"k": "a", "i": 0, "count": 1}]


class ClaimAgent(Agent):
    """Waits for a callback nobody answers; outputs how the wait ended."""

    @staticmethod
    async def wait(event: InputEvent, ctx: Any) -> None:
        cb = await ctx.create_callback("claim", event.input["timeout_s"])
        try:
            await cb
            outcome = "resolved"
        except CallbackTimeout:
            outcome = "timeout"
        ctx.send_event(OutputEvent(output={"k": ctx.key, "id": cb.callback_id, "outcome": outcome}))

    def __init__(self) -> None:
        super().__init__()
        self.add_action("wait", [InputEvent], ClaimAgent.wait)


def test_a_callback_deadline_is_a_timer_of_its_key_kept_in_keyed_state() -> None:
    timeout_s = 60  # the engine's own poller (wall clock) would take a minute: the timer ends it
    run = recording_flink.run(
        ClaimAgent(), [{"key": "c", "value": {"k": "c", "timeout_s": timeout_s}}],
        **{"callbacks.base_url": "http://claims.test:9/"},
    )

    assert run.failure is None
    [output] = run.outputs
    assert output["outcome"] == "timeout"
    # The deadline is in keyed state with the callback's id and record seq...
    kept = [(w, json.loads(w.text).get("callbacks")) for w in _key_states(run, "c")]
    [(armed, deadlines)] = [(w, d) for w, d in kept if d][:1]
    [[callback_id, deadline_ms, seq]] = deadlines
    assert (callback_id, seq) == (output["id"], 0)
    # ... and a processing-time timer of its key, registered in the same callback.
    assert TimerRegistration(armed.callback, "c", recording_flink.PROCESSING, deadline_ms) in run.timers
    # It fired at the deadline and no earlier: the callback timed out there.
    fired = [c for c in run.callbacks if c.kind == recording_flink.PROCESSING and c.timestamp == deadline_ms]
    assert [c.key for c in fired] == ["c"]
    emitted = next(e for e in run.emissions if e.value == output)
    # In that timer's callback (the run may end before it applies) or a later one.
    assert emitted.callback >= fired[0].index
    first = next(c for c in run.callbacks if c.kind == "process")
    assert deadline_ms - first.now_ms >= timeout_s * 1000 - 1000
    # Once the record is applied its deadline leaves keyed state.
    assert "callbacks" not in json.loads(_key_states(run, "c")[-1].text)


class _SlowAgent(Agent):
    """Each record waits, so a key's later records queue behind it."""

    @action(InputEvent)
    @staticmethod
    async def wait_then_echo(event: InputEvent, ctx: Any) -> None:
        await asyncio.sleep(0.01)
        ctx.send_event(OutputEvent(output={"k": event.input["k"], "i": event.input["i"]}))


def test_a_keys_queue_is_encoded_once_per_record_and_not_decoded_while_the_runner_holds_it(monkeypatch) -> None:
    """The key state is written at every record's arrival and end. Its queue
    must not be encoded and decoded whole each time (quadratic in a hot
    key's backlog): each queued record is encoded once, and the state the
    operator wrote is not decoded again while its runner holds the key. What
    is written stays what a restore reads back."""
    encoded: List[int] = []
    decoded: List[int] = []
    encode_entry = PendingRecord.state_entry
    from_json = KeyState.from_json

    def counting_entry(self: PendingRecord) -> str:
        if self.entry_json is None:
            encoded.append(self.seq)
        return encode_entry(self)

    def counting_from_json(text: str, memory_json: str | None = None) -> KeyState:
        decoded.append(len(json.loads(text)["pending"]))
        return from_json(text, memory_json)

    monkeypatch.setattr(PendingRecord, "state_entry", counting_entry)
    monkeypatch.setattr(KeyState, "from_json", staticmethod(counting_from_json))
    run = recording_flink.run(_SlowAgent(), _records("a", 40))

    assert run.failure is None
    assert sorted(o["i"] for o in run.outputs) == list(range(40))
    assert sorted(encoded) == list(range(40))  # once per record, not per write
    assert sum(decoded) == 0, decoded  # the operator's own writes are not read back record by record
    writes = _key_states(run, "a")
    assert max(len(json.loads(w.text)["pending"]) for w in writes) > 10  # the queue did build up
    for write in writes:  # each write is what its state reads back as, written again
        monkeypatch.setattr(KeyState, "from_json", staticmethod(from_json))
        assert KeyState.from_json(write.text, "{}").to_json(include_memory=False) == write.text

"""Values are checked where the user hands them over (issue 14, part 3).

``ctx.send_event`` encodes the event with the codec that journals it, and
``MemoryObject.set`` encodes the value it stores, so a value the codec
refuses (an open file, a function, an ``int`` with more digits than JSON
text can carry, a ``Counter``), at any depth, fails the action that handed
it over, with an error naming the action, key, record and field path,
under the action's error strategy; the records after it run on. Values the
codec carries (sets, datetimes, bytes that are not UTF-8) pass and arrive
downstream as they were sent.

Each scenario runs on both runners, through the driver contract's ``run``
fixture: here on the local runner (``tests/engine/test_driver_contract.py``),
and on the Flink runner on the mini-cluster in
``tests/e2e/test_value_checks_e2e.py``.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.runner_context import RunnerContext
from flink_agents.runtime.errors import ActionFailed
from tests.engine.test_driver_contract import Runner, _per_key, run  # noqa: F401  (run: the local runner)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(240)


class Noted(Event):
    """A custom event; its ``detail`` is an extra field (as in Flink Agents 0.3)."""


def _send_output(ctx: RunnerContext, value: Any) -> None:
    ctx.send_event(OutputEvent(output=value))


def _send_file(ctx: RunnerContext) -> None:
    with open(os.devnull, encoding="utf-8") as handle:
        ctx.send_event(OutputEvent(output={"k": ctx.key, "handle": handle}))


# case -> what the action hands over (run inside the action, on the worker)
HAND_OVERS: Dict[str, Callable[[RunnerContext], None]] = {
    "output_file": _send_file,
    "output_nested_function": lambda ctx: _send_output(ctx, {"k": ctx.key, "rows": [1, {"fn": lambda: 1}]}),
    "output_big_int": lambda ctx: _send_output(ctx, 10**5000),
    "event_extra_object": lambda ctx: ctx.send_event(Noted(detail={"at": {"where": object()}})),
    "memory_big_int": lambda ctx: ctx.short_term_memory.set("x", 10**5000),
    "memory_nested_function": lambda ctx: ctx.short_term_memory.set("order.items", [1, 2, print]),
    "memory_counter": lambda ctx: ctx.sensory_memory.set("seen", collections.Counter(a=1)),
}

# case -> (field path, start of what is wrong with the value)
REFUSALS: Dict[str, Tuple[str, str]] = {
    "output_file": ("event OutputEvent.output.handle", "is a _io.TextIOWrapper"),
    "output_nested_function": ("event OutputEvent.output.rows[1].fn", "is a builtins.function"),
    "output_big_int": ("event OutputEvent.output", "is an int of about 5000 digits"),
    "event_extra_object": ("event Noted.detail.at.where", "is a builtins.object"),
    "memory_big_int": ("short_term_memory.x", "is an int of about 5000 digits"),
    "memory_nested_function": ("short_term_memory.order.items[2]", "is a builtins.builtin_function_or_method"),
    "memory_counter": ("sensory_memory.seen", "is a collections.Counter"),
}


def _calls_note(path: str | None, case: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(case + "\n")


class HandOverAgent(Agent):
    """Each record outputs ``{"k", "i"}``; a record naming a ``case`` first
    hands over that case's value (and notes the attempt in ``calls_file``)."""

    @action(InputEvent)
    @staticmethod
    def hand_over(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        case = record.get("case")
        if case:
            _calls_note(record.get("calls_file"), case)
            HAND_OVERS[case](ctx)
        ctx.send_event(OutputEvent(output={"k": ctx.key, "i": record["i"]}))


def _records(keys: List[str], bad: Dict[str, str], **extra: Any) -> List[Dict[str, Any]]:
    """Three records per key, keys taking turns; record #1 of key ``k`` gets
    ``case = bad[k]`` when ``k`` is in ``bad``."""
    records = []
    for i in range(3):
        for k in keys:
            value: Dict[str, Any] = {"k": k, "i": i, **extra}
            if i == 1 and k in bad:
                value["case"] = bad[k]
            records.append({"key": k, "value": value})
    return records


def test_each_refused_value_skips_only_its_record_naming_action_key_record_and_field(run: Runner) -> None:
    cases = sorted(REFUSALS)
    records = _records(cases, {case: case for case in cases})

    result = run(HandOverAgent(), records, error_strategy="skip")

    assert result.failure is None, result.failure_text
    # Every other record ran, after the refused one too.
    assert _per_key(result.outputs) == {case: [{"k": case, "i": 0}, {"k": case, "i": 2}] for case in cases}
    errors = sorted(result.errors, key=lambda e: e["key"])
    assert [(e["key"], e["seq"], e["action"], e["error_type"], e["attempts"]) for e in errors] == [
        (case, 1, "hand_over", "EncodeError", 1) for case in cases
    ]
    for error in errors:
        path, reason = REFUSALS[error["key"]]
        assert error["error_message"].startswith(f"{path} {reason}"), error
        assert error["record"] == {"k": error["key"], "i": 1, "case": error["key"]}


@pytest.mark.parametrize("case", ["output_nested_function", "memory_big_int"])
def test_a_refused_value_under_fail_fails_the_job_naming_action_key_record_and_field(run: Runner, case: str) -> None:
    records = _records(["a", "b"], {"b": case})

    result = run(HandOverAgent(), records)  # error_strategy: fail (the default)

    path, reason = REFUSALS[case]
    assert f"action 'hand_over' failed on key 'b', record #1: EncodeError: {path} {reason}" in result.failure_text
    emitted = [(o["k"], o["i"]) for o in result.outputs]
    assert ("b", 1) not in emitted and ("b", 2) not in emitted
    if isinstance(result.failure, ActionFailed):  # the local runner
        assert (result.failure.key, result.failure.seq, result.failure.action) == ("b", 1, "hand_over")
        # The record before the refused one finished and was emitted. (On
        # Flink its output may die with the failing task before the tap
        # downstream sees it: a failed job's last outputs are not delivered.)
        assert ("b", 0) in emitted


def test_a_refused_value_under_retry_is_not_retried(run: Runner, tmp_path: Path) -> None:
    calls_file = tmp_path / "calls.txt"
    records = _records(["a"], {"a": "output_nested_function"}, calls_file=str(calls_file))

    result = run(HandOverAgent(), records, **{
        "error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001,
    })

    # A retry would refuse the same value again: the record fails at once.
    path, reason = REFUSALS["output_nested_function"]
    assert f"action 'hand_over' failed on key 'a', record #1: EncodeError: {path} {reason}" in result.failure_text
    assert calls_file.read_text(encoding="utf-8").split() == ["output_nested_function"]
    assert ("a", 1) not in [(o["k"], o["i"]) for o in result.outputs]


class CarriedAgent(Agent):
    """Sends values the codec carries: a set, datetimes, bytes that are not
    UTF-8 (which a JSON dump of the event refused before), also through
    memory."""

    @action(InputEvent)
    @staticmethod
    def send(event: InputEvent, ctx: RunnerContext) -> None:
        i = event.input["i"]
        ctx.short_term_memory.set("last", {"at": dt.datetime(2024, 5, 1, 12, i, tzinfo=dt.timezone.utc)})
        ctx.send_event(Noted(detail={"raw": b"\xff\x00" + bytes([i])}))

    @action(Noted)
    @staticmethod
    def report(event: Noted, ctx: RunnerContext) -> None:
        last = ctx.short_term_memory.get("last")
        ctx.send_event(OutputEvent(output={
            "k": ctx.key, "tags": {"x", ctx.key}, "at": last["at"], "raw": event.detail["raw"],
        }))


def test_values_the_codec_carries_are_sent_and_arrive_as_they_were(run: Runner) -> None:
    records = [{"key": k, "value": {"k": k, "i": i}} for i in range(2) for k in "pq"]

    result = run(CarriedAgent(), records, error_strategy="skip")

    assert result.failure is None and result.errors == []
    assert _per_key(result.outputs) == {k: [
        {"k": k, "tags": {"x", k}, "at": dt.datetime(2024, 5, 1, 12, i, tzinfo=dt.timezone.utc),
         "raw": b"\xff\x00" + bytes([i])}
        for i in range(2)
    ] for k in "pq"}


class FallbackAgent(Agent):
    """Catches a refused value where it hands it over and sends a fallback."""

    @action(InputEvent)
    @staticmethod
    def send(event: InputEvent, ctx: RunnerContext) -> None:
        counts = collections.Counter(event.input["words"])
        try:
            ctx.send_event(OutputEvent(output={"k": ctx.key, "counts": counts}))
        except TypeError as refused:
            ctx.send_event(OutputEvent(output={"k": ctx.key, "counts": dict(counts), "refused": str(refused)}))


def test_a_refused_event_fails_at_send_event_where_the_action_can_handle_it(run: Runner) -> None:
    records = [{"key": "a", "value": {"k": "a", "words": ["x", "y", "x"]}}]

    result = run(FallbackAgent(), records)

    assert result.failure is None, result.failure_text
    [output] = result.outputs
    assert output["counts"] == {"x": 2, "y": 1}
    assert output["refused"].startswith("event OutputEvent.output.counts is a collections.Counter, which the codec")

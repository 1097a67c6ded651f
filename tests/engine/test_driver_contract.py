"""The driver contract (DESIGN.md, "One engine, two drivers"; STYLE.md point
4): one suite, each scenario asserting the same result on every host. Here
``run`` is parametrized over the local runner (``local``) and the recording
Flink host (``flink_recording``: tests/support/recording_flink.py, the real
operator and ``FlinkDriver`` over fake keyed state and timers, in process,
no JVM); tests/e2e/test_driver_contract_e2e.py runs the same tests with its
own ``run`` on the Flink runner (mini-cluster). What the recording shows
(state writes, timers, emissions per callback) is asserted in
tests/engine/test_flink_recording.py.

- per-key order and short-term memory across records;
- outputs are all or nothing per record (issue 13, part 1's drift example):
  a record whose first action sent an ``OutputEvent`` and whose second
  action raised emits nothing, under ``skip`` (one error record instead)
  and under ``fail`` (the job fails naming key, record and action);
- memory rollback: a skipped record leaves the key's memory as it was;
- a retry replays the completed journaled call before the one that failed;
- values through the typed codec: ``datetime`` and ``set`` in the input, an
  ``Enum`` in memory.

``run`` (the fixture) takes ``{"key", "value"}`` records whose value is a
dict carrying the key as ``"k"`` (the Flink runner keys by it, the local
runner by ``"key"``, so the agent sees the same input on both) and returns
outputs, error records and the job's failure. On Flink every output is also
appended to a file by a function chained to the agent operator (the same
Python worker), so outputs emitted right before a failure are seen even if
the failing job never delivers them to ``execute_and_collect``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Dict, List

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from flink_agents.runtime.errors import ActionFailed

# Agents and functions below run in Flink's Python workers: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(180)


# --- the two runners ----------------------------------------------------------------------------


@dataclass
class Result:
    """What a runner gave back.

    Attributes:
        outputs: ``OutputEvent`` outputs, in emission order (per key; keys interleave).
        errors: Error records (``skip`` strategy).
        failure: The job's failure: ``ActionFailed`` on the local runner, the
            Java exception carrying its text on Flink; None if it finished.
        failure_text: ``str(failure)``, or "".
    """

    outputs: List[Any] = field(default_factory=list)
    errors: List[Dict[str, Any]] = field(default_factory=list)
    failure: BaseException | None = None

    @property
    def failure_text(self) -> str:
        return "" if self.failure is None else str(self.failure)


Runner = Callable[..., Result]


def _run_local(agent: Agent, records: List[Dict[str, Any]], **config: Any) -> Result:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config)
    builder = env.from_list(records).apply(agent)
    outputs, errors = builder.to_list(), builder.to_error_list()
    result = Result()
    try:
        env.execute()
    except ActionFailed as failure:
        result.failure = failure
    result.outputs = [output for item in outputs for output in item.values()]
    result.errors = list(errors)
    return result


def _by_k(value: Any) -> Any:
    return value["k"]


def _tap(path: str) -> Callable[[Any], Any]:
    """A map that appends each output (JSON) to ``path`` and tags it."""

    def tap(output: Any) -> Any:
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps(output, default=repr) + "\n")
        return ("output", output)

    return tap


def _run_flink(tmp_path: Path, agent: Agent, records: List[Dict[str, Any]], **config: Any) -> Result:
    from py4j.protocol import Py4JJavaError
    from pyflink.common import Types

    from tests.support.flink_jobs import mini_cluster_env

    for record in records:  # the Flink runner keys by the value's own "k"
        assert record["value"]["k"] == record["key"], record
    values = [record["value"] for record in records]
    tapped = tmp_path / "outputs.jsonl"
    tapped.unlink(missing_ok=True)
    env = mini_cluster_env(2)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db"), **config}
    )
    # Pickled Python values (datetimes and sets included), keyed straight
    # from the (non-parallel) source, so a key's records arrive in input order.
    source = env.from_collection(values)
    builder = agents_env.from_datastream(source, _by_k).apply(agent)
    # The contract compares the values the runtime carries: the objects the
    # actions sent, not their JSON-like form (``to_datastream()``'s default).
    outputs = builder.to_datastream(typed_outputs=True).map(_tap(str(tapped)), output_type=Types.PICKLED_BYTE_ARRAY())
    errors = builder.error_stream().map(lambda e: ("error", e), output_type=Types.PICKLED_BYTE_ARRAY())
    result = Result()
    collected: List[Any] = []
    try:
        with outputs.union(errors).execute_and_collect("driver-contract") as items:
            for item in items:
                collected.append(item)
    except Py4JJavaError as failure:
        result.failure = failure
    result.errors = [value for kind, value in collected if kind == "error"]
    if result.failure is None:
        result.outputs = [value for kind, value in collected if kind == "output"]
    else:  # what the agent operator emitted, delivered or not
        lines = tapped.read_text(encoding="utf-8").splitlines() if tapped.exists() else []
        result.outputs = [json.loads(line) for line in lines]
    return result


def _run_flink_recording(agent: Agent, records: List[Dict[str, Any]], **config: Any) -> Result:
    """The Flink operator in process, on the recording host (no JVM)."""
    from tests.support import recording_flink

    recorded = recording_flink.run(agent, records, **config)
    return Result(outputs=recorded.outputs, errors=recorded.errors, failure=recorded.failure)


@pytest.fixture(params=["local", "flink_recording"])
def run(request: pytest.FixtureRequest) -> Runner:
    """``run(agent, records, **config) -> Result`` on the local runner and on
    the recording Flink host; the ``run`` of
    tests/e2e/test_driver_contract_e2e.py runs the same tests on the Flink
    runner."""
    return {"local": _run_local, "flink_recording": _run_flink_recording}[request.param]


def _records(keys: str, per_key: int, **extra: Any) -> List[Dict[str, Any]]:
    """``per_key`` records of each key, keys taking turns: ``{"k", "i", **extra}``."""
    return [{"key": k, "value": {"k": k, "i": i, **extra}} for i in range(per_key) for k in keys]


def _per_key(outputs: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    grouped: Dict[str, List[Dict[str, Any]]] = {}
    for output in outputs:
        grouped.setdefault(output["k"], []).append(output)
    return grouped


# --- 1. per-key order and memory across records -------------------------------------------------


class Counted(Event):
    count: int


class CountingAgent(Agent):
    """Counts the key's records in short-term memory; some records wait a
    little (so a key's next record queues behind them and keys overlap),
    the output goes out from a second action."""

    @action(InputEvent)
    @staticmethod
    async def count(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        if (record["i"] + ord(record["k"])) % 3 == 0:
            await asyncio.sleep(0.02)
        count = (ctx.short_term_memory.get("count") or 0) + 1
        ctx.short_term_memory.set("count", count)
        ctx.sensory_memory.set("i", record["i"])
        ctx.send_event(Counted(count=count))

    @action(Counted)
    @staticmethod
    def report(event: Counted, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output={"k": ctx.key, "i": ctx.sensory_memory.get("i"), "count": event.count}))


def test_records_of_a_key_run_in_input_order_with_memory_across_records(run: Runner) -> None:
    result = run(CountingAgent(), _records("abcd", 6))

    assert result.failure is None and result.errors == []
    assert _per_key(result.outputs) == {
        k: [{"k": k, "i": i, "count": i + 1} for i in range(6)] for k in "abcd"
    }


# --- 2. outputs all or nothing per record (issue 13, part 1) ------------------------------------


class Checked(Event):
    pass


class PoisonAgent(Agent):
    """The drift example of issue 13, part 1: ``send``, the first action,
    sends the record's output; ``check``, the second, raises on a record
    marked ``poison``."""

    @action(InputEvent)
    @staticmethod
    def send(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.sensory_memory.set("poison", bool(event.input.get("poison")))
        ctx.send_event(OutputEvent(output={"k": ctx.key, "i": event.input["i"]}))
        ctx.send_event(Checked())

    @action(Checked)
    @staticmethod
    async def check(event: Checked, ctx: RunnerContext) -> None:
        await asyncio.sleep(0)
        if ctx.sensory_memory.get("poison"):
            raise ValueError("poisoned record")


def _poisoned(keys: str, per_key: int, key: str, i: int) -> List[Dict[str, Any]]:
    records = _records(keys, per_key)
    for record in records:
        if record["key"] == key and record["value"]["i"] == i:
            record["value"]["poison"] = True
    return records


def test_skip_a_record_whose_second_action_raised_emits_none_of_its_outputs(run: Runner) -> None:
    records = _poisoned("abc", 3, "b", 1)

    result = run(PoisonAgent(), records, error_strategy="skip")

    assert result.failure is None
    assert _per_key(result.outputs) == {
        "a": [{"k": "a", "i": i} for i in range(3)],
        "b": [{"k": "b", "i": 0}, {"k": "b", "i": 2}],  # none of record #1's
        "c": [{"k": "c", "i": i} for i in range(3)],
    }
    assert result.errors == [{
        "key": "b", "seq": 1, "record": {"k": "b", "i": 1, "poison": True}, "action": "check",
        "error_type": "ValueError", "error_message": "poisoned record", "attempts": 1,
    }]


def test_fail_a_record_whose_second_action_raised_fails_the_job_without_its_outputs(run: Runner) -> None:
    records = _poisoned("abc", 3, "b", 1)

    result = run(PoisonAgent(), records)  # error_strategy: fail (the default)

    assert result.failure is not None
    assert "action 'check' failed on key 'b', record #1: ValueError: poisoned record" in result.failure_text
    if isinstance(result.failure, ActionFailed):
        assert (result.failure.key, result.failure.seq, result.failure.action) == ("b", 1, "check")
    else:  # on Flink: the Java exception carries the Python traceback's last line
        assert "flink_agents.runtime.errors.ActionFailed: action 'check'" in result.failure_text
    emitted = [(o["k"], o["i"]) for o in result.outputs]
    # What finished before the failed record of its key is emitted, then the
    # job fails (this also shows that the outputs seen are what was emitted).
    assert ("b", 0) in emitted
    assert ("b", 1) not in emitted, f"the failed record's output escaped: {result.outputs}"
    assert ("b", 2) not in emitted  # nothing after the failed record of its key either
    assert len(emitted) == len(set(emitted))


# --- 3. memory rollback -------------------------------------------------------------------------


class Remembered(Event):
    pass


class RememberThenRaise(Agent):
    """``remember`` appends the record to the key's memory; ``answer``, a
    later action, raises on a poisoned record, else outputs the memory it sees."""

    @action(InputEvent)
    @staticmethod
    def remember(event: InputEvent, ctx: RunnerContext) -> None:
        seen = list(ctx.short_term_memory.get("seen") or [])
        ctx.short_term_memory.set("seen", seen + [event.input["i"]])
        ctx.short_term_memory.set("last.i", event.input["i"])
        ctx.sensory_memory.set("poison", bool(event.input.get("poison")))
        ctx.send_event(Remembered())

    @action(Remembered)
    @staticmethod
    async def answer(event: Remembered, ctx: RunnerContext) -> None:
        await asyncio.sleep(0)
        if ctx.sensory_memory.get("poison"):
            raise ValueError("poisoned after memory was written")
        memory = ctx.short_term_memory
        ctx.send_event(OutputEvent(output={"k": ctx.key, "seen": memory.get("seen"), "last": memory.get("last.i")}))


def test_a_skipped_record_leaves_the_keys_memory_as_before_it(run: Runner) -> None:
    records = _poisoned("ab", 4, "a", 1)

    result = run(RememberThenRaise(), records, error_strategy="skip")

    assert result.failure is None
    assert _per_key(result.outputs) == {
        "a": [
            {"k": "a", "seen": [0], "last": 0},
            # record #1 failed after its first action wrote memory: gone
            {"k": "a", "seen": [0, 2], "last": 2},
            {"k": "a", "seen": [0, 2, 3], "last": 3},
        ],
        "b": [{"k": "b", "seen": list(range(i + 1)), "last": i} for i in range(4)],
    }
    assert [(e["key"], e["seq"], e["action"]) for e in result.errors] == [("a", 1, "answer")]


# --- 4. a retry replays the completed call before the failed one --------------------------------


def _note_call(calls_file: str, name: str) -> int:
    """Append ``name`` to ``calls_file``; how many times it was called so far."""
    with open(calls_file, "a", encoding="utf-8") as file:
        file.write(name + "\n")
    with open(calls_file, encoding="utf-8") as file:
        return sum(1 for line in file if line.strip() == name)


def send_email(to: str, calls_file: str) -> str:
    _note_call(calls_file, "send_email")
    return f"emailed {to}"


def flaky_fetch(what: str, calls_file: str) -> str:
    if _note_call(calls_file, "flaky_fetch") == 1:
        raise ConnectionError("connection reset by peer")
    return f"fetched {what}"


class EmailThenFetch(Agent):
    """Two journaled calls; the second fails on its first call."""

    @action(InputEvent)
    @staticmethod
    async def handle(event: InputEvent, ctx: RunnerContext) -> None:
        calls_file = event.input["calls_file"]
        receipt = await ctx.durable_execute_async(send_email, "ops@example.com", calls_file)
        data = await ctx.durable_execute_async(flaky_fetch, event.input["k"], calls_file)
        ctx.send_event(OutputEvent(output={"k": ctx.key, "receipt": receipt, "data": data}))


def test_a_retried_action_replays_its_completed_call_and_emits_once(run: Runner, tmp_path: Path) -> None:
    calls_file = tmp_path / "calls.txt"
    records = [{"key": "r", "value": {"k": "r", "i": 0, "calls_file": str(calls_file)}}]

    result = run(EmailThenFetch(), records, **{
        "error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001,
    })

    assert result.failure is None and result.errors == []
    assert result.outputs == [{"k": "r", "receipt": "emailed ops@example.com", "data": "fetched r"}]
    # The email went out once; only the failed call ran again.
    assert calls_file.read_text(encoding="utf-8").split() == ["send_email", "flaky_fetch", "flaky_fetch"]


# --- 5. values through the codec ----------------------------------------------------------------


class Tier(Enum):
    GOLD = "gold"
    SILVER = "silver"


class TypesAgent(Agent):
    """Reports the types its input and its memory read back with."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        await asyncio.sleep(0.01 if record["i"] % 2 else 0)
        memory = ctx.short_term_memory
        before = memory.get("tier")
        if record["i"] == 0:
            memory.set("tier", Tier.GOLD)
            memory.set("tiers", {"best": Tier.GOLD, "next": [Tier.SILVER]})
        at, tags = record["at"], record["tags"]
        ctx.send_event(OutputEvent(output={
            "k": ctx.key, "i": record["i"],
            "at": [type(at).__name__, at.isoformat(), (at + dt.timedelta(days=1)).isoformat()],
            "tags": [type(tags).__name__, sorted(tags), "x" in tags],
            "tier_before": None if before is None else [type(before).__name__, before.name, before is Tier.GOLD],
            "tiers": _describe(memory.get("tiers")),
        }))


def _describe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _describe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_describe(v) for v in value]
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    return value


def test_datetimes_sets_and_enums_read_back_with_their_types(run: Runner) -> None:
    utc = dt.timezone.utc
    records = [
        {"key": k, "value": {"k": k, "i": i, "at": dt.datetime(2024, 5, 1 + i, 12, 30, tzinfo=utc if i else None),
                             "tags": {"x", k} if i % 2 else frozenset({"y"})}}
        for i in range(3) for k in "pq"
    ]

    result = run(TypesAgent(), records)

    assert result.failure is None
    gold = ["Tier", "GOLD", True]
    tiers = {"best": "Tier.GOLD", "next": ["Tier.SILVER"]}
    assert _per_key(result.outputs) == {k: [
        {"k": k, "i": 0, "at": ["datetime", "2024-05-01T12:30:00", "2024-05-02T12:30:00"],
         "tags": ["frozenset", ["y"], False], "tier_before": None, "tiers": tiers},
        {"k": k, "i": 1, "at": ["datetime", "2024-05-02T12:30:00+00:00", "2024-05-03T12:30:00+00:00"],
         "tags": ["set", sorted({"x", k}), True], "tier_before": gold, "tiers": tiers},
        {"k": k, "i": 2, "at": ["datetime", "2024-05-03T12:30:00+00:00", "2024-05-04T12:30:00+00:00"],
         "tags": ["frozenset", ["y"], False], "tier_before": gold, "tiers": tiers},
    ] for k in "pq"}

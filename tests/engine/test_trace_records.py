"""Flink Agents HEAD's trace records (``event-log.trace.enabled``, issue 30
part 4): the review agent on the production local path, its OpenAI
connection the real SDK against a scripted server on 127.0.0.1, its event
log a real file; records checked field by field against HEAD's shape
(apache/flink-agents PR #924: ``EventLogRecordJsonSerializer``,
``ExecutionLifecycleEvents``, ``EventLogRecordJsonSerdeTest``
``testSerializeAndDeserializeExecutionLifecycleFields``, and the example
record of its ``docs/content/docs/operations/monitoring.md``)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.runtime.features.trace_records import (
    FanOutSink, RecordTracing, execution_id_of, instant_text, records_of_spans, with_trace_records,
)
from flink_agents.runtime.features.otel_export import flush_all
from flink_agents.runtime.features.tracing import SpanRecord, span_id_of, trace_id_of
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.framework_runs import Crash, crash_at_write, disarm, engine_for, run_records
from tests.support.notify_tool import clear_notified  # noqa: F401 (an autouse fixture)
from tests.support.otlp_receiver import OtlpReceiver
from tests.unit.test_openai_chat_model import ANSWER, REVIEW, TOOL_CALL_REPLY, openai_review_agent

# HEAD's lifecycle event types and their statuses (ExecutionLifecycleEvents).
LIFECYCLE = {"_execution_started_event": "started", "_execution_finished_event": "success",
             "_execution_failed_event": "failed", "_execution_reused_event": "reused"}
# HEAD's field order (EventLogRecordJsonSerializer, logLevel put second by the loggers).
ORDER = ["timestamp", "logLevel", "inputRunId", "businessKey", "agentName", "executionId", "parentExecutionId",
         "entityType", "entityName", "entityMetadata", "eventId", "eventType", "status", "problemCategory",
         "eventAttributes"]
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z$")


@pytest.fixture(autouse=True)
def _no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)


def _traced_engine(server: Any, store: InMemoryJournalStore, log_dir: Path, **extra: Any):
    """An engine with a file event log and trace records, wired as engine.py
    is asked to wire them (``with_trace_records`` over ``job_tracing``)."""
    engine = engine_for(openai_review_agent(server.base_url), store,
                        {"baseLogDir": str(log_dir), "event-log.trace.enabled": True, **extra})
    if not isinstance(engine.tracing, RecordTracing):  # until engine.py wires it
        engine.tracing = with_trace_records(engine.tracing, engine.config, engine.plan, engine.event_log)
    for_run = engine.event_log.for_run  # and the run's identity for the business records' trace context

    def run_log(key: Any, seq: int, now: Any, *identity: Any) -> Any:
        return for_run(key, seq, now, *(identity or ("job", json.dumps(key))))

    engine.event_log.for_run = run_log
    return engine


def _records(log_dir: Path) -> List[Dict[str, Any]]:
    [path] = log_dir.glob("events-*.log")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _lifecycle(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [r for r in records if r.get("eventType") in LIFECYCLE]


def _check_shape(record: Dict[str, Any]) -> None:
    """HEAD's flat lifecycle record, field by field."""
    assert list(record) == [name for name in ORDER if name in record]
    assert INSTANT.match(record["timestamp"]), record["timestamp"]
    assert record["logLevel"] in ("STANDARD", "VERBOSE")
    for name in ("inputRunId", "executionId", "eventId"):
        uuid.UUID(record[name])
    assert record["status"] == LIFECYCLE[record["eventType"]]
    assert record["entityType"] in ("action", "llm", "tool")
    assert isinstance(record["entityName"], str) and record["entityName"]
    assert ("parentExecutionId" in record) == (record["entityType"] != "action")
    assert ("problemCategory" in record) == (record["status"] == "failed")
    assert isinstance(record["eventAttributes"], dict)
    # What HEAD's trace-tree reader takes as a framework lifecycle record
    # (flink_agents/cli/trace_tree.py ``_is_execution_lifecycle_record``).
    assert all(isinstance(record[f], str) and record[f] for f in ("executionId", "entityType", "entityName"))


def test_a_run_writes_heads_trace_records_beside_its_events(scripted_chat_server, tmp_path):
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    run_records(_traced_engine(scripted_chat_server, InMemoryJournalStore(), tmp_path), [("B01", REVIEW)])

    records = _records(tmp_path)
    lifecycle = _lifecycle(records)
    assert len(records) > len(lifecycle) > 0  # the business events are in the same file
    for record in lifecycle:
        _check_shape(record)
    trace = trace_id_of("job", json.dumps("B01"), 0)
    assert {r["inputRunId"] for r in lifecycle} == {str(uuid.UUID(int=trace))}
    assert {r["businessKey"] for r in lifecycle} == {"B01"}
    assert {r["agentName"] for r in lifecycle} == {"ReviewAgent"}

    executions: Dict[str, List[Dict[str, Any]]] = {}
    for record in lifecycle:
        executions.setdefault(record["executionId"], []).append(record)
    for recorded in executions.values():  # started, then success, once each
        assert [r["status"] for r in recorded] == ["started", "success"]
        assert recorded[0]["timestamp"] <= recorded[1]["timestamp"]
    actions = {r["executionId"]: r["entityName"] for r in lifecycle if r["entityType"] == "action"}
    llm = [r for r in lifecycle if r["entityType"] == "llm" and r["status"] == "started"]
    tools = [r for r in lifecycle if r["entityType"] == "tool" and r["status"] == "started"]
    assert len(llm) == 2 and len(tools) == 1
    # A model call: its chat model resource and configured model, under the
    # built-in chat action's execution (HEAD: childExecution of the action).
    for call in llm:
        assert call["entityName"] == "reviewer"
        assert call["entityMetadata"] == {"model": "gpt-test"}
        assert call["parentExecutionId"] in actions
    [tool] = tools
    assert tool["entityName"] == "notify_shipping_manager"
    assert tool["entityMetadata"] == {"toolCallId": TOOL_CALL_REPLY["tool_calls"][0]["id"]}
    assert tool["parentExecutionId"] in actions
    assert all(r["eventAttributes"] == {} for r in lifecycle)
    assert len({r["eventId"] for r in lifecycle}) == len(lifecycle)


def test_a_replay_writes_the_same_ids_and_reused_records_for_what_it_took_from_the_journal(
        scripted_chat_server, tmp_path):
    """A run interrupted after its tool result was durable, replayed by a
    new engine over the same journal (a restore): its executions keep their
    ids; the steps the replay took from the journal are ``reused`` (HEAD:
    ``_execution_reused_event`` for an action completed before recovery)."""
    store = InMemoryJournalStore()
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    crash_at_write(store, "after_write", 3)
    with pytest.raises(Crash):
        run_records(_traced_engine(scripted_chat_server, store, tmp_path), [("B01", REVIEW)])
    disarm(store, "after_write")
    before = _lifecycle(_records(tmp_path))
    run_records(_traced_engine(scripted_chat_server, store, tmp_path), [("B01", REVIEW)])
    after = _lifecycle(_records(tmp_path))[len(before):]

    for record in before + after:
        _check_shape(record)
    assert len({r["inputRunId"] for r in before + after}) == 1
    # Every execution the journal held is reused, with the id it was first
    # written under: ask, the first model call and its action, and the tool
    # call (durable, its records lost with the crash) and its action.
    reused = {r["executionId"]: (r["entityType"], r["entityName"]) for r in after if r["status"] == "reused"}
    assert {r["executionId"] for r in before} <= set(reused)
    assert sorted(reused.values()) == [
        ("action", "_chat_model_action"), ("action", "_tool_call_action"), ("action", "ask"),
        ("llm", "reviewer"), ("tool", "notify_shipping_manager")]
    finished_first = {r["executionId"] for r in before if r["status"] == "success"}
    assert not finished_first & {r["executionId"] for r in after if r["status"] == "started"}, \
        "a finished execution was started again"
    # The run ends with its answer action, written once.
    assert [r["entityName"] for r in after if r["status"] == "success"][-1] == "answer"
    assert len(scripted_chat_server.requests) == 2  # the first model call was replayed, not asked again


def test_per_type_levels_apply_and_off_drops_the_type(scripted_chat_server, tmp_path):
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    run_records(_traced_engine(scripted_chat_server, InMemoryJournalStore(), tmp_path, **{
        "event-log.type._execution_started_event.level": "OFF",
        "event-log.type._execution_finished_event.level": "VERBOSE",
    }), [("B01", REVIEW)])
    lifecycle = _lifecycle(_records(tmp_path))
    assert lifecycle and {r["eventType"] for r in lifecycle} == {"_execution_finished_event"}
    assert {r["logLevel"] for r in lifecycle} == {"VERBOSE"}


def test_trace_records_off_by_default_or_without_a_logger(scripted_chat_server, tmp_path):
    engine = engine_for(openai_review_agent(scripted_chat_server.base_url), InMemoryJournalStore(),
                        {"baseLogDir": str(tmp_path)})
    assert with_trace_records(engine.tracing, engine.config, engine.plan, engine.event_log) is None
    engine.close()
    quiet = engine_for(openai_review_agent(scripted_chat_server.base_url), InMemoryJournalStore(),
                       {"event-log.trace.enabled": True})
    assert quiet.event_log is None
    assert with_trace_records(quiet.tracing, quiet.config, quiet.plan, quiet.event_log) is None
    quiet.close()


def test_business_records_carry_heads_lineage_and_trace_context(scripted_chat_server, tmp_path):
    """HEAD with trace on: a business event's record carries its upstream
    event and action (read by HEAD's trace-tree reader from a nested record's
    ``event``) and the trace context of the action execution that sent it."""
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    run_records(_traced_engine(scripted_chat_server, InMemoryJournalStore(), tmp_path), [("B01", REVIEW)])
    records = _records(tmp_path)
    business = [r for r in records if r["eventType"] not in LIFECYCLE]
    executions = {r["executionId"]: r["entityName"] for r in _lifecycle(records) if r["entityType"] == "action"}
    by_id = {r["event"]["id"]: r for r in business}
    [root] = [r for r in business if r["eventType"] == "_input_event"]
    assert "upstreamEventId" not in root["event"] and "executionId" not in root
    assert root["inputRunId"] == str(uuid.UUID(int=trace_id_of("job", json.dumps("B01"), 0)))
    assert root["businessKey"] == "B01"
    for record in business:
        assert list(record)[:4] == ["timestamp", "logLevel", "inputRunId", "businessKey"]
        if record is root:
            continue
        event = record["event"]
        assert event["upstreamEventId"] in by_id and event["upstreamActionName"] == record["action"]
        assert record["action"] in by_id[event["upstreamEventId"]]["handledBy"]
        # the sending action's execution: the id its lifecycle records carry
        assert executions[record["executionId"]] == record["entityName"] == record["action"]
        assert record["entityType"] == "action"
    chain, node = [], next(r for r in business if r["eventType"] == "_output_event")
    while "upstreamEventId" in node["event"]:
        chain.append(node["event"]["upstreamActionName"])
        node = by_id[node["event"]["upstreamEventId"]]
    assert chain == ["answer", "_chat_model_action", "_tool_call_action", "_chat_model_action", "ask"]


def test_without_trace_records_the_event_log_keeps_its_0_3_1_records(scripted_chat_server, tmp_path):
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    run_records(engine_for(openai_review_agent(scripted_chat_server.base_url), InMemoryJournalStore(),
                           {"baseLogDir": str(tmp_path)}), [("B01", REVIEW)])
    records = _records(tmp_path)
    assert records and not _lifecycle(records)
    for record in records:
        assert list(record) == ["timestamp", "logLevel", "eventType", "key", "seq", "action", "handledBy", "event"]
        assert "upstreamEventId" not in record["event"]


def test_with_opentelemetry_on_both_get_every_span(scripted_chat_server, tmp_path, monkeypatch):
    """The OTel sink and the trace records side by side (``FanOutSink``):
    the records' ids are the spans' (``inputRunId`` the trace id)."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OtlpReceiver() as receiver:
        scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
        engine = _traced_engine(scripted_chat_server, InMemoryJournalStore(), tmp_path, **{
            "tracing.exporter": "otlp", "tracing.otlp.endpoint": receiver.endpoint})
        assert isinstance(engine.tracing.sink, FanOutSink)
        run_records(engine, [("B01", REVIEW)])
        assert flush_all(10)
        spans = [s for s in receiver.spans if s.name == "execute_tool notify_shipping_manager"]
    [tool] = [r for r in _lifecycle(_records(tmp_path)) if r["entityType"] == "tool" and r["status"] == "started"]
    [span] = spans
    assert tool["inputRunId"] == str(uuid.UUID(hex=span.trace_id))
    assert tool["executionId"] == execution_id_of(int(span.trace_id, 16), int(span.span_id, 16))


# -- from spans ----------------------------------------------------------------------

RUN = (None, "job", json.dumps("order-1001"), 0)
TRACE = trace_id_of(*RUN[1:])


def _span(position: tuple, parent: Any, name: str, start: int, end: int, error: Any = None,
          **attributes: Any) -> SpanRecord:
    return SpanRecord(TRACE, span_id_of(TRACE, "job", *position), parent, name, "internal", start, end,
                      dict(attributes), error)


def test_records_of_spans_match_heads_example_record_field_for_field():
    """HEAD's example (monitoring.md, "Example Trace record"): an llm
    execution finished, its chat model resource as entityName and the
    configured model in entityMetadata.model, under its action."""
    step = _span(("step", "chat@1"), 1, "chat", 1_000_000_000, 4_000_000_000,
                 **{"flink_agents.action": "chat", "flink_agents.step": "chat@1"})
    call = _span(("call", "chat@1", 0), step.span_id, "chat qwen-max", 2_000_000_000, 3_000_123_000,
                 **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen-max",
                    "flink_agents.step": "chat@1", "flink_agents.ordinal": 0})
    records = records_of_spans([call, step], RUN, "ReActAgent", {"_default_chat_model": ("qwen-max", "dashscope")})
    assert [(r["entityType"], r["status"]) for r in records] == [
        ("action", "started"), ("llm", "started"), ("llm", "success"), ("action", "success")]
    finished = records[2]
    action_id = execution_id_of(TRACE, step.span_id)
    assert finished == {
        "timestamp": "1970-01-01T00:00:03.000123Z",
        "inputRunId": str(uuid.UUID(int=TRACE)),
        "businessKey": "order-1001",
        "agentName": "ReActAgent",
        "executionId": execution_id_of(TRACE, call.span_id),
        "parentExecutionId": action_id,
        "entityType": "llm",
        "entityName": "_default_chat_model",
        "entityMetadata": {"model": "qwen-max"},
        "eventId": finished["eventId"],
        "eventType": "_execution_finished_event",
        "status": "success",
        "eventAttributes": {},
    }
    assert records[0] == {
        "timestamp": "1970-01-01T00:00:01Z", "inputRunId": str(uuid.UUID(int=TRACE)), "businessKey": "order-1001",
        "agentName": "ReActAgent", "executionId": action_id, "entityType": "action", "entityName": "chat",
        "eventId": records[0]["eventId"], "eventType": "_execution_started_event", "status": "started",
        "eventAttributes": {},
    }


def test_a_failed_call_is_a_failed_record_with_its_problem_category():
    """As HEAD's ``testSerializeAndDeserializeExecutionLifecycleFields``:
    status failed, problemCategory top level, errorType and errorMessage in
    eventAttributes."""
    tool = _span(("call", "tools@2", 1), 7, "execute_tool lookup", 5, 9, "TimeoutError: no answer",
                 **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "error.type": "TimeoutError",
                    "flink_agents.step": "tools@2", "flink_agents.ordinal": 1})
    started, failed = records_of_spans([tool], RUN, "A")
    assert started["status"] == "started" and "problemCategory" not in started
    assert failed["eventType"] == "_execution_failed_event" and failed["status"] == "failed"
    assert failed["problemCategory"] == "tool_call_failed"
    assert failed["eventAttributes"] == {"errorType": "TimeoutError", "errorMessage": "no answer"}
    assert failed["parentExecutionId"] == execution_id_of(TRACE, span_id_of(TRACE, "job", "step", "tools@2"))
    assert "entityMetadata" not in failed


def test_a_replayed_step_is_one_reused_record_and_spans_without_an_entity_are_left_out():
    step = _span(("step", "a@0"), 1, "a", 10, 20, **{"flink_agents.action": "a", "flink_agents.step": "a@0",
                                                      "flink_agents.replayed": True})
    root = _span(("run",), None, "invoke_agent A", 0, 30, **{"gen_ai.operation.name": "invoke_agent"})
    memory = _span(("call", "a@0", 0), step.span_id, "memory ltm", 11, 12, **{"flink_agents.step": "a@0"})
    [reused] = records_of_spans([root, step, memory], RUN, "A", now_ns=lambda: 1_700_000_000_000_000_000)
    assert reused["eventType"] == "_execution_reused_event" and reused["status"] == "reused"
    assert reused["timestamp"] == "2023-11-14T22:13:20Z"
    assert reused["executionId"] == execution_id_of(TRACE, step.span_id)


def test_instant_text_is_javas_instant_to_string():
    assert instant_text(0) == "1970-01-01T00:00:00Z"
    assert instant_text(1_500_000_000) == "1970-01-01T00:00:01.500Z"
    assert instant_text(1_000_001_000) == "1970-01-01T00:00:01.000001Z"
    assert instant_text(1_000_000_001) == "1970-01-01T00:00:01.000000001Z"


def test_fan_out_hands_every_export_to_each_sink():
    class Collect:
        def __init__(self) -> None:
            self.got: List[Any] = []
            self.schedule_delay_ms = 50

        def export(self, run: Any, spans: Any) -> None:
            self.got.append((run, spans))

        def flush(self, timeout_s: float = 30.0) -> bool:
            return True

    first, second = Collect(), Collect()
    sink = FanOutSink([first, second])
    sink.export(RUN, [])
    assert first.got == second.got == [(RUN, [])]
    assert sink.flush() and sink.schedule_delay_ms == 50
    assert isinstance(RecordTracing(None, second).start_recovery(None, "job", 1.0).is_set(), bool)


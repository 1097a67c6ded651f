"""OpenTelemetry traces of runs (issue 30, part 1): the review agent on the
production local path (``KeyedHost`` over ``LocalDriver``), its OpenAI
connection the real SDK against a scripted server on 127.0.0.1, its spans
exported by the real OTLP/HTTP exporter to a real receiver on 127.0.0.1
(``tests/support/otlp_receiver``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.runner_context import RunnerContext
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.features.otel_export import flush_all
from flink_agents.runtime.features.tracing import span_id_of, trace_id_of
from flink_agents.stores.journal import TRACE_STEP
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.framework_runs import Crash, crash_at_write, disarm, engine_for, run_records
from tests.support.notify_tool import clear_notified  # noqa: F401 (an autouse fixture)
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.unit.test_openai_chat_model import ANSWER, REVIEW, TOOL_CALL_REPLY, openai_review_agent

ROOT = "invoke_agent ReviewAgent"


@pytest.fixture(autouse=True)
def _otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces configured by the job's options only; a short export delay."""
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_SDK_DISABLED",
                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


@pytest.fixture
def receiver():
    with OtlpReceiver() as server:
        yield server


def _tracing(receiver: OtlpReceiver, **extra: Any) -> Dict[str, Any]:
    return {"tracing.exporter": "otlp", "tracing.otlp.endpoint": receiver.endpoint,
            "tracing.service_name": "reviews", **extra}


def _script(server: Any, records: int) -> None:
    for _ in range(records):
        server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])


def _by_id(spans: List[ReceivedSpan]) -> Dict[str, ReceivedSpan]:
    return {span.span_id: span for span in spans}


def _check_tree(spans: List[ReceivedSpan], key: str, seq: int = 0) -> Dict[str, List[ReceivedSpan]]:
    """The one trace of record ``key#seq``: one root, every parent in the
    trace; returns its spans by name."""
    key_text = json.dumps(key)  # keys are journaled as JSON text
    trace = f"{trace_id_of('job', key_text, seq):032x}"
    mine = [s for s in spans if s.trace_id == trace]
    roots = [s for s in mine if s.parent_id is None]
    assert [r.name for r in roots] == [ROOT], [s.name for s in mine]
    ids = _by_id(mine)
    for span in mine:
        assert span.parent_id is None or span.parent_id in ids, f"{span.name}: parent not in the trace"
        assert span.start_ns <= span.end_ns
    by_name: Dict[str, List[ReceivedSpan]] = {}
    for span in mine:
        by_name.setdefault(span.name, []).append(span)
    return by_name


def test_each_records_run_is_one_trace_of_its_steps_model_calls_and_tool_calls(receiver, scripted_chat_server):
    _script(scripted_chat_server, 2)
    engine = engine_for(openai_review_agent(scripted_chat_server.base_url), InMemoryJournalStore(),
                        _tracing(receiver))
    run_records(engine, [("B01", REVIEW), ("B02", REVIEW)])  # closes the engine: flushed

    assert len(receiver.spans) == len({s.span_id for s in receiver.spans}), "a span was exported twice"
    for key in ("B01", "B02"):
        spans = _check_tree(receiver.spans, key)
        (root,) = spans[ROOT]
        assert root.service_name == "reviews"
        assert root.attributes["flink_agents.key"] == key and root.attributes["flink_agents.seq"] == 0
        assert root.attributes["flink_agents.journal_id"] == "job"
        assert root.attributes["flink_agents.outcome"] == "ok" and root.status_code == 0
        assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
        chats = [s for name, group in spans.items() if name.startswith("chat ") for s in group]
        assert len(chats) == 2
        for chat in chats:
            step = _by_id(receiver.spans)[chat.parent_id]
            assert step.parent_id == root.span_id  # chat <- its action's step <- the run
            assert chat.kind == 3  # SPAN_KIND_CLIENT
            assert chat.attributes["gen_ai.operation.name"] == "chat"
            assert chat.attributes["gen_ai.provider.name"] == "openai"
            assert chat.attributes["gen_ai.request.model"] == "gpt-test"
            assert chat.attributes["gen_ai.usage.input_tokens"] > 0
            assert chat.attributes["gen_ai.usage.output_tokens"] > 0
            assert "gen_ai.output.messages" not in chat.attributes  # content only when opted in
        assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == ["stop", "tool_calls"]
        (tool,) = spans["execute_tool notify_shipping_manager"]
        assert tool.attributes["gen_ai.tool.call.id"] == "call_0"
        assert _by_id(receiver.spans)[tool.parent_id].parent_id == root.span_id
        # The run's usage is its calls' usage, counted once.
        for field in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
            assert root.attributes[field] == sum(c.attributes[field] for c in chats)
        assert root.attributes["flink_agents.model_calls"] == 2 and root.attributes["flink_agents.tool_calls"] == 1
        steps = [s for s in _by_id(receiver.spans).values()
                 if s.parent_id == root.span_id and s.trace_id == root.trace_id]
        assert {s.attributes["flink_agents.action"] for s in steps} >= {"ask", "answer"}
        assert min(s.start_ns for s in steps) >= root.start_ns and max(s.end_ns for s in steps) <= root.end_ns


def test_a_run_interrupted_and_replayed_is_one_trace_without_a_duplicate_span(receiver, scripted_chat_server):
    _script(scripted_chat_server, 2)
    store = InMemoryJournalStore()
    agent = openai_review_agent(scripted_chat_server.base_url)
    crash_at_write(store, "after_write", 3)  # after the tool's result is durable, before the second model call
    with pytest.raises(Crash):
        run_records(engine_for(agent, store, _tracing(receiver)), [("B01", REVIEW)])
    disarm(store, "after_write")
    assert flush_all(10)
    before = len(receiver.spans)
    assert before > 0 and not [s for s in receiver.spans if s.name == ROOT]  # the run has not ended yet
    assert any(entry.step == TRACE_STEP for entry in store.load_run("job", '"B01"', 0).values())  # marked

    run_records(engine_for(agent, store, _tracing(receiver)), [("B01", REVIEW)])

    ids = Counter(s.span_id for s in receiver.spans)
    assert max(ids.values()) == 1, "a span was exported twice"
    spans = _check_tree(receiver.spans, "B01")
    chats = [s for name, group in spans.items() if name.startswith("chat ") for s in group]
    assert len(chats) == 2 and len(spans["execute_tool notify_shipping_manager"]) == 1
    (root,) = spans[ROOT]
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats)
    assert len(scripted_chat_server.requests) == 2  # the first model call was replayed, not asked again
    # The crash came as write 3 landed, before its spans were handed over: only
    # they go out with the replay (marked); what went out before is not sent again.
    replayed = [s for s in receiver.spans if s.attributes.get("flink_agents.replayed")]
    assert replayed and all(s in receiver.spans[before:] for s in replayed)
    assert not any(s.attributes.get("flink_agents.replayed") for s in receiver.spans[:before])


def test_spans_whose_export_was_lost_go_out_with_the_replay_marked_replayed(receiver, scripted_chat_server):
    """A worker died with its spans still queued: the replay of the run
    exports what no mark says went out, marked, once, with the usage once."""
    _script(scripted_chat_server, 1)
    store = InMemoryJournalStore()
    agent = openai_review_agent(scripted_chat_server.base_url)
    crash_at_write(store, "after_write", 3)
    with pytest.raises(Crash):
        run_records(engine_for(agent, store), [("B01", REVIEW)])  # tracing off: as if the queue was lost
    disarm(store, "after_write")

    run_records(engine_for(agent, store, _tracing(receiver)), [("B01", REVIEW)])

    assert max(Counter(s.span_id for s in receiver.spans).values()) == 1
    spans = _check_tree(receiver.spans, "B01")
    chats = [s for name, group in spans.items() if name.startswith("chat ") for s in group]
    assert len(chats) == 2
    replayed = {s.name for s in receiver.spans if s.attributes.get("flink_agents.replayed")}
    assert "execute_tool notify_shipping_manager" in replayed  # journaled before the crash
    (root,) = spans[ROOT]
    assert root.attributes["gen_ai.usage.output_tokens"] == sum(c.attributes["gen_ai.usage.output_tokens"]
                                                                 for c in chats)
    # The marks: each exported span id is in the run's journal, so a later replay sends nothing.
    marked = {span for entry in store.load_run("job", '"B01"', 0).values() if entry.step == TRACE_STEP
              for span in json.loads(entry.payload)["spans"]}
    assert {s.span_id for s in receiver.spans} <= marked
    exported = len(receiver.spans)
    run_records(engine_for(agent, store, _tracing(receiver)), [("B01", REVIEW)])  # the record again: a full replay
    assert len(receiver.spans) == exported


CHECKER_DOWN: List[bool] = []  # FlakyAgent's action fails after its durable call while this holds True


def _look_up(text: str) -> int:
    return len(text)


class FlakyAgent(Agent):
    """One action: a durable call, then a failure while ``CHECKER_DOWN``."""

    @action(InputEvent)
    @staticmethod
    def check(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.durable_execute(_look_up, str(event.input))
        if CHECKER_DOWN:
            raise RuntimeError("the checker is down")
        ctx.send_event(OutputEvent(output="checked"))


def test_a_run_that_fails_the_job_and_is_replayed_ends_as_one_ok_root_with_its_failed_attempt(receiver):
    """The record fails the job (its restart replays it): that attempt is a
    ``failed_attempt`` span under the root, with its error; the replay that
    finishes the run sends the root, ok, once. (A root saying "failed" went
    out before, and the replay's ok root, having the same id, was then never
    sent: a failover e2e run saw a record that succeeded traced as failed.)"""
    store = InMemoryJournalStore()
    CHECKER_DOWN.append(True)
    try:
        with pytest.raises(ActionFailed, match="the checker is down"):
            run_records(engine_for(FlakyAgent(), store, _tracing(receiver)), [("B01", "review")])
    finally:
        CHECKER_DOWN.clear()
    assert flush_all(10)
    trace = f"{trace_id_of('job', json.dumps('B01'), 0):032x}"
    root_id = f"{span_id_of(int(trace, 16), 'run'):016x}"
    mine = [s for s in receiver.spans if s.trace_id == trace]
    assert not [s for s in mine if s.parent_id is None]  # the run has not ended: no root yet
    (attempt,) = [s for s in mine if s.name == "failed_attempt"]
    assert attempt.parent_id == root_id and attempt.status_code == 2
    assert "RuntimeError: the checker is down" in attempt.status_message
    assert attempt.attributes["flink_agents.outcome"] == "failed" and attempt.attributes["flink_agents.key"] == "B01"

    driver = run_records(engine_for(FlakyAgent(), store, _tracing(receiver)), [("B01", "review")])

    assert driver.outputs == [{"B01": "checked"}]  # the replay finished the run
    mine = [s for s in receiver.spans if s.trace_id == trace]
    assert max(Counter(s.span_id for s in mine).values()) == 1, "a span was exported twice"
    (root,) = [s for s in mine if s.parent_id is None]
    assert root.span_id == root_id and root.name == "invoke_agent FlakyAgent"
    assert root.attributes["flink_agents.outcome"] == "ok" and root.status_code != 2
    ids = {s.span_id for s in mine}
    assert all(s.parent_id in ids for s in mine if s is not root)  # the failed attempt is under the root now
    assert len([s for s in mine if s.name.startswith("durable_call")]) == 1  # journaled once, replayed after


def test_content_is_captured_only_when_asked_and_redacted(receiver, scripted_chat_server, monkeypatch):
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {
        "role": "assistant", "content": "done; connect with postgresql://app:hunter2@db/x"}])
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run_records(engine_for(openai_review_agent(scripted_chat_server.base_url), InMemoryJournalStore(),
                           _tracing(receiver)), [("B01", REVIEW)])

    spans = _check_tree(receiver.spans, "B01")
    outputs = [s.attributes["gen_ai.output.messages"] for name, group in spans.items() if name.startswith("chat ")
               for s in group]
    assert any("notify_shipping_manager" in text for text in outputs)
    inputs = [s.attributes["gen_ai.input.messages"] for name, group in spans.items() if name.startswith("chat ")
              for s in group]
    assert len(inputs) == 2 and all('"role": "user"' in text and "crushed" in text for text in inputs)
    assert any("postgresql://app:***@db/x" in text for text in outputs)
    assert not any("hunter2" in text for text in outputs)
    (tool,) = spans["execute_tool notify_shipping_manager"]
    assert "gen_ai.tool.call.result" in tool.attributes


def test_with_tracing_off_the_engine_builds_nothing(scripted_chat_server):
    scripted_chat_server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])
    store = InMemoryJournalStore()
    engine = engine_for(openai_review_agent(scripted_chat_server.base_url), store)
    assert engine.tracing is None
    run_records(engine, [("B01", REVIEW)])
    assert not [e for e in store.load_run("job", '"B01"', 0).values() if e.step == TRACE_STEP]


def test_an_unknown_exporter_fails_at_start_naming_the_setting():
    with pytest.raises(ValueError, match="tracing.exporter: 'zipkin' is not supported"):
        engine_for(openai_review_agent("http://127.0.0.1:9"), InMemoryJournalStore(), {"tracing.exporter": "zipkin"})


def test_span_ids_are_derived_from_the_runs_identity():
    trace = trace_id_of("job", '"B01"', 0)
    assert trace == trace_id_of("job", '"B01"', 0) != trace_id_of("job", '"B01"', 1)
    assert span_id_of(trace, "call", "ask@0", 0) == span_id_of(trace, "call", "ask@0", 0)
    assert span_id_of(trace, "call", "ask@0", 0) != span_id_of(trace, "call", "ask@0", 1)
    assert 0 < trace < 2**128


def test_a_restart_exports_the_spans_a_dead_worker_lost_once(receiver, scripted_chat_server, tmp_path, monkeypatch):
    """Runs that finished while their spans were still queued (the worker
    died; here: tracing was off) are found at the next start, by the one
    subtask that recovers, in a real SQLite journal: exported once, marked
    replayed; the start after that finds nothing."""
    import time

    from flink_agents.runtime.engine import AgentEngine
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.stores.factory import open_journal_store

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.2")  # recovery waits 1.25 s
    _script(scripted_chat_server, 2)
    agent = openai_review_agent(scripted_chat_server.base_url)
    config = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    store = open_journal_store(config)
    run_records(engine_for(agent, store), [("B01", REVIEW), ("B02", REVIEW)])  # finished, never traced

    def start(task: int) -> AgentEngine:
        return AgentEngine(AgentPlan.from_agent(agent), {**config, **_tracing(receiver)}, job_id="job",
                           store=store, task=("agent", task))

    quiet = start(1)  # not the recovering subtask
    time.sleep(0.5)
    quiet.close()
    assert receiver.spans == []
    engine = start(0)
    deadline = time.monotonic() + 20
    while len([s for s in receiver.spans if s.name == ROOT]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    engine.close()
    for key in ("B01", "B02"):
        spans = _check_tree(receiver.spans, key)
        assert len([s for name, group in spans.items() if name.startswith("chat ") for s in group]) == 2
    assert all(s.attributes.get("flink_agents.replayed") for s in receiver.spans)
    assert max(Counter(s.span_id for s in receiver.spans).values()) == 1
    exported = len(receiver.spans)
    again = start(0)
    time.sleep(1.6)
    again.close()
    assert len(receiver.spans) == exported  # every root is marked now
    store.close()


def test_a_sub_agents_run_nests_under_its_call_in_the_parents_trace(receiver):
    from tests.support import golden_agents

    run_records(engine_for(golden_agents.sub_agent_call(), InMemoryJournalStore(), _tracing(receiver)),
                [("k", "hello")])

    key_text = json.dumps("k")
    trace = f"{trace_id_of('job', key_text, 0):032x}"
    assert {s.trace_id for s in receiver.spans} == {trace}  # the child's spans too: one trace
    spans = _by_id(receiver.spans)
    (root,) = [s for s in spans.values() if s.parent_id is None]
    (call,) = [s for s in spans.values() if s.name == "invoke_agent child"]
    assert spans[call.parent_id].attributes["flink_agents.action"] == "call_child"
    assert spans[call.parent_id].parent_id == root.span_id
    (child_step,) = [s for s in spans.values() if s.attributes.get("flink_agents.action") == "shout"]
    assert child_step.parent_id == call.span_id  # the child's step, under the call
    (upper,) = [s for s in spans.values() if s.name.startswith("durable_call")]
    assert upper.parent_id == child_step.span_id and "upper" in upper.name
    assert call.start_ns <= child_step.start_ns and child_step.end_ns <= call.end_ns
    assert len(spans) == len(receiver.spans)


def test_a_callback_wait_is_a_span_of_the_step_that_waited(receiver):
    import threading
    import time

    from flink_agents.stores.callbacks import PENDING, RESOLVED
    from tests.engine.test_callbacks import FAST, WaitingAgent
    from tests.support.framework_runs import engine_for as _engine_for

    store = InMemoryJournalStore()

    def resolve() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = [r for r in store._callback_rows().values() if r.state == PENDING]
            if rows:
                time.sleep(0.05)
                store.complete(rows[0].callback_id, RESOLVED, b"approved", int(time.time() * 1000))
                return
            time.sleep(0.005)

    threading.Thread(target=resolve, daemon=True).start()
    run_records(_engine_for(WaitingAgent(), store, {**FAST, **_tracing(receiver)}), [("k", {"purpose": "approval"})])

    (wait,) = [s for s in receiver.spans if s.name == "await_callback approval"]
    assert wait.attributes["flink_agents.callback.state"] == "resolved" and wait.status_code == 0
    assert wait.end_ns - wait.start_ns >= 40_000_000  # it waited for the resolve (50 ms)
    step = _by_id(receiver.spans)[wait.parent_id]
    assert step.attributes["flink_agents.action"] == "wait"
    assert not any(s.attributes.get("flink_agents.callback.id") for s in receiver.spans)  # no capability in a span


def test_an_agent_frameworks_turn_is_a_span_over_its_model_requests_and_tool_calls(receiver):
    pytest.importorskip("pydantic_ai")
    from tests.engine import test_framework_pydantic_ai as pydantic_turns
    from tests.support.scripted_openai_server import OpenAIScriptedServer

    with OpenAIScriptedServer([pydantic_turns._tool_calls(2), pydantic_turns._answer("0 and 2")]) as server:
        pydantic_turns.SETTINGS["agent"] = pydantic_turns._agent(server.base_url)
        try:
            run_records(engine_for(pydantic_turns.PydanticAIAgent(), InMemoryJournalStore(), _tracing(receiver)),
                        [("k", "go")])
        finally:
            pydantic_turns.SETTINGS.clear()
            pydantic_turns.CALLS.clear()

    spans = _by_id(receiver.spans)
    (turn,) = [s for s in spans.values() if s.name == "invoke_agent reviewer"]
    assert turn.attributes["flink_agents.framework"] == "pydantic_ai"
    assert spans[turn.parent_id].attributes["flink_agents.action"] == "respond"
    chats = [s for s in spans.values() if s.name.startswith("chat ")]
    tools = [s for s in spans.values() if s.name == "execute_tool double"]
    assert len(chats) == 2 and len(tools) == 2
    assert all(s.parent_id == turn.span_id for s in chats + tools)
    assert sorted(t.attributes.get("gen_ai.tool.call.id", "") for t in tools) != ["", ""]
    assert turn.start_ns <= min(s.start_ns for s in chats) and max(s.end_ns for s in chats + tools) <= turn.end_ns
    # The framework's own usage, journaled with each request, on its span and once in the run's.
    (root,) = [s for s in spans.values() if s.parent_id is None]
    assert all(c.attributes["gen_ai.usage.input_tokens"] > 0 for c in chats)
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats)
    assert {c.attributes.get("gen_ai.response.model") for c in chats} == {"gpt-4o-mini"}

"""The event log (0.3.1's keys: levels, truncation, the file logger) and
event listeners, which see an event only once it is durable."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.core_options import AgentConfigOptions, EventLogLevel
from flink_agents.api.decorators import action
from flink_agents.api.event_listener import EventContext, EventListener
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from flink_agents.plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.features.event_log import EVENT_LOGGER_NAME, truncate
from flink_agents.runtime.local.driver import LocalDriver
from tests.support import host_runs

LONG = "word " * 100  # 500 characters


class Report(Event):
    title: str
    tags: List[str]
    nested: Dict[str, Any]


class ReportingAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def report(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(Report(
            title=LONG, tags=[f"t{i}" for i in range(30)],
            nested={"level2": {"level3": {"level4": {"deep": 1}, "note": "x"}}},
        ))

    @action(Report)
    @staticmethod
    def publish(event: Report, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output=len(event.title)))


def _log_lines(tmp_path: Path, agent: Agent, records: List[Dict[str, Any]], **options: Any) -> List[Dict[str, Any]]:
    """Run ``agent`` on the local runner with the file event logger under
    ``tmp_path`` (configured as 0.3.1 code does) and read the log file."""
    env = AgentsExecutionEnvironment.get_execution_environment()
    config = env.get_config()
    config.set(AgentConfigOptions.BASE_LOG_DIR, str(tmp_path))
    for key, value in options.items():
        config[key] = value
    env.from_list(records).apply(agent).to_list()
    env.execute()
    files = list(tmp_path.iterdir())
    if not files:
        return []
    (log_file,) = files
    assert log_file.name == "events-local-local-0.log"  # events-{jobId}-{taskName}-{subtaskId}.log
    return [json.loads(line) for line in log_file.read_text().splitlines()]


def test_standard_level_truncates_strings_arrays_and_depth(tmp_path):
    lines = _log_lines(tmp_path, ReportingAgent(), [{"key": "k1", "value": "hello"}], **{
        "event-log.standard.max-string-length": 20,
        "event-log.standard.max-array-elements": 3,
        "event-log.standard.max-depth": 3,
    })

    assert [line["eventType"] for line in lines] == ["_input_event", Report.EVENT_TYPE, "_output_event"]
    first, report, output = lines
    assert first["logLevel"] == "STANDARD"
    assert first["key"] == "k1" and first["seq"] == 0
    assert first["action"] is None and first["handledBy"] == ["report"]
    assert first["timestamp"].endswith("Z")
    assert first["event"]["input"] == "hello" and first["event"]["eventType"] == "_input_event"
    assert report["action"] == "report" and report["handledBy"] == ["publish"]
    event = report["event"]
    assert event["title"] == {"truncatedString": LONG[:20] + "...", "omittedChars": 480}
    assert event["tags"] == {"truncatedList": ["t0", "t1", "t2"], "omittedElements": 27}
    # depth 1 is the event, 2 its field "nested", 3 "level2": scalars kept, the rest counted
    assert event["nested"] == {"level2": {"truncatedObject": {}, "omittedFields": 1}}
    assert len(event["id"]) == 36  # identifying fields are never truncated
    assert output["event"]["output"] == 500 and output["handledBy"] == []


def test_verbose_logs_whole_events(tmp_path):
    lines = _log_lines(tmp_path, ReportingAgent(), [{"key": "k1", "value": "hello"}], **{
        "event-log.level": "VERBOSE", "event-log.standard.max-string-length": 20,
    })
    report = lines[1]
    assert report["logLevel"] == "VERBOSE"
    assert report["event"]["title"] == LONG
    assert len(report["event"]["tags"]) == 30
    assert report["event"]["nested"]["level2"]["level3"]["level4"] == {"deep": 1}


def test_off_writes_nothing_and_builds_no_event_log(tmp_path):
    assert _log_lines(tmp_path, ReportingAgent(), [{"key": "k1", "value": "hello"}], **{"event-log.level": "OFF"}) == []
    engine = AgentEngine(AgentPlan.from_agent(ReportingAgent()), {
        "event-log.level": "OFF", "baseLogDir": str(tmp_path),
    })
    assert engine.event_log is None
    engine.close()
    # 0.3.1's default level (STANDARD) with no logger asked for: nothing to
    # do, also when the root logger is at INFO (as in PyFlink's workers).
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    try:
        engine = AgentEngine(AgentPlan.from_agent(ReportingAgent()), {})
        assert engine.event_log is None
        engine.close()
    finally:
        root.setLevel(before)


def test_the_logging_event_logger_when_asked_for(caplog):
    with caplog.at_level(logging.INFO, logger=EVENT_LOGGER_NAME):
        env = AgentsExecutionEnvironment.get_execution_environment()
        env.from_list([{"key": "k", "value": "v"}]).apply(PlainAgent()).to_list()
        env.execute()
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == EVENT_LOGGER_NAME]
    assert [(r["eventType"], r["key"]) for r in records] == [("_input_event", "k"), ("_output_event", "k")]


def test_per_type_levels_override_the_global_level(tmp_path):
    lines = _log_lines(tmp_path, ReportingAgent(), [{"key": "k1", "value": "hello"}], **{
        "event-log.level": "OFF",
        f"event-log.type.{Report.EVENT_TYPE}.level": "VERBOSE",
        "event-log.type._output_event.level": "STANDARD",
    })
    assert [(line["eventType"], line["logLevel"]) for line in lines] == [
        (Report.EVENT_TYPE, "VERBOSE"), ("_output_event", "STANDARD"),
    ]


def test_dotted_types_resolve_up_their_package():
    from flink_agents.runtime.features.event_log import EventLog

    log = EventLog.from_config({
        "event-log.level": "STANDARD",
        "event-log.type.com.example.level": "VERBOSE", "event-log.type.com.example.app.Order.level": "OFF",
        "event-listeners": [f"{__name__}:Recorder"],
    }, "job")
    assert log is not None
    assert log.level_of("com.example.app.Order") is EventLogLevel.OFF
    assert log.level_of("com.example.app.Invoice") is EventLogLevel.VERBOSE
    assert log.level_of("org.other.Thing") is EventLogLevel.STANDARD
    log.close()


def test_bad_event_log_values_name_the_key():
    plan = AgentPlan.from_agent(ReportingAgent())
    with pytest.raises(ValueError, match="event-log.type._output_event.level"):
        AgentEngine(plan, {"event-log.type._output_event.level": "LOUD", "event-listeners": []})
    with pytest.raises(ValueError, match="event-listeners"):
        AgentEngine(plan, {"event-listeners": [f"{__name__}:NoSuchListener"]})
    with pytest.raises(TypeError, match="event-listeners.*not an EventListener"):
        AgentEngine(plan, {"event-listeners": [f"{__name__}:Step"]})
    with pytest.raises(TypeError, match="event-listeners.*without arguments"):
        AgentEngine(plan, {"event-listeners": [f"{__name__}:Report"]})


def test_the_truncation_counter_counts_truncated_records(tmp_path):
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().set(AgentConfigOptions.BASE_LOG_DIR, str(tmp_path))
    env.from_list([{"key": "a", "value": "x"}, {"key": "b", "value": "y"}]).apply(ReportingAgent()).to_list()
    env.execute()
    (metrics,) = env.last_metrics
    assert metrics["eventLogTruncatedEvents"] == 2  # the Report of each record (defaults: 20 tags)


def test_truncate_keeps_its_input_and_zero_turns_a_limit_off():
    event = {"eventType": "t", "id": "x" * 50, "text": "y" * 50, "items": list(range(50))}
    cut, hit = truncate(event, 10, 0, 0)
    assert hit and cut["id"] == "x" * 50 and cut["items"] == list(range(50))
    assert cut["text"] == {"truncatedString": "y" * 10 + "...", "omittedChars": 40}
    assert event["text"] == "y" * 50
    assert truncate(event, 0, 0, 0) == (event, False)


# -- listeners -------------------------------------------------------------------------

SEEN: List[Tuple[str, int]] = []  # (event type, journal writes when the listener saw it)
ENGINE: List[AgentEngine] = []
PROBED: List[List[str]] = []
IDS: List[str] = []
FAIL_ONCE: List[bool] = []  # DurableAgent's second action fails while this holds True


class Recorder(EventListener):
    """Records each event with the engine's journal writes at that moment."""

    def on_event_processed(self, context: EventContext, event: Event) -> None:
        assert context.event_type == event.get_type()
        SEEN.append((context.event_type, ENGINE[-1].counters.journal_writes if ENGINE else -1))
        IDS.append(str(event.id))


class Step(Event):
    fail: bool = False


def _probe() -> int:
    PROBED.append([event_type for event_type, _ in SEEN])
    return 1


class DurableAgent(Agent):
    """InputEvent -> first (no journaled call) -> Step -> second (a journaled
    call, then maybe a failure) -> OutputEvent."""

    @action(InputEvent)
    @staticmethod
    def first(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(Step(fail=event.input == "fail"))

    @action(Step)
    @staticmethod
    def second(event: Step, ctx: RunnerContext) -> None:
        ctx.durable_execute(_probe)
        if event.fail or (FAIL_ONCE and FAIL_ONCE[0]):
            raise RuntimeError("second failed")
        ctx.send_event(OutputEvent(output="done"))


class PlainAgent(Agent):
    """No journaled call at all; fails on input "fail"."""

    @action(InputEvent)
    @staticmethod
    def only(event: InputEvent, ctx: RunnerContext) -> None:
        if event.input == "fail":
            raise RuntimeError("only failed")
        ctx.send_event(OutputEvent(output=event.input))


def test_a_row_is_logged_as_0_3_1_writes_it(tmp_path):
    from pyflink.common import Row

    lines = _log_lines(tmp_path, PlainAgent(), [{"key": "k", "value": Row(sku="A-1", qty=2)}])
    logged = [line["event"]["input"] for line in lines if line["eventType"] == "_input_event"]
    assert logged == [{"type": "Row", "values": ["A-1", 2], "fields": ["sku", "qty"]}]


@pytest.fixture()
def listening():
    SEEN.clear()
    PROBED.clear()
    ENGINE.clear()
    IDS.clear()
    FAIL_ONCE.clear()

    def engine_for(agent: Agent, store: Any = None) -> AgentEngine:
        engine = AgentEngine(
            AgentPlan.from_agent(agent), {"event-listeners": [f"{__name__}:Recorder"]}, job_id="job", store=store,
        )
        ENGINE.append(engine)
        return engine

    yield engine_for
    for engine in ENGINE:
        engine.close()


def test_a_listener_sees_an_event_only_after_its_steps_committed(listening):
    engine = listening(DurableAgent())
    host_runs.process(engine, LocalDriver(), "k", "ok")

    # The InputEvent's step committed before the journaled call ran (the
    # first write), so the call already saw it; Step and the output came
    # with the run's last write.
    assert PROBED == [["_input_event"]]
    assert SEEN == [("_input_event", 1), (Step.EVENT_TYPE, 2), ("_output_event", 2)]
    assert engine.counters.journal_writes == 2


def test_a_failed_run_delivers_only_what_committed(listening):
    engine = listening(DurableAgent())
    with pytest.raises(ActionFailed):
        host_runs.process(engine, LocalDriver(), "k", "fail")
    # Step's action failed: Step was never processed and is not delivered.
    assert [event_type for event_type, _ in SEEN] == ["_input_event"]


def test_a_run_without_journaled_calls_delivers_when_it_finished(listening):
    engine = listening(PlainAgent())
    driver = LocalDriver()
    host_runs.process(engine, driver, "k", "a")
    assert SEEN == [("_input_event", 0), ("_output_event", 0)]
    SEEN.clear()
    with pytest.raises(ActionFailed):
        host_runs.process(engine, driver, "j", "fail")
    assert SEEN == []  # its run failed: nothing of it stands


def test_listeners_and_the_file_log_share_the_run(tmp_path):
    SEEN.clear()
    ENGINE.clear()
    lines = _log_lines(tmp_path, PlainAgent(), [{"key": "k", "value": "v"}], **{
        "event-listeners": f"{__name__}:Recorder",
    })
    assert [line["eventType"] for line in lines] == ["_input_event", "_output_event"]
    assert [event_type for event_type, _ in SEEN] == ["_input_event", "_output_event"]

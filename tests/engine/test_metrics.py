"""Metrics: ``ctx.agent_metric_group`` / ``ctx.action_metric_group`` (Flink
Agents 0.3.1's API), the built-in metrics, the local registry the local
runner returns, and the mirror into Flink's metric group (against a
recording fake of PyFlink's ``MetricGroup``)."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.metric_group import Counter, Gauge, Histogram, Meter, MetricGroup
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.execution.metrics import LocalMeter, MetricRegistry
from flink_agents.runtime.flink.metrics import FlinkMetricMirror
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.notify_tool import clear_notified  # noqa: F401 (an autouse fixture)
from tests.support.scripted_openai_server import _count_tokens
from tests.unit.test_openai_chat_model import ANSWER, REVIEW, TOOL_CALL_REPLY, openai_review_agent
from tests.support import host_runs


class Checked(Event):
    text: str


class MeteredAgent(Agent):
    """Reports user metrics as 0.3.1's monitoring docs show, and sends one
    event through a second action."""

    @action(InputEvent)
    @staticmethod
    def first(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.agent_metric_group.get_counter("numInputEvent").inc()
        ctx.agent_metric_group.get_meter("numInputEventPerSec").mark()
        ctx.action_metric_group.get_histogram("inputLength").update(len(event.input))
        ctx.agent_metric_group.get_sub_group("shop", "books").get_gauge("lastLength").update(len(event.input))
        ctx.send_event(Checked(text=event.input))

    @action(Checked)
    @staticmethod
    def second(event: Checked, ctx: RunnerContext) -> None:
        ctx.action_metric_group.get_counter("chars").inc(len(event.text))
        ctx.send_event(OutputEvent(output=event.text.upper()))


def _execute(agent: Agent, records: List[Dict[str, Any]], **config: Any) -> Dict[str, Any]:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    env.from_list(records).apply(agent).to_list()
    env.execute()
    (metrics,) = env.last_metrics
    return metrics


def test_user_metrics_reported_by_actions_are_in_the_local_registry():
    metrics = _execute(MeteredAgent(), [{"key": "a", "value": "abc"}, {"key": "b", "value": "hello"}])

    assert metrics["numInputEvent"] == 2
    assert metrics["numInputEventPerSec"]["count"] == 2
    assert metrics["numInputEventPerSec"]["rate"] > 0
    assert metrics["action.first.inputLength"] == {"count": 2, "mean": 4.0, "min": 3, "max": 5}
    assert metrics["action.second.chars"] == 8
    assert metrics["shop.books.lastLength"] in (3, 5)  # the last record's (keys run concurrently)


def test_builtin_event_and_action_metrics_count_what_ran():
    metrics = _execute(MeteredAgent(), [{"key": "a", "value": "x"}, {"key": "b", "value": "y"}, {"key": "a", "value": "z"}])

    # Per record: InputEvent, Checked, OutputEvent; two actions.
    assert metrics["numOfEventProcessed"] == 9
    assert metrics["numOfEventProcessedPerSec"]["count"] == 9
    assert metrics["numOfActionsExecuted"] == 6
    assert metrics["numOfActionsExecutedPerSec"]["count"] == 6
    for name in ("first", "second"):
        assert metrics[f"action.{name}.numOfActionsExecuted"] == 3
        assert metrics[f"action.{name}.numOfActionsExecutedPerSec"]["count"] == 3
        latency = metrics[f"action.{name}.actionExecutionTimeMs"]
        assert latency["count"] == 3 and latency["min"] >= 0


def test_token_usage_and_tool_calls_from_an_openai_compatible_server(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])

    metrics = _execute(openai_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}])

    # The scripted server reports usage as words of the messages it got and sent.
    prompt = sum(_count_tokens(m.get("content")) for request in server.requests for m in request["messages"])
    completion = _count_tokens(None) + _count_tokens(TOOL_CALL_REPLY["tool_calls"]) + _count_tokens(ANSWER)
    assert prompt > 0 and completion > 0
    chat, tools = _builtin_names()
    assert metrics[f"action.{chat}.model.gpt-test.promptTokens"] == prompt
    assert metrics[f"action.{chat}.model.gpt-test.completionTokens"] == completion
    assert metrics["numOfToolCalls"] == 1
    assert metrics[f"action.{tools}.tool.notify_shipping_manager.numOfToolCalls"] == 1


def _builtin_names() -> tuple[str, str]:
    """The plan's names of the built-in chat and tool actions."""
    names = [spec.name for spec in AgentPlan.from_agent(MeteredAgent()).actions.values()]
    (chat,) = [name for name in names if name.strip("_") == "chat_model_action"]
    (tools,) = [name for name in names if name.strip("_") == "tool_call_action"]
    return chat, tools


class UsageConnectionAgent(Agent):
    """A model call (through a setup whose connection reports usage), then a
    failure on the first engine only: the restarted engine replays the call."""

    FAIL = True

    @action(InputEvent)
    @staticmethod
    def ask(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content="hi")]))

    @action(ChatResponseEvent)
    @staticmethod
    def answer(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        ctx.agent_metric_group.get_counter("answers").inc()
        if UsageConnectionAgent.FAIL:
            raise RuntimeError("crash after the model answered")
        ctx.send_event(OutputEvent(output=event.response.content))


def test_a_replayed_model_call_counts_its_tokens_once_and_no_tool_call(scripted_chat_server):
    server = scripted_chat_server
    server.replies.append({"role": "assistant", "content": "hello there"})
    agent = UsageConnectionAgent()
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=server.base_url, max_retries=0,
    ))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="m-1",
    ))
    store = InMemoryJournalStore()
    plan = AgentPlan.from_agent(agent)
    chat, _ = _builtin_names()
    prompt_group = f"action.{chat}.model.m-1.promptTokens"

    UsageConnectionAgent.FAIL = True
    first = AgentEngine(plan, {}, job_id="job", store=store)
    with pytest.raises(ActionFailed):
        host_runs.process(first, LocalDriver(), "k", "x")
    counted = first.counters.metrics.snapshot()
    assert counted[prompt_group] == 1 and counted[f"action.{chat}.model.m-1.completionTokens"] == 2

    UsageConnectionAgent.FAIL = False
    try:
        restarted = AgentEngine(plan, {}, job_id="job", store=store)
        driver = LocalDriver()
        host_runs.process(restarted, driver, "k", "x")
    finally:
        UsageConnectionAgent.FAIL = True
    after = restarted.counters.metrics.snapshot()
    assert len(server.requests) == 1  # replayed from the journal, not asked again
    # Its tokens are counted by the restarted engine from the journaled reply,
    # once, as an uninterrupted engine would have (docs/durability.md, "Usage").
    assert after[prompt_group] == 1 and after[f"action.{chat}.model.m-1.completionTokens"] == 2
    assert after["answers"] == 1
    # Replayed steps are not executed actions; events are processed again.
    assert "action.ask.numOfActionsExecuted" not in after
    assert f"action.{chat}.numOfActionsExecuted" not in after
    assert after["action.answer.numOfActionsExecuted"] == 1
    assert after["numOfEventProcessed"] == 4  # input, chat request, chat response, output
    first.close()
    restarted.close()


def test_the_metric_group_api_refuses_bad_names_and_kinds():
    group: MetricGroup = MetricRegistry().root
    assert isinstance(group.get_counter("c"), Counter) and group.get_counter("c") is group.get_counter("c")
    assert isinstance(group.get_meter("m"), Meter)
    assert isinstance(group.get_histogram("h"), Histogram)
    assert isinstance(group.get_gauge("g"), Gauge)
    with pytest.raises(TypeError, match="'c' is a counter, not a meter"):
        group.get_meter("c")
    with pytest.raises(ValueError, match="holds '='"):
        group.get_sub_group("a=b")
    with pytest.raises(ValueError, match="non-empty"):
        group.get_counter("")
    with pytest.raises(ValueError, match="window_size"):
        group.get_histogram("w", window_size=0)
    counter = group.get_sub_group("x").get_counter("c")
    counter.inc(5)
    counter.dec(2)
    assert counter.get_count() == 3
    histogram = group.get_histogram("small", window_size=2)
    for value in (1, 10, 4):
        histogram.update(value)
    assert (histogram.get_min(), histogram.get_max(), histogram.get_mean()) == (4, 10, 7.0)


def test_a_meter_rate_is_per_second_over_its_window():
    now = [100.0]
    meter = LocalMeter(clock=lambda: now[0])
    for _ in range(10):
        now[0] += 1.0
        meter.mark(3)
    assert meter.get_rate() == pytest.approx(3.0)
    now[0] += 120.0  # nothing marked for two minutes: the window holds no marks
    assert meter.get_rate() == pytest.approx(0.0)


class RecordingGroup:
    """A PyFlink ``MetricGroup`` that records what reaches it."""

    def __init__(self, log: List[Any], path: str = "") -> None:
        self.log, self.path = log, path

    def add_group(self, name: str, extra: str | None = None) -> "RecordingGroup":
        return RecordingGroup(self.log, f"{self.path}{name}{'=' + extra if extra else ''}/")

    def counter(self, name: str) -> Any:
        return _Recorder(self.log, "counter", self.path + name)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Any:
        return _Recorder(self.log, "meter", self.path + name)

    def distribution(self, name: str) -> Any:
        return _Recorder(self.log, "distribution", self.path + name)

    def gauge(self, name: str, obj: Any) -> None:
        self.log.append(("gauge", self.path + name, obj))


class _Recorder:
    def __init__(self, log: List[Any], kind: str, name: str) -> None:
        self.log, self.kind, self.name = log, kind, name
        log.append(("register", kind, name))

    def inc(self, n: int = 1) -> None:
        self.log.append(("inc", self.name, n))

    def dec(self, n: int = 1) -> None:
        self.log.append(("dec", self.name, n))

    def mark_event(self, n: int = 1) -> None:
        self.log.append(("mark_event", self.name, n))

    def update(self, value: int) -> None:
        self.log.append(("update", self.name, value))


def test_the_flink_mirror_carries_changes_once_into_flink_metric_types():
    registry = MetricRegistry()
    log: List[Any] = []
    mirror = FlinkMetricMirror(registry, RecordingGroup(log))
    action = registry.root.get_sub_group("action", "review")
    action.get_counter("c").inc(3)
    action.get_histogram("h").update(7)
    registry.root.get_meter("m").mark(2)
    registry.root.get_gauge("g").update(4.0)
    mirror.sync()
    assert ("register", "counter", "action=review/c") in log
    assert ("inc", "action=review/c", 3) in log
    assert ("update", "action=review/h", 7) in log
    assert ("mark_event", "m", 2) in log
    # Values (a gauge; a histogram's window, which reporters print as 0.0 as
    # a distribution) are counters set at each sync: no Python callable for
    # Flink's metric threads to call (thread mode: runtime.flink.metrics).
    assert not [entry for entry in log if entry[0] == "gauge"]
    values = {entry[1]: entry[2] for entry in log if entry[0] == "inc"}
    assert values["g"] == 4
    assert {name: values[name] for name in ("action=review/hMean", "action=review/hMin", "action=review/hMax")} == {
        "action=review/hMean": 7, "action=review/hMin": 7, "action=review/hMax": 7}

    log.clear()
    mirror.sync()  # nothing changed: nothing carried, nothing registered again
    assert log == []

    action.get_counter("c").dec(1)
    action.get_histogram("h").update(9)
    registry.root.get_meter("m").mark()
    registry.root.get_gauge("g").update(1.0)
    mirror.sync()
    assert log == [
        ("dec", "action=review/c", 1), ("update", "action=review/h", 9),
        ("inc", "action=review/hMean", 1), ("inc", "action=review/hMax", 2),  # window 7, 9: mean 8, min 7, max 9
        ("mark_event", "m", 1), ("dec", "g", 3),
    ]


def test_counters_returned_by_execute_keep_their_shape():
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.from_list([{"key": "a", "value": "q"}]).apply(MeteredAgent()).to_list()
    (counters,) = env.execute()
    assert "metrics" not in counters and counters["events"] == 3
    assert json.dumps(counters)  # plain numbers only


class BoundResourceAgent(Agent):
    """Reports through the metric group ``get_resource`` binds (0.3.1's
    ``Resource.metric_group``)."""

    @tool
    @staticmethod
    def lookup(word: str) -> str:
        """Look a word up.

        Args:
            word: The word.
        """
        return word

    @action(InputEvent)
    @staticmethod
    def use(event: InputEvent, ctx: RunnerContext) -> None:
        resource = ctx.get_resource("lookup", ResourceType.TOOL)
        assert resource.metric_group is not None
        resource.metric_group.get_counter("lookups").inc()
        custom = ctx.agent_metric_group.get_sub_group("tools")
        assert ctx.get_resource("lookup", ResourceType.TOOL, custom).metric_group is custom
        ctx.send_event(OutputEvent(output=event.input))


def test_get_resource_binds_the_action_metric_group():
    metrics = _execute(BoundResourceAgent(), [{"key": "a", "value": 1}, {"key": "b", "value": 2}])
    assert metrics["action.use.lookups"] == 2


class TamperingAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def tamper(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.agent_metric_group.get_counter("numOfEventProcessed").inc()


def test_built_in_metrics_are_read_only_to_actions():
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.from_list([{"key": "a", "value": 1}]).apply(TamperingAgent()).to_list()
    with pytest.raises(ActionFailed, match="'numOfEventProcessed' is a built-in metric"):
        env.execute()

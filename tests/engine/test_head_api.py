"""What users write for Flink Agents HEAD (since 0.3.1), run on the engine:
``EventType`` constants, trigger condition expressions, event lineage,
memory events and the run-begin snapshot (issue 34, point 4).

Each test runs records through ``AgentEngine`` on the production local path
(``tests/support/engine_runs``); a second run on the same journal store is
the replay a restore makes, which must send and route exactly what the
first run journaled.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Dict, List

import pytest
from pydantic import ConfigDict, field_validator

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.event_type import EventType
from flink_agents.api.events.memory_event import MemoryEvent, ShortTermReadEvent, ShortTermWriteEvent
from flink_agents.api.events.run_event import AgentRunBeginEvent
from flink_agents.api.runner_context import RunnerContext
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.execution.memory_events import RUN_BEGIN_STEP
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record

# Counts action executions across engines in one test (a replayed step does not run).
RAN: List[str] = []
# Actions that die once (as the process would) the next time they run.
CRASH: set = set()


class Crash(BaseException):
    """The process dying mid-record: the record's journal stays for the restore."""


def _commit_point(name: str) -> str:
    return name


def crash_once(name: str, ctx: RunnerContext) -> None:
    """A journaled call (which commits the completions before it), then the crash."""
    ctx.durable_execute(_commit_point, name)
    if name in CRASH:
        CRASH.discard(name)
        raise Crash(name)


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()
    CRASH.clear()


def journaled_steps(store: InMemoryJournalStore) -> List[str]:
    return [entry.step for run in store._runs.values() for (entry, _) in run.values()]


def outputs(driver: Any) -> List[Any]:
    return [value for out in driver.outputs for value in out.values()]


# ---- EventType and trigger condition expressions ---------------------------


class ScoreRouting(Agent):
    """High scores go to one action by expression, every input to another by type."""

    @action(EventType.InputEvent)
    @staticmethod
    def every_input(event: Event, ctx: RunnerContext) -> None:
        RAN.append("every_input")
        ctx.send_event(Event(type="scored", attributes={"score": event.input["score"], "tags": event.input["tags"]}))

    @action("type == EventType.InputEvent && input.score > 5")
    @staticmethod
    def high_input(event: Event, ctx: RunnerContext) -> None:
        RAN.append("high_input")
        ctx.send_event(OutputEvent(output=f"high:{event.input['score']}"))

    # Two conditions that both hold for score >= 9: the action still runs once.
    @action("score >= 9", "attributes.score > 8 && 'vip' in tags")
    @staticmethod
    def top_scored(event: Event, ctx: RunnerContext) -> None:
        RAN.append("top_scored")
        crash_once("top_scored", ctx)
        ctx.send_event(OutputEvent(output=f"top:{event.get_attr('score')}"))


def test_event_type_constants_are_the_event_classes_types() -> None:
    assert EventType.InputEvent == InputEvent.EVENT_TYPE == "_input_event"
    assert EventType.OutputEvent == "_output_event"
    assert EventType.ShortTermWriteEvent == ShortTermWriteEvent.EVENT_TYPE
    assert EventType.AgentRunBeginEvent == AgentRunBeginEvent.EVENT_TYPE == "_agent_run_begin_event"


def test_expressions_route_by_event_data_and_each_action_runs_once() -> None:
    store = InMemoryJournalStore()
    driver = run_record(ScoreRouting(), store, {"score": 9, "tags": ["vip"]})
    assert outputs(driver) == ["high:9", "top:9"]
    assert RAN.count("top_scored") == 1

    RAN.clear()
    driver = run_record(ScoreRouting(), store, {"score": 3, "tags": []}, key="low")
    assert outputs(driver) == []
    assert RAN == ["every_input"]


def test_a_replay_routes_by_expressions_as_the_first_run_did() -> None:
    expected = outputs(run_record(ScoreRouting(), InMemoryJournalStore(), {"score": 9, "tags": ["vip"]}))
    store = InMemoryJournalStore()
    CRASH.add("top_scored")
    with pytest.raises(Crash):
        run_record(ScoreRouting(), store, {"score": 9, "tags": ["vip"]})
    RAN.clear()
    # A fresh engine on the same store: the restore of the record. The steps
    # the expressions picked replay from the journal; only the one that died runs.
    assert outputs(run_record(ScoreRouting(), store, {"score": 9, "tags": ["vip"]})) == expected
    assert RAN == ["top_scored"]


class MissingAttribute(Agent):
    @action(InputEvent)
    @staticmethod
    def start(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(Event(type="partial", attributes={"present": 1}))

    # The first condition reads a missing attribute; the second holds.
    @action("missing > 1", "has(attributes.present) && present == 1")
    @staticmethod
    def guarded(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output="guarded"))


def test_a_failing_condition_counts_false_and_the_next_one_is_tried(caplog: pytest.LogCaptureFixture) -> None:
    driver = run_record(MissingAttribute(), InMemoryJournalStore(), "x")
    assert outputs(driver) == ["guarded"]
    assert "'missing > 1' of action 'guarded' failed" in caplog.text


def test_a_failing_condition_fails_the_record_under_the_fail_strategy() -> None:
    config = {"action.trigger-condition.evaluate-failure-strategy": "FAIL"}
    with pytest.raises(ActionFailed) as failed:
        run_record(MissingAttribute(), InMemoryJournalStore(), "x", config=config)
    assert "guarded" in str(failed.value) and "no such attribute: missing" in str(failed.value.__cause__)


class QuotedAndCustom(Agent):
    @action(InputEvent)
    @staticmethod
    def start(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(Event(type="order:created", attributes={"id": "o-1", "type": "shadowed"}))

    @action("'order:created'")
    @staticmethod
    def by_quoted_type(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output="quoted"))

    # Framework variables win over attributes of the same name.
    @action('type == "order:created" && attributes["type"] == "shadowed"')
    @staticmethod
    def by_expression(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output="expression"))


def test_a_quoted_event_type_and_attribute_name_clashes() -> None:
    driver = run_record(QuotedAndCustom(), InMemoryJournalStore(), "x")
    assert outputs(driver) == ["quoted", "expression"]


@pytest.mark.parametrize(
    ("condition", "complaint"),
    [
        ("type == EventType.NotARealEvent", "unknown event type constant EventType.NotARealEvent"),
        ("EventType.InputEvent", "a path alone is not a condition"),
        ("[1, 2].all(v, v > 0)", "macro all()"),
        ("attributes[name] == 5", "whole 'attributes' map"),
        ("type ==", "syntax error"),
        ("42", "Boolean result"),
        ("noSuchFn(1)", "unknown function noSuchFn()"),
        ("contains(\"a\")", "contains() with 1 argument(s) is not supported"),
    ],
)
def test_a_condition_the_runtime_cannot_use_fails_the_plan_naming_the_action(condition: str, complaint: str) -> None:
    agent = Agent().add_action("judge", trigger_conditions=[condition], func=_noop)
    with pytest.raises(PlanError) as refused:
        AgentPlan.from_agent(agent)
    assert "action 'judge'" in str(refused.value) and complaint in str(refused.value)


def _noop(event: Event, ctx: RunnerContext) -> None:
    return None


def test_add_action_takes_heads_and_0_3_1s_argument_names() -> None:
    agent = Agent()
    agent.add_action("new", trigger_conditions=[EventType.InputEvent, "urgent == true"], func=_noop)
    agent.add_action("old", events=[InputEvent], func=_noop)
    plan = AgentPlan.from_agent(agent)
    assert plan.actions["new"].listen_event_types == ["_input_event"]
    assert plan.actions["new"].trigger_conditions == ["urgent == true"]
    assert plan.actions["old"].trigger_conditions == []
    # A plan read back from its JSON keeps the expressions; without any, the JSON is as before.
    assert AgentPlan.from_json(plan.to_json()) == plan
    assert "trigger_conditions" not in json.loads(plan.to_json())["actions"]["old"]
    with pytest.raises(TypeError, match="give the trigger conditions once"):
        Agent().add_action("both", [InputEvent], _noop, trigger_conditions=[InputEvent])
    # HEAD's positional form is 0.3.1's: the list of conditions, then the function.
    assert AgentPlan.from_agent(Agent().add_action("pos", ["score > 1"], _noop)).actions["pos"].trigger_conditions


# ---- event lineage ----------------------------------------------------------


class Lineage(Agent):
    @action(InputEvent)
    @staticmethod
    def first(event: Event, ctx: RunnerContext) -> None:
        RAN.append("first")
        forged = Event(type="step", attributes={"input_id": str(event.id)}, upstream_action_name="forged")
        ctx.send_event(forged)

    @action("step")
    @staticmethod
    def second(event: Event, ctx: RunnerContext) -> None:
        RAN.append("second")
        crash_once("second", ctx)
        ctx.send_event(OutputEvent(output={
            "input_id": event.get_attr("input_id"),
            "upstream_event_id": str(event.upstream_event_id),
            "upstream_action_name": event.upstream_action_name,
            "step_id": str(event.id),
        }))


def test_sent_events_carry_their_senders_lineage_and_a_replay_reads_it_back() -> None:
    [out] = outputs(run_record(Lineage(), InMemoryJournalStore(), "x"))
    # The framework overwrites what the user set; the InputEvent is the root.
    assert out["upstream_action_name"] == "first"
    assert out["upstream_event_id"] == out["input_id"]
    store = InMemoryJournalStore()
    CRASH.add("second")
    with pytest.raises(Crash):
        run_record(Lineage(), store, "x")
    RAN.clear()
    # "first" is not run again: "second" gets the journaled event, lineage and ids alike.
    assert outputs(run_record(Lineage(), store, "x")) == [out]
    assert RAN == ["second"]


class AuditedStep(Event):
    """An event class that validates assignments: the runtime's id and
    lineage go through its validators too."""

    model_config = ConfigDict(validate_assignment=True)

    @field_validator("upstream_action_name")
    @classmethod
    def _audited(cls, name: Any) -> Any:
        return None if name is None else f"audited:{name}"


class SealedStep(Event):
    model_config = ConfigDict(frozen=True)


class SendsStampedEvents(Agent):
    @action(InputEvent)
    @staticmethod
    def first(event: Event, ctx: RunnerContext) -> None:
        sealed = event.input == "sealed"
        ctx.send_event(SealedStep() if sealed else AuditedStep(type="audited"))

    @action("audited")
    @staticmethod
    def second(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output={"from": event.upstream_action_name, "set": sorted(event.model_fields_set),
                                           "lineage": str(event.upstream_event_id) != "None"}))


def test_send_event_sets_id_and_lineage_as_the_event_class_assigns_fields() -> None:
    [out] = outputs(run_record(SendsStampedEvents(), InMemoryJournalStore(), "audited"))
    # Through the class's own assignment (its validator ran), and recorded as set.
    assert out == {"from": "audited:first", "set": ["id", "type", "upstream_action_name", "upstream_event_id"],
                   "lineage": True}
    # A frozen event class refuses the runtime's assignment, as pydantic does: the action fails naming it.
    with pytest.raises(ActionFailed, match=r"action 'first' failed(?s:.*)Instance is frozen"):
        run_record(SendsStampedEvents(), InMemoryJournalStore(), "sealed")


def test_lineage_serializes_under_heads_wire_names_and_only_when_set() -> None:
    plain = json.loads(InputEvent(input=1).model_dump_json())
    assert "upstreamEventId" not in plain and "upstream_event_id" not in plain
    linked = Event(type="t", upstreamEventId="6f1d3c8e-2f59-4a55-9a57-0d6c8f0e3b11", upstream_action_name="a")
    text = linked.model_dump_json()
    assert json.loads(text)["upstreamActionName"] == "a"
    back = Event.from_json(text)
    assert (str(back.upstream_event_id), back.upstream_action_name) == ("6f1d3c8e-2f59-4a55-9a57-0d6c8f0e3b11", "a")
    # from_event and reconstruct_from keep the occurrence: id and lineage.
    typed = OutputEvent.from_event(Event(type="_output_event", attributes={"output": 1}, upstream_action_name="a"))
    assert typed.upstream_action_name == "a"


# ---- memory events ----------------------------------------------------------


class MemoryWriter(Agent):
    @action(InputEvent)
    @staticmethod
    def remember(event: Event, ctx: RunnerContext) -> None:
        RAN.append("remember")
        ctx.short_term_memory.set("user.tier", event.input)
        ctx.short_term_memory.get("visits")
        ctx.short_term_memory.set("visits", 1)
        ctx.short_term_memory.get("visits")
        ctx.sensory_memory.set("scratch", b"\x01")

    @action(EventType.ShortTermWriteEvent, EventType.ShortTermReadEvent, EventType.SensoryWriteEvent)
    @staticmethod
    def observe(event: Event, ctx: RunnerContext) -> None:
        RAN.append("observe")
        crash_once("observe", ctx)
        observed = MemoryEvent.from_event(event)
        # Memory used here generates no further memory events.
        ctx.short_term_memory.set("observed", True)
        ctx.send_event(OutputEvent(output={
            "type": observed.get_type(), "key": observed.key, "value": observed.value,
            "from": observed.upstream_action_name,
        }))


def test_memory_events_are_off_unless_configured() -> None:
    assert outputs(run_record(MemoryWriter(), InMemoryJournalStore(), "gold")) == []


def test_memory_events_fold_an_actions_operations_and_replay_from_the_journal() -> None:
    config = {"memory.generate-event": "true", "memory.generate-event.short-term-read": "true"}
    store = InMemoryJournalStore()
    out = outputs(run_record(MemoryWriter(), store, "gold", config=config, key="user-42"))
    assert out == [
        {"type": "_short_term_write_event", "key": "user-42",
         "value": {"user": None, "user.tier": "gold", "visits": 1}, "from": "remember"},
        {"type": "_short_term_read_event", "key": "user-42", "value": {"visits": 1}, "from": "remember"},
        {"type": "_sensory_write_event", "key": "user-42", "value": {"scratch": "AQ=="}, "from": "remember"},
    ]
    assert RAN.count("observe") == 3  # and no memory event about "observed"
    store = InMemoryJournalStore()
    CRASH.add("observe")
    with pytest.raises(Crash):
        run_record(MemoryWriter(), store, "gold", config=config, key="user-42")
    RAN.clear()
    # "remember" is not run again: its memory events come from its journaled completion.
    assert outputs(run_record(MemoryWriter(), store, "gold", config=config, key="user-42")) == out
    assert RAN == ["observe"] * 3


def test_a_kind_of_its_own_overrides_the_master_switch() -> None:
    config = {"memory.generate-event": "false", "memory.generate-event.short-term-read": "true"}
    out = outputs(run_record(MemoryWriter(), InMemoryJournalStore(), "gold", config=config))
    assert [o["type"] for o in out] == [ShortTermReadEvent.EVENT_TYPE]


# ---- run-begin snapshot -----------------------------------------------------


class Counter(Agent):
    @action(EventType.AgentRunBeginEvent)
    @staticmethod
    def snapshot(event: Event, ctx: RunnerContext) -> None:
        RAN.append("snapshot")
        begin = AgentRunBeginEvent.from_event(event)
        ctx.send_event(OutputEvent(output={"value": begin.value, "from": begin.upstream_action_name,
                                           "upstream": str(begin.upstream_event_id)}))

    @action(InputEvent)
    @staticmethod
    def count(event: Event, ctx: RunnerContext) -> None:
        RAN.append("count")
        crash_once("count", ctx)
        seen = ctx.short_term_memory.get("stats.count") or 0
        ctx.short_term_memory.set("stats.count", seen + 1)
        ctx.send_event(OutputEvent(output={"input": str(event.id)}))


def test_the_run_begin_event_carries_memory_values_before_the_first_action() -> None:
    from flink_agents.runtime.engine import AgentEngine
    from flink_agents.runtime.local.driver import LocalDriver
    from tests.support import host_runs

    engine = AgentEngine(AgentPlan.from_agent(Counter()), {"agent-run.begin-event": "true"}, job_id="job",
                         store=InMemoryJournalStore())
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "k", "a")
        host_runs.process(engine, driver, "k", "b")
    finally:
        engine.close()
    first_begin, first_input, second_begin, second_input = outputs(driver)
    assert first_begin["value"] == {} and second_begin["value"] == {"stats.count": 1}
    assert second_begin["from"] == "agent_run_begin_action"
    assert second_begin["upstream"] == second_input["input"]
    assert RAN == ["snapshot", "count", "snapshot", "count"]


def test_the_run_begin_event_is_journaled_and_replayed_as_stored() -> None:
    config = {"agent-run.begin-event": "true"}
    expected = outputs(run_record(Counter(), InMemoryJournalStore(), "a", config=config))
    store = InMemoryJournalStore()
    CRASH.add("count")
    with pytest.raises(Crash):
        run_record(Counter(), store, "a", config=config)
    steps = journaled_steps(store)
    assert RUN_BEGIN_STEP in steps
    # The snapshot's listeners step apart, so the input's steps are named as without it.
    assert "snapshot@begin" in steps
    RAN.clear()
    assert outputs(run_record(Counter(), store, "a", config=config)) == expected
    assert RAN == ["count"]  # the snapshot's action replayed, with the journaled event


def test_without_the_option_no_run_begin_event_is_sent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = outputs(run_record(Counter(), InMemoryJournalStore(), "a"))
    assert [list(o) for o in out] == [["input"]]


# ---- long-term memory events -------------------------------------------------


def _long_term_work(event: Event, ctx: RunnerContext) -> None:
    facts = ctx.long_term_memory.get_memory_set("facts")
    ids = facts.add(["lid cracks", "boils fast"])
    facts.get(ids=ids[:1])
    facts.search("does the lid crack", limit=1)
    facts.delete(ids[1])
    ctx.long_term_memory.get_memory_set("drafts").add("scratch")
    ctx.long_term_memory.delete_memory_set("drafts")


def _long_term_observer(event: Event, ctx: RunnerContext) -> None:
    observed = MemoryEvent.from_event(event)
    extra = {"cleared_sets": observed.cleared_sets} if hasattr(observed, "cleared_sets") else {}
    ctx.send_event(OutputEvent(output={"type": observed.get_type(), "value": observed.value, **extra}))


def test_long_term_operations_fold_into_update_get_and_search_events() -> None:
    from tests.engine.test_long_term_memory import COLLECTIONS, CONFIG, memory_agent

    COLLECTIONS.clear()
    agent = memory_agent(_long_term_work)
    agent.add_action("observe", [EventType.LongTermUpdateEvent, EventType.LongTermGetEvent,
                                 EventType.LongTermSearchEvent], _long_term_observer)
    config = {**CONFIG, "memory.generate-event": "true"}
    try:
        update, get, search = outputs(run_record(agent, InMemoryJournalStore(), "x", config=config))
    finally:
        COLLECTIONS.clear()
    [lid_id, boils_id] = list(update["value"]["facts"])
    assert update == {"type": "_long_term_update_event", "cleared_sets": ["drafts"],
                      "value": {"facts": {lid_id: "lid cracks", boils_id: None}}}
    assert get == {"type": "_long_term_get_event", "value": {"facts": {lid_id: "lid cracks"}}}
    assert search == {"type": "_long_term_search_event",
                      "value": {"facts": {"does the lid crack": [{"id": lid_id, "value": "lid cracks", "score": None}]}}}

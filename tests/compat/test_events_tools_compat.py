"""Events and tools as Flink Agents 0.3.1 user code uses them (issue 15,
"Events" and "Tools").

- Events: unified events (``Event(type=..., attributes=...)``) with
  ``get_attr``/``set_attr``/``get_type``, ``model_dump_json``/``from_json``
  in 0.3.1's JSON form (Rows included), content-based ids on request,
  0.3.1's positional constructors, ``from_event`` from a unified event.
- ``pyflink.common.Row`` values (with and without field names, any
  ``RowKind``) through the codec, the journal (a replay), keyed state and
  outputs, on the local runner and on the mini-cluster
  (tests/e2e/test_events_tools_compat_e2e.py), back as equal Rows.
- Tool-call ids of any hashable type (a ``uuid.uuid4()``, an int, a tuple):
  the built-in tool action answers with the same ids, also after a replay.
- Tools: positional ``Tool.call(*args)`` (also from the built-in tool loop),
  ``FunctionTool`` at both import paths, schemas from Google/NumPy/reST
  docstrings (``docstring-parser``) and back (``api/tools/utils.py``),
  ``api/function.py``'s ``PythonFunction``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from typing import Annotated, Any, Dict, List, Literal, Optional

import pytest
from pydantic import BaseModel, ValidationError
from pyflink.common import Row, RowKind

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.function import PythonFunction
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.tool import Tool, ToolMetadata, ToolType
from flink_agents.api.tools.utils import create_model_from_schema, create_schema_from_function, json_schema_of
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError
from flink_agents.plan.function_ref import FunctionRef
from flink_agents.runtime.durability.codec import decode, dumps, encode, loads, plain_json
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.execution.event_codec import decode_event, encode_event
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


CRASH: Dict[str, bool] = {}  # action name -> crash in it (once)
RUNS: Counter = Counter()  # what really ran


@pytest.fixture(autouse=True)
def _reset() -> None:
    CRASH.clear()
    RUNS.clear()
    GENERATED_IDS.clear()


def _run(agent: Agent, store: InMemoryJournalStore, value: Any, key: str = "k") -> LocalDriver:
    """One record through ``agent`` against ``store`` with a fresh engine and
    keyed state (what a restore to before the record gives)."""
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, key, value)
    finally:
        engine.close()
    return driver


# --- events ------------------------------------------------------------------------------------


def test_a_unified_event_keeps_its_type_and_attributes() -> None:
    event = Event(type="my_event", attributes={"field1": "test", "field2": 42})

    assert event.get_type() == "my_event"
    assert (event.get_attr("field1"), event.get_attr("field2"), event.get_attr("absent")) == ("test", 42, None)
    event.set_attr("field3", [1, 2])
    assert event.attributes == {"field1": "test", "field2": 42, "field3": [1, 2]}
    with pytest.raises(TypeError, match="name must be a str"):
        event.get_attr(3)  # type: ignore[arg-type]


def test_declared_fields_are_attributes_too_and_the_type_defaults_to_event_type() -> None:
    event = InputEvent("hello")  # 0.3.1's positional constructor

    assert event.input == "hello" and event.get_attr("input") == "hello"
    assert event.type == event.get_type() == InputEvent.EVENT_TYPE == "_input_event"
    event.set_attr("input", "changed")  # a declared field is assigned, not shadowed
    assert event.input == "changed" and event.attributes == {}
    assert OutputEvent(5).output == 5
    assert ToolResponseEvent(uuid.UUID(int=1), {"a": 1}, {"a": None}).external_ids == {"a": None}
    message = ChatMessage(role=MessageRole.USER, content="hi")
    request = ChatRequestEvent("setup", [message])
    assert (request.model, request.messages, request.prompt_args) == ("setup", [message], {})
    response = ChatResponseEvent(request.id, message)
    assert (response.request_id, response.retry_count, response.total_retry_wait_sec) == (request.id, 0, 0)


def test_from_event_reads_a_unified_event_as_the_class_it_stands_for() -> None:
    unified = Event(type="anything", attributes={"input": {"q": 1}, "note": "kept"})

    typed = InputEvent.from_event(unified)

    assert isinstance(typed, InputEvent)
    assert typed.input == {"q": 1} and typed.id == unified.id
    assert typed.get_type() == InputEvent.EVENT_TYPE and typed.get_attr("note") == "kept"
    same = InputEvent("x")
    assert InputEvent.from_event(same) is same


def test_json_round_trip_writes_rows_as_031_does_and_reads_them_back() -> None:
    named, plain = Row(name="Alice", age=11), Row(1, Row(2, "x"))
    deleted = Row.of_kind(RowKind.DELETE, "gone")
    event = Event(type="rows", attributes={"named": named, "plain": plain, "deleted": deleted})

    text = event.model_dump_json()

    data = json.loads(text)
    assert data["type"] == "rows"
    assert data["attributes"]["named"] == {"type": "Row", "values": ["Alice", 11], "fields": ["name", "age"]}
    assert data["attributes"]["plain"] == {"type": "Row", "values": [1, {"type": "Row", "values": [2, "x"]}]}
    back = Event.from_json(text)
    assert back.id == event.id
    assert back.get_attr("named") == named and back.get_attr("plain") == plain
    assert back.get_attr("deleted") == deleted and back.get_attr("deleted").get_row_kind() == RowKind.DELETE
    assert OutputEvent.from_json(OutputEvent(output=[named]).model_dump_json()).output == [named]


def test_from_json_needs_a_type_as_in_031() -> None:
    with pytest.raises(ValueError, match="non-empty 'type'"):
        Event.from_json('{"attributes": {"a": 1}}')
    with pytest.raises(ValueError, match="must be an object"):
        Event.from_json("[1]")


def test_validate_and_set_id_gives_equal_content_equal_ids() -> None:
    first = Event(type="t", attributes={"a": 1}).validate_and_set_id()
    second = Event(type="t", attributes={"a": 1}).validate_and_set_id()
    other = Event(type="t", attributes={"a": 2}).validate_and_set_id()

    assert first.id == second.id != other.id
    assert first.id.version == 3


def test_an_event_from_a_journal_written_before_type_and_attributes_still_reads() -> None:
    old = {"type": "flink_agents.api.events.event:InputEvent", "fields": {"id": {"$uuid": str(uuid.UUID(int=5))},
           "input": "x"}, "c": 2}

    event = decode_event(old)

    assert isinstance(event, InputEvent) and event.input == "x"
    assert event.get_type() == "_input_event" and event.attributes == {}


# --- Rows through the codec, the journal, keyed state and outputs ------------------------------


@pytest.mark.parametrize("row", [
    Row(name="Alice", age=11),
    Row(1, "x", None),
    Row.of_kind(RowKind.UPDATE_BEFORE, when=uuid.UUID(int=9), tags=(1, 2)),
    Row(outer=Row(inner=Row(3))),
    Row(),
], ids=["named", "positional", "update_before", "nested", "empty"])
def test_the_codec_carries_rows_with_field_names_and_row_kind(row: Row) -> None:
    back = loads(dumps(row))

    assert type(back) is Row and back == row
    assert back.get_row_kind() == row.get_row_kind()
    assert getattr(back, "_fields", None) == getattr(row, "_fields", None)


def test_rows_read_plainly_and_an_unknown_tag_is_still_refused() -> None:
    assert plain_json(encode(Row(a=1, b=Row(2)))) == {"a": 1, "b": [2]}
    assert decode({"k": {"$tuple": [1]}}) == {"k": (1,)}  # older payloads decode as before
    with pytest.raises(ValueError, match="unknown codec tag"):
        decode({"$rowz": []})


class RowSeen(Event):
    """A custom event carrying Rows between two actions."""

    current: Any
    previous: Any = None


def _remember(event: InputEvent, ctx: RunnerContext) -> None:
    memory = ctx.short_term_memory
    previous = memory.get("last")  # the Row of the key's previous record, from keyed state
    memory.set("last", event.input)
    ctx.send_event(RowSeen(current=event.input, previous=previous))


def _emit(event: RowSeen, ctx: RunnerContext) -> None:
    RUNS["emit"] += 1
    if CRASH.pop("emit", False):
        raise Crash("process died in emit")
    ctx.send_event(OutputEvent(output=Row(current=event.current, previous=event.previous)))


class RowAgent(Agent):
    """Keeps each key's last Row in short-term memory and emits a Row of
    (current, previous), by way of a custom event."""

    @action(InputEvent)
    @staticmethod
    def remember(event: InputEvent, ctx: RunnerContext) -> None:
        _remember(event, ctx)

    @action(RowSeen)
    @staticmethod
    def emit(event: RowSeen, ctx: RunnerContext) -> None:
        _emit(event, ctx)


ROWS = [Row(user="u1", n=1), Row(user="u1", n=2), Row.of_kind(RowKind.UPDATE_AFTER, "u2", 3)]


def _expected() -> Dict[str, List[Row]]:
    return {
        "u1": [Row(current=ROWS[0], previous=None), Row(current=ROWS[1], previous=ROWS[0])],
        "u2": [Row(current=ROWS[2], previous=None)],
    }


def test_rows_go_through_an_agent_on_the_local_runner_and_come_out_equal() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    listed = env.from_list([{"key": row[0], "value": row} for row in ROWS]).apply(RowAgent()).to_list()
    env.execute()

    grouped: Dict[str, List[Row]] = {}
    for entry in listed:
        for key, output in entry.items():
            grouped.setdefault(key, []).append(output)
    assert grouped == _expected()
    assert grouped["u2"][0].current.get_row_kind() == RowKind.UPDATE_AFTER
    assert grouped["u1"][1].previous._fields == ["user", "n"]


def test_a_row_in_a_journaled_event_replays_as_an_equal_row() -> None:
    agent = Agent().add_action("remember", [InputEvent], _remember).add_action("emit", [RowSeen], _emit)
    store = InMemoryJournalStore()
    row = Row.of_kind(RowKind.UPDATE_AFTER, user="u9", score=(1, 2))
    CRASH["emit"] = True

    with pytest.raises(Crash):
        _run(agent, store, row)
    driver = _run(agent, store, row)  # "remember" replays from the journal; its RowSeen is decoded

    assert driver.outputs == [{"k": Row(current=row, previous=None)}]
    assert driver.outputs[0]["k"].current.get_row_kind() == RowKind.UPDATE_AFTER
    assert RUNS["emit"] == 2


def test_an_event_with_a_row_encodes_for_the_journal() -> None:
    # A job's plan would name this module's event class; here no plan does.
    from flink_agents.runtime.durability.codec_classes import trust_package

    trust_package(__name__)
    event = RowSeen(current=Row(a=1))

    back = decode_event(encode_event(event))

    assert back.current == Row(a=1) and back.get_type() == RowSeen.EVENT_TYPE


# --- tool-call ids of any hashable type, positional tool calls ---------------------------------

GENERATED_IDS: List[uuid.UUID] = []


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    RUNS["add"] += 1
    return a + b


class Joiner(Tool):
    """A tool written against 0.3.1's ``call(self, *args, **kwargs)``."""

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.FUNCTION

    def call(self, *args: Any, **kwargs: Any) -> Any:
        RUNS["joiner"] += 1
        return "-".join([*map(str, args), *(f"{k}={v}" for k, v in sorted(kwargs.items()))])


def _ask_tools(event: InputEvent, ctx: RunnerContext) -> None:
    call_id = uuid.uuid4()  # as 0.3.1 user code makes tool-call ids
    GENERATED_IDS.append(call_id)
    ctx.send_event(ToolRequestEvent("no_model", [
        {"id": call_id, "type": "function", "function": {"name": "add", "arguments": [1, 2]}},
        {"id": 7, "type": "function", "function": {"name": "joiner", "arguments": ["x", "y"]}},
        {"id": ("t", 1), "type": "function", "function": {"name": "joiner", "arguments": {"sep": "z"}},
         "original_id": call_id},
    ], offered_tools=["add", "joiner"]))


def _journal_written() -> bool:
    return True


def _answer(event: Event, ctx: RunnerContext) -> None:
    RUNS["answer"] += 1
    # A call first: the tool results are committed before it starts
    # (docs/durability.md, Commits), so the crash below never loses one. The
    # last result to land alone would otherwise wait for the run's next
    # write, and a crash here would run that tool again (by design).
    ctx.durable_execute(_journal_written)
    if CRASH.pop("answer", False):
        raise Crash("process died in answer")
    response = ToolResponseEvent.from_event(event)
    ctx.send_event(OutputEvent(output={"responses": response.responses, "external": response.external_ids,
                                       "errors": response.errors}))


def _tool_agent() -> Agent:
    joiner = Joiner(metadata=ToolMetadata(name="joiner", description="Join.", args_schema={"type": "object"}))
    return (
        Agent()
        .add_action("ask", [InputEvent], _ask_tools)
        .add_action("answer", [ToolResponseEvent.EVENT_TYPE], _answer)
        .add_resource("add", ResourceType.TOOL, add)
        .add_resource("joiner", ResourceType.TOOL, joiner)
    )


def test_tool_call_ids_of_any_hashable_type_are_answered_with_the_same_ids_after_a_replay() -> None:
    store = InMemoryJournalStore()
    CRASH["answer"] = True

    with pytest.raises(Crash):
        _run(_tool_agent(), store, "go")
    driver = _run(_tool_agent(), store, "go")  # "ask" and the tool action replay from the journal

    (call_id,) = GENERATED_IDS  # "ask" ran once: the replay decoded its request
    (output,) = [o["k"] for o in driver.outputs]
    assert output["responses"] == {call_id: 3, 7: "x-y", ("t", 1): "sep=z"}
    assert [type(k) for k in output["responses"]] == [uuid.UUID, int, tuple]
    assert output["external"] == {call_id: None, 7: None, ("t", 1): call_id}
    assert output["errors"] == {}
    # Tools called positionally ([1, 2] -> add(1, 2)) ran once each, not again on the replay.
    assert (RUNS["add"], RUNS["joiner"], RUNS["answer"]) == (1, 2, 2)


def test_a_tool_request_refuses_an_unhashable_call_id_naming_it() -> None:
    with pytest.raises(ValidationError, match=r"tool_calls\[0\]\.id is a dict"):
        ToolRequestEvent("m", [{"id": {"x": 1}, "function": {"name": "add", "arguments": {}}}])


# --- tools ---------------------------------------------------------------------------------------


def test_function_tool_is_one_class_at_both_import_paths_and_calls_positionally() -> None:
    from flink_agents.api.tools import FunctionTool as from_package
    from flink_agents.api.tools.function_tool import FunctionTool as at_031_path
    from flink_agents.api.tools.tool import FunctionTool as at_old_path

    assert at_031_path is at_old_path is from_package
    tool = Tool.from_callable(add)
    assert isinstance(tool, at_031_path) and tool.name == "add"
    assert (tool.call(1, 2), tool.call(1, b=5), tool.call(a=2, b=2)) == (3, 6, 4)
    with pytest.raises(TypeError, match=r"tool 'add' takes \(a, b\)"):
        tool.call(1, 2, 3)


def test_a_function_tool_built_as_031_builds_it_derives_its_metadata() -> None:
    from flink_agents.api.tools.function_tool import FunctionTool

    tool = FunctionTool(func=PythonFunction.from_callable(add))

    assert tool.metadata == Tool.from_callable(add).metadata
    assert tool.metadata.description == "Add two numbers."
    assert tool.call(2, 3) == 5
    with pytest.raises(TypeError, match="func must be callable"):
        FunctionTool(func=42)


def google(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Args:
        city: The city's name.
        days (int): How many days
            ahead, at most 7.
    """
    return city


def numpy_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Parameters
    ----------
    city : str
        The city's name.
    days : int
        How many days ahead.
    """
    return city


def rest_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    :param city: The city's name.
    :param days: How many days ahead.
    """
    return city


@pytest.mark.parametrize("func", [google, numpy_style, rest_style], ids=["google", "numpy", "rest"])
def test_schemas_take_parameter_descriptions_from_every_docstring_style(func: Any) -> None:
    metadata = Tool.from_callable(func).metadata

    assert metadata.description == "Forecast the weather."
    properties = metadata.args_schema["properties"]
    assert properties["city"] == {"type": "string", "description": "The city's name."}
    assert properties["days"]["description"].startswith("How many days") and properties["days"]["default"] == 1
    assert metadata.args_schema["required"] == ["city"]


class Address(BaseModel):
    street: str
    number: int = 1


def rich(
    name: str,
    tags: List[str],
    level: Literal["low", "high"],
    note: Optional[str] = None,
    address: Optional[Address] = None,
    weight: Annotated[float, "Weight in kg."] = 1.5,
) -> None:
    """A function with every kind of parameter."""


def test_a_schema_from_a_function_turns_back_into_an_equivalent_model() -> None:
    model = create_schema_from_function("rich", rich)
    schema = model.model_json_schema()

    rebuilt = create_model_from_schema("rich", schema)

    assert rebuilt.model_json_schema() == schema
    assert schema["properties"]["name"]["description"] == "Parameter: name"  # 0.3.1's default text
    assert schema["properties"]["weight"]["description"] == "Weight in kg."
    value = rebuilt(name="n", tags=["a"], level="high", address={"street": "Main"})
    assert value.address.number == 1 and value.weight == 1.5
    with pytest.raises(ValidationError, match="level"):
        rebuilt(name="n", tags=[], level="medium")


def test_tool_metadata_takes_031_model_schemas_and_gives_the_parameters_dict() -> None:
    metadata = ToolMetadata(name="rich", description="d", args_schema=create_schema_from_function("rich", rich))

    # A model is kept as 0.3.1 serializes it (titles included); a FunctionTool's has none.
    assert metadata.args_schema == create_schema_from_function("rich", rich).model_json_schema()
    assert metadata.args_schema["title"] == "rich"
    assert "title" not in Tool.from_callable(rich).metadata.args_schema
    assert set(metadata.get_parameters_dict()) == {"type", "properties", "required", "$defs"}


class Opaque:
    """Something pydantic cannot describe."""


def takes_opaque(x: Opaque) -> None:
    """Takes an Opaque."""


def test_an_annotation_without_a_schema_fails_naming_the_tool() -> None:
    with pytest.raises(TypeError, match="tool 'takes_opaque': Unable to generate pydantic-core schema"):
        Tool.from_callable(takes_opaque)

    class Local:
        pass

    def takes_local(x: Local) -> None:
        """With postponed annotations, ``Local`` cannot be resolved by name."""

    with pytest.raises(TypeError, match="tool 'takes_local'.*annotation 'Local' of parameter 'x'"):
        Tool.from_callable(takes_local)


# --- api/function.py ---------------------------------------------------------------------------


def test_python_function_is_named_by_module_and_qualname_and_resolves_either_way() -> None:
    described = PythonFunction.from_callable(Joiner.tool_type)
    by_name = PythonFunction.model_validate(described.model_dump())

    assert described.model_dump() == {"func_type": "PythonFunction", "module": __name__, "qualname": "Joiner.tool_type"}
    assert by_name == described
    assert by_name.as_callable()() is ToolType.FUNCTION and by_name() is ToolType.FUNCTION
    assert PythonFunction(module=__name__, qualname="add")(2, 2) == 4

    def local(x: int) -> int:  # not importable by name: kept by from_callable
        return x * 10

    assert PythonFunction.from_callable(local)(3) == 30
    with pytest.raises(AttributeError):
        PythonFunction(module=__name__, qualname="no_such_function").as_callable()
    with pytest.raises(TypeError, match="not a callable"):
        PythonFunction(module=__name__, qualname="ROWS").as_callable()


def test_plan_function_refs_resolve_through_the_same_lookup() -> None:
    assert FunctionRef(module=__name__, qualname="RowAgent.emit").resolve() is RowAgent.__dict__["emit"].__func__
    with pytest.raises(PlanError, match="cannot import function"):
        FunctionRef(module=__name__, qualname="ROWS").resolve()

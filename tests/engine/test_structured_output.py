"""Structured output in the built-in chat action (issue 16, part 1).

A ``ChatRequestEvent.output_schema`` (or the setup's ``output_schema``) makes
the final answer structured: the schema reaches the model natively (a
connection with ``supports_output_schema``) or as a system instruction, the
answer is validated, a mismatch is re-asked (each re-ask a journaled model
call), exhaustion is a terminal ``StructuredOutputError``, and the validated
value arrives in ``response.extra_args[STRUCTURED_OUTPUT]``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.runtime.durability.codec_classes import trust_package
from pydantic import BaseModel, Field
from pyflink.common import Row, Types

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT, Agent
from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.chat_models.errors import ModelResponseError
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.api.agents.types import REASK_MARK
from flink_agents.api.chat_models.errors import StructuredOutputError
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, classify
from flink_agents.runtime.execution.event_codec import decode_event, encode_event
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record
from tests.support import host_runs


class Verdict(BaseModel):
    """The schema most tests ask for."""

    score: int = Field(ge=1, le=5)
    label: str


@pytest.fixture(autouse=True)
def _trust_this_module() -> None:
    """A job trusts the packages of its plan's classes when it starts; tests
    that encode or read back this module's classes without a job trust it
    as a job would (else they pass only after another test built a plan here
    on the same xdist worker)."""
    trust_package(Verdict.__module__.split(".")[0])


VERDICT_ROW = Types.ROW_NAMED(["score", "label"], [Types.INT(), Types.STRING()])
VERDICT_JSON_SCHEMA = {
    "title": "verdict",
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "label": {"type": "string"}},
    "required": ["score", "label"],
}

GOOD = json.dumps({"score": 4, "label": "fine"})
OUT_OF_RANGE = json.dumps({"score": 9, "label": "fine"})

# What the scripted connections answer (in order) and what they were sent.
SCRIPT: List[Any] = []
CALLS: List[Dict[str, Any]] = []
# The schema the asking action puts on its request (None: none).
REQUEST: Dict[str, Any] = {"schema": None}


@pytest.fixture(autouse=True)
def _reset() -> None:
    SCRIPT.clear()
    CALLS.clear()
    REQUEST["schema"] = None


class ScriptedConnection(BaseChatModelConnection):
    """Answers from ``SCRIPT`` (a text, or a full ``ChatMessage``); records
    each call's messages and keyword arguments in ``CALLS``."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        CALLS.append({"messages": list(messages), "kwargs": dict(kwargs)})
        if not SCRIPT:
            raise AssertionError(f"the model was called {len(CALLS)} times; the script has fewer replies")
        reply = SCRIPT.pop(0)
        return reply if isinstance(reply, ChatMessage) else ChatMessage(role=MessageRole.ASSISTANT, content=reply)


class NativeSchemaConnection(ScriptedConnection):
    """A connection whose provider takes the schema natively."""

    supports_output_schema = True


def lookup(name: str) -> str:
    """Look up a name.

    Args:
        name: The name.
    """
    return f"{name} is known"


def ask(event: InputEvent, ctx: Any) -> None:
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="You judge things."),
        ChatMessage(role=MessageRole.USER, content=str(event.input)),
    ]
    ctx.send_event(ChatRequestEvent("model", messages, None, REQUEST["schema"]))


def answer(event: ChatResponseEvent, ctx: Any) -> None:
    value = event.response.extra_args.get(STRUCTURED_OUTPUT)
    if isinstance(value, BaseModel):
        value = {"model": type(value).__name__, **value.model_dump()}
    elif isinstance(value, Row):
        value = {"row": value.as_dict()}
    ctx.send_event(OutputEvent(output={"structured": value, "content": event.response.content}))


def agent(connection: type = ScriptedConnection, setup_schema: Any = None, tools: Sequence[str] = ()) -> Agent:
    built = Agent()
    built.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=connection))
    setup_args: Dict[str, Any] = {"connection": "conn", "tools": list(tools)}
    if setup_schema is not None:
        setup_args["output_schema"] = setup_schema
    built.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=BaseChatModelSetup, **setup_args))
    if "lookup" in tools:
        built.add_resource("lookup", ResourceType.TOOL, lookup)
    built.add_action("ask", [InputEvent], ask)
    built.add_action("answer", [ChatResponseEvent], answer)
    return built


def chat_calls(store: InMemoryJournalStore) -> List[str]:
    """The journaled model calls' payloads, in journal order."""
    entries = [entry for run in store._runs.values() for (entry, _) in run.values()]
    return [e.payload for e in sorted(entries, key=lambda e: (e.step, e.ordinal)) if e.function_id == "chat:model"]


# ---- schema kinds ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema, expected",
    [
        (Verdict, {"model": "Verdict", "score": 4, "label": "fine"}),
        (VERDICT_ROW, {"row": {"score": 4, "label": "fine"}}),
        (VERDICT_JSON_SCHEMA, {"score": 4, "label": "fine"}),
    ],
    ids=["pydantic", "row_type", "json_schema"],
)
def test_every_schema_kind_arrives_validated_in_structured_output(schema: Any, expected: Dict[str, Any]) -> None:
    REQUEST["schema"] = schema
    SCRIPT.append(GOOD)
    driver = run_record(agent(), InMemoryJournalStore(), "a good thing")
    assert driver.outputs == [{"k": {"structured": expected, "content": GOOD}}]


def test_the_response_event_keeps_a_model_instance_and_a_row_through_the_codec() -> None:
    message = ChatMessage(role=MessageRole.ASSISTANT, content=GOOD,
                          extra_args={STRUCTURED_OUTPUT: Verdict(score=4, label="fine")})
    event = decode_event(encode_event(ChatResponseEvent(request_id=ChatRequestEvent("m", []).id, response=message)))
    assert event.response.extra_args[STRUCTURED_OUTPUT] == Verdict(score=4, label="fine")
    row = OutputSchema(VERDICT_ROW).parse(GOOD)
    message = message.model_copy(update={"extra_args": {STRUCTURED_OUTPUT: row}})
    event = decode_event(encode_event(ChatResponseEvent(request_id=event.request_id, response=message)))
    assert event.response.extra_args[STRUCTURED_OUTPUT].as_dict() == {"score": 4, "label": "fine"}


# ---- native vs instruction ---------------------------------------------------------------------


def test_a_connection_without_native_support_gets_the_schema_as_a_system_instruction() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.append(GOOD)
    run_record(agent(ScriptedConnection), InMemoryJournalStore(), "x")
    (call,) = CALLS
    assert "output_schema" not in call["kwargs"]
    roles = [m.role for m in call["messages"]]
    assert roles == [MessageRole.SYSTEM, MessageRole.SYSTEM, MessageRole.USER]  # after the first system message
    instruction = call["messages"][1].content
    assert json.dumps(Verdict.model_json_schema(), sort_keys=True) in instruction
    assert call["messages"][0].content == "You judge things."


def test_a_native_connection_gets_the_schema_as_a_keyword_and_no_instruction() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.append(GOOD)
    driver = run_record(agent(NativeSchemaConnection), InMemoryJournalStore(), "x")
    (call,) = CALLS
    assert call["kwargs"]["output_schema"] == OutputSchema(Verdict)
    assert [m.content for m in call["messages"]] == ["You judge things.", "x"]
    assert driver.outputs[0]["k"]["structured"]["model"] == "Verdict"


def test_the_setup_schema_applies_when_the_request_has_none_and_the_request_schema_wins() -> None:
    SCRIPT.append(GOOD)
    driver = run_record(agent(setup_schema=VERDICT_JSON_SCHEMA), InMemoryJournalStore(), "x")
    assert driver.outputs[0]["k"]["structured"] == {"score": 4, "label": "fine"}

    REQUEST["schema"] = Verdict
    SCRIPT.append(GOOD)
    driver = run_record(agent(setup_schema=VERDICT_JSON_SCHEMA), InMemoryJournalStore(), "x")
    assert driver.outputs[0]["k"]["structured"] == {"model": "Verdict", "score": 4, "label": "fine"}


def test_a_setup_schema_in_serialized_form_survives_a_plan_written_as_json() -> None:
    plan = AgentPlan.from_agent(agent(setup_schema=OutputSchema(Verdict).model_dump()))
    spec = AgentPlan.from_json(plan.to_json()).resource_spec("model", ResourceType.CHAT_MODEL)
    setup = BaseChatModelSetup(**spec.descriptor.arguments)
    assert setup.output_schema == OutputSchema(Verdict)


def test_without_a_schema_nothing_is_added() -> None:
    SCRIPT.append("plain text")
    driver = run_record(agent(NativeSchemaConnection), InMemoryJournalStore(), "x")
    assert driver.outputs == [{"k": {"structured": None, "content": "plain text"}}]
    assert "output_schema" not in CALLS[0]["kwargs"] and len(CALLS[0]["messages"]) == 2


# ---- re-asks ---------------------------------------------------------------------------------


def test_a_mismatch_is_re_asked_naming_the_field_and_a_replay_calls_nothing() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.extend([OUT_OF_RANGE, GOOD])
    store = InMemoryJournalStore()
    driver = run_record(agent(), store, "x")
    assert driver.outputs[0]["k"]["structured"] == {"model": "Verdict", "score": 4, "label": "fine"}
    assert len(CALLS) == 2
    reask = CALLS[1]["messages"][-1]
    assert reask.role == MessageRole.USER and reask.extra_args == {REASK_MARK: True}
    assert "'score'" in reask.content and "less than or equal to 5" in reask.content
    assert CALLS[1]["messages"][-2].content == OUT_OF_RANGE  # the rejected answer is in the conversation
    assert len(chat_calls(store)) == 2  # both model calls are journaled

    CALLS.clear()  # a restore to before the record: the journal answers both calls
    replayed = run_record(agent(), store, "x")
    assert replayed.outputs == driver.outputs
    assert CALLS == []


def test_an_answer_that_is_not_json_is_re_asked_for_the_whole_answer() -> None:
    REQUEST["schema"] = VERDICT_ROW
    SCRIPT.extend(["Sure! It is a four.", GOOD])
    driver = run_record(agent(), InMemoryJournalStore(), "x")
    assert driver.outputs[0]["k"]["structured"] == {"row": {"score": 4, "label": "fine"}}
    assert "the answer as a whole: not JSON" in CALLS[1]["messages"][-1].content


def _failure(config: Dict[str, Any] | None = None) -> StructuredOutputError:
    with pytest.raises(ActionFailed) as failed:
        run_record(agent(), InMemoryJournalStore(), "x", config)
    assert isinstance(failed.value.cause, StructuredOutputError), failed.value
    return failed.value.cause


def test_exhausted_re_asks_fail_naming_schema_field_and_text() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.extend([OUT_OF_RANGE] * 3)
    error = _failure()
    assert len(CALLS) == 3  # the answer and the default 2 re-asks
    assert (error.schema_name, error.field, error.text, error.reasks) == ("Verdict", "score", OUT_OF_RANGE, 2)
    assert "'Verdict'" in str(error) and "field 'score'" in str(error) and OUT_OF_RANGE in str(error)
    assert isinstance(error, ModelResponseError)


def test_the_re_ask_count_is_configurable() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.append(OUT_OF_RANGE)
    error = _failure({"chat.output_schema.max_retries": 0})
    assert len(CALLS) == 1 and error.reasks == 0


def test_the_error_is_terminal_so_a_retry_strategy_does_not_ask_again() -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.extend([OUT_OF_RANGE] * 3)
    assert classify(StructuredOutputError("model", _mismatch(), 2)) == "terminal"
    _failure({"error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001})
    assert len(CALLS) == 3  # one attempt's calls only


def _mismatch() -> Any:
    try:
        OutputSchema(Verdict).parse(OUT_OF_RANGE)
    except ValueError as exc:
        return exc
    raise AssertionError("the answer should not match")


# ---- tool rounds -----------------------------------------------------------------------------


def test_the_schema_survives_a_tool_round_in_keyed_state() -> None:
    REQUEST["schema"] = Verdict
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"name": "bob"}}}
    SCRIPT.extend([ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call]), OUT_OF_RANGE, GOOD])
    store = InMemoryJournalStore()
    driver = run_record(agent(NativeSchemaConnection, tools=["lookup"]), store, "x")
    assert driver.outputs[0]["k"]["structured"] == {"model": "Verdict", "score": 4, "label": "fine"}
    # The rounds after the tool (another step, schema read back from sensory memory) still carry it.
    assert [c["kwargs"].get("output_schema") for c in CALLS] == [OutputSchema(Verdict)] * 3
    assert CALLS[1]["messages"][-1].role == MessageRole.TOOL and CALLS[2]["messages"][-1].extra_args == {REASK_MARK: True}
    CALLS.clear()
    assert run_record(agent(NativeSchemaConnection, tools=["lookup"]), store, "x").outputs == driver.outputs
    assert CALLS == []


# ---- ChatRequestEvent compatibility ------------------------------------------------------------


def test_output_schema_is_the_fourth_parameter_or_a_keyword_as_in_031() -> None:
    messages = [ChatMessage(role=MessageRole.USER, content="hi")]
    positional = ChatRequestEvent("m", messages, {"a": 1}, Verdict)
    keyword = ChatRequestEvent(model="m", messages=messages, prompt_args={"a": 1}, output_schema=OutputSchema(Verdict))
    assert positional.output_schema == keyword.output_schema == OutputSchema(Verdict)
    assert positional.get_attr("output_schema") == OutputSchema(Verdict)
    assert ChatRequestEvent("m", messages).output_schema is None


@pytest.mark.parametrize("schema", [Verdict, VERDICT_ROW, {**VERDICT_JSON_SCHEMA, "$defs": {}}], ids=["pydantic", "row", "json"])
def test_a_request_schema_survives_the_event_codec(schema: Any) -> None:
    # A job trusts the packages of its plan's classes when it starts; this
    # test has no job: trust the schema's module as one would (else the
    # result hangs on whether another test built a plan here first).
    trust_package(Verdict.__module__.split(".")[0])
    event = ChatRequestEvent("m", [ChatMessage(role=MessageRole.USER, content="hi")], None, schema)
    decoded = decode_event(encode_event(event))
    assert decoded.output_schema == OutputSchema(schema)
    assert decoded.output_schema.parse(GOOD) == OutputSchema(schema).parse(GOOD)


def test_a_request_schema_of_another_kind_is_refused_naming_its_type() -> None:
    with pytest.raises(TypeError, match="output_schema must be .* not list"):
        ChatRequestEvent("m", [], None, ["score"])


def test_the_setup_asked_directly_inserts_the_instruction_after_the_first_system_message() -> None:
    setup = BaseChatModelSetup(connection="conn")
    connection = ScriptedConnection()
    setup.get_resource = lambda name, kind: connection
    SCRIPT.append(GOOD)
    setup.chat(
        [ChatMessage(role=MessageRole.USER, content="u"), ChatMessage(role=MessageRole.SYSTEM, content="s")],
        output_schema=VERDICT_JSON_SCHEMA,
    )
    sent = CALLS[0]["messages"]
    assert [m.content for m in sent][:2] == ["u", "s"] and '"title": "verdict"' in sent[2].content


def test_a_per_key_conversation_keeps_the_valid_answer_and_not_the_re_ask() -> None:
    REQUEST["schema"] = Verdict
    per_key = Agent()
    per_key.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ScriptedConnection))
    per_key.add_resource("model", ResourceType.CHAT_MODEL,
                         ResourceDescriptor(clazz=BaseChatModelSetup, connection="conn", conversation="per_key"))
    per_key.add_action("ask", [InputEvent], ask)
    per_key.add_action("answer", [ChatResponseEvent], answer)

    SCRIPT.extend([OUT_OF_RANGE, GOOD, GOOD])
    engine = AgentEngine(AgentPlan.from_agent(per_key), {}, job_id="job", store=InMemoryJournalStore())
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "k", "first")
        host_runs.process(engine, driver, "k", "second")
    finally:
        engine.close()
    second_turn = [(m.role, m.content) for m in CALLS[2]["messages"] if m.role != MessageRole.SYSTEM]
    assert second_turn == [
        (MessageRole.USER, "first"), (MessageRole.ASSISTANT, GOOD), (MessageRole.USER, "second"),
    ]


class DelegatingSetup(BaseChatModelSetup):
    """A provider-style setup: overrides ``chat``/``achat`` and delegates."""

    def chat(self, messages: Sequence[ChatMessage], prompt_args: Any = None, **kwargs: Any) -> ChatMessage:
        return super().chat(messages, prompt_args, **kwargs)

    async def achat(self, messages: Sequence[ChatMessage], prompt_args: Any = None, **kwargs: Any) -> ChatMessage:
        return await super().achat(messages, prompt_args, **kwargs)


class Legacy031Setup(BaseChatModelSetup):
    """A Flink Agents 0.3.1-style setup: its own ``chat`` over its own
    client, which takes no ``output_schema`` (0.3.1 never passes one)."""

    def chat(self, messages: Sequence[ChatMessage], prompt_args: Any = None, **kwargs: Any) -> ChatMessage:
        assert "output_schema" not in kwargs, "a 0.3.1-style setup must not get output_schema"
        return ScriptedConnection().chat(messages)


@pytest.mark.parametrize(
    "setup, connection, native",
    [(DelegatingSetup, NativeSchemaConnection, True), (Legacy031Setup, ScriptedConnection, False)],
    ids=["delegating_to_a_native_connection", "031_style_without_one"],
)
def test_a_setup_that_overrides_chat_still_gets_the_schema(setup: type, connection: type, native: bool) -> None:
    REQUEST["schema"] = Verdict
    SCRIPT.append(GOOD)
    built = Agent()
    built.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=connection))
    built.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=setup, connection="conn"))
    built.add_action("ask", [InputEvent], ask)
    built.add_action("answer", [ChatResponseEvent], answer)
    driver = run_record(built, InMemoryJournalStore(), "x")
    assert driver.outputs[0]["k"]["structured"] == {"model": "Verdict", "score": 4, "label": "fine"}
    (call,) = CALLS
    if native:  # the provider's own structured output, through the setup's delegation
        assert call["kwargs"]["output_schema"] == OutputSchema(Verdict) and len(call["messages"]) == 2
    else:  # the instruction, put into the messages by the action
        assert "output_schema" not in call["kwargs"]
        assert json.dumps(Verdict.model_json_schema(), sort_keys=True) in call["messages"][1].content


class AsyncRecordingConnection(ScriptedConnection):
    """Records whether the async path was taken."""

    async def achat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        return self.chat(messages, tools, async_path=True, **kwargs)


def test_a_setup_overriding_both_chat_and_achat_keeps_the_connections_async_path() -> None:
    setup = DelegatingSetup(connection="conn")
    connection = AsyncRecordingConnection()
    setup.get_resource = lambda name, kind: connection
    SCRIPT.append(GOOD)
    asyncio.run(setup.achat([ChatMessage(role=MessageRole.USER, content="u")], output_schema=Verdict))
    assert CALLS[0]["kwargs"].get("async_path") is True


def test_a_schema_that_cannot_work_is_refused_when_declared_naming_where() -> None:
    """A row type with a non-basic field, or a JSON schema that is not valid,
    fails at once (TypeError naming the field or the place), not after the
    model was asked with it."""
    from pyflink.common.typeinfo import Types

    with pytest.raises(TypeError, match=r"RowTypeInfo field 'tags' is a ListTypeInfo.*only basic types"):
        OutputSchema(Types.ROW_NAMED(["score", "tags"], [Types.INT(), Types.LIST(Types.STRING())]))
    with pytest.raises(TypeError, match=r"not a valid JSON schema \(draft 2020-12\) at properties/x/type"):
        OutputSchema({"type": "object", "properties": {"x": {"type": "integr"}}})

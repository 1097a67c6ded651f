"""Flink Agents 0.3.1 resources and environment helpers (issue 15, "Resources"
and "Environment"): environment-level resources, ``ResourceContext``,
``get_resource_class``, setups whose connection names no resource,
``from_list`` read at ``execute()``, ``LocalPrompt``/``SafeFormatter``,
``find_first_system_message``, ``validate_memory_value`` and
``AsyncExecutionResult``."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Sequence

import pytest
from pydantic import ValidationError

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole, find_first_system_message
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.memory_object import validate_memory_value
from flink_agents.api.prompts.prompt import LocalPrompt, Prompt
from flink_agents.api.prompts.utils import SafeFormatter, format_string
from flink_agents.api.resource import (
    ResourceDescriptor,
    ResourceType,
    SerializableResource,
    get_resource_class,
)
from flink_agents.api.resource_context import ResourceContext
from flink_agents.api.runner_context import AsyncExecutionResult
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs


def _run(agent: Agent, records: List[Dict[str, Any]], env: Any = None) -> List[Dict[Any, Any]]:
    env = env or AgentsExecutionEnvironment.get_execution_environment()
    out = env.from_list(records).apply(agent).to_list()
    env.execute()
    return out


# ---- resources registered on the environment -------------------------------------------


def _greet(event: InputEvent, ctx: Any) -> None:
    prompt = ctx.get_resource("greeting", ResourceType.PROMPT)
    ctx.send_event(OutputEvent(output=prompt.format_string(name=event.input)))


def test_a_resource_added_to_the_environment_is_used_by_an_agents_action() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    returned = env.add_resource("greeting", ResourceType.PROMPT, Prompt.from_text("Hello {name}!"))

    out = _run(Agent().add_action("greet", [InputEvent], _greet), [{"key": "k", "value": "Ada"}], env)

    assert returned is env  # chainable, as in 0.3.1
    assert out == [{"k": "Hello Ada!"}]


def test_the_agents_own_resource_wins_over_the_environments_of_the_same_name() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.add_resource("greeting", ResourceType.PROMPT, Prompt.from_text("Shared {name}"))
    agent = Agent().add_action("greet", [InputEvent], _greet)
    agent.add_resource("greeting", ResourceType.PROMPT, Prompt.from_text("Own {name}"))

    assert _run(agent, [{"key": "k", "value": "Bo"}], env) == [{"k": "Own Bo"}]


# ---- ResourceContext: a resource reaching the others --------------------------------------

SEEN: Dict[str, Any] = {}


class UpperConnection(BaseChatModelConnection):
    def chat(self, messages: Sequence[ChatMessage], tools: Any = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=" | ".join(m.content.upper() for m in messages))


class ContextSetup(BaseChatModelSetup):
    """Written as 0.3.1 setups are: overrides ``chat`` and reaches its
    connection and prompt through ``self.resource_context``."""

    def chat(self, messages: Sequence[ChatMessage], prompt_args: Dict[str, Any] | None = None, **kwargs: Any) -> ChatMessage:
        SEEN["context"] = self.resource_context
        connection = self.resource_context.get_resource(self.connection, ResourceType.CHAT_MODEL_CONNECTION)
        # The context hands out the agent's shared instance, built once.
        SEEN["same_instance"] = self.resource_context.get_resource(self.connection, ResourceType.CHAT_MODEL_CONNECTION) is connection
        prompt = self.resource_context.get_resource(self.prompt, ResourceType.PROMPT)
        return connection.chat(prompt.format_messages(**(prompt_args or {})) + list(messages))


class SelfContainedSetup(BaseChatModelSetup):
    """Overrides ``chat`` and never uses its connection."""

    def chat(self, messages: Sequence[ChatMessage], prompt_args: Dict[str, Any] | None = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"self-made: {messages[-1].content}")


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(
        model="model", messages=[ChatMessage(content=str(event.input))], prompt_args={"topic": "tea"},
    ))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


def _chat_agent(setup: type, connection: str = "conn") -> Agent:
    agent = Agent().add_action("ask", [InputEvent], _ask).add_action("answer", [ChatResponseEvent], _answer)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=UpperConnection))
    agent.add_resource("intro", ResourceType.PROMPT, Prompt.from_text("about {topic}"))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=setup, connection=connection, prompt="intro"))
    return agent


def test_a_setup_reaches_its_connection_and_prompt_through_its_resource_context() -> None:
    SEEN.clear()

    out = _run(_chat_agent(ContextSetup), [{"key": "k", "value": "hi"}])

    assert out == [{"k": "ABOUT TEA | HI"}]
    assert isinstance(SEEN["context"], ResourceContext)
    assert SEEN["same_instance"] is True


def test_a_resource_asking_its_context_for_a_missing_name_gets_a_key_error_naming_both() -> None:
    class Asker(SerializableResource):
        wanted: str

        @classmethod
        def resource_type(cls) -> ResourceType:
            return ResourceType.TOOL

    def action(event: InputEvent, ctx: Any) -> None:
        asker = ctx.get_resource("asker", ResourceType.TOOL)
        try:
            asker.resource_context.get_resource(asker.wanted, ResourceType.PROMPT)
        except KeyError as error:
            ctx.send_event(OutputEvent(output=str(error)))

    agent = Agent().add_action("a", [InputEvent], action)
    agent.add_resource("asker", ResourceType.TOOL, Asker(wanted="absent"))

    [[message]] = [list(o.values()) for o in _run(agent, [{"key": "k", "value": 1}])]

    assert "tool resource 'asker'" in message and "prompt 'absent'" in message


# ---- a setup whose connection names no resource ---------------------------------------------


def test_a_setup_whose_connection_names_no_resource_compiles() -> None:
    plan = AgentPlan.from_agent(_chat_agent(SelfContainedSetup, connection="nowhere"))

    assert plan.resource_spec("model", ResourceType.CHAT_MODEL).descriptor.arguments["connection"] == "nowhere"


def test_a_setup_that_never_uses_its_missing_connection_answers() -> None:
    out = _run(_chat_agent(SelfContainedSetup, connection="nowhere"), [{"key": "k", "value": "hi"}])

    assert out == [{"k": "self-made: hi"}]


class PlainSetup(BaseChatModelSetup):
    """Uses its connection (the base class's ``chat``)."""


def test_a_setup_fails_naming_itself_and_the_missing_connection_when_it_uses_it() -> None:
    def inspect_then_use(event: InputEvent, ctx: Any) -> None:
        setup = ctx.get_resource("model", ResourceType.CHAT_MODEL)  # built and opened: no error yet
        try:
            setup.chat([ChatMessage(content="hi")])
        except KeyError as error:
            ctx.send_event(OutputEvent(output={"model": setup.model, "error": str(error)}))

    agent = _chat_agent(PlainSetup, connection="nowhere")
    agent.resources[ResourceType.CHAT_MODEL]["model"].arguments["model"] = "m-1"
    agent.add_action("inspect", [InputEvent], inspect_then_use)
    agent.actions.pop("ask")

    [output] = _run(agent, [{"key": "k", "value": "x"}])

    assert output["k"]["model"] == "m-1"
    assert "chat_model resource 'model'" in output["k"]["error"]
    assert "chat_model_connection 'nowhere'" in output["k"]["error"]


def test_a_chat_request_to_a_setup_with_a_missing_connection_fails_the_action_with_the_names() -> None:
    with pytest.raises(ActionFailed) as failed:
        _run(_chat_agent(PlainSetup, connection="nowhere"), [{"key": "k", "value": "hi"}])

    assert isinstance(failed.value.cause, KeyError)
    assert "chat_model resource 'model'" in str(failed.value)
    assert "chat_model_connection 'nowhere'" in str(failed.value)


# ---- get_resource_class, descriptors, serializable resources, Agent.add_resource -----------------


def test_get_resource_class_finds_a_class_by_module_and_name() -> None:
    assert get_resource_class("flink_agents.api.prompts.prompt", "LocalPrompt") is LocalPrompt
    with pytest.raises(AttributeError, match="'flink_agents.api.prompts.prompt' has no class 'Nope'"):
        get_resource_class("flink_agents.api.prompts.prompt", "Nope")
    with pytest.raises(TypeError, match="not a class"):
        get_resource_class("flink_agents.api.prompts.utils", "format_string")


def test_descriptors_naming_the_same_class_by_object_or_text_are_equal() -> None:
    by_class = ResourceDescriptor(clazz=UpperConnection, timeout=3)
    by_name = ResourceDescriptor(clazz=f"{UpperConnection.__module__}.{UpperConnection.__qualname__}", timeout=3)

    assert by_class == by_name
    assert by_class != ResourceDescriptor(clazz=UpperConnection, timeout=4)


def test_a_serializable_resource_with_a_non_json_field_is_refused_when_created() -> None:
    class Holder(SerializableResource):
        thing: Any

        @classmethod
        def resource_type(cls) -> ResourceType:
            return ResourceType.TOOL

    assert Holder(thing=[1, "a"]).thing == [1, "a"]
    with pytest.raises(ValidationError, match="Holder is a SerializableResource"):
        Holder(thing=object())


def test_agent_resources_has_every_kind_and_add_resource_refuses_a_class_name_text() -> None:
    agent = Agent()

    assert agent.resources[ResourceType.TOOL] == {}  # as 0.3.1: every kind present
    with pytest.raises(TypeError, match="add_resource\\('conn'\\): instance is 'pkg.Conn'"):
        agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, "pkg.Conn")
    agent.add_resource("p", ResourceType.PROMPT, Prompt.from_text("x"))
    with pytest.raises(ValueError, match="already defined"):
        agent.add_resource("p", ResourceType.PROMPT, Prompt.from_text("y"))


# ---- from_list reads its list at execute() ------------------------------------------------


def _echo(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.input))


def test_records_appended_after_from_list_are_processed() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    records: List[Dict[str, Any]] = [{"key": "a", "value": 1}]
    out = env.from_list(records).apply(Agent().add_action("echo", [InputEvent], _echo)).to_list()
    records.append({"key": "b", "value": 2})  # as 0.3.1 examples do
    records.append({"value": 3})

    env.execute()

    assert out == [{"a": 1}, {"b": 2}, {"_auto_key_2": 3}]


def test_a_bad_record_appended_after_from_list_fails_at_execute_naming_it() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    records: List[Any] = [{"key": "a", "value": 1}]
    env.from_list(records).apply(Agent().add_action("echo", [InputEvent], _echo))
    records.append({"key": "b"})

    with pytest.raises(ValueError, match="record #1 has no 'value'"):
        env.execute()


# ---- prompts: SafeFormatter, format_string, LocalPrompt ----------------------------------------


def test_safe_formatter_fills_known_placeholders_and_leaves_the_others() -> None:
    text = 'Rate {product} for {user}. Answer as {"score": 1} or {unknown.field}.'

    assert SafeFormatter({"product": "tea", "user": 7}).format(text) == (
        'Rate tea for 7. Answer as {"score": 1} or {unknown.field}.'
    )
    assert format_string("{a}-{b}-{a}", a="x") == "x-{b}-x"
    assert SafeFormatter().format("{kept}") == "{kept}"


def test_prompt_from_text_and_messages_build_local_prompts_that_fill_their_slots() -> None:
    text = Prompt.from_text("Hi {name}, {missing}")
    messages = Prompt.from_messages([
        ChatMessage(role=MessageRole.SYSTEM, content="You rate {what}.", extra_args={"cache": True}),
        ChatMessage(role=MessageRole.USER, content="{review}"),
    ])

    assert isinstance(text, LocalPrompt) and isinstance(messages, LocalPrompt)
    assert text.format_string(name="Ada") == "Hi Ada, {missing}"
    assert text.format_messages(MessageRole.USER, name="Bo") == [ChatMessage(role=MessageRole.USER, content="Hi Bo, {missing}")]
    assert messages.format_string(what="tea", review="good") == "system: You rate tea.{'cache': True}\nuser: good"
    assert [m.content for m in messages.format_messages(what="tea", review="ok")] == ["You rate tea.", "ok"]


def test_a_custom_prompt_subclass_is_a_resource_actions_can_use() -> None:
    class Shouting(Prompt):
        word: str

        def format_string(self, **kwargs: Any) -> str:
            return f"{self.word.upper()} {kwargs.get('name', '')}!"

        def format_messages(self, role: MessageRole = MessageRole.SYSTEM, **kwargs: Any) -> List[ChatMessage]:
            return [ChatMessage(role=role, content=self.format_string(**kwargs))]

    with pytest.raises(TypeError):
        Prompt()  # abstract, as in 0.3.1
    agent = Agent().add_action("greet", [InputEvent], _greet)
    agent.add_resource("greeting", ResourceType.PROMPT, Shouting(word="hey"))

    assert _run(agent, [{"key": "k", "value": "Cy"}]) == [{"k": "HEY Cy!"}]


# ---- find_first_system_message, validate_memory_value ---------------------------------------


def test_find_first_system_message_gives_the_index_or_minus_one() -> None:
    user, system = ChatMessage(role=MessageRole.USER, content="u"), ChatMessage(role=MessageRole.SYSTEM, content="s")

    assert find_first_system_message([user, system, system]) == 1
    assert find_first_system_message([user, user]) == -1
    assert find_first_system_message([]) == -1
    with pytest.raises(TypeError, match="messages\\[1\\] is a dict"):
        find_first_system_message([user, {"role": "system"}])


def test_validate_memory_value_accepts_portable_values_and_names_the_bad_part() -> None:
    validate_memory_value("order", {"items": [1, 2.5, "x", None, True, {"n": []}]})

    with pytest.raises(TypeError, match=r"memory path 'order'\['items'\]\[1\] has type tuple"):
        validate_memory_value("order", {"items": [1, (2, 3)]})
    with pytest.raises(TypeError, match=r"memory path 'ids' has type UUID"):
        validate_memory_value("ids", uuid.uuid4())
    with pytest.raises(TypeError, match=r"memory path 'm' has the key 1 of type int"):
        validate_memory_value("m", {1: "one"})


def test_validate_memory_value_refuses_a_memory_object_pointing_to_new_object() -> None:
    def action(event: InputEvent, ctx: Any) -> None:
        try:
            validate_memory_value("copy", ctx.short_term_memory)
        except TypeError as error:
            ctx.send_event(OutputEvent(output=str(error)))

    [output] = _run(Agent().add_action("a", [InputEvent], action), [{"key": "k", "value": 0}])

    assert "memory path 'copy' is a MemoryObject" in output["k"] and "new_object" in output["k"]


# ---- AsyncExecutionResult ---------------------------------------------------------------------

CALLS: Counter = Counter()
CRASH: Dict[str, bool] = {}


class Crash(BaseException):
    """A simulated process crash."""


def slow_lookup(order: str) -> str:
    CALLS["lookup"] += 1
    return f"{order}:{uuid.uuid4().hex[:8]}"  # differs per call: a replay must not call again


def store_result(result: str) -> None:
    """The next call: the lookup's result is durable before it starts."""
    if CRASH.pop("in_store", False):
        raise Crash()


async def lookup_action(event: InputEvent, ctx: Any) -> None:
    pending = ctx.durable_execute_async(slow_lookup, event.input)
    ctx.sensory_memory.set("calls_before_await", CALLS["lookup"])
    result = await pending  # how 0.3.1 code awaits it
    await ctx.durable_execute_async(store_result, result)
    ctx.send_event(OutputEvent(output={
        "result": result,
        "is_async_execution_result": isinstance(pending, AsyncExecutionResult),
        "calls_before_await": ctx.sensory_memory.get("calls_before_await"),
    }))


def _process_once(store: InMemoryJournalStore) -> LocalDriver:
    agent = Agent().add_action("lookup", [InputEvent], lookup_action)
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "k", "order-7")
    finally:
        engine.close()
    return driver


def test_durable_execute_async_returns_an_async_execution_result_that_runs_when_awaited() -> None:
    CALLS.clear()

    [output] = _process_once(InMemoryJournalStore()).outputs

    assert output["k"]["is_async_execution_result"] is True
    assert output["k"]["calls_before_await"] == 0  # lazy, as in 0.3.1
    assert output["k"]["result"].startswith("order-7:")
    assert CALLS["lookup"] == 1


def test_a_replay_returns_the_journaled_result_of_an_awaited_async_execution_result() -> None:
    CALLS.clear()
    store = InMemoryJournalStore()
    CRASH["in_store"] = True
    with pytest.raises(Crash):
        _process_once(store)
    assert CALLS["lookup"] == 1
    journaled = [e.payload for run in store._runs.values() for (e, _) in run.values() if "order-7:" in e.payload]

    [output] = _process_once(store).outputs

    assert CALLS["lookup"] == 1  # not called again
    assert len(journaled) == 1 and output["k"]["result"] in journaled[0]


def test_an_async_execution_result_built_the_031_way_submits_to_its_executor_on_await() -> None:
    submitted: List[str] = []

    class RecordingExecutor(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(fn.__name__)
            return super().submit(fn, *args, **kwargs)

    def add(a: int, b: int = 0) -> int:
        return a + b

    async def main() -> List[Any]:
        with RecordingExecutor(max_workers=1) as pool:
            result = AsyncExecutionResult(pool, add, (2,), {"b": 3})
            before = list(submitted)
            value = await result
            with pytest.raises(RuntimeError):
                await result  # awaited once, like a coroutine
            gathered = await asyncio.gather(AsyncExecutionResult(pool, add, (1,), {}), AsyncExecutionResult(None, add, (4,), {"b": 1}))
            task = await asyncio.create_task(AsyncExecutionResult(pool, add, (10,), {}))
            return [before, value, gathered, task]

    assert asyncio.run(main()) == [[], 5, [1, 5], 10]
    assert submitted == ["add", "add", "add"]  # the executor-less one ran on asyncio's pool


def test_a_reconciler_is_kept_from_the_function_and_not_asked_without_a_failover() -> None:
    """0.3.1: ``reconciler=`` is reserved, never passed to the function, and
    asked only on recovery (tests/engine/test_durable_reconciler.py)."""
    asked = []
    before = CALLS["lookup"]

    async def action(event: InputEvent, ctx: Any) -> None:
        found = await ctx.durable_execute_async(slow_lookup, "o", reconciler=lambda: asked.append(1))
        ctx.send_event(OutputEvent(output=found))

    out = _run(Agent().add_action("a", [InputEvent], action), [{"key": "k", "value": 0}])

    assert [value.split(":")[0] for record in out for value in record.values()] == ["o"]
    assert CALLS["lookup"] - before == 1 and asked == []


def test_a_descriptor_argument_the_class_does_not_take_is_refused_naming_it() -> None:
    """pydantic drops unknown constructor arguments; a misspelled setting, or
    one provider's timeout name given to another, must not vanish."""
    from flink_agents.api.resource import ResourceName
    from flink_agents.runtime.execution.resources import ResourceCache

    agent = Agent()
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, api_base_url="http://127.0.0.1:9/v1", timeout=5.0,
    ))
    agent.add_resource("typo", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="m", temprature=0.0,
    ))
    agent.add_resource("ollama", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OLLAMA_CONNECTION, timeout_s=5.0,
    ))
    cache = ResourceCache(AgentPlan.from_agent(agent))
    try:
        # 0.3.1's spellings (consumed by the class's validator) are accepted.
        connection = cache.get("openai", ResourceType.CHAT_MODEL_CONNECTION)
        assert (connection.base_url, connection.timeout_s) == ("http://127.0.0.1:9/v1", 5.0)
        with pytest.raises(TypeError, match=r"chat_model resource 'typo' \(OpenAIChatModelSetup\) got argument\(s\) "
                                            r"it does not take: temprature; it takes: .*temperature"):
            cache.get("typo", ResourceType.CHAT_MODEL)
        with pytest.raises(TypeError, match=r"'ollama' \(OllamaChatModelConnection\) .* timeout_s; it takes: .*request_timeout"):
            cache.get("ollama", ResourceType.CHAT_MODEL_CONNECTION)
    finally:
        cache.close()

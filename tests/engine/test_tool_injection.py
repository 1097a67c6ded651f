"""``@tool(injected_args=...)`` (Flink Agents HEAD): parameters the model
never sees, filled at call time from the config or memory, winning over
whatever the model sends under the same name; replayed from the journal."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import pytest
from pydantic import ValidationError

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.decorators import action, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.tools.tool import Tool
from flink_agents.api.tools.tool_parameter_injection import InjectedArg
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatSetup
from tests.support.engine_runs import run_record

SCHEMAS: List[Dict[str, Any]] = []  # the tool schemas the model was offered
CALLS: List[Dict[str, Any]] = []  # what the tool received
CRASH: set = set()


class Crash(BaseException):
    """The process dying mid-record (the journal stays for the restore)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    SCHEMAS.clear()
    CALLS.clear()
    CRASH.clear()


@tool(injected_args={
    "tenant": InjectedArg.from_config("shop.tenant"),
    "user_id": InjectedArg.from_short_term_memory("session.user"),
    "channel": {"source": "SENSORY_MEMORY"},  # key defaults to the parameter's name
})
def lookup_order(order_id: str, tenant: str, user_id: str, channel: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    CALLS.append({"order_id": order_id, "tenant": tenant, "user_id": user_id, "channel": channel})
    return f"{tenant}/{user_id}/{channel}/{order_id}"


class SpoofingModel(BaseChatModelConnection):
    """Round 0: calls the tool, trying to set the tenant itself. Then: echoes the result."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        SCHEMAS.extend(t.metadata.args_schema for t in tools or [])
        results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[{
                "id": "call_0", "type": "function",
                "function": {"name": "lookup_order", "arguments": {"order_id": "A-1", "tenant": "evil"}},
            }])
        return ChatMessage(role=MessageRole.ASSISTANT, content=results[0])


class Shop(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=SpoofingModel))
        self.add_resource("model", ResourceType.CHAT_MODEL,
                          ResourceDescriptor(clazz=ChatSetup, connection="conn", tools=["lookup_order"]))
        self.add_resource("lookup_order", ResourceType.TOOL, lookup_order)

    @action(InputEvent)
    @staticmethod
    def ask(event: Event, ctx: RunnerContext) -> None:
        if event.input.get("user"):
            ctx.short_term_memory.set("session.user", event.input["user"])
        ctx.sensory_memory.set("channel", "web")
        ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content="go")]))

    @action(ChatResponseEvent)
    @staticmethod
    def answer(event: Event, ctx: RunnerContext) -> None:
        if "answer" in CRASH:
            CRASH.discard("answer")
            raise Crash("process died in answer")
        ctx.send_event(OutputEvent(output=event.response.content))


def _outputs(driver: Any) -> List[Any]:
    return [v for out in driver.outputs for v in out.values()]


def test_injected_parameters_are_hidden_from_the_model_and_filled_from_config_and_memory() -> None:
    driver = run_record(Shop(), InMemoryJournalStore(), {"user": "u-7"}, {"shop.tenant": "acme"})
    assert _outputs(driver) == ["acme/u-7/web/A-1"]
    # The model's "tenant": "evil" lost to the configured value.
    assert CALLS == [{"order_id": "A-1", "tenant": "acme", "user_id": "u-7", "channel": "web"}]
    assert SCHEMAS and all(set(schema["properties"]) == {"order_id"} for schema in SCHEMAS)
    assert SCHEMAS[0]["required"] == ["order_id"]


def test_a_missing_source_fails_the_call_and_the_model_is_told() -> None:
    driver = run_record(Shop(), InMemoryJournalStore(), {}, {"shop.tenant": "acme", "error_strategy": "skip"})
    [answer] = _outputs(driver)
    assert CALLS == []
    assert "ToolInjectionError" in answer and "short_term_memory has no path 'session.user'" in answer


def test_the_plan_keeps_the_bindings_and_rejects_a_name_that_is_no_parameter() -> None:
    plan = AgentPlan.from_agent(Shop())
    spec = plan.resource_spec("lookup_order", ResourceType.TOOL)
    assert spec.value["injected_args"]["tenant"] == {"source": "config", "key": "shop.tenant"}
    assert spec.value["injected_args"]["channel"] == {"source": "sensory_memory", "key": "channel"}
    assert AgentPlan.from_json(plan.to_json()) == plan

    def quote(amount: int) -> int:
        """Quote."""
        return amount

    with pytest.raises(ValueError, match="tenant"):
        FunctionTool.from_callable(quote, injected_args={"tenant": {"source": "config"}})
    with pytest.raises(ValueError, match="not parameters"):
        tool(injected_args={"nope": InjectedArg.from_config("x")})(quote)
    with pytest.raises(ValidationError, match="source"):
        tool(injected_args={"amount": {"source": "nowhere"}})(quote)


def test_a_restore_replays_the_call_with_its_injected_values_without_running_the_tool() -> None:
    store = InMemoryJournalStore()
    config = {"shop.tenant": "acme"}
    CRASH.add("answer")
    with pytest.raises(Crash):
        run_record(Shop(), store, {"user": "u-7"}, config)
    assert len(CALLS) == 1
    assert _outputs(run_record(Shop(), store, {"user": "u-7"}, config)) == ["acme/u-7/web/A-1"]
    assert len(CALLS) == 1

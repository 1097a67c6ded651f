"""AgentPlan compiler: what a user's agent compiles into, and what it refuses."""

from __future__ import annotations

import json
from typing import Any, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import (
    action,
    chat_model_connection,
    chat_model_setup,
    prompt,
    tool,
)
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan import AgentPlan, PlanError, ResourceKind
from flink_agents.runtime import builtin_actions


class EchoConnection(BaseChatModelConnection):
    """A connection the compiler only names; it is never called here."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content="ok")


class ReviewEvent(Event):
    text: str


class DecoratedAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def on_input(event: Event, ctx: Any) -> None:
        ctx.send_event(ReviewEvent(text=str(event.input)))

    @action(ReviewEvent, "custom_type", weight=3)
    @staticmethod
    async def on_review(event: Event, ctx: Any) -> None:
        pass

    @action(ChatResponseEvent.EVENT_TYPE)
    @staticmethod
    def on_answer(event: Event, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=event.response.content))

    @tool
    @staticmethod
    def lookup(order_id: str, verbose: bool = False) -> str:
        """Look up an order.

        Args:
            order_id: The order's id.
            verbose: Whether to include the items.
        """
        return order_id

    @prompt
    @staticmethod
    def review_prompt() -> Prompt:
        return Prompt.from_text("Rate this review: {text}")

    @chat_model_connection
    @staticmethod
    def conn() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=EchoConnection)

    @chat_model_setup
    @staticmethod
    def llm() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=BaseChatModelSetup,
            connection="conn",
            model="m1",
            prompt="review_prompt",
            tools=["lookup"],
        )


def _on_input(event: Event, ctx: Any) -> None:
    ctx.send_event(ReviewEvent(text=str(event.input)))


async def _on_review(event: Event, ctx: Any) -> None:
    pass


def _on_answer(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


def _programmatic_agent() -> Agent:
    """The same agent as DecoratedAgent, built with add_action/add_resource."""
    agent = Agent()
    agent.add_action("on_input", [InputEvent.EVENT_TYPE], _on_input)
    agent.add_action("on_review", [ReviewEvent, "custom_type"], _on_review, weight=3)
    agent.add_action("on_answer", [ChatResponseEvent], _on_answer)
    agent.add_resource("lookup", ResourceType.TOOL, DecoratedAgent.lookup)
    agent.add_resource("review_prompt", ResourceType.PROMPT, Prompt.from_text("Rate this review: {text}"))
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=EchoConnection))
    agent.add_resource(
        "llm",
        ResourceType.CHAT_MODEL,
        ResourceDescriptor(
            clazz=BaseChatModelSetup, connection="conn", model="m1", prompt="review_prompt", tools=["lookup"]
        ),
    )
    return agent


def _user_actions(plan: AgentPlan) -> List[str]:
    return [name for name, spec in plan.actions.items() if not spec.builtin]


def _kinds(plan: AgentPlan) -> dict:
    return {t.value: {n: s.kind for n, s in by_name.items()} for t, by_name in plan.resources.items()}


# --- compiling ---------------------------------------------------------------


def test_decorated_agent_compiles_actions_with_event_types_and_config():
    plan = AgentPlan.from_agent(DecoratedAgent())

    assert _user_actions(plan) == ["on_input", "on_review", "on_answer"]
    assert plan.actions["on_input"].listen_event_types == [InputEvent.EVENT_TYPE]
    assert plan.actions["on_review"].listen_event_types == [ReviewEvent.EVENT_TYPE, "custom_type"]
    assert plan.actions["on_review"].config == {"weight": 3}
    assert plan.actions["on_review"].function.is_async
    assert not plan.actions["on_input"].function.is_async
    assert plan.actions["on_input"].function.resolve() is DecoratedAgent.on_input


def test_actions_are_indexed_by_event_type_from_classes_and_strings():
    plan = AgentPlan.from_agent(DecoratedAgent())

    assert [a.name for a in plan.actions_for(InputEvent.EVENT_TYPE)] == ["on_input"]
    assert [a.name for a in plan.actions_for(ReviewEvent.EVENT_TYPE)] == ["on_review"]
    assert [a.name for a in plan.actions_for("custom_type")] == ["on_review"]
    assert [a.name for a in plan.actions_for(ChatResponseEvent.EVENT_TYPE)] == ["on_answer"]
    assert plan.actions_for("nobody_listens") == []


def test_decorated_agent_compiles_resources_by_kind():
    plan = AgentPlan.from_agent(DecoratedAgent())

    assert _kinds(plan) == {
        "tool": {"lookup": ResourceKind.FUNCTION_TOOL},
        "prompt": {"review_prompt": ResourceKind.PROMPT},
        "chat_model_connection": {"conn": ResourceKind.DESCRIPTOR},
        "chat_model": {"llm": ResourceKind.DESCRIPTOR},
    }
    lookup = plan.resource_spec("lookup", ResourceType.TOOL)
    assert lookup.value["name"] == "lookup"
    assert lookup.value["description"] == "Look up an order."
    schema = lookup.value["args_schema"]
    assert schema["required"] == ["order_id"]
    assert schema["properties"]["order_id"] == {"type": "string", "description": "The order's id."}
    assert plan.resource_spec("llm", ResourceType.CHAT_MODEL).descriptor.arguments["tools"] == ["lookup"]
    with pytest.raises(KeyError, match="'missing'"):
        plan.resource_spec("missing", ResourceType.TOOL)


def test_programmatic_agent_compiles_like_the_decorated_one():
    decorated = AgentPlan.from_agent(DecoratedAgent())
    built = AgentPlan.from_agent(_programmatic_agent())

    assert built.actions_by_event == decorated.actions_by_event
    assert {n: a.config for n, a in built.actions.items()} == {n: a.config for n, a in decorated.actions.items()}
    assert _kinds(built) == _kinds(decorated)
    assert built.resource_spec("lookup", ResourceType.TOOL).value == decorated.resource_spec(
        "lookup", ResourceType.TOOL
    ).value
    assert built.actions["on_review"].function.resolve() is _on_review


def test_builtin_chat_and_tool_actions_are_in_every_plan():
    plan = AgentPlan.from_agent(Agent().add_action("noop", [InputEvent], _on_input))

    chat = plan.actions["_chat_model_action"]
    tools = plan.actions["_tool_call_action"]
    assert chat.builtin and tools.builtin
    assert set(chat.listen_event_types) == {ChatRequestEvent.EVENT_TYPE, ToolResponseEvent.EVENT_TYPE}
    assert tools.listen_event_types == [ToolRequestEvent.EVENT_TYPE]
    assert chat.function.resolve() is builtin_actions.chat_model_action
    assert tools.function.resolve() is builtin_actions.tool_call_action


def test_json_round_trip_is_unchanged():
    plan = AgentPlan.from_agent(DecoratedAgent())
    text = plan.to_json()

    again = AgentPlan.from_json(text)

    assert again == plan
    assert again.to_json() == text
    # A plan read back resolves its functions by name.
    assert again.actions["on_review"].function.resolve() is DecoratedAgent.on_review


# --- validation --------------------------------------------------------------


def test_action_with_one_parameter_is_rejected():
    def only_event(event):
        pass

    with pytest.raises(PlanError, match=r"action 'only_event' .* must take \(event, ctx\); it takes \(event\)"):
        AgentPlan.from_agent(Agent().add_action("only_event", [InputEvent], only_event))


def test_action_with_three_parameters_is_rejected():
    def three(event, ctx, extra):
        pass

    with pytest.raises(PlanError, match=r"action 'three' .* it takes \(event, ctx, extra\)"):
        AgentPlan.from_agent(Agent().add_action("three", [InputEvent], three))


def test_instance_method_action_is_rejected_with_a_staticmethod_hint():
    class MethodAgent(Agent):
        @action(InputEvent)
        def on_input(self, event, ctx):
            pass

    with pytest.raises(PlanError, match=r"action 'on_input' of .*MethodAgent.*\(self, event, ctx\).*@staticmethod"):
        AgentPlan.from_agent(MethodAgent())


def test_action_name_used_by_decorator_and_add_action_is_rejected():
    agent = DecoratedAgent().add_action("on_input", [InputEvent], _on_input)

    with pytest.raises(PlanError, match=r"action 'on_input' of DecoratedAgent is defined twice"):
        AgentPlan.from_agent(agent)


def test_add_action_twice_under_one_name_is_rejected():
    agent = Agent().add_action("a", [InputEvent], _on_input)

    with pytest.raises(ValueError, match="action 'a' is already defined"):
        agent.add_action("a", [InputEvent], _on_input)


def test_action_listening_to_a_non_event_is_rejected():
    with pytest.raises(PlanError, match=r"action 'odd' .* listens to <class 'int'>"):
        AgentPlan.from_agent(Agent().add_action("odd", [int], _on_input))


def test_resource_name_used_by_decorator_and_add_resource_is_rejected():
    agent = DecoratedAgent().add_resource("lookup", ResourceType.TOOL, _on_input)

    with pytest.raises(PlanError, match=r"tool resource 'lookup' of DecoratedAgent is defined twice"):
        AgentPlan.from_agent(agent)


def test_add_resource_twice_under_one_name_is_rejected():
    agent = Agent().add_resource("p", ResourceType.PROMPT, Prompt.from_text("x"))

    with pytest.raises(ValueError, match="prompt resource 'p' is already defined"):
        agent.add_resource("p", ResourceType.PROMPT, Prompt.from_text("y"))


@pytest.mark.parametrize(
    "arguments, kind, missing",
    [
        # A missing connection compiles (0.3.1): tests/compat/test_resources_env_compat.py.
        ({"connection": "conn", "prompt": "no_such_prompt"}, "prompt", "no_such_prompt"),
        ({"connection": "conn", "tools": ["lookup", "no_such_tool"]}, "tools", "no_such_tool"),
    ],
)
def test_chat_model_setup_naming_an_unknown_resource_is_rejected(arguments, kind, missing):
    agent = _programmatic_agent()
    agent.add_resource("bad_llm", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=BaseChatModelSetup, **arguments))

    with pytest.raises(PlanError, match=rf"chat model setup 'bad_llm' .* refers to {kind} '{missing}'"):
        AgentPlan.from_agent(agent)


def test_a_misspelt_tool_name_gets_a_did_you_mean_and_how_to_register_one():
    agent = _programmatic_agent()   # registers the tool 'lookup'
    agent.add_resource("bad_llm", ResourceType.CHAT_MODEL,
                       ResourceDescriptor(clazz=BaseChatModelSetup, connection="conn", tools=["lookpu"]))

    with pytest.raises(PlanError) as caught:
        AgentPlan.from_agent(agent)
    message = str(caught.value)
    assert "refers to tools 'lookpu'" in message
    assert "did you mean 'lookup'?" in message
    assert "Tool.from_callable(fn)" in message


def test_unsupported_plan_schema_version_is_rejected():
    data = json.loads(AgentPlan.from_agent(DecoratedAgent()).to_json())
    data["schema_version"] = 99

    with pytest.raises(PlanError, match="plan schema version 99 is not supported"):
        AgentPlan.from_json(json.dumps(data))

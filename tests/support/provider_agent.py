"""The review agent every provider's tests run on the local runner: it asks
the chat model setup ``reviewer`` about each review (as JSON), offering the
recording ``notify_shipping_manager`` tool, and outputs ``{"answer": text}``
(with an output schema: the validated answer's ``model_dump()``). Each test
gives its provider's connection and setup descriptors."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT, Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext
from tests.support.notify_tool import notify_shipping_manager

SETUP = "reviewer"
TOOL = "notify_shipping_manager"


def ask(event: InputEvent, ctx: RunnerContext) -> None:
    messages = [ChatMessage(role=MessageRole.USER, content=json.dumps(event.input))]
    system = ctx.get_action_config_value("system")
    if system:
        messages.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=system))
    schema = ctx.get_action_config_value("output_schema")
    ctx.send_event(ChatRequestEvent(model=SETUP, messages=messages, output_schema=schema))


def answer(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    structured = event.response.extra_args.get(STRUCTURED_OUTPUT)
    if structured is not None:
        ctx.send_event(OutputEvent(output=structured.model_dump()))
    else:
        ctx.send_event(OutputEvent(output={"answer": event.response.content}))


class ReviewAgent(Agent):
    """``ask`` -> the setup ``reviewer`` (with its tool loop) -> ``answer``.

    Args:
        connection_name: The connection's resource name (the setup's ``connection``).
        connection: The connection's descriptor.
        setup: The setup's descriptor; it offers ``notify_shipping_manager``.
        system: A system message to send before each review, if any.
        output_schema: A pydantic model the answer must match, if any.
    """

    def __init__(
        self, connection_name: str, connection: ResourceDescriptor, setup: ResourceDescriptor,
        system: str | None = None, output_schema: Any = None,
    ) -> None:
        super().__init__()
        self.add_resource(connection_name, ResourceType.CHAT_MODEL_CONNECTION, connection)
        self.add_resource(SETUP, ResourceType.CHAT_MODEL, setup)
        self.add_resource(TOOL, ResourceType.TOOL, notify_shipping_manager)
        self.add_action("ask", [InputEvent], ask, system=system, output_schema=output_schema)
        self.add_action("answer", [ChatResponseEvent], answer)


def run_local(agent: Agent, records: List[Dict[str, Any]], config: Dict[str, Any] | None = None) -> List[Dict[Any, Any]]:
    """Run ``records`` (``{"key", "value"}``) through ``agent`` on the local runner; the outputs."""
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config or {})
    out = env.from_list(records).apply(agent).to_list()
    env.execute()
    return out

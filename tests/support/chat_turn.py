"""A one-turn chat agent for engine tests: the input record becomes the user
message of a ``ChatRequestEvent`` to the chat model setup ``"model"``, and the
model's final answer becomes the output."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Union

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType


class ChatSetup(BaseChatModelSetup):
    pass


def ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content=event.input)]))


def answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


class ChatTurnAgent(Agent):
    """``ask`` -> the model (with its tool loop) -> ``answer``.

    Args:
        connection: The ``BaseChatModelConnection`` class the setup uses.
        tools: Tool functions by name (registered as TOOL resources), or
            names of built-in tools (offered without a resource).
    """

    def __init__(self, connection: type, tools: Union[Dict[str, Callable[..., Any]], Iterable[str]] = ()) -> None:
        super().__init__()
        functions = dict(tools) if isinstance(tools, dict) else {}
        names = list(functions) if functions else list(tools)
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=connection))
        self.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=ChatSetup, connection="conn", tools=names))
        for name, function in functions.items():
            self.add_resource(name, ResourceType.TOOL, function)
        self.add_action("ask", [InputEvent], ask)
        self.add_action("answer", [ChatResponseEvent], answer)

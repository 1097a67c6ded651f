"""Agents written the way Flink Agents 0.3.1's documentation, examples and
tests write them: unified events (``Event(type=..., attributes=...)``),
custom event classes that keep their data in ``attributes``, actions that
take a base ``Event`` and call ``X.from_event(event)``, ``MemoryRef``s sent
between actions, a chat model setup that overrides ``chat`` and reaches its
connection, prompt and tools through ``resource_context``, and a tool call
whose id is a ``uuid.UUID``.

Importable by name (not a test module), so the mini-cluster's workers load
the same classes. Only 0.3.1 import paths are used here.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, Dict, List, Sequence

from pydantic import BaseModel

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup, prompt, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.memory_reference import MemoryRef
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.tool import ToolType

# --- the workflow agent: MemoryRef between two actions --------------------


class VisitData(BaseModel):
    content: str
    visit_count: int


class VisitEvent(Event):
    """A custom event as 0.3.1 writes one: data in ``attributes``."""

    EVENT_TYPE: ClassVar[str] = "_visit_event"

    def __init__(self, value: Any) -> None:
        super().__init__(type=VisitEvent.EVENT_TYPE, attributes={"value": value})

    @classmethod
    def from_event(cls, event: Event) -> "VisitEvent":
        assert "value" in event.attributes, "no 'value' in the event's attributes"
        return cls(value=event.attributes["value"])

    @property
    def value(self) -> Any:
        return self.attributes["value"]


class WorkflowAgent(Agent):
    """Counts visits per key in short-term memory; the second action gets the
    stored object by the ``MemoryRef`` the first one sent."""

    @action(InputEvent.EVENT_TYPE)
    @staticmethod
    def first_action(event: Event, ctx: RunnerContext) -> None:
        message = InputEvent.from_event(event).input
        memory = ctx.short_term_memory
        path = f"user_data.{ctx.key}"
        stored = memory.get(path)
        previous = VisitData.model_validate(stored) if stored else None
        count = (previous.visit_count if previous else 0) + 1
        ref = memory.set(path, VisitData(content=message, visit_count=count).model_dump(mode="json"))
        ctx.send_event(VisitEvent(value=ref))
        ctx.send_event(OutputEvent(output={f"(visit {count} times)": f"{message} -> processed_by_first_action"}))

    @action(VisitEvent.EVENT_TYPE)
    @staticmethod
    def second_action(event: Event, ctx: RunnerContext) -> None:
        ref: MemoryRef = VisitEvent.from_event(event).value
        memory = ctx.short_term_memory
        data = VisitData.model_validate(memory.get(ref))
        count = data.visit_count + 1
        memory.set(ref.path, VisitData(content=data.content, visit_count=count).model_dump(mode="json"))
        ctx.send_event(OutputEvent(output={f"(visit {count} times)": f"{data.content} -> processed by second_action"}))


def workflow_expected(records: List[Dict[str, Any]]) -> Dict[Any, List[Any]]:
    """Per key, the outputs in order: every record visits twice."""
    visits: Dict[Any, int] = {}
    expected: Dict[Any, List[Any]] = {}
    for record in records:
        key, message = record["key"], record["value"]
        first = visits.get(key, 0) + 1
        visits[key] = first + 1
        expected.setdefault(key, []).extend([
            {f"(visit {first} times)": f"{message} -> processed_by_first_action"},
            {f"(visit {first + 1} times)": f"{message} -> processed by second_action"},
        ])
    return expected


# --- built-in actions: a setup that overrides chat, a tool, a UUID call id --


class ScriptedSumConnection(BaseChatModelConnection):
    """Asks for the ``add`` tool when the last message mentions a sum, else
    echoes every message it was given (so the test sees the tool result)."""

    def chat(self, messages: Sequence[ChatMessage], tools: List | None = None, **kwargs: Any) -> ChatMessage:
        if "sum" in messages[-1].content:
            assert tools is not None and tools[0].name == "add", tools
            call = {
                "id": uuid.uuid4(),
                "type": ToolType.FUNCTION,
                "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
            }
            return ChatMessage(role=MessageRole.ASSISTANT, content=messages[-1].content, tool_calls=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content="\n".join(m.content for m in messages))


class PromptingSetup(BaseChatModelSetup):
    """Formats its prompt with the request's ``prompt_args`` and binds its
    tools itself, through ``resource_context``, as 0.3.1 setups do."""

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        return {}

    def chat(self, messages: Sequence[ChatMessage], prompt_args: Dict[str, Any] | None = None, **kwargs: Any) -> ChatMessage:
        connection = self.resource_context.get_resource(self.connection, ResourceType.CHAT_MODEL_CONNECTION)
        if self.prompt is not None and "sum" in messages[-1].content:
            template = self.prompt
            if isinstance(template, str):
                template = self.resource_context.get_resource(template, ResourceType.PROMPT)
            messages = template.format_messages(**{k: str(v) for k, v in (prompt_args or {}).items()})
        tools = None
        if self.tools is not None:
            tools = [self.resource_context.get_resource(name, ResourceType.TOOL) for name in self.tools]
        return connection.chat(messages, tools=tools, **kwargs)


class SumAgent(Agent):
    @prompt
    @staticmethod
    def task_prompt() -> Prompt:
        return Prompt.from_text(text="Please call the appropriate tool to do the following task: {task}")

    @chat_model_connection
    @staticmethod
    def scripted_connection() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=f"{ScriptedSumConnection.__module__}.{ScriptedSumConnection.__name__}")

    @chat_model_setup
    @staticmethod
    def sum_model() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=f"{PromptingSetup.__module__}.{PromptingSetup.__name__}",
            connection="scripted_connection",
            model="scripted",
            prompt="task_prompt",
            tools=["add"],
        )

    @tool
    @staticmethod
    def add(a: int, b: int) -> int:
        """Calculate the sum of a and b.

        Parameters
        ----------
        a : int
            The first operand
        b : int
            The second operand

        Returns:
        -------
        int:
            The sum of a and b
        """
        return a + b

    @action(InputEvent.EVENT_TYPE)
    @staticmethod
    def ask(event: Event, ctx: RunnerContext) -> None:
        text = InputEvent.from_event(event).input
        ctx.send_event(ChatRequestEvent(
            model="sum_model",
            messages=[ChatMessage(role=MessageRole.USER, content=text)],
            prompt_args={"task": text},
        ))

    @action(ChatResponseEvent.EVENT_TYPE)
    @staticmethod
    def answer(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output=ChatResponseEvent.from_event(event).response.content))


def sum_expected(text: str) -> str:
    return f"{text}\nPlease call the appropriate tool to do the following task: {text}\n3"


# --- unified events: no subclass, routed by their type string ---------------

ASPECT_EVENT = "aspect_request"


class UnifiedEventAgent(Agent):
    """Fans one input out to a unified event per aspect; a second action
    reads the attributes back with ``get_attr``."""

    @action(InputEvent.EVENT_TYPE)
    @staticmethod
    def fan_out(event: Event, ctx: RunnerContext) -> None:
        payload = InputEvent.from_event(event).input
        for aspect in ("taste", "price"):
            ctx.send_event(Event(type=ASPECT_EVENT, attributes={"id": payload["id"], "text": payload["text"], "aspect": aspect}))

    @action(ASPECT_EVENT)
    @staticmethod
    def judge(event: Event, ctx: RunnerContext) -> None:
        assert event.get_type() == ASPECT_EVENT
        aspect = event.get_attr("aspect")
        verdict = "mentioned" if aspect in event.get_attr("text") else "absent"
        ctx.send_event(OutputEvent(output={"id": event.get_attr("id"), "aspect": aspect, "verdict": verdict}))

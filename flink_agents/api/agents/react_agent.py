"""``ReActAgent``: the built-in reason-and-act agent of Flink Agents 0.3.1
(``flink_agents.api.agents.react_agent``, same constructor and resource names).

One input record runs as::

    InputEvent -> start_action -> ChatRequestEvent(_default_chat_model, messages, output_schema)
               -> built-in chat action: model call, tool rounds (ToolRequestEvent /
                  ToolResponseEvent), final answer validated against the schema
               -> ChatResponseEvent -> stop_action -> OutputEvent

The reasoning and tool loop is the runtime's built-in chat action, so every
model call and tool call is journaled: after a failover the loop resumes
without asking the model, or running a tool, again. The model calls the tools
its chat model descriptor lists (``tools=[...]``), via its function-calling
API, not by parsing "Thought/Action" text (as 0.3.1 does).

Step bound: ``max_iterations`` tool rounds per record. A request for one more
round fails the record with ``ReActStepLimitReached`` before its tools run.
The built-in chat action's job-wide bound ``chat.max_tool_rounds``
(``RuntimeOptions.CHAT_MAX_TOOL_ROUNDS``, default 16) also applies; it
stops the loop first when it is lower.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping

from pydantic import BaseModel

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT, Agent
from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole, find_first_system_message
from flink_agents.api.decorators import action
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext

if TYPE_CHECKING:
    from pyflink.common.typeinfo import RowTypeInfo

__all__ = ["DEFAULT_MAX_ITERATIONS", "ReActAgent", "ReActInputError", "ReActStepLimitReached"]

# Resource names of 0.3.1: user code and YAML may refer to them.
_DEFAULT_CHAT_MODEL = "_default_chat_model"
_DEFAULT_SCHEMA_PROMPT = "_default_schema_prompt"
_DEFAULT_USER_PROMPT = "_default_user_prompt"

# 0.3.1 has no bound of its own (only the chat action's); 10 rounds is
# plenty for a tool-using task and stops a model that loops early.
DEFAULT_MAX_ITERATIONS = 10
_STEP_LIMIT_ACTION = "_react_step_limit_action"
_ROUNDS_MEMORY = "_flink_agents.react.tool_rounds"  # sensory memory: per record
_PRIMITIVES = (bool, str, int, float, type(None))
_SHOWN_ARGUMENTS = 200


class ReActInputError(RuntimeError):
    """An input the agent cannot turn into chat messages (a ``RuntimeError``,
    as 0.3.1 raises).

    Attributes:
        input_type: The input's type name.
    """

    retryable = False  # the same input, the same model: terminal (runtime.errors.classify)

    def __init__(self, input_type: str, message: str) -> None:
        super().__init__(message)
        self.input_type = input_type


class ReActStepLimitReached(RuntimeError):
    """The model asked for more tool rounds than the agent allows.

    Attributes:
        agent: The agent's class name.
        limit: Its ``max_iterations``.
        tool_calls: The calls of the refused round (``{"id", "function":
            {"name", "arguments"}}``), which did not run.
    """

    retryable = False  # the same input, the same model: terminal (runtime.errors.classify)

    def __init__(self, agent: str, limit: int, tool_calls: List[Dict[str, Any]]) -> None:
        shown = ", ".join(_describe_call(call) for call in tool_calls) or "no calls"
        super().__init__(
            f"{agent} reached its limit of {limit} tool rounds (max_iterations={limit}) without a final "
            f"answer; the model then asked for: {shown}"
        )
        self.agent = agent
        self.limit = limit
        self.tool_calls = list(tool_calls)


def _describe_call(call: Mapping[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str, sort_keys=True)
    if len(text) > _SHOWN_ARGUMENTS:
        text = text[:_SHOWN_ARGUMENTS] + "..."
    return f"{function.get('name')}({text})"


class ReActAgent(Agent):
    """Answers each input with a chat model that may call tools, optionally
    as a structured value (Flink Agents 0.3.1's ``ReActAgent``).

    Example (0.3.1's)::

        agent = ReActAgent(
            chat_model=ResourceDescriptor(
                clazz=ResourceName.ChatModel.OLLAMA_SETUP,
                connection="ollama_server",
                model="qwen3:8b",
                tools=["add", "multiply"],
            ),
            prompt=Prompt.from_messages([
                ChatMessage(role=MessageRole.SYSTEM, content='An example of output is {"result": 30}.'),
                ChatMessage(role=MessageRole.USER, content="What is ({a} + {b}) * {c}"),
            ]),
            output_schema=OutputData,  # a pydantic model class, or a RowTypeInfo
        )

    Input to messages (``start_action``):

    - a primitive (``str``, ``int``, ``float``, ``bool``, ``None``): its text
      is the user message; with a prompt, the prompt filled with ``{input}``;
    - a ``dict``, a ``pyflink.common.Row``, a pydantic model or another object
      with attributes: the prompt filled with its fields (``{field}``; values
      as ``str``; a placeholder naming no field stays as written). Without a
      prompt this is a ``ReActInputError``.

    With an output schema, an instruction to answer as JSON of that schema is
    inserted as a system message right after the first system message (first
    when there is none), and the chat request carries the schema: the chat
    action asks the provider for it natively where it can, validates the
    answer and asks again on a mismatch. The output is then the validated
    value (a model instance, a ``Row``); without a schema, the answer's text.

    Args:
        chat_model: Descriptor of the chat model setup; its ``tools`` are the
            tools the model may call (registered on the environment or agent).
        prompt: Instructions and the template of the user message.
        output_schema: A pydantic model class or a ``RowTypeInfo`` of basic
            types (or a JSON schema ``dict``).
        max_iterations: Tool rounds allowed per input (>= 1); one more fails
            the record with ``ReActStepLimitReached`` naming the calls asked for.

    Raises:
        TypeError: ``output_schema`` is none of the kinds above.
        ValueError: ``max_iterations`` is not an int >= 1.
    """

    def __init__(
        self,
        *,
        chat_model: ResourceDescriptor,
        prompt: Prompt | None = None,
        output_schema: type[BaseModel] | RowTypeInfo | Dict[str, Any] | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        super().__init__()
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"ReActAgent max_iterations must be an int >= 1, got {max_iterations!r}")
        self.add_resource(_DEFAULT_CHAT_MODEL, ResourceType.CHAT_MODEL, chat_model)

        schema = output_schema if isinstance(output_schema, OutputSchema) else None
        if output_schema is not None and schema is None:
            try:
                schema = OutputSchema(output_schema=output_schema)
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"ReActAgent output_schema {output_schema!r:.80} is not supported: expected a pydantic "
                    "model class or a RowTypeInfo (or a JSON schema dict)"
                ) from exc
        if schema is not None:
            instruction = (
                "The final response should be json format, and match the schema "
                f"{json.dumps(schema.json_schema(), sort_keys=True)}."
            )
            self.add_resource(_DEFAULT_SCHEMA_PROMPT, ResourceType.PROMPT, Prompt.from_text(instruction))
        if prompt is not None:
            self.add_resource(_DEFAULT_USER_PROMPT, ResourceType.PROMPT, prompt)

        self.add_action(
            name="start_action",
            events=[InputEvent.EVENT_TYPE],
            func=self.start_action,
            output_schema=schema,
        )
        self.add_action(
            name=_STEP_LIMIT_ACTION,
            events=[ToolRequestEvent.EVENT_TYPE],
            func=self._check_step_limit,
            max_iterations=max_iterations,
            agent=type(self).__name__,
        )

    @staticmethod
    def start_action(event: Event, ctx: RunnerContext) -> None:
        """Turn the input into chat messages and send a ``ChatRequestEvent``
        to the agent's chat model (with the output schema, if any).

        Raises:
            ReActInputError: The input is not a primitive and there is no
                prompt, or it has no named fields (a list, a set).
        """
        user_input = InputEvent.from_event(event).input
        prompt = _optional_prompt(ctx, _DEFAULT_USER_PROMPT)
        messages = _input_messages(user_input, prompt)

        schema_prompt = _optional_prompt(ctx, _DEFAULT_SCHEMA_PROMPT)
        if schema_prompt is not None:
            after = find_first_system_message(messages) + 1  # 0 without a system message
            messages = messages[:after] + schema_prompt.format_messages() + messages[after:]

        # An OutputSchema, or its serialized form in a plan read back from
        # JSON: ChatRequestEvent takes either.
        schema = ctx.get_action_config_value("output_schema")
        ctx.send_event(ChatRequestEvent(model=_DEFAULT_CHAT_MODEL, messages=messages, output_schema=schema))

    @action(ChatResponseEvent.EVENT_TYPE)
    @staticmethod
    def stop_action(event: Event, ctx: RunnerContext) -> None:
        """Output the final answer: the validated structured value when the
        request had an output schema, else the answer's text."""
        response = ChatResponseEvent.from_event(event).response
        extra = response.extra_args or {}
        output = extra[STRUCTURED_OUTPUT] if STRUCTURED_OUTPUT in extra else response.content
        ctx.send_event(OutputEvent(output=output))

    @staticmethod
    def _check_step_limit(event: Event, ctx: RunnerContext) -> None:
        """Count the agent's tool rounds of this record; refuse the one past
        ``max_iterations``. Runs before the built-in tool action on the same
        ``ToolRequestEvent`` (plan order), so the refused calls never run.

        Raises:
            ReActStepLimitReached: The model asked for one round too many.
        """
        request = ToolRequestEvent.from_event(event)
        if request.model != _DEFAULT_CHAT_MODEL:
            return  # a tool request another action sent
        limit = ctx.get_action_config_value("max_iterations", DEFAULT_MAX_ITERATIONS)
        rounds = (ctx.sensory_memory.get(_ROUNDS_MEMORY) or 0) + 1
        if rounds > limit:
            raise ReActStepLimitReached(ctx.get_action_config_value("agent", "ReActAgent"), limit, request.tool_calls)
        ctx.sensory_memory.set(_ROUNDS_MEMORY, rounds)


def _optional_prompt(ctx: RunnerContext, name: str) -> Prompt | None:
    try:
        return ctx.get_resource(name, ResourceType.PROMPT)  # type: ignore[return-value]
    except KeyError:
        return None


def _input_messages(user_input: Any, prompt: Prompt | None) -> List[ChatMessage]:
    if isinstance(user_input, _PRIMITIVES):
        text = str(user_input)
        if prompt is None:
            return [ChatMessage(role=MessageRole.USER, content=text)]
        return prompt.format_messages(role=MessageRole.USER, input=text)
    type_name = type(user_input).__name__
    if prompt is None:
        raise ReActInputError(
            type_name,
            f"ReActAgent got an input of type {type_name}, which is not a primitive (str, int, float, bool, "
            "None): give the agent a prompt whose messages name the input's fields as {field} placeholders",
        )
    fields = _fields_of(user_input)
    if fields is None:
        raise ReActInputError(
            type_name,
            f"ReActAgent got an input of type {type_name}, which has no named fields to fill the prompt with: "
            "send a primitive, a dict, a Row, a pydantic model or an object with attributes",
        )
    return prompt.fill_messages(
        {str(name): str(value) for name, value in fields.items()}, role=MessageRole.USER
    )


def _fields_of(value: Any) -> Dict[str, Any] | None:
    """The named fields of a structured input, or None if it has none."""
    if isinstance(value, Mapping):
        return dict(value)
    from pyflink.common import Row  # imported here: only structured inputs need it

    if isinstance(value, Row):
        return value.as_dict(recursive=True)
    if isinstance(value, BaseModel):
        return {name: getattr(value, name) for name in type(value).model_fields}
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and not isinstance(value, type):
        return {k: v for k, v in attributes.items() if not k.startswith("_")}
    return None

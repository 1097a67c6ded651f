"""Built-in actions: the chat model call with its tool-call loop, and tool calls.

Flow of one request (each arrow is an event through the action loop)::

    ChatRequestEvent -> chat_model_action -> (model asks for tools) ToolRequestEvent
    ToolRequestEvent -> tool_call_action  -> ToolResponseEvent
    ToolResponseEvent -> chat_model_action -> ... -> ChatResponseEvent

The conversation of a request in its tool-call loop lives in sensory memory
under ``_flink_agents.chat.<tool request id>``, so it is per run and
checkpoint-stable. Tool calls get the runtime's own ids
(``<request>-<round>-<index>``) and the history sent to the provider uses
them; the provider's id is kept as ``original_id``. Providers reuse ids across
turns, so theirs cannot key results.

Only offered tools run: the tool request carries the names of the tools its
setup offered (``ToolRequestEvent.offered_tools``), and a call to any other
name (a tool registered for another setup, a built-in callback tool the
setup does not list, a name nothing registers) is answered with a
``ToolNotOffered`` error result that lists the offered tools only.

Per-key conversations (``BaseChatModelSetup.conversation="per_key"``,
``runtime.features.conversation``): a request starts with the key's stored history
before its messages, and the turn is stored (compacted) in short-term memory
by the step that sends the ``ChatResponseEvent``. Request ids differ per
record, so the runtime's call ids never repeat across turns.

Structured output (``ChatRequestEvent.output_schema``, else the setup's
``output_schema``): the schema goes to the model with the request (natively
when the connection's class sets ``supports_output_schema``, else as a
system instruction; ``BaseChatModelSetup.chat``). A final answer (no tool
calls) is validated with ``OutputSchema.parse``; one that does not match is
answered with a user message naming the field and the problem, and the model
is asked again, up to ``chat.output_schema.max_retries`` times per request,
each a journaled model call (so a replay repeats none of them). Then the
request fails with ``StructuredOutputError`` (terminal). The validated value
is in the response's ``extra_args[STRUCTURED_OUTPUT]``, as in Flink Agents
0.3.1.

Tool results reach the model as JSON text (``runtime.features.tool_results``:
ISO times, UUIDs and decimals as text, dataclasses and models as objects,
sets as sorted lists; a str as itself), derived from the journaled, typed
value; a tool that defines ``result_for_model`` (MCP tools: untrusted data)
renders its own. A malformed call (arguments not JSON, not fitting the
tool, a tool not offered) is answered with an error result, and the model
may correct it; when the rounds reach ``chat.max_tool_rounds`` the request
fails with ``ToolRoundLimitReached``, naming the limit and the last tool
error.

Asynchronous operations (``runtime.features.callback_tools``): when the model answers
without asking for tools while operations it started with the built-in
``create_callback`` tool are still open, the action waits for them and sends
their outcomes back as one user message, outside text wrapped as untrusted
data, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
from typing import Any, Awaitable, Callable, Dict, List

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT
from flink_agents.api.agents.types import OutputSchema, OutputValidationError
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelSetup, output_schema_instruction, with_system_message
from flink_agents.api.chat_models.errors import StructuredOutputError
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.callbacks import CREATE_CALLBACK_TOOL
from flink_agents.api.tools.tool import Tool
from flink_agents.runtime.features.approvals import ApprovalTimedOut, await_approval, needs_approval
from flink_agents.runtime.features.callback_tools import BuiltinCallbackTool, outcome_message
from flink_agents.runtime.features.conversation import TURN_START, begin_turn, end_turn
from flink_agents.runtime.features.untrusted import untrusted_tool_result
from flink_agents.runtime.features.structured_output import native_schema, overrides_chat, reask_message, without_reasks
from flink_agents.runtime.durability.call_threads import run_in_thread
from flink_agents.runtime.durability.codec import EncodeError, encode
from flink_agents.runtime.durability.ids import tool_call_id
from flink_agents.runtime.execution.token_usage import count_tokens
from flink_agents.runtime.features.tool_injection import ToolInjectionError, inject_arguments
from flink_agents.runtime.features.tool_arguments import ToolArgumentsError, check_arguments, parse_arguments
from flink_agents.runtime.features.tool_results import json_data, text_for_model

__all__ = [
    "StructuredOutputError", "ToolArgumentsError", "ToolNotOffered", "ToolRoundLimitReached", "chat_model_action",
    "tool_call_action",
]

log = logging.getLogger(__name__)

_MAX_TOOL_ROUNDS = RuntimeOptions.CHAT_MAX_TOOL_ROUNDS
_MAX_REASKS = RuntimeOptions.CHAT_OUTPUT_SCHEMA_MAX_RETRIES
_CONTEXT_PATH = "_flink_agents.chat"


async def chat_model_action(event: Event, ctx: RunnerContext) -> None:
    """Handle ``ChatRequestEvent`` and ``ToolResponseEvent``."""
    schema: OutputSchema | None = None
    if isinstance(event, ChatRequestEvent):
        schema = event.output_schema
        conversation = {
            "request_id": str(event.id),
            "model": event.model,
            "prompt_args": event.prompt_args,
            "messages": [m.model_dump(mode="json") for m in event.messages],
            "round": 0,
        }
        if event.output_schema_spec is not None:  # for the tool rounds to come
            conversation["output_schema"] = event.output_schema_spec
    elif isinstance(event, ToolResponseEvent):
        path = f"{_CONTEXT_PATH}.{event.request_id.hex}"
        conversation = ctx.sensory_memory.get(path)
        if conversation is None:
            # The response to a ToolRequestEvent a user action sent (as 0.3.1
            # code may): no chat of ours waits for it; the user's actions get it.
            log.debug("tool response %s answers no chat request of this run", event.request_id)
            return
        names = _tool_names(conversation["messages"])
        rendered_by = _result_renderers(ctx, conversation["model"])
        for call_id in conversation.pop("pending_calls"):
            if call_id not in event.responses:
                raise RuntimeError(f"tool response {event.request_id} lacks call {call_id!r}")
            result = event.responses[call_id]
            if names.get(call_id) == CREATE_CALLBACK_TOOL and isinstance(result, dict) and result.get("pending"):
                conversation.setdefault("operations", []).append(result["operation_id"])
            error = event.errors.get(call_id)
            if error is not None:
                # Named when the round limit ends the request (ToolRoundLimitReached).
                conversation["last_tool_error"] = {
                    "round": conversation["round"], "tool": names.get(call_id), "error": error,
                }
            render = rendered_by.get(names.get(call_id))
            if render is not None:
                # The tool says how the model sees its result (an MCP tool:
                # as untrusted data), from the journaled value.
                content = render(result, error)
            else:
                # JSON text (a str as itself), from the journaled, typed value.
                content = text_for_model(result)
            conversation["messages"].append(
                ChatMessage(
                    role=MessageRole.TOOL,
                    content=content,
                    extra_args={
                        "tool_call_id": call_id,
                        "external_id": event.external_ids.get(call_id),
                    },
                ).model_dump(mode="json")
            )
        conversation["round"] += 1
        if conversation.get("output_schema") is not None:
            schema = OutputSchema.model_validate(conversation["output_schema"])
    else:
        raise TypeError(f"chat_model_action got a {type(event).__name__}")
    await _call_model(conversation, ctx, schema)


async def _call_model(conversation: Dict[str, Any], ctx: RunnerContext, schema: OutputSchema | None) -> None:
    """Ask the model and act on its reply: tool calls go out as a
    ``ToolRequestEvent``; a final answer (validated against ``schema``, else
    the setup's ``output_schema``, re-asking on a mismatch) as the
    ``ChatResponseEvent``."""
    config = readable(ctx.config)
    max_rounds = config.get(_MAX_TOOL_ROUNDS)
    model = conversation["model"]
    setup = ctx.get_resource(model, ResourceType.CHAT_MODEL)
    if not isinstance(setup, BaseChatModelSetup):
        raise TypeError(f"resource {model!r} is a {type(setup).__name__}, not a chat model setup")
    if schema is None:
        schema = setup.output_schema
    if setup.conversation == "per_key" and conversation["round"] == 0 and TURN_START not in conversation:
        # A new turn of the key's conversation: its history goes first.
        begin_turn(conversation, ctx.short_term_memory)
    reply = await _ask(setup, model, conversation, ctx, schema)
    structured: Any = None
    while True:
        # The model answered while operations it started are open: wait for
        # them, tell it their outcomes, and ask again.
        while not reply.tool_calls and conversation.get("operations"):
            if conversation["round"] >= max_rounds:
                raise RuntimeError(
                    f"chat model {model!r} used more than {max_rounds} rounds ({_MAX_TOOL_ROUNDS.key})"
                )
            conversation["messages"].append(reply.model_dump(mode="json"))
            conversation["messages"].append(await _operation_outcomes(conversation.pop("operations"), ctx))
            conversation["round"] += 1
            reply = await _ask(setup, model, conversation, ctx, schema)
        if reply.tool_calls or schema is None:
            break
        try:
            structured = schema.parse(reply.content or "")
            break
        except OutputValidationError as mismatch:
            reasks = conversation.get("output_schema_reasks", 0)
            if reasks >= config.get(_MAX_REASKS):
                raise StructuredOutputError(model, mismatch, reasks, _MAX_REASKS.key) from mismatch
            conversation["output_schema_reasks"] = reasks + 1
            conversation["messages"].append(reply.model_dump(mode="json"))
            conversation["messages"].append(reask_message(schema, mismatch))
            reply = await _ask(setup, model, conversation, ctx, schema)

    if not reply.tool_calls:
        if TURN_START in conversation:
            # The turn ends: stored with this step's completion, compacted;
            # without the rejected answers and their re-asks.
            end_turn(
                without_reasks(conversation), reply.model_dump(mode="json"), ctx.short_term_memory,
                setup.conversation_max_messages, setup.conversation_max_tokens,
            )
        if schema is not None:
            reply = reply.model_copy(update={"extra_args": {**reply.extra_args, STRUCTURED_OUTPUT: structured}})
        _send_made(ctx, ChatResponseEvent(request_id=conversation["request_id"], response=reply))
        return
    # ``round`` tool rounds ran already; refuse one more before running its tools.
    if conversation["round"] >= max_rounds:
        raise ToolRoundLimitReached(model, max_rounds, conversation.get("last_tool_error"))
    calls = []
    for index, call in enumerate(reply.tool_calls):
        function = call.get("function", {})
        calls.append({
            "id": tool_call_id(conversation["request_id"], conversation["round"], index),
            "type": "function",
            "function": {"name": function.get("name"), "arguments": function.get("arguments") or {}},
            "original_id": call.get("original_id", call.get("id")),
        })
    reply = reply.model_copy(update={"tool_calls": calls})
    conversation["messages"].append(reply.model_dump(mode="json"))
    conversation["pending_calls"] = [c["id"] for c in calls]
    # The tools offered travel with the request: the tool action runs only
    # these, and a replay decides on the same list.
    request = ToolRequestEvent(model=model, tool_calls=calls, offered_tools=list(setup.tools))
    _send_made(ctx, request)  # assigns request.id
    ctx.sensory_memory.set(f"{_CONTEXT_PATH}.{request.id.hex}", conversation)


def _send_made(ctx: RunnerContext, event: Any) -> None:
    """Send an event this module made; unchecked where the context allows
    (``ActionContext.send_runtime_event``: the loop encodes it anyway)."""
    send = getattr(ctx, "send_runtime_event", None)
    (send or ctx.send_event)(event)


async def _ask(
    setup: BaseChatModelSetup, model: str, conversation: Dict[str, Any], ctx: RunnerContext,
    schema: OutputSchema | None = None,
) -> ChatMessage:
    """One journaled model call on the conversation so far: after a failover
    the reply is replayed, not asked for again. With ``schema``, the setup
    is asked for an answer matching it (``BaseChatModelSetup.chat``): the
    ``output_schema`` keyword reaches a connection that takes it natively;
    otherwise the setup adds the instruction, or, for a setup that overrides
    ``chat``/``achat`` (0.3.1 style, which does not expect the keyword),
    the action adds it to the messages here.

    First the steering messages waiting for the key join the conversation as
    user messages: this is the step boundary where they arrive (after the
    tools in flight, before the next model call; ``runtime.features.steering``).
    """
    take_steering = getattr(ctx, "take_steering", None)
    for message in take_steering() if take_steering is not None else []:
        conversation["messages"].append(ChatMessage(
            role=MessageRole.USER,
            content=message if isinstance(message, str) else json.dumps(message),
            extra_args={"steering": True},
        ).model_dump(mode="json"))
    messages = [ChatMessage.model_validate(m) for m in conversation["messages"]]
    extra: Dict[str, Any] = {}
    if schema is not None:
        if native_schema(setup, ctx) or not overrides_chat(setup):
            extra["output_schema"] = schema
        else:
            messages = with_system_message(messages, output_schema_instruction(schema))

    async def ask() -> Any:
        return await setup.achat(messages, prompt_args=conversation["prompt_args"], **extra)

    digest: List[Any] = [conversation["messages"], conversation["prompt_args"]]
    if schema is not None:  # only then: journals written without schemas keep their digests
        digest.append(schema.model_dump())
    # Tokens counted from the journaled reply, once per call in this engine
    # (a replay after a restart too; ActionContext.journaled_call).
    reply = await _journaled(ctx)(f"chat:{model}", digest, ask,
                                  count=lambda answer, position: _count_tokens(ctx, setup, model, answer, position))
    if not isinstance(reply, ChatMessage):
        raise TypeError(f"chat model {model!r} returned a {type(reply).__name__}, not a ChatMessage")
    return reply


def _count_tokens(ctx: RunnerContext, setup: Any, resource: str, reply: Any, position: Any) -> None:
    """Built-in metrics ``action.<action>.model.<model>.promptTokens``,
    ``.completionTokens`` (Flink Agents 0.3.1's names), ``.cachedTokens``,
    ``.reasoningTokens`` and ``.costMicroUsd`` of a model call whose reply
    reached the action, run or replayed, once per call and run
    (``runtime.execution.token_usage``)."""
    count_tokens(ctx.runtime_run, ctx.action_name, position, setup, resource, reply)


def _result_renderers(ctx: RunnerContext, model: str) -> Dict[str, Callable[[Any, str | None], str]]:
    """Tool name -> ``result_for_model(value, error)`` of the tools the
    setup ``model`` offers that define one (MCP tools: their results reach
    the model wrapped as untrusted data), or that are marked untrusted
    (``@tool(untrusted=True)``: wrapped the same way, from ``tool:<name>``)."""
    setup = ctx.get_resource(model, ResourceType.CHAT_MODEL)
    if not isinstance(setup, BaseChatModelSetup):
        raise TypeError(f"resource {model!r} is a {type(setup).__name__}, not a chat model setup")
    renderers: Dict[str, Callable[[Any, str | None], str]] = {}
    for tool in setup.offered_tools:
        render = getattr(tool, "result_for_model", None)
        if callable(render):
            renderers[tool.name] = render
        elif getattr(tool, "untrusted", False) is True:
            renderers[tool.name] = functools.partial(untrusted_tool_result, source=f"tool:{tool.name}")
    return renderers


def _tool_names(messages: List[Dict[str, Any]]) -> Dict[str, str]:
    """Call id -> tool name, over the latest assistant message with tool calls."""
    for message in reversed(messages):
        calls = message.get("tool_calls")
        if calls:
            return {c["id"]: c["function"]["name"] for c in calls}
    return {}


async def _operation_outcomes(operation_ids: List[str], ctx: RunnerContext) -> Dict[str, Any]:
    """Wait for every open operation (each racing its deadline; the run is
    parked meanwhile); their outcomes as one user message, in start order."""
    hub = getattr(ctx, "callbacks", None)
    if hub is None:
        raise RuntimeError("operations were started, but this runtime has no callback store")
    # The reply that ended the round and the tool results before it must be
    # durable before the run parks: a failover during the wait must not ask
    # the model again.
    await ctx.commit_journal()
    records = await asyncio.gather(*(hub.wait_record(op) for op in operation_ids))
    text = "\n\n".join(outcome_message(op, record) for op, record in zip(operation_ids, records))
    return ChatMessage(role=MessageRole.USER, content=text).model_dump(mode="json")


def _journaled(ctx: RunnerContext) -> Callable[..., Awaitable[Any]]:
    """The runtime context's journaled-call entry (the built-ins run only on
    the runtime's own context)."""
    call = getattr(ctx, "journaled_call", None)
    if call is None:
        raise TypeError(f"built-in actions need the runtime's ActionContext, got {type(ctx).__name__}")
    return call


def _journal_form(tool: str, value: Any) -> Any:
    """A tool's value as it is journaled: itself where the codec carries its
    type (a replay returns it typed), else its JSON data
    (``tool_results.json_data``: what the model is shown either way)."""
    try:
        encode(value, f"tool {tool!r} result")
    except EncodeError:
        return json_data(value)
    return value


class ToolRoundLimitReached(RuntimeError):
    """The model asked for tools in more rounds than ``chat.max_tool_rounds``
    allows; the request (so the record) fails.

    Attributes:
        model: The chat model setup's resource name.
        limit: The configured limit (rounds).
        last_error: ``{"round", "tool", "error"}`` of the last tool call of
            the request that gave the model an error result (a malformed
            call it kept sending, a failing tool), or None.
    """

    def __init__(self, model: str, limit: int, last_error: Dict[str, Any] | None = None) -> None:
        text = f"chat model {model!r} asked for tools in more than {limit} rounds ({_MAX_TOOL_ROUNDS.key})"
        if last_error is not None:
            text += (
                f"; the last tool error (round {last_error['round']}): tool {last_error['tool']!r}: "
                f"{last_error['error']}"
            )
        super().__init__(text)
        self.model = model
        self.limit = limit
        self.last_error = last_error


class ToolNotOffered(LookupError):
    """A model called a tool that its request did not offer (or that does
    not exist): the call is refused, and the model gets this error's text,
    which names the tools offered and no other registered tool.

    Attributes:
        tool: The name the model called (as the model gave it).
        offered: The names the request offered, in the setup's order.
    """

    def __init__(self, tool: Any, offered: List[str]) -> None:
        listed = ", ".join(repr(name) for name in offered) if offered else "none"
        super().__init__(f"tool {tool!r} was not offered to the model; the tools offered are: {listed}")
        self.tool = tool
        self.offered = list(offered)


def _offered_tools(request: ToolRequestEvent, ctx: RunnerContext) -> List[str]:
    """The tool names ``request`` may run: its ``offered_tools``, or (an
    event without them) the ``tools`` of the chat model setup it names.

    Raises:
        ValueError: No ``offered_tools`` and ``request.model`` names no chat
            model setup.
    """
    if request.offered_tools is not None:
        return list(request.offered_tools)
    try:
        setup = ctx.get_resource(request.model, ResourceType.CHAT_MODEL)
    except KeyError:
        setup = None
    if not isinstance(setup, BaseChatModelSetup):
        raise ValueError(
            f"ToolRequestEvent {request.id} names model {request.model!r}, which is not a chat model setup, "
            "and has no offered_tools: set offered_tools to the names of the tools it may run"
        )
    return list(setup.tools)


async def tool_call_action(event: Event, ctx: RunnerContext) -> None:
    """Handle ``ToolRequestEvent``: run each call, send one ``ToolResponseEvent``.

    Only the tools the request offered run (``ToolRequestEvent.offered_tools``,
    built-in callback tools included only when offered): a call to any other
    name, registered or not, is refused with ``ToolNotOffered``, whose text
    lists the offered tools only. The refusal is journaled like a tool's
    result (``tool:<name>``), so a replay refuses the same call.

    A call whose arguments are not JSON, not an object, or do not fit the
    tool's parameters (a required one missing, a wrong type: pydantic's
    check of the function's signature) is refused with
    ``ToolArgumentsError`` before the tool runs (``features.tool_arguments``),
    journaled the same way.

    A tool that raises, or a refused call, gives the model an error text as
    its result (``"Error: <type>: <message>"``, one result per call id, as
    providers expect) and is listed in ``ToolResponseEvent.errors``; the
    model decides what to do next (it may correct the call; the chat action
    bounds the rounds, ``chat.max_tool_rounds``).

    A call of a tool that needs approval (``@tool(needs_approval=True)``,
    ``approvals.tools``) first waits, parked, for a reviewer's decision
    (``features.approvals``): approved, it runs as below; rejected or timed
    out, it does not run and the model gets why as the call's result; under
    ``approvals.on_timeout: fail`` a timeout fails the action
    (``ApprovalTimedOut``).

    A result is journaled, and put in ``ToolResponseEvent.responses``, as
    itself (typed: a ``datetime``, a dataclass, a pydantic model) where the
    codec carries its type, else as its JSON data; the chat action shows it
    to the model as JSON text (``features.tool_results.text_for_model``).

    Raises:
        ValueError: The request has no ``offered_tools`` and names no chat
            model setup (``_offered_tools``).
    """
    request = ToolRequestEvent.from_event(event)
    offered = _offered_tools(request, ctx)

    async def run(call: Dict[str, Any]) -> Any:
        name = call["function"]["name"]
        sent = call["function"].get("arguments") or {}

        async def refuse(error: Exception) -> Any:
            async def raise_it() -> Any:
                raise error

            # Journaled like a result, so a replay refuses the same call.
            return await _journaled(ctx)(f"tool:{name}", [sent], raise_it)

        if name not in offered:  # a list: a name the model made up may not be hashable
            # Decided before the arguments are read or any resource looked up.
            return await refuse(ToolNotOffered(name, offered))
        try:
            arguments = parse_arguments(name, sent)
        except ToolArgumentsError as malformed:
            return await refuse(malformed)
        tool = ctx.get_resource(name, ResourceType.TOOL)
        if isinstance(tool, BuiltinCallbackTool):
            # Not journaled here: the callback's registration is its journal.
            return await tool.run_in(ctx, arguments)
        if not isinstance(tool, Tool):
            raise TypeError(f"resource {name!r} is not a tool")
        fn = getattr(tool, "func", None)
        try:
            # Framework-owned values win over the model's (HEAD's injected_args).
            arguments = inject_arguments(name, getattr(tool, "injected_args", None) or {}, arguments, ctx)
        except ToolInjectionError as missing:
            return await refuse(missing)
        try:
            check_arguments(name, fn if callable(fn) else None, arguments)
        except ToolArgumentsError as unfit:
            return await refuse(unfit)
        if needs_approval(tool, name, ctx.config):
            # Parked until a reviewer decides (runtime.features.approvals); a
            # replay finds the same callback and its decision.
            instead = await await_approval(ctx, name, call["id"], arguments, request.model)
            if instead is not None:
                return instead  # rejected or timed out: the tool does not run
        # Arguments as a list are positional (``Tool.call(*args)``, as 0.3.1 allows).
        args, kwargs = (list(arguments), {}) if isinstance(arguments, list) else ((), arguments)

        async def invoke() -> Any:
            # Built-in metric numOfToolCalls: a call that runs (a replayed one does not get here).
            ctx.agent_metric_group.get_counter("numOfToolCalls").inc()
            ctx.action_metric_group.get_sub_group("tool", name).get_counter("numOfToolCalls").inc()
            if fn is not None and inspect.iscoroutinefunction(fn):
                return _journal_form(name, await fn(*args, **kwargs))
            acall = getattr(tool, "acall", None)
            if acall is not None and inspect.iscoroutinefunction(acall):
                # A tool with its own coroutine (an MCP tool): no thread per call.
                return _journal_form(name, await acall(*args, **kwargs))
            # A thread outlives a timeout: its result is kept for the retry (call_threads).
            return _journal_form(name, await run_in_thread(tool.call, *args, **kwargs))

        # Journaled: a tool with side effects does not run twice after a failover.
        return await _journaled(ctx)(f"tool:{name}", [arguments], invoke)

    outcomes = await asyncio.gather(*(run(c) for c in request.tool_calls), return_exceptions=True)
    # Keyed by the calls' own ids, of any hashable type (a UUID from 0.3.1 user code).
    responses: Dict[Any, Any] = {}
    errors: Dict[Any, str] = {}
    external: Dict[Any, Any] = {}
    for call, outcome in zip(request.tool_calls, outcomes):
        call_id = call["id"]
        external[call_id] = call.get("original_id")
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception) or isinstance(outcome, ApprovalTimedOut):
                raise outcome  # ApprovalTimedOut: approvals.on_timeout is "fail"
            text = f"{type(outcome).__name__}: {outcome}"
            if isinstance(outcome, ToolNotOffered):
                log.warning("refused a call of model %r on key %r: %s", request.model, ctx.key, text)
            else:
                log.warning("tool %r failed on key %r: %s", call["function"]["name"], ctx.key, text)
            errors[call_id] = text
            responses[call_id] = f"Error: {text}"
        else:
            responses[call_id] = outcome  # as journaled: typed (the chat action shows it as JSON)
    _send_made(ctx, ToolResponseEvent(request_id=request.id, responses=responses, external_ids=external, errors=errors))



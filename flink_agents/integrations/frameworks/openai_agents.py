"""An OpenAI Agents SDK agent run durably inside an action.

``await run_durably(ctx, agent, "input")`` runs ``Runner.run(agent, ...)``
as one ``DurableTurn`` (framework id ``openai_agents``): every model request
and every function-tool call of the run is journaled, so a replay (a
failover, a restore) returns the recorded responses and results and a
completed call never runs again. See ``docs/frameworks/openai_agents.md``.

Extension points used (all public in ``openai-agents`` 0.24):

- **Models**: a ``ModelProvider`` (``RunConfig.model_provider``) whose
  models wrap ``Model.get_response`` (``agents/models/interface.py``); an
  agent (or ``RunConfig.model``) holding a ``Model`` instance gets the same
  wrapper through ``Agent.clone(model=...)``. The response is journaled as
  ``TypeAdapter(ModelResponse).dump_python(mode="json", by_alias=True)``
  (``by_alias`` makes the round trip exact) and rebuilt from that JSON on
  the first run and on a replay alike. The ids of the function calls it asks
  for are rewritten inside the journaled call to ``turn.tool_call_id(i, j)``
  (the SDK raises ``ModelBehaviorError`` when a provider reuses a call id
  within a run, ``run_internal/tool_planning.py``); the provider's ids are
  kept beside it in the journal (``provider_tool_call_ids``).
- **Tools**: each ``FunctionTool`` of the agent (and of the agents reached by
  its handoffs) is copied with ``dataclasses.replace(tool,
  on_invoke_tool=...)`` (``agents/tool.py``); the user's agent and tools are
  never changed. A tool's value is journaled as itself where the journal's
  codec carries its type (pydantic models, dataclasses, tuples), else as
  ``str()`` of it, which is what the SDK sends the model for such a value.
  What the call added to the run's ``Usage`` (``tool_context.usage``: an
  ``Agent.as_tool`` tool's nested run adds its requests there) is journaled
  with the result and added again on a replay (``UsageLedger``), so
  ``result.context_wrapper.usage`` after a replay is that of an
  uninterrupted run. Model requests need none of this: their usage is in
  the journaled ``ModelResponse``, which the runner adds itself.
- **Steering**: ``RunConfig.call_model_input_filter`` (``run_config.py``)
  takes the key's steering messages before every model request and adds
  them as user messages. The filter only edits the request (the SDK keeps no
  trace of it in the run's items), so the integration re-inserts the taken
  messages at the same place in every later request of the run and in the
  stored conversation.
- **Ids**: ``RunConfig.trace_id`` is ``trace_<turn id hex>`` and
  ``group_id`` the turn's run id (unless given); tracing is always disabled
  (``tracing_disabled=True``: the SDK's exporter posts to api.openai.com).

Refused, with a ``ValueError`` naming the cause: ``session``,
``previous_response_id``, ``auto_previous_response_id``,
``conversation_id`` (state kept outside the journal), a ``RunState`` input
(resuming an interrupted run), ``RunConfig.tool_execution
.max_function_tool_concurrency`` (its pool refills as tools finish, so what
runs where depends on timing), MCP servers, tools that run locally but are
not function tools (computer, shell, local shell, apply patch, custom).

Function tools with ``needs_approval`` (a bool, or the SDK's per-call
function) do not interrupt the run: each call that needs approval parks on
a durable approval callback (``runtime.features.approvals``; decided with
``flink-agents approvals approve|reject``); approved, the tool runs and is
journaled as any other; rejected or timed out, it does not run and the
model gets why as the tool's output, as the SDK's own rejection does.
Streaming is not offered: a wrapped model's ``stream_response`` raises.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

try:
    from agents import Agent, FunctionTool, Handoff, RunConfig, Runner
except ImportError as error:  # the optional extra is not installed
    raise ImportError(
        "flink_agents.integrations.frameworks.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'flink-agents-runtime[openai-agents]'"
    ) from error
from agents.items import ModelResponse
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.result import RunResult
from agents.run_config import CallModelData, ModelInputData
from agents.run_state import RunState
from agents.usage import Usage, deserialize_usage, serialize_usage
from agents.tool import (
    ApplyPatchTool,
    CodeInterpreterTool,
    ComputerTool,
    CustomTool,
    FileSearchTool,
    HostedMCPTool,
    ImageGenerationTool,
    LocalShellTool,
    ShellTool,
    WebSearchTool,
)
from openai.types.responses import ResponseFunctionToolCall
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from flink_agents.runtime.durable import Usage as CallUsage, await_approval, trust_package
from flink_agents.integrations.frameworks.conversation import FrameworkConversation
from flink_agents.integrations.frameworks.durable_turn import (
    DurableTurn, ToolCallView, current_turn, require_action_context, steering_texts, token_count,
)
import flink_agents.runtime.durable as durable

# A turn's journal rows hold the Agents SDK's items and the OpenAI types in them; stored data may
# name their classes, and no others (runtime.durable.trust_package).
for _package in ("agents", "openai"):
    trust_package(_package)


__all__ = ["FRAMEWORK", "JournaledModel", "JournaledModelProvider", "UsageLedger", "run_durably"]

FRAMEWORK = "openai_agents"

_RESPONSE = TypeAdapter(ModelResponse)
# Tools that run at the provider: what they do comes back inside the
# (journaled) model response, nothing runs here.
_HOSTED_TOOLS = (FileSearchTool, WebSearchTool, HostedMCPTool, CodeInterpreterTool, ImageGenerationTool)
# Tools that run here but not through ``FunctionTool.on_invoke_tool``.
_LOCAL_TOOLS = (ComputerTool, ShellTool, LocalShellTool, ApplyPatchTool, CustomTool)
# Runner.run arguments that keep the conversation outside the journal.
_REFUSED_RUN_ARGS = {
    "session": "use conversation='per_key' (kept in the key's short-term memory)",
    "previous_response_id": "server-side conversation state is not journaled",
    "auto_previous_response_id": "server-side conversation state is not journaled",
    "conversation_id": "server-side conversation state is not journaled",
}
# Request fields that vary between attempts without changing what is asked.
_VOLATILE_ITEM_KEYS = frozenset({"id", "status", "provider_data"})
_VOLATILE_PART_KEYS = frozenset({"annotations", "logprobs"})


async def run_durably(
    ctx: Any,
    agent: Agent[Any],
    input: Any,
    *,
    name: Optional[str] = None,
    conversation: Optional[str] = None,
    conversation_max_messages: int = 40,
    conversation_max_tokens: Optional[int] = None,
    **framework_kwargs: Any,
) -> RunResult:
    """Run ``agent`` on ``input`` with ``Runner.run``, journaled.

    Call it from an ``async`` action; the journaled calls are positioned by
    meaning under the turn's anchor (``durable_turn``), so the same code
    replays the same calls.

    Args:
        ctx: The action's ``RunnerContext``.
        agent: The SDK ``Agent`` (not changed: a wrapped clone runs).
        input: A string (one user message) or a list of input items
            (``TResponseInputItem`` dicts).
        name: The agent's name in function ids and in the conversation's
            name (default ``agent.name``).
        conversation: ``None`` (each record alone) or ``"per_key"``: the
            key's earlier turns (``result.to_input_list()`` items) come
            before ``input``, bounded by ``conversation_max_messages`` /
            ``conversation_max_tokens`` (whole turns).
        **framework_kwargs: ``Runner.run`` keyword arguments (``context``,
            ``max_turns``, ``hooks``, ``run_config``, ``error_handlers``).

    Returns:
        The SDK's ``RunResult`` (rebuilt from the journal on a replay).

    Raises:
        TypeError: ``agent`` is not an ``agents.Agent``, or ``input`` is
            neither text nor a list of items.
        ValueError: ``conversation`` is neither None nor ``"per_key"``, or
            something that cannot be made durable was asked (see the module
            docstring).
    """
    require_action_context(ctx, FRAMEWORK)
    if not isinstance(agent, Agent):
        raise TypeError(f"run_durably needs an agents.Agent, got {type(agent).__name__}")
    items = _input_items(input)
    for arg, why in _REFUSED_RUN_ARGS.items():
        if framework_kwargs.get(arg):
            raise ValueError(f"openai_agents.run_durably: {arg} is not supported: {why}")
    run_config = _run_config(framework_kwargs.pop("run_config", None))
    name = name or agent.name
    store = _conversation(conversation, name, conversation_max_messages, conversation_max_tokens)
    history = store.history(ctx.short_term_memory) if store else []
    wrapped = _wrap_agent(agent, {})
    with DurableTurn(ctx, FRAMEWORK, name, prompt=_jsonable(input)) as turn:
        steering = _Steering(turn, run_config.call_model_input_filter)
        config = dataclasses.replace(
            run_config,
            model=JournaledModel(run_config.model) if isinstance(run_config.model, Model) else run_config.model,
            model_provider=JournaledModelProvider(run_config.model_provider),
            tracing_disabled=True,
            trace_id=run_config.trace_id or f"trace_{turn.turn_id.hex}",
            group_id=run_config.group_id or turn.run_id,
            call_model_input_filter=steering,
        )
        result = await Runner.run(wrapped, history + items, run_config=config, **framework_kwargs)
    if store:
        messages = steering.apply(result.to_input_list())
        store.append_turn(ctx.short_term_memory, [_jsonable(m) for m in messages[len(history):]])
    return result


class JournaledModel(Model):
    """A ``Model`` whose ``get_response`` is journaled in the current turn.

    Outside a turn (or inside a journaled call of one: an agent run as a
    tool) it calls ``inner`` as is.

    Raises:
        ValueError: A request with server-side state (``previous_response_id``,
            ``conversation_id``) or a reusable ``prompt`` inside a turn.
        RuntimeError: ``stream_response`` (streaming is not journaled).
    """

    def __init__(self, inner: Model) -> None:
        if not isinstance(inner, Model):
            raise TypeError(f"JournaledModel wraps an agents Model, got {type(inner).__name__}")
        self.inner = inner

    async def get_response(
        self,
        system_instructions: Optional[str],
        input: Any,
        model_settings: Any,
        tools: List[Any],
        output_schema: Any,
        handoffs: List[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: Optional[str] = None,
        conversation_id: Optional[str] = None,
        prompt: Any = None,
    ) -> ModelResponse:
        async def ask() -> ModelResponse:
            return await self.inner.get_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                previous_response_id=previous_response_id, conversation_id=conversation_id, prompt=prompt,
            )

        turn = current_turn()
        if turn is None:
            return await ask()
        if previous_response_id or conversation_id or prompt:
            raise ValueError(
                "openai_agents: previous_response_id, conversation_id and prompt are not journaled; "
                "a durable turn sends the whole input"
            )
        digest = _request_digest(system_instructions, input, model_settings, tools, output_schema, handoffs)

        async def call(index: int) -> Dict[str, Any]:
            return _dump_response(await ask(), turn.tool_call_id, index)

        model_name = getattr(self.inner, "model", None)  # a ModelResponse does not name its model

        def usage(stored: Dict[str, Any]) -> Tuple[Optional[str], Optional[CallUsage]]:
            return (model_name if isinstance(model_name, str) else None), response_usage(stored)

        stored = await turn.model_request(digest, call, _view, usage)
        return _RESPONSE.validate_python(stored["model_response"])

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "openai_agents: streaming (Runner.run_streamed) is not journaled; use run_durably, which runs Runner.run"
        )

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        await self.inner.close()


class JournaledModelProvider(ModelProvider):
    """``inner``'s models, each wrapped in a ``JournaledModel``."""

    def __init__(self, inner: ModelProvider) -> None:
        if not isinstance(inner, ModelProvider):
            raise TypeError(f"JournaledModelProvider wraps an agents ModelProvider, got {type(inner).__name__}")
        self.inner = inner

    def get_model(self, model_name: Optional[str]) -> Model:
        return JournaledModel(self.inner.get_model(model_name))


# -- the request and response ---------------------------------------------------


def _request_digest(
    system_instructions: Optional[str], input: Any, model_settings: Any, tools: Sequence[Any],
    output_schema: Any, handoffs: Sequence[Any],
) -> Dict[str, Any]:
    """What a model request asks, without per-attempt fields (item ids and
    statuses, annotations, a generated ``prompt_cache_key``)."""
    items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
    settings = model_settings.to_json_dict() if model_settings is not None else None
    if settings and isinstance(settings.get("extra_args"), dict):
        settings["extra_args"] = {k: v for k, v in settings["extra_args"].items() if k != "prompt_cache_key"}
    schema = None
    if output_schema is not None and not output_schema.is_plain_text():
        schema = output_schema.json_schema()
    return {
        "instructions": system_instructions,
        "input": [_project(_jsonable(item), top=True) for item in items],
        "tools": [_tool_digest(tool) for tool in tools],
        "handoffs": [handoff.tool_name for handoff in handoffs],
        "output_schema": schema,
        "settings": settings,
    }


def _project(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        drop = _VOLATILE_ITEM_KEYS if top else _VOLATILE_PART_KEYS
        return {k: _project(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_project(v) for v in value]
    return value


def _tool_digest(tool: Any) -> Any:
    if isinstance(tool, FunctionTool):
        return {"name": tool.name, "description": tool.description, "parameters": tool.params_json_schema}
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def _dump_response(response: ModelResponse, tool_call_id: Any, index: int) -> Dict[str, Any]:
    """The response as journal JSON, its function-call ids rewritten."""
    output, provider_ids = [], []
    for item in response.output:
        if isinstance(item, ResponseFunctionToolCall):
            provider_ids.append(item.call_id)
            item = item.model_copy(update={"call_id": tool_call_id(index, len(provider_ids) - 1)})
        output.append(item)
    response = dataclasses.replace(response, output=output)
    return {
        "model_response": _RESPONSE.dump_python(response, mode="json", by_alias=True),
        "provider_tool_call_ids": provider_ids,
    }


def response_usage(stored: Dict[str, Any]) -> Optional[CallUsage]:
    """The ``Usage`` of a journaled ``ModelResponse`` (``input_tokens``
    counts the cached ones; ``input_tokens_details.cached_tokens`` and
    ``output_tokens_details.reasoning_tokens`` kept when above 0: the SDK
    fills 0 for what a provider did not say); None without usage."""
    usage = stored["model_response"].get("usage")
    if not isinstance(usage, dict):
        return None
    given, taken = token_count(usage.get("input_tokens")), token_count(usage.get("output_tokens"))
    if not given and not taken:
        return None  # a model that reports nothing leaves the SDK's zeros
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    return CallUsage(given or 0, taken or 0, token_count(cached) or None, token_count(reasoning) or None)


def _view(stored: Dict[str, Any]) -> Tuple[Optional[str], List[ToolCallView]]:
    """(text, function calls) of a journaled response, for followers."""
    texts: List[str] = []
    calls: List[ToolCallView] = []
    for item in stored["model_response"]["output"]:
        if item.get("type") == "message":
            texts += [part["text"] for part in item.get("content") or [] if part.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            calls.append((item["call_id"], item["name"], item["arguments"]))
    return ("".join(texts) if texts else None), calls


# -- the agent, its tools and handoffs -------------------------------------------


def _wrap_agent(agent: Agent[Any], done: Dict[int, Agent[Any]]) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents its handoffs reach) with a
    journaled model (when it holds a ``Model``) and journaled function tools."""
    if id(agent) in done:
        return done[id(agent)]
    if agent.mcp_servers:
        raise ValueError(
            f"openai_agents: agent {agent.name!r} has MCP servers, whose tools are listed per run and not "
            "journaled; wrap the tools you need as function tools"
        )
    clone = agent.clone(tools=[_wrap_tool(agent.name, tool) for tool in agent.tools])
    done[id(agent)] = clone  # before the handoffs: they may lead back here
    if isinstance(agent.model, Model):
        clone.model = JournaledModel(agent.model)
    clone.handoffs = [_wrap_handoff(handoff, done) for handoff in agent.handoffs]
    return clone


def _wrap_handoff(handoff: Any, done: Dict[int, Agent[Any]]) -> Any:
    if isinstance(handoff, Agent):
        return _wrap_agent(handoff, done)
    if not isinstance(handoff, Handoff):
        raise TypeError(f"openai_agents: a handoff must be an Agent or a Handoff, got {type(handoff).__name__}")
    invoke = handoff.on_invoke_handoff

    async def on_invoke_handoff(context: Any, arguments: str) -> Agent[Any]:
        return _wrap_agent(await invoke(context, arguments), done)

    return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)


def _wrap_tool(agent: str, tool: Any) -> Any:
    if isinstance(tool, _HOSTED_TOOLS):
        return tool
    if not isinstance(tool, FunctionTool) or isinstance(tool, _LOCAL_TOOLS):
        raise ValueError(
            f"openai_agents: tool {getattr(tool, 'name', tool)!r} of agent {agent!r} is a {type(tool).__name__}; "
            "only function tools (and tools hosted by the provider) can be journaled"
        )
    approval = tool.needs_approval
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(tool_context: Any, arguments: str) -> Any:
        turn = current_turn()
        if turn is None:
            return await invoke(tool_context, arguments)
        if approval is not False and await _approval_needed(approval, tool_context, arguments):
            # The SDK's approval, as a durable approval callback of the run
            # (runtime.features.approvals) instead of an interruption: the
            # reviewer's decision stands across a replay.
            instead = await await_approval(
                turn.ctx, tool.name, tool_context.tool_call_id, _arguments(arguments), f"openai_agents/{agent}"
            )
            if instead is not None:
                return instead  # rejected or timed out: the tool does not run; the model gets why

        async def run() -> Any:
            return _tool_output(await invoke(tool_context, arguments))

        usage = getattr(tool_context, "usage", None)
        ledger = UsageLedger(usage) if isinstance(usage, Usage) else None
        return await turn.tool_call(tool_context.tool_call_id, tool.name, _arguments(arguments), run, usage=ledger)

    # needs_approval=False: the wrapper asks, so the SDK never interrupts the run.
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, needs_approval=False)


async def _approval_needed(policy: Any, tool_context: Any, arguments: str) -> bool:
    """The SDK's ``needs_approval`` for one call: a bool, or its function
    ``(run context, parsed arguments, call id) -> bool`` (awaited if it
    returns an awaitable)."""
    if not callable(policy):
        return bool(policy)
    try:
        parameters = json.loads(arguments) if arguments else {}
    except ValueError:
        return True  # arguments the policy cannot inspect need approval, as the SDK decides
    decided = policy(tool_context, parameters, tool_context.tool_call_id)
    if inspect.isawaitable(decided):
        decided = await decided
    return bool(decided)


class UsageLedger:
    """The run's ``Usage`` as a ``durable_turn.UsageLedger``: what a unit
    added is the difference of the counts (requests, tokens and their
    details, as the SDK's ``usage_delta`` measures it) and the per-request
    entries appended since, journaled as ``serialize_usage`` JSON and added
    back with ``Usage.add``.

    Limit: tools of one round that run at once share the run's ``Usage``,
    so each sees what the others added meanwhile; their journaled shares
    overlap and a replay of more than one of them adds the overlap twice.
    """

    def __init__(self, usage: Usage) -> None:
        self._usage = usage

    def snapshot(self) -> Usage:
        return copy.deepcopy(self._usage)

    def added_since(self, before: Usage) -> Optional[Dict[str, Any]]:
        now, then = serialize_usage(self._usage), serialize_usage(before)
        added: Dict[str, Any] = {key: now[key] - then[key] for key in _USAGE_COUNTS}
        for key in ("input_tokens_details", "output_tokens_details"):
            added[key] = [_minus(now[key][0], then[key][0])]
        added["request_usage_entries"] = now["request_usage_entries"][len(then["request_usage_entries"]):]
        if not any(added[key] for key in _USAGE_COUNTS) and not added["request_usage_entries"]:
            return None
        return added

    def add(self, added: Any) -> None:
        if not isinstance(added, dict) or not isinstance(added.get("requests"), int):
            raise ValueError(f"journaled openai_agents usage is not a serialized Usage: {added!r:.200}")
        self._usage.add(deserialize_usage(added))


_USAGE_COUNTS = ("requests", "input_tokens", "output_tokens", "total_tokens")


def _minus(now: Dict[str, Any], then: Dict[str, Any]) -> Dict[str, Any]:
    """Token details ``now - then``, field by field (a missing count is 0)."""
    return {key: (value or 0) - (then.get(key) or 0) for key, value in now.items()}


def _tool_output(value: Any) -> Any:
    """A tool's value as the journal keeps it: as itself where the journal's
    codec carries its type (pydantic models, ``ToolOutputText`` and the like,
    dataclasses, tuples: ``runtime.durable.encode``), so the SDK sees the
    same value with and without the integration; else ``str(value)``, which
    is what the SDK sends the model for such a value (``items.py``)."""
    try:
        durable.encode(value, "tool output")
    except TypeError:
        return str(value)
    return value


def _arguments(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return arguments


# -- run configuration, conversation, steering -----------------------------------


def _run_config(run_config: Any) -> RunConfig:
    if run_config is None:
        run_config = RunConfig()
    elif isinstance(run_config, dict):
        run_config = RunConfig(**run_config)
    elif not isinstance(run_config, RunConfig):
        raise TypeError(f"run_config must be a RunConfig or a dict, got {type(run_config).__name__}")
    if run_config.tool_execution is not None and run_config.tool_execution.max_function_tool_concurrency is not None:
        raise ValueError(
            "openai_agents: RunConfig.tool_execution.max_function_tool_concurrency is not supported: its pool "
            "starts tools as others finish, so a replay could not find them where they ran"
        )
    return run_config


def _conversation(
    conversation: Optional[str], name: str, max_messages: int, max_tokens: Optional[int],
) -> Optional[FrameworkConversation]:
    if conversation is None:
        return None
    if conversation != "per_key":
        raise ValueError(f"conversation must be None or 'per_key', got {conversation!r}")
    return FrameworkConversation(FRAMEWORK, name, max_messages, max_tokens)


def _input_items(input: Any) -> List[Any]:
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    if isinstance(input, RunState):
        raise ValueError("openai_agents: resuming a RunState (an interrupted run) is not supported")
    if isinstance(input, list):
        return list(input)
    raise TypeError(f"input must be a string or a list of input items, got {type(input).__name__}")


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, by_alias=True, fallback=str)


class _Steering:
    """``RunConfig.call_model_input_filter``: before each model request, the
    key's steering messages (journaled), added as user messages at the end
    of the request's input; messages taken earlier in the run are put back
    where they were taken (the SDK does not keep what a filter added). The
    user's own filter, if any, runs after, on the steered input."""

    def __init__(self, turn: DurableTurn, user_filter: Any) -> None:
        self.turn = turn
        self.user_filter = user_filter
        self.taken: List[Tuple[int, List[Dict[str, Any]]]] = []  # (items before them, messages)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = list(data.model_data.input)
        if current_turn() is not self.turn:
            # A run inside a journaled call (``Agent.as_tool`` passes its
            # parent's run config on): the outer call is the unit.
            return await self._user(data)
        texts = steering_texts(self.turn.take_steering())
        if texts:
            self.taken.append((len(items), [{"role": "user", "content": text} for text in texts]))
        model_data = ModelInputData(input=self.apply(items), instructions=data.model_data.instructions)
        return await self._user(dataclasses.replace(data, model_data=model_data))

    async def _user(self, data: CallModelData[Any]) -> ModelInputData:
        if self.user_filter is None:
            return data.model_data
        filtered = self.user_filter(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    def apply(self, items: Sequence[Any]) -> List[Any]:
        """``items`` with the taken steering messages put back in place."""
        out: List[Any] = []
        for i, item in enumerate(items):
            for at, messages in self.taken:
                if at == i:
                    out += messages
            out.append(item)
        for at, messages in self.taken:
            if at >= len(items):
                out += messages
        return out

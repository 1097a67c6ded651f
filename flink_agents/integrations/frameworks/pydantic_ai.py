"""Pydantic AI agents run durably inside an action.

``await run_durably(ctx, agent, prompt)`` runs a ``pydantic_ai.Agent`` for
one turn inside an ``async`` action, every model request and every tool
call journaled through a ``DurableTurn`` (``durable_turn.py``): a replay
returns the recorded responses and results, a completed tool call never
runs again.

Extension point: Pydantic AI's public durable-execution surface
(``pydantic_ai.durable_exec``, its ``AGENTS.md`` "Building a new durable
execution engine"): a ``BaseDurabilityCapability`` subclass whose backend (a
``CallableOperationBackend``) runs each durable unit the framework hands it
(``execute(operation_id, name, body, cache_key, config)``) as a journaled
call. It is added to the run as a per-run capability
(``agent.run(capabilities=[...])``, bound by ``Agent._bind_run_capabilities``
through ``for_agent``), so the user's agent is not modified. The codec is
``JSON_CODEC``: the framework reduces each result to JSON inside the unit
and validates it back outside it, on a first run and on a replay alike.

- **Model requests** (``ModelRequestId``): journaled at ``<anchor>/m<i>``
  as ``chat:pydantic_ai/<name>``; the stored response is the
  ``ModelResponse`` JSON, its ``ToolCallPart.tool_call_id``s rewritten to
  ``turn.tool_call_id(i, j)`` (the provider's id kept in the part's
  ``provider_details["flink_agents_provider_id"]``). Digest: see
  ``request_digest`` (no timestamps, usage, provider ids or metadata).
- **Tool calls** (``ToolsetCallToolId``: function, dynamic and MCP tools):
  journaled at ``<anchor>/t/<rewritten call id>`` as ``tool:<name>``, the
  result the framework's ``CallToolResult`` JSON (``{"result", "kind"}``;
  ``ModelRetry``/``CallDeferred`` are wrapped as values by the framework, so
  they replay as such). What the call added to the run's ``RunUsage`` (a
  tool delegating to another agent with ``usage=ctx.usage``) is journaled
  with its result and added again on a replay (``RunUsageLedger``), so
  ``result.usage`` after a replay is that of an uninterrupted run. Model
  requests need none of this: their usage is in the journaled
  ``ModelResponse``, which the framework adds to the run's usage itself.
- **Steering**: a capability's ``before_model_request`` hook takes the
  key's steering messages (journaled) and appends them as
  ``UserPromptPart``s to the last ``ModelRequest`` of the run: they reach
  the request and stay in the run's history (``result.all_messages()``).
- **Ids**: ``run_id`` is ``turn.run_id`` (per record and turn);
  ``conversation_id`` is per key and agent (``conversation_id``).
  Message timestamps come from the framework's ``now_utc()`` and cannot be
  injected: they are kept out of digests.
- **Conversations** (``conversation="per_key"``): the key's stored
  messages (``ModelMessagesTypeAdapter`` JSON) are the run's
  ``message_history``; ``result.new_messages()`` is appended as one turn.

Refused with an error: streamed model requests (an ``event_stream_handler``,
``run_stream``), other durable units (``@durable_operation`` capability
methods, tool-argument validators, message compaction, workspaces), and a
``run_id`` or ``conversation_id`` given by the caller.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart
from pydantic_ai.usage import RunUsage

from flink_agents.runtime.durable import Usage, trust_package
from flink_agents.runtime.durable import json_data
from flink_agents.integrations.frameworks.conversation import FrameworkConversation
from flink_agents.integrations.frameworks.durable_turn import (
    DurableTurn, ToolCallView, current_turn, require_action_context, steering_texts, token_count,
)

# A turn's journal rows hold Pydantic AI messages, results and errors; stored data may
# name their classes, and no others (runtime.durable.trust_package).
for _package in ("pydantic_ai", "pydantic_graph"):
    trust_package(_package)


__all__ = ["FRAMEWORK", "FlinkDurability", "RunUsageLedger", "conversation_id", "request_digest", "run_durably"]

FRAMEWORK = "pydantic_ai"
PROVIDER_ID_KEY = "flink_agents_provider_id"

# What the framework hands this runtime as one durable unit, and where
# (``pydantic_ai/durable_exec/_spec.py``): function tools are entered by the
# run; an MCP server's session is opened by the first unit that needs it and
# held for the run; discovery (``get_tools``) runs in the action, not journaled.
# Toolsets added per run (``toolsets=``, a per-run capability's) are not wrapped
# when the capability binds, so their tools would run unjournaled: refused.
ENGINE_SPEC = DurabilityEngineSpec(
    engine_name="Flink Agents",
    durable_unit_noun="journaled call",
    durable_container_noun="action",
    codec=JSON_CODEC,
    wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
    toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
    journal_discovery=False,
    sequential_tools_in_durable_context=False,
    unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
)


class _JournalBackend(CallableOperationBackend):
    """Runs each durable unit of one turn as a journaled call of ``turn``.

    ``execute`` gets the unit's ``body`` (returns the result as JSON) and
    ``cache_key`` (``_base.py``: a model request's is ``(model_id, messages,
    model_settings, model_request_parameters, run_context)``, a tool call's
    ``(name, tool_args, run_context, tool)``).
    """

    def __init__(self, turn: DurableTurn, name: str) -> None:
        super().__init__(
            namer=JournalOperationNamer(name),
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )
        self._turn = turn

    async def execute(self, *, operation_id: Any, name: str, body: Callable[[], Awaitable[object]],
                      cache_key: Tuple[object, ...], config: Any) -> object:
        turn = self._turn
        if isinstance(operation_id, ModelRequestId):
            if operation_id.streaming:
                raise NotImplementedError(
                    f"pydantic_ai agent {turn.agent!r}: a streamed model request cannot be journaled; run the "
                    "agent without event_stream_handler (agent.run, not run_stream)"
                )
            _expect_layout(cache_key, 5, "model request")
            _, messages, settings, parameters, _ = cache_key
            return await turn.model_request(
                request_digest(messages, settings, parameters), _rewriting_ids(turn, body), response_view,
                response_usage,
            )
        if isinstance(operation_id, ToolsetCallToolId):
            _expect_layout(cache_key, 4, "tool call")
            tool_name, tool_args, run_context = cache_key[0], cache_key[1], cache_key[2]
            call_id = getattr(run_context, "tool_call_id", None)
            if not call_id:
                raise RuntimeError(f"pydantic_ai agent {turn.agent!r}: tool {tool_name!r} was called without a tool call id")
            usage = getattr(run_context, "usage", None)
            ledger = RunUsageLedger(usage) if isinstance(usage, RunUsage) else None
            return await turn.tool_call(call_id, str(tool_name), _json(tool_args), body, usage=ledger)
        raise NotImplementedError(
            f"pydantic_ai agent {turn.agent!r}: the durable unit {name!r} ({type(operation_id).__name__}) is not "
            "supported by flink_agents (model requests and tool calls only): remove the capability method, "
            "args validator, compaction or workspace that asks for it"
        )


_RUN_USAGE = TypeAdapter(RunUsage)


class RunUsageLedger:
    """The run's ``RunUsage`` as a ``durable_turn.UsageLedger``: what a unit
    added is ``usage - before`` (``RunUsage.__sub__``, as the framework's
    own durable operations measure it), journaled as ``RunUsage`` JSON and
    added back with ``RunUsage.incr``.

    Limit (the framework's own, ``pydantic_ai._usage_attribution``): tools
    of one round that run at once and delegate with the same ``ctx.usage``
    each see what the others added meanwhile, so their journaled shares
    overlap and a replay of more than one of them adds the overlap twice.
    """

    def __init__(self, usage: RunUsage) -> None:
        self._usage = usage

    def snapshot(self) -> RunUsage:
        return copy.deepcopy(self._usage)  # ``details`` is a dict updated in place

    def added_since(self, before: RunUsage) -> Dict[str, Any] | None:
        added = self._usage - before
        if not added.has_values() and not getattr(added, "unmeasured_requests", 0):
            return None
        return _RUN_USAGE.dump_python(added, mode="json")

    def add(self, added: Any) -> None:
        try:
            usage = _RUN_USAGE.validate_python(added)
        except ValueError as bad:
            raise ValueError(f"journaled pydantic_ai usage is not a RunUsage: {bad}") from bad
        self._usage.incr(usage)


class FlinkDurability(BaseDurabilityCapability):
    """The durability capability of one ``run_durably`` turn (added per run).

    In the turn (``current_turn() is turn``) model requests and tool calls
    are journaled; elsewhere (a nested agent run inside a journaled tool,
    whose outer call is the unit) they pass through.
    """

    engine_spec = ENGINE_SPEC

    def __init__(self, turn: DurableTurn, name: str) -> None:
        super().__init__(name=name)
        self._turn = turn

    @property
    def in_durable_context(self) -> bool:
        return current_turn() is self._turn

    def get_durable_operation_backend(self) -> _JournalBackend:
        return _JournalBackend(self._turn, self.name)


@dataclass
class _Steering(AbstractCapability[Any]):
    """Before each model request of the turn: take the key's steering
    messages (journaled at ``<anchor>/s<i>``) and append them as user
    prompts to the run's last ``ModelRequest`` (documented hook
    ``AbstractCapability.before_model_request``; the messages stay in the
    run's history)."""

    turn: DurableTurn

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        if current_turn() is not self.turn:
            return request_context
        texts = steering_texts(self.turn.take_steering())
        if texts:
            last = ctx.messages[-1] if ctx.messages else None
            if not isinstance(last, ModelRequest):
                raise RuntimeError(f"pydantic_ai agent {self.turn.agent!r}: no model request to add steering to")
            last.parts = [*last.parts, *(UserPromptPart(content=text) for text in texts)]
        return request_context


def conversation_id(ctx: Any, name: str) -> str:
    """The Pydantic AI ``conversation_id`` of ``name``'s conversation with
    the record's key (UUIDv5 of journal id, key and name): the same for
    every record of the key."""
    identity = ctx.run_identity
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"flink-agents:{identity.journal_id}/{identity.key_text}/{FRAMEWORK}/{name}"))


async def run_durably(
    ctx: Any,
    agent: Agent[Any, Any],
    user_prompt: Any,
    *,
    name: Optional[str] = None,
    conversation: Optional[str] = None,
    conversation_max_messages: int = 40,
    conversation_max_tokens: Optional[int] = None,
    **run_kwargs: Any,
) -> Any:
    """Run ``agent`` for one turn inside the action, durably.

    Args:
        ctx: The action's context (the action must be ``async def``).
        agent: A ``pydantic_ai.Agent`` (its model and tools as built; use
            ``OpenAIChatModel`` etc., never a streaming-only model).
        user_prompt: The turn's prompt (``str`` or Pydantic AI user content).
        name: The agent's name in function ids (default ``agent.name``).
        conversation: ``"per_key"`` keeps a bounded conversation per key in
            short-term memory (see the module docstring), None none.
        conversation_max_messages: Message bound of the conversation.
        conversation_max_tokens: Estimated-token bound, or None.
        **run_kwargs: Passed to ``agent.run`` (``output_type``, ``deps``,
            ``model_settings``, ``usage_limits``, ``capabilities``, ...).

    Returns:
        The ``AgentRunResult`` (``.output``, ``.new_messages()``, ...).

    Raises:
        TypeError: ``agent`` is not a Pydantic AI agent, or ``ctx`` not an
            action's context.
        ValueError: No name, an unknown ``conversation``, or a keyword this
            function sets itself (``run_id``, ``conversation_id``,
            ``message_history`` with a conversation, ``event_stream_handler``).
        NotImplementedError: The run asks for a durable unit that is not a
            model request or a tool call, or for a streamed request.
    """
    require_action_context(ctx, FRAMEWORK)
    if not isinstance(agent, Agent):
        raise TypeError(f"run_durably needs a pydantic_ai.Agent, got {type(agent).__name__}")
    agent_name = name or agent.name
    if not agent_name:
        raise ValueError("run_durably needs the agent's name: give the Agent name=... or pass name=")
    if conversation not in (None, "per_key"):
        raise ValueError(f"conversation must be None or 'per_key', got {conversation!r}")
    for key in ("run_id", "conversation_id", "event_stream_handler"):
        if key in run_kwargs:
            raise ValueError(f"run_durably sets {key} itself (or cannot journal it); do not pass {key}=")
    store = (
        FrameworkConversation(FRAMEWORK, agent_name, conversation_max_messages, conversation_max_tokens)
        if conversation
        else None
    )
    if store is not None:
        if "message_history" in run_kwargs:
            raise ValueError("conversation='per_key' supplies message_history; do not pass both")
        run_kwargs["message_history"] = ModelMessagesTypeAdapter.validate_python(store.history(ctx.short_term_memory))
    with DurableTurn(ctx, FRAMEWORK, agent_name, prompt=_json(user_prompt)) as turn:
        capabilities = [FlinkDurability(turn, agent_name), _Steering(turn), *(run_kwargs.pop("capabilities", None) or ())]
        result = await agent.run(
            user_prompt,
            run_id=turn.run_id,
            conversation_id=conversation_id(ctx, agent_name),
            capabilities=capabilities,
            **run_kwargs,
        )
    if store is not None:
        store.append_turn(ctx.short_term_memory, ModelMessagesTypeAdapter.dump_python(result.new_messages(), mode="json"))
    return result


# -- digests and views --------------------------------------------------------

# Part fields a request depends on: kinds, text, tool names, arguments, call
# ids, results. Left out: timestamps, usage, provider names/ids/details, run
# and conversation ids (the turn's identity, not the request's).
_PART_FIELDS = ("part_kind", "content", "tool_name", "args", "tool_call_id", "outcome", "retry")
# Left out of a part's other fields: when it was made, the provider's ids,
# names, details and signatures (they come back with the journaled response),
# and what is never sent to the model. An id a part cannot do without (an
# instruction delta's: the block it replaces) is no provider's: kept.
_UNSEEN_PART_FIELDS = frozenset({"timestamp", "id", "provider_name", "provider_details", "signature", "metadata",
                                 "dynamic_ref"})


def request_digest(messages: Sequence[Any], settings: Any, parameters: Any) -> Dict[str, Any]:
    """The journal digest of a model request: ``{"messages": [{"kind",
    "instructions", "parts": [...]}], "settings", "tools", "output"}`` with
    each part as ``_part_digest`` shows it, the model settings, the function and
    output tools' names, descriptions and JSON schemas, the output mode and object schema."""
    dumped = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    projected = [
        {
            "kind": message.get("kind"),
            "instructions": message.get("instructions"),
            "parts": [_part_digest(part, shown) for part, shown in zip(original.parts, message.get("parts", []))],
        }
        for original, message in zip(messages, dumped)
    ]
    return {
        "messages": projected,
        "settings": _json(settings or {}),
        "tools": [[t.name, t.description, t.parameters_json_schema] for t in getattr(parameters, "function_tools", ()) or ()],
        "output": {
            "mode": getattr(parameters, "output_mode", None),
            "tools": [[t.name, t.description, t.parameters_json_schema] for t in getattr(parameters, "output_tools", ()) or ()],
            "object": _json(getattr(getattr(parameters, "output_object", None), "json_schema", None)),
            "allow_text": getattr(parameters, "allow_text_output", None),
        },
    }


def _part_digest(part: Any, dumped: Dict[str, Any]) -> Dict[str, Any]:
    """``_PART_FIELDS`` of a part, then every other field the model may see
    (a system prompt's ``context_id`` and ``scope``, ``tools_added``, a
    speech part's transcript...) where it is not at its default: the digest
    of a part that sets none of them is the one earlier releases journaled."""
    shown = {k: dumped[k] for k in _PART_FIELDS if dumped.get(k) is not None}
    for field in dataclasses.fields(part) if dataclasses.is_dataclass(part) else ():
        name = field.name
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if name in _PART_FIELDS or name not in dumped or (name in _UNSEEN_PART_FIELDS and not required):
            continue
        if required or getattr(part, name) != (
            field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
        ):
            shown[name] = dumped[name]
    return shown


def response_view(response: Dict[str, Any]) -> Tuple[Optional[str], List[ToolCallView]]:
    """``(text, [(id, tool name, arguments as JSON text)])`` of a
    ``ModelResponse`` JSON, for followers (output tools included)."""
    texts = [p["content"] for p in response.get("parts", []) if p.get("part_kind") == "text"]
    calls = [
        (p["tool_call_id"], p["tool_name"], p["args"] if isinstance(p["args"], str) else json.dumps(p["args"] or {}))
        for p in response.get("parts", [])
        if p.get("part_kind") == "tool-call"
    ]
    return ("".join(texts) if texts else None), calls


def response_usage(response: Dict[str, Any]) -> Tuple[Optional[str], Optional[Usage]]:
    """``(model_name, Usage)`` of a ``ModelResponse`` JSON: its
    ``RequestUsage`` (``input_tokens`` counts cache reads, as Pydantic AI's
    models report it; ``cache_read_tokens`` and the reasoning tokens,
    ``output_reasoning_tokens`` or ``details["reasoning_tokens"]``, only
    when above 0: Pydantic AI fills 0 for what a provider did not say)."""
    usage = response.get("usage")
    model = response.get("model_name")
    model = model if isinstance(model, str) and model else None
    if not isinstance(usage, dict):
        return model, None
    details = usage.get("details") if isinstance(usage.get("details"), dict) else {}
    cached = token_count(usage.get("cache_read_tokens"))
    reasoning = token_count(usage.get("output_reasoning_tokens")) or token_count(details.get("reasoning_tokens"))
    return model, Usage(
        token_count(usage.get("input_tokens")) or 0, token_count(usage.get("output_tokens")) or 0,
        cached or None, reasoning or None,
    )


def _rewriting_ids(turn: DurableTurn, body: Callable[[], Awaitable[object]]) -> Callable[[int], Awaitable[Any]]:
    """``call(index)`` for ``turn.model_request``: runs the request and gives
    its tool calls the turn's ids (the provider's in ``provider_details``)."""

    async def call(index: int) -> Any:
        response = await body()
        if not isinstance(response, dict):
            raise TypeError(f"pydantic_ai returned a {type(response).__name__} for a model request, expected its JSON")
        j = 0
        for part in response.get("parts", []):
            if part.get("part_kind") == "tool-call":
                details = dict(part.get("provider_details") or {})
                details[PROVIDER_ID_KEY] = part.get("tool_call_id")
                part["provider_details"] = details
                part["tool_call_id"] = turn.tool_call_id(index, j)
                j += 1
        return response

    return call


def _expect_layout(cache_key: Tuple[object, ...], size: int, what: str) -> None:
    """Check a unit's ``cache_key`` has the layout this module reads (the
    projections in ``pydantic_ai/durable_exec/_base.py``, 2.68).

    Raises:
        RuntimeError: Another layout (another Pydantic AI version).
    """
    if len(cache_key) != size:
        raise RuntimeError(
            f"pydantic_ai gave a {what} unit a cache key of {len(cache_key)} items, expected {size}: this "
            "integration supports pydantic-ai-slim 2.68 (pip install 'flink-agents-runtime[pydantic-ai]')"
        )


def _json(value: Any) -> Any:
    """``value`` as JSON data (pydantic and dataclass values included, sets
    sorted): the rule the built-in tool action shows tool results by
    (``runtime.durable.json_data``)."""
    return json_data(value)

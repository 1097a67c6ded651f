"""Google ADK agents run durably inside an action.

``run_durably(ctx, agent, message)`` runs an ADK ``LlmAgent`` for one record
with ``Runner.run_async`` and returns the events of the run. Every model
request and tool call of the agent goes through the action's journal
(``integrations.frameworks.durable_turn``), so a replay after a failover
returns the recorded responses and a completed tool call never runs again.

ADK's documented extension points used (google-adk 2.x):

- **Model**: the agent's model (``LlmAgent.canonical_model``, a ``BaseLlm``)
  is wrapped in a ``BaseLlm`` whose ``generate_content_async`` journals the
  ``LlmResponse``\\ s of one request (``model_dump(mode="json",
  exclude_none=True)``, rebuilt with ``LlmResponse.model_validate`` on the
  first run and on a replay alike; a streamed request is collected and its
  chunks replayed). Function call ids are rewritten inside the journaled
  region to ``turn.tool_call_id(request, j)`` (providers reuse ``call_0``
  or ``toolu_..`` ids; ADK pairs function responses by id).
- **Tools**: each tool of the agent (a plain function becomes ADK's
  ``FunctionTool``; a toolset's tools as it lists them, through a
  delegating ``BaseToolset``) is wrapped in a delegating ``BaseTool`` whose
  ``run_async`` is journaled as ``tool:<name>``; declarations, confirmation
  and ``process_llm_request`` are the wrapped tool's. ADK's callbacks
  (before/after/on-error) run around it as usual. The result is journaled as
  JSON (a pydantic model as ``model_dump(mode="json")``) together with the
  changes the tool made to ``tool_context.actions`` (``state_delta``,
  ``skip_summarization``, ``escalate``, ``transfer_to_agent``), which are
  re-applied on a replay, and the events the call put into the run
  (``tool_context.run_node(agent)`` runs an agent in the caller's
  invocation: its events, ``usage_metadata`` included, are the run's), which
  go through the runner again on a replay. The call runs in a context of
  its own whose ADK ids come from the call's own sequence
  (``turn.new_id("adk:<call id>")``), so ids a call asks for (an
  ``AgentTool``'s runner) do not shift the run's later ids on a replay. An
  ``AgentTool``'s agent runs in a runner and session of its own: its events
  and usage never reach the run (only the parent's plugins, which it
  inherits, see its model calls, on the first run only).
- **Ids, clock, randomness**: ADK's ``google.adk.platform`` providers
  (``uuid.set_id_provider``, ``time.set_time_provider``,
  ``set_random_provider``; ContextVars) are set for the run only, to
  ``turn.new_id("adk")``, the turn's journaled start time and
  ``turn.random``: event ids, the invocation id and event timestamps follow
  the record.
- **Steering**: before each model request the wrapper takes the key's
  steering messages (journaled) and adds them to the request as user
  contents (request-only, as a ``before_model_callback`` could: ADK rebuilds
  each request from the session's events and has no public API to append a
  user event mid-run). Taken messages are re-inserted at the same place in
  the turn's later requests, so the model keeps seeing them within the
  turn; they are not part of the stored conversation.
- **Conversation** (``conversation="per_key"``): an ``InMemorySessionService``
  session is rebuilt per record from the key's stored events
  (``Event.model_dump(mode="json", exclude_none=True)``), and the run's new
  events are stored after it, compacted by whole turns (a function call
  event never loses its function response event).

Refused (``ValueError``/``TypeError``): a root agent that is not an
``LlmAgent``, sub-agents, a
``RunConfig.tool_thread_pool_config`` (it runs async tools with
``asyncio.run`` on a worker thread, where the journal cannot be awaited),
live (bidi) streaming.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import json
from typing import Any, AsyncGenerator, Dict, List, Optional, Sequence, Tuple

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.platform import set_random_provider
from google.adk.platform import time as adk_time
from google.adk.platform import uuid as adk_uuid
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.base_toolset import BaseToolset
from google.adk.tools.function_tool import FunctionTool
from google.genai import types
from pydantic import BaseModel, PrivateAttr

from flink_agents.runtime.durable import Usage, trust_package
from flink_agents.integrations.frameworks.conversation import FrameworkConversation
from flink_agents.integrations.frameworks.durable_turn import (
    DurableTurn, current_turn, require_action_context, steering_texts, token_count,
)

# A turn's journal rows hold ADK events and the google-genai types in them; stored data may
# name their classes, and no others (runtime.durable.trust_package).
for _package in ("google.adk", "google.genai"):
    trust_package(_package)


__all__ = ["FRAMEWORK", "JournaledLlm", "JournaledTool", "JournaledToolset", "run_durably"]

FRAMEWORK = "google_adk"
_USER_ID = "flink_agents"
# The tool_context.actions fields a tool may change that are journaled with
# its result and re-applied on a replay.
_TOOL_ACTIONS = ("skip_summarization", "escalate", "transfer_to_agent")
# Inside a journaled tool call: the list the events it puts into the parent
# run's event queue are recorded in (see JournaledTool).
_TOOL_EVENTS: contextvars.ContextVar[Optional[List[Dict[str, Any]]]] = contextvars.ContextVar(
    "flink_agents_adk_tool_events", default=None,
)


async def run_durably(
    ctx: Any,
    agent: LlmAgent,
    new_message: Any,
    *,
    name: Optional[str] = None,
    conversation: Optional[str] = None,
    conversation_max_messages: int = 40,
    conversation_max_tokens: Optional[int] = None,
    run_config: Optional[RunConfig] = None,
    app_name: str = "flink_agents",
    plugins: Sequence[Any] = (),
    state: Optional[Dict[str, Any]] = None,
) -> List[Event]:
    """Run ``agent`` for one record, journaled; return the run's events.

    Args:
        ctx: The action's ``RunnerContext`` (the action is ``async def``).
        agent: An ADK ``LlmAgent`` without sub-agents; it is cloned, never
            changed.
        new_message: The user's message: text, or a ``types.Content``.
        name: The agent's name in journal function ids and the
            conversation's name (default ``agent.name``).
        conversation: ``None`` (a fresh session per record) or ``"per_key"``
            (the key's earlier events are the session's history).
        conversation_max_messages: Events kept per key (whole turns).
        conversation_max_tokens: Estimated-token bound, or None.
        run_config: ADK's ``RunConfig`` (no ``tool_thread_pool_config``, no
            bidi streaming).
        app_name: The ADK app's name.
        plugins: ADK plugins for the ``App`` (run as usual; what they do
            outside the model and tools is not journaled).
        state: The session's initial state (the key's stored events, whose
            state deltas apply on top, come after it).

    Returns:
        The events ``Runner.run_async`` yielded (the final answer is
        ``events[-1].content``), the same on a replay.

    Raises:
        TypeError: ``agent`` is not an ``LlmAgent``, ``new_message`` is
            neither text nor ``types.Content``.
        ValueError: Sub-agents, an unknown ``conversation`` mode, a
            ``tool_thread_pool_config`` or bidi streaming.
    """
    require_action_context(ctx, FRAMEWORK)
    if not isinstance(agent, LlmAgent):
        raise TypeError(f"run_durably takes a google.adk LlmAgent, got {type(agent).__name__}")
    if agent.sub_agents:
        raise ValueError(
            f"ADK agent {agent.name!r} has sub-agents {[a.name for a in agent.sub_agents]}: not supported "
            "(wrap each sub-agent as an AgentTool, whose whole run is then one journaled tool call)"
        )
    if conversation not in (None, "per_key"):
        raise ValueError(f"conversation must be None or 'per_key', got {conversation!r}")
    run_config = run_config or RunConfig()
    if run_config.tool_thread_pool_config is not None:
        raise ValueError(
            "RunConfig.tool_thread_pool_config runs async tools with asyncio.run on worker threads, where the "
            "journal cannot be awaited; leave it unset (tools run as tasks on the action's loop)"
        )
    if run_config.streaming_mode == StreamingMode.BIDI:
        raise ValueError("bidi (live) streaming cannot be journaled; use StreamingMode.NONE or SSE")
    message = _user_content(new_message)
    name = name or agent.name
    store = (
        FrameworkConversation(FRAMEWORK, name, conversation_max_messages, conversation_max_tokens)
        if conversation else None
    )
    history = store.history(ctx.short_term_memory) if store else []
    durable_agent = _durable_agent(agent)
    prompt = message.model_dump(mode="json", exclude_none=True)

    with DurableTurn(ctx, FRAMEWORK, name, prompt=prompt) as turn:
        # A task of its own: the platform providers are ContextVars; set in
        # the task's copy of the context, they end with the run.
        events = await asyncio.create_task(_run(
            turn, durable_agent, message, history, run_config, app_name, list(plugins), state,
        ))
    if store:
        store.append_turn(
            ctx.short_term_memory,
            [_event_json(e) for e in events if not e.partial],
        )
    return events


async def _run(
    turn: DurableTurn, agent: LlmAgent, message: types.Content, history: List[Dict[str, Any]],
    run_config: RunConfig, app_name: str, plugins: List[Any], state: Optional[Dict[str, Any]],
) -> List[Event]:
    adk_uuid.set_id_provider(lambda: turn.new_id("adk"))
    adk_time.set_time_provider(lambda: turn.started_at)
    set_random_provider(lambda: turn.random)
    sessions = InMemorySessionService()
    session_id = f"s-{turn.run_id}"
    session = await sessions.create_session(
        app_name=app_name, user_id=_USER_ID, session_id=session_id, state=copy.deepcopy(state) if state else None,
    )
    for stored in history:
        await sessions.append_event(session, Event.model_validate(stored))
    runner = Runner(app=App(name=app_name, root_agent=agent, plugins=plugins), session_service=sessions)
    events: List[Event] = []
    # yield_user_message: the user's event ADK makes of the message is
    # returned, and stored with the turn.
    async for event in runner.run_async(
        user_id=_USER_ID, session_id=session_id, new_message=message, run_config=run_config,
        yield_user_message=True,
    ):
        events.append(event)
    return events


def _user_content(new_message: Any) -> types.Content:
    if isinstance(new_message, str):
        return types.Content(role="user", parts=[types.Part(text=new_message)])
    if isinstance(new_message, types.Content):
        return new_message
    raise TypeError(f"new_message must be text or a google.genai types.Content, got {type(new_message).__name__}")


def _event_json(event: Event) -> Dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def _durable_agent(agent: LlmAgent) -> LlmAgent:
    """A clone of ``agent`` with its model and tools journaled."""
    model = agent.canonical_model
    tools: List[Any] = []
    for tool in agent.tools:
        if isinstance(tool, BaseToolset):
            tools.append(JournaledToolset(tool))
        else:
            tools.append(JournaledTool(tool if isinstance(tool, BaseTool) else FunctionTool(tool)))
    return agent.clone(update={"model": JournaledLlm(inner=model), "tools": tools})


# -- the model ------------------------------------------------------------------------------------


class JournaledLlm(BaseLlm):
    """A ``BaseLlm`` journaling each request of ``inner`` in the running
    ``DurableTurn`` (outside a turn, or inside a journaled body, it calls
    ``inner`` directly).

    Journaled: ``{"content", "tool_calls"}`` for followers and, as the
    response, the list of ``LlmResponse`` JSON dicts, function call ids
    rewritten. Digest: model, contents (roles, text, function calls and
    responses with ids), system instruction, tool declarations and the
    response schema; no ids or timestamps of ADK's events.
    """

    model: str = "journaled"
    inner: BaseLlm
    # Steering taken in this turn: (index in contents, texts), re-inserted
    # into later requests at the same place.
    _steering: List[Tuple[int, List[str]]] = PrivateAttr(default_factory=list)

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        self.model = self.inner.model

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False,
    ) -> AsyncGenerator[LlmResponse, None]:
        turn = current_turn()
        if turn is None:
            async for response in self.inner.generate_content_async(llm_request, stream):
                yield response
            return
        # A deep copy but for the tools, which are shared: an AgentTool holds
        # an agent whose model holds a client (locks, sockets: not copyable).
        tools = llm_request.tools_dict
        request = copy.deepcopy(llm_request, {id(tools): dict(tools)})
        request.contents = list(request.contents)
        taken = steering_texts(turn.take_steering())
        if taken:
            self._steering.append((len(request.contents), taken))
        for at, texts in reversed(self._steering):
            request.contents[at:at] = [types.Content(role="user", parts=[types.Part(text=t)]) for t in texts]

        async def call(index: int) -> List[Dict[str, Any]]:
            responses = [r async for r in self.inner.generate_content_async(request, stream)]
            return [_rewrite_call_ids(turn, index, r).model_dump(mode="json", exclude_none=True) for r in responses]

        def usage(responses: List[Dict[str, Any]]) -> Tuple[Optional[str], Optional[Usage]]:
            model, used = response_usage(responses)
            return model or (self.model if isinstance(self.model, str) else None), used

        stored = await turn.model_request(_request_digest(request), call, _view, usage)
        for response in stored:
            yield LlmResponse.model_validate(response)

    def connect(self, llm_request: LlmRequest) -> Any:
        raise ValueError("live (bidi) connections of an ADK model cannot be journaled")


def _rewrite_call_ids(turn: DurableTurn, index: int, response: LlmResponse) -> LlmResponse:
    calls = [p.function_call for p in (response.content.parts or []) if p.function_call] if response.content else []
    for j, call in enumerate(calls):
        call.id = turn.tool_call_id(index, j)
    return response


def _request_digest(request: LlmRequest) -> Dict[str, Any]:
    config = request.config
    declarations = [
        d.model_dump(mode="json", exclude_none=True)
        for tool in (config.tools or []) if isinstance(tool, types.Tool)
        for d in (tool.function_declarations or [])
    ]
    return {
        "model": request.model,
        "contents": [c.model_dump(mode="json", exclude_none=True) for c in request.contents],
        "system_instruction": _dump(config.system_instruction),
        "tools": declarations,
        "response_schema": _dump(config.response_schema) or config.response_json_schema,
    }


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool, dict)) else repr(value)


def response_usage(responses: List[Dict[str, Any]]) -> Tuple[Optional[str], Optional[Usage]]:
    """``(model_version, Usage)`` of a journaled request's responses: the
    last ``usage_metadata`` (a stream reports its totals at the end):
    input ``prompt_token_count`` (cached ones included), output
    ``candidates_token_count`` plus ``thoughts_token_count``, reasoning
    ``thoughts_token_count``, cached ``cached_content_token_count``."""
    model = next((r["model_version"] for r in reversed(responses)
                  if isinstance(r.get("model_version"), str) and r["model_version"]), None)
    usage = next((r["usage_metadata"] for r in reversed(responses) if isinstance(r.get("usage_metadata"), dict)), None)
    if usage is None:
        return model, None
    thoughts = token_count(usage.get("thoughts_token_count"))
    return model, Usage(
        token_count(usage.get("prompt_token_count")) or 0,
        (token_count(usage.get("candidates_token_count")) or 0) + (thoughts or 0),
        token_count(usage.get("cached_content_token_count")), thoughts,
    )


def _view(responses: List[Dict[str, Any]]) -> Tuple[Optional[str], List[Tuple[str, str, str]]]:
    """Text and function calls of the final (non-partial) response."""
    final = next((r for r in reversed(responses) if not r.get("partial")), responses[-1] if responses else {})
    parts = (final.get("content") or {}).get("parts") or []
    texts = [p["text"] for p in parts if p.get("text") and not p.get("thought")]
    calls = [
        (p["function_call"].get("id", ""), p["function_call"]["name"],
         json.dumps(p["function_call"].get("args") or {}, sort_keys=True))
        for p in parts if p.get("function_call")
    ]
    return ("".join(texts) if texts else None), calls


# -- the tools ------------------------------------------------------------------------------------


class JournaledTool(BaseTool):
    """A delegating ``BaseTool``: ``run_async`` of ``inner`` journaled as
    ``tool:<name>`` under the running turn (see the module docstring);
    everything else is ``inner``'s."""

    def __init__(self, inner: BaseTool) -> None:
        super().__init__(
            name=inner.name, description=inner.description, is_long_running=inner.is_long_running,
            custom_metadata=inner.custom_metadata, behavior=inner.behavior,
            response_scheduling=inner.response_scheduling,
        )
        self.inner = inner

    def _get_declaration(self) -> Optional[types.FunctionDeclaration]:
        return self.inner._get_declaration()

    async def process_llm_request(self, *, tool_context: Any, llm_request: LlmRequest) -> None:
        await self.inner.process_llm_request(tool_context=tool_context, llm_request=llm_request)
        # ADK calls the tool registered under the name: this wrapper, not inner.
        for name, tool in list(llm_request.tools_dict.items()):
            if tool is self.inner:
                llm_request.tools_dict[name] = self

    async def check_require_confirmation(self, args: Dict[str, Any], tool_context: Any) -> bool:
        return await self.inner.check_require_confirmation(args, tool_context)

    async def run_async(self, *, args: Dict[str, Any], tool_context: Any) -> Any:
        turn = current_turn()
        if turn is None:
            return await self.inner.run_async(args=args, tool_context=tool_context)

        call_id = tool_context.function_call_id or ""
        invocation = _record_tool_events(tool_context)
        ran = False

        async def body(recorded: List[Dict[str, Any]]) -> Dict[str, Any]:
            # In a context of its own: the ids ADK asks for in here (an
            # AgentTool's runner, a nested run's events) come from the call's
            # own sequence, so the run's later ids do not depend on whether
            # this call ran or was replayed; the events it adds to the run
            # are recorded.
            adk_uuid.set_id_provider(lambda: turn.new_id(f"adk:{call_id}"))
            _TOOL_EVENTS.set(recorded)
            return await self.inner.run_async(args=args, tool_context=tool_context)

        async def call() -> Dict[str, Any]:
            nonlocal ran
            ran = True
            recorded: List[Dict[str, Any]] = []
            result = await asyncio.create_task(body(recorded), context=contextvars.copy_context())
            actions = tool_context.actions
            changed = {k: getattr(actions, k) for k in _TOOL_ACTIONS if getattr(actions, k) is not None}
            stored = {
                "result": _json(result, f"tool {self.name!r} result"),
                "actions": _json({"state_delta": dict(actions.state_delta), **changed},
                                 f"tool {self.name!r} state/actions"),
            }
            if recorded:
                stored["events"] = recorded
            return stored

        stored = await turn.tool_call(call_id, self.name, _json(args, f"tool {self.name!r} arguments"), call)
        if not ran and stored.get("events"):
            if invocation is None:
                raise RuntimeError(
                    f"ADK tool {self.name!r}: its journaled call added events to the run, and this ADK run has no "
                    "event queue to add them to again on the replay"
                )
            # A replay: the events the call added the first time (a nested
            # agent's, with their usage_metadata) go through the runner again.
            for event in stored["events"]:
                await invocation._enqueue_event(Event.model_validate(event))
        actions = tool_context.actions
        for key, value in stored["actions"].items():
            if key == "state_delta":
                for state_key, state_value in value.items():
                    tool_context.state[state_key] = state_value
            else:
                setattr(actions, key, value)
        return stored["result"]


def _record_tool_events(tool_context: Any) -> Any:
    """The invocation context of ``tool_context`` (None when this ADK has
    none with an event queue), its event queue recording from now on what a
    journaled tool call puts into it (``_TOOL_EVENTS``).

    A tool can add events to its run: ``tool_context.run_node(agent)`` runs
    the agent inside the caller's invocation, and the agent's events (its
    model responses, with their ``usage_metadata``) go through the runner's
    event queue, are stored in the session and yielded to the caller. ADK has
    no public hook for them, so ``put`` of the invocation's queue is wrapped
    (once per queue): in a tool call's context (a ContextVar) each event is
    recorded as JSON when it is put. An AgentTool's agent runs in a runner of
    its own, whose events stay in it: nothing is recorded for it.
    """
    invocation = getattr(tool_context, "_invocation_context", None)
    queue = getattr(invocation, "_event_queue", None)
    if not isinstance(queue, asyncio.Queue) or not hasattr(invocation, "_enqueue_event"):
        return None
    if not getattr(queue, "_flink_agents_recording", False):
        put = queue.put

        async def recording_put(item: Any) -> None:
            recorded = _TOOL_EVENTS.get()
            event = item[0] if isinstance(item, tuple) and item else None
            if recorded is not None and isinstance(event, Event):
                recorded.append(_event_json(event))
            await put(item)

        queue.put = recording_put  # type: ignore[method-assign]
        queue._flink_agents_recording = True  # type: ignore[attr-defined]
    return invocation


class JournaledToolset(BaseToolset):
    """A delegating ``BaseToolset``: the tools ``inner`` lists (its prefix
    and filter applied, per request, outside the journal) wrapped in
    ``JournaledTool``; its request processing and auth config are ``inner``'s.
    ``close`` is left to the owner of ``inner``."""

    def __init__(self, inner: BaseToolset) -> None:
        super().__init__()
        self.inner = inner

    async def get_tools(self, readonly_context: Any = None) -> List[BaseTool]:
        return [JournaledTool(tool) for tool in await self.inner.get_tools_with_prefix(readonly_context)]

    async def process_llm_request(self, *, tool_context: Any, llm_request: LlmRequest) -> None:
        await self.inner.process_llm_request(tool_context=tool_context, llm_request=llm_request)

    def get_auth_config(self) -> Any:
        return self.inner.get_auth_config()


def _json(value: Any, what: str) -> Any:
    """``value`` as JSON data (a pydantic model dumped); TypeError if it is not."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON data to be journaled: {exc}") from exc

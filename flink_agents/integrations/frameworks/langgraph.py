"""LangGraph graphs run durably inside an action (``pip install 'flink-agents-runtime[langgraph]'``).

LangGraph does not own the model: a model request is a LangChain chat model
call inside a graph node, and tools run in a ``ToolNode``. So the building
blocks wrap the two documented extension points, and ``run_durably`` runs
the graph's ``ainvoke`` under one ``DurableTurn`` (``durable_turn.py``):

- ``durable_chat_model(model)``: a ``BaseChatModel`` (LangChain's documented
  way to write a chat model: ``_agenerate``, ``_llm_type``) around the user's
  model. Each request goes through ``turn.model_request``: the reply is
  journaled as ``{"message": message_to_dict(AIMessage), "generation_info",
  "llm_output"}`` and rebuilt with ``messages_from_dict`` on the first run
  and on a replay. ``bind_tools`` keeps the inner model's tool formatting.
- ``durable_tool_node(tools)``: a ``langgraph.prebuilt.ToolNode`` whose
  ``awrap_tool_call`` (``tool_call_wrapper``) journals each call's
  ``ToolMessage`` (``message_to_dict``) through ``turn.tool_call``. What
  the call added to the run's usage callbacks (``UsageMetadataCallbackHandler``
  among the run's callbacks, ``get_usage_metadata_callback()`` included: a
  tool running another graph adds its model calls there) is journaled with
  the result and added again on a replay (``CallbackUsageLedger``).
- ``steering_node``: a graph node that takes the key's steering messages and
  adds them to the state as ``HumanMessage``s (persisted: later requests and
  the conversation keep them). Put it right before the model node.
- ``durable_react_graph(model, tools)``: the ReAct loop built from the three
  (steering -> model -> ``tools_condition`` -> tools -> steering ...).

Ids. ``add_messages`` gives a message without an id a ``uuid4`` and
``BaseChatModel`` names an unnamed reply ``lc_run--<uuid7>``
(``langchain_core/language_models/chat_models.py``, ``_agenerate_with_cache``).
Here every message of the turn gets an id derived from the turn and its
meaning (input ``k``, reply of request ``i``, result of tool call ``id``,
steering message ``k`` before request ``i``), so ids are the same on a
replay, differ across records and keys, and a provider's ``call_0`` reused
every turn never replaces an older message (``add_messages`` replaces by
id). Ids never enter a digest. The graph's root run id (LangChain
callbacks' ``run_id``) is ``turn.run_id``; the callback run ids of nodes and
model runs are LangChain's ``uuid7``s (not injectable, never journaled).

Durability is the journal's: a graph with a checkpointer is refused
(LangGraph's checkpointer would save its own copy of each superstep), and so
are the sync paths (``invoke``: ``ToolNode`` runs sync tool rounds in a
thread pool) and tool results that are ``Command``s.

Interrupts. A node (or a tool) calling ``interrupt(value)`` parks the run on
a durable callback (``runtime.durable.await_review``; purpose ``approval``
when ``value`` is a dict whose ``type`` is ``"approval"``, else
``interrupt``), and its answer resumes the graph as
``Command(resume=<answer>)`` would. To resume at all, ``run_durably`` runs
the graph with an ``InMemorySaver`` of its own (``durability="exit"``: one
save, when the graph stops), which lives as long as the call: after a
failover the graph runs again from its input and the journal replays what
it did, so the saver is rebuilt, never restored. The callback sits at a
step named by meaning, ``<anchor>/i<k>/<where>`` (``where``: the tool call
id for a tool, else the node, its path and LangGraph step; ``k``: the
interrupts answered there before), so a tool whose result was journaled
and does not interrupt on a replay moves no other wait. LangGraph runs an
interrupted node again from its start on a resume: its model requests
before ``interrupt()`` (same task, same request) and its completed tool
calls are answered from what the first attempt journaled, not asked again.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

try:
    from langchain_core.callbacks import BaseCallbackManager, UsageMetadataCallbackHandler
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
        message_to_dict,
        messages_from_dict,
        messages_to_dict,
    )
    from langchain_core.messages.ai import add_usage, subtract_usage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tracers import context as langchain_context
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.config import get_config
    from langgraph.errors import GraphInterrupt
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import Command, Interrupt
    from pydantic import BaseModel
except ImportError as error:  # pragma: no cover - depends on the extra
    raise ImportError(
        "flink_agents.integrations.frameworks.langgraph needs LangGraph: pip install 'flink-agents-runtime[langgraph]'"
    ) from error

from flink_agents.runtime.durable import APPROVAL_PURPOSE, INTERRUPT_PURPOSE, Usage, await_review, trust_package
from flink_agents.integrations.frameworks.conversation import FrameworkConversation
from flink_agents.integrations.frameworks.durable_turn import (
    DurableTurn, ToolCallView, current_turn, position_id, require_action_context, steering_texts, token_count,
)

# A turn's journal rows hold LangChain messages and LangGraph's values; stored data may
# name their classes, and no others (runtime.durable.trust_package).
for _package in ("langchain_core", "langgraph"):
    trust_package(_package)


__all__ = [
    "CallbackUsageLedger",
    "DurableChatModel",
    "durable_chat_model",
    "durable_react_graph",
    "durable_tool_node",
    "run_durably",
    "steering_node",
    "tool_call_wrapper",
]

FRAMEWORK = "langgraph"
MESSAGES_KEY = "messages"


class _GraphRun:
    """What one ``run_durably`` keeps across the resumes of its graph.

    Attributes:
        replies: Per LangGraph task (its ``checkpoint_ns``, the same when
            the task runs again on a resume), the model requests it made, in
            order: ``(digest as JSON text, response)``.
        cursor: Per task, the requests it made since the last resume.
        tool_results: Journaled ``ToolMessage`` dicts by tool call id (a
            resumed ``ToolNode`` runs its completed calls again).
        tool_interrupts: ``(tool call id, tool name)`` by LangGraph
            interrupt id, for interrupts raised inside a tool.
        asked: Interrupts answered so far per place (see ``_review_step``).
    """

    def __init__(self) -> None:
        self.replies: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
        self.cursor: Dict[str, int] = {}
        self.tool_results: Dict[str, Dict[str, Any]] = {}
        self.tool_interrupts: Dict[str, Tuple[str, str]] = {}
        self.asked: Dict[str, int] = {}


_RUN: contextvars.ContextVar[Optional[_GraphRun]] = contextvars.ContextVar("flink_agents_langgraph_run", default=None)


class _ToolInterrupted(BaseException):
    """Carries a tool's ``GraphInterrupt`` out of its journaled call, which
    journals an ``Exception`` but lets a ``BaseException`` pass: the
    interrupted call is not journaled, and runs again on the resume."""

    def __init__(self, interrupt: GraphInterrupt) -> None:
        super().__init__(interrupt)
        self.interrupt = interrupt


def _task_ns() -> Optional[str]:
    """The running LangGraph task's ``checkpoint_ns`` (``node:<task id>``);
    None outside a graph's task."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # not inside a runnable
        return None
    ns = configurable.get("checkpoint_ns")
    return ns if isinstance(ns, str) and ns else None


def _message_id(turn: DurableTurn, what: str) -> str:
    """A message id from the turn's identity and the message's meaning
    (UUIDv5 text): the same on a replay, another one in another record."""
    return str(uuid.uuid5(turn.turn_id, f"langgraph:{what}"))


def _jsonable(value: Any) -> Any:
    """``value`` as deterministic JSON for a digest: a pydantic model class
    as its JSON schema, a model as its dump, other objects by type name
    (never a ``repr`` with an address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {"schema": value.model_json_schema()}
    if isinstance(value, BaseModel):
        return _jsonable(value.model_dump(mode="json"))
    return f"<{type(value).__qualname__}>"


def _project(message: BaseMessage) -> Dict[str, Any]:
    """What a request depends on in one message: its kind (and a chat
    message's role), name, content, tool calls (id, name, args), tool result
    pairing and set ``additional_kwargs``; never its id, response metadata,
    usage or a tool result's artifact."""
    shown: Dict[str, Any] = {"type": message.type, "content": _jsonable(message.content)}
    if message.name:
        shown["name"] = message.name
    if isinstance(message, AIMessage):
        shown["tool_calls"] = [{"id": c["id"], "name": c["name"], "args": _jsonable(c["args"])}
                               for c in message.tool_calls]
        if message.invalid_tool_calls:
            shown["invalid_tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
                                           for c in message.invalid_tool_calls]
    if isinstance(message, ToolMessage):
        shown["tool_call_id"] = message.tool_call_id
        shown["status"] = message.status
    if isinstance(message, ChatMessage):
        shown["role"] = message.role
    # What a chat model sends from here (an OpenAI "developer" role, a legacy
    # function call, audio), when set: earlier digests had none of it.
    extra = {k: v for k, v in message.additional_kwargs.items() if v is not None}
    if extra:
        shown["additional_kwargs"] = _jsonable(extra)
    return shown


def _text(content: Any) -> Optional[str]:
    """A reply's text: the string, or its text blocks joined; None if empty."""
    if isinstance(content, str):
        return content or None
    parts = [b if isinstance(b, str) else b.get("text", "") for b in content or []
             if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")]
    return "".join(parts) or None


def response_usage(response: Dict[str, Any]) -> Tuple[Optional[str], Optional[Usage]]:
    """``(model, Usage)`` of a journaled reply: the ``AIMessage``'s
    ``usage_metadata`` (``input_tokens`` counts cache reads;
    ``input_token_details.cache_read``, ``output_token_details.reasoning``
    when given) and ``response_metadata``'s ``model_name`` (or ``model``)."""
    data = response["message"]["data"]
    metadata = data.get("response_metadata") or {}
    model = metadata.get("model_name") or metadata.get("model")
    model = model if isinstance(model, str) and model else None
    usage = data.get("usage_metadata")
    if not isinstance(usage, dict):
        return model, None
    cached = (usage.get("input_token_details") or {}).get("cache_read")
    reasoning = (usage.get("output_token_details") or {}).get("reasoning")
    return model, Usage(token_count(usage.get("input_tokens")) or 0, token_count(usage.get("output_tokens")) or 0,
                        token_count(cached), token_count(reasoning))


def _view(response: Dict[str, Any]) -> Tuple[Optional[str], List[ToolCallView]]:
    data = response["message"]["data"]
    return _text(data.get("content")), [
        (c["id"], c["name"], json.dumps(c["args"], sort_keys=True)) for c in data.get("tool_calls") or []
    ]


def _rewrite_tool_call_ids(turn: DurableTurn, index: int, message: AIMessage) -> AIMessage:
    """The reply with its tool call ids rewritten to ``turn.tool_call_id``
    (in ``tool_calls``, ``invalid_tool_calls`` and the raw
    ``additional_kwargs["tool_calls"]``); the provider's ids are kept in
    ``response_metadata["provider_tool_call_ids"]``."""
    renamed: Dict[str, str] = {}
    calls = []
    for j, call in enumerate(message.tool_calls):
        new = turn.tool_call_id(index, j)
        if call.get("id"):
            renamed[call["id"]] = new
        calls.append({**call, "id": new})
    invalid = []
    for k, call in enumerate(message.invalid_tool_calls):
        new = turn.tool_call_id(index, len(calls) + k)
        if call.get("id"):
            renamed[call["id"]] = new
        invalid.append({**call, "id": new})
    extra = dict(message.additional_kwargs)
    if isinstance(extra.get("tool_calls"), list):
        extra["tool_calls"] = [
            {**raw, "id": renamed.get(raw.get("id"), raw.get("id"))} if isinstance(raw, dict) else raw
            for raw in extra["tool_calls"]
        ]
    metadata = dict(message.response_metadata)
    if renamed:
        metadata["provider_tool_call_ids"] = list(renamed)
    return message.model_copy(update={
        "tool_calls": calls, "invalid_tool_calls": invalid, "additional_kwargs": extra,
        "response_metadata": metadata, "id": _message_id(turn, f"reply:{index}"),
    })


class DurableChatModel(BaseChatModel):
    """A chat model whose requests are journaled in the running turn.

    Inside ``run_durably`` each request is one ``turn.model_request``
    (function ``chat:langgraph/<agent>``, position ``<anchor>/m<i>``). Outside
    a turn, or inside a journaled tool body (a graph run by a tool), the
    inner model is called as is.

    The inner model is called through its public ``agenerate`` without the
    graph's callbacks, those set in the context included (so a graph
    streamed with ``stream_mode="messages"`` gets whole replies, never an
    unjournaled token stream, and a usage callback counts each reply once,
    from this model, on the first run and on a replay alike).

    Attributes:
        inner: The user's chat model (e.g. ``ChatOpenAI``).
    """

    inner: BaseChatModel
    disable_streaming: Any = True

    @property
    def _llm_type(self) -> str:
        return f"durable-{self.inner._llm_type}"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """The inner model's tool formatting (its ``bind_tools`` kwargs), bound to this model."""
        return self.bind(**self.inner.bind_tools(tools, **kwargs).kwargs)

    def _generate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        raise TypeError(
            "a durable chat model is async only: call it with ainvoke inside an async node and run the graph "
            "with run_durably (graph.ainvoke); invoke runs nodes in threads outside the action's journal"
        )

    async def _agenerate(self, messages: List[BaseMessage], stop: Optional[List[str]] = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        turn = current_turn()
        if turn is None:
            return await self._ask(messages, stop, kwargs)
        digest = {"messages": [_project(m) for m in messages], "stop": stop, "kwargs": _jsonable(kwargs)}

        async def call(index: int) -> Dict[str, Any]:
            result = await self._ask(messages, stop, kwargs)
            generation = result.generations[0]
            message = _rewrite_tool_call_ids(turn, index, generation.message)
            return json.loads(json.dumps({
                "message": message_to_dict(message),
                "generation_info": generation.generation_info,
                "llm_output": result.llm_output,
            }, default=str))

        response = await self._request(turn, digest, call)
        message = messages_from_dict([response["message"]])[0]
        return ChatResult(
            generations=[ChatGeneration(message=message, generation_info=response["generation_info"])],
            llm_output=response["llm_output"],
        )

    async def _request(self, turn: DurableTurn, digest: Dict[str, Any],
                       call: Callable[[int], Any]) -> Dict[str, Any]:
        """The journaled response to ``digest``. A task that LangGraph runs
        again on a resume (it called ``interrupt()``) gets, for its ``k``-th
        request, what its first attempt got for the ``k``-th one when it asks
        the same (``_GraphRun.replies``): a resume asks the model nothing
        twice. Another request is a new one."""
        run, ns = _RUN.get(), _task_ns()
        if run is None or ns is None:
            return await turn.model_request(digest, call, _view, response_usage)
        k = run.cursor.get(ns, 0)
        run.cursor[ns] = k + 1
        made = run.replies.setdefault(ns, [])
        asked = json.dumps(digest, sort_keys=True, default=str)
        if k < len(made) and made[k][0] == asked:
            return made[k][1]
        response = await turn.model_request(digest, call, _view, response_usage)
        made[k:] = [(asked, response)]
        return response

    async def _ask(self, messages: List[BaseMessage], stop: Optional[List[str]], kwargs: Dict[str, Any]) -> ChatResult:
        with _without_context_callbacks():
            result = await self.inner.agenerate([messages], stop=stop, callbacks=None, **kwargs)
        generation = result.generations[0][0]
        if not isinstance(generation, ChatGeneration):
            raise TypeError(f"{type(self.inner).__name__} returned a {type(generation).__name__}, not a chat reply")
        return ChatResult(generations=[generation], llm_output=result.llm_output)


@contextlib.contextmanager
def _without_context_callbacks() -> Iterator[None]:
    """The callbacks set in the context (``get_usage_metadata_callback()``
    and the other handlers of LangChain's configure hooks, which join every
    callback manager made under them, ``callbacks=None`` or not) cleared
    while the inner model runs, so they see each reply once: from this
    model, on the first run and on a replay alike (else a usage callback
    counts a first run's request twice and its replay once). The hooks'
    registry is private to ``langchain_core.tracers.context``; without it
    nothing is cleared."""
    hooks = getattr(langchain_context, "_configure_hooks", [])
    tokens = [(hook[0], hook[0].set(None)) for hook in hooks if hook[0].get() is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def durable_chat_model(model: BaseChatModel) -> DurableChatModel:
    """``model`` with its requests journaled (see ``DurableChatModel``).

    Raises:
        TypeError: ``model`` is not a LangChain ``BaseChatModel`` (bind tools
            after wrapping: ``durable_chat_model(m).bind_tools(tools)``).
    """
    if isinstance(model, DurableChatModel):
        return model
    if not isinstance(model, BaseChatModel):
        raise TypeError(
            f"durable_chat_model needs a LangChain BaseChatModel, got {type(model).__name__} "
            "(wrap the model first, then bind_tools on the result)"
        )
    return DurableChatModel(inner=model)


async def tool_call_wrapper(request: Any, execute: Callable[[Any], Any]) -> ToolMessage:
    """``ToolNode(awrap_tool_call=tool_call_wrapper)``: one journaled tool call.

    The call (function ``tool:<name>``, position ``<anchor>/t/<call id>``,
    digest ``[name, args]``) runs ``execute(request)`` once; its
    ``ToolMessage`` is journaled with ``message_to_dict`` (id derived from the
    call id) and rebuilt on the first run and on a replay. Outside a turn it
    just runs.

    Raises:
        TypeError: The tool returned a ``Command`` (or a list): a state/flow
            update cannot be journaled as a tool result.
    """
    turn = current_turn()
    if turn is None:
        return await execute(request)
    call = request.tool_call
    graph_run = _RUN.get()
    if graph_run is not None and call["id"] in graph_run.tool_results:
        # LangGraph runs a ToolNode again on a resume: a completed call is not.
        return messages_from_dict([graph_run.tool_results[call["id"]]])[0]

    async def run() -> Dict[str, Any]:
        try:
            result = await execute(request)
        except GraphInterrupt as asked:
            raise _ToolInterrupted(asked) from None
        if not isinstance(result, ToolMessage):
            raise TypeError(
                f"tool {call['name']!r} returned a {type(result).__name__}; a durable ToolNode journals "
                "ToolMessage results only (a Command updates the graph's state and flow)"
            )
        result = result.model_copy(update={"id": _message_id(turn, f"tool:{call['id']}")})
        return json.loads(json.dumps(message_to_dict(result), default=str))

    ledger = CallbackUsageLedger.of(getattr(request, "runtime", None))
    try:
        data = await turn.tool_call(call["id"], call["name"], _jsonable(call["args"]), run, usage=ledger)
    except _ToolInterrupted as interrupted:
        if graph_run is not None:
            for asked in interrupted.interrupt.args[0]:
                graph_run.tool_interrupts[asked.id] = (call["id"], call["name"])
        raise interrupted.interrupt from None
    if graph_run is not None:
        graph_run.tool_results[call["id"]] = data
    return messages_from_dict([data])[0]


class CallbackUsageLedger:
    """The usage callbacks of a tool call's run (the handlers of its config
    that are ``UsageMetadataCallbackHandler``, in order) as a
    ``durable_turn.UsageLedger``: what a unit added is, per handler, each
    model's ``usage_metadata`` minus what it was before
    (``subtract_usage``), journaled as a list (one ``{model: usage}`` per
    handler) and added back with ``add_usage``.

    The usage of the graph's own model requests needs none of this: it is in
    the journaled reply (``AIMessage.usage_metadata``), which reaches the
    callbacks on a replay as on the first run. Limit: tools of one round
    that run at once report to the same handlers, so each sees what the
    others added meanwhile; a replay of more than one of them adds the
    overlap twice.
    """

    def __init__(self, handlers: Sequence[UsageMetadataCallbackHandler]) -> None:
        self._handlers = list(handlers)

    @classmethod
    def of(cls, runtime: Any) -> "CallbackUsageLedger":
        """The ledger of the handlers in ``runtime.config["callbacks"]``
        (a list or a callback manager; none outside a graph)."""
        callbacks = (getattr(runtime, "config", None) or {}).get("callbacks")
        if isinstance(callbacks, BaseCallbackManager):
            callbacks = callbacks.handlers
        handlers = [h for h in callbacks or [] if isinstance(h, UsageMetadataCallbackHandler)]
        return cls(handlers)

    def snapshot(self) -> List[Dict[str, Any]]:
        return [json.loads(json.dumps(h.usage_metadata)) for h in self._handlers]

    def added_since(self, before: List[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
        added = []
        for handler, then in zip(self._handlers, before):
            now = json.loads(json.dumps(handler.usage_metadata))
            added.append({model: subtract_usage(usage, then.get(model)) for model, usage in now.items()
                          if usage != then.get(model)})
        return added if any(added) else None

    def add(self, added: Any) -> None:
        """Add ``added`` to the handlers; nothing when the run has none now
        (no one counts its usage).

        Raises:
            ValueError: ``added`` is not one ``{model: usage}`` per handler.
        """
        if not self._handlers:
            return
        if not isinstance(added, list) or len(added) != len(self._handlers) \
                or not all(isinstance(usage, dict) for usage in added):
            raise ValueError(
                f"journaled langgraph usage is not one {{model: usage}} per usage callback of the run "
                f"({len(self._handlers)} now): {added!r:.200}"
            )
        for handler, usage in zip(self._handlers, added):
            with getattr(handler, "_lock", None) or contextlib.nullcontext():  # on_llm_end may run on a thread
                for model, tokens in usage.items():
                    handler.usage_metadata[model] = add_usage(handler.usage_metadata.get(model), tokens)


def _sync_tool_call_refused(request: Any, execute: Callable[[Any], Any]) -> Any:
    raise TypeError(
        f"tool {request.tool_call['name']!r} called on the sync path: a durable ToolNode runs only under "
        "ainvoke (the sync path runs tools in a thread pool, outside the action's journal)"
    )


def durable_tool_node(tools: Sequence[Any], **tool_node_kwargs: Any) -> ToolNode:
    """A ``ToolNode`` over ``tools`` whose calls are journaled (``tool_call_wrapper``).

    Args:
        tools: LangChain tools or functions, as for ``ToolNode``.
        **tool_node_kwargs: ``ToolNode``'s other arguments (``name``,
            ``handle_tool_errors``, ``messages_key``, ...). An
            ``awrap_tool_call`` of yours runs inside the journaled call.

    Raises:
        TypeError: A sync ``wrap_tool_call`` is given (the sync path is refused).
    """
    if tool_node_kwargs.get("wrap_tool_call") is not None:
        raise TypeError("durable_tool_node: wrap_tool_call (sync) is not supported; give awrap_tool_call")
    tool_node_kwargs.pop("wrap_tool_call", None)
    inner = tool_node_kwargs.pop("awrap_tool_call", None)

    async def wrapper(request: Any, execute: Callable[[Any], Any]) -> ToolMessage:
        if inner is None:
            return await tool_call_wrapper(request, execute)
        return await tool_call_wrapper(request, lambda req: inner(req, execute))

    return ToolNode(list(tools), awrap_tool_call=wrapper, wrap_tool_call=_sync_tool_call_refused,
                    **tool_node_kwargs)


async def steering_node(state: Any) -> Dict[str, List[BaseMessage]]:
    """A graph node: the key's waiting steering messages as ``HumanMessage``s.

    Takes them with ``turn.take_steering()`` (journaled at
    ``<anchor>/s<i>``, ``i`` the next model request), so put the node right
    before the model node (once per request). Outside a turn (or with no
    steering input) it adds nothing.
    """
    turn = current_turn()
    if turn is None:
        return {MESSAGES_KEY: []}
    before = turn.requests
    return {MESSAGES_KEY: [
        HumanMessage(text, id=_message_id(turn, f"steering:{before}:{k}"))
        for k, text in enumerate(steering_texts(turn.take_steering()))
    ]}


def durable_react_graph(model: BaseChatModel, tools: Sequence[Any], *, system_prompt: Optional[str] = None,
                        name: str = "react_agent") -> Any:
    """A compiled ReAct graph over ``MessagesState``: ``steering`` ->
    ``model`` -> (``tools_condition``) ``tools`` -> ``steering`` ... -> END.

    Args:
        model: The chat model (wrapped with ``durable_chat_model``).
        tools: Its tools (a ``durable_tool_node``); may be empty.
        system_prompt: A system message put before the messages of each
            request (not kept in the state).
        name: The graph's name (the turn's agent name in ``run_durably``).
    """
    llm = durable_chat_model(model)
    bound = llm.bind_tools(list(tools)) if tools else llm

    async def call_model(state: Dict[str, Any]) -> Dict[str, List[BaseMessage]]:
        messages = list(state[MESSAGES_KEY])
        if system_prompt:
            messages = [SystemMessage(system_prompt)] + messages
        return {MESSAGES_KEY: [await bound.ainvoke(messages)]}

    graph = StateGraph(MessagesState)
    graph.add_node("steering", steering_node)
    graph.add_node("model", call_model)
    graph.add_edge(START, "steering")
    graph.add_edge("steering", "model")
    if tools:
        graph.add_node("tools", durable_tool_node(tools))
        graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
        graph.add_edge("tools", "steering")
    else:
        graph.add_edge("model", END)
    return graph.compile(name=name)


def _input_messages(value: Any) -> Tuple[List[BaseMessage], Dict[str, Any]]:
    """(messages, the rest of the state) of ``run_durably``'s input."""
    if isinstance(value, str):
        return [HumanMessage(value)], {}
    if isinstance(value, BaseMessage):
        return [value], {}
    if isinstance(value, dict):
        rest = {k: v for k, v in value.items() if k != MESSAGES_KEY}
        messages = convert_to_messages(value.get(MESSAGES_KEY) or [])
        if not messages:
            raise ValueError(f"run_durably input state has no {MESSAGES_KEY!r}: the graph's model would be asked nothing")
        return messages, rest
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("run_durably input is an empty list of messages: the graph's model would be asked nothing")
        return convert_to_messages(value), {}
    raise TypeError(
        f"run_durably input must be a str, a message, a list of messages or a state dict, got {type(value).__name__}"
    )


def _check_journaled(turn: DurableTurn, agent: str, added: Sequence[BaseMessage]) -> None:
    """Refuse a run whose model replies or tool results did not go through
    the journal (a graph built with a plain chat model or ``ToolNode``): a
    failover would ask and act again.

    Raises:
        RuntimeError: More AI messages than journaled model requests, or
            more tool messages than journaled tool calls, were added.
    """
    replies = sum(1 for m in added if isinstance(m, AIMessage))
    results = sum(1 for m in added if isinstance(m, ToolMessage))
    if replies > turn.requests or results > turn.tool_calls:
        raise RuntimeError(
            f"langgraph graph {agent!r} added {replies} model replies and {results} tool results, but only "
            f"{turn.requests} model requests and {turn.tool_calls} tool calls went through the journal: build it "
            "with durable_chat_model(...) and durable_tool_node(...) (or durable_react_graph), else a failover "
            "asks the model and runs the tools again"
        )


def _is_approval(value: Any) -> bool:
    """Whether an ``interrupt(value)`` asks for an approval: a dict whose
    ``type`` is ``"approval"``."""
    return isinstance(value, dict) and value.get("type") == "approval"


def _review_place(run: _GraphRun, step: Any, task: Any, asked: Interrupt) -> Tuple[str, Dict[str, Any]]:
    """``(where, details)`` of an interrupt: where it sits by meaning (a
    tool's call id; else the node, its task path and the LangGraph step)
    and what a reviewer sees."""
    details: Dict[str, Any] = {"framework": FRAMEWORK, "node": task.name, "value": _jsonable(asked.value)}
    if asked.id in run.tool_interrupts:
        call_id, tool_name = run.tool_interrupts[asked.id]
        details.update(tool=tool_name, tool_call_id=call_id)
        return f"t.{position_id(call_id)}", details
    path = ".".join(str(part) for part in task.path)
    return f"n.{position_id(f'{task.name}.{path}.{step}')}", details


async def _answer_interrupts(turn: DurableTurn, run: _GraphRun, agent: str, graph: Any,
                             config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Wait for the answers to the interrupts the graph stopped on (in the
    order of their places); None when it stopped on none (it finished).

    Returns:
        ``{interrupt id: answer}``, for ``Command(resume=...)``.
    """
    snapshot = await graph.aget_state(config)
    step = (snapshot.metadata or {}).get("step")
    pending = []
    for task in snapshot.tasks:
        for asked in task.interrupts:
            where, details = _review_place(run, step, task, asked)
            pending.append((where, asked, task, details))
    if not pending:
        return None
    answers: Dict[str, Any] = {}
    for where, asked, task, details in sorted(pending, key=lambda item: item[0]):
        k = run.asked.get(where, 0)
        run.asked[where] = k + 1
        details["graph"] = agent
        purpose = APPROVAL_PURPOSE if _is_approval(asked.value) else INTERRUPT_PURPOSE
        answers[asked.id] = await await_review(turn.ctx, f"{turn.anchor}/i{k}/{where}", purpose, details,
                                               f"langgraph node {task.name}")
    return answers


async def run_durably(ctx: Any, graph: Any, input: Any, *, name: Optional[str] = None,
                      conversation: Optional[str] = None, conversation_max_messages: int = 40,
                      conversation_max_tokens: Optional[int] = None, **framework_kwargs: Any) -> Dict[str, Any]:
    """Run ``graph.ainvoke`` as one durable turn of the action (framework id ``langgraph``).

    The graph's model requests and tool calls are journaled where it uses
    ``durable_chat_model`` / ``durable_tool_node`` (``durable_react_graph``
    uses both); other work in its nodes is not (wrap it in
    ``ctx.durable_execute_async``).

    Args:
        ctx: The action's ``RunnerContext`` (the action is ``async def``).
        graph: A compiled graph whose state has a ``messages`` list
            (``MessagesState``), without a checkpointer.
        input: The user's message (str or message), a list of messages, or a
            state dict; its messages get ids derived from the record.
        name: The agent name in function ids and the conversation (default:
            the graph's name).
        conversation: ``"per_key"`` keeps the key's messages in short-term
            memory (``FrameworkConversation``) and passes them before the
            input; None keeps nothing.
        conversation_max_messages, conversation_max_tokens: The
            conversation's bounds (whole turns are dropped).
        **framework_kwargs: ``graph.ainvoke``'s other arguments (``config``,
            ``context``, ...). ``config["run_id"]`` is set to the turn's run
            id, ``config["configurable"]["thread_id"]`` to its text (the
            thread of the run's own ``InMemorySaver``); ``durability``
            defaults to ``"exit"``.

    Returns:
        The graph's final state (``ainvoke``'s last result, after every
        interrupt was answered).

    Raises:
        ValueError: ``conversation`` is not None or ``"per_key"``; the graph
            has a checkpointer; a bound is out of range.
        TypeError: ``graph`` has no ``ainvoke``, or ``input`` is of another type.
        ApprovalTimedOut: An approval interrupt got no decision within
            ``approvals.timeout_s`` under ``approvals.on_timeout: fail``.
        CallbackRejected, CallbackTimeout, CallbackCancelled: Another
            interrupt's callback ended without an answer.
    """
    require_action_context(ctx, FRAMEWORK)
    if conversation not in (None, "per_key"):
        raise ValueError(f"conversation must be None or 'per_key', got {conversation!r}")
    if not callable(getattr(graph, "ainvoke", None)):
        raise TypeError(f"run_durably needs a compiled LangGraph graph (ainvoke), got {type(graph).__name__}")
    if getattr(graph, "checkpointer", None):
        raise ValueError(
            "run_durably refuses a graph with a checkpointer: the action's journal is its durability "
            "(compile the graph without checkpointer=)"
        )
    agent = name or getattr(graph, "name", None) or "graph"
    store = FrameworkConversation(FRAMEWORK, agent, conversation_max_messages, conversation_max_tokens) \
        if conversation else None
    history = messages_from_dict(store.history(ctx.short_term_memory)) if store else []
    messages, rest = _input_messages(input)
    prompt = input if isinstance(input, str) else json.loads(json.dumps(messages_to_dict(messages), default=str))
    config = dict(framework_kwargs.pop("config", None) or {})
    framework_kwargs.setdefault("durability", "exit")
    # The run's own saver, so an interrupted graph can resume (module docstring).
    resumable = graph.copy(update={"checkpointer": InMemorySaver()})
    run = _GraphRun()
    run_token = _RUN.set(run)
    try:
        with DurableTurn(ctx, FRAMEWORK, agent, prompt=prompt) as turn:
            messages = [m if m.id else m.model_copy(update={"id": _message_id(turn, f"input:{k}")})
                        for k, m in enumerate(messages)]
            config["run_id"] = turn.turn_id
            config["configurable"] = {**(config.get("configurable") or {}), "thread_id": turn.run_id}
            state = await resumable.ainvoke({**rest, MESSAGES_KEY: history + messages}, config=config,
                                            **framework_kwargs)
            while (answers := await _answer_interrupts(turn, run, agent, resumable, config)) is not None:
                run.cursor.clear()  # the interrupted tasks run again from their start
                state = await resumable.ainvoke(Command(resume=answers), config=config, **framework_kwargs)
            _check_journaled(turn, agent, state.get(MESSAGES_KEY, [])[len(history) + len(messages):])
    finally:
        _RUN.reset(run_token)
    if store:
        known = {m.id for m in history}
        new = [m for m in state.get(MESSAGES_KEY, []) if m.id not in known]
        store.append_turn(ctx.short_term_memory, json.loads(json.dumps(messages_to_dict(new), default=str)))
    return state

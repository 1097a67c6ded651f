"""One agent-framework turn inside an action, journaled like a native turn.

An integration (``integrations.frameworks.<name>``) wraps its framework's
model and tools at the framework's documented extension points; every
model request and tool call then goes through a ``DurableTurn``:

- **Positions by meaning, not by task.** A turn takes one anchor in the
  action (``runtime.durable``'s ``anchor``: ``"<step>/turn<n>"``, in program order
  of the task that starts it). Under it, model request ``i`` is journaled
  at ``<anchor>/m<i>`` and a tool call at ``<anchor>/t/<tool call id>``;
  the steering take before request ``i`` at ``<anchor>/s<i>``. A
  framework's own task layout (a task per tool, pools, a client's lazy
  start) therefore cannot move a call to another position on a replay.
- **Tool call ids from the record.** The model wrapper rewrites the ids of
  the tool calls a response asks for to ``tool_call_id(i, j)``
  (``runtime.durable.tool_call_id``), inside the journaled
  region: unique within the turn and across a key's turns (providers reuse
  ``call_0`` every turn), the same on a replay. A tool call id used twice in
  one turn is refused.
- **The turn's start is journaled** (function ``turn:<framework>/<agent>``,
  no write of its own): its wall-clock start (``now``) and prompt. It commits
  with the first model request, so a plain turn costs 2 writes as a native
  one (the start, then the reply with the run's end), a replay 0.
- **Followers.** A model request is journaled as ``{"content", "tool_calls",
  "response"[, "usage"][, "model"]}`` (the first two in ``ChatMessage``
  shape, ``response`` the framework's own JSON, ``usage`` its tokens as
  ``Usage.as_dict()`` and ``model`` the responding model, read from the
  framework's response by the integration), so the progress stream shows a
  ``model_reply`` with its tool calls and usage, and each ``tool:<name>``
  result, as for native turns; the metrics count the usage once.
- **Ids, randomness, clock.** ``run_id`` and ``new_id`` derive from the
  record's identity and the anchor (UUIDv5); ``now`` is the journaled start
  time; ``random`` is seeded from the run id.
- **Nesting.** Inside a journaled body (a tool that runs another framework
  agent) ``current_turn()`` is None: the outer call is the journaled unit,
  and what runs inside it is not journaled again.

- **Usage.** A tool call can add to a usage object of the framework's run
  (a Pydantic AI tool delegating to another agent with ``usage=ctx.usage``).
  Given a ``UsageLedger``, ``tool_call`` journals what the call added with
  its result (``{USAGE_KEY: added, "unit": result}``, in the entry written
  anyway: no write of its own) and adds it again when a replay returns the
  result without running the call, so a run's usage after a replay is the
  usage of an uninterrupted run. Entries without it (nothing added, or
  written by an earlier release) replay as they are.

Errors raised by a wrapped call are journaled (type, message) and re-raised
on a replay, as for ``durable_execute``.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import hashlib
import json
import random
import re
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple

import flink_agents.runtime.durable as durable

__all__ = [
    "USAGE_KEY", "DurableTurn", "ToolCallView", "UsageLedger", "current_turn", "in_journaled_body",
    "position_id", "require_action_context", "steering_texts", "token_count",
]

# (id, name, arguments as JSON text) of one tool call in a model response.
ToolCallView = Tuple[str, str, str]

_CURRENT: contextvars.ContextVar[Optional["DurableTurn"]] = contextvars.ContextVar(
    "flink_agents_framework_turn", default=None
)
_IN_BODY: contextvars.ContextVar[bool] = contextvars.ContextVar("flink_agents_framework_body", default=False)
_SAFE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,80}")

# The key under which a journaled unit's result carries the usage it added.
USAGE_KEY = "flink_agents_usage"


class UsageLedger(Protocol):
    """A framework run's usage object, as ``DurableTurn.tool_call`` reads
    and re-applies it (one per integration: ``pydantic_ai``'s ``RunUsage``,
    ...)."""

    def snapshot(self) -> Any:
        """The usage now (an opaque copy)."""

    def added_since(self, before: Any) -> Any:
        """What was added since ``snapshot()`` gave ``before``, as JSON data;
        None (or empty) when nothing was."""

    def add(self, added: Any) -> None:
        """Add ``added`` (what ``added_since`` gave, read back) to the usage.

        Raises:
            ValueError: ``added`` is not usage this ledger wrote.
        """


def with_usage(result: Any, added: Any) -> Any:
    """``result`` as journaled with the usage its unit ``added``
    (``{USAGE_KEY: added, "unit": result}``; ``result`` itself when nothing was)."""
    return {USAGE_KEY: added, "unit": result} if added else result


def split_usage(stored: Any) -> Tuple[Any, Any]:
    """``(result, added usage or None)`` of what ``with_usage`` journaled;
    an entry without usage (written before, or nothing added) as is."""
    if isinstance(stored, dict) and len(stored) == 2 and USAGE_KEY in stored and "unit" in stored:
        return stored["unit"], stored[USAGE_KEY]
    return stored, None


def token_count(value: Any) -> Optional[int]:
    """``value`` when it is a token count (an int >= 0) in a framework's
    response JSON, else None (a model request's ``usage`` reader)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def current_turn() -> Optional["DurableTurn"]:
    """The turn the running code belongs to; None outside one, or inside a
    journaled body of one (the body is the unit: see the module docstring)."""
    if _IN_BODY.get():
        return None
    return _CURRENT.get()


def require_action_context(ctx: Any, framework: str) -> None:
    """Check ``ctx`` is the context an action of this runtime gets (before
    an integration reads its memory).

    Raises:
        TypeError: It is not.
    """
    durable.action_context(ctx, framework)


def in_journaled_body() -> bool:
    """Whether the running code is inside a journaled model request or tool
    call of a turn (a tool running another framework agent): an integration
    then runs the inner agent as is, unjournaled, since the outer call is
    the journaled unit."""
    return _IN_BODY.get()


def steering_texts(messages: Sequence[Any]) -> List[str]:
    """Steering messages as user-message text, in order.

    A string as is; a dict's ``content`` or ``text`` (a string, or a list of
    content blocks whose ``text`` parts are joined, as OpenAI's and
    Anthropic's user messages carry them); anything else as compact JSON
    (``str()`` if it has none). ``None`` and empty texts are skipped: a
    provider rejects an empty user message (Anthropic does).
    """
    texts = []
    for message in messages:
        text = _text_of(message)
        if text:
            texts.append(text)
    return texts


def _text_of(message: Any) -> str | None:
    if message is None or isinstance(message, str):
        return message
    if isinstance(message, dict):
        body = message.get("content", message.get("text"))
        if isinstance(body, str):
            return body
        if isinstance(body, list):
            return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in body)
    try:
        return json.dumps(message, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return str(message)


class DurableTurn:
    """One framework turn (one ``agent.run``) inside an action.

    Use it as a context manager around the framework's run; the
    integration's wrappers find it with ``current_turn()``::

        with DurableTurn(ctx, "pydantic_ai", "reviewer", prompt=text) as turn:
            result = await agent.run(text, run_id=turn.run_id)

    Args:
        ctx: The action's ``RunnerContext`` (the runtime's
            ``ActionContext``).
        framework: The framework's name in function ids (``pydantic_ai``).
        agent: The agent's name in function ids.
        prompt: What the turn was asked (JSON-like), shown to followers.

    Raises:
        TypeError: ``ctx`` is not an action's context of this runtime.
        RuntimeError: The action has returned, or is not ``async def``.
    """

    def __init__(self, ctx: Any, framework: str, agent: str, prompt: Any = None) -> None:
        ctx = durable.action_context(ctx, framework)
        if not ctx.active:
            raise RuntimeError(f"{framework} turn of {agent!r} started after action {ctx.action_name!r} returned")
        if not ctx.is_async:
            raise RuntimeError(
                f"action {ctx.action_name!r} is not async: a {framework} agent runs on the action's event loop, "
                f"so the action running {agent!r} must be 'async def' and await it"
            )
        self.framework = framework
        self.agent = agent
        self._ctx = ctx
        self.anchor: str = ctx.anchor("turn")
        start = ctx.record_at(
            self.anchor, f"turn:{framework}/{agent}",
            lambda: {"started_at": time.time(), "prompt": prompt},
        )
        self.started_at: float = start["started_at"]
        self.turn_id: uuid.UUID = durable.turn_id(ctx, self.anchor)
        self.requests = 0  # model requests made (or replayed) so far
        self._tool_steps: set[str] = set()
        self._ids: Dict[str, int] = {}
        self.random = random.Random(self.turn_id.int)
        self._token: contextvars.Token | None = None

    # -- the framework's run ------------------------------------------------

    def __enter__(self) -> "DurableTurn":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    @property
    def ctx(self) -> Any:
        """The action's context."""
        return self._ctx

    @property
    def run_id(self) -> str:
        """The framework's run id for this turn (UUIDv5 text)."""
        return str(self.turn_id)

    @property
    def tool_calls(self) -> int:
        """Tool calls journaled (or replayed) in this turn so far."""
        return len(self._tool_steps)

    @property
    def chat_function_id(self) -> str:
        return f"chat:{self.framework}/{self.agent}"

    def now(self) -> datetime.datetime:
        """The turn's clock: its journaled start (UTC), the same on a replay."""
        return datetime.datetime.fromtimestamp(self.started_at, tz=datetime.timezone.utc)

    def new_id(self, kind: str = "id") -> str:
        """The next id of ``kind`` in this turn (UUIDv5 text), in the order
        asked: deterministic for code that asks in program order."""
        n = self._ids.get(kind, 0)
        self._ids[kind] = n + 1
        return str(uuid.uuid5(self.turn_id, f"{kind}:{n}"))

    def tool_call_id(self, request_index: int, index: int) -> str:
        """The id to give the ``index``-th tool call of model request
        ``request_index`` (see the module docstring)."""
        return durable.tool_call_id(self.turn_id, request_index, index)

    # -- journaled units ---------------------------------------------------

    def take_steering(self) -> List[Any]:
        """The key's waiting steering messages, taken now and journaled
        before the next model request (``[]`` without a steering input)."""
        return self._ctx.take_steering_at(f"{self.anchor}/s{self.requests}")

    async def model_request(
        self,
        digest: Any,
        call: Callable[[int], Awaitable[Any]],
        view: Callable[[Any], Tuple[Optional[str], Sequence[ToolCallView]]],
        usage: Optional[Callable[[Any], Tuple[Optional[str], Optional[durable.Usage]]]] = None,
    ) -> Any:
        """Journal one model request.

        Args:
            digest: What the request depends on, as JSON (the journal checks
                a replay asks the same): keep volatile fields (timestamps,
                random message ids, usage) out.
            call: ``call(request_index)`` makes the request and returns the
                framework's response as JSON, its tool call ids rewritten
                with ``tool_call_id(request_index, j)``.
            view: ``(text, [(id, name, arguments)])`` of a response, for
                followers.
            usage: ``(response model name, Usage)`` of a response, either
                None where the framework reports none: journaled beside the
                response as ``"usage"`` (``Usage.as_dict()``) and
                ``"model"``, out of the digest, and counted in the metrics
                once per run (``runtime.execution.token_usage``).

        Returns:
            The response JSON ``call`` returned (journaled, or replayed).

        Raises:
            NondeterminismError: A replay asks something else at this request.
        """
        index = self.requests
        self.requests += 1

        async def run() -> Dict[str, Any]:
            with _journaled_body():
                response = await call(index)
            content, calls = view(response)
            stored: Dict[str, Any] = {
                "content": content,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                    for call_id, name, arguments in calls
                ],
                "response": response,
            }
            if usage is not None:
                model, used = usage(response)
                if used is not None:
                    stored["usage"] = used.as_dict()
                if model:
                    stored["model"] = model
            return stored

        stored = await self._ctx.journaled_call_at(
            f"{self.anchor}/m{index}", self.chat_function_id, digest, run, count_usage=True,
        )
        return stored["response"]

    async def tool_call(
        self, call_id: str, name: str, arguments: Any, call: Callable[[], Awaitable[Any]],
        usage: Optional[UsageLedger] = None,
    ) -> Any:
        """Journal one tool call (function ``tool:<name>``).

        Args:
            call_id: The call's id in the model's response (rewritten:
                ``tool_call_id``).
            name: The tool's name.
            arguments: Its arguments as JSON (in the digest).
            call: Runs the tool; returns its result as JSON.
            usage: The run's usage object the tool may add to (an agent it
                delegates to): what the call added is journaled with its
                result and added again on a replay (module docstring).

        Raises:
            RuntimeError: ``call_id`` was already used in this turn.
            NondeterminismError: A replay calls something else here.
        """
        step = f"{self.anchor}/t/{position_id(call_id)}"
        if step in self._tool_steps:
            raise RuntimeError(
                f"{self.framework} turn of {self.agent!r}: tool call id {call_id!r} ({name}) used twice in one "
                "turn; the integration's model wrapper should have given it a unique id"
            )
        self._tool_steps.add(step)

        ran = False

        async def run() -> Any:
            nonlocal ran
            ran = True
            before = usage.snapshot() if usage is not None else None
            with _journaled_body():
                result = await call()
            return with_usage(result, usage.added_since(before)) if usage is not None else result

        try:
            stored = await self._ctx.journaled_call_at(step, f"tool:{name}", [name, arguments], run)
        except Exception:
            raise  # journaled: a later call of this id replays it
        except BaseException:
            # Not journaled (a framework's control signal, a cancellation):
            # the framework may run the call again (LangGraph resumes an
            # interrupted tool by running it again).
            self._tool_steps.discard(step)
            raise
        result, added = split_usage(stored)
        if added and not ran:
            if usage is None:
                raise RuntimeError(
                    f"{self.framework} turn of {self.agent!r}: the journaled tool call {name!r} added usage, "
                    "but the integration gives no usage object to add it to on this replay"
                )
            usage.add(added)  # a replay: the usage the call added the first time
        return result


@contextlib.contextmanager
def _journaled_body() -> Iterator[None]:
    token = _IN_BODY.set(True)
    try:
        yield
    finally:
        _IN_BODY.reset(token)


def position_id(call_id: str) -> str:
    """``call_id`` (or another name) as a journal step segment: as is when
    short and plain, else a hash (no ``/`` may reach the step)."""
    if _SAFE_ID.fullmatch(call_id):
        return call_id
    return "h" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:24]

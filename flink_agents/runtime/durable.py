"""The runtime's public seam for integrations: what an agent-framework
integration (``flink_agents.integrations.frameworks``), an MCP item or a
memory backend needs to journal its work as the runtime's own turns are.

An integration imports this module and no other module of
``flink_agents.runtime`` (``tests/unit/test_layers.py`` checks it), so the
runtime may move its internals without breaking one. Modelled on Restate's
``extensions.py`` and Temporal's ``_Runtime``: a small, documented surface
over the running action, instead of ``hasattr`` probes of the context and
calls of its private methods.

**The action's context** (``action_context``): the ``ctx`` an action gets,
checked and typed as a ``DurableContext``:

- ``anchor(kind)``: a journal step of its own for a unit of work started
  here (a framework turn): ``"<step of the running task>/<kind><n>"``.
- ``journaled_call_at(step, function_id, digest_args, run)``: the awaited
  ``run()`` journaled at ``step`` under an anchor (a model request, a tool
  call); a replay returns the journaled result, or re-raises its error.
  With ``count_usage`` (a model request), the ``usage`` and ``model`` of
  the stored dict are counted in the metrics once per run.
- ``record_at(step, function_id, produce)``: a value the run decides itself
  (a turn's start: its clock, its prompt), journaled at ``step``; commits
  with the run's next write.
- ``journaled_call_sync(function_id, digest_args, run)``: a synchronous
  ``run()`` journaled at the action's next position (a memory backend).
- ``take_steering_at(step)``: the key's waiting steering messages, taken
  and journaled at ``step``.
- ``run_identity``, ``action_name``, ``active``, ``is_async``,
  ``short_term_memory``: who runs, and whether it may journal now.

**Ids of a turn**: ``turn_id(ctx, anchor)`` (UUIDv5 of the record and the
anchor: the framework's run id) and ``tool_call_id(turn_id, request, index)``.

**The codec** (what the journal keeps): ``encode``/``decode`` (an
``EncodeError`` names what cannot be journaled), ``trust_package`` (stored
data may name classes of a framework's package).

**Usage** (``Usage``): the one shape of a model call's tokens
(``runtime.execution.usage``), which a framework's model request journals
beside its response.

**Tool results**: ``json_data`` (a value as JSON data, as the built-in tool
action shows it), ``wrap_untrusted`` (text from outside, marked as data).

**Approvals**: ``await_approval(ctx, tool, call_id, arguments, model)``
parks a framework's tool call until a reviewer decides (``None``: run it;
else the text the model gets instead; ``runtime.features.approvals``).
``await_review(ctx, step, purpose, details, subject)`` parks a framework's
own question to a person (LangGraph's ``interrupt()``) on a callback at
``step`` and returns the answer (an approval's decision as a dict).

**Conversations** kept in a key's short-term memory, compacted as native
ones: ``conversation_path``, ``load_turns``, ``dump_turns``, ``flatten``,
``compact``, ``validate_bounds``, ``CHARS_PER_TOKEN``,
``MESSAGE_OVERHEAD_TOKENS``.
"""

from __future__ import annotations

import uuid
from typing import Any, Awaitable, Callable, List, Protocol

from flink_agents.api.memory_object import MemoryObject
from flink_agents.runtime.durability.codec import EncodeError, decode, encode
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.runtime.durability.ids import RunIdentity, framework_tool_call_id, framework_turn_id
from flink_agents.runtime.execution.context import ActionContext
from flink_agents.runtime.execution.usage import Usage
from flink_agents.runtime.features.approvals import (
    APPROVAL_PURPOSE,
    INTERRUPT_PURPOSE,
    await_approval,
    await_review,
)
from flink_agents.runtime.features.conversation import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    compact,
    conversation_path,
    dump_turns,
    flatten,
    load_turns,
    validate_bounds,
)
from flink_agents.runtime.features.tool_results import json_data
from flink_agents.runtime.features.untrusted import wrap_untrusted

__all__ = [
    "APPROVAL_PURPOSE",
    "CHARS_PER_TOKEN",
    "DurableContext",
    "EncodeError",
    "INTERRUPT_PURPOSE",
    "MESSAGE_OVERHEAD_TOKENS",
    "RunIdentity",
    "Usage",
    "action_context",
    "await_approval",
    "await_review",
    "compact",
    "conversation_path",
    "decode",
    "dump_turns",
    "encode",
    "flatten",
    "is_action_context",
    "json_data",
    "load_turns",
    "tool_call_id",
    "trust_package",
    "turn_id",
    "validate_bounds",
    "wrap_untrusted",
]


class DurableContext(Protocol):
    """The running action's context as an integration uses it (the
    runtime's ``ActionContext`` implements it; see the module docstring)."""

    action_name: str
    active: bool

    @property
    def is_async(self) -> bool: ...

    @property
    def run_identity(self) -> RunIdentity: ...

    @property
    def short_term_memory(self) -> MemoryObject: ...

    def anchor(self, kind: str) -> str: ...

    async def journaled_call_at(
        self, step: str, function_id: str, digest_args: Any, run: Callable[[], Awaitable[Any]],
        count_usage: bool = False,
    ) -> Any: ...

    def record_at(self, step: str, function_id: str, produce: Callable[[], Any]) -> Any: ...

    def journaled_call_sync(self, function_id: str, digest_args: Any, run: Callable[[], Any]) -> Any: ...

    def take_steering_at(self, step: str) -> List[Any]: ...

    def create_callback_at(
        self, step: str, purpose: str, timeout_s: float, *, details: str | None = None,
        keep_stored_timeout: bool = False,
    ) -> Awaitable[Any]: ...


def is_action_context(ctx: Any) -> bool:
    """Whether ``ctx`` is the context an action of this runtime gets."""
    return isinstance(ctx, ActionContext)


def action_context(ctx: Any, who: str) -> DurableContext:
    """``ctx`` as a ``DurableContext``, checked.

    Args:
        ctx: What the integration was given as the action's context.
        who: The integration, for the message (``pydantic_ai``).

    Raises:
        TypeError: ``ctx`` is not the context an action of this runtime gets.
    """
    if not isinstance(ctx, ActionContext):
        raise TypeError(f"a {who} turn needs the ctx an action of this runtime gets, got {type(ctx).__name__}")
    return ctx


def turn_id(ctx: DurableContext, anchor: str) -> uuid.UUID:
    """The id of the turn anchored at ``anchor`` (``ctx.anchor(...)``):
    UUIDv5 of the record's identity and the anchor, the same on a replay."""
    return framework_turn_id(ctx.run_identity, anchor)


def tool_call_id(turn: uuid.UUID, request_index: int, index: int) -> str:
    """The id to give the ``index``-th tool call of model request
    ``request_index`` of turn ``turn``: ``"fa<12 hex>-<request>-<index>"``,
    unique within the turn and across a key's turns."""
    return framework_tool_call_id(turn, request_index, index)

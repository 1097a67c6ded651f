"""Calling another agent as a sub-agent.

Register a child with ``add_resource(name, ResourceType.AGENT, ChildAgent())``;
in an ``async`` action::

    handle = ctx.get_resource(name, ResourceType.AGENT)
    result = await handle.submit(ctx, prompt)
    if result.success:
        outputs = result.result  # the child's OutputEvent outputs, in order

The child runs in-process as an isolated, durable run of its own plan: its
``InputEvent.input`` is ``prompt``; its memory, resources and events are its
own; its calls are journaled, and so is its result, so a replay after a
failover neither re-runs it nor repeats its model calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Awaitable, List

from pydantic import BaseModel, Field

__all__ = ["SubAgentHandle", "SubAgentResult"]


class SubAgentResult(BaseModel):
    """The outcome of one sub-agent call.

    Attributes:
        success: Whether the child's run finished without a failing action.
        result: The child's ``OutputEvent`` outputs, in emission order.
        error_message: ``"<ExceptionType>: <message>"`` of the failure, if any.
        session_id: The session the call ran in (its short-term memory scope).
        call_id: The call's id, derived from the calling action's identity.
    """

    success: bool
    result: List[Any] = Field(default_factory=list)
    error_message: str | None = None
    session_id: str
    call_id: str


class SubAgentHandle(ABC):
    """What ``ctx.get_resource(name, ResourceType.AGENT)`` returns."""

    name: str

    @abstractmethod
    def submit(
        self, ctx: Any, prompt: Any, session_id: str | None = None, call_id: str | None = None
    ) -> Awaitable[SubAgentResult]:
        """Start a call of the child with ``prompt``; await the result.

        Args:
            ctx: The calling action's context.
            prompt: The child's ``InputEvent.input`` (JSON-like).
            session_id: Share the child's short-term memory with other calls
                that pass the same id (default: a fresh session per call).
            call_id: An explicit call id (default: derived, see the module doc).

        Raises:
            RuntimeError: Called outside a running action, or from an action
                that is not ``async`` (it could not await the child).
        """

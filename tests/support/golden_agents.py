"""The canonical runs of ``tests/engine/test_golden_journals.py``.

They live in a module of their own because the journal names a durable
call by ``module:qualname``: a test module's import name depends on how
pytest imports it, this one's does not.

Calls that run side by side wait for each other (``Barrier``) and so land
in one loop turn, whatever the machine's load: timing cannot move a result
to another write.
"""

from __future__ import annotations

import asyncio
from typing import Any, List, Sequence

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.tools.tool import Tool
from tests.support.chat_turn import ChatTurnAgent

__all__ = ["RETRY", "async_gather", "one_tool_round", "parallel_tool_round", "plain_model_call",
           "reconciled_call", "retried_action", "sub_agent_call"]


class Barrier:
    """``wait`` returns in all ``n`` callers once all of them are inside."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inside = 0
        self.event: asyncio.Event | None = None

    async def wait(self) -> None:
        if self.event is None:
            self.event = asyncio.Event()
        self.inside += 1
        if self.inside == self.n:
            self.event.set()
        # Waiting in a task of its own, as wait_for did up to Python 3.11 (3.12's
        # awaits the coroutine directly, so the caller that sets the event ran on
        # at once): every caller resumes in arrival order on every Python, and
        # the golden journals hold one completion order.
        await asyncio.wait_for(asyncio.ensure_future(self.event.wait()), 10)


BARRIER = {"now": Barrier(3)}  # a fresh one per run (the agent factories)


# ---- chat runs: a deterministic in-process model -------------------------------------------

class ToolRounds(BaseChatModelConnection):
    """Asks for ``tools`` (all in one round, argument ``x`` = the call's
    index) until it has seen tool results, then answers with them."""

    tools: List[str] = []

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [m.content for m in messages if m.role == MessageRole.TOOL]
        if self.tools and not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": {"x": i}}}
                for i, name in enumerate(self.tools)
            ])
        user = [m.content for m in messages if m.role == MessageRole.USER]
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"answer to {user[-1]} from {results}")


class NoTools(ToolRounds):
    tools: List[str] = []


class OneTool(ToolRounds):
    tools: List[str] = ["double"]


class ThreeTools(ToolRounds):
    tools: List[str] = ["alpha", "beta", "gamma"]


def double(x: int) -> int:
    """Double a number."""
    return 2 * x


async def alpha(x: int) -> str:
    """Tool alpha."""
    await BARRIER["now"].wait()
    return f"alpha({x})"


async def beta(x: int) -> str:
    """Tool beta."""
    await BARRIER["now"].wait()
    return f"beta({x})"


async def gamma(x: int) -> str:
    """Tool gamma."""
    await BARRIER["now"].wait()
    return f"gamma({x})"


def plain_model_call() -> Agent:
    """Input -> the built-in chat action (one model call, no tools) -> output."""
    return ChatTurnAgent(NoTools)


def one_tool_round() -> Agent:
    """A model call asking for one tool, the tool, the model's answer."""
    return ChatTurnAgent(OneTool, {"double": double})


def parallel_tool_round() -> Agent:
    """A model call asking for three tools at once, which run side by side."""
    BARRIER["now"] = Barrier(3)
    return ChatTurnAgent(ThreeTools, {"alpha": alpha, "beta": beta, "gamma": gamma})


# ---- durable calls in an action -------------------------------------------------------------

async def lookup(i: int) -> str:
    await BARRIER["now"].wait()
    return f"L{i}"


def join(parts: List[str]) -> str:
    return "|".join(parts)


async def gather_lookups(event: Event, ctx: Any) -> None:
    parts = await asyncio.gather(*(ctx.durable_execute_async(lookup, i) for i in range(3)))
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(join, list(parts))))


def async_gather() -> Agent:
    """An async action gathering three durable calls, then one more."""
    BARRIER["now"] = Barrier(3)
    return Agent().add_action("fan", [InputEvent], gather_lookups)


FLAKY = {"failures_left": 0}
RETRY = {"error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001}


def email(to: str) -> str:
    return f"emailed {to}"


def fetch(x: str) -> str:
    if FLAKY["failures_left"]:
        FLAKY["failures_left"] -= 1
        raise ConnectionError("connection reset by peer")
    return f"fetched {x}"


async def email_then_fetch(event: Event, ctx: Any) -> None:
    receipt = await ctx.durable_execute_async(email, "ops@example.com")
    data = await ctx.durable_execute_async(fetch, event.input)
    ctx.send_event(OutputEvent(output=[receipt, data]))


def retried_action() -> Agent:
    """An action under ``error_strategy`` retry whose fetch fails once."""
    FLAKY["failures_left"] = 1
    return Agent().add_action("mail", [InputEvent], email_then_fetch, **RETRY)


# ---- a sub-agent call -------------------------------------------------------------------------

def upper(text: str) -> str:
    return text.upper()


def shout(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=ctx.durable_execute(upper, event.input)))


async def call_child(event: Event, ctx: Any) -> None:
    result = await ctx.get_resource("child", ResourceType.AGENT).submit(ctx, event.input)
    ctx.send_event(OutputEvent(output=result.result))


def sub_agent_call() -> Agent:
    """A parent action submitting its input to a child agent with one durable call."""
    child = Agent().add_action("shout", [InputEvent], shout)
    parent = Agent().add_action("call_child", [InputEvent], call_child)
    parent.add_resource("child", ResourceType.AGENT, child)
    return parent


# ---- a durable call with a reconciler ---------------------------------------------------------

def charge(order: str) -> str:
    return f"charged {order}"


def find_charge(order: str) -> Any:
    def reconcile() -> str:
        return f"found charge of {order}"

    return reconcile


def charge_once(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=ctx.durable_execute(charge, event.input, reconciler=find_charge(event.input))))


def reconciled_call() -> Agent:
    """One durable call with a reconciler (0.3.1): its started mark, then its result in its place."""
    return Agent().add_action("charge", [InputEvent], charge_once)

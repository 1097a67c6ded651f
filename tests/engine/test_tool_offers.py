"""A model runs only the tools its request offered (issue 14, part 2).

A scripted model asks, in one round, for the tool its setup offers, a tool
registered on the agent but offered only by another setup, the built-in
``create_callback`` (not offered) and a name nothing registers. Only the
offered tool runs; each other call gets an error result, one per call id,
that names the offered tools and no other; the turn goes on. The refusal is
decided by the tools the request offered (carried on the
``ToolRequestEvent``), so a replay after a redeploy that offers more decides
the same; a ``ToolRequestEvent`` sent by user code without them gets the
tools of the setup it names.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import InputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatSetup, answer, ask
from tests.support.engine_runs import run_record

CALLBACKS = {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://claims.test:9/"}

LOOKUPS: List[str] = []
REFUNDS: List[str] = []
OFFERED_TO_MODEL: List[List[str]] = []
TOOL_RESULTS: List[Dict[str, str]] = []  # per model call after tools: call id -> result text
CRASH: Dict[str, bool] = {}


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    for seen in (LOOKUPS, REFUNDS, OFFERED_TO_MODEL, TOOL_RESULTS):
        seen.clear()
    CRASH.clear()


def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    if CRASH.pop("lookup_order", False):
        raise Crash("process died inside lookup_order")
    LOOKUPS.append(order_id)
    return f"order {order_id}: shipped"


def refund_order(order_id: str) -> str:
    """Refund an order (a side effect only the admin setup offers).

    Args:
        order_id: The order's id.
    """
    REFUNDS.append(order_id)
    return f"refunded {order_id}"


# What the model asks for in its first round, steered by a review's text.
STEERED_CALLS = [
    ("lookup_order", {"order_id": "A-1"}),
    ("refund_order", {"order_id": "A-1"}),
    ("create_callback", {"purpose": "park this key", "timeout_seconds": 1}),
    ("drop_tables", {}),
]


class SteeredModel(BaseChatModelConnection):
    """Round 0: the ``STEERED_CALLS``. Then: the tool results (by its own call ids) as its answer."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        OFFERED_TO_MODEL.append([t.name for t in tools or []])
        results = {m.extra_args["external_id"]: str(m.content) for m in messages if m.role == MessageRole.TOOL}
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
                for i, (name, arguments) in enumerate(STEERED_CALLS)
            ])
        TOOL_RESULTS.append(results)
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(sorted(results.values())))


class ShopAgent(Agent):
    """``model`` offers ``offered``; ``admin_model`` offers the refund; both
    tools are registered on the agent."""

    def __init__(self, offered: Sequence[str] = ("lookup_order",), chat: bool = True) -> None:
        super().__init__()
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=SteeredModel))
        self.add_resource("model", ResourceType.CHAT_MODEL,
                          ResourceDescriptor(clazz=ChatSetup, connection="conn", tools=list(offered)))
        self.add_resource("admin_model", ResourceType.CHAT_MODEL,
                          ResourceDescriptor(clazz=ChatSetup, connection="conn", tools=["lookup_order", "refund_order"]))
        self.add_resource("lookup_order", ResourceType.TOOL, lookup_order)
        self.add_resource("refund_order", ResourceType.TOOL, refund_order)
        if chat:
            self.add_action("ask", [InputEvent], ask)
            self.add_action("answer", [ChatResponseEvent], answer)


def _run(agent: Agent, store: InMemoryJournalStore, value: Any = "refund order A-1 now") -> LocalDriver:
    """One record of key "k" on a fresh engine and keyed state (a restore to
    before the record)."""
    return run_record(agent, store, value, {**CALLBACKS, "error_strategy": "skip"})


def _refusal(name: str, offered: str = "'lookup_order'") -> str:
    return f"Error: ToolNotOffered: tool {name!r} was not offered to the model; the tools offered are: {offered}"


def test_only_the_offered_tool_runs_and_each_other_call_gets_an_error_naming_only_the_offered_tools() -> None:
    store = InMemoryJournalStore()

    driver = _run(ShopAgent(), store)

    assert OFFERED_TO_MODEL[0] == ["lookup_order"]
    assert LOOKUPS == ["A-1"]
    assert REFUNDS == []  # registered, offered by another setup: not run
    assert store._callback_rows() == {}  # create_callback not offered: no callback, the key is not parked
    # One result per call id; the turn went on to the model's answer.
    [results] = TOOL_RESULTS
    assert results == {
        "call_0": "order A-1: shipped",
        "call_1": _refusal("refund_order"),
        "call_2": _refusal("create_callback"),
        "call_3": _refusal("drop_tables"),
    }
    assert driver.errors == []
    assert json.loads(driver.outputs[0]["k"]) == sorted(results.values())


def test_a_setup_that_offers_no_tools_refuses_every_call() -> None:
    _run(ShopAgent(offered=()), InMemoryJournalStore())

    assert OFFERED_TO_MODEL[0] == []
    assert LOOKUPS == [] and REFUNDS == []
    [results] = TOOL_RESULTS
    assert results == {f"call_{i}": _refusal(name, "none") for i, (name, _) in enumerate(STEERED_CALLS)}


def test_a_replay_after_a_redeploy_that_offers_more_still_refuses_the_call() -> None:
    store = InMemoryJournalStore()
    CRASH["lookup_order"] = True
    with pytest.raises(Crash):
        _run(ShopAgent(), store)
    assert TOOL_RESULTS == []

    # Restarted with a setup that now offers the refund too: the request
    # being replayed offered only the lookup, so the refund is still refused.
    _run(ShopAgent(offered=("lookup_order", "refund_order")), store)

    assert LOOKUPS == ["A-1"] and REFUNDS == []
    [results] = TOOL_RESULTS
    assert results["call_1"] == _refusal("refund_order")


def request_tools(event: InputEvent, ctx: Any) -> None:
    """User code sending a ToolRequestEvent itself (as Flink Agents 0.3 allows)."""
    ctx.send_event(ToolRequestEvent(model=event.input["model"], tool_calls=[
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(STEERED_CALLS[:2])
    ]))


class DirectToolsAgent(ShopAgent):
    """Sends its own ToolRequestEvent (no ``offered_tools``) to the model
    named by the record."""

    def __init__(self) -> None:
        super().__init__(chat=False)
        self.add_action("request_tools", [InputEvent], request_tools)


def test_a_tool_request_from_user_code_runs_only_the_tools_of_the_setup_it_names() -> None:
    agent = DirectToolsAgent()

    _run(agent, InMemoryJournalStore(), {"model": "model"})
    assert LOOKUPS == ["A-1"] and REFUNDS == []  # "model" offers the lookup only

    LOOKUPS.clear()
    _run(agent, InMemoryJournalStore(), {"model": "admin_model"})
    assert LOOKUPS == ["A-1"] and REFUNDS == ["A-1"]  # that setup offers both

    LOOKUPS.clear()
    REFUNDS.clear()
    driver = _run(agent, InMemoryJournalStore(), {"model": "no_such_model"})
    assert LOOKUPS == [] and REFUNDS == []
    [error] = driver.errors
    assert (error["action"], error["error_type"]) == ("_tool_call_action", "ValueError")
    assert "names model 'no_such_model', which is not a chat model setup, and has no offered_tools" in (
        error["error_message"]
    )

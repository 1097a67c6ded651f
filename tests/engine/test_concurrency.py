"""Cross-key concurrency: with a slow model, keys overlap their calls (local
runner; the mini-cluster in tests/e2e/test_concurrency_e2e.py), per-key order
holds, the bound on runs in flight holds, and the end of a bounded input waits
for every key in flight."""

from __future__ import annotations

import json
from typing import Any, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from tests.support.scripted_openai_server import ScriptedChatServer

LATENCY_S = 0.3


def on_input(event: InputEvent, ctx: Any) -> None:
    ctx.sensory_memory.set("record", event.input)
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=json.dumps(event.input))]))


def on_response(event: ChatResponseEvent, ctx: Any) -> None:
    record = ctx.sensory_memory.get("record")
    ctx.send_event(OutputEvent(output={"key": record["key"], "n": record["n"], "answer": event.response.content}))


def slow_model_agent(base_url: str) -> Agent:
    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    agent.add_action("on_response", [ChatResponseEvent], on_response)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=base_url, max_retries=0))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="conn", model="scripted"))
    return agent


@pytest.fixture
def slow_server():
    server = ScriptedChatServer(latency_s=LATENCY_S)
    server.set_reply_fn(lambda request, index: {"role": "assistant", "content": "ok"})
    with server:
        yield server


def _records(keys: int, per_key: int) -> List[dict]:
    return [{"key": f"k{k:02d}", "n": n} for n in range(per_key) for k in range(keys)]


def _run_local(records: List[dict], agent: Agent, **config: Any) -> List[dict]:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    listed = env.from_list([{"key": r["key"], "value": r} for r in records]).apply(agent).to_list()
    env.execute()
    return [o for item in listed for o in item.values()]


def _assert_per_key_order(records: List[dict], outputs: List[dict]) -> None:
    assert len(outputs) == len(records), "an output is missing (end of input did not wait?)"
    for key in {r["key"] for r in records}:
        ns = [o["n"] for o in outputs if o["key"] == key]
        assert ns == sorted(ns) == list(range(len(ns))), f"key {key} out of order: {ns}"


def _assert_in_flight_at_once(server: ScriptedChatServer, count: int) -> None:
    """The server held each request until ``count`` were in flight: they all
    were, and never more (timings: tools/bench/concurrency.py)."""
    assert (server.max_in_flight, server.hold_timed_out) == (count, False), (
        f"at most {server.max_in_flight} model calls in flight at once, {count} expected"
    )
    assert server.in_flight == 0


def test_local_runner_overlaps_keys(slow_server):
    # Every key's call is held until all 20 are in flight: keys run one after
    # another would never get there.
    slow_server.hold_until_in_flight(20)
    records = _records(keys=20, per_key=1)
    outputs = _run_local(records, slow_model_agent(slow_server.base_url))
    _assert_per_key_order(records, outputs)
    _assert_in_flight_at_once(slow_server, 20)


def test_local_runner_keeps_per_key_order_and_its_bound(slow_server):
    # Held until 4 are in flight (the bound is reached), then 300 ms each:
    # a fifth run would overlap them and show in max_in_flight.
    slow_server.hold_until_in_flight(4)
    records = _records(keys=8, per_key=5)
    outputs = _run_local(records, slow_model_agent(slow_server.base_url), max_concurrent_runs=4)
    _assert_per_key_order(records, outputs)
    _assert_in_flight_at_once(slow_server, 4)
    assert len(slow_server.requests) == 40

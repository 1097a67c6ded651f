"""Cost of the progress stream and of steering, side by side in one run.

A zero-latency in-process model asks for three tools in one reply and then
answers (one tool round: 4 journal commits per run). The same records run on
the local runner with the in-memory journal four times: plain, with the
progress stream, with steering enabled (no messages sent: the cost of the
take before each model call), and with both. Printed: microseconds per
record, the ratio to plain, and journal commits and progress publishes per
run. Not a test: run it, read the figures.

    .venv/bin/python tools/bench/followers_steering.py --records 2000
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Sequence

from _common import machine

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool


class ToolRoundModel(BaseChatModelConnection):
    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        if not any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": "double", "arguments": {"n": i}}}
                for i in range(3)
            ])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")


class Setup(BaseChatModelSetup):
    pass


def double(n: int) -> int:
    """Double a number.

    Args:
        n: The number.
    """
    return 2 * n


def ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content=str(event.input))]))


def answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


class ToolRoundAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ToolRoundModel))
        self.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=Setup, connection="conn", tools=["double"]))
        self.add_resource("double", ResourceType.TOOL, double)
        self.add_action("ask", [InputEvent], ask)
        self.add_action("answer", [ChatResponseEvent], answer)


def run(records: int, keys: int, progress: bool, steering: bool) -> Dict[str, float]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = env.from_list([{"key": f"k{i % keys}", "value": i} for i in range(records)])
    if steering:
        builder.with_steering([{"key": "no-such-key", "value": "unused"}])  # enables steering, sends nothing to these keys
    builder.apply(ToolRoundAgent())
    outputs = builder.to_list()
    if progress:
        builder.to_progress_list()
    started = time.perf_counter()
    counters = env.execute()[0]
    elapsed = time.perf_counter() - started
    assert len(outputs) == records
    return {
        "us": elapsed / records * 1e6,
        "commits": counters["journal_writes"] / records,
        "publishes": counters["progress_publishes"] / records,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=31)
    args = parser.parse_args()
    run(200, args.keys, True, True)  # warm up imports and caches
    print(f"machine: {machine()}; {args.records} records over {args.keys} keys, one round of 3 tool calls each")
    plain = run(args.records, args.keys, False, False)
    for name, progress, steering in (
        ("plain", False, False), ("progress stream", True, False), ("steering", False, True), ("both", True, True),
    ):
        result = plain if name == "plain" else run(args.records, args.keys, progress, steering)
        print(
            f"{name:16s}: {result['us']:8.1f} us/record  x{result['us'] / plain['us']:.2f} of plain"
            f"  commits/run {result['commits']:.2f}  publishes/run {result['publishes']:.2f}"
        )


if __name__ == "__main__":
    main()

"""A LangGraph agent in a real PyFlink job on the local mini-cluster
(``integrations.frameworks.langgraph``).

The job keys six reviews by product (two keys). Its action runs a
``durable_react_graph`` (``ChatOpenAI`` against the strict scripted OpenAI
server in this process, one ``word_count`` tool) with ``run_durably`` and a
per-key conversation: each record costs the server two requests (the tool
call, then the answer), and each answer sees the key's earlier reviews.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

import cloudpickle
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from tests.support.framework_runs import collect_keyed_job, without_langsmith  # noqa: E402
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402

# The agent runs in Flink's Python workers; in process mode they cannot
# import this module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

REVIEWS = [
    {"product": "kettle", "text": "boils fast"},
    {"product": "lamp", "text": "too dim for reading at night"},
    {"product": "kettle", "text": "the lid broke after a week"},
    {"product": "lamp", "text": "nice warm light"},
    {"product": "kettle", "text": "quiet"},
    {"product": "lamp", "text": "the switch feels cheap and wobbly"},
]


def _product(record: Dict[str, Any]) -> str:
    return record["product"]


class ReviewGraphAgent(Agent):
    """Each review: a LangGraph ReAct turn that counts its words with a tool."""

    @action(InputEvent)
    @staticmethod
    async def review(event: InputEvent, ctx: Any) -> None:
        import httpx
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI

        from flink_agents.integrations.frameworks.langgraph import durable_react_graph, run_durably

        @tool
        async def word_count(text: str) -> int:
            """The number of words in text."""
            return len(text.split())

        value = event.input
        # An HTTP client of this record's event loop: ChatOpenAI's default
        # one is cached per (base_url, timeout) for the whole process, and
        # the subtasks of one Python worker run their records on loops of
        # their own (docs/frameworks/langgraph.md, limits).
        async with httpx.AsyncClient(timeout=30) as http:
            model = ChatOpenAI(model="gpt-4o-mini", base_url=value["url"], api_key="k", use_responses_api=False,
                               streaming=False, max_retries=0, http_async_client=http)
            graph = durable_react_graph(model, [word_count], system_prompt="Count the review's words.",
                                        name="reviewer")
            state = await run_durably(ctx, graph, value["text"], conversation="per_key")
        ctx.send_event(OutputEvent(output={"product": ctx.key, "answer": state["messages"][-1].content}))


def _scripted_model(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Asks ``word_count`` for the latest review (provider id ``call_0``
    every turn), then answers with the count and the key's earlier reviews."""
    messages = request["messages"]
    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user")
    if not any(m["role"] == "tool" for m in messages[prompt_at:]):
        return {"content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
            "name": "word_count", "arguments": json.dumps({"text": messages[prompt_at]["content"]})}}]}
    earlier = [m["content"] for m in messages[:prompt_at] if m["role"] == "user"]
    return {"content": f"{messages[-1]['content']} words after {earlier}"}


def test_a_langgraph_agent_on_the_mini_cluster_keeps_a_per_key_conversation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without_langsmith(monkeypatch)  # nothing goes to LangSmith
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_scripted_model)
        records = [{**review, "url": server.base_url} for review in REVIEWS]
        outputs = collect_keyed_job(records, _product, ReviewGraphAgent(), "langgraph-e2e", tmp_path / "journal.db")
        requests = list(server.requests)

    by_product: Dict[str, list] = {}
    for output in outputs:
        by_product.setdefault(output["product"], []).append(output["answer"])
    assert by_product == {
        "kettle": ["2 words after []", "6 words after ['boils fast']",
                   "1 words after ['boils fast', 'the lid broke after a week']"],
        "lamp": ["6 words after []", "3 words after ['too dim for reading at night']",
                 "6 words after ['too dim for reading at night', 'nice warm light']"],
    }
    assert len(requests) == 12  # two per review: the tool call, then the answer
    # Every turn's provider call_0 was rewritten: the last request of a key
    # pairs three distinct tool call ids with their results.
    last = requests[-1]["messages"]
    ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert len(ids) == 3 == len(set(ids)) and [m["tool_call_id"] for m in last if m["role"] == "tool"] == ids

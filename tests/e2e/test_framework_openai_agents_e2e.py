"""An OpenAI Agents SDK agent inside a real PyFlink job on the local
mini-cluster: six reviews on two keys, each run through ``run_durably``
with a function tool and a per-key conversation, against the strict
scripted OpenAI server (chat completions, no streaming)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict

import cloudpickle
import pytest

pytest.importorskip("agents")

from flink_agents.api.agents.agent import Agent as FlinkAgent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.api.execution_environment import AgentsExecutionEnvironment  # noqa: E402
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env, write_jsonl  # noqa: E402
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402

# The agent and the key selector run in Flink's Python workers, which cannot
# import this module by name: ship them by value, with SERVER (set by the test).
cloudpickle.register_pickle_by_value(sys.modules[__name__])
SERVER: Dict[str, str] = {}

REVIEWS = [
    {"product": "P1", "review": "The box was crushed."},
    {"product": "P2", "review": "Great shoes, fit well and look nice."},
    {"product": "P1", "review": "Arrived late but intact."},
    {"product": "P2", "review": "Sole came off after a week."},
    {"product": "P1", "review": "Perfect."},
    {"product": "P2", "review": "Too small."},
]


def product_key(record: Dict[str, Any]) -> str:
    return record["product"]


def _agents_agent() -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def count_words(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    client = AsyncOpenAI(base_url=SERVER["base_url"], api_key="test-key", max_retries=0, timeout=30.0)
    return Agent(
        name="review_counter", instructions="Count the review's words with the tool, then report.",
        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client), tools=[count_words],
    )


class ReviewCounter(FlinkAgent):
    @action(InputEvent)
    @staticmethod
    async def count(event: InputEvent, ctx: Any) -> None:
        from flink_agents.integrations.frameworks.openai_agents import run_durably

        review = event.input
        result = await run_durably(ctx, _agents_agent(), review["review"], conversation="per_key")
        ctx.send_event(OutputEvent(output={"product": review["product"], "review": review["review"],
                                           "answer": result.final_output}))


def _model(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Ask for count_words on the newest review (provider id call_0 every
    turn), then answer with the count and the turns seen on the key."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "user":
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "count_words", "arguments": json.dumps({"text": last["content"]})}}]}
    turns = sum(1 for m in messages if m["role"] == "user")
    return {"role": "assistant", "content": f"{last['content']} words, turn {turns}"}


@pytest.mark.timeout(120)
def test_an_agents_sdk_agent_runs_in_a_keyed_flink_job(tmp_path: Path) -> None:
    from pyflink.common import Types

    input_dir = tmp_path / "input"
    input_dir.mkdir()
    write_jsonl(input_dir / "reviews.jsonl", REVIEWS)
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_model)
        SERVER["base_url"] = server.base_url
        env = mini_cluster_env(1)
        agents_env = AgentsExecutionEnvironment.get_execution_environment(
            env, **{"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")})
        reviews = jsonl_stream(env, input_dir, "reviews", "reviews-source", "decode-reviews")
        outputs = agents_env.from_datastream(reviews, product_key, key_type=Types.STRING()).apply(
            ReviewCounter()).to_datastream()
        job = Collected(outputs, "openai-agents-reviews")
        try:
            got = job.take(len(REVIEWS), timeout_s=90)
        finally:
            job.close()
        requests = list(server.requests)

    # Each review answered once, its key's turns counted in order (the
    # per-key conversation reached each next record's request).
    by_product: Dict[str, list] = {}
    for output in got:
        by_product.setdefault(output["product"], []).append(output)
    for product, outputs in by_product.items():
        reviews = [r["review"] for r in REVIEWS if r["product"] == product]
        assert [o["review"] for o in outputs] == reviews
        assert [o["answer"] for o in outputs] == [
            f"{len(review.split())} words, turn {n}" for n, review in enumerate(reviews, 1)]
    # Two requests per review; each request's tool ids unique (call_0 rewritten).
    assert len(requests) == 2 * len(REVIEWS)
    for body in requests:
        ids = [c["id"] for m in body["messages"] if m.get("tool_calls") for c in m["tool_calls"]]
        assert len(ids) == len(set(ids)) and "call_0" not in ids
    assert Counter(len([m for m in b["messages"] if m["role"] == "user"]) for b in requests) == Counter(
        {1: 4, 2: 4, 3: 4})

"""A Google ADK agent inside a keyed PyFlink job on the local mini-cluster
(``integrations.frameworks.google_adk``): six reviews over two products,
each review rated by an ADK ``LlmAgent`` (``AnthropicLlm`` against the
scripted Anthropic server in this process) that calls one tool, with a
per-key conversation. Each review costs two model requests and one tool
call, and each product's later reviews carry its earlier turns."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

import cloudpickle
import pytest

pytest.importorskip("google.adk")

from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from tests.support.framework_runs import collect_keyed_job  # noqa: E402
from tests.support.scripted_anthropic_server import AnthropicScriptedServer  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


async def _rate(event: InputEvent, ctx: Any) -> None:
    from anthropic import AsyncAnthropic
    from google.adk.agents import LlmAgent
    from google.adk.models.anthropic_llm import AnthropicLlm

    from flink_agents.integrations.frameworks.google_adk import run_durably

    config = ctx.action_config
    log = config["tool_log"]

    async def stars(review: str) -> int:
        """Count the stars a review gives."""
        with open(log, "a", encoding="utf-8") as out:
            out.write(review + "\n")
        return review.count("*")

    llm = AnthropicLlm(model="claude-test", max_tokens=256,
                       client=AsyncAnthropic(base_url=config["model_url"], api_key="k", max_retries=0))
    agent = LlmAgent(name="rater", model=llm, instruction="Rate the review with the stars tool.", tools=[stars])
    events = await run_durably(ctx, agent, event.input["review"], conversation="per_key")
    ctx.send_event(OutputEvent(output={"key": ctx.key, "review": event.input["review"],
                                       **json.loads(events[-1].content.parts[0].text)}))


def _key(record: Dict[str, Any]) -> str:
    return record["product"]


def _reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Ask for ``stars`` on the newest prompt (id ``call_0`` every turn);
    then answer with the result and how many prompts the request held."""
    messages = request["messages"]
    last = messages[-1]["content"]
    prompts = [b["text"] for m in messages if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "text"]
    if isinstance(last, list) and last and last[0].get("type") == "tool_result":
        return {"role": "assistant", "content": json.dumps({"stars": int(last[0]["content"]), "prompts": len(prompts)})}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "stars", "arguments": {"review": prompts[-1]}}}]}


@pytest.mark.timeout(300)
def test_an_adk_agent_rates_reviews_on_the_mini_cluster_with_a_conversation_per_key(tmp_path: Path) -> None:
    reviews = [{"product": f"p{i % 2}", "review": f"review {i} " + "*" * (1 + i % 5)} for i in range(6)]
    tool_log = tmp_path / "tool.log"
    with AnthropicScriptedServer() as server:
        server.set_reply_fn(_reply)
        agent = Agent().add_action("rate", [InputEvent], _rate, model_url=server.base_url, tool_log=str(tool_log))
        outputs = collect_keyed_job(reviews, _key, agent, "google-adk-e2e", tmp_path / "journal.db")

    assert len(outputs) == 6 and len(server.requests) == 12 and not server.violations
    by_review = {o["review"]: o for o in outputs}
    seen: Dict[str, int] = {}
    for review in reviews:  # in input order per key: the n-th review of a key saw n prompts
        seen[review["product"]] = seen.get(review["product"], 0) + 1
        output = by_review[review["review"]]
        assert output["key"] == review["product"]
        assert output["stars"] == review["review"].count("*")
        assert output["prompts"] == seen[review["product"]]
    # Each tool call ran once.
    assert sorted(tool_log.read_text().splitlines()) == sorted(r["review"] for r in reviews)

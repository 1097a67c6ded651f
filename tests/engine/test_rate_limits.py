"""Rate limits and 429 back-pressure on the engine's path (issue 32): the
built-in chat action's calls go through the connection's limiter, limits
come from descriptor arguments or the ``agent:`` configuration, each
subtask takes its share, and a 429 holds the subtask's other runs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.chat_models.errors import ModelRateLimited
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import InputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.features.rate_limits import Limits
from tests.support.chat_turn import ChatSetup, answer, ask


class Calls:
    """What the connection saw: start times, calls in flight, refusals to make."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: List[tuple[str, float]] = []
        self.in_flight = 0
        self.peak = 0
        self.refuse: Dict[str, float] = {}  # content -> Retry-After of one 429

    def reset(self) -> None:
        self.__init__()


CALLS = Calls()


class RecordingConnection(BaseChatModelConnection):
    """Answers ``echo: <last message>`` after 50 ms; a message listed in
    ``CALLS.refuse`` is answered 429 once, with its Retry-After."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        raise NotImplementedError

    async def achat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        content = messages[-1].content
        with CALLS.lock:
            CALLS.starts.append((content, time.monotonic()))
            retry_after = CALLS.refuse.pop(content, None)
            if retry_after is not None:
                raise ModelRateLimited("rate limit reached", "scripted", 429, retry_after_s=retry_after)
            CALLS.in_flight += 1
            CALLS.peak = max(CALLS.peak, CALLS.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            with CALLS.lock:
                CALLS.in_flight -= 1
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"echo: {content}",
                           extra_args={"usage": {"input_tokens": 10, "output_tokens": 5}})


def _agent(**connection_arguments: Any) -> Agent:
    agent = Agent()
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=RecordingConnection, **connection_arguments))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=ChatSetup, connection="conn"))
    agent.add_action("ask", [InputEvent], ask)
    agent.add_action("answer", [ChatResponseEvent], answer)
    return agent


def _run(agent: Agent, records: List[Dict[str, Any]], **config: Any) -> tuple[List[Dict[str, Any]], Dict[str, Any]]:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    outputs = env.from_list(records).apply(agent).to_list()
    env.execute()
    return outputs, env.last_metrics[-1]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.reset()


def test_max_concurrent_requests_holds_the_calls_of_many_keys() -> None:
    records = [{"key": f"k{i}", "value": f"r{i}"} for i in range(8)]
    outputs, metrics = _run(_agent(max_concurrent_requests=2), records)
    assert sorted(v for o in outputs for v in o.values()) == sorted(f"echo: r{i}" for i in range(8))
    assert CALLS.peak == 2
    assert metrics["connection.conn.rateLimitWaits"] >= 4  # 8 calls, 2 at a time, 50 ms each
    assert metrics["connection.conn.rateLimitWaitMs"]["count"] == 8


def test_without_limits_the_keys_call_at_once() -> None:
    records = [{"key": f"k{i}", "value": f"r{i}"} for i in range(8)]
    _run(_agent(), records)
    assert CALLS.peak == 8


def test_a_429_with_retry_after_holds_the_other_keys_and_the_refused_record_retries() -> None:
    CALLS.refuse["r0"] = 0.4
    # Each other key has a second record, which calls after its first is answered (50 ms).
    records = [{"key": "k0", "value": "r0"}] + [{"key": f"k{i}", "value": f"r{i}"} for i in range(1, 5)]
    records += [{"key": f"k{i}", "value": f"s{i}"} for i in range(1, 5)]
    outputs, metrics = _run(_agent(), records, error_strategy="retry", **{"error_retry.initial_backoff_s": 0.01})
    assert sorted(v for o in outputs for v in o.values()) == sorted(
        [f"echo: r{i}" for i in range(5)] + [f"echo: s{i}" for i in range(1, 5)])
    refused_at = next(at for content, at in CALLS.starts if content == "r0")
    later = {content: at - refused_at for content, at in CALLS.starts if at > refused_at}
    # Every call after the 429 waited out its Retry-After: the other keys' too.
    assert {"s1", "s2", "s3", "s4", "r0"} <= set(later), later
    assert all(offset >= 0.39 for offset in later.values()), later
    assert metrics["connection.conn.modelRateLimited"] == 1
    assert metrics["connection.conn.rateLimitCoolDownMs"] == 400


def test_limits_from_the_configuration_and_the_descriptor_split_by_parallelism() -> None:
    plan = AgentPlan.from_agent(_agent(requests_per_minute=600))
    engine = AgentEngine(plan, {"rate_limits": {"conn": {"requests_per_minute": 60, "tokens_per_minute": 40_000}},
                                "rate_limits.conn.max_concurrent_requests": 8}, parallelism=4)
    try:
        connection = engine._resources.get("conn", ResourceType.CHAT_MODEL_CONNECTION)
        assert connection._rate_limiter.limits == Limits(150, 10_000, 2)  # the descriptor's rpm wins
        assert engine.rate_limits.limiters["conn"] is connection._rate_limiter
    finally:
        engine.close()


def test_a_bad_limit_names_the_connection() -> None:
    with pytest.raises(Exception, match="'conn'.*max_concurrent_requests must be a whole number >= 1"):
        _run(_agent(max_concurrent_requests=0), [{"key": "a", "value": "x"}])


def test_the_openai_connection_reports_the_servers_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    from flink_agents.integrations.chat_models.openai.openai_chat_model import OpenAIChatModelConnection
    from tests.support.rate_limited_server import RateLimitedChatServer

    with RateLimitedChatServer(per_minute=6, latency_s=0.0) as server:  # 1 per 10 s
        connection = OpenAIChatModelConnection(api_key="test-key", base_url=server.base_url, max_retries=0)
        question = [ChatMessage(role=MessageRole.USER, content=json.dumps({"id": "p", "review": "fine"}))]
        assert "score" in connection.chat(question, model="m").content
        with pytest.raises(ModelRateLimited) as refused:
            connection.chat(question, model="m")
    assert 9.0 <= refused.value.retry_after_s <= 10.0  # retry-after-ms, before the whole-second Retry-After
    assert server.stats()["refused"] == 1


def test_the_review_command_holds_its_connection_to_requests_per_minute_job_wide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--requests-per-minute`` and ``--rate-limit-scope job`` reach the
    job's connection: 24 reviews at 120 requests per minute (20 in any
    10 s) against a provider allowing 600 are answered 20, then 4 after
    the window frees; none refused."""
    from flink_agents.jobs.review_analysis import main
    from tests.support.rate_limited_server import RateLimitedChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    sample = Path(__file__).resolve().parents[2] / "jobs" / "data" / "sample_reviews.jsonl"
    reviews = tmp_path / "reviews.jsonl"
    reviews.write_text("".join(sample.read_text(encoding="utf-8").splitlines(keepends=True)[:24]), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    with RateLimitedChatServer(per_minute=600, latency_s=0.0) as server:
        code = main(["--runner", "local", "--input", str(reviews), "--output", str(output),
                     "--model", "openai:scripted", "--base-url", server.base_url, "--max-retries", "0",
                     "--requests-per-minute", "120", "--rate-limit-scope", "job"])
        stats = server.stats()
    assert code == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 24
    answered = sorted(stats["answered"])
    assert stats["refused"] == 0 and len(answered) == 24
    in_first_window = [t for t in answered if t < answered[0] + 10.0]
    assert len(in_first_window) == 20, f"{len(in_first_window)} requests in the first 10 s, the limit allows 20"

"""Retries and timeouts at the edges (issue 28, points 1 and 2).

1. A retry budget is the record's, not the process's: failed attempts are
   journaled, so after a worker dies the attempts continue the count (at
   most the configured attempts, plus the one the crash cut off).
2. A timed-out call never overlaps its retry: a call running on a worker
   thread outlives the cancellation of the action that awaited it; the
   retry waits for it and replays its result instead of running it again
   (a sync model connection's thread: the retry waits, then asks again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.tools.tool import Tool
from tests.support.chat_turn import ChatTurnAgent
from tests.support.retry_budget_job import KILLED_STATUS

REPO = Path(__file__).resolve().parents[2]


# ---- 1. retry budgets survive a crash ------------------------------------------------------


def _job(journal: Path, calls: Path, die_at: int | None = None) -> subprocess.CompletedProcess:
    """``tests.support.retry_budget_job`` in a process of its own."""
    args = [sys.executable, "-m", "tests.support.retry_budget_job", str(journal), str(calls)]
    if die_at is not None:
        args.append(str(die_at))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _executions(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_worker_dying_during_attempt_2_does_not_restart_the_retry_budget(tmp_path: Path) -> None:
    """3 attempts of a call that always fails; the process is killed during
    attempt 2. The restarted process runs attempt 2 again (the one the crash
    cut off) and attempt 3, then fails the record: 4 executions, not 5."""
    journal, calls = tmp_path / "journal.db", tmp_path / "calls"
    died = _job(journal, calls, die_at=2)
    assert died.returncode == KILLED_STATUS, died.stderr
    assert _executions(calls) == 2

    resumed = _job(journal, calls)
    assert resumed.returncode == 1, resumed.stderr
    assert "ConnectionError: card processor unreachable (execution 4)" in resumed.stderr
    assert _executions(calls) == 4  # 3 configured + the one the crash cut off


# ---- 2. a timed-out call never overlaps its retry ------------------------------------------


class Mailbox:
    """Counts sends and how many ran at once; the first send takes 1 s."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: List[str] = []
        self.running = 0
        self.most_at_once = 0

    def send(self, to: str) -> str:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            first = not self.sent
            self.sent.append(to)
        try:
            if first:
                time.sleep(1.0)
            return f"sent to {to} (#{len(self.sent)})"
        finally:
            with self.lock:
                self.running -= 1


MAILBOX: Dict[str, Mailbox] = {}
RETRY = {"error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001}


@pytest.fixture(autouse=True)
def _mailbox() -> None:
    MAILBOX["box"] = Mailbox()


def send_email(to: str) -> str:
    """Send an email (a plain function: it runs on a worker thread).

    Args:
        to: The address.
    """
    return MAILBOX["box"].send(to)


async def notify(event: InputEvent, ctx: Any) -> None:
    receipt = await ctx.durable_execute_async(send_email, event.input)
    ctx.send_event(OutputEvent(output=receipt))


def _run(agent: Agent, value: str, **config: Any) -> tuple[List[Any], Dict[str, int]]:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    outputs = env.from_list([{"key": "k", "value": value}]).apply(agent).to_list()
    counters = env.execute()[0]
    return [o["k"] for o in outputs], counters


def test_a_timed_out_durable_execute_async_is_not_sent_again_by_the_retry() -> None:
    agent = Agent().add_action("notify", [InputEvent], notify, timeout_s=0.5, **RETRY)
    outputs, counters = _run(agent, "ops@example.com")
    box = MAILBOX["box"]
    assert box.most_at_once == 1, "the retry ran the call while the timed-out one still ran"
    assert box.sent == ["ops@example.com"]
    assert outputs == ["sent to ops@example.com (#1)"]  # the retry took the first execution's result
    assert counters["action_retries"] == 1


class EmailModel(BaseChatModelConnection):
    """Asks for send_email once, then answers with its result."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "call_0", "type": "function", "function": {"name": "send_email", "arguments": {"to": "a@b"}}},
            ])
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"done: {results}")


def test_a_timed_out_sync_tool_is_not_run_again_by_the_retry() -> None:
    agent = ChatTurnAgent(EmailModel, {"send_email": send_email})
    outputs, counters = _run(agent, "go", **{"action.timeout_s": 0.5, **RETRY})
    box = MAILBOX["box"]
    assert box.most_at_once == 1, "the retry ran the tool while the timed-out one still ran"
    assert box.sent == ["a@b"]
    assert outputs == ["done: ['sent to a@b (#1)']"]
    assert counters["action_retries"] == 1


class SlowFirstModel(BaseChatModelConnection):
    """A sync connection (``chat`` only: the default ``achat`` runs it with
    ``asyncio.to_thread``) whose first request takes 1 s; counted by the
    mailbox, so overlapping requests show."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=MAILBOX["box"].send("model"))


def test_a_timed_out_sync_model_request_is_not_asked_again_while_it_runs() -> None:
    agent = ChatTurnAgent(SlowFirstModel)
    outputs, counters = _run(agent, "go", **{"action.timeout_s": 0.5, **RETRY})
    box = MAILBOX["box"]
    assert box.most_at_once == 1, "the retry asked the model while the timed-out request still ran"
    # The cut-off request's reply died with the attempt that awaited it (the
    # thread is not the journaled call's body): the retry asked again, once
    # the first request had ended.
    assert box.sent == ["model", "model"]
    assert outputs == ["sent to model (#2)"]
    assert counters["action_retries"] == 1


FLAKY = {"left": 0}


def flaky_lookup(q: str) -> str:
    if FLAKY["left"]:
        FLAKY["left"] -= 1
        raise ConnectionError("connection reset by peer")
    return f"found {q}"


async def look_up(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(flaky_lookup, event.input)))


def test_a_follower_sees_each_retry_once_its_count_is_journaled() -> None:
    FLAKY["left"] = 2
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = env.from_list([{"key": "k", "value": "q"}]).apply(
        Agent().add_action("look_up", [InputEvent], look_up, **RETRY))
    outputs, progress = builder.to_list(), builder.to_progress_list()
    env.execute()
    assert outputs == [{"k": "found q"}]
    retries = [(r["step"], r["failed_attempts"], r["commit"]) for r in progress if r["kind"] == "attempt_failed"]
    assert retries == [("look_up@0", 1, 1), ("look_up@0", 2, 2)]

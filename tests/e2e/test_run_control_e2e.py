"""Run control and approvals end to end: a PyFlink job on the local
mini-cluster (parallelism 2, a watched directory as its unbounded input, a
SQLite journal file), driven from the ``flink-agents`` CLI in processes of
its own while the job runs:

- key ``paused`` is paused before its two records arrive; they wait in
  keyed state until ``runs resume``, then run in order;
- key ``cancel``'s first record runs for minutes; ``runs cancel`` ends it
  with a ``RunCancelled`` error record, and the key's next record goes on;
- keys ``approve`` and ``reject`` ask a chat model that calls a tool needing
  approval; ``approvals approve`` runs the tool once, ``approvals reject``
  never runs it and the model gets the reviewer's reason;
- key ``retry``'s record fails after a committed call and goes to the error
  stream; after a fix, ``runs retry`` runs it again (a timer of the key
  takes the request), replaying that call.

Every record is accounted for (outputs plus error records equal the
inputs), and no completed call is made twice (each model request and tool
call is noted in a file by the worker that makes it).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import action, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.tool import Tool
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env, wait_until, write_jsonl

pytestmark = pytest.mark.e2e

# The agent runs in Flink's Python workers: ship this module by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

JOB = "e2e-control"
REASON = "over the refund limit for this customer"
# Where workers note their calls (a directory): set before the job is built,
# it travels with the functions pickled by value.
NOTES: Dict[str, str] = {}


def _note(kind: str, what: Any) -> None:
    """One line per call a worker makes, in a file of its kind."""
    with open(Path(NOTES["dir"]) / f"{kind}.jsonl", "a", encoding="utf-8") as notes:
        notes.write(json.dumps(what) + "\n")


@tool(needs_approval=True)
def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: The order's id.
    """
    _note("refunds", order_id)
    return f"refunded {order_id}"


def lookup(record_id: str) -> str:
    _note("lookups", record_id)
    return f"looked up {record_id}"


class RefundModel(BaseChatModelConnection):
    """Round 0: call ``refund`` for the order in the user message. After the
    tool's result: that result as the answer."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        order = str(messages[0].content)
        _note("requests", {"order": order, "round": len(results)})
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[{
                "id": f"call-{order}", "type": "function",
                "function": {"name": "refund", "arguments": {"order_id": order}},
            }])
        return ChatMessage(role=MessageRole.ASSISTANT, content=results[-1])


class RefundSetup(BaseChatModelSetup):
    pass


class ControlledAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=RefundModel))
        self.add_resource("model", ResourceType.CHAT_MODEL,
                          ResourceDescriptor(clazz=RefundSetup, connection="conn", tools=["refund"]))
        self.add_resource("refund", ResourceType.TOOL, refund)

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        value = event.input
        if value["kind"] == "chat":
            ctx.send_event(ChatRequestEvent(
                model="model", messages=[ChatMessage(role=MessageRole.USER, content=value["order"])]))
            return
        _note("starts", value["id"])
        if value["kind"] == "flaky":  # fails until the fix is in (a file), after a committed call
            found = ctx.durable_execute(lookup, value["id"])
            if not (Path(NOTES["dir"]) / "fixed").exists():
                raise RuntimeError(f"the downstream service refused {value['id']}")
            ctx.send_event(OutputEvent(output={"key": ctx.key, "id": value["id"], "found": found}))
            return
        if value["kind"] == "slow":
            await asyncio.sleep(600)  # until a cancel request ends it
        ctx.send_event(OutputEvent(output={"key": ctx.key, "id": value["id"]}))

    @action(ChatResponseEvent)
    @staticmethod
    def on_answer(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output={"key": ctx.key, "answer": event.response.content}))


def _cli(journal: Path, *args: str) -> Any:
    """``flink-agents ARGS --journal J --json`` in a process of its own; its JSON (lines)."""
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.cli.main", *args, "--journal", str(journal), "--json"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"flink-agents {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _lines(path: Path) -> List[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []


def test_pause_resume_cancel_approve_and_reject_from_the_cli_while_the_job_runs(tmp_path: Path) -> None:
    from pyflink.common import Types

    notes, inputs, journal = tmp_path / "notes", tmp_path / "in", tmp_path / "journal.db"
    notes.mkdir()
    inputs.mkdir()
    NOTES["dir"] = str(notes)
    SQLiteJournalStore(str(journal)).count_entries()  # the journal the job will use, created ahead
    env = mini_cluster_env(2)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
        "job-identifier": JOB, "journal.sqlite.path": str(journal), "error_strategy": "skip",
        "run_control.poll_interval_ms": 200, "run_control.retry_poll_interval_ms": 500,
        "run_control.keep_failed": 4,
        "callbacks.poll_interval_ms": 100,
        "callbacks.base_url": "http://approvals.test:9/",
    })
    records = jsonl_stream(env, inputs, "records", "records-source", "decode-records")
    builder = agents_env.from_datastream(records, lambda r: r["key"], key_type=Types.STRING()).apply(ControlledAgent())
    outputs = builder.to_datastream().map(lambda o: ("output", o))
    errors = builder.error_stream().map(lambda e: ("error", e))
    job = Collected(outputs.union(errors), "run-control")
    seen: List[Any] = []

    def arrived(count: int) -> bool:
        seen.extend(job.poll())
        return len(seen) >= count

    try:
        # Written before the job's operators opened (PyFlink opens them at
        # their first element): it holds the key's first record all the same.
        (pause,) = _cli(journal, "runs", "pause", "--job", JOB, "--key", "paused")

        sent = [
            {"key": "paused", "kind": "plain", "id": "p0"},
            {"key": "paused", "kind": "plain", "id": "p1"},
            {"key": "cancel", "kind": "slow", "id": "c0"},
            {"key": "cancel", "kind": "plain", "id": "c1"},
            {"key": "approve", "kind": "chat", "order": "A-17"},
            {"key": "reject", "kind": "chat", "order": "R-99"},
            {"key": "retry", "kind": "flaky", "id": "f0"},
        ]
        write_jsonl(inputs / "records.jsonl", sent)

        wait_until(lambda: "c0" in _lines(notes / "starts.jsonl"), 60, "the slow run started")
        (cancel,) = _cli(journal, "runs", "cancel", "--job", JOB, "--key", "cancel", "--seq", "0")
        approvals = wait_until(lambda: (lambda found: found if len(found) == 2 else None)(
            _cli(journal, "approvals", "list")), 60, "two pending approvals")
        by_key = {a["key"]: a for a in approvals}
        assert by_key["approve"]["tool"] == "refund" and by_key["approve"]["state"] == "pending"
        subprocess.run([sys.executable, "-m", "flink_agents.cli.main", "approvals", "approve", "--journal",
                        str(journal), by_key["approve"]["callback_id"]], check=True, timeout=60)
        subprocess.run([sys.executable, "-m", "flink_agents.cli.main", "approvals", "reject", "--journal",
                        str(journal), by_key["reject"]["callback_id"], "--reason", REASON], check=True, timeout=60)

        # Everything but the paused key's records: c0's and f0's errors, c1, both answers.
        wait_until(lambda: arrived(5), 90, "the cancel, f0's failure, c1 and both answers")
        (notes / "fixed").write_text("the downstream service is fixed")
        (retry,) = _cli(journal, "runs", "retry", "--job", JOB, "--key", "retry", "--seq", "0")
        wait_until(lambda: arrived(6), 60, "f0 retried after the fix")
        assert "p0" not in _lines(notes / "starts.jsonl"), "a record of the paused key ran"
        _cli(journal, "runs", "resume", "--job", JOB, "--key", "paused")
        wait_until(lambda: arrived(8), 90, "the paused key's records after the resume")
        time.sleep(1.0)
        seen.extend(job.poll())
    finally:
        job.close()

    results = {(kind, json.dumps(value, sort_keys=True, default=str)) for kind, value in seen}
    # One result per input, and one more for the retried record (its error, then its output).
    assert len(seen) == len(sent) + 1 == len(results), f"not one result per input and retry: {seen}"
    errors = {value["key"]: value for kind, value in seen if kind == "error"}
    assert sorted(errors) == ["cancel", "retry"]
    assert (errors["cancel"]["seq"], errors["cancel"]["error_type"]) == (0, "RunCancelled")
    assert f"#{cancel['control_id']}" in errors["cancel"]["error_message"]
    assert (errors["retry"]["seq"], errors["retry"]["error_type"]) == (0, "RuntimeError")
    out = [value for kind, value in seen if kind == "output"]
    assert [o["id"] for o in out if o["key"] == "paused"] == ["p0", "p1"]  # in order, after the resume
    assert [o["id"] for o in out if o["key"] == "cancel"] == ["c1"]
    assert [o["found"] for o in out if o["key"] == "retry"] == ["looked up f0"]
    assert _lines(notes / "lookups.jsonl") == ["f0"]  # committed before the failure: replayed by the retry
    answers = {o["key"]: o["answer"] for o in out if "answer" in o}
    assert answers["approve"] == "refunded A-17"
    assert REASON in answers["reject"] and "rejected" in answers["reject"]
    # No completed call made twice: one refund (the approved one), two model requests per chat key.
    assert _lines(notes / "refunds.jsonl") == ["A-17"]
    requests = _lines(notes / "requests.jsonl")
    assert sorted((r["order"], r["round"]) for r in requests) == [("A-17", 0), ("A-17", 1), ("R-99", 0), ("R-99", 1)]
    starts = _lines(notes / "starts.jsonl")
    assert sorted(starts) == ["c0", "c1", "f0", "f0", "p0", "p1"]
    controls = {(c["action"], c["state"]) for c in _cli(journal, "runs", "controls")}
    assert controls == {("pause", "applied"), ("cancel", "applied"), ("retry", "applied"), ("resume", "applied")}
    assert retry["seq"] == 0
    assert pause["job"] == JOB

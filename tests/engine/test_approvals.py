"""Tool calls that need a reviewer's approval, on a real SQLite journal file:
the call parks as a durable ``approval`` callback; ``inspection.approvals``
(and ``flink-agents approvals``) list and decide it; approve runs the tool
once, reject gives the model the reason, a timeout follows
``approvals.on_timeout``; a crash and replay neither asks again nor
repeats a committed tool call."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import pytest

from flink_agents.api.callbacks import ApprovalTimedOut
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.decorators import tool
from flink_agents.api.tools.tool import Tool
from flink_agents.cli.main import main
from flink_agents.inspection import open_reader, show_run
from flink_agents.inspection.approvals import decide, list_approvals
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.callbacks import CallbackRef
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support import host_runs
from tests.support.chat_turn import ChatTurnAgent

FAST = {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://approvals.test:9/"}
REFUNDS: List[str] = []  # the tool's side effect, once per run of it
REQUESTS: List[List[ChatMessage]] = []  # every request the model got
CRASH: Dict[str, bool] = {}


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    REFUNDS.clear()
    REQUESTS.clear()
    CRASH.clear()


@tool(needs_approval=True)
def refund(order_id: str, api_key: str) -> str:
    """Refund an order.

    Args:
        order_id: The order's id.
        api_key: The payment provider's key.
    """
    REFUNDS.append(order_id)
    if CRASH.pop("refund", False):
        raise Crash("process died inside refund, after the refund")
    return f"refunded {order_id}"


def plain_refund(order_id: str, api_key: str) -> str:
    """Refund an order (not marked; approvals.tools may name it).

    Args:
        order_id: The order's id.
        api_key: The payment provider's key.
    """
    REFUNDS.append(order_id)
    return f"refunded {order_id}"


class RefundModel(BaseChatModelConnection):
    """Round 0: one call of the offered tool. After: the tool's result text as the answer."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        REQUESTS.append(list(messages))
        results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        if not results:
            name = (tools or [])[0].name
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[{
                "id": "call_0", "type": "function",
                "function": {"name": name, "arguments": {"order_id": "A-1", "api_key": "sk-live-123"}},
            }])
        if CRASH.pop("answer", False):
            raise Crash("process died asking the model after the tool")
        return ChatMessage(role=MessageRole.ASSISTANT, content=results[-1])


def _agent(name: str = "refund") -> ChatTurnAgent:
    return ChatTurnAgent(RefundModel, {name: refund if name == "refund" else plain_refund})


def _pending(path: Path, timeout_s: float = 10.0) -> Dict[str, Any]:
    """The one pending approval, once the run has parked on it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            found = list_approvals(str(path))
            if found:
                (approval,) = found
                return approval
        time.sleep(0.01)
    raise AssertionError(f"no pending approval within {timeout_s} s")


def _run(
    path: Path, reviewer: Callable[[Dict[str, Any]], None] | None = None, agent: ChatTurnAgent | None = None,
    key: str = "k", **config: Any,
) -> LocalDriver:
    """One record of ``key`` on a fresh engine over the SQLite file (a
    restore to before the record); ``reviewer`` gets the pending approval
    from another thread while the run waits, as a person would."""
    store = SQLiteJournalStore(path)
    engine = AgentEngine(AgentPlan.from_agent(agent or _agent()), {**FAST, **config}, job_id="job", store=store)
    driver = LocalDriver()

    async def go() -> None:
        async def review() -> None:
            approval = await asyncio.to_thread(_pending, path)
            await asyncio.to_thread(reviewer, approval)

        runs = [host_runs.process_async(engine, driver, key, "refund order A-1")]
        await asyncio.gather(*runs, *([review()] if reviewer is not None else []))

    try:
        asyncio.run(go())
    finally:
        engine.close()
    return driver


def _tool_messages(request: List[ChatMessage]) -> List[str]:
    return [str(m.content) for m in request if m.role == MessageRole.TOOL]


def test_a_call_parks_until_approved_then_the_tool_runs_once_and_the_model_sees_its_result(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    seen: Dict[str, Any] = {}

    def approve(approval: Dict[str, Any]) -> None:
        seen.update(approval, refunds_while_parked=list(REFUNDS))
        seen["outcome"] = decide(str(path), approval["callback_id"], approve=True, decided_by="alice")

    driver = _run(path, approve, **{"approvals.timeout_s": 600})

    assert seen["refunds_while_parked"] == []  # parked: nothing ran before the decision
    assert seen["outcome"] == "accepted"
    assert (seen["tool"], seen["key"], seen["seq"], seen["state"]) == ("refund", "k", 0, "pending")
    assert seen["arguments"] == {"order_id": "A-1", "api_key": "***"}  # the key never reaches a reviewer
    assert seen["tool_call_id"].endswith("-0-0") and seen["model"] == "model"
    created, deadline = (datetime.fromisoformat(seen[f].replace("Z", "+00:00")) for f in ("created", "deadline"))
    assert (deadline - created).total_seconds() == 600
    assert REFUNDS == ["A-1"]
    assert driver.outputs == [{"k": "refunded A-1"}]
    assert _tool_messages(REQUESTS[-1]) == ["refunded A-1"]
    # Decided once: a second decision changes nothing, and the first is shown.
    assert decide(str(path), seen["callback_id"], approve=False, reason="too late") == "finished"
    (decided,) = list_approvals(str(path), "resolved")
    assert decided["result"] == {"approved_by": "alice", "reason": ""}
    assert list_approvals(str(path)) == []
    # The run's callbacks, as `flink-agents runs show` lists them, name the approval.
    with open_reader(str(path)) as reader:
        run = show_run(reader, "k", 0)
    assert [(c["purpose"], c["state"], c["step"]) for c in run["callbacks"]] == [
        ("approval", "resolved", "_tool_call_action@2/0")]


def test_a_rejected_call_never_runs_and_the_model_gets_the_reason(tmp_path: Path) -> None:
    """Also: a tool named in approvals.tools (not marked) needs approval."""
    path = tmp_path / "journal.db"

    def reject(approval: Dict[str, Any]) -> None:
        assert approval["tool"] == "plain_refund"
        assert decide(str(path), approval["callback_id"], approve=False,
                      reason="the customer was refunded by phone") == "accepted"

    driver = _run(path, reject, agent=_agent("plain_refund"), **{"approvals.tools": ["plain_refund"]})

    assert REFUNDS == []
    expected = "The call of tool plain_refund was rejected by a reviewer: the customer was refunded by phone"
    assert _tool_messages(REQUESTS[-1]) == [expected]
    assert driver.outputs == [{"k": expected}]
    (rejected,) = list_approvals(str(path), "rejected")
    assert rejected["reason"] == "the customer was refunded by phone"


def test_no_decision_within_the_timeout_rejects_the_call_by_default(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    driver = _run(path, **{"approvals.timeout_s": 1})
    assert REFUNDS == []
    assert driver.outputs == [{"k": "The call of tool refund was not run: no reviewer's decision within 1 s"}]
    (timed_out,) = list_approvals(str(path), "timed_out")
    assert timed_out["tool"] == "refund"


def test_no_decision_within_the_timeout_fails_the_action_under_on_timeout_fail(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with pytest.raises(ActionFailed) as failed:
        _run(path, **{"approvals.timeout_s": 1, "approvals.on_timeout": "fail"})
    cause = failed.value.cause
    assert isinstance(cause, ApprovalTimedOut)
    assert cause.tool == "refund" and cause.call_id.endswith("-0-0")
    assert "'refund'" in str(cause) and cause.call_id in str(cause) and "1 s" in str(cause)
    assert REFUNDS == [] and len(REQUESTS) == 1  # the model was not asked again


def test_a_crash_in_the_approved_tool_replays_without_asking_again(tmp_path: Path) -> None:
    """Approved, then the process dies inside the tool (its effect made, its
    result not journaled): the replay finds the decision and does not park;
    the call in flight runs again (docs/durability.md, the in-flight window)."""
    path = tmp_path / "journal.db"
    CRASH["refund"] = True
    with pytest.raises(Crash):
        _run(path, lambda a: decide(str(path), a["callback_id"], approve=True))
    assert REFUNDS == ["A-1"]

    started = time.monotonic()
    driver = _run(path, **{"approvals.timeout_s": 30})  # no reviewer: it must not wait for one
    assert time.monotonic() - started < 10
    assert driver.outputs == [{"k": "refunded A-1"}]
    assert [a["state"] for a in list_approvals(str(path), None)] == ["resolved"]  # one approval, asked once


def test_a_crash_after_the_tool_result_committed_does_not_run_it_again(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    CRASH["answer"] = True
    with pytest.raises(Crash):
        _run(path, lambda a: decide(str(path), a["callback_id"], approve=True))
    assert REFUNDS == ["A-1"]

    driver = _run(path, **{"approvals.timeout_s": 30})
    assert REFUNDS == ["A-1"]  # replayed from the journal, not run again
    assert driver.outputs == [{"k": "refunded A-1"}]
    assert len(list_approvals(str(path), None)) == 1


def test_decide_refuses_a_callback_that_is_not_an_approval(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path)
    now_ms = int(time.time() * 1000)
    ref = CallbackRef("job", '"k"', 0, "claim@0", 0)
    record = store.register(ref, "c" * 32, "carrier claim", now_ms, now_ms + 60_000)
    store.close()
    with pytest.raises(ValueError, match="not an approval.*'carrier claim'"):
        decide(str(path), record.callback_id, approve=True)
    assert decide(str(path), "x" * 32, approve=True) == "unknown"


def test_the_cli_lists_approves_and_rejects_on_the_journal_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "journal.db"
    listed: List[Dict[str, Any]] = []
    codes: List[int] = []

    def review(approval: Dict[str, Any]) -> None:
        capsys.readouterr()
        codes.append(main(["approvals", "list", "--journal", str(path), "--json"]))
        listed.extend(json.loads(line) for line in capsys.readouterr().out.splitlines())
        codes.append(main(["approvals", "approve", "--journal", str(path), approval["callback_id"]]))
        codes.append(main(["approvals", "approve", "--journal", str(path), approval["callback_id"]]))

    _run(path, review)
    out = capsys.readouterr()
    assert codes == [0, 0, 1]
    assert [(a["tool"], a["state"], a["arguments"]) for a in listed] == [
        ("refund", "pending", {"order_id": "A-1", "api_key": "***"})]
    assert f"approved {listed[0]['callback_id']}" in out.out
    assert "already decided: resolved" in out.err
    assert REFUNDS == ["A-1"]

    # Another key's call, rejected on the command line.
    def reject(approval: Dict[str, Any]) -> None:
        codes.append(main(["approvals", "reject", "--journal", str(path), approval["callback_id"],
                           "--reason", "limit exceeded"]))

    driver = _run(path, reject, key="k2")
    assert codes[-1] == 0 and REFUNDS == ["A-1"]
    assert driver.outputs == [{"k2": "The call of tool refund was rejected by a reviewer: limit exceeded"}]
    assert main(["approvals", "reject", "--journal", str(path), "y" * 32, "--reason", "x"]) == 1
    assert "no approval" in capsys.readouterr().err
    assert main(["approvals", "list", "--journal", str(tmp_path / "missing.db")]) == 2
    assert "no journal at" in capsys.readouterr().err
    assert main(["approvals", "list", "--journal", str(path), "--state", "rejected"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["CALLBACK_ID", "KEY", "SEQ", "TOOL"] and len(table) == 2
    assert table[1].split()[1:4] == ["k2", "0", "refund"]

"""Run control on the production path: requests written by the CLI into a
real SQLite journal, read by the runner's poller, applied by the host core
(``KeyedHost`` over a ``KeyRunner`` on its own loop thread, as the Flink
operator runs it): pause and resume a key, cancel a run, park a record
whose retries are exhausted and retry it after a fix."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.cli.main import main as cli
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.keyed_host import KeyedHost
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.stores.sqlite_store import SQLiteJournalStore

STARTED: List[str] = []
CALLS: List[str] = []
FIXED = {"now": False}
OPTIONS = {"run_control.poll_interval_ms": 50}


async def work(event: InputEvent, ctx: Any) -> None:
    STARTED.append(event.input)
    if event.input.startswith("slow"):
        await asyncio.sleep(60)  # until cancelled
    ctx.send_event(OutputEvent(output=event.input.upper()))


def lookup(value: str) -> str:
    CALLS.append(value)
    return f"looked up {value}"


def flaky(event: InputEvent, ctx: Any) -> None:
    found = ctx.durable_execute(lookup, event.input)
    if not FIXED["now"]:
        raise RuntimeError(f"the downstream service refused {event.input}")
    ctx.send_event(OutputEvent(output=found))


class Job:
    """One subtask: engine, runner (own loop thread), host core, driver."""

    def __init__(self, path: Path, agent: Agent, **options: Any) -> None:
        self.store = SQLiteJournalStore(str(path))
        self.store.count_entries()  # the file and its tables, as a started job has them
        self.engine = AgentEngine(AgentPlan.from_agent(agent), {**OPTIONS, **options}, job_id="job", store=self.store)
        self.runner = KeyRunner(self.engine)
        self.driver = LocalDriver()
        self.host = KeyedHost(self.engine, self.driver, self.runner)

    def send(self, key: str, *values: str) -> None:
        for value in values:
            self.host.enqueue(key, value)

    def pump_until(self, done: Callable[[], bool], timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, "timed out"
            for key in list(self.driver.states):
                self.host.apply(key)  # as the local host does: apply, take retries, release idle keys
            time.sleep(0.02)

    def outputs(self) -> List[Any]:
        return [value for output in self.driver.outputs for value in output.values()]  # {key: output} each

    def close(self) -> None:
        self.runner.close()
        self.engine.close()


def _cli(journal: Path, *args: str) -> Dict[str, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["runs", *args, "--journal", str(journal), "--job", "job", "--json"]) == 0
    return json.loads(out.getvalue())


def _controls(journal: Path) -> List[Dict[str, Any]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["runs", "controls", "--journal", str(journal), "--json"]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    STARTED.clear()
    CALLS.clear()
    FIXED["now"] = False


def test_a_paused_key_waits_a_cancelled_run_ends_on_the_error_stream_and_both_survive_a_restart(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    job = Job(journal, Agent().add_action("work", [InputEvent], work))
    try:
        pause = _cli(journal, "pause", "--key", "a")
        job.pump_until(lambda: job.engine.run_control.is_paused("job", '"a"'))
        job.send("a", "a0", "a1")
        job.send("b", "slow b0", "b1")
        job.pump_until(lambda: "slow b0" in STARTED)
        time.sleep(0.3)
        assert "a0" not in STARTED  # paused: waiting in keyed state
        assert [r.seq for r in job.driver.load("a").pending] == [0, 1]

        cancel = _cli(journal, "cancel", "--key", "b", "--seq", "0")
        job.pump_until(lambda: "B1" in job.outputs())
        assert [e["error_type"] for e in job.driver.errors] == ["RunCancelled"]
        assert job.driver.errors[0]["seq"] == 0 and job.driver.errors[0]["key"] == "b"
        assert f"#{cancel['control_id']}" in job.driver.errors[0]["error_message"]
        assert "a0" not in STARTED

        _cli(journal, "resume", "--key", "a")
        job.pump_until(lambda: "A1" in job.outputs())
        assert job.outputs() == ["B1", "A0", "A1"]
        assert STARTED == ["slow b0", "b1", "a0", "a1"]
        # Every record accounted for: 3 outputs + 1 error record = 4 inputs.
        assert len(job.outputs()) + len(job.driver.errors) == 4
        states = {(c["action"], c["state"]) for c in _controls(journal)}
        assert states == {("pause", "applied"), ("cancel", "applied"), ("resume", "applied")}
        assert pause["state"] == "pending"  # as written; the job applied it
    finally:
        job.close()

    # A restart from a checkpoint taken before the cancel was applied: the
    # journal's run end says cancelled, so the record ends so again, running nothing.
    STARTED.clear()
    again = Job(journal, Agent().add_action("work", [InputEvent], work))
    try:
        again.send("b", "slow b0")
        again.pump_until(lambda: bool(again.driver.errors))
        assert [e["error_type"] for e in again.driver.errors] == ["RunCancelled"]
        assert STARTED == []
        # The key's pause is in the store, not in the job: a later pause holds a restarted job too.
        _cli(journal, "pause", "--key", "b")
        again.pump_until(lambda: again.engine.run_control.is_paused("job", '"b"'))
        again.send("b", "b2")
        time.sleep(0.3)
        assert STARTED == []
    finally:
        again.close()


def test_a_parked_record_waits_for_a_fix_and_a_retry_replays_its_committed_calls(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    agent = Agent().add_action("flaky", [InputEvent], flaky)
    job = Job(journal, agent, error_strategy="park", **{"error_retry.max_attempts": 2,
                                                       "error_retry.initial_backoff_s": 0.01})
    try:
        job.send("p", "x0", "x1")
        job.pump_until(lambda: any(c["action"] == "pause" for c in _controls(journal)))
        time.sleep(0.3)
        assert CALLS == ["x0"]  # the second attempt replayed the committed call
        assert job.outputs() == [] and job.driver.errors == []  # nothing lost, nothing emitted
        assert [r.seq for r in job.driver.load("p").pending] == [0, 1]
        (parked,) = _controls(journal)
        assert parked["requested_by"] == "runtime" and "record #0 parked" in parked["outcome"]
        assert "refused x0" in parked["outcome"]

        FIXED["now"] = True
        retry = _cli(journal, "retry", "--key", "p", "--seq", "0")
        job.pump_until(lambda: len(job.outputs()) == 2)
        assert job.outputs() == ["looked up x0", "looked up x1"]
        assert CALLS == ["x0", "x1"]  # x0's call was not made again
        controls = _controls(journal)
        assert [(c["action"], c["state"]) for c in controls] == [
            ("pause", "applied"), ("retry", "applied"), ("resume", "applied")]
        assert controls[2]["requested_by"] == f"retry #{retry['control_id']}"
    finally:
        job.close()


def test_a_request_no_subtask_could_apply_is_refused_at_the_cli(tmp_path: Path, capsys: Any) -> None:
    journal = tmp_path / "journal.db"
    SQLiteJournalStore(str(journal)).count_entries()  # an empty journal
    with pytest.raises(SystemExit):  # a retry names its record
        cli(["runs", "retry", "--journal", str(journal), "--job", "job", "--key", "a"])
    assert cli(["runs", "cancel", "--journal", str(journal), "--key", "nobody"]) == 2
    assert "no runs of key 'nobody'" in capsys.readouterr().err
    assert cli(["runs", "pause", "--journal", str(tmp_path / "missing.db"), "--job", "job", "--key", "a"]) == 2
    assert not (tmp_path / "missing.db").exists()  # never created by a control request


def test_a_record_from_the_error_stream_is_retried_after_a_fix_continuing_its_journal(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    job = Job(journal, Agent().add_action("flaky", [InputEvent], flaky), error_strategy="skip",
              **{"run_control.keep_failed": 4})
    try:
        job.send("s", "x0")
        job.pump_until(lambda: bool(job.driver.errors))
        [error] = job.driver.errors
        assert (error["seq"], error["error_type"]) == (0, "RuntimeError")
        assert [entry[:2] for entry in job.driver.load("s").failed] == [[0, "x0"]]  # kept for a retry

        FIXED["now"] = True
        retry = _cli(journal, "retry", "--key", "s", "--seq", "0")
        job.pump_until(lambda: job.outputs() == ["looked up x0"])
        assert CALLS == ["x0"]  # the call it committed before failing was replayed, not made again
        assert job.driver.load("s").failed == []
        (applied,) = [c for c in _controls(journal) if c["control_id"] == retry["control_id"]]
        assert applied["state"] == "applied" and applied["outcome"] == "record #0 queued again as #1"

        # Its run ends ok now: the journal's run end was written anew.
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli(["runs", "list", "--journal", str(journal), "--key", "s", "--json"]) == 0
        [run] = [json.loads(line) for line in out.getvalue().splitlines()]
        assert (run["seq"], run["state"], run["outcome"]) == (0, "finished", "ok")

        # A second retry of it finds nothing kept: ignored, saying why.
        again = _cli(journal, "retry", "--key", "s", "--seq", "0")
        job.pump_until(lambda: any(c["control_id"] == again["control_id"] and c["state"] == "ignored"
                                   for c in _controls(journal)))
        assert job.outputs() == ["looked up x0"]
    finally:
        job.close()


def test_kept_and_retried_records_survive_a_checkpoint_of_keyed_state() -> None:
    from flink_agents.runtime.execution.state import KeyState, PendingRecord

    state = KeyState(journal_id="job", next_seq=3, failed=[[0, {"order": "A-1"}, 1_700_000_000_000]],
                     pending=[PendingRecord(2, "x1", 5, replays=1)])
    restored = KeyState.from_json(state.to_json())  # what a checkpoint holds and a restore reads
    assert restored.failed == [[0, {"order": "A-1"}, 1_700_000_000_000]]
    assert restored.pending == [PendingRecord(2, "x1", 5, replays=1)]
    plain = KeyState.from_json(KeyState(journal_id="job").to_json())
    assert plain.failed == [] and '"failed"' not in KeyState(journal_id="job").to_json()  # nothing written

"""Promises of README and docs/ held by fast tests (issue 12).

1. The jobs' output file is replaced only when the job succeeds (README,
   "The output file is replaced only when the job succeeds"): a run that
   fails on a malformed input line or on a failing model leaves an earlier
   output byte-identical and no stray temporary file; the shipping-claims
   job shares the writer (``flink_agents.jobs.review_records.jsonl_output``).
2. ``flink.max_backlog`` back-pressure (docs/operations.md): the host blocks
   in ``KeyRunner.wait_for_capacity`` while the backlog is full, resumes when
   runs finish, and the backlog never exceeds the bound; the operator's
   ``process_element`` blocks the same way (fakes for Flink's state, timers
   and metrics, the operator built through ``open``).
3. Process mode runs Python functions in bundles of one element unless the
   job sets a bundle size, then the runtime warns (docs/performance.md,
   "Execution mode and bundles"); thread mode is left alone. This one starts
   a JVM (no job runs).

Blocking is observed, never timed: the host thread's stack shows it inside
``wait_for_capacity``, and the runs it waits for are held by gates the test
opens one at a time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.stores.memory_store import InMemoryJournalStore

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl"


# --- 1. the output file is replaced only when the job succeeds -----------------------------


def _sample_reviews(count: int) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:count]]


def _write_input(path: Path, lines: List[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _listing(directory: Path) -> List[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture
def earlier_review_output(tmp_path: Path) -> Dict[str, Any]:
    """A first, good run of the review-analysis job (local runner) over five
    sample reviews: its output file's bytes and the directory's listing."""
    from flink_agents.jobs import review_analysis

    reviews = _sample_reviews(5)
    good_input = _write_input(tmp_path / "good.jsonl", [json.dumps(r) for r in reviews])
    out_dir = tmp_path / "out"
    output = out_dir / "review_analysis.jsonl"
    code = review_analysis.main(["--runner", "local", "--input", str(good_input), "--output", str(output)])
    assert code == 0
    data = output.read_bytes()
    assert sorted((o["id"], o["ts"]) for o in map(json.loads, data.decode().splitlines())) == sorted(
        (r["id"], r["ts"]) for r in reviews
    )
    return {"reviews": reviews, "output": output, "bytes": data, "listing": _listing(out_dir)}


def test_a_run_failing_on_a_malformed_line_leaves_the_earlier_output_intact(
    earlier_review_output: Dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from flink_agents.jobs import review_analysis

    reviews = earlier_review_output["reviews"]
    output: Path = earlier_review_output["output"]
    # Different good lines (so a replaced file would differ), then a bad one.
    lines = [json.dumps({**r, "ts": r["ts"] + 1}) for r in reviews[:3]] + ['{"id": "B0BAD", "review": 7, "ts": 1}']
    bad_input = _write_input(tmp_path / "bad.jsonl", lines)
    capsys.readouterr()
    code = review_analysis.main(["--runner", "local", "--input", str(bad_input), "--output", str(output)])
    assert code == 2
    assert f"{bad_input}:4: bad review record" in capsys.readouterr().err
    assert output.read_bytes() == earlier_review_output["bytes"]
    assert _listing(output.parent) == earlier_review_output["listing"]  # no stray partial file


def test_a_run_whose_model_fails_leaves_the_earlier_output_intact(
    earlier_review_output: Dict[str, Any], scripted_chat_server: Any, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The model answers the first reviews and then something that is not
    the expected JSON: the record fails and with it the job (strategy
    ``fail``), after the other records' outputs were produced."""
    from flink_agents.jobs import review_analysis

    reviews = earlier_review_output["reviews"]
    output: Path = earlier_review_output["output"]
    poisoned = reviews[3]["review"]

    def reply(body: Dict[str, Any], index: int) -> Dict[str, Any]:
        user = json.loads(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        if user["review"] == poisoned:
            return {"role": "assistant", "content": "I would rather not say."}
        return {"role": "assistant", "content": json.dumps({"score": 4, "reasons": ["scripted"]})}

    scripted_chat_server.set_reply_fn(reply)
    shifted = [json.dumps({**r, "ts": r["ts"] + 1}) for r in reviews]
    new_input = _write_input(tmp_path / "new.jsonl", shifted)
    capsys.readouterr()
    code = review_analysis.main([
        "--runner", "local", "--input", str(new_input), "--output", str(output),
        "--model", "openai:scripted", "--base-url", scripted_chat_server.base_url, "--max-retries", "0",
    ])
    err = capsys.readouterr().err
    assert code == 1, err
    # Re-asked (chat.output_schema.max_retries) and still not JSON: a terminal StructuredOutputError.
    assert "StructuredOutputError" in err and "output schema 'ReviewAnalysis'" in err, err
    assert any(poisoned in json.dumps(body) for body in scripted_chat_server.requests)
    assert output.read_bytes() == earlier_review_output["bytes"]
    assert _listing(output.parent) == earlier_review_output["listing"]


def test_the_shared_writer_discards_written_lines_when_the_job_fails_midway(tmp_path: Path) -> None:
    """On Flink, outputs reach the writer as they are produced: a failure
    after some were written leaves the earlier file and no partial file."""
    from flink_agents.jobs.review_records import jsonl_output

    output = tmp_path / "out.jsonl"
    output.write_bytes(b'{"earlier": true}\n')

    class JobFailed(Exception):
        pass

    with pytest.raises(JobFailed):
        with jsonl_output(output, 3, "test") as write:
            write({"n": 1})
            write({"n": 2})
            assert output.read_bytes() == b'{"earlier": true}\n'  # not touched while running
            raise JobFailed("the job failed after two outputs")
    assert output.read_bytes() == b'{"earlier": true}\n'
    assert _listing(tmp_path) == ["out.jsonl"]

    with jsonl_output(output, 2, "test") as write:  # and a success replaces it
        write({"n": 1})
        write({"n": 2})
    assert output.read_text() == '{"n": 1}\n{"n": 2}\n'
    assert _listing(tmp_path) == ["out.jsonl"]


def test_a_failed_shipping_claims_run_leaves_the_earlier_output_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The callback port is taken, so the run fails inside the job (its
    ingress cannot start), after the output was opened for writing."""
    from flink_agents.jobs import shipping_claims

    output = tmp_path / "shipping_claims.jsonl"
    earlier = b'{"id": "earlier", "claim": "approved"}\n'
    output.write_bytes(earlier)
    reviews = _write_input(tmp_path / "reviews.jsonl", [json.dumps(r) for r in _sample_reviews(3)])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        capsys.readouterr()
        code = shipping_claims.main([
            "--runner", "local", "--input", str(reviews), "--output", str(output),
            "--callback-port", str(taken.getsockname()[1]),
        ])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error: the job failed" in err
    assert output.read_bytes() == earlier
    assert not output.with_name(output.name + ".partial").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(output.name) and "partial" in p.name]


# --- 2. flink.max_backlog back-pressure -----------------------------------------------------

GATES: Dict[int, threading.Event] = {}
STARTED: List[int] = []
RUNNING = {"now": 0, "max": 0}
_LOCK = threading.Lock()


@pytest.fixture
def gates() -> Dict[int, threading.Event]:
    GATES.clear()
    STARTED.clear()
    RUNNING.update(now=0, max=0)
    yield GATES
    for gate in GATES.values():  # never leave a run hanging
        gate.set()


async def gated_work(event: InputEvent, ctx: Any) -> None:
    """Holds the run until the test opens the record's gate."""
    n = event.input["n"]
    with _LOCK:
        STARTED.append(n)
        RUNNING["now"] += 1
        RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    await asyncio.to_thread(GATES[n].wait, 60)
    with _LOCK:
        RUNNING["now"] -= 1
    ctx.send_event(OutputEvent(output={"n": n}))


def _gated_agent() -> Agent:
    return Agent().add_action("gated", [InputEvent], gated_work)


def _blocked_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` waits on a condition inside ``function`` right now
    (its innermost Python frame is ``Condition.wait``, called under it)."""
    # With the collector off: on CPython 3.11, a collection that starts while
    # sys._current_frames holds the runtime's thread-list lock can deadlock the
    # process, uninterruptibly (python/cpython#106883, fixed in 3.12 the same
    # way). Late in a full run, with hundreds of threads and much garbage
    # left by PyFlink's in-process workers, it did: CI hung here.
    enabled = gc.isenabled()
    gc.disable()
    try:
        frame = sys._current_frames().get(thread.ident)
    finally:
        if enabled:
            gc.enable()
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return bool(names) and names[0] == "wait" and function in names


def _until(condition: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        # Not faster: by this point of a full run the process holds hundreds
        # of threads PyFlink's in-process workers left behind, and each poll
        # walks all their frames (sys._current_frames) under the GIL; at 2 ms
        # the poller starved the very threads it waited for.
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _open_a_running_gate(released: List[int]) -> int:
    """Open the gate of one record that is running (the oldest)."""
    def running() -> Optional[int]:
        with _LOCK:
            return next((n for n in STARTED if n not in released), None)

    _until(lambda: running() is not None, "a held run")
    n = running()
    assert n is not None
    GATES[n].set()
    released.append(n)
    return n


def test_the_key_runner_blocks_the_host_while_the_backlog_is_full(gates: Dict[int, threading.Event]) -> None:
    records, max_runs, max_backlog = 10, 2, 4
    for n in range(records):
        gates[n] = threading.Event()
    engine = AgentEngine(AgentPlan.from_agent(_gated_agent()), {}, job_id="job", store=InMemoryJournalStore())
    runner = KeyRunner(engine, max_concurrent_runs=max_runs, max_backlog=max_backlog)
    submitted: List[int] = []  # backlog right after each submit
    admitted: List[int] = []  # backlog when wait_for_capacity returned
    failure: List[BaseException] = []

    def host() -> None:  # what the operator does per record
        try:
            for n in range(records):
                state = KeyState(journal_id="job", next_seq=1, pending=[PendingRecord(0, {"n": n})])
                runner.submit(f"k{n}", state)
                submitted.append(runner.backlog)
                runner.wait_for_capacity()
                admitted.append(runner.backlog)
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    thread = threading.Thread(target=host, name="host", daemon=True)
    released: List[int] = []
    blocked: List[tuple] = []  # (records submitted, backlog, runs finished) each time the host blocked
    try:
        thread.start()
        while len(released) < records:
            if len(admitted) < records:
                # Every record the host gives beyond the bound blocks it, and
                # it stays blocked: the gates hold every run.
                _until(lambda: _blocked_in(thread, "wait_for_capacity"), "the host blocking on a full backlog")
                blocked.append((len(submitted), runner.backlog, len(released)))
                assert len(admitted) == len(submitted) - 1, "the host went on with the backlog full"
            expected_admitted = len(admitted) + 1 if len(admitted) < records else records
            _open_a_running_gate(released)
            # One run finished: the host resumes (and gives the next record).
            _until(lambda: len(admitted) >= expected_admitted, "the host resuming after a run finished")
        thread.join(timeout=20)
        assert not thread.is_alive() and not failure, failure
        assert all(runner.wait_for(f"k{n}", timeout_s=20) for n in range(records))
        outputs = [c.outputs for n in range(records) for c in runner.take(f"k{n}")]
    finally:
        for gate in gates.values():
            gate.set()
        runner.close()
        engine.close()

    assert max(submitted) == max_backlog  # the bound was reached, never passed
    assert all(backlog < max_backlog for backlog in admitted)
    # Blocked once the backlog was full, for each record from the 4th on.
    assert blocked == [(max_backlog + k, max_backlog, k) for k in range(records - max_backlog + 1)]
    assert RUNNING["max"] == max_runs
    assert outputs == [[{"n": n}] for n in range(records)]


# -- the operator, with fakes for Flink --------------------------------------------------------


class _Scope:
    """The operator's current key, as Flink sets it before each callback."""

    key: Any = None


class FakeValueState:
    """A keyed ``ValueState``: one value per key of the scope."""

    def __init__(self, scope: _Scope) -> None:
        self._scope = scope
        self.values: Dict[Any, Any] = {}

    def value(self) -> Any:
        return self.values.get(self._scope.key)

    def update(self, value: Any) -> None:
        self.values[self._scope.key] = value


class FakeMapState:
    """A keyed ``MapState``: one map per key of the scope."""

    def __init__(self, scope: _Scope) -> None:
        self._scope = scope
        self.maps: Dict[Any, Dict[Any, Any]] = {}

    def _map(self) -> Dict[Any, Any]:
        return self.maps.setdefault(self._scope.key, {})

    def items(self) -> List[Any]:
        return list(self._map().items())

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map()[key] = value

    def remove(self, key: Any) -> None:
        del self._map()[key]


class FakeCounter:
    """A PyFlink counter, meter or distribution that records nothing."""

    def inc(self, n: int = 1) -> None:
        pass

    def dec(self, n: int = 1) -> None:
        pass

    def mark_event(self, n: int = 1) -> None:
        pass

    def update(self, value: int) -> None:
        pass


class FakeMetricGroup:
    """PyFlink's ``MetricGroup`` interface (the operator mirrors metrics into it)."""

    def add_group(self, name: str, extra: str | None = None) -> "FakeMetricGroup":
        return self

    def counter(self, name: str) -> FakeCounter:
        return FakeCounter()

    def meter(self, name: str, time_span_in_seconds: int = 60) -> FakeCounter:
        return FakeCounter()

    def distribution(self, name: str) -> FakeCounter:
        return FakeCounter()

    def gauge(self, name: str, obj: Any) -> None:
        pass


class FakeRuntimeContext:
    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.states: Dict[str, FakeValueState] = {}

    def get_state(self, descriptor: Any) -> FakeValueState:
        return self.states.setdefault(descriptor.get_name(), FakeValueState(self.scope))

    def get_map_state(self, descriptor: Any) -> FakeMapState:
        return FakeMapState(self.scope)

    def get_metrics_group(self) -> FakeMetricGroup:
        return FakeMetricGroup()

    def get_number_of_parallel_subtasks(self) -> int:
        return 1


class FakeTimers:
    def __init__(self) -> None:
        self.processing: List[int] = []
        self.event: List[int] = []

    def current_processing_time(self) -> int:
        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return -(2**63)

    def register_processing_time_timer(self, at: int) -> None:
        self.processing.append(at)

    def register_event_time_timer(self, at: int) -> None:
        self.event.append(at)


class FakeContext:
    """``KeyedProcessFunction.Context`` (and ``OnTimerContext``) of one key."""

    def __init__(self, scope: _Scope, key: Any, timers: FakeTimers, time_domain: Any = None) -> None:
        self._scope, self._key, self._timers, self._time_domain = scope, key, timers, time_domain

    def get_current_key(self) -> Any:
        self._scope.key = self._key
        return self._key

    def timestamp(self) -> int:
        return -(2**63)  # Long.MIN_VALUE: records without a timestamp (their outputs apply in any callback)

    def timer_service(self) -> FakeTimers:
        return self._timers

    def time_domain(self) -> Any:
        return self._time_domain


def test_the_operators_process_element_blocks_while_the_backlog_is_full(gates: Dict[int, threading.Event]) -> None:
    from pyflink.datastream import TimeDomain

    from flink_agents.runtime.flink.operator import KEY_STATE_NAME, AgentOperatorFunction

    records = 4
    for n in range(records):
        gates[n] = threading.Event()
    config = {"journal.store": "memory", "max_concurrent_runs": 1, "flink.max_backlog": 2, "flink.inline_wait_ms": 0}
    operator = AgentOperatorFunction(AgentPlan.from_agent(_gated_agent()), config, "job")
    scope = _Scope()
    runtime_context = FakeRuntimeContext(scope)
    operator.open(runtime_context)
    timers = FakeTimers()
    returned: List[int] = []  # records whose process_element returned
    emitted: List[Any] = []
    failure: List[BaseException] = []

    def host() -> None:  # the operator thread
        try:
            for n in range(records):
                emitted.extend(operator.process_element({"n": n}, FakeContext(scope, f"k{n}", timers)))
                returned.append(n)
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    thread = threading.Thread(target=host, name="operator", daemon=True)
    released: List[int] = []
    try:
        thread.start()
        # Record 0 runs, record 1 waits for the run slot: two accepted, not
        # finished, the bound. process_element of record 1 does not return.
        for blocked_on in (1, 2, 3):
            _until(lambda: _blocked_in(thread, "wait_for_capacity"), f"process_element of record {blocked_on} blocking")
            assert returned == list(range(blocked_on))
            assert operator._runner.backlog == 2
            # The record was accepted before the host blocked: it is in keyed state.
            stored = runtime_context.states[KEY_STATE_NAME].values[f"k{blocked_on}"]
            assert [r.seq for r in KeyState.from_json(stored, "{}").pending] == [0]
            _open_a_running_gate(released)
            _until(lambda: returned == list(range(blocked_on + 1)), f"process_element of record {blocked_on} returning")
        _open_a_running_gate(released)
        thread.join(timeout=20)
        assert not thread.is_alive() and not failure, failure
        # Each key's finished record is applied in a callback of its key (a poll).
        for n in range(records):
            assert operator._runner.wait_for(f"k{n}", timeout_s=20)
            ctx = FakeContext(scope, f"k{n}", timers, TimeDomain.PROCESSING_TIME)
            emitted.extend(operator.on_timer(timers.current_processing_time(), ctx))
    finally:
        for gate in gates.values():
            gate.set()
        operator.close()
    assert sorted(released) == list(range(records))
    assert emitted == [{"n": n} for n in range(records)]
    assert RUNNING["max"] == 1


# --- 3. process mode: bundles of one element ------------------------------------------------


def _bundle_size_after_to_datastream(settings: Dict[str, str]) -> Optional[str]:
    """Build (not run) a job with an agent on an environment with
    ``settings``; the bundle size in its configuration afterwards."""
    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.util.java_utils import get_j_env_configuration

    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    config = Configuration()
    for key, value in settings.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    records = env.from_collection(["a"], type_info=Types.STRING())
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{"journal.store": "memory"})
    agents_env.from_datastream(records, lambda r: r, key_type=Types.STRING()).apply(_gated_agent()).to_datastream()
    j_config = get_j_env_configuration(env._j_stream_execution_environment)
    key = "python.fn-execution.bundle.size"
    return j_config.getString(key, None) if j_config.containsKey(key) else None


BUNDLE_CASES = [
    # (job settings, bundle size afterwards, warned)
    ({"python.execution-mode": "process"}, "1", False),
    ({}, "1", False),  # process is PyFlink's default
    ({"python.execution-mode": "process", "python.fn-execution.bundle.size": "1"}, "1", False),
    ({"python.execution-mode": "process", "python.fn-execution.bundle.size": "1000"}, "1000", True),
    ({"python.execution-mode": "thread"}, None, False),
]


def test_process_mode_gets_bundles_of_one_and_a_warning_when_the_job_set_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = []
    for settings, _, _ in BUNDLE_CASES:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="flink_agents"):
            size = _bundle_size_after_to_datastream(settings)
        warnings = [
            r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "python.fn-execution.bundle.size" in r.getMessage()
        ]
        seen.append((settings, size, bool(warnings)))
        if warnings:
            assert warnings == [
                "python.fn-execution.bundle.size is 1000: timers registered in the bundle a checkpoint "
                "flushes are not in that checkpoint, so records pending at a restore may wait for the "
                "key's next input"
            ]
    assert seen == BUNDLE_CASES

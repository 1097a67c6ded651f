"""Shared by the framework integration tests (``tests/test_framework_*.py``):
records run on the in-process engine, progress grouped by commit, crashes at
the k-th journal write, and (for ``*_e2e``) a keyed job on the mini-cluster.
Nothing here is shipped to Python workers."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, TypeVar

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.execution.usage import PriceTable, Usage
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.journal import TRACE_STEP
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.flink_jobs import mini_cluster_env
from tests.support import host_runs

T = TypeVar("T")

# The two places a crash can hit a journal write: once it is durable, or just before.
CRASH_MODES = ("after_write", "before_write")

# Set, LangChain sends traces to LangSmith.
LANGSMITH_VARIABLES = ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


class Crash(BaseException):
    """A simulated process crash."""


def engine_for(agent: Agent, store: InMemoryJournalStore, config: Optional[Mapping[str, Any]] = None) -> AgentEngine:
    """An engine running ``agent`` with exactly ``config`` over ``store``."""
    return AgentEngine(AgentPlan.from_agent(agent), dict(config or {}), job_id="job", store=store)


def progress_engine(
    agent: Agent, store: InMemoryJournalStore, config: Optional[Mapping[str, Any]] = None,
) -> AgentEngine:
    """An engine running ``agent`` over ``store`` with progress records on
    (``progress.enabled``) and ``config`` on top."""
    return engine_for(agent, store, {"progress.enabled": True, **(config or {})})


def run_records(
    engine: AgentEngine, records: Iterable[Tuple[Any, Any]], driver: Optional[LocalDriver] = None,
) -> LocalDriver:
    """Process ``(key, value)`` records in order on ``engine`` (each on an
    event loop of its own), then close the engine; the driver (a new one
    unless given) holds the outputs and progress records."""
    driver = LocalDriver() if driver is None else driver
    try:
        for key, value in records:
            host_runs.process(engine, driver, key, value)
    finally:
        engine.close()
    return driver


def process(
    agent: Agent, store: InMemoryJournalStore, value: Any = "go", key: Any = "k",
    config: Optional[Mapping[str, Any]] = None,
) -> LocalDriver:
    """Process one record on a fresh progress engine over ``store``: what a
    restore to before the record looks like (a second call with the same
    store replays what the first journaled). Raises what the run raises."""
    return run_records(progress_engine(agent, store, config), [(key, value)])


# The progress records of a turn, by commit: one model request and no tool
# (the start, then the answer with the run's end).
ONE_REQUEST_COMMITS = {
    1: ["run_started", "turn_started"],
    2: ["model_reply", "step_completed", "output", "run_finished"],
}
# One round of three parallel tools: the start | reply 1 (before the tools
# start) | the three results (one group commit) | reply 2 with the run's end.
THREE_TOOLS_COMMITS = {
    1: ["run_started", "turn_started"],
    2: ["model_reply"],
    3: ["tool_result"] * 3,
    4: ["model_reply", "step_completed", "output", "run_finished"],
}


def first_model_reply(progress: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The first ``model_reply`` among the progress records."""
    return next(r for r in progress if r["kind"] == "model_reply")


def kinds_by_commit(records: List[Dict[str, Any]]) -> Dict[int, List[str]]:
    """The kinds of progress records, grouped by the commit they came with."""
    commits: Dict[int, List[str]] = {}
    for record in records:
        commits.setdefault(record["commit"], []).append(record["kind"])
    return commits


def run_local(agent: Agent, journal: Path, job_id: str, value: Any = "go", key: Any = "k") -> Any:
    """Run one record through the local runner (``AgentsExecutionEnvironment
    .get_execution_environment()``) over a SQLite journal at ``journal``;
    its output. A second call with the same ``journal`` and ``job_id``
    replays what the first journaled, as a restart does. Raises what the
    run raises (a ``Crash`` included)."""
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({"job-identifier": job_id, "journal.store": "sqlite", "journal.sqlite.path": str(journal)})
    outputs = env.from_list([{"key": key, "value": value}]).apply(agent).to_list()
    env.execute()
    (output,) = outputs
    return output[key]


def _no_writes(entries: Any) -> None:
    raise AssertionError("a replay wrote to the journal")


def refuse_writes(store: InMemoryJournalStore) -> None:
    """Make any further write to ``store`` fail the test (a replay writes nothing)."""
    store.before_append = _no_writes


def _hook(mode: str) -> str:
    return "after_append" if mode == "after_write" else "before_append"


def crash_at_write(store: InMemoryJournalStore, mode: str, k: int,
                   at_crash: Callable[[List[Any]], None] | None = None) -> None:
    """Arm ``store`` to raise ``Crash`` at its k-th write: once the write is
    durable (``mode`` "after_write") or just before it ("before_write").
    ``at_crash`` is given the entries durable at the crash (every counted
    write's, the k-th one's too after it), just before it.

    Writes of trace marks only (``TRACE_STEP``: a traced run's exporter marks
    the spans it sent, on its own thread, whenever an export ends) are not
    counted: they are no write of the run, and counting them made the k-th
    write depend on the exporter's timing."""
    counted = [store.writes]  # the writes before arming count as before
    durable: List[Any] = []

    def crash(entries: Any) -> None:
        if entries and all(entry.step == TRACE_STEP for entry in entries):
            return
        counted[0] += 1
        if mode == "after_write":
            durable.extend(entries)
        if counted[0] == k:
            if at_crash is not None:
                at_crash(list(durable))
            raise Crash(f"crash at write {k}")
        if mode != "after_write":
            durable.extend(entries)

    setattr(store, _hook(mode), crash)


def disarm(store: InMemoryJournalStore, mode: str) -> None:
    """Undo ``crash_at_write(store, mode, ...)``."""
    setattr(store, _hook(mode), None)


def crash_and_recover(store: InMemoryJournalStore, mode: str, k: int, run: Callable[[], T],
                      at_crash: Callable[[List[Any]], None] | None = None) -> T:
    """``run()`` crashing at write k of ``store`` (see ``crash_at_write``),
    then ``run()`` again without the crash: what it returns."""
    crash_at_write(store, mode, k, at_crash)
    with pytest.raises(Crash):
        run()
    disarm(store, mode)
    return run()


def recoveries(
    mode: str, writes: int, run: Callable[[InMemoryJournalStore], T], reset: Callable[[], Any],
    at_crash: Callable[[List[Any]], None] | None = None,
) -> Iterator[Tuple[int, T]]:
    """For each write k of a run that writes ``writes`` times: ``reset()``,
    then ``run(store)`` on a fresh store crashing at write k and again
    without the crash (``crash_and_recover``); yields k and what the second
    ``run`` returned."""
    for k in range(1, writes + 1):
        reset()
        store = InMemoryJournalStore()
        yield k, crash_and_recover(store, mode, k, lambda: run(store), at_crash)


def check_one_request_turn(progress: List[Dict[str, Any]], answer: Any) -> None:
    """The progress of a turn that asked the model once and got ``answer``
    (no tool call): two commits, the start and the reply with the end."""
    assert kinds_by_commit(progress) == ONE_REQUEST_COMMITS
    reply = first_model_reply(progress)
    assert reply["content"] == answer and reply["tool_calls"] == []


def check_repeated_calls(mode: str, k: int, calls: Counter, expected: Counter,
                         ran: Counter | None = None, durable: Counter | None = None) -> None:
    """After a crash at write k and the recovery: a crash after the write
    repeats no call; one before it repeats each call at most once.

    With ``ran`` (the calls made when the crash came) and ``durable`` (those
    whose outcome was journaled by then), a crash after the write repeats
    exactly the calls made but not journaled: which results a write holds
    can depend on timing (a parallel round's group commit waits 5 ms for
    its siblings, ``RunJournal.call``)."""
    if mode == "after_write" and ran is not None and durable is not None:
        assert calls == expected + (ran - durable), f"crash after write {k}: {calls}, made {ran}, journaled {durable}"
    elif mode == "after_write":
        assert calls == expected, f"crash after write {k}: {calls}"
    else:
        for call, count in calls.items():
            assert expected[call] <= count <= expected[call] + 1, f"{call}: crash before write {k}"


def without_langsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing goes to LangSmith (only sent when these are set)."""
    for name in LANGSMITH_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def collect_keyed_job(
    records: List[Any], key_selector: Callable[[Any], Any], agent: Agent, job_name: str, journal: Path,
    parallelism: int = 2,
) -> List[Any]:
    """Run ``agent`` over ``records`` keyed by ``key_selector`` as a job on
    the local mini-cluster (no restarts, the journal in SQLite at
    ``journal``) until the collection ends; its outputs."""
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = mini_cluster_env(parallelism)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{"journal.sqlite.path": str(journal)})
    stream = agents_env.from_datastream(env.from_collection(records), key_selector).apply(agent).to_datastream()
    with stream.execute_and_collect(job_name) as collected:
        return list(collected)


# -- usage (docs/durability.md, "Usage") ------------------------------------------------

# What the scripted OpenAI server adds to a reply's usage (``usage_extra``):
# 2 cached prompt tokens, 1 reasoning token.
OPENAI_USAGE_DETAILS = {"prompt_tokens_details": {"cached_tokens": 2},
                        "completion_tokens_details": {"reasoning_tokens": 1}}
PRICES = {"usage.prices": {"gpt-4o-mini": {"input": 1.0, "cached_input": 0.5, "output": 4.0}}}


def check_usage(
    records: Iterable[Tuple[Any, Any]], make_engine: Callable[[], AgentEngine], action: str, model: str,
    cached: Optional[int], reasoning: Optional[int],
) -> List[Dict[str, Any]]:
    """Run ``records`` on ``make_engine()``, then replay them on a second
    engine over the same store; check both engines' usage metrics
    (``action.<action>.model.<model>.*``) equal the usage the progress
    stream shows per model reply (with its times and ``response_model``),
    and that the run's end carries the total. Returns the first run's model replies."""
    snapshots = []
    replies: List[Dict[str, Any]] = []
    for attempt in range(2):
        engine = make_engine()
        driver = run_records(engine, records)
        if attempt == 0:
            replies = [r for r in driver.progress if r["kind"] == "model_reply"]
            assert replies, "no model reply"
            for reply in replies:
                assert reply["response_model"] == model
                assert reply["start"].endswith("Z") and reply["duration_ms"] >= 0
                assert reply["usage"]["input_tokens"] > 0 and reply["usage"]["output_tokens"] > 0
                assert reply["usage"].get("cached_input_tokens") == cached
                assert reply["usage"].get("reasoning_tokens") == reasoning
            finished = [r for r in driver.progress if r["kind"] == "run_finished"]
            total = {name: sum(r["usage"].get(name, 0) for r in replies) for name in replies[0]["usage"]}
            assert len(finished) == len({r["seq"] for r in replies}) and "start" in finished[-1]
            if len(finished) == 1:
                assert finished[0]["usage"] == total
        snapshots.append({name: value for name, value in engine.counters.metrics.snapshot().items()
                          if ".model." in name})
    first, replayed = snapshots
    group = f"action.{action}.model.{model}."
    assert first[group + "promptTokens"] == sum(r["usage"]["input_tokens"] for r in replies)
    assert first[group + "completionTokens"] == sum(r["usage"]["output_tokens"] for r in replies)
    assert first.get(group + "cachedTokens") == (None if cached is None else cached * len(replies))
    assert first.get(group + "reasoningTokens") == (None if reasoning is None else reasoning * len(replies))
    costs = [PriceTable(PRICES["usage.prices"]).cost(model, Usage(**r["usage"])) for r in replies]
    expected_cost = None if None in costs else round(sum(costs) * 1e6)
    assert first.get(group + "costMicroUsd") == expected_cost
    assert replayed == first, "a replay counts each journaled call once, as the first run did"
    return replies

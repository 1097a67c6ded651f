"""A job-wide rate limit (``rate_limits.scope: job``, issue 32): two engines,
the two subtasks of one job (parallelism 2), share one window per connection
in their journal store, and call an OpenAI-compatible server that meters its
quota as a provider does (``tests.support.rate_limited_server``).

Time is shrunk tenfold: the limiter's window is 1 s (``RateLimits.window_s``)
and the server meters over 1 s, so ``requests_per_minute: 600`` is 10
requests in any 1 s, the arithmetic of 60 per minute over 10 s windows.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import InputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.integrations.chat_models.openai.openai_chat_model import OpenAIChatModelConnection
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores import InMemoryJournalStore, JournalStore, PostgresJournalStore, SQLiteJournalStore
from tests.support import host_runs
from tests.support.chat_turn import ChatSetup, answer, ask
from tests.support.journal_stores import postgres_schema
from tests.support.rate_limited_server import RateLimitedChatServer, most_in_any_window

WINDOW_S = 1.0
PER_WINDOW = 10
LIMIT = PER_WINDOW * 6  # the server's quota, per (shrunk) minute: 10 per 1 s
CONFIGURED_RPM = 600  # 600 per minute over 1 s windows: 10 per window, as the server


def _agent(base_url: str) -> Agent:
    agent = Agent()
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=OpenAIChatModelConnection, api_key="test-key", base_url=base_url, max_retries=0))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=ChatSetup, connection="conn", model="m"))
    agent.add_action("ask", [InputEvent], ask)
    agent.add_action("answer", [ChatResponseEvent], answer)
    return agent


def _engine(agent: Agent, store: JournalStore, scope: str, subtask: int) -> AgentEngine:
    config = {"rate_limits.scope": scope, "rate_limits": {"conn": {"requests_per_minute": CONFIGURED_RPM}}}
    engine = AgentEngine(AgentPlan.from_agent(agent), config, job_id="review-job", store=store,
                         task=("agent", subtask), parallelism=2)
    engine.rate_limits.window_s = WINDOW_S  # before the connection is built
    return engine


def _run_subtasks(engines: List[AgentEngine], records: List[List[Tuple[str, str]]]) -> List[LocalDriver]:
    """Each engine runs its records on a thread of its own (its own loop), as
    two subtasks would; returns their drivers once both drained."""
    drivers = [LocalDriver() for _ in engines]
    failures: List[BaseException] = []

    def run(engine: AgentEngine, driver: LocalDriver, mine: List[Tuple[str, str]]) -> None:
        try:
            host_runs.run_records(engine, driver, mine)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=run, args=triple) for triple in zip(engines, drivers, records)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    return drivers



def _outputs(driver: LocalDriver) -> List[Any]:
    return [value for output in driver.outputs for value in (output.values() if isinstance(output, dict) else [output])]


def _stores(kind: str, tmp_path: Path):
    """Two stores over one backing store, as two TaskManagers open it."""
    if kind == "sqlite":
        path = tmp_path / "journal.db"
        return _closing([SQLiteJournalStore(path), SQLiteJournalStore(path)])
    return _postgres_pair()


class _closing:
    def __init__(self, stores: List[JournalStore]) -> None:
        self.stores = stores

    def __enter__(self) -> List[JournalStore]:
        return self.stores

    def __exit__(self, *exc: Any) -> None:
        for store in self.stores:
            store.close()


class _postgres_pair:
    def __enter__(self) -> List[JournalStore]:
        self._schema = postgres_schema()
        dsn = self._schema.__enter__()
        self._pair = _closing([PostgresJournalStore(dsn), PostgresJournalStore(dsn)])
        return self._pair.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._pair.__exit__(*exc)
        self._schema.__exit__(*exc)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_subtasks_never_exceed_the_job_limit_together(kind: str, tmp_path: Path) -> None:
    with RateLimitedChatServer(per_minute=LIMIT, latency_s=0.02, window_s=WINDOW_S) as server, \
            _stores(kind, tmp_path) as stores:
        agent = _agent(server.base_url)
        engines = [_engine(agent, store, "job", subtask) for subtask, store in enumerate(stores)]
        # Key skew: subtask 0 has three times subtask 1's keys.
        records = [[(f"p{i}", f'{{"id": "p{i}", "review": "r{i}"}}') for i in range(30)],
                   [(f"q{i}", f'{{"id": "q{i}", "review": "s{i}"}}') for i in range(10)]]
        try:
            drivers = _run_subtasks(engines, records)
        finally:
            for engine in engines:
                engine.close()
        answered = server.stats()["answered"]
        busy_subtask = [at for at, content in server.answered_contents if '"id": "p' in content]
    assert [len(_outputs(driver)) for driver in drivers] == [30, 10]
    assert server.refused == 0
    assert len(answered) == 40
    assert most_in_any_window(answered, WINDOW_S) == PER_WINDOW  # the whole limit, never more
    # Shared, not split: once subtask 1's 10 calls are done, the busy subtask
    # has the whole window to itself, more than the half a subtask scope
    # would give it (PER_WINDOW // 2 in any window, whatever the machine's
    # speed). A throughput bound told the two apart too, but a loaded
    # machine moved it (6.7 a window against a bound of 7).
    assert len(busy_subtask) == 30
    assert most_in_any_window(busy_subtask, WINDOW_S) > PER_WINDOW // 2
    waits = [engine.counters.metrics.snapshot().get("connection.conn.rateLimitWaits", 0) for engine in engines]
    assert sum(waits) >= 40 - PER_WINDOW - 2  # the shared waits are counted


def _one_busy_subtask(tmp_path: Path, scope: str, count: int) -> List[float]:
    """``count`` records on subtask 0 of two (subtask 1 idle) in ``scope``,
    on one SQLite file; the server's answer times, after checking that it
    refused none and answered all."""
    with RateLimitedChatServer(per_minute=LIMIT, latency_s=0.02, window_s=WINDOW_S) as server, \
            _stores("sqlite", tmp_path) as stores:
        agent = _agent(server.base_url)
        engines = [_engine(agent, store, scope, subtask) for subtask, store in enumerate(stores)]
        records = [[(f"p{i}", f'{{"id": "p{i}", "review": "r{i}"}}') for i in range(count)], []]
        try:
            _run_subtasks(engines, records)
        finally:
            for engine in engines:
                engine.close()
        answered = server.stats()["answered"]
    assert server.refused == 0 and len(answered) == count
    return answered


def test_one_busy_subtask_gets_the_whole_job_limit(tmp_path: Path) -> None:
    answered = _one_busy_subtask(tmp_path, "job", 25)
    # More than the subtask scope's share (limit // 2 = 5 per window): the whole limit.
    assert most_in_any_window(answered, WINDOW_S) == PER_WINDOW
    # 10 + 10 + 5: two windows and a bit (3.005 seen once on a loaded
    # machine); the subtask scope's share (5 a window) would need four.
    assert max(answered) - min(answered) < 3.5 * WINDOW_S


def test_the_subtask_scope_leaves_an_idle_subtasks_share_unused(tmp_path: Path) -> None:
    answered = _one_busy_subtask(tmp_path, "subtask", 10)
    assert most_in_any_window(answered, WINDOW_S) == PER_WINDOW // 2  # its share only


def test_jobs_do_not_share_a_window(tmp_path: Path) -> None:
    store = InMemoryJournalStore()
    agent = _agent("http://127.0.0.1:9/v1")
    engines = [AgentEngine(AgentPlan.from_agent(agent), {"rate_limits.scope": "job"}, job_id=job, store=store)
               for job in ("job-a", "job-b")]
    try:
        assert engines[0].rate_limits.scope_name("conn") != engines[1].rate_limits.scope_name("conn")
        assert engines[0].rate_limits.scope_name("conn") == '["job-a", "conn"]'
    finally:
        for engine in engines:
            engine.close()


@pytest.mark.parametrize("config, key", [
    ({"rate_limits.scope": "jobwide"}, "rate_limits.scope"),
    ({"rate_limits": {"scope": "cluster"}}, "rate_limits.scope"),
])
def test_a_bad_scope_fails_at_engine_start_naming_the_option(config: Dict[str, Any], key: str) -> None:
    agent = _agent("http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=f"'{key}'.*'subtask' or 'job'"):
        AgentEngine(AgentPlan.from_agent(agent), config, store=InMemoryJournalStore())


def test_a_connections_own_scope_wins_and_is_checked() -> None:
    agent = _agent("http://127.0.0.1:9/v1")
    config = {"rate_limits": {"conn": {"requests_per_minute": 60, "max_concurrent_requests": 8, "scope": "job"}}}
    engine = AgentEngine(AgentPlan.from_agent(agent), config, store=InMemoryJournalStore(), parallelism=4)
    try:
        connection = engine._resources.get("conn", ResourceType.CHAT_MODEL_CONNECTION)
        limiter = connection._rate_limiter
        assert limiter.shared is not None and limiter.shared.requests_cap == 10
        assert (limiter.limits.requests_per_minute, limiter.limits.max_concurrent_requests) == (60, 2)
    finally:
        engine.close()
    engine = AgentEngine(AgentPlan.from_agent(agent), {"rate_limits.conn.scope": "global",
                                                       "rate_limits.conn.requests_per_minute": 60},
                         store=InMemoryJournalStore())
    try:
        with pytest.raises(Exception, match="'rate_limits.conn.scope'.*'subtask' or 'job'"):
            engine._resources.get("conn", ResourceType.CHAT_MODEL_CONNECTION)
    finally:
        engine.close()


def test_the_job_scope_costs_one_claim_and_one_restamp_per_request(tmp_path: Path) -> None:
    with RateLimitedChatServer(per_minute=LIMIT, latency_s=0.0, window_s=WINDOW_S) as server:
        store = SQLiteJournalStore(tmp_path / "journal.db")
        calls: Dict[str, int] = {"claim": 0, "restamp": 0}
        for name in calls:
            method = getattr(store, name)

            def counted(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
                calls[_name] += 1
                return _method(*args, **kwargs)

            setattr(store, name, counted)
        engine = _engine(_agent(server.base_url), store, "job", 0)
        try:
            _run_subtasks([engine], [[(f"p{i}", f'{{"id": "p{i}", "review": "r"}}') for i in range(5)]])
        finally:
            engine.close()
            deadline = time.monotonic() + 2
            while calls["restamp"] < 5 and time.monotonic() < deadline:  # fire and forget
                time.sleep(0.01)
            store.close()
    assert calls == {"claim": 5, "restamp": 5}

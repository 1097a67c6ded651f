"""The PostgreSQL journal's connection pool (issue 18): bounded per worker
process, connections reused and shared by the stores of a process, released
at close, never used across ``os.fork``, and a terminated backend or a
restarted server survived by the next journal write without an error
reaching the action.

Connections are counted on the server, in ``pg_stat_activity``, by an
``application_name`` unique to each test. The server-restart cases start a
second throwaway server of their own (``tools/postgres.sh`` on another port
and data directory) so the shared one is never stopped. Everything skips
without ``FLINK_AGENTS_POSTGRES_DSN`` (failing under ``CI=true``), as the
other PostgreSQL tests.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores import PostgresJournalStore
from flink_agents.stores._postgres_pool import PoolSize
from tests.support.journal_stores import FakeTime, entry, postgres_dsn, postgres_schema
from tests.support import host_runs
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
CALLS: Counter = Counter()


# --- counting connections on the server ---------------------------------------------------


def _named(dsn: str) -> Tuple[str, str]:
    """``dsn`` with an application_name of its own, and that name."""
    from psycopg.conninfo import make_conninfo

    name = f"fa_pool_{uuid.uuid4().hex[:10]}"
    return make_conninfo(dsn, application_name=name), name


def _backends(dsn: str, name: str) -> List[int]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        return sorted(row[0] for row in rows)


def _wait_backends(dsn: str, name: str, count: int, timeout_s: float = 5.0) -> List[int]:
    """The backends of ``name`` once there are ``count`` (they exit asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = _backends(dsn, name)
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def _terminate(dsn: str, name: str) -> int:
    """Terminate every backend of ``name`` (what a server restart looks like to
    its clients); returns how many, once they are gone (a pool may meanwhile
    open new ones)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        killed = [row[0] for row in admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )]
    deadline = time.monotonic() + 5
    while set(killed) & set(_backends(dsn, name)):  # they exit asynchronously
        assert time.monotonic() < deadline, f"backends {killed} still there after 5 s"
        time.sleep(0.02)
    return len(killed)


class PeakCounter:
    """Samples the backends of one application_name every few milliseconds
    while in use; ``peak`` is the most seen at once."""

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn, self.name, self.peak = dsn, name, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as admin:
            while not self._stop.is_set():
                count = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (self.name,)
                ).fetchone()[0]
                self.peak = max(self.peak, int(count))
                time.sleep(0.003)

    def __enter__(self) -> "PeakCounter":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    with postgres_schema() as dsn:
        yield dsn


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    errors: List[BaseException] = []

    def run(index: int) -> None:
        try:
            work(index)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# --- bounded, reused, shared, released ------------------------------------------------------


def test_sixteen_threads_never_open_more_than_max_size_connections(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    stores = [PostgresJournalStore(dsn, pool=PoolSize(1, 3)) for _ in range(2)]  # two stores, one pool
    try:
        with PeakCounter(pg_dsn, name) as peak:
            _in_threads(16, lambda index: [
                stores[index % 2].append("job", f"k{index}", seq, [entry("a@0", 0)]) for seq in range(25)
            ])
        assert 1 <= peak.peak <= 3
        assert len(_backends(pg_dsn, name)) <= 3
        assert stores[0].count_entries() == 16 * 25
        assert stores[0].pool_stats()["pool_max"] == 3
        assert stores[0].pool_stats()["connections_num"] <= 3  # never replaced, never more
    finally:
        for store in stores:
            store.close()


def test_connections_are_reused_across_calls(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    store = PostgresJournalStore(dsn, pool=PoolSize(1, 4))
    try:
        store.append("job", "k", 0, [entry("a@0", 0)])
        first = _wait_backends(pg_dsn, name, len(_backends(pg_dsn, name)))
        for seq in range(1, 100):
            store.append("job", "k", seq, [entry("a@0", 0)])
            store.load_run("job", "k", seq)
        assert _backends(pg_dsn, name) == first  # the same backends, no new ones
        assert 1 <= len(first) <= 2  # min_size 1, plus the one a waiting first call grows
        assert store.pool_stats()["connections_num"] == len(first)
    finally:
        store.close()


def test_stores_of_a_process_share_one_pool_released_by_the_last_close(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    first, second = PostgresJournalStore(dsn, pool=PoolSize(1, 2)), PostgresJournalStore(dsn, pool=PoolSize(1, 2))
    try:
        first.append("job", "a", 0, [entry("a@0", 0)])
        second.append("job", "b", 0, [entry("a@0", 0)])
        opened = first.pool_stats()["connections_num"]
        assert second.pool_stats()["connections_num"] == opened <= 2  # the same pool's counter
        first.close()
        second.append("job", "b", 1, [entry("a@0", 0)])  # still open for the other store
        assert len(_backends(pg_dsn, name)) >= 1
        second.close()
        assert _wait_backends(pg_dsn, name, 0) == []  # the last close closed every connection
        first.append("job", "a", 1, [entry("a@0", 0)])  # a closed store takes a pool again
        assert first.count_entries() == 4
    finally:
        first.close()
        second.close()
    assert _wait_backends(pg_dsn, name, 0) == []


def test_pool_sizes_are_checked_and_read_from_the_job_configuration() -> None:
    assert PoolSize.from_config({}) == PoolSize(1, 4)
    assert PoolSize.from_config(
        {"journal.postgres.pool.min_size": "0", "journal.postgres.pool.max_size": 8}
    ) == PoolSize(0, 8)
    with pytest.raises(ValueError, match="journal.postgres.pool.max_size"):
        PoolSize.from_config({"journal.postgres.pool.max_size": 0})
    with pytest.raises(ValueError, match=r"max_size \(2\) must be >= 1 and >= journal.postgres.pool.min_size \(3\)"):
        PoolSize.from_config({"journal.postgres.pool.min_size": 3, "journal.postgres.pool.max_size": 2})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork only")
def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_alone(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    store = PostgresJournalStore(dsn, pool=PoolSize(1, 2))
    try:
        store.append("job", "k", 0, [entry("a@0", 0)])
        parent_backends = _backends(pg_dsn, name)
        opened = store.pool_stats()["connections_num"]
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                store.append("job", "k", 1, [entry("a@0", 0)])
                stats = store.pool_stats()
                os.write(write, f"{stats['connections_num']}".encode())
                store.close()
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(child, 0)
        child_opened = int(os.read(read, 64).decode() or -1)
        os.close(read)
        assert os.WEXITSTATUS(status) == 0
        assert child_opened >= 1  # connections of its own
        store.append("job", "k", 2, [entry("a@0", 0)])  # the parent's pool still works ...
        assert store.pool_stats()["connections_num"] == opened  # ... on the connections it had
        assert set(parent_backends) <= set(_backends(pg_dsn, name))
        assert store.count_entries() == 3
    finally:
        store.close()


# --- a terminated backend, a restarted server -------------------------------------------------


def test_the_next_write_after_every_backend_was_terminated_succeeds_without_a_retry(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    fake = FakeTime()
    store = PostgresJournalStore(dsn, pool=PoolSize(2, 4), sleep=fake.sleep, monotonic=fake.monotonic)
    try:
        _in_threads(4, lambda index: store.append("job", f"k{index}", 0, [entry("a@0", 0)]))
        opened = store.pool_stats()["connections_num"]
        assert _terminate(pg_dsn, name) >= 1
        store.append("job", "k0", 1, [entry("a@0", 0)])  # the check replaced the dead connection
        assert store.pool_stats()["connections_num"] > opened
        assert store.load_run("job", "k0", 1) == {("a@0", 0): entry("a@0", 0)}
        assert fake.slept == []  # no error reached the store's retry loop
        assert store.writes == 5
    finally:
        store.close()


def test_a_background_connect_cut_short_before_a_caller_waited_is_not_that_callers_error(pg_dsn: str) -> None:
    """A grow begun before a caller waited, and cut short (a terminated
    backend), is not raised to that caller: the pool connects again for it.
    (A CI run once saw such a grow's AdminShutdown reach a store's retry loop.)"""
    import psycopg

    from flink_agents.stores._postgres_pool import ProcessPools

    began = threading.Event()
    release = threading.Event()
    attempts: List[str] = []

    def connect(attempt: Callable[[str], Any]) -> Any:
        attempts.append("connect")
        if len(attempts) == 1:  # the pool's first, background connect
            began.set()
            release.wait(10)
            raise psycopg.OperationalError("terminating connection due to administrator command")
        return attempt(pg_dsn)

    pools = ProcessPools()
    # At most one connection: the caller has to wait for that grow.
    key = pools.acquire((f"{pg_dsn} application_name=fa_pool_{uuid.uuid4().hex[:10]}", 5, 1, 1), connect, "test pool")
    try:
        assert began.wait(10)  # the grow is under way before the caller waits
        threading.Timer(0.2, release.set).start()
        with pools.borrow(key) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        assert len(attempts) >= 2
    finally:
        release.set()
        pools.release(key)


def test_a_caller_out_of_time_raises_the_connect_failure_it_saw_not_a_bare_timeout(pg_dsn: str) -> None:
    """The failure of a connect begun before the caller waited is not raised
    at once (above), but when the caller's time runs out with no connection
    (the next connect hangs) it is what the caller raises: the server's
    words, not "no connection came free"."""
    import psycopg

    from flink_agents.stores._postgres_pool import ProcessPools

    began, release, hang = threading.Event(), threading.Event(), threading.Event()
    attempts: List[str] = []

    def connect(attempt: Callable[[str], Any]) -> Any:
        attempts.append("connect")
        if len(attempts) == 1:
            began.set()
            release.wait(10)
            raise psycopg.OperationalError("connection to server at 10.255.0.1 port 5432 failed: timeout expired")
        hang.wait(10)  # a server that does not answer, past the caller's deadline
        raise psycopg.OperationalError("the second connect")

    pools = ProcessPools()
    # Connect timeout 0: the caller waits 3 s (timeout + 3) at most.
    key = pools.acquire((f"{pg_dsn} application_name=fa_pool_{uuid.uuid4().hex[:10]}", 0, 1, 1), connect, "test pool")
    try:
        assert began.wait(10)
        threading.Timer(0.2, release.set).start()
        with pytest.raises(psycopg.OperationalError, match="10.255.0.1 port 5432 failed: timeout expired"):
            with pools.borrow(key):
                pass
    finally:
        release.set()
        hang.set()
        pools.release(key)


def _two_step_agent(between: Callable[[], None]) -> Agent:
    """An agent whose action makes two durable calls; ``between`` runs inside
    the first, so the second's journal write comes after it."""

    def first(text: str) -> str:
        CALLS["first"] += 1
        between()
        return text.upper()

    def second(text: str) -> str:
        CALLS["second"] += 1
        return text + "!"

    def act(event: InputEvent, ctx: Any) -> None:
        shouted = ctx.durable_execute(first, event.input)
        ctx.send_event(OutputEvent(output=ctx.durable_execute(second, shouted)))

    agent = Agent()
    agent.add_action("act", [InputEvent], act)  # error strategy fail: any error fails the record
    return agent


def _run_record(agent: Agent, store: PostgresJournalStore) -> LocalDriver:
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = LocalDriver()
    CALLS.clear()
    try:
        host_runs.process(engine, driver, "key", "hi")
    finally:
        engine.close()
    return driver


def test_a_record_rides_out_its_backends_being_terminated_between_two_calls(pg_dsn: str) -> None:
    dsn, name = _named(pg_dsn)
    store = PostgresJournalStore(dsn)
    try:
        driver = _run_record(_two_step_agent(lambda: _terminate(pg_dsn, name)), store)
        assert driver.outputs == [{"key": "HI!"}] and driver.errors == []
        assert CALLS == Counter(first=1, second=1)
    finally:
        store.close()


class OwnServer:
    """A PostgreSQL server of this test's own (``tools/postgres.sh`` on a free
    port and a fresh data directory), which it may stop and start."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.data = Path(f"/tmp/flink_agents_pg_pooltest_{self.port}")
        env = dict(os.environ, FLINK_AGENTS_PG_PORT=str(self.port), FLINK_AGENTS_PG_DATA=str(self.data))
        started = subprocess.run(
            ["bash", str(REPO / "tools" / "postgres.sh")], env=env, capture_output=True, text=True, timeout=180
        )
        if started.returncode != 0:
            message = f"tools/postgres.sh could not start a second server: {started.stderr[-2000:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        self.dsn = started.stdout.strip().splitlines()[-1]
        self.bindir = next(line.split("server binaries: ", 1)[1].split(" (")[0]
                           for line in started.stderr.splitlines() if "server binaries: " in line)

    def pg_ctl(self, *args: str) -> None:
        command = [f"{self.bindir}/pg_ctl", "-D", str(self.data), *args]
        if os.getuid() == 0:  # PostgreSQL refuses root: as tools/postgres.sh, run it as 'postgres'
            # runuser lives in /usr/sbin, which a plain PATH (CI's) may lack; su is the fallback.
            runuser = shutil.which("runuser", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
            if runuser is not None:
                command = [runuser, "-u", "postgres", "--", *command]
            else:
                command = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(shlex.quote(part) for part in command)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log = self.data / "server.log"
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl {' '.join(args)} exited {done.returncode}: {done.stderr[-500:]}\n{tail}")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        self.pg_ctl("-l", str(self.data / "server.log"), "-w", "start")

    def remove(self) -> None:
        try:
            self.stop()
        except (subprocess.SubprocessError, OSError, RuntimeError):
            # pg_ctl could not stop it: end the postmaster itself, so no
            # server outlives the test (its pid is the first line of postmaster.pid).
            try:
                pid = int((self.data / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGQUIT)
            except (OSError, ValueError, IndexError):
                pass
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[OwnServer]:
    postgres_dsn()  # skip (or fail under CI) as every PostgreSQL test
    server = OwnServer(tmp_path)
    try:
        yield server
    finally:
        server.remove()


def test_a_store_survives_a_server_restart_between_writes(own_server: OwnServer) -> None:
    dsn, name = _named(own_server.dsn)
    fake = FakeTime()
    store = PostgresJournalStore(dsn, sleep=fake.sleep, monotonic=fake.monotonic)
    try:
        _in_threads(4, lambda index: store.append("job", f"k{index}", 0, [entry("a@0", 0)]))
        opened = store.pool_stats()["connections_num"]
        own_server.stop()
        own_server.start()
        store.append("job", "k0", 1, [entry("a@0", 0)])
        assert store.pool_stats()["connections_num"] > opened  # new connections after the restart
        assert fake.slept == []  # the dead connections were replaced before use
        assert store.count_entries() == 5
    finally:
        store.close()


def test_a_record_rides_out_a_server_down_for_a_second_between_two_calls(own_server: OwnServer) -> None:
    """The server stops inside the first call and starts again a second later:
    the second call's journal write is refused, retried (``StoreRetry``) and
    lands on a new connection; the action sees nothing."""
    dsn, _ = _named(own_server.dsn)
    store = PostgresJournalStore(dsn)
    restarts: List[threading.Thread] = []
    start_failures: List[BaseException] = []

    def start() -> None:
        try:
            own_server.start()
        except BaseException as error:  # reported by the test, not as a stray thread exception
            start_failures.append(error)

    def restart_later() -> None:
        own_server.stop()
        restarts.append(threading.Timer(1.0, start))
        restarts[-1].start()

    try:
        started = time.monotonic()
        driver = _run_record(_two_step_agent(restart_later), store)
        assert driver.outputs == [{"key": "HI!"}] and driver.errors == []
        assert CALLS == Counter(first=1, second=1)
        assert time.monotonic() - started < 10
        # The store can reconnect before pg_ctl's own readiness poll returns:
        # the server is stopped (teardown) only once that start returned.
        for restart in restarts:
            restart.join(timeout=60)
        assert start_failures == []
    finally:
        store.close()


# --- parallelism 4: connections on the server -----------------------------------------------


def _agent_of_four_steps() -> Agent:
    def step(text: str) -> str:
        time.sleep(0.005)
        return text + "."

    def act(event: InputEvent, ctx: Any) -> None:
        text = event.input
        for _ in range(4):
            text = ctx.durable_execute(step, text)
        ctx.send_event(OutputEvent(output=text))

    agent = Agent()
    agent.add_action("act", [InputEvent], act)
    return agent


def _operator_instance(dsn: str, subtask: int, records: int) -> int:
    """One operator instance's work: an engine with its own store over ``dsn``
    processing ``records`` records; returns the outputs."""
    store = PostgresJournalStore(dsn)
    engine = AgentEngine(AgentPlan.from_agent(_agent_of_four_steps()), {}, job_id=f"job{subtask}", store=store)
    driver = LocalDriver()

    async def run() -> None:
        await asyncio.gather(*(host_runs.process_async(engine, driver, f"key{n}", "x") for n in range(records)))

    try:
        asyncio.run(run())
    finally:
        engine.close()
        store.close()
    return len(driver.outputs)


def _process_of_one_instance(dsn: str, subtask: int, records: int, outputs: Any) -> None:
    outputs.put(_operator_instance(dsn, subtask, records))


@pytest.mark.parametrize("processes", [1, 4])
def test_parallelism_four_connection_count(pg_dsn: str, processes: int) -> None:
    """Four operator instances in one worker process share one pool (at most
    ``max_size`` = 4 connections); in four processes each has its own (at
    most 16). The peak is printed for docs/deploy.md."""
    dsn, name = _named(pg_dsn)
    records = 40
    with PeakCounter(pg_dsn, name) as peak:
        if processes == 1:
            done: List[int] = []
            _in_threads(4, lambda subtask: done.append(_operator_instance(dsn, subtask, records)))
        else:
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            workers = [
                context.Process(target=_process_of_one_instance, args=(dsn, subtask, records, queue))
                for subtask in range(4)
            ]
            for worker in workers:
                worker.start()
            done = [queue.get(timeout=120) for _ in workers]
            for worker in workers:
                worker.join(60)
                assert worker.exitcode == 0
    assert done == [records] * 4
    print(f"\nparallelism 4 in {processes} process(es): peak {peak.peak} PostgreSQL connections")
    assert 1 <= peak.peak <= 4 * processes
    assert _wait_backends(pg_dsn, name, 0) == []  # every operator's close let go


def test_open_journal_store_gives_the_store_its_pool_sizes() -> None:
    from flink_agents.stores import open_journal_store

    store = open_journal_store({
        "journal.store": "postgres", "journal.postgres.dsn": "postgresql://u@h/db",
        "journal.postgres.pool.min_size": 0, "journal.postgres.pool.max_size": "6",
    })
    assert isinstance(store, PostgresJournalStore) and store.pool_size == PoolSize(0, 6)
    assert open_journal_store({"journal.store": "postgres", "journal.postgres.dsn": "x"}).pool_size == PoolSize()
    with pytest.raises(ValueError, match="journal.postgres.pool.min_size"):
        open_journal_store({"journal.store": "postgres", "journal.postgres.dsn": "x",
                            "journal.postgres.pool.min_size": -1})

"""Drive records through the production local path, for engine tests.

``process`` runs one record of a key the way the local runner does
(``runtime/local/environment.py``): the host core (``KeyedHost``) over the
caller's ``LocalDriver``, on a ``KeyRunner`` whose loop runs on this thread
(``loop_thread=False``); it returns once the record and every record before
it on its key finished and were applied, and raises a record's failure
(``fail`` strategy) as the host does. ``process_async`` does the same from
inside a running event loop (the runs go on that loop, beside the test's own
coroutines: fake carriers, completions, cancellations); concurrent calls for
one engine and driver share one host and scheduler, so a key's records run
one at a time, in order.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Iterable, Tuple

from flink_agents.api.core_options import RuntimeOptions
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.keyed_host import KeyedHost
from flink_agents.runtime.scheduling.key_runner import KeyRunner

__all__ = ["process", "process_async", "resume", "resume_async", "run_records", "steer"]


def _runner(engine: AgentEngine, loop: asyncio.AbstractEventLoop | None = None) -> KeyRunner:
    max_runs = engine.config.get(RuntimeOptions.MAX_CONCURRENT_RUNS)
    backlog = engine.config.get(RuntimeOptions.MAX_BACKLOG) or 16 * max_runs
    return KeyRunner(engine, max_runs, backlog, loop_thread=False, loop=loop)


def run_records(engine: AgentEngine, driver: KeyedDriver, records: Iterable[Tuple[Any, Any]]) -> None:
    """Accept ``records`` (``(key, value)`` pairs) and drain, as the local runner does.

    Raises:
        BaseException: A record's failure (``fail`` strategy), or a value the codec refuses.
    """
    runner = _runner(engine)
    host = KeyedHost(engine, driver, runner)
    try:
        for key, value in records:
            host.accept(key, value)
        host.drain()
    finally:
        runner.close()


def process(engine: AgentEngine, driver: KeyedDriver, key: Any, value: Any) -> None:
    """Run one record of ``key`` (and what waits before it) to its end."""
    run_records(engine, driver, [(key, value)])


def steer(engine: AgentEngine, driver: KeyedDriver, key: Any, message: Any) -> None:
    """Queue a steering message for ``key``, as the local runner does."""
    KeyedHost(engine, driver, None).steer(key, message)  # type: ignore[arg-type]  # steering touches no scheduler


_async_hosts: "weakref.WeakKeyDictionary[KeyedDriver, Tuple[AgentEngine, asyncio.AbstractEventLoop, KeyedHost, KeyRunner]]"
_async_hosts = weakref.WeakKeyDictionary()


def _async_host(engine: AgentEngine, driver: KeyedDriver) -> Tuple[KeyedHost, KeyRunner]:
    loop = asyncio.get_running_loop()
    known = _async_hosts.get(driver)
    if known is not None and known[0] is engine and known[1] is loop:
        return known[2], known[3]
    runner = _runner(engine, loop)
    host = KeyedHost(engine, driver, runner)
    _async_hosts[driver] = (engine, loop, host, runner)
    return host, runner


async def process_async(engine: AgentEngine, driver: KeyedDriver, key: Any, value: Any) -> None:
    """``process`` from inside a running loop: returns once the record
    finished and was applied, or, if a record before it failed (raised by
    the call of that record), once nothing of the key runs any more."""
    host, runner = _async_host(engine, driver)
    _, record = host.enqueue(key, value)
    try:
        while True:
            host.apply(key)
            state = driver.load(key)
            if state is None or all(r.seq > record.seq for r in state.pending):
                return
            if not runner.has_work(key):
                return  # an earlier record failed: this one stays pending
            await runner.changed()
    except asyncio.CancelledError:
        # The caller cancelled: the host goes down, as a task does at a
        # failover (runs cancelled, their records still pending in state);
        # the next call starts a new host, which resubmits them.
        _async_hosts.pop(driver, None)
        await asyncio.gather(*runner.close(), return_exceptions=True)
        raise
    except BaseException:
        # A record failed: the job would fail and restart from its state;
        # the next call starts a new host, which resubmits what is pending.
        _async_hosts.pop(driver, None)
        raise


async def resume_async(engine: AgentEngine, driver: KeyedDriver, key: Any) -> None:
    """After a restore: run the key's pending records to their end."""
    host, runner = _async_host(engine, driver)
    host.resume(key)
    while True:
        host.apply(key)  # releases the key once it is idle
        if not runner.has_work(key):
            return
        await runner.changed()


def resume(engine: AgentEngine, driver: KeyedDriver, key: Any) -> None:
    """After a restore (a new engine over the same store and state): run the
    key's pending records to their end, as a restored host does."""
    runner = _runner(engine)
    host = KeyedHost(engine, driver, runner)
    try:
        host.resume(key)
        host.drain()
    finally:
        runner.close()

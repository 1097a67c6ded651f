"""Shared bits of the benchmarks: repo path, a trivial agent, timing."""

from __future__ import annotations

import contextlib
import multiprocessing
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402


def count_and_echo(event: InputEvent, ctx: Any) -> None:
    """One short-term memory write and one output per record."""
    seen = (ctx.short_term_memory.get("seen") or 0) + 1
    ctx.short_term_memory.set("seen", seen)
    ctx.send_event(OutputEvent(output=seen))


def trivial_agent() -> Agent:
    return Agent().add_action("count_and_echo", [InputEvent], count_and_echo)


def records(count: int, keys: int) -> list[dict]:
    return [{"key": f"k{i % keys}", "n": i} for i in range(count)]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, process CPU seconds, result) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


@contextlib.contextmanager
def served(serve: Callable[..., None], *args: Any) -> Iterator[Tuple[str, Callable[[], Dict[str, Any]]]]:
    """A model server in a spawned process of its own (its threads must not
    share an interpreter lock with what is measured): ``serve(*args, urls,
    stop, results)`` puts its base URL on ``urls``, waits for ``stop``, then
    puts its figures on ``results``. Yields ``(base_url, finish)``;
    ``finish()`` stops the server and returns its figures."""
    context = multiprocessing.get_context("spawn")
    urls, results, stop = context.Queue(), context.Queue(), context.Event()
    server = context.Process(target=serve, args=(*args, urls, stop, results), daemon=True)
    server.start()

    def finish() -> Dict[str, Any]:
        stop.set()
        return results.get(timeout=30)

    try:
        yield urls.get(timeout=30), finish
    finally:
        stop.set()
        server.join(timeout=10)

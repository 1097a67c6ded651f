"""``integrations.frameworks.per_loop.PerLoop``: one object per event loop,
as a Flink subtask (its own loop) sharing an interpreter with others needs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, List

from flink_agents.integrations.frameworks.per_loop import PerLoop


class Client:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()  # built on the loop that uses it
        self.closed = False


def test_each_loop_gets_its_own_object_built_on_it_and_reuses_it() -> None:
    built: List[Client] = []
    agents = PerLoop(lambda: built.append(Client()) or built[-1])

    async def twice() -> Any:
        first, second = await agents.get(), await agents.get()
        assert first is second and first.loop is asyncio.get_running_loop()
        return first

    seen: List[Any] = []
    threads = [threading.Thread(target=lambda: seen.append(asyncio.run(twice()))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 3 and len({id(c) for c in seen}) == 3


def test_close_runs_on_the_objects_loop_when_it_shuts_down() -> None:
    closed_on: List[Any] = []

    async def close(client: Client) -> None:
        closed_on.append((client, asyncio.get_running_loop()))

    agents = PerLoop(Client, close=close)

    async def use() -> Client:
        return await agents.get()

    client = asyncio.run(use())
    assert closed_on == [(client, client.loop)]

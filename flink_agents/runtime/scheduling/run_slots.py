"""Run slots: at most N runs in progress at once, not counting parked ones.

A run takes a slot when it starts (``RunSlots.hold``) and gives it back when
it ends. A run that waits for something outside, such as a callback that may
take hours, parks (``parked()``): it gives its slot back while it waits and
takes one again before it goes on, so waiting runs never starve runnable ones.
The slot of the current run travels in a context variable, which asyncio
copies into tasks the run starts (``gather``), so code deep in a run parks
without being handed anything.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from contextvars import ContextVar, Token
from typing import Any, AsyncIterator, Optional

__all__ = ["RunSlots", "parked"]


class _Slot:
    """One run's slot; parked while ``parks`` > 0 (several tasks may park)."""

    __slots__ = ("semaphore", "parks", "held")

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self.semaphore = semaphore
        self.parks = 0
        self.held = False


_current: ContextVar[Optional[_Slot]] = ContextVar("flink_agents_run_slot", default=None)


class RunSlots:
    """At most ``limit`` unparked runs at once, on one event loop.

    Raises:
        ValueError: ``limit`` < 1.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_concurrent_runs must be >= 1, not {limit}")
        self._semaphore = asyncio.Semaphore(limit)

    def hold(self) -> "_Hold":
        """``async with slots.hold():`` holds a slot for the run inside the
        block (waits for a free one)."""
        return _Hold(_Slot(self._semaphore))


class _Hold:
    """``RunSlots.hold``'s block: a class, not a generator context manager,
    as it is entered once per run. Cancelled while it waits for a slot, it
    holds none and the block does not run."""

    __slots__ = ("_slot", "_token")

    def __init__(self, slot: _Slot) -> None:
        self._slot = slot
        self._token: Token[Optional[_Slot]] | None = None

    async def __aenter__(self) -> None:
        slot = self._slot
        await slot.semaphore.acquire()
        slot.held = True
        self._token = _current.set(slot)

    async def __aexit__(self, *exc_info: Any) -> bool:
        assert self._token is not None  # set by __aenter__
        _current.reset(self._token)
        slot = self._slot
        if slot.held:
            slot.held = False
            slot.semaphore.release()
        return False


@asynccontextmanager
async def parked() -> AsyncIterator[None]:
    """Give the current run's slot back for the block (no-op outside a run).

    Raises:
        asyncio.CancelledError: Cancelled while waiting for a slot again; the
            run then holds none, and ``hold`` releases nothing.
    """
    slot = _current.get()
    if slot is None:
        yield
        return
    slot.parks += 1
    if slot.parks == 1 and slot.held:
        slot.held = False
        slot.semaphore.release()
    try:
        yield
    finally:
        slot.parks -= 1
        if slot.parks == 0 and not slot.held:
            await slot.semaphore.acquire()
            slot.held = True

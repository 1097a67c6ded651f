"""Run control in one subtask: pause, resume, cancel and retry a key's runs.

Requests come from the store (``stores.controls``: the CLI and the web
inspector write them beside the journal), so a running Flink job and the
local runner are reached the same way, with nothing but the journal's
location. Each subtask polls every ``run_control.poll_interval_ms`` on its
runner's event loop (two indexed reads of the store, on the io pool):

- **pause / resume**: a key is paused while its latest pause/resume request
  is a pause (``paused_from``), on whichever subtask holds it. A paused
  key's records wait in keyed state (they are pending there already, so a
  checkpoint and a failover keep them); the record running when the pause
  lands finishes. Resume lets them run, a parked record first.
- **cancel** (key, seq): the subtask running that record cancels its task;
  the run ends ``cancelled`` (journaled run end naming the request, so a
  replay after a failover ends the same way without running anything), its
  callbacks close, and an error record ``RunCancelled`` goes to the error
  stream; the key's later records go on. A queued record is cancelled when
  its turn comes; a parked one at once.
- **retry** (key, seq): a parked record runs again, replaying its committed
  calls (the failed step gets one more attempt; its retry budget is
  journaled); the key's pause is lifted by a resume request naming the retry.
- **park** (``error_strategy: park``): a record whose retries are exhausted
  is queued again and its key paused by a pause request of the runtime's
  own, naming the failure, so the pause outlives a failover too.

A cancel or retry is applied once (``mark_control`` is conditional); one no
subtask holds stays pending (the key may come back with a restore). Nothing
read back picks code: requests are compared against four action names.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Set, Tuple

from flink_agents.stores.controls import (
    APPLIED, CANCEL, IGNORED, PAUSE, RESUME, RETRY, ControlRequest, ControlStore, paused_from,
)

__all__ = ["ControlTarget", "RunControl"]

log = logging.getLogger(__name__)

RUNTIME = "runtime"  # requested_by of the pause a parked record writes


class ControlTarget(Protocol):
    """What a runner does for a request (``KeyRunner``)."""

    def apply_cancel(self, request: ControlRequest) -> Optional[str]:
        """Cancel the run or queued record of the request; what it did, or
        None if this subtask does not hold that record."""

    def apply_retry(self, request: ControlRequest) -> Optional[Tuple[str, str]]:
        """Run a parked record again; ``(state, outcome)``, or None if this
        subtask does not hold the key."""

    def resume_key(self, journal_id: str, key_text: str) -> None:
        """A key is no longer paused: start its queued records."""


class RunControl:
    """One subtask's view of the run-control requests (module docstring).

    Args:
        store: Where requests are (the journal store).
        journal_ids: The journals this subtask's keys live in (the job's own,
            and those its restored keys came from), read at each poll.
        poll_interval_s: Seconds between polls.
        now_ms: The clock, Unix milliseconds.
        io: Runs a blocking store call off the loop (``Executors.io``).
    """

    def __init__(
        self, store: ControlStore, journal_ids: Callable[[], Iterable[str]], poll_interval_s: float,
        now_ms: Callable[[], int], io: Callable[..., Any],
    ) -> None:
        self._store = store
        self._journal_ids = journal_ids
        self.poll_interval_s = poll_interval_s
        self._now_ms = now_ms
        self._io = io
        self._paused: Set[Tuple[str, str]] = set()
        self._switches: List[ControlRequest] = []  # every pause/resume read so far
        self._cursor = 0  # the last pause/resume read
        self._target: Optional[ControlTarget] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self.polls = 0
        self.poll_failures = 0

    def attach(self, target: ControlTarget) -> None:
        self._target = target

    @property
    def any_paused(self) -> bool:
        return bool(self._paused)

    def is_paused(self, journal_id: str, key_text: str) -> bool:
        return (journal_id, key_text) in self._paused

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Poll on ``loop`` until ``stop`` (the first poll at once)."""
        if self._task is None:
            self._task = loop.create_task(self._poll_forever())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the store may be down for a while; say so and go on
                self.poll_failures += 1
                log.warning("run control: reading control requests failed (tried again in %.1f s): %r",
                            self.poll_interval_s, error)
            await asyncio.sleep(self.poll_interval_s)

    async def poll_once(self) -> None:
        """Read new requests and apply what concerns this subtask."""
        ids = sorted(set(self._journal_ids()))
        if not ids:
            return
        self.polls += 1
        new: List[ControlRequest] = await self._io(self._store.controls, ids, self._cursor)
        switches = [r for r in new if r.action in (PAUSE, RESUME)]
        if new:
            self._cursor = max(r.control_id for r in new)
        if switches:
            before = self._paused
            self._switches.extend(switches)
            self._paused = paused_from(self._switches)
            for request in switches:
                if request.state == "pending":
                    await self._mark(request, APPLIED, "paused" if request.action == PAUSE else "resumed")
            if self._target is not None:
                for journal_id, key_text in before - self._paused:
                    self._target.resume_key(journal_id, key_text)
        pending = await self._io(self._store.controls, ids, 0, None, True)
        for request in pending:
            if request.action == CANCEL:
                await self._offer_cancel(request)
            elif request.action == RETRY:
                await self._offer_retry(request)

    async def _offer_cancel(self, request: ControlRequest) -> None:
        if self._target is None:
            return
        outcome = self._target.apply_cancel(request)
        if outcome is not None:
            await self._mark(request, APPLIED, outcome)

    async def _offer_retry(self, request: ControlRequest) -> None:
        if self._target is None:
            return
        result = self._target.apply_retry(request)
        if result is None:
            return
        state, outcome = result
        if state == APPLIED and self.is_paused(request.journal_id, request.key):
            # The park's pause ends with the retry, durably (a failover must not pause it again).
            resume = await self._io(self._store.request_control, request.journal_id, request.key, RESUME, None,
                                    f"retry #{request.control_id}", self._now_ms())
            await self._mark(resume, APPLIED, "resumed")
            self._paused.discard((request.journal_id, request.key))
            self._target.resume_key(request.journal_id, request.key)  # held again meanwhile: start it
        await self._mark(request, state, outcome)

    async def park(self, journal_id: str, key_text: str, seq: int, reason: str) -> None:
        """Pause the key of a parked record, durably, naming why."""
        self._paused.add((journal_id, key_text))
        request = await self._io(self._store.request_control, journal_id, key_text, PAUSE, None, RUNTIME,
                                 self._now_ms())
        await self._mark(request, APPLIED, f"record #{seq} parked: {reason}"[:2000])

    async def _mark(self, request: ControlRequest, state: str, outcome: str) -> None:
        if await self._io(self._store.mark_control, request.control_id, state, outcome, self._now_ms()):
            log.info("run control: request #%d (%s of key %s%s by %s) %s: %s", request.control_id, request.action,
                     request.key, "" if request.seq is None else f", record #{request.seq}",
                     request.requested_by, state, outcome)

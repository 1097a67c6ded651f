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
  With ``run_control.keep_failed`` set (N > 0; off by default), a record
  that ended on the error stream (``skip``) is kept in keyed state
  (``KeyState.failed``: the newest N of the key, for
  ``run_control.keep_failed_s``); a retry queues it again as the key's
  next record, continuing its journal (``PendingRecord.replays``). The host
  takes it in a callback of the key: Flink keyed state is reachable only
  there, so a key holding kept records has a processing-time timer every
  ``run_control.retry_poll_interval_ms`` while it keeps them.
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
import threading
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
        self._cursor = 0  # the last request read
        self._polled_ids: Set[str] = set()  # journals read from their first request
        self._primed: Set[Tuple[str, str]] = set()  # paused keys read by ``prime``, until a poll reads them
        self._parking: Set[Tuple[str, str]] = set()  # paused by a park, until a poll reads its request back
        self._target: Optional[ControlTarget] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Retries of records that ended on the error stream (kept in keyed
        # state, KeyState.failed): the host takes them in a callback of the
        # key. A snapshot replaced at each poll (read from the host's thread).
        self._retries: Dict[Tuple[str, str], List[ControlRequest]] = {}
        self._claimed: Set[int] = set()
        self._claims = threading.Lock()
        self.polls = 0
        self.poll_failures = 0

    def attach(self, target: ControlTarget) -> None:
        self._target = target

    @property
    def any_paused(self) -> bool:
        return bool(self._paused)

    def is_paused(self, journal_id: str, key_text: str) -> bool:
        return (journal_id, key_text) in self._paused

    def prime(self, journal_ids: Optional[Iterable[str]] = None) -> None:
        """Learn the paused keys of ``journal_ids`` (None: this subtask's
        journals) now, on the caller's thread, before any record of them
        starts: PyFlink opens an operator at its first element or timer,
        and that record must not start before a pause written earlier is
        known. The next poll reads these requests again and marks them."""
        ids = sorted(set(self._journal_ids() if journal_ids is None else journal_ids))
        if not ids:
            return
        switches = [r for r in self._store.controls(ids) if r.action in (PAUSE, RESUME)]
        found = paused_from(switches)
        self._primed = self._primed | found
        self._paused = self._paused | found

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Poll on ``loop`` until ``stop`` (the first poll at once)."""
        if self._task is None:
            self._loop = loop
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
        # A journal seen for the first time (a restored key's) is read from
        # its first request; the others from the cursor on.
        fresh = [i for i in ids if i not in self._polled_ids]
        known = [i for i in ids if i in self._polled_ids]
        new: List[ControlRequest] = []
        if fresh:
            new += await self._io(self._store.controls, fresh, 0)
        if known:
            new += await self._io(self._store.controls, known, self._cursor)
        self._polled_ids.update(fresh)
        switches = sorted((r for r in new if r.action in (PAUSE, RESUME)), key=lambda r: r.control_id)
        if new:
            self._cursor = max(self._cursor, max(r.control_id for r in new))
        if switches or fresh:
            before = self._paused
            self._switches.extend(switches)
            primed = {pair for pair in self._primed if pair[0] not in self._polled_ids}
            self._parking -= {(r.journal_id, r.key) for r in switches}  # read back: the store says
            self._paused = paused_from(self._switches) | primed | self._parking
            for request in switches:
                if request.state == "pending":
                    await self._mark(request, APPLIED, "paused" if request.action == PAUSE else "resumed")
            if self._target is not None:
                resumed = {(r.journal_id, r.key) for r in switches if r.action == RESUME}
                for journal_id, key_text in (resumed & before) - self._paused:
                    self._target.resume_key(journal_id, key_text)
        pending = await self._io(self._store.controls, ids, 0, None, True)
        retries: Dict[Tuple[str, str], List[ControlRequest]] = {}
        for request in pending:
            if request.action == CANCEL:
                await self._offer_cancel(request)
            elif request.action == RETRY and not await self._offer_retry(request):
                retries.setdefault((request.journal_id, request.key), []).append(request)
        with self._claims:
            self._claimed &= {r.control_id for found in retries.values() for r in found}
        self._retries = retries

    # -- retries of records kept in keyed state (the host's thread) ------------

    @property
    def has_retries(self) -> bool:
        return bool(self._retries)

    def retries_for(self, journal_id: str, key_text: str) -> List[ControlRequest]:
        """Pending retries of the key not yet taken by this subtask."""
        found = self._retries.get((journal_id, key_text), ())
        with self._claims:
            return [r for r in found if r.control_id not in self._claimed]

    def took(self, request: ControlRequest, state: str, outcome: str) -> None:
        """The host applied (or ignored) ``request``: it is not offered again,
        and its mark is written on the loop."""
        with self._claims:
            self._claimed.add(request.control_id)
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._mark(request, state, outcome)))

    async def _offer_cancel(self, request: ControlRequest) -> None:
        if self._target is None:
            return
        outcome = self._target.apply_cancel(request)
        if outcome is not None:
            await self._mark(request, APPLIED, outcome)

    async def _offer_retry(self, request: ControlRequest) -> bool:
        """Offer a retry to the runner (a parked record); whether it took it."""
        if self._target is None:
            return False
        result = self._target.apply_retry(request)
        if result is None:
            return False
        state, outcome = result
        if state == APPLIED and self.is_paused(request.journal_id, request.key):
            # The park's pause ends with the retry, durably (a failover must not pause it again).
            resume = await self._io(self._store.request_control, request.journal_id, request.key, RESUME, None,
                                    f"retry #{request.control_id}", self._now_ms())
            await self._mark(resume, APPLIED, "resumed")
            pair = (request.journal_id, request.key)
            self._parking.discard(pair)
            self._paused = self._paused - {pair}
            self._target.resume_key(request.journal_id, request.key)  # held again meanwhile: start it
        await self._mark(request, state, outcome)
        return True

    async def park(self, journal_id: str, key_text: str, seq: int, reason: str) -> None:
        """Pause the key of a parked record, durably, naming why."""
        self._parking.add((journal_id, key_text))
        self._paused = self._paused | {(journal_id, key_text)}
        request = await self._io(self._store.request_control, journal_id, key_text, PAUSE, None, RUNTIME,
                                 self._now_ms())
        await self._mark(request, APPLIED, f"record #{seq} parked: {reason}"[:2000])

    async def _mark(self, request: ControlRequest, state: str, outcome: str) -> None:
        if await self._io(self._store.mark_control, request.control_id, state, outcome, self._now_ms()):
            log.info("run control: request #%d (%s of key %s%s by %s) %s: %s", request.control_id, request.action,
                     request.key, "" if request.seq is None else f", record #{request.seq}",
                     request.requested_by, state, outcome)

"""Callbacks at run time: create, wait (racing the deadline), cancel, close.

Lifecycle of one callback (the store's states, ``stores/callbacks.py``)::

    create_callback ──> PENDING ──POST resolve──> RESOLVED   (await cb -> body)
                          │    ──POST reject───> REJECTED   (CallbackRejected)
                          │    ──deadline──────> TIMED_OUT  (CallbackTimeout)
                          │    ──cb.cancel()───> CANCELLED  (CallbackCancelled)
                          └────run ended──────> CLOSED

Every arrow out of ``PENDING`` is one conditional write to the store, so the
first one wins everywhere and for good; a completion that loses is dropped
(the ingress answers 404 and counts it in ``late_completions``).

Identity and replay. ``create`` draws the id and the two routes' tokens
from ``secrets`` (192 bits each; ``callback_url``) and registers them under the creating call's ``CallbackRef`` (journal id, key,
record, step, ordinal of the step's callbacks) before it returns, so the URL
never leaves the run before the callback is durable. A replayed run
registers the same ref and gets the original id, deadline and outcome back.

Waiting. ``wait`` awaits a future that this hub settles from the store: a
poller on the run's event loop reads the outcomes of every waited-for
callback each ``callbacks.poll_interval_ms`` (one query for all of them) and
times out those whose deadline passed. A waiting run holds no thread and
gives back its run slot (``run_slots.parked``). A host with timers of its
own also gets each deadline (``on_deadline``, the driver's
``arm_deadline``): on Flink it becomes a processing-time timer of the key
that calls ``expire``; it lives in keyed state and checkpoints, so after a
restore it fires even before the run has been replayed. Both paths make the same
conditional write; whichever lands first decides.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import threading
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.callbacks import (
    MAX_CALLBACK_TIMEOUT_S,
    MIN_CALLBACK_TIMEOUT_S,
    Callback,
    CallbackCancelled,
    CallbackRejected,
    CallbackTimeout,
)
from flink_agents.runtime.errors import NondeterminismError
from flink_agents.runtime.execution.metrics import RunCounters
from flink_agents.runtime.execution.run import Clock
from flink_agents.runtime.features.capability_redaction import remember
from flink_agents.runtime.scheduling.run_slots import parked
from flink_agents.stores.callbacks import (
    ACCEPTED,
    CANCELLED,
    CLOSED,
    PENDING,
    REJECTED,
    RESOLVED,
    TIMED_OUT,
    CallbackRecord,
    CallbackRef,
    CallbackStore,
)
from flink_agents.stores.capabilities import SIGNING_KEY_ENV, new_capability_token, read_secret, signed_url

__all__ = [
    "BASE_URL_ENV",
    "CallbackHub",
    "RuntimeCallback",
    "callback_url",
    "decode_body",
    "validate_timeout",
]

log = logging.getLogger(__name__)

BASE_URL_ENV = "CALLBACK_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:8089"
_ID_BYTES = 24  # 192 bits from the OS's CSPRNG, URL-safe base64: 32 characters


def new_callback_id() -> str:
    """A fresh public callback id: ``_ID_BYTES`` random bytes, URL-safe
    base64 (RFC 4648 section 5), never starting with ``-``: one that did
    would read as an option on a command line (``approvals approve ID``)."""
    while True:
        candidate = secrets.token_urlsafe(_ID_BYTES)
        if not candidate.startswith("-"):
            return candidate


_ROUTES = {RESOLVED: "resolve", REJECTED: "reject"}


def validate_timeout(timeout_s: Any) -> float:
    """``timeout_s`` as float seconds.

    Raises:
        ValueError: Not a number within [1, 86400] seconds.
    """
    try:
        if isinstance(timeout_s, bool):
            raise TypeError("a bool is not a number of seconds")
        value = float(timeout_s)
    except (TypeError, ValueError):
        raise ValueError(f"callback timeout must be a number of seconds, got {timeout_s!r}") from None
    if not MIN_CALLBACK_TIMEOUT_S <= value <= MAX_CALLBACK_TIMEOUT_S:
        raise ValueError(
            f"callback timeout must be within {MIN_CALLBACK_TIMEOUT_S:g} s and "
            f"{MAX_CALLBACK_TIMEOUT_S:g} s (24 h), got {timeout_s!r}"
        )
    return value


def decode_body(body: Optional[bytes]) -> Union[str, bytes]:
    """A completion body as text if it is valid UTF-8, else as bytes."""
    if body is None:
        return ""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(body)


def callback_url(base_url: str, record: CallbackRecord, state: str, signing_key: Optional[str] = None) -> str:
    """The URL completing ``record`` as ``state`` (``RESOLVED``: ``.../resolve``,
    ``REJECTED``: ``.../reject``): ``{base_url}/callbacks/{id}/{route}/{token}``
    with that route's own token, so the resolve URL cannot reject and the
    reject URL cannot resolve. A legacy row (no tokens: an older release
    created it) keeps its old URL, ``{base_url}/callbacks/{id}/{route}``, so a
    replay hands out what the first run did. With ``signing_key`` the URL is
    signed to expire at the callback's deadline (``?exp=...&sig=...``,
    ``stores.capabilities.signed_url``; the ingress checks it when it holds
    the same key)."""
    route = _ROUTES[state]
    token = record.resolve_token if state == RESOLVED else record.reject_token
    url = f"{base_url}/callbacks/{record.callback_id}/{route}"
    if token is not None:
        url = f"{url}/{token}"
    return url if signing_key is None else signed_url(url, signing_key, record.deadline_ms)


def body_as_text(body: Optional[bytes]) -> str:
    """A body for a model: UTF-8 text, or a base64 rendering of binary data."""
    value = decode_body(body)
    if isinstance(value, str):
        return value
    return f"(binary data, {len(value)} bytes, base64) {base64.b64encode(value).decode('ascii')}"


class RuntimeCallback(Callback):
    """A callback of a run (see ``flink_agents.api.callbacks.Callback``)."""

    def __init__(
        self, hub: "CallbackHub", record: CallbackRecord, base_url: str,
        before_wait: Optional[Callable[[], Awaitable[None]]] = None, signing_key: Optional[str] = None,
        on_waited: Optional[Callable[[CallbackRecord], None]] = None,
    ) -> None:
        self._hub = hub
        self._before_wait = before_wait
        self._on_waited = on_waited
        self.record = record
        self.callback_id = record.callback_id
        self.purpose = record.purpose
        self.created_ms = record.created_ms
        self.deadline_ms = record.deadline_ms
        self.timeout_s = (record.deadline_ms - record.created_ms) / 1000.0
        self.resolve_url = callback_url(base_url, record, RESOLVED, signing_key)
        self.reject_url = callback_url(base_url, record, REJECTED, signing_key)

    def wait(self) -> Awaitable[Union[str, bytes]]:
        return self._wait()

    async def _wait(self) -> Union[str, bytes]:
        if self._before_wait is not None:
            # What the run did before the wait (e.g. the call that handed the
            # URL out) must be durable before it parks: a failover during a
            # wait of hours must not make it again.
            await self._before_wait()
        record = await self._hub.wait_record(self.callback_id)
        if self._on_waited is not None:
            self._on_waited(record)  # the run's trace (runtime.features.tracing)
        return outcome_of(record)

    def cancel(self) -> "asyncio.Task[bool]":
        return asyncio.get_running_loop().create_task(self._hub.cancel(self.callback_id))

    def __repr__(self) -> str:
        return f"Callback({self.callback_id[:8]}..., purpose={self.purpose!r}, timeout_s={self.timeout_s:g})"


def outcome_of(record: CallbackRecord) -> Union[str, bytes]:
    """What ``await cb`` gives for a finished callback.

    Raises:
        CallbackRejected, CallbackTimeout, CallbackCancelled: As the state says.
    """
    if record.state == RESOLVED:
        return decode_body(record.body)
    if record.state == REJECTED:
        raise CallbackRejected(record.callback_id, decode_body(record.body))
    if record.state == TIMED_OUT:
        raise CallbackTimeout(record.callback_id, (record.deadline_ms - record.created_ms) / 1000.0)
    if record.state in (CANCELLED, CLOSED):
        raise CallbackCancelled(record.callback_id)
    raise RuntimeError(f"callback {record.callback_id} is still {record.state}")


class _Waiting:
    __slots__ = ("future", "deadline_ms")

    def __init__(self, future: "asyncio.Future[CallbackRecord]", deadline_ms: int) -> None:
        self.future = future
        self.deadline_ms = deadline_ms


class CallbackHub:
    """The callbacks of one engine (one subtask, or the local runner).

    Args:
        store: Where callbacks live (the journal store).
        config: The job's configuration: ``callbacks.base_url`` (else the
            ``CALLBACK_BASE_URL`` environment variable, else
            ``http://127.0.0.1:8089``), ``callbacks.poll_interval_ms``
            (default 100) and ``callbacks.signing_key_file`` (else
            ``$FLINK_AGENTS_CALLBACK_SIGNING_KEY``; neither: URLs unsigned).
        counters: The engine's counters.
        clock: Time (``runtime.execution.run.Clock``, or a callable giving Unix
            seconds); the poller sleeps through it too.
        executors: Where store operations run (the engine's io pool,
            ``runtime.scheduling.executors``); None: ``asyncio.to_thread``.
        on_deadline: ``(key, callback id, deadline ms, record seq)``, called
            for each pending callback a run creates or finds on replay, from
            the run's thread (``KeyedDriver.arm_deadline``).
    """

    def __init__(
        self,
        store: CallbackStore,
        config: Mapping[str, Any],
        counters: RunCounters,
        clock: Any = None,
        executors: Any = None,
        on_deadline: Optional[Callable[[Any, str, int, int], None]] = None,
    ) -> None:
        self._store = store
        self._in_thread: Callable[..., Awaitable[Any]] = asyncio.to_thread if executors is None else executors.io
        options = readable(config)
        base = options.get(RuntimeOptions.CALLBACKS_BASE_URL) or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        key_file = options.get(RuntimeOptions.CALLBACKS_SIGNING_KEY_FILE)
        if key_file:
            self._signing_key: Optional[str] = read_secret(key_file, RuntimeOptions.CALLBACKS_SIGNING_KEY_FILE.key)
        else:
            self._signing_key = (os.environ.get(SIGNING_KEY_ENV) or "").strip() or None
        self._poll_s = options.get(RuntimeOptions.CALLBACKS_POLL_INTERVAL_MS) / 1000.0
        self._counters = counters
        self._clock = Clock.of(clock)
        self._waiting: Dict[str, _Waiting] = {}
        self._poller: Optional["asyncio.Task[None]"] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Per run (key text, seq): its callbacks, to close at the run's end.
        self._runs: Dict[Tuple[str, int], List[CallbackRecord]] = {}
        self._finished: Set[str] = set()
        # The host's own deadline timers (KeyedDriver.arm_deadline), if any.
        self._on_deadline: Optional[Callable[[Any, str, int, int], None]] = on_deadline
        self._lock = threading.Lock()

    def _now_ms(self) -> int:
        return self._clock.now_ms()

    # -- create --------------------------------------------------------------

    async def create(
        self, ref: CallbackRef, key: Any, purpose: str, timeout_s: float,
        before_wait: Optional[Callable[[], Awaitable[None]]] = None,
        on_waited: Optional[Callable[[CallbackRecord], None]] = None,
        details: Optional[str] = None, keep_stored_timeout: bool = False,
    ) -> RuntimeCallback:
        """Register (or, on replay, find) the callback of ``ref``, with
        ``details`` (JSON text for a reviewer, ``CallbackRecord.details``;
        on replay the stored details stay). With ``keep_stored_timeout`` a
        replay keeps the stored deadline even if ``timeout_s`` differs (the
        timeout comes from the job's configuration, which an operator may
        change across a restore: an approval's ``approvals.timeout_s``).

        Raises:
            ValueError: ``timeout_s`` outside [1, 86400] s.
            TypeError: ``purpose`` is not a string.
            NondeterminismError: On replay, the callback registered for this
                call had another purpose or timeout.
        """
        timeout = validate_timeout(timeout_s)
        if not isinstance(purpose, str):
            raise TypeError(f"callback purpose must be a str, got {type(purpose).__name__}")
        now_ms = self._now_ms()
        timeout_ms = int(round(timeout * 1000))
        candidate = new_callback_id()
        record = await self._in_thread(
            self._store.register, ref, candidate, purpose, now_ms, now_ms + timeout_ms,
            new_capability_token(), new_capability_token(), details,
        )
        timeout_differs = record.deadline_ms - record.created_ms != timeout_ms and not keep_stored_timeout
        if record.purpose != purpose or timeout_differs:
            raise NondeterminismError(
                f"replayed call {ref.step}/callback #{ref.ordinal} on key {ref.key}, record #{ref.seq} "
                f"created callback ({purpose!r}, {timeout:g} s), but the journal holds "
                f"({record.purpose!r}, {(record.deadline_ms - record.created_ms) / 1000:g} s)"
            )
        remember(record.callback_id, record.resolve_token, record.reject_token)  # redacted wherever logged
        if record.callback_id == candidate:
            self._counters.callbacks_created += 1
        with self._lock:
            self._runs.setdefault((ref.key, ref.seq), []).append(record)
        if self._on_deadline is not None and record.state == PENDING:
            self._on_deadline(key, record.callback_id, record.deadline_ms, ref.seq)
        return RuntimeCallback(self, record, self.base_url, before_wait, self._signing_key, on_waited)

    # -- wait ----------------------------------------------------------------

    async def wait_record(self, callback_id: str) -> CallbackRecord:
        """The callback once it has left ``PENDING`` (parks the run meanwhile)."""
        record = await self._in_thread(self._store.get_callback, callback_id)
        if record is None:
            raise RuntimeError(f"callback {callback_id} is not in the store (pruned while its run waited?)")
        if record.state != PENDING:
            return self._settled(record)
        waiting = self._waiting.get(callback_id)
        if waiting is None:
            loop = asyncio.get_running_loop()
            waiting = self._waiting[callback_id] = _Waiting(loop.create_future(), record.deadline_ms)
            self._ensure_poller(loop)
        async with parked():
            # Shielded: a cancelled waiter must not cancel the others' future.
            return await asyncio.shield(waiting.future)

    def _ensure_poller(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll())

    async def _poll(self) -> None:
        """Settle waited-for callbacks from the store; time out overdue ones."""
        while self._waiting:
            await self._clock.sleep(self._poll_s)
            try:
                now_ms = self._now_ms()
                for callback_id, waiting in list(self._waiting.items()):
                    if waiting.deadline_ms <= now_ms:
                        result = await self._in_thread(
                            self._store.complete, callback_id, TIMED_OUT, None, now_ms
                        )
                        if result.record is not None:
                            self._settled(result.record)
                ids = list(self._waiting)
                if ids:
                    for record in (await self._in_thread(self._store.finished_callbacks, ids)).values():
                        self._settled(record)
            except asyncio.CancelledError:
                raise
            except Exception:  # the store is down: keep waiting, say so
                log.exception("reading callback outcomes failed; retrying in %.1f s", self._poll_s)

    def _settled(self, record: CallbackRecord) -> CallbackRecord:
        """Wake the waiters of a finished callback (on the loop thread)."""
        if record.callback_id not in self._finished:
            self._finished.add(record.callback_id)
            counter = f"callbacks_{record.state}"
            setattr(self._counters, counter, getattr(self._counters, counter) + 1)
        waiting = self._waiting.pop(record.callback_id, None)
        if waiting is not None and not waiting.future.done():
            waiting.future.set_result(record)
        return record

    # -- cancel, expire, close -----------------------------------------------

    async def cancel(self, callback_id: str) -> bool:
        """Cancel a callback unless it finished first. True if this won."""
        result = await self._in_thread(
            self._store.complete, callback_id, CANCELLED, None, self._now_ms()
        )
        if result.record is not None:
            self._settled(result.record)
        return result.outcome == ACCEPTED

    async def cancel_for_run(self, ref_of_run: CallbackRef, callback_id: str) -> Optional[CallbackRecord]:
        """Cancel ``callback_id`` if it belongs to the given run's key and
        record (a model may name any id); None if it does not."""
        record = await self._in_thread(self._store.get_callback, callback_id)
        if record is None or (record.ref.key, record.ref.seq) != (ref_of_run.key, ref_of_run.seq) or not (
            record.ref.journal_id == ref_of_run.journal_id
            or record.ref.journal_id.startswith(ref_of_run.journal_id + "/")
        ):
            return None
        await self.cancel(callback_id)
        return await self._in_thread(self._store.get_callback, callback_id)

    def has_open_callbacks(self, key_text: str) -> bool:
        """Whether a run of the key has a callback not yet finished (its run
        may wait on the outside for hours; thread-safe)."""
        with self._lock:
            return any(
                record.callback_id not in self._finished
                for (text, _), records in self._runs.items() if text == key_text
                for record in records
            )

    def expire(self, callback_ids: List[str]) -> int:
        """Time out callbacks whose deadline timer fired (from the host's
        thread). Returns how many timed out here (others had finished)."""
        expired = 0
        now_ms = self._now_ms()
        for callback_id in callback_ids:
            result = self._store.complete(callback_id, TIMED_OUT, None, now_ms)
            if result.record is None:
                continue
            expired += result.outcome == ACCEPTED
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._settled, result.record)
        return expired

    def made_callbacks(self, key_text: str, seq: int) -> bool:
        """Whether the run ``(key_text, seq)`` created or replayed a callback
        that ``close_run`` has not closed yet (else it has nothing to do).
        Read without the lock: only the run's own tasks, on the loop's
        thread, add its entry, and a dict lookup is atomic."""
        return (key_text, seq) in self._runs

    async def close_run(self, journal_id: str, key_text: str, seq: int) -> bool:
        """The run ended: close its callbacks still pending (one write, none
        if every one is known finished), so later completions are late.
        Returns whether the run created (or replayed) any callback."""
        with self._lock:
            records = self._runs.pop((key_text, seq), [])
        open_records = [r for r in records if r.callback_id not in self._finished]
        for record in records:
            self._finished.discard(record.callback_id)
        if open_records:
            now_ms = self._now_ms()
            closed = await self._in_thread(self._store.close_run, journal_id, key_text, seq, now_ms)
            for record in open_records:
                if record.ref.journal_id != journal_id:  # a sub-agent run's ("<parent>/<call>")
                    result = await self._in_thread(self._store.complete, record.callback_id, CLOSED, None, now_ms)
                    closed += result.outcome == ACCEPTED
            self._counters.callbacks_closed += closed
        return bool(records)

    def forget_run(self, key_text: str, seq: int) -> None:
        """Drop the bookkeeping of a run that failed (its callbacks stay
        pending: the record runs again after a restore)."""
        with self._lock:
            records = self._runs.pop((key_text, seq), [])
        for record in records:
            self._finished.discard(record.callback_id)

    def prune(self, finished_before_s: float, journal_id: str) -> int:
        """Delete the callbacks of ``journal_id``'s runs that ended before
        ``finished_before_s`` (Unix seconds); call it before the journal's prune."""
        return self._store.prune_callbacks(finished_before_s, journal_id)

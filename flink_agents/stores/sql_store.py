"""The SQL journal store: the journal and callback ports over one ``Dialect``.

Every operation is written here once; a ``Dialect`` (``sqlite_store``,
``postgres_store``) supplies what its database does its own way. Layout: the
``journal`` table of ``_sql`` (one row per entry, with a partial index over
the run-end markers for ``prune``) and the ``callbacks`` table of
``_sql_callbacks``. Each write (``append``, ``prune``, every callback write)
is one transaction; reads run outside one.

Connections: each process connects on its first read or write and shares
that connection among its threads under a lock (``PostgresJournalStore``
draws from a pool per process instead: ``stores._postgres_pool``). PyFlink
ships a store to its Python workers by pickling it, and workers may fork, so
a connection never crosses either: the store pickles without it, and after
``os.fork`` the child connects anew and hands the inherited connection to
``Dialect.set_aside``. A connection the dialect reports broken is dropped
after the call that saw it break (that call raises); the next call reconnects.

Errors: every failure is one of the store's own errors (``stores.errors``),
naming the operation, the run (where the call has one) and the store's
location, with the driver's error as the ``__cause__``; ``Dialect.classify``
decides which. A failed write is rolled back: nothing of it is stored.

Outages: a call that fails with ``JournalUnavailableError`` (connection lost,
server not answering, file locked past the busy timeout) is tried again,
reconnecting where the connection broke, with backoff bounded by
``StoreRetry`` (default: for 10 s, waits from 0.05 s doubling to 1 s); past
the bound the error is raised with a note giving the attempts and the time
spent. Retrying a write whose commit's fate is unknown is safe: appends are
upserts, ``register`` and ``close_run`` are idempotent, and ``complete``
first reads back whether its own earlier attempt committed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import closing, contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

from flink_agents._pycompat import add_note
from flink_agents.stores import _sql, _sql_callbacks, _sql_controls, _sql_rate_window
from flink_agents.stores._dialect import Dialect
from flink_agents.stores.callbacks import (
    ACCEPTED,
    CallbackRecord,
    CallbackRef,
    CallbackStore,
    CompleteResult,
)
from flink_agents.stores.capabilities import new_capability_token
from flink_agents.stores.controls import ControlRequest, ControlStore, check_request
from flink_agents.stores.errors import JournalStoreError, JournalUnavailableError, RunIdentity
from flink_agents.stores.journal import JournalEntry, JournalStore
from flink_agents.stores.rate_window import Claim, RateWindowStore, check_claim, new_claim_id
from flink_agents.stores.retry import StoreRetry

__all__ = ["SQLJournalStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def _deleting(statement: str, batch: List[Tuple[Any, ...]]) -> Callable[[Any], int]:
    """A ``_call`` body running ``statement`` once per parameter tuple of
    ``batch``; returns the rows deleted."""

    def delete(connection: Any) -> int:
        with closing(connection.cursor()) as cursor:
            cursor.executemany(statement, batch)
            return max(cursor.rowcount, 0)

    return delete


class SQLJournalStore(JournalStore, CallbackStore, ControlStore, RateWindowStore):
    """A ``JournalStore`` and ``CallbackStore`` on an SQL database.

    Callbacks live beside the journal, so the ingress finds them with the
    journal's location alone.

    Args:
        dialect: The database's SQL and connection handling.
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.
        retry: How long a call rides out ``JournalUnavailableError`` (``StoreRetry``).
        sleep: Waits between retries, in seconds (``time.sleep``; a fake in tests).
        monotonic: Measures the retry deadline, in seconds (``time.monotonic``;
            a fake in tests, advanced by the fake ``sleep``).
    """

    def __init__(
        self,
        dialect: Dialect,
        clock: Callable[[], float] = time.time,
        retry: StoreRetry = StoreRetry(),
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._dialect = dialect
        self._clock = clock
        self.retry = retry
        self._sleep = sleep
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._writes_lock = threading.Lock()  # a pooled session does not hold _lock
        self._connection: Any = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._dialect.describe()})"

    # --- the journal port ----------------------------------------------------------

    def load_run(self, journal_id: str, key: str, seq: int) -> Dict[Tuple[str, int], JournalEntry]:
        """Every entry of one record's run, by (step, ordinal); ``{}`` if none.

        Raises:
            JournalUnavailableError: The store stayed unreachable past the retry bound.
            JournalSchemaError: The database is not a version-1 journal.
            JournalStoreError: The read failed otherwise (see ``stores.errors``).
        """
        def read(connection: Any) -> Dict[Tuple[str, int], JournalEntry]:
            selected = connection.execute(self._sql(_sql.SELECT_RUN), (journal_id, key, seq)).fetchall()
            return _sql.entries_by_slot(selected)

        return self._call("load_run", (journal_id, key, seq), read)

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        """Write ``entries`` of one run in one transaction; an existing
        (step, ordinal) is replaced. An empty list writes nothing and is not
        counted in ``writes``. A write that fails on a lost connection is
        tried again (``StoreRetry``): an upsert, so a commit that landed
        before the connection broke is simply written again.

        Raises:
            JournalUnavailableError: The store stayed unreachable (or the
                SQLite file locked) past the retry bound; nothing of the
                write may be stored, or all of it.
            JournalReplacedError: The SQLite file was removed or replaced
                under the job; nothing was written.
            JournalSchemaError: The database is not a version-1 journal.
            JournalStoreError: The write failed otherwise (e.g. a field the
                driver cannot bind) and was rolled back; nothing is stored.
        """
        entries = list(entries)
        if not entries:
            return

        def write(connection: Any) -> None:
            rows = _sql.rows(journal_id, key, seq, entries, float(self._clock()))
            with closing(connection.cursor()) as cursor:
                cursor.executemany(self._sql(self._dialect.upsert), rows)

        self._call("append", (journal_id, key, seq), write, write=True, counted=True)

    def prune(self, finished_before_s: float, journal_id: str) -> int:
        """Delete every entry of ``journal_id``'s runs whose ``RUN_END``
        entry was committed before ``finished_before_s`` (Unix seconds),
        with the entries of the sub-agent runs nested under them. Another
        journal's runs are never deleted, nor paged through.

        The work is proportional to what it deletes: the journal's finished
        runs are read from the run-end index ``PRUNE_WINDOW_RUNS`` at a time,
        deleted in key order ``PRUNE_BATCH_RUNS`` at a time, each batch one
        transaction, and the write lock is released between batches (see
        ``_sql``). A run and its nested runs go in one batch, so a failure
        midway leaves whole runs deleted or kept.

        Returns:
            The number of entries deleted.

        Raises:
            JournalUnavailableError: The store stayed unreachable past the
                retry bound (the batches before stay deleted).
            JournalReplacedError: The SQLite file was removed or replaced.
            JournalStoreError: A batch failed otherwise and was rolled back.
        """
        return self._prune("prune", _sql.PRUNE, finished_before_s, journal_id)

    def journal_ids(self, limit: int) -> List[str]:
        """Up to ``limit`` journal ids with a finished run, sorted: one seek
        of the run-end index per id (``_sql.select_journal_ids``).

        Raises:
            JournalStoreError: As ``load_run``.
        """
        def read(connection: Any) -> List[str]:
            selected = connection.execute(_sql.select_journal_ids(limit, self._dialect.indexed_by)).fetchall()
            return [row[0] for row in selected]

        return self._call("journal_ids", None, read) if limit > 0 else []

    def runs_without_root_mark(self, journal_id: str, since_s: float, before_s: float, limit: int) -> List[Tuple[str, int]]:
        """See ``JournalStore.runs_without_root_mark`` (``_sql.SELECT_UNMARKED_ENDED``).

        Raises:
            JournalStoreError: As ``load_run``.
        """
        def read(connection: Any) -> List[Tuple[str, int]]:
            selected = connection.execute(
                self._sql(_sql.SELECT_UNMARKED_ENDED), (journal_id, float(since_s), float(before_s), int(limit))
            ).fetchall()
            return [(str(row[0]), int(row[1])) for row in selected]

        return self._call("runs_without_root_mark", None, read) if limit > 0 else []

    def count_entries(self) -> int:
        """How many entries the journal holds, over all journals and runs.

        Raises:
            JournalStoreError: As ``load_run``.
        """
        def read(connection: Any) -> int:
            row = connection.execute(_sql.COUNT).fetchone()
            return int(row[0]) if row else 0

        return self._call("count_entries", None, read)

    # --- the callback port ---------------------------------------------------------

    def register(
        self, ref: CallbackRef, callback_id: str, purpose: str, created_ms: int, deadline_ms: int,
        resolve_token: Optional[str] = None, reject_token: Optional[str] = None,
        details: Optional[str] = None,
    ) -> CallbackRecord:
        """Store a new ``PENDING`` callback for ``ref`` (times in Unix
        milliseconds) with its routes' tokens (each one not given drawn
        here) and its ``details`` (JSON text or None), unless ``ref`` has one already; one transaction (idempotent,
        so retried on a lost connection).

        Returns:
            The callback of ``ref``: the new one, or the one registered before
            (its id, purpose, deadline and state win over the arguments).

        Raises:
            ValueError: ``callback_id`` is registered for another ref (nothing
                was written).
            JournalUnavailableError: The store stayed unreachable past the retry bound.
            JournalSchemaError: The database is not a version-1 journal.
            JournalStoreError: The write failed otherwise and was rolled back.
        """
        tokens = (resolve_token or new_capability_token(), reject_token or new_capability_token())

        def write(connection: Any) -> CallbackRecord:
            return _sql_callbacks.register(
                connection, self._dialect.placeholder, ref, callback_id, purpose, created_ms, deadline_ms, tokens,
                details,
            )

        return self._call("register", (ref.journal_id, ref.key, ref.seq), write, write=True)

    def complete(
        self, callback_id: str, state: str, body: Optional[bytes], now_ms: int, count_late: bool = False
    ) -> CompleteResult:
        """Move a ``PENDING`` callback to ``state`` with ``body``, stamped
        ``now_ms`` (Unix milliseconds), in one transaction whose conditional
        ``UPDATE`` decides a race between threads and processes (SQLite: the
        loser waits for the write lock; PostgreSQL: for the winner's row lock;
        either then finds the row no longer pending).

        Retried on a lost connection: a retry first reads the callback back,
        and one already in ``state`` with ``body`` at ``now_ms`` is this
        call's own earlier commit (``ACCEPTED``, no late completion counted).

        Returns:
            ``ACCEPTED`` with the updated callback; ``FINISHED`` with the
            callback as it was (its state won), after adding one to its
            ``late_completions`` if ``count_late``; ``UNKNOWN`` with None if
            there is no such callback.

        Raises:
            ValueError: ``state`` is not one of ``FINAL_STATES`` (the database
                is not touched).
            TypeError: ``body`` is neither None nor bytes-like.
            JournalUnavailableError: The store stayed unreachable past the
                retry bound; read the callback back to learn whether it landed.
            JournalStoreError: The write failed otherwise and was rolled back.
        """
        body = _sql_callbacks.checked_body(state, body)
        attempts = 0

        def write(connection: Any) -> CompleteResult:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                found = _sql_callbacks.get(connection, self._dialect.placeholder, callback_id)
                if (
                    found is not None and found.state == state and found.completed_ms == now_ms
                    and found.body == body
                ):
                    return CompleteResult(ACCEPTED, found)
            return _sql_callbacks.complete(
                connection, self._dialect.placeholder, callback_id, state, body, now_ms, count_late
            )

        return self._call("complete", callback_id, write, write=True)

    def get_callback(self, callback_id: str) -> Optional[CallbackRecord]:
        """The callback, or None if unknown.

        Raises:
            JournalStoreError: As ``load_run``.
        """
        def read(connection: Any) -> Optional[CallbackRecord]:
            return _sql_callbacks.get(connection, self._dialect.placeholder, callback_id)

        return self._call("get_callback", callback_id, read)

    def finished_callbacks(self, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
        """Those of ``callback_ids`` that have left ``PENDING``, by id; unknown
        ids are left out. One ``SELECT`` per 500 ids.

        Raises:
            JournalStoreError: As ``load_run``.
        """
        callback_ids = list(callback_ids)

        def read(connection: Any) -> Dict[str, CallbackRecord]:
            return _sql_callbacks.finished(connection, self._dialect.placeholder, callback_ids)

        return self._call("finished_callbacks", None, read)

    def close_run(self, journal_id: str, key: str, seq: int, now_ms: int) -> int:
        """Move every ``PENDING`` callback of one record's run (any step) to
        ``CLOSED``, stamped ``now_ms`` (Unix milliseconds), in one transaction
        (idempotent, so retried on a lost connection).

        Returns:
            How many callbacks it closed (on a retry after an unknown commit,
            those the retry found still pending).

        Raises:
            JournalUnavailableError: The store stayed unreachable past the retry bound.
            JournalStoreError: The write failed otherwise and was rolled back.
        """
        def write(connection: Any) -> int:
            return _sql_callbacks.close_run(connection, self._dialect.placeholder, journal_id, key, seq, now_ms)

        return self._call("close_run", (journal_id, key, seq), write, write=True)

    def prune_callbacks(self, finished_before_s: float, journal_id: str) -> int:
        """Delete the callbacks of ``journal_id``'s runs whose ``RUN_END`` was
        committed before ``finished_before_s`` (Unix seconds), nested runs'
        included (see ``CallbackStore.prune_callbacks``), in batches as ``prune``.

        Returns:
            How many callbacks it deleted.

        Raises:
            JournalStoreError: As ``prune``.
        """
        return self._prune("prune_callbacks", _sql_callbacks.PRUNE, finished_before_s, journal_id)

    def _prune(self, operation: str, delete_run: str, finished_before_s: float, journal_id: str) -> int:
        """Page through ``journal_id``'s runs that ended before the cutoff in
        run-end order, ``PRUNE_WINDOW_RUNS`` at a time (a read); delete each
        page's runs in key order (``_sql.prune_order``) with ``delete_run``,
        ``PRUNE_BATCH_RUNS`` runs per transaction (and per retried call).

        A run found here has ended; deleting it in a later transaction than
        the one that found it is safe (nothing writes to a finished run, and
        a run another prune deleted meanwhile deletes nothing)."""
        deleted, after = 0, _sql.BEFORE_ALL_ENDED

        def page(connection: Any) -> List[Any]:
            return connection.execute(
                self._sql(_sql.SELECT_ENDED), (journal_id, float(finished_before_s), *after)
            ).fetchall()

        while True:
            ended = self._call(operation, None, page)
            runs = _sql.prune_order(journal_id, ended)
            for start in range(0, len(runs), _sql.PRUNE_BATCH_RUNS):
                batch = [_sql.run_parameters(*run) for run in runs[start : start + _sql.PRUNE_BATCH_RUNS]]
                deleted += self._call(operation, None, _deleting(self._sql(delete_run), batch), write=True)
            if len(ended) < _sql.PRUNE_WINDOW_RUNS:
                return deleted
            after = tuple(ended[-1])

    # --- errors and retries ------------------------------------------------------------

    # --- the run-control port (stores.controls) --------------------------------------

    def request_control(
        self, journal_id: str, key: str, action: str, seq: Optional[int], requested_by: str, now_ms: int,
    ) -> ControlRequest:
        """See ``ControlStore.request_control``. Not retried on a lost
        connection (an insert is not idempotent): the error says so, and the
        caller lists the requests to learn whether it landed."""
        check_request(action, seq, requested_by)

        def write(connection: Any) -> ControlRequest:
            return _sql_controls.insert(
                connection, self._dialect.placeholder, journal_id, key, action, seq, requested_by, now_ms)

        return self._call("request_control", None, write, write=True, retried=False)

    def controls(
        self, journal_ids: Optional[Iterable[str]] = None, after_id: int = 0, key: Optional[str] = None,
        pending_only: bool = False,
    ) -> List[ControlRequest]:
        """See ``ControlStore.controls``."""
        ids = None if journal_ids is None else list(journal_ids)

        def read(connection: Any) -> List[ControlRequest]:
            return _sql_controls.select(connection, self._dialect.placeholder, ids, after_id, key, pending_only)

        return self._call("controls", None, read)

    def mark_control(self, control_id: int, state: str, outcome: str, now_ms: int) -> bool:
        """See ``ControlStore.mark_control`` (a conditional update: retried
        safely, a second try finds the row no longer pending)."""

        def write(connection: Any) -> bool:
            return _sql_controls.mark(connection, self._dialect.placeholder, control_id, state, outcome, now_ms)

        return self._call("mark_control", None, write, write=True)

    # --- the shared rate window port (stores.rate_window) ------------------------------

    def claim(self, scope: str, requests_cap: Optional[int], requests_window_s: float, tokens: int = 0,
              tokens_cap: Optional[int] = None, tokens_window_s: float = 10.0,
              now: Optional[float] = None) -> Claim:
        """See ``RateWindowStore.claim``: one transaction holding the scope's
        lock (``Dialect.lock_rate_scope``), stamped with ``now`` or the
        dialect's clock (``Dialect.clock_s``: PostgreSQL's server clock).

        Retried on a lost connection (``StoreRetry``) without double
        counting: the claim id is drawn once, before the first attempt, and
        an attempt that finds it stored returns it (its earlier commit landed).

        Raises:
            ValueError: See ``check_claim`` (nothing is written).
            JournalUnavailableError: The store stayed unreachable past the retry bound.
            JournalStoreError: The transaction failed otherwise and was rolled back.
        """
        check_claim(requests_cap, requests_window_s, tokens, tokens_cap, tokens_window_s)
        claim_id = new_claim_id()

        def write(connection: Any) -> Claim:
            self._dialect.lock_rate_scope(connection, scope)
            at = self._dialect.clock_s(connection) if now is None else float(now)
            return _sql_rate_window.claim(connection, self._dialect.placeholder, claim_id, scope, at, requests_cap,
                                          requests_window_s, int(tokens), tokens_cap, tokens_window_s)

        return self._call("claim", None, write, write=True)

    def restamp(self, claim_id: str, tokens: Optional[int] = None, now: Optional[float] = None) -> bool:
        """See ``RateWindowStore.restamp`` (a conditional update: retried safely).

        Raises:
            JournalStoreError: As ``claim``.
        """
        def write(connection: Any) -> bool:
            at = self._dialect.clock_s(connection) if now is None else float(now)
            return _sql_rate_window.restamp(connection, self._dialect.placeholder, claim_id, at, tokens)

        return self._call("restamp", None, write, write=True)

    def unclaim(self, claim_id: str) -> bool:
        """See ``RateWindowStore.unclaim`` (a delete by id: retried safely).

        Raises:
            JournalStoreError: As ``claim``.
        """
        def write(connection: Any) -> bool:
            return _sql_rate_window.unclaim(connection, self._dialect.placeholder, claim_id)

        return self._call("unclaim", None, write, write=True)

    def _call(
        self,
        operation: str,
        run: Optional[RunIdentity],
        body: Callable[[Any], T],
        write: bool = False,
        counted: bool = False,
        retried: bool = True,
    ) -> T:
        """``body(connection)`` under this process's connection (in one write
        transaction if ``write``), retried on ``JournalUnavailableError`` as
        ``self.retry`` allows, sleeping with the store's lock released. No
        attempt starts later than ``retry.timeout_s`` after the call began,
        and an attempt in progress is not cut short: a call gives up after at
        most ``timeout_s`` plus one attempt (bounded by the PostgreSQL connect
        timeout or the SQLite busy timeout).

        Args:
            operation: The port method, for error messages.
            run: The run or callback id the call is about, or None.
            body: The reads or writes; runs again on each attempt.
            write: Run ``body`` in one transaction.
            counted: Count a committed transaction in ``writes``.
            retried: Retry on ``JournalUnavailableError`` (False for a
                write that is not idempotent).

        Raises:
            JournalStoreError: The failure as the store's own error type
                (``Dialect.classify``), naming ``operation``, ``run`` and the
                location, chained from the driver's error.
            Exception: What ``body`` raised that is not the driver's (a
                ``ValueError`` of the port, say), unchanged.
        """
        started = self._monotonic()
        backoffs = self.retry.backoffs()
        attempts = 0
        while True:
            attempts += 1
            try:
                with self._session() as connection:
                    self._dialect.check(connection)
                    if not write:
                        return body(connection)
                    with self._dialect.transaction(connection):
                        result = body(connection)
                    if counted:
                        with self._writes_lock:  # after the commit
                            self.writes += 1
                    return result
            except Exception as error:  # BaseException (a cancellation, a crash) passes as is
                failure = self._store_error(error, operation, run)
            if not isinstance(failure, JournalUnavailableError) or not retried:
                raise failure
            now = self._monotonic()
            backoff = next(backoffs)
            if now - started + backoff > self.retry.timeout_s:
                if attempts > 1:
                    add_note(
                        failure,
                        f"gave up after {attempts} attempts over {now - started:.2f} s "
                        f"(journal.retry.timeout_s = {self.retry.timeout_s:g})"
                    )
                raise failure
            log.warning("%s; attempt %d, retrying in %.2f s", failure, attempts, backoff)
            self._sleep(backoff)

    def _store_error(self, error: Exception, operation: str, run: Optional[RunIdentity]) -> Exception:
        """``error`` as the store's own error naming ``operation`` and ``run``,
        with the driver's error (or the dialect's own) as its cause; an error
        that is neither the driver's nor the store's is returned as is."""
        if isinstance(error, JournalStoreError):
            if error.operation is not None:
                return error
            kind: Any = type(error)
            message = str(error)
            location = None  # the dialect's message names where it looked
        else:
            kind = self._dialect.classify(error)
            if kind is None:
                return error
            message = f"{type(error).__module__}.{type(error).__qualname__}: {str(error).strip()}"
            location = self._dialect.describe()
        failure = kind(message, operation=operation, run=run, location=location)
        failure.__cause__ = error
        return failure

    # --- connections -----------------------------------------------------------------

    def close(self) -> None:
        """Close this process's connection; a later call opens a new one."""
        self._forget_inherited()
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_writes_lock"] = None
        state["_connection"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._writes_lock = threading.Lock()
        self._pid = os.getpid()

    def _sql(self, statement: str) -> str:
        return self._dialect.sql(statement)

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """This process's connection, held under the store's lock; dropped if
        the dialect finds it broken after the call."""
        self._forget_inherited()
        with self._lock:
            if self._connection is None:
                self._connection = self._dialect.connect()
            connection = self._connection
            try:
                yield connection
            finally:
                if self._dialect.is_broken(connection):
                    self._connection = None

    def _forget_inherited(self) -> None:
        """After ``os.fork``: set the parent's connection aside and take a new
        lock (the parent's may have been held at the fork)."""
        pid = os.getpid()
        if self._pid == pid:
            return
        if self._connection is not None:
            self._dialect.set_aside(self._connection)
        self._connection = None
        self._lock = threading.Lock()
        self._writes_lock = threading.Lock()
        self._pid = pid

"""Journal stores: where the runtime's durable call results live.

``journal`` defines the port (``JournalStore``, ``JournalEntry``); the stores
implement it: ``InMemoryJournalStore`` (tests, previews) and ``SQLJournalStore``
over a database dialect, as ``SQLiteJournalStore`` (the embedded default, one
file per job) and ``PostgresJournalStore`` (a real cluster). ``callbacks``
defines the callback port (``CallbackStore``), which the same stores implement
beside the journal. ``open_journal_store`` picks one from a job's configuration.
Importing this package connects nothing and does not import ``psycopg``.
"""

from flink_agents.stores.callbacks import (
    ACCEPTED,
    CANCELLED,
    CLOSED,
    FINAL_STATES,
    FINISHED,
    PENDING,
    REJECTED,
    RESOLVED,
    TIMED_OUT,
    UNKNOWN,
    CallbackRecord,
    CallbackRef,
    CallbackStore,
    CompleteResult,
)
from flink_agents.stores.errors import (
    JournalCorruptError,
    JournalReplacedError,
    JournalSchemaError,
    JournalStoreError,
    JournalUnavailableError,
)
from flink_agents.stores.factory import open_journal_store
from flink_agents.stores.journal import (
    COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, TRACE_STEP, JournalEntry, JournalStore,
)
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.stores.postgres_store import PostgresJournalStore
from flink_agents.stores.retry import StoreRetry
from flink_agents.stores.sql_store import SQLJournalStore
from flink_agents.stores.sqlite_store import SQLiteJournalStore

__all__ = [
    "ACCEPTED",
    "CANCELLED",
    "CLOSED",
    "COMPLETION",
    "FAILED_ATTEMPTS",
    "CallbackRecord",
    "CallbackRef",
    "CallbackStore",
    "CompleteResult",
    "FINAL_STATES",
    "FINISHED",
    "InMemoryJournalStore",
    "JournalCorruptError",
    "JournalEntry",
    "JournalReplacedError",
    "JournalSchemaError",
    "JournalStore",
    "JournalStoreError",
    "JournalUnavailableError",
    "PENDING",
    "PostgresJournalStore",
    "REJECTED",
    "RESOLVED",
    "RUN_END",
    "RUN_STEP",
    "TRACE_STEP",
    "SQLJournalStore",
    "SQLiteJournalStore",
    "StoreRetry",
    "TIMED_OUT",
    "UNKNOWN",
    "open_journal_store",
]

"""Choose and open the journal store a job's configuration names.

Keys (flat, dotted, as in a Flink configuration):

- ``journal.store``: ``"sqlite"`` (default), ``"memory"`` or ``"postgres"``.
- ``journal.sqlite.path``: the SQLite file; default ``flink_agents_journal.db``
  in the current directory.
- ``journal.postgres.dsn``: the PostgreSQL DSN; default the environment
  variable ``FLINK_AGENTS_POSTGRES_DSN``.
- ``journal.postgres.pool.min_size`` (default 1), ``journal.postgres.pool.max_size``
  (4): the connections each worker process keeps idle and opens at most
  (``stores.postgres_store.PoolSize``).
- ``journal.retry.timeout_s`` (default 10), ``journal.retry.initial_backoff_s``
  (0.05), ``journal.retry.max_backoff_s`` (1): how long the SQL stores ride
  out a lost connection or a locked file (``stores.retry.StoreRetry``).

The keys are declared, typed and validated in
``flink_agents.api.core_options.RuntimeOptions`` (``JOURNAL_*``).

Opening connects nothing: every store connects on its first read or write.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.stores.journal import JournalStore
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.stores.postgres_store import PoolSize, PostgresJournalStore
from flink_agents.stores.retry import StoreRetry
from flink_agents.stores.sqlite_store import SQLiteJournalStore

__all__ = ["POSTGRES_DSN_ENV", "STORES", "open_journal_store"]

STORES = ("sqlite", "memory", "postgres")
DEFAULT_SQLITE_PATH = "flink_agents_journal.db"
POSTGRES_DSN_ENV = "FLINK_AGENTS_POSTGRES_DSN"


def open_journal_store(config: Mapping[str, Any]) -> JournalStore:
    """The journal store ``config`` names (see the module docstring for keys).

    Args:
        config: The job's configuration; missing keys take their defaults.

    Returns:
        A store, not yet connected.

    Raises:
        ValueError: ``journal.store`` is not one of ``STORES``, or it is
            ``"postgres"`` and neither ``journal.postgres.dsn`` nor
            ``FLINK_AGENTS_POSTGRES_DSN`` gives a DSN, or a
            ``journal.retry.*`` value is not a number of seconds >= 0, or a
            ``journal.postgres.pool.*`` size is out of range.
    """
    options = readable(config)
    kind = (options.get(RuntimeOptions.JOURNAL_STORE) or "sqlite").strip().lower()
    if kind == "sqlite":
        path = options.get(RuntimeOptions.JOURNAL_SQLITE_PATH) or DEFAULT_SQLITE_PATH
        return SQLiteJournalStore(os.path.abspath(os.fspath(path)), retry=StoreRetry.from_config(options))
    if kind == "memory":
        return InMemoryJournalStore()
    if kind == "postgres":
        dsn = options.get(RuntimeOptions.JOURNAL_POSTGRES_DSN) or os.environ.get(POSTGRES_DSN_ENV)
        if not dsn:
            raise ValueError(
                "journal.store is 'postgres' but no DSN is configured: set "
                f"journal.postgres.dsn or the {POSTGRES_DSN_ENV} environment variable"
            )
        return PostgresJournalStore(str(dsn), retry=StoreRetry.from_config(options), pool=PoolSize.from_config(options))
    raise ValueError(f"configuration 'journal.store': must be one of {', '.join(map(repr, STORES))}, got {kind!r}")

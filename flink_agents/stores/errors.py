"""Errors the journal stores raise on their own account.

Driver errors (``sqlite3.Error``, ``psycopg.Error``) of a failed read or write
pass through unchanged; these two cover what a caller must tell apart: a store
that cannot be reached (retrying later may help) and a store whose file or
tables belong to another schema version (retrying never helps).
"""

from __future__ import annotations

__all__ = ["JournalSchemaError", "JournalStoreError", "JournalUnavailableError"]


class JournalStoreError(Exception):
    """Base class of the errors a journal store raises itself."""


class JournalSchemaError(JournalStoreError):
    """The store holds a journal of another schema version, or something that
    is not a flink_agents journal at all. Terminal: the job must be pointed at
    another store or the store migrated."""


class JournalUnavailableError(JournalStoreError, ConnectionError):
    """The store's server could not be reached. The message names where it
    was looked for, never a password."""

"""SQL of the journal port, written once for every dialect (``SQLJournalStore``).

One table, ``journal``, one row per entry, keyed by (journal id, key, record
sequence number, step, ordinal), plus a partial index over the run-end markers
so ``prune`` finds finished runs without scanning every entry. Statements here
use ``{p}`` where a driver's parameter placeholder goes (``?`` for sqlite3,
``%s`` for psycopg); ``statement(sql, p)`` fills it in.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Tuple

from flink_agents.stores.journal import RUN_END, RUN_STEP, JournalEntry

SCHEMA_VERSION = 1
TABLE = "journal"

# The run-end predicate is spelled with literals, not parameters: a partial
# index serves a query only when the query repeats the index's own predicate.
if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", RUN_STEP):
    raise ValueError(f"RUN_STEP {RUN_STEP!r} cannot be inlined as an SQL literal")
RUN_END_PREDICATE = f"step = '{RUN_STEP}' AND ordinal = {int(RUN_END)}"

KEY_COLUMNS = ("journal_id", "key", "seq", "step", "ordinal")
VALUE_COLUMNS = ("function_id", "args_digest", "payload", "committed_at")
COLUMNS = KEY_COLUMNS + VALUE_COLUMNS

Row = Tuple[str, str, int, str, int, str, str, str, float]


def create_table(integer: str, real: str) -> str:
    """``CREATE TABLE IF NOT EXISTS journal`` with the dialect's column types.

    Args:
        integer: The type of ``seq`` and ``ordinal`` (``INTEGER``, ``BIGINT``).
        real: The type of ``committed_at`` (``REAL``, ``DOUBLE PRECISION``).
    """
    return (
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        " journal_id TEXT NOT NULL,"
        " key TEXT NOT NULL,"
        f" seq {integer} NOT NULL,"
        " step TEXT NOT NULL,"
        f" ordinal {integer} NOT NULL,"
        " function_id TEXT NOT NULL,"
        " args_digest TEXT NOT NULL,"
        " payload TEXT NOT NULL,"
        f" committed_at {real} NOT NULL,"
        f" PRIMARY KEY ({', '.join(KEY_COLUMNS)}))"
    )


RUN_END_INDEX = f"{TABLE}_run_end"
CREATE_RUN_END_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {RUN_END_INDEX} ON {TABLE} (committed_at)"
    f" WHERE {RUN_END_PREDICATE}"
)

SELECT_RUN = (
    f"SELECT step, ordinal, function_id, args_digest, payload FROM {TABLE}"
    " WHERE journal_id = {p} AND key = {p} AND seq = {p}"
)

_VALUES = f"({', '.join(COLUMNS)}) VALUES ({', '.join(['{p}'] * len(COLUMNS))})"

# SQLite: a row whose key exists is deleted, then the new one inserted.
SQLITE_UPSERT = f"INSERT OR REPLACE INTO {TABLE} {_VALUES}"

# PostgreSQL: a row whose key exists takes the new values in place.
POSTGRES_UPSERT = (
    f"INSERT INTO {TABLE} {_VALUES}"
    f" ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{column} = EXCLUDED.{column}" for column in VALUE_COLUMNS)
)

# Every entry of each run whose run-end marker is older than the cutoff, in
# one statement: the subquery reads the partial index, the delete the key.
# A finished run goes with the runs nested under it: a sub-agent call's journal
# id is "<parent journal id>/<call id>" for the same key and record, and it
# writes no run end of its own (its parent's result entry may land later).
PRUNE = (
    f"DELETE FROM {TABLE} WHERE EXISTS (SELECT 1 FROM {TABLE} AS ended"
    f" WHERE ended.{RUN_END_PREDICATE.replace(' AND ordinal', ' AND ended.ordinal')}"
    f" AND ended.committed_at < {{p}} AND ended.key = {TABLE}.key AND ended.seq = {TABLE}.seq"
    f" AND (ended.journal_id = {TABLE}.journal_id OR substr({TABLE}.journal_id, 1,"
    f" length(ended.journal_id) + 1) = ended.journal_id || '/'))"
)

COUNT = f"SELECT count(*) FROM {TABLE}"


def statement(sql: str, placeholder: str) -> str:
    """``sql`` with each ``{p}`` replaced by the driver's ``placeholder``."""
    return sql.replace("{p}", placeholder)


def rows(
    journal_id: str, key: str, seq: int, entries: Iterable[JournalEntry], committed_at: float
) -> List[Row]:
    """One ``INSERT`` parameter tuple per entry, in ``COLUMNS`` order."""
    return [
        (
            journal_id,
            key,
            seq,
            entry.step,
            entry.ordinal,
            entry.function_id,
            entry.args_digest,
            entry.payload,
            committed_at,
        )
        for entry in entries
    ]


def entries_by_slot(
    selected: Iterable[Tuple[str, int, str, str, str]],
) -> Dict[Tuple[str, int], JournalEntry]:
    """``SELECT_RUN`` rows as ``{(step, ordinal): JournalEntry}``."""
    return {
        (step, ordinal): JournalEntry(step, ordinal, function_id, args_digest, payload)
        for step, ordinal, function_id, args_digest, payload in selected
    }

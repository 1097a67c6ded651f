"""SQL of the journal port, written once for every dialect (``SQLJournalStore``).

One table, ``journal``, one row per entry, keyed by (journal id, key, record
sequence number, step, ordinal). Pruning costs what it deletes, not what the
table holds, and touches one journal only: a partial index over the run-end
markers, ordered by journal id, then commit time, pages through one
journal's finished runs (``SELECT_ENDED``), and an index over (key, sequence
number) finds each run's entries and its nested sub-agent runs' (``PRUNE``).
The same index lists the journal ids a store holds
(``select_journal_ids``), one index seek per id. Statements here use ``{p}`` where a driver's parameter
placeholder goes (``?`` for sqlite3, ``%s`` for psycopg); ``statement(sql,
p)`` fills it in.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Tuple

from flink_agents.stores.journal import RUN_END, RUN_STEP, TRACE_STEP, JournalEntry

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


# Finished runs by journal, then commit time, covering what ``SELECT_ENDED``
# reads: a prune reads its own journal's finished runs and no other's, however
# many another job keeps. Schema version 1 first had a one-column index, then
# one led by commit time (``OLD_RUN_END_INDEXES``); opening such a database
# replaces them. Only top-level runs write a run end (a sub-agent's nested
# journal writes none), so the index holds no nested journal id.
RUN_END_INDEX = f"{TABLE}_journal_run_ends"
ENDED_COLUMNS = ("journal_id", "committed_at", "key", "seq")
CREATE_RUN_END_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {RUN_END_INDEX} ON {TABLE} ({', '.join(ENDED_COLUMNS)})"
    f" WHERE {RUN_END_PREDICATE}"
)
OLD_RUN_END_INDEXES = (f"{TABLE}_run_end", f"{TABLE}_run_ends")
DROP_OLD_RUN_END_INDEXES = [f"DROP INDEX IF EXISTS {name}" for name in OLD_RUN_END_INDEXES]

# Every run of one (key, record): the record's run in each journal and the
# sub-agent runs nested under them.
RUN_INDEX = f"{TABLE}_run"
CREATE_RUN_INDEX = f"CREATE INDEX IF NOT EXISTS {RUN_INDEX} ON {TABLE} (key, seq)"

# Runs finished per prune transaction: each transaction deletes whole runs
# (with their nested ones), then releases the write lock for other writers.
PRUNE_BATCH_RUNS = 256

# Finished runs read per page of the run-end index (a read, outside any
# transaction). Each page is deleted in key order, ``PRUNE_BATCH_RUNS`` runs
# per transaction (``prune_order``): the (key, seq) index and the primary key
# hold each key's rows together, so deleting in run-end order dirtied one
# leaf page of each per run in every transaction that reached the key, again
# and again; in key order, runs of one key share their pages in one
# transaction. Measured on SQLite (tools/bench/prune_scaling.py, oldest 10%
# of 2k..64k runs over 997 keys, 4 KiB pages): WAL pages written per pruned
# run 0.69, 0.80, 1.90, 2.32 in run-end order; 0.69, 0.65, 0.80, 0.78 in key
# order, at about 20 us of CPU per run at every size.
PRUNE_WINDOW_RUNS = 4096

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

# One page of one journal's finished runs, (committed_at, key, seq), in index
# order after the given row value: runs of the journal (first parameter) whose
# run-end marker is older than the second. Row values compare column by
# column; with the journal id fixed, the index's remaining columns serve the
# range and the order.
_PAGED = ", ".join(ENDED_COLUMNS[1:])
SELECT_ENDED = (
    f"SELECT {_PAGED} FROM {TABLE}"
    f" WHERE {RUN_END_PREDICATE} AND journal_id = {{p}} AND committed_at < {{p}}"
    f" AND ({_PAGED}) > ({{p}}, {{p}}, {{p}})"
    f" ORDER BY {_PAGED} LIMIT {PRUNE_WINDOW_RUNS}"
)
# Finished runs of a journal in a commit-time range whose trace root was not
# marked exported (tracing's recovery): the run-end index, then a primary-key
# probe per run.
SELECT_UNMARKED_ENDED = (
    f"SELECT key, seq FROM {TABLE} AS ended"
    f" WHERE {RUN_END_PREDICATE} AND journal_id = {{p}} AND committed_at >= {{p}} AND committed_at < {{p}}"
    f" AND NOT EXISTS (SELECT 1 FROM {TABLE} AS mark WHERE mark.journal_id = ended.journal_id"
    " AND mark.key = ended.key AND mark.seq = ended.seq"
    f" AND mark.step = '{TRACE_STEP}' AND mark.function_id = 'root')"
    " ORDER BY committed_at LIMIT {p}"
)
BEFORE_ALL_ENDED = (float("-inf"), "", -(2**63))  # SELECT_ENDED's first page


def select_journal_ids(limit: int, indexed_by: str = "") -> str:
    """The first ``limit`` journal ids with a finished run, in index order:
    a loose scan of the run-end index (one seek per id, however many runs
    each holds), written as a recursive query both dialects run.

    Args:
        limit: At most this many ids.
        indexed_by: The dialect's clause naming the run-end index, if its
            planner needs one (``Dialect.indexed_by``).
    """
    source = f"{TABLE} {indexed_by}".rstrip()
    first = f"SELECT journal_id FROM {source} WHERE {RUN_END_PREDICATE} ORDER BY journal_id LIMIT 1"
    after = (
        f"SELECT journal_id FROM {source} WHERE {RUN_END_PREDICATE} AND journal_id > ids.journal_id"
        " ORDER BY journal_id LIMIT 1"
    )
    return (
        f"WITH RECURSIVE ids(journal_id, n) AS (SELECT ({first}), 1"
        f" UNION ALL SELECT ({after}), n + 1 FROM ids WHERE ids.journal_id IS NOT NULL AND n < {int(limit)})"
        " SELECT journal_id FROM ids WHERE journal_id IS NOT NULL"
    )


def prune_run(table: str) -> str:
    """``DELETE`` of one finished run's rows in ``table`` (parameters:
    ``run_parameters``), read through the (key, seq) index.

    A finished run goes with the runs nested under it: a sub-agent call's
    journal id is ``"<parent journal id>/<call id>"`` for the same key and
    record, and it writes no run end of its own (its parent's result entry
    may land later).
    """
    return (
        f"DELETE FROM {table} WHERE key = {{p}} AND seq = {{p}}"
        " AND (journal_id = {p} OR substr(journal_id, 1, {p}) = {p})"
    )


PRUNE = prune_run(TABLE)


def prune_order(journal_id: str, ended: Iterable[Tuple[float, str, int]]) -> List[Tuple[str, str, int]]:
    """``SELECT_ENDED`` rows of ``journal_id`` as (journal id, key, seq)
    runs, in the order their rows lie in the (key, seq) index (see
    ``PRUNE_WINDOW_RUNS``)."""
    return sorted((journal_id, key, int(seq)) for _, key, seq in ended)


def run_parameters(journal_id: str, key: str, seq: int) -> Tuple[str, int, str, int, str]:
    """``prune_run``'s parameters for the run (journal id, key, seq)."""
    nested = journal_id + "/"
    return (key, int(seq), journal_id, len(nested), nested)


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

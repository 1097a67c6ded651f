"""SQL of the callback port, written once for every dialect (``SQLJournalStore``).

One table, ``callbacks``, one row per callback: the id (primary key), the
``CallbackRef`` it belongs to (journal id, key, sequence number, step,
ordinal; unique), its purpose, creation time and deadline, its state, the
POSTed body, when it left ``PENDING``, how many completions came late, and
the capability tokens of its two routes (``resolve_token``,
``reject_token``), and what a reviewer needs to see of it (``details``,
JSON text; a tool call's approval: ``runtime.features.approvals``). Times
are Unix milliseconds.

The token and details columns came after the table: a table written by an
older release lacks them and gets them on open (``add_missing_columns``, run
by each dialect's schema check), NULL in its rows: those callbacks are
``CallbackRecord.legacy`` (their id alone grants both routes, as when their
URLs were handed out) and have no details. An older release reading a table
with the columns ignores them (it names its columns).

Indexes: the unique constraint over the ref starts with (journal id, key,
sequence number), so it serves ``close_run``; an index over (key, sequence
number) serves ``PRUNE``, which deletes one finished run's callbacks (the
store pages through finished runs with the journal's ``SELECT_ENDED``). The
table belongs to schema version 1 of the journal: a version-1 file or
database written before it or its index existed gets them on open
(``CREATE ... IF NOT EXISTS``), without a version change.

Statements use ``{p}`` where the driver's placeholder goes, as in ``_sql``.
The operations below take a connection whose ``execute(sql, params)`` returns
a cursor (``sqlite3`` and ``psycopg`` both qualify) and the dialect's
placeholder; the caller (``SQLJournalStore``) holds the connection and, for
the writes, one transaction around the call.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from flink_agents.stores._sql import prune_run, statement
from flink_agents.stores.callbacks import (
    ACCEPTED,
    CLOSED,
    FINAL_STATES,
    FINISHED,
    PENDING,
    UNKNOWN,
    CallbackRecord,
    CallbackRef,
    CompleteResult,
)

TABLE = "callbacks"

REF_COLUMNS = ("journal_id", "key", "seq", "step", "ordinal")
TOKEN_COLUMNS = ("resolve_token", "reject_token")
# Nullable TEXT columns added after the table was first released, in order.
ADDED_COLUMNS = TOKEN_COLUMNS + ("details",)
COLUMNS = (
    ("callback_id",)
    + REF_COLUMNS
    + ("purpose", "created_ms", "deadline_ms", "state", "body", "completed_ms", "late_completions")
    + ADDED_COLUMNS
)
_SELECTED = ", ".join(COLUMNS)

# Ids per ``finished_callbacks`` statement: far below SQLite's oldest bound
# parameter limit (999) and PostgreSQL's (65535).
IDS_PER_STATEMENT = 500

# States are spelled as literals, not parameters: a partial index serves a
# query only when the query repeats the index's own predicate.
_UNSAFE = [state for state in (PENDING,) + FINAL_STATES if not state.replace("_", "").isalpha()]
if _UNSAFE:
    raise ValueError(f"callback states {_UNSAFE} cannot be inlined as SQL literals")
IS_PENDING = f"state = '{PENDING}'"
IS_FINAL = f"state <> '{PENDING}'"


def create_table(integer: str, blob: str) -> str:
    """``CREATE TABLE IF NOT EXISTS callbacks`` with the dialect's column types.

    Args:
        integer: The type of sequence numbers, ordinals, times and counts
            (``INTEGER``, ``BIGINT``).
        blob: The type of ``body`` (``BLOB``, ``BYTEA``).
    """
    return (
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        " callback_id TEXT NOT NULL PRIMARY KEY,"
        " journal_id TEXT NOT NULL,"
        " key TEXT NOT NULL,"
        f" seq {integer} NOT NULL,"
        " step TEXT NOT NULL,"
        f" ordinal {integer} NOT NULL,"
        " purpose TEXT NOT NULL,"
        f" created_ms {integer} NOT NULL,"
        f" deadline_ms {integer} NOT NULL,"
        " state TEXT NOT NULL,"
        f" body {blob},"
        f" completed_ms {integer},"
        f" late_completions {integer} NOT NULL DEFAULT 0,"
        " resolve_token TEXT,"
        " reject_token TEXT,"
        " details TEXT,"
        f" UNIQUE ({', '.join(REF_COLUMNS)}))"
    )


def add_missing_columns(existing: Iterable[str]) -> List[str]:
    """``ALTER TABLE`` statements adding the ``ADDED_COLUMNS`` a table with
    the columns ``existing`` lacks (none when it has them all; the table
    must exist). Nullable, so old rows read as legacy, without details."""
    present = {name.lower() for name in existing}
    return [f"ALTER TABLE {TABLE} ADD COLUMN {name} TEXT" for name in ADDED_COLUMNS if name not in present]


# Every callback of one (key, record), for ``PRUNE``.
RUN_INDEX = f"{TABLE}_run"

# What ``create_statements`` creates, for a cheap check.
SCHEMA_OBJECTS = (TABLE, RUN_INDEX)


def create_statements(integer: str, blob: str) -> List[str]:
    """Every statement creating the table and its index, each a no-op if its
    object exists (arguments as for ``create_table``)."""
    return [
        create_table(integer, blob),
        f"CREATE INDEX IF NOT EXISTS {RUN_INDEX} ON {TABLE} (key, seq)",
    ]


# A row whose ref or id exists already is not inserted; ``register`` tells
# the two apart by reading the row of the ref afterwards.
INSERT = (
    f"INSERT INTO {TABLE} (callback_id, {', '.join(REF_COLUMNS)},"
    f" purpose, created_ms, deadline_ms, state, {', '.join(ADDED_COLUMNS)})"
    " VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING"
)

SELECT_BY_REF = f"SELECT {_SELECTED} FROM {TABLE} WHERE " + " AND ".join(
    f"{column} = {{p}}" for column in REF_COLUMNS
)

SELECT_BY_ID = f"SELECT {_SELECTED} FROM {TABLE} WHERE callback_id = {{p}}"

# The one statement deciding a race: only a pending row changes.
ACCEPT = (
    f"UPDATE {TABLE} SET state = {{p}}, body = {{p}}, completed_ms = {{p}}"
    f" WHERE callback_id = {{p}} AND {IS_PENDING}"
)

COUNT_LATE = (
    f"UPDATE {TABLE} SET late_completions = late_completions + 1"
    f" WHERE callback_id = {{p}} AND {IS_FINAL}"
)

CLOSE_RUN = (
    f"UPDATE {TABLE} SET state = '{CLOSED}', completed_ms = {{p}}"
    f" WHERE journal_id = {{p}} AND key = {{p}} AND seq = {{p}} AND {IS_PENDING}"
)

# The callbacks of one finished run and of the sub-agent runs nested under
# it ("<journal id>/<call id>"), as ``_sql.PRUNE`` selects journal entries.
PRUNE = prune_run(TABLE)


def select_finished(count: int) -> str:
    """``SELECT`` of the final rows among ``count`` ids (``count`` >= 1)."""
    marks = ", ".join(["{p}"] * count)
    return f"SELECT {_SELECTED} FROM {TABLE} WHERE callback_id IN ({marks}) AND {IS_FINAL}"


def record(row: Sequence[Any]) -> CallbackRecord:
    """A selected row (``COLUMNS`` order) as a ``CallbackRecord``; the body
    as ``bytes`` whatever buffer type the driver returned."""
    (
        callback_id, journal_id, key, seq, step, ordinal,
        purpose, created_ms, deadline_ms, state, body, completed_ms, late_completions,
        resolve_token, reject_token, details,
    ) = row
    return CallbackRecord(
        callback_id=callback_id,
        ref=CallbackRef(journal_id, key, int(seq), step, int(ordinal)),
        purpose=purpose,
        created_ms=int(created_ms),
        deadline_ms=int(deadline_ms),
        state=state,
        body=None if body is None else bytes(body),
        completed_ms=None if completed_ms is None else int(completed_ms),
        late_completions=int(late_completions),
        resolve_token=resolve_token,
        reject_token=reject_token,
        details=details,
    )


def checked_body(state: str, body: Optional[bytes]) -> Optional[bytes]:
    """``body`` as ``bytes``, after checking ``complete``'s arguments; call it
    before touching the database.

    Raises:
        ValueError: ``state`` is not one of ``FINAL_STATES``.
        TypeError: ``body`` is neither None nor a bytes-like object.
    """
    if state not in FINAL_STATES:
        raise ValueError(f"cannot complete a callback as {state!r}; final states are {FINAL_STATES}")
    return None if body is None else bytes(body)


# --- operations (the caller holds the connection and the transaction) ----------


def register(
    connection: Any,
    p: str,
    ref: CallbackRef,
    callback_id: str,
    purpose: str,
    created_ms: int,
    deadline_ms: int,
    tokens: Tuple[str, str],
    details: Optional[str] = None,
) -> CallbackRecord:
    """Insert a pending row with ``tokens`` (resolve, reject) and ``details`` unless ``ref``
    or ``callback_id`` has one; return the row of ``ref``. Run it in one
    write transaction.

    Raises:
        ValueError: ``callback_id`` belongs to another ref.
    """
    ref_values = (ref.journal_id, ref.key, ref.seq, ref.step, ref.ordinal)
    connection.execute(
        statement(INSERT, p),
        (callback_id, *ref_values, purpose, int(created_ms), int(deadline_ms), PENDING, *tokens, details),
    )
    row = connection.execute(statement(SELECT_BY_REF, p), ref_values).fetchone()
    if row is None:  # nothing inserted, and not for this ref: the id is taken
        raise ValueError(f"callback id {callback_id!r} is registered for another call")
    return record(row)


def complete(
    connection: Any,
    p: str,
    callback_id: str,
    state: str,
    body: Optional[bytes],
    now_ms: int,
    count_late: bool,
) -> CompleteResult:
    """Move the row to ``state`` if pending; otherwise count a late completion
    if asked. Run it in one write transaction, with ``checked_body``'s body."""
    accepted = connection.execute(
        statement(ACCEPT, p), (state, body, int(now_ms), callback_id)
    ).rowcount
    if accepted != 1 and count_late:
        connection.execute(statement(COUNT_LATE, p), (callback_id,))
    row = get(connection, p, callback_id)
    if row is None:
        return CompleteResult(UNKNOWN, None)
    return CompleteResult(ACCEPTED if accepted == 1 else FINISHED, row)


def get(connection: Any, p: str, callback_id: str) -> Optional[CallbackRecord]:
    """The row of ``callback_id``, or None."""
    row = connection.execute(statement(SELECT_BY_ID, p), (callback_id,)).fetchone()
    return None if row is None else record(row)


def finished(connection: Any, p: str, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
    """The final rows among ``callback_ids``, by id, ``IDS_PER_STATEMENT``
    ids per ``SELECT``."""
    ids = list(dict.fromkeys(callback_ids))
    found: Dict[str, CallbackRecord] = {}
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        chunk = ids[start : start + IDS_PER_STATEMENT]
        for row in connection.execute(statement(select_finished(len(chunk)), p), chunk).fetchall():
            callback = record(row)
            found[callback.callback_id] = callback
    return found


def close_run(connection: Any, p: str, journal_id: str, key: str, seq: int, now_ms: int) -> int:
    """Close the pending rows of one run; returns how many."""
    cursor = connection.execute(statement(CLOSE_RUN, p), (int(now_ms), journal_id, key, seq))
    return max(cursor.rowcount, 0)

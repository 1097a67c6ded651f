"""SQL of the ``rate_claims`` table (``stores.rate_window``), shared by
SQLite and PostgreSQL. Statements use ``{p}`` for the driver's placeholder;
each function runs inside the caller's transaction (``SQLJournalStore``),
after the dialect locked the scope and read its clock
(``Dialect.lock_rate_scope``, ``Dialect.clock_s``)."""

from __future__ import annotations

from typing import Any, List, Optional

from flink_agents.stores.rate_window import Claim, keep_s, wait_s

__all__ = ["SCHEMA_OBJECTS", "TABLE", "claim", "create_statements", "restamp", "unclaim"]

TABLE = "rate_claims"
_INDEX = f"{TABLE}_scope"
SCHEMA_OBJECTS = (TABLE, _INDEX)


def create_statements(integer: str, real: str) -> List[str]:
    """The table and its index, each a no-op if it exists. ``claim_id`` is
    drawn by the caller (``rate_window.new_claim_id``), so a retried claim
    finds its own earlier commit."""
    return [
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        " claim_id TEXT PRIMARY KEY,"
        " scope TEXT NOT NULL,"
        f" claimed_at {real} NOT NULL,"
        f" tokens {integer} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {_INDEX} ON {TABLE} (scope, claimed_at)",
    ]


def claim(connection: Any, p: str, claim_id: str, scope: str, now: float, requests_cap: Optional[int],
          requests_window_s: float, tokens: int, tokens_cap: Optional[int], tokens_window_s: float) -> Claim:
    """``claim_id`` if it is already stored (this call's earlier attempt
    committed); else prune the scope, decide (``rate_window.wait_s``) and
    insert when it fits."""
    if connection.execute(f"SELECT 1 FROM {TABLE} WHERE claim_id = {p}", (claim_id,)).fetchone() is not None:
        return claim_id, 0.0
    connection.execute(
        f"DELETE FROM {TABLE} WHERE scope = {p} AND claimed_at <= {p}",
        (scope, now - keep_s(requests_window_s, tokens_window_s)),
    )
    since = now - max(requests_window_s if requests_cap is not None else 0.0,
                      tokens_window_s if tokens_cap is not None else 0.0)
    rows = connection.execute(
        f"SELECT claimed_at, tokens FROM {TABLE} WHERE scope = {p} AND claimed_at > {p}", (scope, since),
    ).fetchall()
    wait = wait_s(((float(at), int(used)) for at, used in rows), now, requests_cap, requests_window_s,
                  tokens, tokens_cap, tokens_window_s)
    if wait > 0:
        return None, wait
    connection.execute(
        f"INSERT INTO {TABLE} (claim_id, scope, claimed_at, tokens) VALUES ({p}, {p}, {p}, {p})",
        (claim_id, scope, now, tokens),
    )
    return claim_id, 0.0


def restamp(connection: Any, p: str, claim_id: str, now: float, tokens: Optional[int]) -> bool:
    """Count the claim from ``now`` if later, with ``tokens`` if given."""
    if tokens is None:
        cursor = connection.execute(
            f"UPDATE {TABLE} SET claimed_at = CASE WHEN claimed_at < {p} THEN {p} ELSE claimed_at END"
            f" WHERE claim_id = {p}", (now, now, claim_id),
        )
    else:
        cursor = connection.execute(
            f"UPDATE {TABLE} SET claimed_at = CASE WHEN claimed_at < {p} THEN {p} ELSE claimed_at END,"
            f" tokens = {p} WHERE claim_id = {p}", (now, now, int(tokens), claim_id),
        )
    return cursor.rowcount == 1


def unclaim(connection: Any, p: str, claim_id: str) -> bool:
    cursor = connection.execute(f"DELETE FROM {TABLE} WHERE claim_id = {p}", (claim_id,))
    return cursor.rowcount == 1

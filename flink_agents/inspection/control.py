"""Run-control requests from outside the job (the CLI, the web inspector).

``request_control`` writes a request into the job's journal store
(``stores.controls``); each subtask of the running job reads it on its next
poll (``run_control.poll_interval_ms``) and applies it to the key it holds
(``runtime.features.run_control``). What ``--journal`` names is a SQLite
path or a PostgreSQL DSN, as for ``runs list``; writing needs the store's
own credentials, which is the authority to control it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional

from flink_agents.inspection.reader import _is_dsn, open_reader
from flink_agents.inspection.runs import _key_display, key_texts
from flink_agents.stores.controls import CANCEL, ControlStore, check_request
from flink_agents.stores.journal import RUN_END, RUN_STEP

__all__ = ["list_controls", "request_control"]


def _writable_store(journal: str) -> Any:
    """The store ``journal`` names, opened for writing (never created).

    Raises:
        FileNotFoundError: A SQLite path with no file.
    """
    if _is_dsn(journal):
        from flink_agents.stores.postgres_store import PostgresJournalStore

        return PostgresJournalStore(journal)
    if not os.path.isfile(journal):
        raise FileNotFoundError(f"no journal file at {journal!r}")
    from flink_agents.stores.sqlite_store import SQLiteJournalStore

    return SQLiteJournalStore(os.path.abspath(journal))


def _resolve(journal: str, key: str, journal_id: Optional[str]) -> tuple:
    """(journal id, key text) of ``key`` as the user wrote it: the journal
    that holds runs of it (one, or the one ``journal_id`` names).

    Raises:
        ValueError: No journal holds runs of the key and none was given, or
            several do and none was chosen.
    """
    candidates = key_texts(key)
    with open_reader(journal) as reader:
        marks = ", ".join(["{p}"] * len(candidates))
        rows = reader.rows(
            f"SELECT DISTINCT journal_id, key FROM journal WHERE key IN ({marks})", candidates
        ) if reader.has_table("journal") else []
    found = sorted({(jid, text) for jid, text in rows if "/" not in jid})
    if journal_id is not None:
        texts = [text for jid, text in found if jid == journal_id]
        return journal_id, texts[0] if texts else candidates[0]
    if not found:
        raise ValueError(f"no runs of key {key!r} in {journal}: name its job with --job")
    jobs = sorted({jid for jid, _ in found})
    if len(jobs) > 1:
        raise ValueError(f"key {key!r} has runs in several jobs ({', '.join(jobs)}): choose one with --job")
    return found[0]


def _running_seq(journal: str, journal_id: str, text: str) -> Optional[int]:
    """The record of the key whose run has no run end yet (the lowest)."""
    with open_reader(journal) as reader:
        rows = reader.rows(
            "SELECT seq FROM journal WHERE journal_id = {p} AND key = {p} GROUP BY seq"
            f" HAVING SUM(CASE WHEN step = '{RUN_STEP}' AND ordinal = {RUN_END} THEN 1 ELSE 0 END) = 0 ORDER BY seq",
            [journal_id, text])
    return int(rows[0][0]) if rows else None


def _view(request: Any) -> Dict[str, Any]:
    view = asdict(request)
    view["key"] = _key_display(request.key)
    view["job"] = view.pop("journal_id")
    return view


def request_control(journal: str, action: str, key: str, seq: Optional[int] = None, journal_id: Optional[str] = None,
                    requested_by: str = "cli") -> Dict[str, Any]:
    """Write a run-control request; the stored request as a dict
    (``control_id``, ``job``, ``key``, ``action``, ``seq``, ``state``, ...).

    A cancel without ``seq`` targets the key's run in progress as the
    journal shows it (a record not yet started has no journal rows: give
    its seq).

    Raises:
        ValueError: See ``stores.controls.check_request``; the key cannot be
            resolved (``_resolve``); a cancel without seq finds no run in progress.
        FileNotFoundError: No such SQLite file.
    """
    check_request(action, seq if action != CANCEL or seq is not None else None, requested_by)
    resolved_id, text = _resolve(journal, key, journal_id)
    if action == CANCEL and seq is None:
        seq = _running_seq(journal, resolved_id, text)
        if seq is None:
            raise ValueError(f"key {key!r} of job {resolved_id} has no run in progress: give the record's --seq")
    store: ControlStore = _writable_store(journal)
    try:
        return _view(store.request_control(resolved_id, text, action, seq, requested_by, int(time.time() * 1000)))
    finally:
        store.close()


def list_controls(journal: str, journal_id: Optional[str] = None, key: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every run-control request (oldest first), of one job and key if given."""
    with open_reader(journal) as reader:
        if not reader.has_table("controls"):
            return []
        sql = ("SELECT control_id, journal_id, key, action, seq, requested_ms, requested_by, state, applied_ms,"
               " outcome FROM controls WHERE 1 = 1")
        params: List[Any] = []
        if journal_id is not None:
            sql += " AND journal_id = {p}"
            params.append(journal_id)
        if key is not None:
            texts = key_texts(key)
            sql += f" AND key IN ({', '.join(['{p}'] * len(texts))})"
            params += texts
        rows = reader.rows(sql + " ORDER BY control_id", params)
    columns = ("control_id", "job", "key", "action", "seq", "requested_ms", "requested_by", "state", "applied_ms",
               "outcome")
    return [{**dict(zip(columns, row)), "key": _key_display(row[2])} for row in rows]

"""Tool calls waiting for a reviewer: list them, decide them.

``list_approvals`` reads a journal store read-only (``reader.open_reader``);
``decide`` completes one approval through the real store
(``stores.factory.open_journal_store``), with the same conditional write
the callback ingress makes, so the first decision wins and a later one
changes nothing. Both take what ``--journal`` names: a SQLite file path or
a PostgreSQL DSN. The CLI (``flink-agents approvals``) and the web
inspector call these two.

An approval is a callback whose purpose is ``"approval"``
(``runtime.features.approvals``); its ``details`` say which tool call it
holds. Unlike ``runs.list_callbacks``, the full callback id is shown: it is
what ``decide`` takes, and it grants nothing over HTTP by itself (the
ingress needs a route's token); whoever can read the journal can read it
anyway.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

from flink_agents.api.redaction import redact as redact_secrets
from flink_agents.inspection.reader import JournalReader, _is_dsn, open_reader
from flink_agents.inspection.runs import CALLBACK_STATES, _iso, _key_display
from flink_agents.runtime.features.approvals import APPROVAL_PURPOSE
from flink_agents.stores.callbacks import REJECTED, RESOLVED, UNKNOWN

__all__ = ["decide", "list_approvals"]

log = logging.getLogger(__name__)

_COLUMNS = ("callback_id", "journal_id", "key", "seq", "step", "purpose", "created_ms", "deadline_ms", "state",
            "body", "completed_ms", "details")


def _has_details(reader: JournalReader) -> bool:
    """Whether the callbacks table exists and has its ``details`` column
    (approvals came with it: a file without it holds none)."""
    if not reader.has_table("callbacks"):
        return False
    if reader.kind == "sqlite":
        names = reader.rows("SELECT name FROM pragma_table_info('callbacks')")
    else:
        names = reader.rows("SELECT column_name FROM information_schema.columns"
                            " WHERE table_schema = current_schema() AND table_name = 'callbacks'")
    return "details" in {str(name).lower() for (name,) in names}


def _text(body: Any) -> Optional[str]:
    if body is None:
        return None
    return bytes(body).decode("utf-8", "replace")


def _view(row: Dict[str, Any]) -> Dict[str, Any]:
    try:
        details = json.loads(row["details"] or "{}")
    except ValueError:  # untrusted data: shown as absent
        details = {}
    if not isinstance(details, dict):
        details = {}
    ms = lambda value: None if value is None else _iso(value / 1000)  # noqa: E731
    view: Dict[str, Any] = {
        "callback_id": row["callback_id"], "journal_id": row["journal_id"], "key": _key_display(row["key"]),
        "seq": int(row["seq"]), "step": row["step"], "tool": details.get("tool") or details.get("node"),
        "tool_call_id": details.get("tool_call_id"), "model": details.get("model"),
        # A framework's interrupt (LangGraph) shows its node and the value it asked with.
        "arguments": redact_secrets(details.get("arguments", details.get("value"))), "state": row["state"],
        "created": ms(row["created_ms"]), "deadline": ms(row["deadline_ms"]), "completed": ms(row["completed_ms"]),
    }
    body = _text(row["body"])
    if row["state"] == REJECTED:
        view["reason"] = body
    elif row["state"] == RESOLVED and body is not None:
        try:
            view["result"] = json.loads(body)
        except ValueError:
            view["result"] = body
    return view


def list_approvals(journal: str, state: str | None = "pending", journal_id: str | None = None) -> List[Dict]:
    """The tool calls waiting for (or decided by) a reviewer, oldest first.

    Args:
        journal: A SQLite journal file or a PostgreSQL DSN (read only).
        state: Only approvals in this callback state (``pending``,
            ``resolved`` = approved, ``rejected``, ``timed_out``, ...); None: all.
        journal_id: Only this job's (journal id's) approvals, those of its
            sub-agents included.

    Returns:
        One dict per approval: ``callback_id`` (what ``decide`` takes),
        ``journal_id``, ``key`` (as the job saw it: ``B01``, ``42``),
        ``seq``, ``step``, ``tool``, ``tool_call_id``, ``model``,
        ``arguments`` (secrets redacted), ``state``, ``created``,
        ``deadline`` and ``completed`` (ISO-8601 UTC, or None), and once
        decided ``reason`` (rejected: the reviewer's reason) or ``result``
        (approved: ``{"approved_by", "reason"}``).

    Raises:
        ValueError: ``state`` is not a callback state; no journal at the
            path, or it cannot be read.
    """
    if state is not None and state not in CALLBACK_STATES:
        raise ValueError(f"state must be one of {', '.join(CALLBACK_STATES)}, got {state!r}")
    with open_reader(journal) as reader:
        if not _has_details(reader):
            return []
        where, params = "purpose = {p}", [APPROVAL_PURPOSE]
        if state is not None:
            where, params = where + " AND state = {p}", params + [state]
        if journal_id is not None:
            where += " AND (journal_id = {p} OR substr(journal_id, 1, {p}) = {p})"
            params += [journal_id, len(journal_id) + 1, journal_id + "/"]
        rows = reader.rows(f"SELECT {', '.join(_COLUMNS)} FROM callbacks WHERE {where}", params)
    found = sorted((dict(zip(_COLUMNS, row)) for row in rows), key=lambda r: (r["created_ms"], r["callback_id"]))
    return [_view(row) for row in found]


def _open_store(journal: str) -> Any:
    from flink_agents.stores.factory import open_journal_store

    if _is_dsn(journal):
        return open_journal_store({"journal.store": "postgres", "journal.postgres.dsn": journal})
    path = os.path.abspath(journal)
    if not os.path.isfile(path):
        raise ValueError(f"no journal at {path}: point --journal at the job's journal.sqlite.path")
    return open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": path})


def decide(journal: str, callback_id: str, approve: bool, reason: str = "", decided_by: str = "cli") -> str:
    """Approve or reject the tool call waiting on ``callback_id``.

    Args:
        journal: A SQLite journal file or a PostgreSQL DSN (opened writable).
        callback_id: The approval's ``callback_id`` (``list_approvals``).
        approve: True: the tool runs; False: it does not, and the model gets
            ``reason``.
        reason: Why (the reject body, which the model sees); kept with an
            approval too.
        decided_by: Who decided (``"cli"``, a user name); kept with an
            approval (``{"approved_by", "reason"}`` is its body) and logged.

    Returns:
        The store's outcome: ``"accepted"`` (this decision counts),
        ``"finished"`` (it was decided, timed out or closed already; nothing
        changed) or ``"unknown"`` (no such callback: never created, or pruned).

    Raises:
        ValueError: The callback is not an approval (its purpose is named);
            no journal at the path.
    """
    store = _open_store(journal)
    try:
        record = store.get_callback(callback_id)
        if record is None:
            return UNKNOWN
        if record.purpose != APPROVAL_PURPOSE:
            raise ValueError(
                f"callback {callback_id} is not an approval (its purpose is {redact_secrets(record.purpose)!r}): "
                "decide it through its own resolve or reject URL"
            )
        if approve:
            body = json.dumps({"approved_by": decided_by, "reason": reason}, sort_keys=True)
        else:
            body = reason
        result = store.complete(callback_id, RESOLVED if approve else REJECTED, body.encode("utf-8"),
                                int(time.time() * 1000))
        log.info("approval %s... %s by %s: %s", callback_id[:6], "approved" if approve else "rejected", decided_by,
                 result.outcome)
        return result.outcome
    finally:
        store.close()

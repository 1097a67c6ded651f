"""One journal entry as the records ``runs show`` lists: the progress
records (``runtime.features.progress.records_of``) with what an operator
asks of a run besides:

- ``model_request``: a step sent a model request (a ``ChatRequestEvent`` in
  its completion): ``model``, ``messages`` (how many), ``last_user_message``
  (cut at ``TEXT_CHARS``), ``tool_calls_asked`` (the tool calls the
  request's history holds, by name, in order) and ``tool_results`` (how
  many tool messages it carries back);
- ``tool_request``: a step asked tools to run (a ``ToolRequestEvent``):
  ``tools`` by name;
- ``error_type`` and ``error_message`` on ``attempt_failed`` and
  ``run_finished``, where the journal kept the error
  (``RunJournal.prepare_retry``, a skipped run's end; journals written
  before that have none).

Payloads are untrusted: read as plain JSON, never into the classes they
name; anything of another shape yields no extra record.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from flink_agents.runtime.durability.codec import plain_json
from flink_agents.runtime.execution.usage import PriceTable
from flink_agents.runtime.features.progress import records_of
from flink_agents.stores.journal import COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, JournalEntry

__all__ = ["TEXT_CHARS", "entry_records", "error_of"]

TEXT_CHARS = 500
_CHAT_REQUEST = "flink_agents.api.events.chat_event:ChatRequestEvent"
_TOOL_REQUEST = "flink_agents.api.events.tool_event:ToolRequestEvent"


def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > TEXT_CHARS:
        return text[:TEXT_CHARS] + "..."
    return text


def error_of(payload: str) -> Optional[Dict[str, str]]:
    """``{"error_type", "error_message"}`` of a failed-attempts marker or a
    run end that kept its error; None otherwise."""
    try:
        error = json.loads(payload).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict) or not isinstance(error.get("type"), str):
        return None
    return {"error_type": error["type"].rpartition(":")[2], "error_message": str(error.get("message", ""))}


def _model_request(fields: Dict[str, Any], step: str) -> Dict[str, Any]:
    messages = [m for m in fields.get("messages") or [] if isinstance(m, dict)]
    users = [m for m in messages if m.get("role") == "user"]
    asked = [(call.get("function") or {}).get("name") for m in messages for call in m.get("tool_calls") or []
             if isinstance(call, dict)]
    return {"kind": "model_request", "step": step, "model": fields.get("model"), "messages": len(messages),
            "last_user_message": _cut(users[-1].get("content")) if users else None,
            "tool_calls_asked": asked, "tool_results": sum(1 for m in messages if m.get("role") == "tool")}


def _requests(entry: JournalEntry) -> List[Dict[str, Any]]:
    """The model and tool requests a step's completion sent."""
    try:
        events = json.loads(entry.payload).get("events") or []
    except (ValueError, AttributeError):
        return []
    found: List[Dict[str, Any]] = []
    for event in events:
        if not isinstance(event, dict) or event.get("type") not in (_CHAT_REQUEST, _TOOL_REQUEST):
            continue
        fields = plain_json(event.get("fields") or {})
        if not isinstance(fields, dict):
            continue
        if event["type"] == _CHAT_REQUEST:
            found.append(_model_request(fields, entry.step))
        else:
            tools = [(call.get("function") or {}).get("name") for call in fields.get("tool_calls") or []
                     if isinstance(call, dict)]
            found.append({"kind": "tool_request", "step": entry.step, "tools": tools})
    return found


def entry_records(entry: JournalEntry, prices: Optional[PriceTable] = None) -> List[Dict[str, Any]]:
    """The records of one entry (module docstring), in the order a person
    reads them: a step's completion first, then the requests it sent.

    Raises:
        ValueError, KeyError, TypeError, AttributeError: The entry's payload
            is not what its position says (the caller shows it unreadable).
    """
    records = records_of(entry, prices)
    if entry.ordinal == FAILED_ATTEMPTS or (entry.step == RUN_STEP and entry.ordinal == RUN_END):
        error = error_of(entry.payload)
        if error is not None:
            for record in records:
                record.update(error)
    elif entry.ordinal == COMPLETION:
        records += _requests(entry)
    return records

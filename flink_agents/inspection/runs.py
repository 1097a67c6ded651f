"""Runs, one run's steps and callbacks, read from a journal store.

A run is one record's entries under a top-level journal id (a job's id):
``(journal id, key text, seq)``. Trace export marks (``TRACE_STEP``) are
not facts of the run and are skipped. A sub-agent's nested journal
(``"<journal id>/<call id>"``, same key and seq) is not a run of its own:
its model and tool calls count in its parent's totals, and ``show_run``
lists its steps after the parent's, under the nested journal id.

A run's state, from the journal and the callbacks table only:

- ``finished``: its run end says ``ok``;
- ``failed``: its run end says ``skipped`` (the record went to the error
  stream), or it has no run end and a step that journaled failed attempts
  has not completed (retrying, or given up: the journal cannot tell a
  retry in progress from a job that failed and has not restarted yet);
- ``parked``: no run end and a callback of the run (or of a sub-agent's
  run under it) is pending;
- ``running``: otherwise (no run end yet).

Times: ``start`` is the earliest start journaled with a call or step
(``"t"``: ``durability.journal.timed``), else the first commit; ``end`` the
latest end so journaled, else the last commit. Unix seconds.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from flink_agents.api.redaction import redact as redact_secrets
from flink_agents.inspection.reader import JournalReader
from flink_agents.inspection.records import entry_records
from flink_agents.runtime.execution.usage import PriceTable, Usage, model_call_usage
from flink_agents.runtime.features import capability_redaction
from flink_agents.stores.journal import COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, TRACE_STEP, JournalEntry

__all__ = ["CALLBACK_STATES", "STATES", "key_texts", "list_callbacks", "list_runs", "show_run"]

STATES = ("running", "parked", "failed", "finished")
CALLBACK_STATES = ("pending", "resolved", "rejected", "timed_out", "cancelled", "closed")
NESTED = "%/%"  # a sub-agent's journal id (LIKE pattern, passed as a parameter)
_STEP_INDEX = re.compile(r"@(\d+)")

_RUNS = (
    "SELECT journal_id, key, seq, MIN(committed_at), MAX(committed_at),"
    f" MAX(CASE WHEN step = '{RUN_STEP}' AND ordinal = {RUN_END} THEN payload END)"
    f" FROM journal WHERE step <> '{TRACE_STEP}' AND journal_id NOT LIKE {{p}}"
)
# Steps with failed attempts, and completions, of runs without a run end.
_UNFINISHED_MARKS = (
    "SELECT journal_id, key, seq, step, ordinal FROM journal AS j"
    f" WHERE ordinal IN ({COMPLETION}, {FAILED_ATTEMPTS}) AND journal_id NOT LIKE {{p}}"
    " AND NOT EXISTS (SELECT 1 FROM journal AS e WHERE e.journal_id = j.journal_id AND e.key = j.key"
    f" AND e.seq = j.seq AND e.step = '{RUN_STEP}' AND e.ordinal = {RUN_END})"
)
# One run's entries with its sub-agents' (the (key, seq) index serves it).
_RUN_ROWS = (
    "SELECT journal_id, step, ordinal, function_id, payload, committed_at FROM journal"
    " WHERE key = {p} AND seq = {p} AND (journal_id = {p} OR substr(journal_id, 1, {p}) = {p})"
    f" AND step <> '{TRACE_STEP}'"
)
_CALLBACK_COLUMNS = ("callback_id", "journal_id", "key", "seq", "step", "ordinal", "purpose", "created_ms",
                     "deadline_ms", "state", "completed_ms", "late_completions", "resolve_token", "reject_token")


def key_texts(key: str) -> List[str]:
    """The key texts (``runtime.durability.ids.key_text``) ``key`` may mean:
    the text as a string key (``B01`` -> ``"B01"``), and, when it parses as
    JSON, that value (``42``, ``"B01"``, ``{"id": 1}``)."""
    texts = [json.dumps(key)]
    try:
        value = json.loads(key)
    except ValueError:
        return texts
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return texts + ([text] if text not in texts else [])


def _root(journal_id: str) -> str:
    return journal_id.split("/", 1)[0]


def _key_display(key_text: str) -> Any:
    """The key as JSON where its text is JSON (``"B01"`` -> ``B01``)."""
    try:
        return json.loads(key_text)
    except ValueError:
        return key_text


def _iso(seconds: Optional[float]) -> Optional[str]:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _filters(journal_id: Optional[str], keys: Optional[Sequence[str]], prefix: str = "") -> Tuple[str, List[Any]]:
    sql, params = "", []
    if journal_id is not None:
        sql += f" AND {prefix}journal_id = {{p}}"
        params.append(journal_id)
    if keys:
        sql += f" AND {prefix}key IN ({', '.join(['{p}'] * len(keys))})"
        params += list(keys)
    return sql, params


def _pending_runs(reader: JournalReader) -> set:
    if not reader.has_table("callbacks"):
        return set()
    rows = reader.rows("SELECT journal_id, key, seq FROM callbacks WHERE state = 'pending'")
    return {(_root(journal_id), key, seq) for journal_id, key, seq in rows}


def _failing_runs(reader: JournalReader, journal_id: Optional[str], keys: Optional[Sequence[str]]) -> set:
    """Runs without a run end whose failed-attempts step has not completed."""
    where, params = _filters(journal_id, keys, "j.")
    failed: Dict[Tuple[str, str, int], set] = {}
    completed: Dict[Tuple[str, str, int], set] = {}
    for jid, key, seq, step, ordinal in reader.rows(_UNFINISHED_MARKS + where, [NESTED] + params):
        (failed if ordinal == FAILED_ATTEMPTS else completed).setdefault((jid, key, seq), set()).add(step)
    return {run for run, steps in failed.items() if steps - completed.get(run, set())}


def _state(run: Tuple[str, str, int], run_end: Optional[str], pending: set, failing: set) -> Tuple[str, Optional[str]]:
    """``(state, outcome)`` of a run (module docstring)."""
    if run_end is not None:
        try:
            outcome = json.loads(run_end).get("outcome")
        except (ValueError, AttributeError):
            outcome = None
        return ("failed" if outcome == "skipped" else "finished"), outcome
    if run in pending:
        return "parked", None
    if run in failing:
        return "failed", None
    return "running", None


def _times(payload: str) -> Optional[Tuple[float, float]]:
    """``(start, end)`` in Unix seconds of an entry's ``"t"``, if journaled."""
    if '"t":' not in payload:
        return None
    try:
        t = json.loads(payload).get("t")
    except (ValueError, AttributeError):
        return None
    if isinstance(t, list) and len(t) == 2 and all(isinstance(v, int) for v in t):
        return t[0] / 1e9, (t[0] + t[1]) / 1e9
    return None


def _summarise(rows: Iterable[Tuple[Any, ...]], prices: Optional[PriceTable]) -> Dict[str, Any]:
    """Counts, usage, cost and times of a run's entries (with its sub-agents')."""
    model_calls = tool_calls = 0
    usage: Optional[Usage] = None
    cost: Optional[float] = None
    starts: List[float] = []
    ends: List[float] = []
    commits: List[float] = []
    for _, _, ordinal, function_id, payload, committed_at in rows:
        commits.append(float(committed_at))
        times = _times(payload)
        if times is not None:
            starts.append(times[0])
            ends.append(times[1])
        if ordinal < 0:
            continue
        if function_id.startswith("chat:"):
            model_calls += 1
            model, call_usage = model_call_usage(function_id, payload)
            if call_usage is not None:
                usage = call_usage if usage is None else usage + call_usage
                call_cost = prices.cost(model, call_usage) if prices else None
                if call_cost is not None:
                    cost = call_cost if cost is None else cost + call_cost
        elif function_id.startswith(("tool:", "mcp:")):
            tool_calls += 1
    start = min(starts + commits) if commits else None
    end = max(ends + commits) if commits else None
    return {
        "start": _iso(start), "duration_ms": None if start is None else round((end - start) * 1000, 3),
        "model_calls": model_calls, "tool_calls": tool_calls,
        "usage": usage.as_dict() if usage is not None else None,
        "tokens": usage.input_tokens + usage.output_tokens if usage is not None else None,
        "cost_usd": cost, "_start_s": start,
    }


def _run_rows(reader: JournalReader, journal_id: str, key: str, seq: int) -> List[Tuple[Any, ...]]:
    nested = journal_id + "/"
    return reader.rows(_RUN_ROWS, (key, seq, journal_id, len(nested), nested))


def list_runs(
    reader: JournalReader,
    journal_id: Optional[str] = None,
    key: Optional[str] = None,
    state: Optional[str] = None,
    since_s: Optional[float] = None,
    limit: int = 100,
    prices: Optional[PriceTable] = None,
) -> List[Dict[str, Any]]:
    """The latest ``limit`` runs (oldest first among them) matching the filters.

    Args:
        journal_id: Only this job's runs.
        key: Only this key, as the user writes it (``key_texts``).
        state: One of ``STATES``.
        since_s: Only runs whose first commit is at or after this (Unix seconds).
        prices: Gives each run its ``cost_usd``.

    Returns:
        ``{"job", "key", "seq", "state", "outcome", "start", "duration_ms",
        "model_calls", "tool_calls", "tokens", "usage", "cost_usd"}`` per run.
    """
    if state is not None and state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    keys = key_texts(key) if key is not None else None
    where, params = _filters(journal_id, keys)
    groups = reader.rows(_RUNS + where + " GROUP BY journal_id, key, seq", [NESTED] + params)
    pending = _pending_runs(reader)
    failing = _failing_runs(reader, journal_id, keys)
    chosen = []
    for jid, key_text, seq, first_commit, _, run_end in groups:
        if since_s is not None and float(first_commit) < since_s:
            continue
        run_state, outcome = _state((jid, key_text, seq), run_end, pending, failing)
        if state is None or run_state == state:
            chosen.append((float(first_commit), jid, key_text, int(seq), run_state, outcome))
    chosen.sort()
    runs = []
    for _, jid, key_text, seq, run_state, outcome in chosen[-limit:] if limit > 0 else []:
        summary = _summarise(_run_rows(reader, jid, key_text, seq), prices)
        summary.pop("_start_s")
        runs.append({"job": jid, "key": _key_display(key_text), "seq": seq, "state": run_state,
                     "outcome": outcome, **summary})
    return runs


def _step_order(journal_id: str, step: str, ordinal: int) -> Tuple[int, int, int, int]:
    """Nested journals after the parent; in each, by event index, calls
    before the step's completion, the run end last."""
    nested = 1 if "/" in journal_id else 0
    if step == RUN_STEP:
        return (nested, 2**62, 0, 0)
    match = _STEP_INDEX.search(step)
    index = int(match.group(1)) if match else 0
    return (nested, index, 1 if ordinal in (COMPLETION, FAILED_ATTEMPTS) else 0, ordinal)


def _callback_rows(reader: JournalReader, where: str, params: Sequence[Any]) -> List[Dict[str, Any]]:
    if not reader.has_table("callbacks"):
        return []
    rows = reader.rows(f"SELECT {', '.join(_CALLBACK_COLUMNS)} FROM callbacks WHERE 1 = 1{where}", params)
    return [dict(zip(_CALLBACK_COLUMNS, row)) for row in rows]


def _callback_view(row: Dict[str, Any]) -> Dict[str, Any]:
    """A callback as shown: its fingerprint, never its id or tokens."""
    capability_redaction.remember(row["callback_id"], row["resolve_token"], row["reject_token"])
    ms = lambda value: None if value is None else _iso(value / 1000)  # noqa: E731
    return {
        "callback": f"[callback {capability_redaction.fingerprint(row['callback_id'])}]",
        "job": _root(row["journal_id"]), "journal_id": row["journal_id"], "key": _key_display(row["key"]),
        "seq": int(row["seq"]), "step": row["step"], "ordinal": int(row["ordinal"]),
        "purpose": redact_secrets(row["purpose"]), "state": row["state"],
        "created": ms(row["created_ms"]), "deadline": ms(row["deadline_ms"]), "completed": ms(row["completed_ms"]),
        "late_completions": int(row["late_completions"] or 0),
    }


def list_callbacks(
    reader: JournalReader, state: Optional[str] = None, journal_id: Optional[str] = None,
    key: Optional[str] = None, limit: int = 100,
) -> List[Dict[str, Any]]:
    """The latest ``limit`` callbacks (oldest first among them), capabilities
    replaced by their fingerprints (``capability_redaction``)."""
    where, params = "", []
    if state is not None:
        where, params = " AND state = {p}", [state]
    if journal_id is not None:
        where += " AND (journal_id = {p} OR substr(journal_id, 1, {p}) = {p})"
        params += [journal_id, len(journal_id) + 1, journal_id + "/"]
    if key is not None:
        keys = key_texts(key)
        where += f" AND key IN ({', '.join(['{p}'] * len(keys))})"
        params += keys
    rows = sorted(_callback_rows(reader, where, params), key=lambda r: (r["created_ms"], r["callback_id"]))
    return [_callback_view(row) for row in (rows[-limit:] if limit > 0 else [])]


def show_run(
    reader: JournalReader, key: str, seq: int, journal_id: Optional[str] = None,
    prices: Optional[PriceTable] = None,
) -> Optional[Dict[str, Any]]:
    """One run, decoded: its summary (``error``: the last journaled step
    error, ``"Type: message"``), its steps in order (each with its records,
    ``inspection.records``: model requests, model replies and their tool
    calls, tool, durable-call and sub-agent results, errors, failed attempts
    with their errors, sent events, outputs, times) and its callbacks.
    Secrets (``api.redaction``) and callback capabilities are redacted. None when no such run; ``ValueError`` when the key's run
    ``seq`` is in more than one job and ``journal_id`` does not choose.
    """
    candidates = [(jid, key_text) for jid, key_text, *_ in
                  reader.rows(_RUNS + _filters(journal_id, key_texts(key))[0] + " AND seq = {p}"
                              " GROUP BY journal_id, key, seq",
                              [NESTED] + _filters(journal_id, key_texts(key))[1] + [seq])]
    if not candidates:
        return None
    if len(candidates) > 1:
        jobs = ", ".join(sorted(jid for jid, _ in candidates))
        raise ValueError(f"key {key!r} has a run #{seq} in several jobs ({jobs}): choose one with --job")
    jid, key_text = candidates[0]
    callbacks = [_callback_view(row) for row in _callback_rows(
        reader, " AND key = {p} AND seq = {p} AND (journal_id = {p} OR substr(journal_id, 1, {p}) = {p})",
        [key_text, seq, jid, len(jid) + 1, jid + "/"])]  # remembered first: their ids are redacted below
    rows = _run_rows(reader, jid, key_text, seq)
    summary = _summarise(rows, prices)
    summary.pop("_start_s")
    failing = _failing_runs(reader, jid, [key_text])
    run_end = next((row[4] for row in rows if row[1] == RUN_STEP and row[2] == RUN_END and row[0] == jid), None)
    run_state, outcome = _state((jid, key_text, seq), run_end, {(_root(c["journal_id"]), key_text, seq)
                                                                for c in callbacks if c["state"] == "pending"}, failing)
    steps: List[Dict[str, Any]] = []
    by_step: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for row_jid, step, ordinal, function_id, payload, committed_at in sorted(
            rows, key=lambda r: _step_order(r[0], r[1], r[2])):
        entry = JournalEntry(step, int(ordinal), function_id, "", payload)
        try:
            records = entry_records(entry, prices)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # untrusted data
            records = [{"kind": "unreadable", "step": step, "function": function_id, "error": type(exc).__name__}]
        group = by_step.get((row_jid, step))
        if group is None:
            group = {"journal_id": row_jid, "step": step, "action": step.partition("@")[0], "records": []}
            by_step[(row_jid, step)] = group
            steps.append(group)
        for record in records:
            record.pop("step", None)
            record["committed"] = _iso(float(committed_at))
            group["records"].append(capability_redaction.redact(redact_secrets(record)))
    errors = [f"{r['error_type']}: {r['error_message']}" for s in steps for r in s["records"] if "error_type" in r]
    return {"job": jid, "key": _key_display(key_text), "seq": seq, "state": run_state, "outcome": outcome,
            "error": errors[-1] if errors else None, **summary, "steps": steps, "callbacks": callbacks}
